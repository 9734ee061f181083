"""pi-messages events: pi-ai's own assistant-message events, serialized by a backend.

The converter of pi-ai 0.85.0's ``api/pi-messages.js`` (``createEventConverter``): the
backend streams the events pi-ai's providers push (``text_start``, ``text_delta``,
``text_end`` with the block's final ``content`` and ``contentSignature``, the same for
thinking, ``toolcall_start`` with the call's ``id`` and ``toolName``, JSON argument
deltas, ``toolcall_end`` with the whole ``toolCall``), without their partial message,
and pi-ai rebuilds that message; ``done`` and ``error`` carry the stop reason, usage,
response id, error text and the thinking level the backend used.
"""

from __future__ import annotations

from typing import Any, Final, final

from ..._events import (
    TextDeltaEvent,
    TextEndEvent,
    TextStartEvent,
    ThinkingDeltaEvent,
    ThinkingEndEvent,
    ThinkingStartEvent,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
)
from ..._messages import AssistantContent, Cost, TextContent, ThinkingContent, ToolCall, Usage
from ..._stream import AssistantMessageEventStream
from .._json import json_parse
from .._output import PartialMessage, now_ms
from .._partial_json import PartialJSONParser, lazy_arguments
from .._request import ProviderFailure

__all__ = ["BackendError", "EventConverter", "usage_from_json"]

_STOP_REASONS: Final = ("stop", "length", "toolUse")
_STREAMED: Final[dict[str, tuple[type[Any], type[Any], type[Any], type[Any]]]] = {
    "text": (TextContent, TextStartEvent, TextDeltaEvent, TextEndEvent),
    "thinking": (ThinkingContent, ThinkingStartEvent, ThinkingDeltaEvent, ThinkingEndEvent),
}
"""A streamed block's class and its start, delta and end events."""


class BackendError(ProviderFailure):
    """The backend's own ``error`` event: its text, reason and usage are the message's."""


def _number(value: Any) -> Any:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else 0


def usage_from_json(value: Any) -> Usage:
    """A backend's ``usage`` object (pi-ai's wire form) as :class:`Usage`; what is
    missing or not a number counts 0."""
    if not isinstance(value, dict):
        return Usage()
    cost = value.get("cost")
    cost = cost if isinstance(cost, dict) else {}
    extra = {
        name: value[key]
        for name, key in (("cache_write_1h", "cacheWrite1h"), ("reasoning", "reasoning"))
        if isinstance(value.get(key), int)
    }
    return Usage(
        input=_number(value.get("input")),
        output=_number(value.get("output")),
        cache_read=_number(value.get("cacheRead")),
        cache_write=_number(value.get("cacheWrite")),
        total_tokens=_number(value.get("totalTokens")),
        cost=Cost(
            input=_number(cost.get("input")),
            output=_number(cost.get("output")),
            cache_read=_number(cost.get("cacheRead")),
            cache_write=_number(cost.get("cacheWrite")),
            total=_number(cost.get("total")),
        ),
        **extra,
    )


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


@final
class EventConverter:
    """``createEventConverter`` on a :class:`PartialMessage`: one event's data at a
    time, pushing pi-ai's events to the stream."""

    __slots__ = ("_tool_json", "backend_failed", "output", "stream")

    def __init__(self, stream: AssistantMessageEventStream, output: PartialMessage) -> None:
        self.stream = stream
        self.output = output
        self.backend_failed = False
        """The backend's ``error`` event came (the message is its)."""
        self._tool_json: dict[int, PartialJSONParser] = {}

    def handle(self, data: str) -> bool:
        """One SSE data text; ``True`` at ``done`` (``[DONE]`` and blank data are
        skipped).

        Raises:
            ProviderFailure: the data is not JSON, or an event that does not fit the
                message so far.
            BackendError: the backend's ``error`` event.
        """
        data = data.strip()
        if not data or data == "[DONE]":
            return False
        try:
            event = json_parse(data)
        except ValueError as exc:
            msg = f"Could not parse the pi-messages event as JSON ({exc}): {data[:300]}"
            raise ProviderFailure(msg) from None
        if not isinstance(event, dict):
            msg = f"pi-messages: an event must be a JSON object, got {data[:200]!r}"
            raise ProviderFailure(msg)
        kind = event.get("type")
        if kind == "done":
            self._finish(event)
            reason = event.get("reason")
            if reason not in _STOP_REASONS:
                msg = (
                    "pi-messages: a done event's reason must be stop, length or toolUse, "
                    f"got {reason!r}"
                )
                raise ProviderFailure(msg)
            self.output.stop_reason = reason
            return True
        if kind == "error":
            self._finish(event)
            reason = event.get("reason")
            text = _str(event.get("errorMessage")) or ""
            self.output.error_message = text
            self.backend_failed = True
            raise BackendError(text, reason="aborted" if reason == "aborted" else "error")
        if kind != "start":
            self._block_event(kind, event)
        return False

    def _finish(self, event: dict[str, Any]) -> None:
        output = self.output
        output.usage = usage_from_json(event.get("usage"))
        output.response_id = _str(event.get("responseId"))
        level = event.get("providerThinkingLevel")
        if level is not None:
            output.provider_thinking_level = _str(level)
        rewrite = event.get("rewrite")
        if rewrite:
            details = dict(rewrite) if isinstance(rewrite, dict) else {}
            diagnostic = {"type": "pi_messages_rewrite", "timestamp": now_ms(), "details": details}
            output.diagnostics = (*(output.diagnostics or ()), diagnostic)

    def _index(self, event: dict[str, Any], kind: str, *, new: bool) -> int:
        index = event.get("contentIndex")
        count = len(self.output.content)
        limit = count if new else count - 1
        if isinstance(index, int) and not isinstance(index, bool) and 0 <= index <= limit:
            return index
        msg = (
            f"pi-messages: {kind} event for content index {index!r}, but the message has "
            f"{count} block(s)"
        )
        raise ProviderFailure(msg)

    def _put(self, index: int, block: AssistantContent) -> None:
        if index == len(self.output.content):
            self.output.add_block(block)
        else:
            self.output.set_block(index, block)

    def _block(self, index: int, cls: type[Any], kind: str) -> Any:
        block = self.output.content[index]
        if not isinstance(block, cls):
            msg = f"pi-messages: {kind} event for content index {index}, a {block.type} block"
            raise ProviderFailure(msg)
        return block

    def _streamed(self, family: str, phase: str, kind: str, event: dict[str, Any]) -> None:
        """A text or thinking event: ``<family>_start``, ``_delta`` or ``_end``."""
        cls, start, delta_event, end = _STREAMED[family]
        output = self.output
        if phase == "start":
            index = self._index(event, kind, new=True)
            self._put(
                index, TextContent(text="") if cls is TextContent else ThinkingContent(thinking="")
            )
            self.stream.push(start(content_index=index, partial=output.snapshot()))
            return
        index = self._index(event, kind, new=False)
        block = self._block(index, cls, kind)
        if phase == "delta":
            delta = _str(event.get("delta")) or ""
            if isinstance(block, TextContent):
                output.append_text(index, delta)
            else:
                output.append_thinking(index, delta)
            self.stream.push(
                delta_event(content_index=index, delta=delta, partial=output.snapshot())
            )
            return
        content = _str(event.get("content"))
        signature = _str(event.get("contentSignature"))
        new: AssistantContent
        if isinstance(block, TextContent):
            text = block.text if content is None else content
            new = TextContent(text=text, text_signature=signature)
        else:
            text = block.thinking if content is None else content
            redacted = event.get("redacted")
            new = ThinkingContent(
                thinking=text,
                thinking_signature=signature,
                redacted=redacted if isinstance(redacted, bool) else None,
            )
        output.set_block(index, new)
        self.stream.push(end(content_index=index, content=text, partial=output.snapshot()))

    def _block_event(self, kind: Any, event: dict[str, Any]) -> None:
        family, _, phase = str(kind).rpartition("_")
        if family in _STREAMED and phase in ("start", "delta", "end"):
            self._streamed(family, phase, kind, event)
            return
        output, stream = self.output, self.stream
        match kind:
            case "toolcall_start":
                index = self._index(event, kind, new=True)
                call = ToolCall(
                    id=_str(event.get("id")) or "", name=_str(event.get("toolName")) or ""
                )
                self._put(index, call)
                self._tool_json[index] = PartialJSONParser()
                stream.push(ToolCallStartEvent(content_index=index, partial=output.snapshot()))
            case "toolcall_delta":
                index = self._index(event, kind, new=False)
                block = self._block(index, ToolCall, kind)
                delta = _str(event.get("delta")) or ""
                parser = self._tool_json.setdefault(index, PartialJSONParser())
                parser.feed(delta)
                arguments = lazy_arguments(parser, objects_only=False)
                output.set_block(
                    index,
                    ToolCall(
                        id=block.id,
                        name=block.name,
                        arguments=arguments,
                        thought_signature=block.thought_signature,
                    ),
                )
                stream.push(
                    ToolCallDeltaEvent(content_index=index, delta=delta, partial=output.snapshot())
                )
            case "toolcall_end":
                index = self._index(event, kind, new=False)
                block = self._block(index, ToolCall, kind)
                final = event.get("toolCall")
                final = final if isinstance(final, dict) else {}
                arguments = final.get("arguments", block.arguments)
                call = ToolCall(
                    id=_str(final.get("id")) or block.id,
                    name=_str(final.get("name")) or block.name,
                    arguments=arguments if isinstance(arguments, dict) else block.arguments,
                    thought_signature=_str(final.get("thoughtSignature"))
                    or block.thought_signature,
                    namespace=_str(final.get("namespace")) or block.namespace,
                )
                output.set_block(index, call)
                self._tool_json.pop(index, None)
                stream.push(
                    ToolCallEndEvent(content_index=index, tool_call=call, partial=output.snapshot())
                )
            case _:
                # pi-ai passes an event type it does not know on as it is, and its
                # consumers skip it; pitrio's events are typed, so it is skipped here.
                return
