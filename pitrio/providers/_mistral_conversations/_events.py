"""Mistral's streamed chat-completion chunks as pi-ai events.

pi-ai 0.85.0's ``readMistralEvents``/``parseMistralEvent`` (an SSE event's ``data:``
lines; ``[DONE]`` ends the stream; an object without a ``choices`` array is ``Invalid
Mistral streaming event``) and ``consumeChatStream``: text and thinking blocks from
``delta.content`` (a string or an array of ``text``/``thinking`` chunks), tool calls
from ``delta.tool_calls`` keyed by their ``index``, usage with cached prompt tokens
from whichever field the server names them in, and at the end of the stream the open
block's end event followed by every tool call's ``toolcall_end``.
"""

from __future__ import annotations

import math
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
from .._json import json_parse, json_stringify, parse_streaming_json
from .._output import PartialMessage, calculate_cost
from .._partial_json import PartialJSONParser, lazy_arguments
from .._request import ProviderFailure
from .._transform import sanitize_surrogates
from ._payload import derive_tool_call_id

__all__ = ["ChunkHandler", "stop_reason"]

DONE: Final = "[DONE]"

_CACHED_FIELDS: Final = (
    ("promptTokensDetails", "cachedTokens"),
    ("prompt_tokens_details", "cached_tokens"),
    ("promptTokenDetails", "cachedTokens"),
    ("prompt_token_details", "cached_tokens"),
)


def stop_reason(reason: str) -> tuple[str, str | None]:
    """``mapChatStopReason``: ``(stopReason, errorMessage)``."""
    if reason == "stop":
        return "stop", None
    if reason in ("length", "model_length"):
        return "length", None
    if reason == "tool_calls":
        return "toolUse", None
    return "error", f"Provider stopped with: {reason}"


def _int(value: Any) -> float:
    """JavaScript's ``value || 0`` for a token count."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        return 0
    return value


def _cached_tokens(usage: dict[str, Any], prompt_tokens: float) -> float:
    """``getMistralCachedPromptTokens``: the first cached-token field present."""
    raw: Any = None
    for outer, inner in _CACHED_FIELDS:
        details = usage.get(outer)
        value = details.get(inner) if isinstance(details, dict) else None
        if value is not None:
            raw = value
            break
    if raw is None:
        raw = usage.get("numCachedTokens")
    if raw is None:
        raw = usage.get("num_cached_tokens")
    is_number = isinstance(raw, int | float) and not isinstance(raw, bool)
    cached = raw if is_number and math.isfinite(raw) else 0
    return min(prompt_tokens, max(0, cached))


@final
class _ToolDraft:
    __slots__ = ("args", "index")

    def __init__(self, index: int) -> None:
        self.index = index
        self.args = PartialJSONParser()  # the streamed arguments, parsed incrementally


@final
class ChunkHandler:
    """``consumeChatStream`` on a :class:`PartialMessage`, one SSE data text at a time."""

    __slots__ = ("_current", "_tools", "model", "output", "stream")

    def __init__(
        self, stream: AssistantMessageEventStream, output: PartialMessage, model: Model
    ) -> None:
        self.stream = stream
        self.output = output
        self.model = model
        self._current: str | None = None  # "text" or "thinking": the open block's kind
        self._tools: dict[object, _ToolDraft] = {}  # by the call's index (or id)

    def handle(self, data: str) -> bool:
        """One event's data; ``True`` at ``[DONE]``.

        Raises:
            ProviderFailure: the data is not JSON, or JSON that is not a chunk.
        """
        data = data.strip()
        if not data:
            return False
        if data == DONE:
            return True
        try:
            chunk = json_parse(data)
        except ValueError as exc:
            msg = f"Could not parse the Mistral stream event as JSON ({exc}): {data[:300]}"
            raise ProviderFailure(msg) from None
        if not isinstance(chunk, dict) or not isinstance(chunk.get("choices"), list):
            msg = "Invalid Mistral streaming event"
            raise ProviderFailure(msg)
        self._chunk(chunk)
        return False

    def _chunk(self, chunk: dict[str, Any]) -> None:
        output = self.output
        chunk_id = chunk.get("id")
        if not output.response_id and isinstance(chunk_id, str) and chunk_id:
            output.response_id = chunk_id
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage(usage)
        choices = chunk["choices"]
        choice = choices[0] if choices else None
        if not isinstance(choice, dict):
            return
        finish = choice.get("finish_reason")
        if isinstance(finish, str) and finish:
            output.raw_stop_reason = finish
            output.stop_reason, error = stop_reason(finish)
            if error:
                output.error_message = error
        # pi-ai reads a missing delta as a TypeError; here it is an empty delta.
        delta = choice.get("delta")
        delta = delta if isinstance(delta, dict) else {}
        content = delta.get("content")
        if content is not None:
            for item in [content] if isinstance(content, str) else content:
                self._content(item)
        for call in delta.get("tool_calls") or ():
            if isinstance(call, dict):
                self._tool_call(call)

    def _usage(self, usage: dict[str, Any]) -> None:
        prompt = _int(usage.get("prompt_tokens"))
        cached = _cached_tokens(usage, prompt)
        completion = _int(usage.get("completion_tokens"))
        value = Usage(
            input=int(max(0, prompt - cached)),
            output=int(completion),
            cache_read=int(cached),
            cache_write=0,
            total_tokens=int(
                _int(usage.get("total_tokens")) or max(0, prompt - cached) + completion + cached
            ),
        )
        self.output.usage = calculate_cost(self.model, value)

    def _open(self, kind: str) -> int:
        """The open block of ``kind``, started (after ending another) if needed."""
        output = self.output
        if self._current != kind:
            self.finish_block()
            self._current = kind
            if kind == "text":
                index = output.add_block(TextContent(text=""))
                self.stream.push(TextStartEvent(content_index=index, partial=output.snapshot()))
            else:
                index = output.add_block(ThinkingContent(thinking=""))
                self.stream.push(ThinkingStartEvent(content_index=index, partial=output.snapshot()))
        return len(output.content) - 1

    def _text(self, delta: str) -> None:
        index = self._open("text")
        self.output.append_text(index, delta)
        self.stream.push(
            TextDeltaEvent(content_index=index, delta=delta, partial=self.output.snapshot())
        )

    def _content(self, item: Any) -> None:
        if isinstance(item, str):
            self._text(sanitize_surrogates(item))
            return
        if not isinstance(item, dict):
            return
        if item.get("type") == "thinking":
            parts = item.get("thinking") or ()
            texts = [p.get("text") or "" for p in parts if isinstance(p, dict)]
            delta = sanitize_surrogates("".join(t for t in texts if isinstance(t, str)))
            if not delta:
                return
            index = self._open("thinking")
            self.output.append_thinking(index, delta)
            self.stream.push(
                ThinkingDeltaEvent(content_index=index, delta=delta, partial=self.output.snapshot())
            )
        elif item.get("type") == "text":
            text = item.get("text")
            self._text(sanitize_surrogates(text if isinstance(text, str) else ""))

    def _tool_call(self, call: dict[str, Any]) -> None:
        self.finish_block()
        output = self.output
        raw_id = call.get("id")
        index_value = call.get("index")
        call_id = (
            str(raw_id)
            if isinstance(raw_id, str) and raw_id and raw_id != "null"
            else derive_tool_call_id(f"toolcall:{_js_index(index_value)}", 0)
        )
        key: object = index_value if index_value is not None else call_id
        function = call.get("function")
        function = function if isinstance(function, dict) else {}
        draft = self._tools.get(key)
        if draft is None:
            name = function.get("name")
            block = ToolCall(id=call_id, name=name if isinstance(name, str) else "")
            draft = _ToolDraft(output.add_block(block))
            self._tools[key] = draft
            self.stream.push(
                ToolCallStartEvent(content_index=draft.index, partial=output.snapshot())
            )
        arguments = function.get("arguments")
        delta = arguments if isinstance(arguments, str) else json_stringify(arguments or {})
        draft.args.feed(delta)
        current = output.content[draft.index]
        assert isinstance(current, ToolCall)
        output.content[draft.index] = ToolCall(
            id=current.id,
            name=current.name,
            arguments=lazy_arguments(draft.args, objects_only=False),
        )
        self.stream.push(
            ToolCallDeltaEvent(content_index=draft.index, delta=delta, partial=output.snapshot())
        )

    def finish_block(self) -> None:
        """End the open text or thinking block (``finishCurrentBlock``)."""
        kind, self._current = self._current, None
        if kind is None:
            return
        output = self.output
        index = len(output.content) - 1
        block = output.content[index]
        if isinstance(block, TextContent):
            self.stream.push(
                TextEndEvent(content_index=index, content=block.text, partial=output.snapshot())
            )
        elif isinstance(block, ThinkingContent):
            self.stream.push(
                ThinkingEndEvent(
                    content_index=index, content=block.thinking, partial=output.snapshot()
                )
            )

    def end(self) -> None:
        """The stream is over: end the open block, then every tool call in order."""
        self.finish_block()
        output = self.output
        for draft in self._tools.values():
            block = output.content[draft.index]
            assert isinstance(block, ToolCall)
            arguments: Any = parse_streaming_json(draft.args.text)
            block = ToolCall(id=block.id, name=block.name, arguments=arguments)
            output.content[draft.index] = block
            self.stream.push(
                ToolCallEndEvent(
                    content_index=draft.index, tool_call=block, partial=output.snapshot()
                )
            )


def _js_index(value: Any) -> str:
    """``String(toolCall.index ?? 0)`` for the fallback id's seed."""
    if value is None:
        return "0"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return json_stringify(value) if not isinstance(value, str) else value
