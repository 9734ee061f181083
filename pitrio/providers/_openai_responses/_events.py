"""Responses stream events turned into pi-ai's stream events.

The response side of pi-ai 0.85.0's ``openai-responses-shared.js``
(``processResponsesStream``): :func:`_dispatch` reads one SSE event with the OpenAI
SDK's iteration rules (``[DONE]``, a top-level ``error`` member raises, ``thread.*``
dropped), and :class:`ResponsesEventProcessor` applies it to the partial message:
output items (reasoning, message, function call) opened and closed by item id, text,
refusal, reasoning and argument deltas, reasoning signatures, the final response's
usage priced for its service tier (:func:`apply_service_tier_pricing`), status and
error. JavaScript's string conversion of odd values (``String(value)``) is reproduced
where pi-ai's template literals apply it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal, TypeAlias, final

import attrs

from ..._events import (
    AssistantMessageEvent,
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
from ..._messages import Cost, JSONValue, TextContent, ThinkingContent, ToolCall, Usage
from ..._model import Model
from .._http import APIError
from .._json import js_truthy, json_parse, json_stringify, parse_streaming_json
from .._output import PartialMessage, calculate_cost
from .._partial_json import PartialJSONParser, lazy_arguments
from .._request import ProviderFailure
from .._sse import ServerSentEvent
from ._payload import JSONObject

__all__ = ["ResponsesEventProcessor", "apply_service_tier_pricing"]


SlotKind: TypeAlias = Literal["thinking", "text", "toolCall"]


@final
@attrs.define
class _Slot:
    """An open output item: its block's content index and, for a function call, the
    argument JSON received so far."""

    kind: SlotKind
    index: int
    arguments_json: PartialJSONParser = attrs.field(factory=PartialJSONParser, eq=False)
    item_id: str | None = None
    index_key: Any = None


@final
class ResponsesEventProcessor:
    """Applies Responses stream events to a :class:`PartialMessage` and pushes the
    provider events (pi-ai's ``processResponsesStream``, one event at a time).

    Output items are tracked by their ``item_id`` (pi-ai uses ``output_index``, which
    some servers leave out); an event without ``item_id`` is matched by
    ``output_index``, and one whose ``output_index`` several open items share is an
    error naming the event. Events for no open item, or an item of another kind, are
    ignored, as are event types pi-ai does not handle.

    Args:
        output: the message being built.
        push: where the events go (``stream.push``).
        model: for pricing.
        service_tier: the requested tier; prices a response that names none.
        price_service_tier: whether the tier scales the cost (pi-ai's Azure API does not).
    """

    __slots__ = (
        "_by_id",
        "_by_index",
        "_model",
        "_output",
        "_price_service_tier",
        "_push",
        "_reasoning_by_id",
        "_service_tier",
        "saw_terminal",
    )

    def __init__(
        self,
        output: PartialMessage,
        push: Callable[[AssistantMessageEvent], None],
        model: Model,
        *,
        service_tier: str | None = None,
        price_service_tier: bool = True,
    ) -> None:
        self._output = output
        self._price_service_tier = price_service_tier
        self._push = push
        self._model = model
        self._service_tier = service_tier
        # Open output items by item id, and by output index (several when a server
        # leaves the index out).
        self._by_id: dict[str, _Slot] = {}
        self._by_index: dict[Any, list[_Slot]] = {}
        self._reasoning_by_id: dict[Any, int] = {}
        self.saw_terminal = False
        """Whether ``response.completed``, ``.incomplete`` or ``.failed`` arrived."""

    def handle(self, event: JSONValue) -> None:
        """Apply one stream event (a decoded JSON value).

        Raises:
            ProviderFailure: an ``error`` event, ``response.failed``, or a response
                status pi-ai does not know.
        """
        if not isinstance(event, dict):
            return
        kind = event.get("type")
        if kind in ("response.output_text.delta", "response.refusal.delta"):
            self._text_delta(event)
        elif kind == "response.function_call_arguments.delta":
            self._arguments_delta(event)
        elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            self._thinking_delta(event, _js_string(event.get("delta", _UNDEFINED)))
        elif kind == "response.reasoning_summary_part.done":
            self._thinking_delta(event, "\n\n")
        elif kind == "response.output_item.added":
            item = event.get("item")
            if isinstance(item, dict):
                self._create_slot(event, item)
        elif kind == "response.output_item.done":
            item = event.get("item")
            if isinstance(item, dict):
                self._item_done(event, item)
        elif kind == "response.function_call_arguments.done":
            self._arguments_done(event)
        elif kind == "response.created":
            response = event.get("response")
            if isinstance(response, dict):
                self._output.response_id = response.get("id")
        elif kind in ("response.completed", "response.incomplete"):
            response = event.get("response")
            self.finalize(response if isinstance(response, dict) else {})
        elif kind == "error":
            code = _js_string(event.get("code", _UNDEFINED))
            message = _js_string(event.get("message", _UNDEFINED))
            msg = f"Error Code {code}: {message}"
            raise ProviderFailure(msg)
        elif kind == "response.failed":
            self._failed(event.get("response"))

    def finish(self) -> None:
        """The events are over.

        Raises:
            ProviderFailure: no terminal response event came.
        """
        if not self.saw_terminal:
            msg = "OpenAI Responses stream ended before a terminal response event"
            raise ProviderFailure(msg)

    # -- items ------------------------------------------------------------------------

    def _find(self, event: Mapping[str, Any], item_id: Any) -> _Slot | None:
        if isinstance(item_id, str) and item_id:
            slot = self._by_id.get(item_id)
            if slot is not None:
                return slot
        # No open item with that id: pi-ai's match by output_index.
        at_index = self._by_index.get(_slot_key(event.get("output_index")))
        if not at_index:
            return None
        if len(at_index) > 1:
            msg = (
                f"OpenAI Responses: cannot tell which output item the "
                f"{_js_string(event.get('type'))} event belongs to: it names no open item "
                f"(item_id {_js_string(event.get('item_id', _UNDEFINED))}) and "
                f"{len(at_index)} open items share its output_index "
                f"({_js_string(event.get('output_index', _UNDEFINED))})"
            )
            raise ProviderFailure(msg)
        return at_index[0]

    def _slot(self, event: Mapping[str, Any], kind: SlotKind) -> _Slot | None:
        slot = self._find(event, event.get("item_id"))
        return slot if slot is not None and slot.kind == kind else None

    def _open(self, slot: _Slot, event: Mapping[str, Any], item: Mapping[str, Any]) -> None:
        item_id = item.get("id")
        if isinstance(item_id, str) and item_id:
            slot.item_id = item_id
            self._by_id[item_id] = slot
        slot.index_key = _slot_key(event.get("output_index"))
        self._by_index.setdefault(slot.index_key, []).append(slot)

    def _close(self, slot: _Slot) -> None:
        if slot.item_id is not None and self._by_id.get(slot.item_id) is slot:
            del self._by_id[slot.item_id]
        at_index = self._by_index[slot.index_key]
        at_index.remove(slot)
        if not at_index:
            del self._by_index[slot.index_key]

    def _create_slot(self, event: Mapping[str, Any], item: Mapping[str, Any]) -> _Slot | None:
        output = self._output
        item_type = item.get("type")
        if item_type == "reasoning":
            slot = _Slot("thinking", output.add_block(ThinkingContent(thinking="")))
            self._open(slot, event, item)
            self._push(ThinkingStartEvent(content_index=slot.index, partial=output.snapshot()))
            return slot
        if item_type == "message":
            self._apply_phase(item)
            slot = _Slot("text", output.add_block(TextContent(text="")))
            self._open(slot, event, item)
            self._push(TextStartEvent(content_index=slot.index, partial=output.snapshot()))
            return slot
        if item_type == "function_call":
            call_id = _js_string(item.get("call_id", _UNDEFINED))
            item_id = _js_string(item.get("id", _UNDEFINED))
            name = item.get("name")
            namespace = item.get("namespace")
            block = ToolCall(
                id=f"{call_id}|{item_id}",
                name=name if isinstance(name, str) else "",
                arguments={},
                namespace=namespace if isinstance(namespace, str) else None,
            )
            initial = item.get("arguments")
            slot = _Slot("toolCall", output.add_block(block))
            if js_truthy(initial):
                slot.arguments_json.feed(_js_string(initial))
            self._open(slot, event, item)
            self._push(ToolCallStartEvent(content_index=slot.index, partial=output.snapshot()))
            return slot
        # custom_tool_call answers grammar tools, which pitrio never offers.
        return None

    def _apply_phase(self, item: Mapping[str, Any]) -> None:
        # A final-answer message settles the stop reason before the response ends.
        if item.get("type") == "message" and item.get("phase") == "final_answer":
            self._output.stop_reason = "stop"

    def _item_done(self, event: Mapping[str, Any], item: Mapping[str, Any]) -> None:
        self._apply_phase(item)
        item_id = event.get("item_id")
        if not (isinstance(item_id, str) and item_id):
            item_id = item.get("id")
        slot = self._find(event, item_id) or self._create_slot(event, item)
        if slot is None:
            return
        output = self._output
        item_type = item.get("type")
        if item_type == "reasoning" and slot.kind == "thinking":
            block = output.content[slot.index]
            assert isinstance(block, ThinkingContent)
            summary = _join_texts(item.get("summary"), "\n\n")
            thinking = summary or _join_texts(item.get("content"), "\n\n") or block.thinking
            output.set_block(
                slot.index,
                attrs.evolve(block, thinking=thinking, thinking_signature=json_stringify(item)),
            )
            self._reasoning_by_id[_slot_key(item.get("id"))] = slot.index
            self._push(
                ThinkingEndEvent(
                    content_index=slot.index, content=thinking, partial=output.snapshot()
                )
            )
        elif item_type == "message" and slot.kind == "text":
            text = _message_text(item.get("content"))
            signature: JSONObject = {"v": 1, "id": item.get("id", _UNDEFINED)}
            if js_truthy(item.get("phase")):
                signature["phase"] = item["phase"]
            output.set_block(
                slot.index,
                TextContent(text=text, text_signature=json_stringify(_defined(signature))),
            )
            self._push(
                TextEndEvent(content_index=slot.index, content=text, partial=output.snapshot())
            )
        elif item_type == "function_call" and slot.kind == "toolCall":
            block = output.content[slot.index]
            assert isinstance(block, ToolCall)
            source = item.get("arguments")
            if not js_truthy(source):
                source = slot.arguments_json.text or "{}"
            namespace = item.get("namespace")
            call = attrs.evolve(
                block,
                arguments=_arguments(_js_string(source)),
                namespace=namespace if isinstance(namespace, str) else block.namespace,
            )
            output.set_block(slot.index, call)
            self._push(
                ToolCallEndEvent(
                    content_index=slot.index, tool_call=call, partial=output.snapshot()
                )
            )
        else:
            return
        self._close(slot)

    # -- deltas -----------------------------------------------------------------------

    def _text_delta(self, event: Mapping[str, Any]) -> None:
        slot = self._slot(event, "text")
        if slot is None:
            return
        delta = _js_string(event.get("delta", _UNDEFINED))
        self._output.append_text(slot.index, delta)
        self._push(
            TextDeltaEvent(content_index=slot.index, delta=delta, partial=self._output.snapshot())
        )

    def _thinking_delta(self, event: Mapping[str, Any], delta: str) -> None:
        slot = self._slot(event, "thinking")
        if slot is None:
            return
        self._output.append_thinking(slot.index, delta)
        self._push(
            ThinkingDeltaEvent(
                content_index=slot.index, delta=delta, partial=self._output.snapshot()
            )
        )

    def _arguments_delta(self, event: Mapping[str, Any]) -> None:
        slot = self._slot(event, "toolCall")
        if slot is None:
            return
        delta = _js_string(event.get("delta", _UNDEFINED))
        slot.arguments_json.feed(delta)
        self._set_arguments(slot)
        self._push_arguments_delta(slot, delta)

    def _arguments_done(self, event: Mapping[str, Any]) -> None:
        slot = self._slot(event, "toolCall")
        if slot is None:
            return
        previous = slot.arguments_json.text
        arguments = _js_string(event.get("arguments", _UNDEFINED))
        if arguments != previous:
            slot.arguments_json = PartialJSONParser()
            slot.arguments_json.feed(arguments)
        self._set_arguments(slot)
        # Whatever the deltas missed is sent as one more delta.
        if arguments.startswith(previous) and len(arguments) > len(previous):
            self._push_arguments_delta(slot, arguments[len(previous) :])

    def _set_arguments(self, slot: _Slot) -> None:
        block = self._output.content[slot.index]
        assert isinstance(block, ToolCall)
        self._output.set_block(
            slot.index,
            attrs.evolve(block, arguments=lazy_arguments(slot.arguments_json, objects_only=True)),
        )

    def _push_arguments_delta(self, slot: _Slot, delta: str) -> None:
        self._push(
            ToolCallDeltaEvent(
                content_index=slot.index, delta=delta, partial=self._output.snapshot()
            )
        )

    # -- the end of a response --------------------------------------------------------

    def finalize(self, response: Mapping[str, Any]) -> None:
        """Apply a finished response object: its id, usage and cost, and the stop
        reason from its ``status`` (``response.completed``/``.incomplete``, or a
        background response fetched once it finished)."""
        output = self._output
        self.saw_terminal = True
        self._backfill_reasoning_signatures(response.get("output"))
        if js_truthy(response.get("id")):
            output.response_id = response["id"]
        usage = response.get("usage")
        if js_truthy(usage) and isinstance(usage, dict):
            output.usage = _parse_usage(usage)
        output.usage = calculate_cost(self._model, output.usage)
        tier = response.get("service_tier")
        if tier is None:
            tier = self._service_tier
        if self._price_service_tier:
            output.usage = attrs.evolve(
                output.usage,
                cost=apply_service_tier_pricing(output.usage.cost, tier, self._model),
            )
        status = response.get("status")
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        reason = reason if isinstance(reason, str) else None
        if reason:
            output.raw_stop_reason = f"{_js_string(status)}.{reason}"
        else:
            output.raw_stop_reason = status if isinstance(status, str) else None
        output.stop_reason, output.error_message = _map_status(status, reason)
        if output.stop_reason == "stop" and any(isinstance(b, ToolCall) for b in output.content):
            output.stop_reason = "toolUse"

    def _backfill_reasoning_signatures(self, items: Any) -> None:
        # Azure may leave encrypted_content out of output_item.done and send it only in
        # the final response; keep store=false replay stateless.
        if not isinstance(items, list):
            return
        output = self._output
        for item in items:
            if not isinstance(item, dict) or item.get("type") != "reasoning":
                continue
            encrypted = item.get("encrypted_content")
            index = self._reasoning_by_id.get(_slot_key(item.get("id")))
            if not js_truthy(encrypted) or index is None:
                continue
            block = output.content[index]
            if not isinstance(block, ThinkingContent) or not block.thinking_signature:
                continue
            stored = json_parse(block.thinking_signature)
            if not isinstance(stored, dict) or js_truthy(stored.get("encrypted_content")):
                continue
            stored["encrypted_content"] = encrypted
            output.set_block(index, attrs.evolve(block, thinking_signature=json_stringify(stored)))

    def _failed(self, response: Any) -> None:
        self.saw_terminal = True
        response = response if isinstance(response, dict) else {}
        status = response.get("status")
        self._output.raw_stop_reason = status if isinstance(status, str) else None
        error = response.get("error")
        details = response.get("incomplete_details")
        if js_truthy(error):
            error = error if isinstance(error, dict) else {}
            code = error.get("code")
            message = error.get("message")
            code_text = _js_string(code) if js_truthy(code) else "unknown"
            message_text = _js_string(message) if js_truthy(message) else "no message"
            text = f"{code_text}: {message_text}"
        elif isinstance(details, dict) and js_truthy(details.get("reason")):
            text = f"incomplete: {_js_string(details['reason'])}"
        else:
            text = "Unknown error (no error details in response)"
        raise ProviderFailure(text)


def _parse_usage(usage: Mapping[str, Any]) -> Usage:
    details = usage.get("input_tokens_details")
    details = details if isinstance(details, dict) else {}
    output_details = usage.get("output_tokens_details")
    output_details = output_details if isinstance(output_details, dict) else {}
    # OpenAI counts cached and cache-write tokens inside input_tokens.
    cached = _count(details.get("cached_tokens"))
    written = _count(details.get("cache_write_tokens"))
    return Usage(
        input=max(0, _count(usage.get("input_tokens")) - cached - written),
        output=_count(usage.get("output_tokens")),
        cache_read=cached,
        cache_write=written,
        reasoning=_count(output_details.get("reasoning_tokens")),
        total_tokens=_count(usage.get("total_tokens")),
    )


def _map_status(status: Any, reason: str | None) -> tuple[str, str | None]:
    """``(stop_reason, error_message)`` of a response status (pi-ai's ``mapStopReason``)."""
    if not js_truthy(status) or status in ("completed", "in_progress", "queued"):
        return "stop", None
    if status == "incomplete":
        if reason == "max_output_tokens":
            return "length", None
        if reason:
            return "error", f"Response incomplete: {reason}"
        return "error", "Response incomplete without a provider reason"
    if status in ("failed", "cancelled"):
        return "error", None
    msg = f"Unhandled stop reason: {_js_string(status)}"
    raise ProviderFailure(msg)


def apply_service_tier_pricing(cost: Cost, tier: Any, model: Model) -> Cost:
    """Scale every cost component for a service tier: ``flex`` x0.5, ``priority`` x2
    (x2.5 for ``gpt-5.5``); the total is summed again."""
    if tier == "flex":
        multiplier = 0.5
    elif tier == "priority":
        multiplier = 2.5 if model.id == "gpt-5.5" else 2.0
    else:
        return cost
    i, o = cost.input * multiplier, cost.output * multiplier
    r, w = cost.cache_read * multiplier, cost.cache_write * multiplier
    return Cost(input=i, output=o, cache_read=r, cache_write=w, total=i + o + r + w)


def _message_text(parts: Any) -> str:
    if not isinstance(parts, list):
        return ""
    return "".join(
        _join_element(
            part.get("text") if part.get("type") == "output_text" else part.get("refusal")
        )
        if isinstance(part, dict)
        else ""
        for part in parts
    )


def _join_texts(parts: Any, separator: str) -> str:
    if not isinstance(parts, list):
        return ""
    return separator.join(
        _join_element(part.get("text") if isinstance(part, dict) else None) for part in parts
    )


def _arguments(text: str) -> dict[str, Any]:
    value = parse_streaming_json(text)
    return value if isinstance(value, dict) else {}


def _slot_key(value: Any) -> Any:
    # JavaScript Map keys: 1 and 1.0 are the same number; objects never match.
    if type(value) is int:
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, (dict, list)):
        return object()
    return value


def _count(value: Any) -> int:
    """``value || 0`` for a token count."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not js_truthy(value):
        return 0
    return int(value)


# -- JavaScript string conversion -------------------------------------------------------

_UNDEFINED: Final[Any] = object()


def _js_string(value: Any) -> str:
    """``String(value)`` (a template literal) for a decoded JSON value."""
    if value is _UNDEFINED:
        return "undefined"
    if isinstance(value, str):
        return value
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json_stringify(value)
    if isinstance(value, list):
        return ",".join(_join_element(v) for v in value)
    return "[object Object]"


def _join_element(value: Any) -> str:
    """``Array.prototype.join``: ``null`` and ``undefined`` become ``""``."""
    return "" if value is None or value is _UNDEFINED else _js_string(value)


def _defined(obj: JSONObject) -> JSONObject:
    """Drop ``undefined`` members, as ``JSON.stringify`` does."""
    return {k: v for k, v in obj.items() if v is not _UNDEFINED}


# ======================================================================================
# The SSE body


def _reject_constant(name: str) -> Any:
    msg = f"Unexpected token '{name[0]}', \"{name}\" is not valid JSON"
    raise ValueError(msg)


# ``JSON.parse`` for event data: ``_json.json_parse`` builds a decoder per call (the
# ``parse_constant`` argument does), a fifth of the time of a text delta.
_EVENT_DECODER: Final = json.JSONDecoder(parse_constant=_reject_constant)


def _dispatch(sse: ServerSentEvent, processor: ResponsesEventProcessor) -> bool:
    """Handle one SSE event with the OpenAI SDK's iteration rules; ``True`` at ``[DONE]``
    or a terminal response event (the body is not read further).

    All data but ``[DONE]`` must be JSON; a value with a truthy top-level ``error``
    member raises it as an :class:`APIError`; events named ``thread.*`` are parsed and
    dropped.
    """
    if sse.data.startswith("[DONE]"):
        return True
    try:
        value = _EVENT_DECODER.decode(sse.data)
    except ValueError as exc:
        name = sse.event or "message"
        msg = f"Could not parse OpenAI Responses SSE event {name}: {exc}; data={_excerpt(sse.data)}"
        raise ProviderFailure(msg) from None
    if sse.event is not None and sse.event.startswith("thread."):
        return False
    if isinstance(value, dict):
        error = value.get("error")
        if js_truthy(error):
            raise APIError(APIError.make_message(None, error, None), error=error)
    processor.handle(value)
    return processor.saw_terminal


def _excerpt(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... [{len(text) - limit} more chars]"
