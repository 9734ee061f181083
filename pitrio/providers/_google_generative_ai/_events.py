"""A ``google-generative-ai`` response: its framing, its chunks, and the events.

``@google/genai`` 1.52.0 does not read the body as standard SSE (``ApiClient.
processStreamResponse``): events end at the first ``\\n\\n``, ``\\r\\r`` or
``\\r\\n\\r\\n``; an event is used only when, trimmed, it starts with ``data:`` (the rest,
trimmed, is the JSON: ``event:`` lines make an event be skipped, several ``data:`` lines
are not joined); text left at the end of the body is ``Incomplete JSON segment at the
end``; and a read that is, by itself, a JSON object with an ``error`` whose ``code`` is
400-599 fails the stream. :class:`GoogleStreamDecoder` does the same.

Each chunk (a ``GenerateContentResponse``) is handled as pi-ai 0.85.0's
``api/google-generative-ai.js`` does (:class:`ChunkHandler`): parts of the first
candidate become text, thinking (``thought: true``) and tool-call blocks, a part's
``thoughtSignature`` is kept on its block, ``finishReason`` maps to the stop reason and
``usageMetadata`` to the usage.
"""

from __future__ import annotations

import codecs
import itertools
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
from ..._messages import TextContent, ThinkingContent, ToolCall, Usage
from ..._model import Model
from ..._stream import AssistantMessageEventStream
from .._json import JS_WHITESPACE, json_parse, json_stringify
from .._output import PartialMessage, calculate_cost, now_ms
from .._request import ProviderFailure
from .._sse import ServerSentEvent

__all__ = ["ChunkHandler", "GoogleStreamDecoder", "map_stop_reason"]

_DELIMITERS: Final = ("\n\n", "\r\r", "\r\n\r\n")
_ERROR_REASONS: Final = frozenset(
    {
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "SAFETY",
        "IMAGE_SAFETY",
        "IMAGE_PROHIBITED_CONTENT",
        "IMAGE_RECITATION",
        "IMAGE_OTHER",
        "RECITATION",
        "FINISH_REASON_UNSPECIFIED",
        "OTHER",
        "LANGUAGE",
        "MALFORMED_FUNCTION_CALL",
        "UNEXPECTED_TOOL_CALL",
        "NO_IMAGE",
    }
)

# pi-ai's module-level toolCallCounter (ids of calls the server sent without one).
_tool_call_counter = itertools.count(1)


def map_stop_reason(reason: str) -> str:
    """pi-ai's ``mapStopReason`` (an unknown reason is an error)."""
    if reason == "STOP":
        return "stop"
    if reason == "MAX_TOKENS":
        return "length"
    if reason in _ERROR_REASONS:
        return "error"
    msg = f"Unhandled stop reason: {reason}"
    raise ProviderFailure(msg)


@final
class GoogleStreamDecoder:
    """The SDK's stream framing (module docstring); events have ``data`` only.

    Linear in the body: the text of an unfinished event is kept in pieces and joined
    only when a delimiter arrives (a delimiter is looked for in each new piece and the
    three characters before it).
    """

    __slots__ = ("_pieces", "_tail", "_text")

    def __init__(self) -> None:
        self._text = codecs.getincrementaldecoder("utf-8-sig")("replace")
        self._pieces: list[str] = []
        self._tail = ""  # the last three characters of the pieces

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """The events this read completed."""
        text = self._text.decode(chunk)
        if not text:
            return []
        _check_error_read(text)
        window = self._tail + text
        self._pieces.append(text)
        if not any(d in window for d in _DELIMITERS):
            self._tail = window[-3:]
            return []
        buffer = "".join(self._pieces)
        events: list[ServerSentEvent] = []
        position = 0
        # The next index of each delimiter (-1: none left), refreshed once passed.
        next_at = {d: buffer.find(d) for d in _DELIMITERS}
        while True:
            for delimiter, at in next_at.items():
                if 0 <= at < position:
                    next_at[delimiter] = buffer.find(delimiter, position)
            found = [(at, len(d)) for d, at in next_at.items() if at != -1]
            if not found:
                break
            index, length = min(found)
            event = buffer[position:index].strip(JS_WHITESPACE)
            position = index + length
            if event.startswith("data:"):
                events.append(ServerSentEvent(None, event[5:].strip(JS_WHITESPACE)))
        rest = buffer[position:]
        self._pieces = [rest] if rest else []
        self._tail = rest[-3:]
        return events

    def flush(self) -> list[ServerSentEvent]:
        """The end of the body.

        Raises:
            ProviderFailure: text is left over (``Incomplete JSON segment at the end``).
        """
        rest = "".join(self._pieces) + self._text.decode(b"", final=True)
        self._pieces, self._tail = [], ""
        if rest.strip(JS_WHITESPACE):
            msg = "Incomplete JSON segment at the end"
            raise ProviderFailure(msg)
        return []


def _check_error_read(text: str) -> None:
    """A read that is one JSON error object fails the stream (the SDK's ``ApiError``)."""
    try:
        value = json_parse(text)
    except ValueError:
        return
    if not isinstance(value, dict) or "error" not in value:
        return
    error = value["error"]
    code = error.get("code") if isinstance(error, dict) else None
    if isinstance(code, int | float) and not isinstance(code, bool) and 400 <= code < 600:
        status = error.get("status") if isinstance(error, dict) else None
        shown = "undefined" if status is None else _js_string(status)
        msg = f"got status: {shown}. {json_stringify(value)}"
        raise ProviderFailure(msg)


def _js_string(value: object) -> str:
    if isinstance(value, str):
        return value
    return json_stringify(value)


def _count(value: object) -> int:
    """``value || 0`` for a token count."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


@final
class ChunkHandler:
    """pi-ai's loop over the stream's chunks (``for await (const chunk of googleStream)``)."""

    def __init__(
        self, stream: AssistantMessageEventStream, output: PartialMessage, model: Model
    ) -> None:
        self.stream = stream
        self.output = output
        self.model = model
        self._current: int | None = None  # index of the open text or thinking block

    def handle(self, data: str) -> None:
        """One chunk's JSON text.

        Raises:
            ProviderFailure: the text is not JSON, or the finish reason is unknown.
        """
        try:
            chunk = json_parse(data)
        except ValueError as exc:
            msg = f"Could not parse the Google stream chunk as JSON ({exc}): {data[:300]}"
            raise ProviderFailure(msg) from None
        if not isinstance(chunk, dict):
            return
        output = self.output
        response_id = chunk.get("responseId")
        if not output.response_id and isinstance(response_id, str):
            output.response_id = response_id
        candidates = chunk.get("candidates")
        candidate = candidates[0] if isinstance(candidates, list) and candidates else None
        if not isinstance(candidate, dict):
            candidate = {}
        content = candidate.get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        if isinstance(parts, list):
            for part in parts:
                if isinstance(part, dict):
                    self._part(part)
        finish = candidate.get("finishReason")
        if isinstance(finish, str) and finish:
            output.raw_stop_reason = finish
            output.stop_reason = map_stop_reason(finish)
            if output.stop_reason == "stop" and any(
                isinstance(b, ToolCall) for b in output.content
            ):
                output.stop_reason = "toolUse"
        usage = chunk.get("usageMetadata")
        if isinstance(usage, dict):
            cached = _count(usage.get("cachedContentTokenCount"))
            thoughts = _count(usage.get("thoughtsTokenCount"))
            output.usage = calculate_cost(
                self.model,
                Usage(
                    input=_count(usage.get("promptTokenCount")) - cached,
                    output=_count(usage.get("candidatesTokenCount")) + thoughts,
                    cache_read=cached,
                    cache_write=0,
                    reasoning=thoughts,
                    total_tokens=_count(usage.get("totalTokenCount")),
                ),
            )

    def _part(self, part: dict[str, Any]) -> None:
        if "text" in part:
            text = part["text"]
            text = text if isinstance(text, str) else _js_string(text)
            self._text_part(text, part.get("thought") is True, part.get("thoughtSignature"))
        call = part.get("functionCall")
        if isinstance(call, dict):
            self._function_call(call, part.get("thoughtSignature"))

    def _text_part(self, text: str, thinking: bool, signature: object) -> None:
        output, stream = self.output, self.stream
        index = self._current
        block = output.content[index] if index is not None else None
        if block is None or isinstance(block, ThinkingContent) != thinking:
            self.end_block()
            if thinking:
                index = output.add_block(ThinkingContent(thinking=""))
                stream.push(ThinkingStartEvent(content_index=index, partial=output.snapshot()))
            else:
                index = output.add_block(TextContent(text=""))
                stream.push(TextStartEvent(content_index=index, partial=output.snapshot()))
            self._current = index
        assert index is not None
        new_signature = signature if isinstance(signature, str) and signature else None
        if thinking:
            output.append_thinking(index, text)
            if new_signature is not None:
                current = output.content[index]
                assert isinstance(current, ThinkingContent)
                output.set_block(
                    index,
                    ThinkingContent(thinking=current.thinking, thinking_signature=new_signature),
                )
            stream.push(
                ThinkingDeltaEvent(content_index=index, delta=text, partial=output.snapshot())
            )
        else:
            output.append_text(index, text)
            if new_signature is not None:
                current = output.content[index]
                assert isinstance(current, TextContent)
                output.set_block(
                    index, TextContent(text=current.text, text_signature=new_signature)
                )
            stream.push(TextDeltaEvent(content_index=index, delta=text, partial=output.snapshot()))

    def end_block(self) -> None:
        """Push the ``*_end`` of the open text or thinking block, if any."""
        index = self._current
        if index is None:
            return
        self._current = None
        block = self.output.content[index]
        if isinstance(block, TextContent):
            self.stream.push(
                TextEndEvent(
                    content_index=index, content=block.text, partial=self.output.snapshot()
                )
            )
        elif isinstance(block, ThinkingContent):
            self.stream.push(
                ThinkingEndEvent(
                    content_index=index, content=block.thinking, partial=self.output.snapshot()
                )
            )

    def _function_call(self, call: dict[str, Any], signature: object) -> None:
        output, stream = self.output, self.stream
        self.end_block()
        provided = call.get("id")
        name = call.get("name")
        duplicate = any(isinstance(b, ToolCall) and b.id == provided for b in output.content)
        if not isinstance(provided, str) or not provided or duplicate:
            shown = name if isinstance(name, str) else "undefined"
            provided = f"{shown}_{now_ms()}_{next(_tool_call_counter)}"
        args = call.get("args")
        arguments = args if isinstance(args, dict) else {}
        tool_call = ToolCall(
            id=provided,
            name=name if isinstance(name, str) else "",
            arguments=arguments,
            thought_signature=signature if isinstance(signature, str) and signature else None,
        )
        index = output.add_block(tool_call)
        stream.push(ToolCallStartEvent(content_index=index, partial=output.snapshot()))
        stream.push(
            ToolCallDeltaEvent(
                content_index=index, delta=json_stringify(arguments), partial=output.snapshot()
            )
        )
        stream.push(
            ToolCallEndEvent(content_index=index, tool_call=tool_call, partial=output.snapshot())
        )
