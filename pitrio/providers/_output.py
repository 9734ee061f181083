"""The assistant message a provider builds while it streams, and its usage cost.

- :class:`PartialMessage`: pi-ai 0.85.0's mutable ``output`` object, made into a builder
  of the frozen :class:`~pitrio.AssistantMessage` snapshots each event carries (text and
  thinking deltas appended in O(1) with :func:`join_chunks`);
- :func:`calculate_cost` (``calculateCost`` of ``models.js``, with the price tiers of
  :func:`register_cost_tiers`);
- :func:`setup_error_message` (the lone ``error`` message of pi-ai's ``lazyStream``
  when a request cannot even start) and :func:`now_ms` (``Date.now()``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, final

import attrs

from .._messages import (
    AssistantContent,
    AssistantMessage,
    Cost,
    JSONValue,
    LazyValue,
    TextContent,
    ThinkingContent,
    Usage,
)
from .._model import Model

__all__ = [
    "PartialMessage",
    "calculate_cost",
    "join_chunks",
    "now_ms",
    "register_cost_tiers",
    "setup_error_message",
]


def now_ms() -> int:
    """Milliseconds since the epoch (JavaScript's ``Date.now()``)."""
    return int(time.time() * 1000)


def calculate_cost(model: Model, usage: Usage) -> Usage:
    """``usage`` with its ``cost`` computed from ``model.cost`` (``calculateCost``).

    The operation order is pi-ai's, so the doubles are bit-identical. Rate tiers are
    used when the model's cost has a ``tiers`` attribute (a sequence of objects or
    mappings with ``input_tokens_above`` and the four rates).
    """
    rates: Any = model.cost
    tiers = getattr(model.cost, "tiers", None) or _COST_TIERS.get(
        (model.provider, model.id, model.cost)
    )
    if tiers:
        input_tokens = usage.input + usage.cache_read + usage.cache_write
        matched = -1.0
        for tier in tiers:
            above = _rate(tier, "input_tokens_above")
            if input_tokens > above and above > matched:
                rates, matched = tier, above
    rate_input = _rate(rates, "input")
    long_write = usage.cache_write_1h or 0
    short_write = usage.cache_write - long_write
    cost_input = (rate_input / 1000000) * usage.input
    cost_output = (_rate(rates, "output") / 1000000) * usage.output
    cost_cache_read = (_rate(rates, "cache_read") / 1000000) * usage.cache_read
    cost_cache_write = (
        _rate(rates, "cache_write") * short_write + rate_input * 2 * long_write
    ) / 1000000
    total = cost_input + cost_output + cost_cache_read + cost_cache_write
    return attrs.evolve(
        usage,
        cost=Cost(
            input=cost_input,
            output=cost_output,
            cache_read=cost_cache_read,
            cache_write=cost_cache_write,
            total=total,
        ),
    )


_COST_TIERS: dict[tuple[str, str, Any], tuple[Any, ...]] = {}


def register_cost_tiers(model: Model, tiers: Sequence[Mapping[str, float]]) -> None:
    """Price tiers for ``model`` (pi-ai's ``cost.tiers``: mappings with
    ``inputTokensAbove`` and the four rates), used by :func:`calculate_cost` while the
    model's id, provider and base rates are these."""
    _COST_TIERS[model.provider, model.id, model.cost] = tuple(tiers)


def _rate(rates: Any, name: str) -> float:
    if isinstance(rates, Mapping):
        camel = {"cache_read": "cacheRead", "cache_write": "cacheWrite"}.get(name, name)
        if name == "input_tokens_above":
            camel = "inputTokensAbove"
        value = rates.get(name, rates.get(camel, 0))
    else:
        value = getattr(rates, name, 0)
    return float(value or 0)


@final
class PartialMessage:
    """The assistant message being streamed (pi-ai's mutable ``output``).

    Providers change the fields and blocks freely, then call :meth:`snapshot` for the
    frozen :class:`AssistantMessage` each event carries. Blocks are frozen values too:
    :meth:`add_block` appends one and returns its content index, and changed blocks are
    put back with :meth:`set_block` (or :meth:`append_text` / :meth:`append_thinking`).

    Snapshots share what did not change: the tuple of blocks is copied (O(blocks)), and
    a text or thinking block that grows by deltas keeps its chunks in one list shared by
    all its snapshots, each holding a :class:`LazyValue` that joins its own prefix when
    read. A delta therefore costs the same at the start and at the end of a long answer.
    """

    __slots__ = (
        "_builders",
        "api",
        "content",
        "diagnostics",
        "end_turn",
        "error_message",
        "model",
        "provider",
        "provider_thinking_level",
        "raw_stop_reason",
        "response_id",
        "response_model",
        "stop_reason",
        "timestamp",
        "usage",
    )

    def __init__(self, model: Model, *, timestamp: int | None = None) -> None:
        self.api = model.api
        self.provider = model.provider
        self.model = model.id
        self.content: list[AssistantContent] = []
        self.usage = Usage()
        self.stop_reason = "pending"
        self.error_message: str | None = None
        self.timestamp = now_ms() if timestamp is None else timestamp
        self.response_id: str | None = None
        self.response_model: str | None = None
        self.raw_stop_reason: str | None = None
        self.provider_thinking_level: str | None = None
        self.diagnostics: tuple[JSONValue, ...] | None = None
        self.end_turn: bool | None = None
        # content index -> (the block last built by append_*, its shared chunks)
        self._builders: dict[int, tuple[AssistantContent, list[str]]] = {}

    def snapshot(self) -> AssistantMessage:
        """The message as it is now (a frozen copy)."""
        return AssistantMessage(
            content=tuple(self.content),
            api=self.api,
            provider=self.provider,
            model=self.model,
            usage=self.usage,
            stop_reason=self.stop_reason,  # type: ignore[arg-type]  # a StopReason string
            error_message=self.error_message,
            timestamp=self.timestamp,
            response_id=self.response_id,
            response_model=self.response_model,
            provider_thinking_level=self.provider_thinking_level,
            raw_stop_reason=self.raw_stop_reason,
            diagnostics=self.diagnostics,
            end_turn=self.end_turn,
        )

    def add_block(self, block: AssistantContent) -> int:
        """Append a block; returns its content index."""
        self.content.append(block)
        return len(self.content) - 1

    def set_block(self, index: int, block: AssistantContent) -> None:
        """Replace the block at ``index``."""
        self.content[index] = block

    def append_text(self, index: int, delta: str) -> None:
        """Append to the text block at ``index`` (O(1): the text is joined when read)."""
        block = self.content[index]
        assert isinstance(block, TextContent)
        # The chunks are shared while the block is the one the last append built (a
        # block replaced by set_block starts a new list).
        built = self._builders.get(index)
        if built is not None and built[0] is block:
            chunks = built[1]
        else:
            chunks = [block.text] if block.text else []
        chunks.append(delta)
        text: Any = LazyValue(join_chunks, chunks, len(chunks))
        new = TextContent(text=text, text_signature=block.text_signature)
        self.content[index] = new
        self._builders[index] = (new, chunks)

    def append_thinking(self, index: int, delta: str) -> None:
        """Append to the thinking block at ``index`` (O(1), like :meth:`append_text`)."""
        block = self.content[index]
        assert isinstance(block, ThinkingContent)
        built = self._builders.get(index)
        if built is not None and built[0] is block:
            chunks = built[1]
        else:
            chunks = [block.thinking] if block.thinking else []
        chunks.append(delta)
        thinking: Any = LazyValue(join_chunks, chunks, len(chunks))
        new = ThinkingContent(
            thinking=thinking,
            thinking_signature=block.thinking_signature,
            redacted=block.redacted,
        )
        self.content[index] = new
        self._builders[index] = (new, chunks)


def join_chunks(chunks: list[str], count: int) -> str:
    """The first ``count`` chunks joined (a :class:`LazyValue` function: the list is
    shared by every snapshot of a block and only grows)."""
    return "".join(chunks[:count] if count < len(chunks) else chunks)


def setup_error_message(model: Model, text: str) -> AssistantMessage:
    """The lone ``error`` message of a failure before the provider started (pi-ai's
    ``lazyStream`` setup error): no content, zero usage without ``reasoning``."""
    return AssistantMessage(
        content=(),
        api=model.api,
        provider=model.provider,
        model=model.id,
        usage=Usage(),
        stop_reason="error",
        error_message=text,
        timestamp=now_ms(),
    )
