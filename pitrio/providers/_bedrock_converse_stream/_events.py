"""A ``ConverseStream`` response: AWS event-stream framing, its messages, the events.

The body is binary ``application/vnd.amazon.eventstream``: each message is a prelude
(total and header lengths, CRC32), typed headers, a payload and a CRC32 of the whole.
:class:`EventStreamDecoder` frames it with botocore's parser
(``botocore.eventstream.EventStreamBuffer``) and hands each message on as a
:class:`~pitrio.providers._sse.ServerSentEvent` whose ``event`` is
``<:message-type>:<:event-type or :exception-type or :error-code>`` and whose ``data``
is the JSON payload (an ``error`` message's ``:error-message`` for those).

:class:`ConverseHandler` does what pi-ai 0.85.0's ``bedrock-converse-stream.js`` does
with the SDK's deserialized union members: ``messageStart`` (the role must be
``assistant``), ``contentBlockStart`` (tool use), ``contentBlockDelta`` (text,
``toolUse`` input fragments, ``reasoningContent`` text, signature and redacted bytes),
``contentBlockStop``, ``messageStop`` (the stop reason) and ``metadata`` (usage). An
exception message (``throttlingException``, ...) or an error message ends the stream
with :class:`BedrockError`.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any, Final, NoReturn, final

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
from ..._messages import JSONValue, TextContent, ThinkingContent, ToolCall, Usage
from ..._model import Model
from ..._stream import AssistantMessageEventStream
from .._json import js_truthy, json_parse
from .._output import PartialMessage, calculate_cost
from .._partial_json import PartialJSONParser, lazy_arguments
from .._request import ProviderFailure
from .._sse import DEFAULT_MAX_EVENT_SIZE, ServerSentEvent

__all__ = [
    "REDACTED_THINKING_PLACEHOLDER",
    "BedrockError",
    "ConverseHandler",
    "EventStreamDecoder",
    "map_stop_reason",
]

REDACTED_THINKING_PLACEHOLDER: Final = "[Reasoning redacted]"
"""The thinking text of an encrypted reasoning block (as pi-ai's Anthropic path)."""

_EXCEPTIONS: Final = {
    "internalServerException": "InternalServerException",
    "modelStreamErrorException": "ModelStreamErrorException",
    "validationException": "ValidationException",
    "throttlingException": "ThrottlingException",
    "serviceUnavailableException": "ServiceUnavailableException",
}
"""The stream's modeled exception members and the SDK's class names for them."""

_CHECKSUM: Final = re.compile(r"expected 0x([0-9a-f]+), calculated 0x([0-9a-f]+)")


class BedrockError(Exception):
    """A Bedrock service error: an HTTP error status or an exception message.

    Attributes:
        name: the SDK's error name (``ThrottlingException``; the ``:error-code`` of an
            error message).
        service: a modeled service exception (its text gets pi-ai's prefix).
        status: the HTTP status, when the error is a response's.
        request_id: the response's ``x-amzn-requestid``, when it is a response's.
    """

    def __init__(
        self,
        name: str,
        message: str,
        *,
        service: bool = True,
        status: int | None = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.name = name
        self.message = message
        self.service = service
        self.status = status
        self.request_id = request_id


@final
class EventStreamDecoder:
    """AWS event-stream bytes in, one :class:`ServerSentEvent` per message out.

    A message longer than ``max_event_size`` bytes (``StreamOptions.max_event_size``)
    fails once that much of it is buffered."""

    def __init__(self, *, max_event_size: int = DEFAULT_MAX_EVENT_SIZE) -> None:
        from botocore.eventstream import EventStreamBuffer

        self._buffer: Any = EventStreamBuffer()
        self._pending = 0  # bytes fed that no complete message has used yet
        self._max_event_size = max_event_size

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        from botocore.eventstream import ChecksumMismatch, ParserError

        self._buffer.add_data(chunk)
        self._pending += len(chunk)
        events: list[ServerSentEvent] = []
        try:
            for message in self._buffer:
                self._pending -= message.prelude.total_length
                if message.prelude.total_length > self._max_event_size:
                    self._too_large()
                events.append(_message_event(message.headers, message.payload))
        except ChecksumMismatch as exc:
            # The JavaScript SDK's text (the computed checksum first, in decimal).
            found = _CHECKSUM.search(str(exc))
            if found is None:  # pragma: no cover - botocore's own text changed
                raise ProviderFailure(str(exc)) from None
            expected, computed = (int(value, 16) for value in found.groups())
            msg = (
                f"The message checksum ({computed}) did not match the expected value of {expected}"
            )
            raise ProviderFailure(msg) from None
        except ParserError as exc:
            raise ProviderFailure(str(exc)) from None
        if self._pending > self._max_event_size:
            self._too_large()
        return events

    def _too_large(self) -> NoReturn:
        msg = (
            "AWS event stream error: a message of the response body is longer than "
            f"max_event_size={self._max_event_size:,} bytes (raise max_event_size if such "
            "messages are expected)"
        )
        raise ProviderFailure(msg)

    def flush(self) -> list[ServerSentEvent]:
        if self._pending:
            msg = "Truncated event message received."
            raise ProviderFailure(msg)
        return []


def _message_event(headers: dict[str, Any], payload: bytes) -> ServerSentEvent:
    kind = str(headers.get(":message-type", "event"))
    if kind == "error":
        code = str(headers.get(":error-code", "UnknownError"))
        return ServerSentEvent(f"error:{code}", str(headers.get(":error-message", code)))
    name_header = ":exception-type" if kind == "exception" else ":event-type"
    name = str(headers.get(name_header, ""))
    return ServerSentEvent(f"{kind}:{name}", payload.decode("utf-8", "replace"))


def map_stop_reason(reason: str | None) -> tuple[str, str | None]:
    """pi-ai's ``mapStopReason``: ``(stop reason, error message or None)``."""
    if reason in ("end_turn", "stop_sequence"):
        return "stop", None
    if reason in ("max_tokens", "model_context_window_exceeded"):
        return "length", None
    if reason == "tool_use":
        return "toolUse", None
    return "error", (f"Provider stopped with: {reason}" if reason else None)


def _number(value: JSONValue) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


@final
class ConverseHandler:
    """The response's messages to pi-ai's events, on ``output``."""

    def __init__(
        self, stream: AssistantMessageEventStream, output: PartialMessage, model: Model
    ) -> None:
        self._stream = stream
        self.output = output
        self._model = model
        self._open: dict[int, int] = {}  # contentBlockIndex -> content index, until stopped
        self._json: dict[int, PartialJSONParser] = {}  # content index -> tool input
        self._redacted: dict[int, list[bytes]] = {}  # content index -> encrypted chunks

    def handle(self, sse: ServerSentEvent) -> None:
        """Handle one event-stream message (raises :class:`BedrockError` for an
        exception or error message)."""
        kind, _, name = (sse.event or "").partition(":")
        if kind == "error":
            raise BedrockError(name, sse.data, service=False)
        if kind == "exception":
            body = _parse_object(sse.data)
            message = body.get("message")
            class_name = _EXCEPTIONS.get(name, name[:1].upper() + name[1:])
            raise BedrockError(class_name, message if isinstance(message, str) else class_name)
        event = _parse_object(sse.data)
        if name == "messageStart":
            if event.get("role") != "assistant":
                msg = "Unexpected assistant message start but got user message start instead"
                raise ProviderFailure(msg)
        elif name == "contentBlockStart":
            self._block_start(event)
        elif name == "contentBlockDelta":
            self._block_delta(event)
        elif name == "contentBlockStop":
            self._block_stop(event)
        elif name == "messageStop":
            raw = event.get("stopReason")
            reason = raw if isinstance(raw, str) else None
            self.output.raw_stop_reason = reason
            stop_reason, error_message = map_stop_reason(reason)
            self.output.stop_reason = stop_reason
            if error_message:
                self.output.error_message = error_message
        elif name == "metadata":
            self._metadata(event)

    def _block_start(self, event: dict[str, JSONValue]) -> None:
        start = event.get("start")
        tool_use = start.get("toolUse") if isinstance(start, dict) else None
        if not isinstance(tool_use, dict):
            return
        output = self.output
        call_id, name = tool_use.get("toolUseId"), tool_use.get("name")
        index = output.add_block(
            ToolCall(
                id=call_id if isinstance(call_id, str) else "",
                name=name if isinstance(name, str) else "",
                arguments={},
            )
        )
        self._json[index] = PartialJSONParser()
        block_index = event.get("contentBlockIndex")
        if isinstance(block_index, int):
            self._open.setdefault(block_index, index)
        self._stream.push(ToolCallStartEvent(content_index=index, partial=output.snapshot()))

    def _new_block(self, block_index: JSONValue, block: TextContent | ThinkingContent) -> int:
        index = self.output.add_block(block)
        if isinstance(block_index, int):
            self._open[block_index] = index
        return index

    def _block_delta(self, event: dict[str, JSONValue]) -> None:
        delta = event.get("delta")
        if not isinstance(delta, dict):
            return
        block_index = event.get("contentBlockIndex")
        index = self._open.get(block_index) if isinstance(block_index, int) else None
        output = self.output
        block = output.content[index] if index is not None else None
        if "text" in delta:
            text = delta["text"]
            text = text if isinstance(text, str) else ""
            if index is None:
                index = self._new_block(block_index, TextContent(text=""))
                block = output.content[index]
                self._stream.push(TextStartEvent(content_index=index, partial=output.snapshot()))
            if isinstance(block, TextContent):
                output.append_text(index, text)
                self._stream.push(
                    TextDeltaEvent(content_index=index, delta=text, partial=output.snapshot())
                )
        elif isinstance(delta.get("toolUse"), dict) and isinstance(block, ToolCall):
            assert index is not None
            tool_use: Any = delta["toolUse"]
            fragment = tool_use.get("input")
            fragment = fragment if isinstance(fragment, str) else ""
            parser = self._json.setdefault(index, PartialJSONParser())
            parser.feed(fragment)
            output.set_block(
                index, attrs.evolve(block, arguments=lazy_arguments(parser, objects_only=False))
            )
            self._stream.push(
                ToolCallDeltaEvent(content_index=index, delta=fragment, partial=output.snapshot())
            )
        elif isinstance(delta.get("reasoningContent"), dict):
            self._reasoning_delta(block_index, index, delta["reasoningContent"])

    def _reasoning_delta(self, block_index: JSONValue, index: int | None, reasoning: Any) -> None:
        output = self.output
        if index is None:
            index = self._new_block(
                block_index, ThinkingContent(thinking="", thinking_signature="")
            )
            self._stream.push(ThinkingStartEvent(content_index=index, partial=output.snapshot()))
        block = output.content[index]
        if not isinstance(block, ThinkingContent):
            return
        text = reasoning.get("text")
        if isinstance(text, str) and text:
            output.append_thinking(index, text)
            self._stream.push(
                ThinkingDeltaEvent(content_index=index, delta=text, partial=output.snapshot())
            )
        block = output.content[index]
        assert isinstance(block, ThinkingContent)
        signature = reasoning.get("signature")
        if isinstance(signature, str) and signature and not block.redacted:
            output.set_block(
                index,
                attrs.evolve(
                    block, thinking_signature=(block.thinking_signature or "") + signature
                ),
            )
        redacted = _blob(reasoning.get("redactedContent"))
        if redacted:
            block = output.content[index]
            assert isinstance(block, ThinkingContent)
            if not block.redacted:
                # Encrypted reasoning: kept verbatim (base64) in thinking_signature at the
                # block's end, shown as a placeholder.
                output.set_block(index, attrs.evolve(block, redacted=True, thinking_signature=""))
                output.append_thinking(index, REDACTED_THINKING_PLACEHOLDER)
                self._stream.push(
                    ThinkingDeltaEvent(
                        content_index=index,
                        delta=REDACTED_THINKING_PLACEHOLDER,
                        partial=output.snapshot(),
                    )
                )
            self._redacted.setdefault(index, []).append(redacted)

    def _flush_redacted(self, index: int) -> None:
        chunks = self._redacted.pop(index, None)
        if chunks is None:
            return
        block = self.output.content[index]
        assert isinstance(block, ThinkingContent)
        signature = base64.b64encode(b"".join(chunks)).decode("ascii")
        self.output.set_block(index, attrs.evolve(block, thinking_signature=signature))

    def _block_stop(self, event: dict[str, JSONValue]) -> None:
        block_index = event.get("contentBlockIndex")
        index = self._open.pop(block_index, None) if isinstance(block_index, int) else None
        if index is None:
            return
        output = self.output
        block = output.content[index]
        if isinstance(block, TextContent):
            self._stream.push(
                TextEndEvent(content_index=index, content=block.text, partial=output.snapshot())
            )
        elif isinstance(block, ThinkingContent):
            self._flush_redacted(index)
            block = output.content[index]
            assert isinstance(block, ThinkingContent)
            self._stream.push(
                ThinkingEndEvent(
                    content_index=index, content=block.thinking, partial=output.snapshot()
                )
            )
        else:
            parser = self._json.pop(index, None)
            arguments: Any = parser.value() if parser is not None and not parser.empty else {}
            call = attrs.evolve(block, arguments=arguments)
            output.set_block(index, call)
            self._stream.push(
                ToolCallEndEvent(content_index=index, tool_call=call, partial=output.snapshot())
            )

    def finalize(self) -> None:
        """The end of the stream, however it ended: encrypted reasoning still buffered
        goes into its block (pi-ai's ``finalizeStreamingBlock``)."""
        for index in list(self._redacted):
            self._flush_redacted(index)
        for index, parser in list(self._json.items()):
            block = self.output.content[index]
            if isinstance(block, ToolCall) and not parser.empty:
                self.output.set_block(index, attrs.evolve(block, arguments=parser.value()))
        self._json.clear()

    def _metadata(self, event: dict[str, JSONValue]) -> None:
        usage = event.get("usage")
        if not isinstance(usage, dict):
            return
        input_tokens = _number(usage.get("inputTokens"))
        output_tokens = _number(usage.get("outputTokens"))
        total = usage.get("totalTokens")
        self.output.usage = calculate_cost(
            self._model,
            Usage(
                input=input_tokens,
                output=output_tokens,
                cache_read=_number(usage.get("cacheReadInputTokens")),
                cache_write=_number(usage.get("cacheWriteInputTokens")),
                total_tokens=_number(total) if js_truthy(total) else input_tokens + output_tokens,
            ),
        )


def _parse_object(text: str) -> dict[str, JSONValue]:
    try:
        value = json_parse(text) if text else {}
    except ValueError as exc:
        raise ProviderFailure(str(exc)) from None
    return value if isinstance(value, dict) else {}


def _blob(value: JSONValue) -> bytes:
    """A base64 blob member (the SDK decodes it to bytes); ``b""`` when absent or bad."""
    if not isinstance(value, str) or not value:
        return b""
    try:
        return base64.b64decode(value)
    except (binascii.Error, ValueError):
        return b""
