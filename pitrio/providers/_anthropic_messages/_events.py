"""The Messages API's SSE events turned into pi-ai's stream events.

The response side of pi-ai 0.85.0's ``api/anthropic-messages.js``: :func:`_dispatch`
reads one SSE event by name (``error`` fails the stream, unknown names are skipped,
``message_stop`` ends it), :class:`_EventHandler` builds the partial message from
``message_start`` / ``content_block_*`` / ``message_delta`` (text, thinking, redacted
thinking and tool-use blocks with incrementally parsed input, signatures, usage and its
cost, a fallback model's price, the stop reason), and :func:`_message_as_events` reads
a whole ``message`` object (a server that did not stream) as the events it stands for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, final

import attrs

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
from ..._messages import JSONValue, TextContent, ThinkingContent, ToolCall
from ..._model import Model, ModelCost, ToolSpec
from ..._stream import AssistantMessageEventStream
from .._json import json_stringify, parse_json_with_repair
from .._output import PartialMessage, calculate_cost, now_ms
from .._partial_json import PartialJSONParser, lazy_arguments
from .._request import ProviderFailure
from ._compat import _compat, _from_claude_code_name

_ANTHROPIC_MESSAGE_EVENTS: Final = frozenset(
    {
        "message_start",
        "message_delta",
        "message_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
    }
)


def _stop_reason(reason: str, details: JSONValue) -> tuple[str, str | None]:
    """pi-ai's ``mapStopReason``: ``(stop_reason, error_message)``."""
    if reason in ("end_turn", "pause_turn", "stop_sequence"):
        return "stop", None
    if reason == "max_tokens":
        return "length", None
    if reason == "tool_use":
        return "toolUse", None
    if reason == "refusal":
        explanation = details.get("explanation") if isinstance(details, dict) else None
        return "error", explanation or "The model refused to complete the request"
    if reason == "sensitive":
        return "error", "Provider stopped with: sensitive"
    msg = f"Unhandled stop reason: {reason}"
    raise ValueError(msg)


_UNDEFINED: Final = object()
"""A missing JSON member (JavaScript's ``undefined``)."""


def _js_string(value: object) -> str:
    """JavaScript's ``String(value)`` of a decoded JSON value (what ``+=`` appends)."""
    if isinstance(value, str):
        return value
    if value is _UNDEFINED:
        return "undefined"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join("" if item is None else _js_string(item) for item in value)
    if isinstance(value, dict):
        return "[object Object]"
    return json_stringify(value)


class _StreamError(ProviderFailure):
    """A failure while reading the stream (its text becomes ``errorMessage``)."""


def _parse_event(name: str, sse_data: str, raw: Sequence[str]) -> JSONValue:
    try:
        event = parse_json_with_repair(sse_data)
        if event is None:
            msg = "Cannot read properties of null (reading 'type')"
            raise ValueError(msg)
    except (ValueError, RecursionError) as exc:
        # pi-ai joins the raw lines with the two characters backslash and n.
        joined = "\\n".join(raw)
        text = f"Could not parse Anthropic SSE event {name}: {exc}; data={sse_data}; raw={joined}"
        raise _StreamError(text) from None
    return event


def _dispatch(name: str | None, data: str, raw: Sequence[str], handler: _EventHandler) -> bool:
    """One SSE event by its event name; ``True`` at ``message_stop`` (the body is not
    read further). Data-only events and unknown names are skipped."""
    if name == "error":
        raise _StreamError(data)
    if name not in _ANTHROPIC_MESSAGE_EVENTS:
        return False
    assert name is not None
    event = _parse_event(name, data, raw)
    if not isinstance(event, dict):
        return False
    kind = event.get("type")
    if kind == "message_start":
        handler.saw_message_start = True
    elif kind == "message_stop":
        handler.saw_message_stop = True
    handler.handle(event)
    return kind == "message_stop"


@final
class _EventHandler:
    """Turns parsed Messages API events into pi-ai's stream events."""

    __slots__ = (
        "_context_tools",
        "_is_oauth",
        "_json",
        "_model",
        "_open",
        "_stream",
        "_usage_cost",
        "input_transformations",
        "output",
        "saw_message_start",
        "saw_message_stop",
    )

    def __init__(
        self,
        stream: AssistantMessageEventStream,
        output: PartialMessage,
        model: Model,
        *,
        is_oauth: bool,
        tools: Sequence[ToolSpec],
    ) -> None:
        self._stream = stream
        self.output = output
        self._model = model
        self._usage_cost: Model = model
        self._is_oauth = is_oauth
        self._context_tools = tools
        # Open blocks by wire index (content indexes in order: pi-ai's findIndex takes
        # the first block with that index that has not stopped yet).
        self._open: dict[object, list[int]] = {}
        # Accumulated input JSON of tool-call blocks, by content index.
        self._json: dict[int, PartialJSONParser] = {}  # tool input, parsed incrementally
        self.input_transformations: list[JSONValue] | None = None
        self.saw_message_start = False
        self.saw_message_stop = False

    def _find(self, wire_index: object) -> int | None:
        indexes = self._open.get(wire_index)
        return indexes[0] if indexes else None

    def _recompute_cost(self) -> None:
        usage = self.output.usage
        usage = attrs.evolve(
            usage, total_tokens=usage.input + usage.output + usage.cache_read + usage.cache_write
        )
        self.output.usage = calculate_cost(self._usage_cost, usage)

    def handle(self, event: dict[str, JSONValue]) -> None:
        kind = event.get("type")
        if kind == "message_start":
            self._message_start(event)
        elif kind == "content_block_start":
            self._block_start(event)
        elif kind == "content_block_delta":
            self._block_delta(event)
        elif kind == "content_block_stop":
            self._block_stop(event)
        elif kind == "message_delta":
            self._message_delta(event)

    def _message_start(self, event: dict[str, JSONValue]) -> None:
        message = event.get("message")
        if not isinstance(message, dict):
            message = {}
        output = self.output
        output.response_id = message.get("id")
        transformations = message.get("input_transformations")
        if isinstance(transformations, list):
            self.input_transformations = transformations
        output.model = message.get("model")  # type: ignore[assignment]  # the served model id
        self._usage_cost = self._model
        if output.model != self._model.id:
            for fallback in _compat(self._model).allowed_fallback_models:
                if (
                    fallback.get("provider") == self._model.provider
                    and fallback.get("model") == output.model
                ):
                    cost = fallback.get("cost")
                    if isinstance(cost, dict):
                        self._usage_cost = attrs.evolve(
                            self._model, id=str(output.model), cost=_model_cost(cost)
                        )
                    break
        usage = message.get("usage")
        if not isinstance(usage, dict):
            usage = {}
        creation = usage.get("cache_creation")
        output.usage = attrs.evolve(
            output.usage,
            input=usage.get("input_tokens") or 0,
            output=usage.get("output_tokens") or 0,
            cache_read=usage.get("cache_read_input_tokens") or 0,
            cache_write=usage.get("cache_creation_input_tokens") or 0,
            cache_write_1h=(
                creation.get("ephemeral_1h_input_tokens") if isinstance(creation, dict) else None
            )
            or 0,
        )
        self._recompute_cost()

    def _block_start(self, event: dict[str, JSONValue]) -> None:
        block = event.get("content_block")
        if not isinstance(block, dict):
            return
        kind = block.get("type")
        output = self.output
        wire_index = event.get("index")
        if kind == "fallback":
            if output.content:
                msg = "Anthropic performed an unsupported mid-output model fallback"
                raise _StreamError(msg)
            return
        if kind == "text":
            text = block.get("text")
            index = output.add_block(TextContent(text=text if text is not None else ""))
            self._open.setdefault(wire_index, []).append(index)
            self._stream.push(TextStartEvent(content_index=index, partial=output.snapshot()))
        elif kind == "thinking":
            thinking = block.get("thinking")
            signature = block.get("signature")
            index = output.add_block(
                ThinkingContent(
                    thinking=thinking if thinking is not None else "",
                    thinking_signature=signature if signature is not None else "",
                )
            )
            self._open.setdefault(wire_index, []).append(index)
            self._stream.push(ThinkingStartEvent(content_index=index, partial=output.snapshot()))
        elif kind == "redacted_thinking":
            index = output.add_block(
                ThinkingContent(
                    thinking="[Reasoning redacted]",
                    thinking_signature=block.get("data"),
                    redacted=True,
                )
            )
            self._open.setdefault(wire_index, []).append(index)
            self._stream.push(ThinkingStartEvent(content_index=index, partial=output.snapshot()))
        elif kind == "tool_use":
            name = str(block.get("name"))
            if self._is_oauth:
                name = _from_claude_code_name(name, self._context_tools)
            tool_input = block.get("input")
            if not isinstance(tool_input, dict):
                tool_input = {}
            index = output.add_block(
                ToolCall(
                    id=block.get("id"),  # type: ignore[arg-type]  # a string on the wire
                    name=name,
                    arguments=tool_input,
                )
            )
            self._open.setdefault(wire_index, []).append(index)
            self._json[index] = PartialJSONParser()
            self._stream.push(ToolCallStartEvent(content_index=index, partial=output.snapshot()))

    def _block_delta(self, event: dict[str, JSONValue]) -> None:
        delta = event.get("delta")
        if not isinstance(delta, dict):
            return
        index = self._find(event.get("index"))
        if index is None:
            return
        output = self.output
        block = output.content[index]
        kind = delta.get("type")
        if kind == "text_delta":
            if isinstance(block, TextContent):
                text = delta.get("text", _UNDEFINED)
                if type(text) is not str:
                    text = _js_string(text)
                output.append_text(index, text)
                self._stream.push(
                    TextDeltaEvent(content_index=index, delta=text, partial=output.snapshot())
                )
        elif kind == "thinking_delta":
            if isinstance(block, ThinkingContent):
                thinking = delta.get("thinking", _UNDEFINED)
                if type(thinking) is not str:
                    thinking = _js_string(thinking)
                output.append_thinking(index, thinking)
                self._stream.push(
                    ThinkingDeltaEvent(
                        content_index=index, delta=thinking, partial=output.snapshot()
                    )
                )
        elif kind == "input_json_delta":
            if isinstance(block, ToolCall):
                fragment = _js_string(delta.get("partial_json", _UNDEFINED))
                parser = self._json.get(index)
                if parser is None:
                    parser = self._json[index] = PartialJSONParser()
                parser.feed(fragment)
                if not parser.empty:
                    # Until some input JSON arrives, the arguments stay those given in
                    # content_block_start (pi-ai would reset them to {}).
                    output.content[index] = attrs.evolve(
                        block, arguments=lazy_arguments(parser, objects_only=True)
                    )
                self._stream.push(
                    ToolCallDeltaEvent(
                        content_index=index, delta=fragment, partial=output.snapshot()
                    )
                )
        elif kind == "signature_delta" and isinstance(block, ThinkingContent):
            # The signature accumulates silently (no event), as in pi-ai.
            signature = block.thinking_signature or ""
            output.content[index] = attrs.evolve(
                block, thinking_signature=signature + _js_string(delta.get("signature", _UNDEFINED))
            )

    def _block_stop(self, event: dict[str, JSONValue]) -> None:
        wire_index = event.get("index")
        index = self._find(wire_index)
        if index is None:
            return
        self._open[wire_index].pop(0)
        output = self.output
        block = output.content[index]
        if isinstance(block, TextContent):
            self._stream.push(
                TextEndEvent(content_index=index, content=block.text, partial=output.snapshot())
            )
        elif isinstance(block, ThinkingContent):
            self._stream.push(
                ThinkingEndEvent(
                    content_index=index, content=block.thinking, partial=output.snapshot()
                )
            )
        else:
            parser = self._json.pop(index, None)
            if parser is not None and not parser.empty:
                block = attrs.evolve(block, arguments=_arguments(parser))
                output.content[index] = block
            self._stream.push(
                ToolCallEndEvent(content_index=index, tool_call=block, partial=output.snapshot())
            )

    def _message_delta(self, event: dict[str, JSONValue]) -> None:
        output = self.output
        transformations = event.get("input_transformations")
        if isinstance(transformations, list):
            self.input_transformations = transformations
        delta = event.get("delta")
        if not isinstance(delta, dict):
            delta = {}
        reason = delta.get("stop_reason")
        if reason:
            raw = _js_string(reason)
            output.raw_stop_reason = raw
            stop_reason, error_message = _stop_reason(raw, delta.get("stop_details"))
            output.stop_reason = stop_reason
            if error_message:
                output.error_message = error_message
        usage = event.get("usage")
        if isinstance(usage, dict):
            changes: dict[str, Any] = {}
            for wire, field in (
                ("input_tokens", "input"),
                ("output_tokens", "output"),
                ("cache_read_input_tokens", "cache_read"),
                ("cache_creation_input_tokens", "cache_write"),
            ):
                value = usage.get(wire)
                if value is not None:
                    changes[field] = value
            details = usage.get("output_tokens_details")
            thinking_tokens = details.get("thinking_tokens") if isinstance(details, dict) else None
            if thinking_tokens is not None:
                changes["reasoning"] = thinking_tokens
            if changes:
                output.usage = attrs.evolve(output.usage, **changes)
        self._recompute_cost()


def _arguments(parser: PartialJSONParser) -> dict[str, JSONValue]:
    """The partial-JSON parse of a tool call's input text, as an object: JSON that is
    not an object (pi-ai would keep e.g. ``12`` or a list) gives ``{}``."""
    arguments = parser.value()
    return arguments if isinstance(arguments, dict) else {}


def _model_cost(cost: Mapping[str, JSONValue]) -> ModelCost:
    def rate(*names: str) -> float:
        for name in names:
            value = cost.get(name)
            if isinstance(value, int | float):
                return float(value)
        return 0.0

    return ModelCost(
        input=rate("input"),
        output=rate("output"),
        cache_read=rate("cacheRead", "cache_read"),
        cache_write=rate("cacheWrite", "cache_write"),
    )


def _diagnostic(transformations: Sequence[JSONValue]) -> dict[str, JSONValue]:
    items: list[JSONValue] = []
    for item in transformations:
        entry: dict[str, JSONValue] = {}
        if isinstance(item, dict):
            for key in ("type", "path", "reason"):
                if item.get(key) is not None:
                    entry[key] = item[key]
        items.append(entry)
    return {
        "type": "anthropic_input_transformations",
        "timestamp": now_ms(),
        "details": {"transformations": items},
    }


def _message_as_events(message: dict[str, JSONValue]) -> list[dict[str, JSONValue]]:
    """The stream events a whole Messages API ``message`` object (a server that did not
    stream) stands for."""
    blocks = message.get("content")
    start: dict[str, JSONValue] = {**message, "content": []}
    events: list[dict[str, JSONValue]] = [{"type": "message_start", "message": start}]
    for index, block in enumerate(blocks if isinstance(blocks, list) else []):
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        delta: dict[str, JSONValue] | None = None
        opening: dict[str, JSONValue] = dict(block)
        if kind == "text":
            opening["text"] = ""
            delta = {"type": "text_delta", "text": block.get("text") or ""}
        elif kind == "thinking":
            opening["thinking"] = ""
            delta = {"type": "thinking_delta", "thinking": block.get("thinking") or ""}
        elif kind == "tool_use":
            opening["input"] = {}
            delta = {"type": "input_json_delta", "partial_json": json_stringify(block.get("input"))}
        events.append({"type": "content_block_start", "index": index, "content_block": opening})
        if delta is not None:
            events.append({"type": "content_block_delta", "index": index, "delta": delta})
        events.append({"type": "content_block_stop", "index": index})
    events.append(
        {
            "type": "message_delta",
            "delta": {
                "stop_reason": message.get("stop_reason"),
                "stop_details": message.get("stop_details"),
            },
            "usage": message.get("usage"),
        }
    )
    events.append({"type": "message_stop"})
    return events
