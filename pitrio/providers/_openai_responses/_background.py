"""Background mode: the create request, and finished response objects as events.

pi-ai 0.85.0's deferred-response protocol for this API, creating side (fetching and
cancelling are in :mod:`pitrio.providers._deferred`): :func:`stream_background_response`
sends the request with ``background: true`` and ends the stream with a ``deferred``
message carrying the handle (:func:`push_deferred`), or, when the server answers with a
finished response, streams it as a streamed response would have arrived
(:func:`push_final`, :func:`response_as_events`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import attrs
import httpx

from ..._events import DoneEvent, StartEvent
from ..._messages import DeferredHandle, JSONValue
from ..._model import Context, Model, StreamOptions
from ..._stream import AssistantMessageEventStream
from .._http import close_response
from .._json import json_parse, json_stringify
from .._output import PartialMessage
from .._request import (
    HttpRequest,
    ProviderFailure,
    call_on_response,
    maybe_await,
    send_request,
    settle,
)
from ._events import ResponsesEventProcessor, _message_text
from ._finish import format_error, push_done, template_message
from ._payload import JSONObject, build_request, service_tier_option

__all__ = [
    "DEFAULT_POLL_AFTER_MS",
    "PENDING_STATUSES",
    "apply_response_object",
    "push_deferred",
    "push_final",
    "response_as_events",
    "send_for_json",
    "stream_background_response",
]


def stream_background_response(
    client: httpx.AsyncClient, model: Model, context: Context, options: StreamOptions
) -> AssistantMessageEventStream:
    """Create a background response; the stream ends with a ``deferred`` message.

    The request body is the streaming one with ``background: true``, ``store: true``
    and ``stream: false`` (``options.on_payload`` sees it that way). If the server
    answers with a response that is already finished, the stream carries it as
    :func:`~pitrio.providers._deferred.fetch_deferred` would. ``options.deferred`` may
    be ``True`` or a mapping; its ``window`` (for batch-style providers) does not apply
    to background mode.
    """
    service_tier = service_tier_option(options)

    async def produce(stream: AssistantMessageEventStream) -> None:
        output = PartialMessage(model)
        with settle(stream, output, options, error_text=_format_error_text):
            request = build_request(model, context, options)
            body: JSONValue = dict(request.body)
            assert isinstance(body, dict)
            body.update(stream=False, background=True, store=True)
            if options.on_payload is not None:
                replaced = await maybe_await(options.on_payload(body, model))
                if replaced is not None:
                    body = replaced
            http_request = HttpRequest(url=request.url, headers=request.headers, body=body)
            response = await send_for_json(client, model, http_request, options)
            if response.get("status") in PENDING_STATUSES:
                handle = DeferredHandle(
                    provider=model.provider,
                    model_id=model.id,
                    api=model.api,
                    id=_response_id(response),
                    poll_after_ms=DEFAULT_POLL_AFTER_MS,
                    data={"serviceTier": service_tier} if service_tier is not None else None,
                )
                push_deferred(stream, output, handle)
            else:
                push_final(stream, output, model, response, options, service_tier)

    return AssistantMessageEventStream(produce, template=template_message(model))


def _format_error_text(exc: Exception) -> str:
    return format_error(exc)


DEFAULT_POLL_AFTER_MS: Final = 1000
"""The polling interval suggested in a handle (``poll_after_ms``)."""

PENDING_STATUSES: Final = frozenset({"queued", "in_progress"})
"""The statuses of a background response that is not finished."""


async def send_for_json(
    client: httpx.AsyncClient, model: Model, request: HttpRequest, options: StreamOptions
) -> JSONObject:
    """Send with retries, read the whole body, and decode a JSON object."""
    content = None if request.body is None else json_stringify(request.body).encode()
    response = await send_request(client, request, content, options)
    try:
        await call_on_response(options, response, model)
        raw = await response.aread()
    finally:
        await close_response(response)
    value = json_parse(raw.decode("utf-8", "replace"))
    if not isinstance(value, dict):
        msg = f"OpenAI returned {type(value).__name__} instead of a response object"
        raise ProviderFailure(msg)
    return value


def _response_id(response: Mapping[str, Any]) -> str:
    response_id = response.get("id")
    if not isinstance(response_id, str) or not response_id:
        msg = "OpenAI background response without an id"
        raise ProviderFailure(msg)
    return response_id


def push_deferred(
    stream: AssistantMessageEventStream, output: PartialMessage, handle: DeferredHandle
) -> None:
    """``start`` then ``done(deferred)``, as pi-ai's faux provider streams it."""
    stream.push(StartEvent(partial=output.snapshot()))
    output.stop_reason = "deferred"
    output.response_id = handle.id
    message = output.snapshot()
    stream.push(DoneEvent(reason="deferred", message=attrs.evolve(message, deferred=handle)))


def push_final(
    stream: AssistantMessageEventStream,
    output: PartialMessage,
    model: Model,
    response: JSONObject,
    options: StreamOptions,
    service_tier: str | None,
) -> None:
    """Stream a finished response object as a streamed response would have arrived:
    ``start``, each output item as added, one delta, done; then the terminal event."""
    stream.push(StartEvent(partial=output.snapshot()))
    processor = ResponsesEventProcessor(output, stream.push, model, service_tier=service_tier)
    apply_response_object(processor, output, response)
    push_done(stream, output, options)


def apply_response_object(
    processor: ResponsesEventProcessor, output: PartialMessage, response: JSONObject
) -> None:
    """Feed a whole response object to ``processor`` as the events it stands for."""
    for event in response_as_events(response):
        processor.handle(event)
    status = response.get("status")
    if status == "cancelled" and output.stop_reason == "error" and not output.error_message:
        output.error_message = "Response was cancelled"


def response_as_events(response: JSONObject) -> list[JSONValue]:
    """The stream events a finished response object stands for."""
    events: list[JSONValue] = [{"type": "response.created", "response": response}]
    items = response.get("output")
    for index, item in enumerate(items if isinstance(items, list) else []):
        if not isinstance(item, dict):
            continue
        where: JSONObject = {"output_index": index}
        if isinstance(item.get("id"), str):
            where["item_id"] = item["id"]
        kind = item.get("type")
        if kind == "reasoning":
            added = {**item, "summary": [], "content": []}
            events.append({"type": "response.output_item.added", **where, "item": added})
            text = _texts(item.get("summary")) or _texts(item.get("content"))
            if text:
                events.append({"type": "response.reasoning_text.delta", **where, "delta": text})
        elif kind == "message":
            added = {**item, "content": []}
            events.append({"type": "response.output_item.added", **where, "item": added})
            text = _message_text(item.get("content"))
            if text:
                events.append({"type": "response.output_text.delta", **where, "delta": text})
        elif kind == "function_call":
            added = {**item, "arguments": ""}
            events.append({"type": "response.output_item.added", **where, "item": added})
            arguments = item.get("arguments")
            if isinstance(arguments, str) and arguments:
                events.append(
                    {"type": "response.function_call_arguments.delta", **where, "delta": arguments}
                )
        else:
            continue
        events.append({"type": "response.output_item.done", **where, "item": item})
    if response.get("status") == "failed":
        events.append({"type": "response.failed", "response": response})
    else:
        events.append({"type": "response.completed", "response": response})
    return events


def _texts(parts: Any) -> str:
    if not isinstance(parts, list):
        return ""
    return "\n\n".join(
        p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)
    )
