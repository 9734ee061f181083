"""The chat-completions stream turned into pi-ai's stream events.

The response side of pi-ai 0.85.0's ``api/openai-completions.js``: :func:`_dispatch`
reads one SSE event (``[DONE]`` ends the body, an ``error`` member fails the stream as
the SDK does), :class:`_ChunkHandler` builds the partial message from each chunk (text,
thinking from the server's reasoning fields or ``reasoning_details``, tool calls
assembled by index with incrementally parsed arguments, usage and its cost, the finish
reason), :func:`_check_end` applies pi-ai's end-of-stream checks, and
:func:`_completion_as_chunk` reads a whole ``chat.completion`` (a server that did not
stream) as one chunk.
"""

from __future__ import annotations

from typing import Final, final

import httpx

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
from .._http import APIError
from .._json import js_truthy, json_parse, json_stringify
from .._output import PartialMessage, calculate_cost
from .._partial_json import PartialJSONParser, lazy_arguments
from .._request import ABORTED_AFTER_HEADERS, ProviderFailure
from ._compat import CompletionsCompat, JSONObject
from ._convert import _is_reasoning_detail

_REASONING_FIELDS: Final = ("reasoning_content", "reasoning", "reasoning_text")


def _nullish(*values: JSONValue) -> JSONValue:
    for value in values:
        if value is not None:
            return value
    return None


def _get(obj: JSONValue, key: str) -> JSONValue:
    return obj.get(key) if isinstance(obj, dict) else None


def _num(value: JSONValue) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return value


def _parse_usage(raw: JSONValue, model: Model) -> Usage:
    details = _get(raw, "prompt_tokens_details")
    prompt = _num(_get(raw, "prompt_tokens")) or 0
    cache_read = _num(
        _nullish(
            _get(details, "cached_tokens"),
            _get(raw, "prompt_cache_hit_tokens"),
            _get(raw, "cached_tokens"),
            0,
        )
    )
    cache_write = _num(_get(details, "cache_write_tokens")) or 0
    input_tokens = max(0, prompt - cache_read - cache_write)
    output = _num(_get(raw, "completion_tokens")) or 0
    reasoning = _num(_get(_get(raw, "completion_tokens_details"), "reasoning_tokens")) or 0
    usage = Usage(
        input=_int(input_tokens),
        output=_int(output),
        cache_read=_int(cache_read),
        cache_write=_int(cache_write),
        reasoning=_int(reasoning),
        total_tokens=_int(input_tokens + output + cache_read + cache_write),
    )
    return calculate_cost(model, usage)


def _int(value: float) -> int:
    return int(value) if float(value).is_integer() else value  # type: ignore[return-value]  # JS numbers


def _js_str(value: JSONValue) -> str:
    if isinstance(value, str):
        return value
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return json_stringify(value)
    if isinstance(value, list):
        return ",".join("" if v is None else _js_str(v) for v in value)
    return "[object Object]"


def _map_stop_reason(reason: JSONValue) -> tuple[str, str | None]:
    if reason in ("stop", "end"):
        return "stop", None
    if reason == "length":
        return "length", None
    if reason in ("function_call", "tool_calls"):
        return "toolUse", None
    return "error", f"Provider finish_reason: {_js_str(reason)}"


@final
class _ToolDraft:
    __slots__ = ("args", "index", "stream_index")

    def __init__(self, index: int, stream_index: float | None) -> None:
        self.index = index
        self.stream_index = stream_index
        self.args = PartialJSONParser()  # the streamed arguments, parsed incrementally


@final
class _ChunkHandler:
    """pi-ai's per-chunk logic on a :class:`PartialMessage`."""

    __slots__ = (
        "has_finish_reason",
        "model",
        "output",
        "reasoning_details",
        "stream",
        "text_index",
        "thinking_index",
        "tools",
        "tools_by_id",
        "tools_by_index",
    )

    def __init__(
        self, model: Model, output: PartialMessage, stream: AssistantMessageEventStream
    ) -> None:
        self.model = model
        self.output = output
        self.stream = stream
        self.text_index: int | None = None
        self.thinking_index: int | None = None
        self.tools: list[_ToolDraft] = []
        self.tools_by_index: dict[float, _ToolDraft] = {}
        self.tools_by_id: dict[str, _ToolDraft] = {}
        self.has_finish_reason = False
        self.reasoning_details: list[JSONObject] | None = None

    def handle(self, chunk: JSONValue) -> None:
        if not isinstance(chunk, dict):
            return
        output = self.output
        if not output.response_id and js_truthy(chunk.get("id")):
            output.response_id = _js_str(chunk["id"])
        chunk_model = chunk.get("model")
        if isinstance(chunk_model, str) and chunk_model and chunk_model != self.model.id:
            output.response_model = output.response_model or chunk_model
        if js_truthy(chunk.get("usage")):
            output.usage = _parse_usage(chunk["usage"], self.model)
        choices = chunk.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices else None
        if not js_truthy(choice):
            return
        if not isinstance(choice, dict):
            choice = {}
        if not js_truthy(chunk.get("usage")) and js_truthy(choice.get("usage")):
            output.usage = _parse_usage(choice["usage"], self.model)
        finish = choice.get("finish_reason")
        if js_truthy(finish):
            output.raw_stop_reason = _js_str(finish)
            stop_reason, error_message = _map_stop_reason(finish)
            output.stop_reason = stop_reason
            if error_message:
                output.error_message = error_message
            self.has_finish_reason = True
        delta = choice.get("delta")
        if not js_truthy(delta):
            return
        if not isinstance(delta, dict):
            delta = {}
        content = delta.get("content")
        if isinstance(content, str) and content:
            index = self._ensure_text()
            output.append_text(index, content)
            self.stream.push(
                TextDeltaEvent(content_index=index, delta=content, partial=output.snapshot())
            )
        field = next(
            (f for f in _REASONING_FIELDS if isinstance(delta.get(f), str) and delta[f]), None
        )
        if field is not None:
            text = delta[field]
            signature = (
                "reasoning_content"
                if self.model.provider == "opencode-go" and field == "reasoning"
                else field
            )
            index = self._ensure_thinking(signature)
            output.append_thinking(index, text)
            self.stream.push(
                ThinkingDeltaEvent(content_index=index, delta=text, partial=output.snapshot())
            )
        tool_calls = delta.get("tool_calls")
        if js_truthy(tool_calls) and isinstance(tool_calls, list):
            for tool_call in tool_calls:
                self._tool_call(tool_call if isinstance(tool_call, dict) else {})
        details = delta.get("reasoning_details")
        if isinstance(details, list):
            for detail in details:
                if not _is_reasoning_detail(detail):
                    continue
                self._ensure_thinking("")
                if self.reasoning_details is None:
                    self.reasoning_details = []
                _append_reasoning_detail(self.reasoning_details, detail)

    def _ensure_text(self) -> int:
        if self.text_index is None:
            self.text_index = self.output.add_block(TextContent(text=""))
            self.stream.push(
                TextStartEvent(content_index=self.text_index, partial=self.output.snapshot())
            )
        return self.text_index

    def _ensure_thinking(self, signature: str) -> int:
        if self.thinking_index is None:
            self.thinking_index = self.output.add_block(
                ThinkingContent(thinking="", thinking_signature=signature)
            )
            self.stream.push(
                ThinkingStartEvent(
                    content_index=self.thinking_index, partial=self.output.snapshot()
                )
            )
        return self.thinking_index

    def _tool_call(self, tool_call: JSONObject) -> None:
        output = self.output
        raw_index = tool_call.get("index")
        stream_index: float | None = (
            raw_index
            if isinstance(raw_index, int | float) and not isinstance(raw_index, bool)
            else None
        )
        function = tool_call.get("function")
        name_value = _nullish(_get(function, "name"), _get(tool_call.get("custom"), "name"))
        call_id = tool_call.get("id")
        draft = self.tools_by_index.get(stream_index) if stream_index is not None else None
        if draft is None and js_truthy(call_id):
            draft = self.tools_by_id.get(_js_str(call_id))
        if draft is None:
            block = ToolCall(
                id=_js_str(call_id) if js_truthy(call_id) else "",
                name=_js_str(name_value) if name_value is not None else "",
                arguments={},
            )
            draft = _ToolDraft(output.add_block(block), stream_index)
            self.tools.append(draft)
            if stream_index is not None:
                self.tools_by_index[stream_index] = draft
            if js_truthy(call_id):
                self.tools_by_id[_js_str(call_id)] = draft
            self.stream.push(
                ToolCallStartEvent(content_index=draft.index, partial=output.snapshot())
            )
        if stream_index is not None and draft.stream_index is None:
            draft.stream_index = stream_index
            self.tools_by_index[stream_index] = draft
        if js_truthy(call_id):
            self.tools_by_id[_js_str(call_id)] = draft
        current = output.content[draft.index]
        assert isinstance(current, ToolCall)
        block = current
        if not block.id and js_truthy(call_id):
            block = ToolCall(
                id=_js_str(call_id),
                name=block.name,
                arguments=block.arguments,
                thought_signature=block.thought_signature,
            )
        if not block.name and js_truthy(name_value):
            block = ToolCall(
                id=block.id,
                name=_js_str(name_value),
                arguments=block.arguments,
                thought_signature=block.thought_signature,
            )
        delta = ""
        arguments = _get(function, "arguments")
        if js_truthy(arguments):
            delta = _js_str(arguments)
            draft.args.feed(delta)
            parsed = lazy_arguments(draft.args, objects_only=False)
            block = ToolCall(
                id=block.id,
                name=block.name,
                arguments=parsed,
                thought_signature=block.thought_signature,
            )
        output.content[draft.index] = block
        self.stream.push(
            ToolCallDeltaEvent(content_index=draft.index, delta=delta, partial=output.snapshot())
        )

    def apply_reasoning_details(self) -> None:
        """Store the accumulated ``reasoning_details`` as the thinking block's signature."""
        if self.reasoning_details is None or self.thinking_index is None:
            return
        block = self.output.content[self.thinking_index]
        assert isinstance(block, ThinkingContent)
        self.output.content[self.thinking_index] = ThinkingContent(
            thinking=block.thinking,
            thinking_signature=json_stringify(self.reasoning_details),
            redacted=block.redacted,
        )

    def finish_blocks(self) -> None:
        """End every block, in content order (pi-ai ends them only now)."""
        output = self.output
        drafts = {d.index: d for d in self.tools}
        for index, block in enumerate(list(output.content)):
            if isinstance(block, TextContent):
                self.stream.push(
                    TextEndEvent(content_index=index, content=block.text, partial=output.snapshot())
                )
            elif isinstance(block, ThinkingContent):
                if index == self.thinking_index:
                    self.apply_reasoning_details()
                current = output.content[index]
                assert isinstance(current, ThinkingContent)
                self.stream.push(
                    ThinkingEndEvent(
                        content_index=index, content=current.thinking, partial=output.snapshot()
                    )
                )
            elif isinstance(block, ToolCall):
                draft = drafts.get(index)
                arguments = draft.args.value() if draft else {}
                call = ToolCall(
                    id=block.id,
                    name=block.name,
                    arguments=arguments,
                    thought_signature=block.thought_signature,
                )
                output.content[index] = call
                self.stream.push(
                    ToolCallEndEvent(content_index=index, tool_call=call, partial=output.snapshot())
                )


def _append_reasoning_detail(details: list[JSONObject], detail: JSONObject) -> None:
    last = details[-1] if details else None
    kind = detail.get("type")
    if (
        last is not None
        and kind == last.get("type")
        and kind in ("reasoning.text", "reasoning.summary")
    ):
        field = "text" if kind == "reasoning.text" else "summary"
        last[field] = last[field] + detail[field]
        if kind == "reasoning.text" and not last.get("signature"):
            last["signature"] = detail.get("signature")
        if last.get("id") is None and "id" in detail:
            last["id"] = detail["id"]
        if not last.get("format") and "format" in detail:
            last["format"] = detail["format"]
        if last.get("index") is None and "index" in detail:
            last["index"] = detail["index"]
        return
    details.append(dict(detail))


class _StreamAPIError(APIError):
    """An ``error`` member in a streamed chunk (the SDK throws ``APIError``)."""


def _check_end(handler: _ChunkHandler, compat: CompletionsCompat) -> None:
    output = handler.output
    if output.stop_reason == "aborted":
        raise ProviderFailure(ABORTED_AFTER_HEADERS)
    if not handler.has_finish_reason and not compat.supports_finish_reason:
        output.stop_reason = (
            "toolUse" if any(isinstance(b, ToolCall) for b in output.content) else "stop"
        )
    if output.stop_reason == "error":
        msg = output.error_message or "Provider returned an error stop reason"
        raise ProviderFailure(msg)
    if (compat.supports_finish_reason and not handler.has_finish_reason) or (
        output.stop_reason == "pending"
    ):
        msg = "Stream ended without finish_reason"
        raise ProviderFailure(msg)


def _dispatch(
    event: str | None, data: str, headers: httpx.Headers | None, handler: _ChunkHandler
) -> bool:
    """One SSE event; returns True at ``[DONE]`` (the body is not read further)."""
    if data.startswith("[DONE]"):
        return True
    try:
        chunk = json_parse(data)
    except ValueError as exc:
        name = event or "message"
        msg = f"Could not parse OpenAI Completions SSE event {name}: {exc}; data={_excerpt(data)}"
        raise ProviderFailure(msg) from None
    if event is not None and event.startswith("thread."):
        return False
    error = chunk.get("error") if isinstance(chunk, dict) else None
    if js_truthy(chunk) and js_truthy(error):
        raise _StreamAPIError(
            APIError.make_message(None, error, None), headers=headers, error=error
        )
    handler.handle(chunk)
    return False


def _excerpt(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... [{len(text) - limit} more chars]"


def _completion_as_chunk(body: JSONValue) -> JSONObject | None:
    """A whole ``chat.completion`` object (a server that did not stream) as the one
    chunk that carries all of it; ``None`` when ``body`` is not one."""
    if not isinstance(body, dict):
        return None
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        return None
    delta = dict(message)
    tool_calls = delta.get("tool_calls")
    if isinstance(tool_calls, list):
        delta["tool_calls"] = [
            {**call, "index": index} if isinstance(call, dict) else call
            for index, call in enumerate(tool_calls)
        ]
    chunk = {**body, "choices": [{**choice, "delta": delta}]}
    chunk["choices"][0].pop("message", None)
    return chunk
