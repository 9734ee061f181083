"""Deferred responses: a request that finishes later, fetched through a durable handle.

pi-ai 0.85.0's protocol (``types.d.ts``, ``models.js``, the faux provider):

- a request made with ``options.deferred`` set may end at once with a final message whose
  stop reason is ``deferred``: no content, zero usage, and ``deferred`` holding a
  :class:`~pitrio._messages.DeferredHandle` (provider, model id, api, the provider's
  token ``id``, optional ``poll_after_ms``/``expires_at`` hints and conversion ``data``);
  its stream is ``start`` then ``done`` with reason ``deferred``;
- :func:`fetch_deferred` asks for the outcome. While it is not ready the stream again ends
  in a ``deferred`` message (with the same handle); once it is, the stream carries the
  real message, block by block (``*_start``, one ``*_delta``, ``*_end``), and ends with
  ``done`` or ``error`` like a normal request. ``wait_ms`` (pi-ai's ``wait``) is how long
  it may keep polling before it gives up and answers ``deferred``; 0 checks once;
- :func:`cancel_deferred` asks the provider to stop (best effort).

For ``openai-responses`` this is OpenAI's *background mode*: the request is created with
``background: true`` (and ``store: true``, which background mode requires, and without
streaming), ``GET /responses/{id}`` polls it, the finished response object is converted
with the same event handling as a streamed one, and ``POST /responses/{id}/cancel``
cancels it. In pi-ai 0.85.0 only the faux provider implements the protocol; the
OpenAI mapping is pitrio's.

What ``Models`` calls (all take the ``httpx.AsyncClient`` they share):

- ``stream_openai_responses(client, model, context, options)`` with ``options.deferred``
  set starts a background response (:func:`stream_background_response`);
- ``fetch_deferred(client, model, handle, options, wait_ms=0)`` returns a stream (never
  raises; an API without deferred support gives an ``error`` stream);
- ``await cancel_deferred(client, model, handle, options)`` raises
  :class:`DeferredError` when the request fails or the API has no deferred support;
- :func:`supports_deferred` tells which APIs have it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import quote

import attrs
import httpx
import trio

from .._events import DoneEvent, StartEvent
from .._messages import AssistantMessage, DeferredHandle, JSONValue
from .._model import Context, Model, StreamOptions
from .._stream import AssistantMessageEventStream
from ._common import PartialMessage, close_response, json_parse, require_api_key
from ._openai_responses import (
    API as OPENAI_RESPONSES_API,
    JSONObject,
    ProviderFailure,
    ResponsesCompat,
    ResponsesEventProcessor,
    apply_on_payload,
    build_headers,
    build_request,
    call_on_response,
    format_error,
    push_done,
    responses_url,
    run_request,
    send_request,
    service_tier_option,
    template_message,
)

__all__ = [
    "DEFAULT_POLL_AFTER_MS",
    "DEFERRED_APIS",
    "DeferredError",
    "cancel_deferred",
    "fetch_deferred",
    "stream_background_response",
    "supports_deferred",
]

DEFERRED_APIS: Final = frozenset({OPENAI_RESPONSES_API})
"""The APIs that can defer a response."""

DEFAULT_POLL_AFTER_MS: Final = 1000
"""The polling interval suggested in a handle (``poll_after_ms``) and used by
:func:`fetch_deferred` while it waits."""

_PENDING_STATUSES: Final = frozenset({"queued", "in_progress"})


class DeferredError(Exception):
    """A deferred-response operation failed; the text is pi-ai-style (e.g.
    ``OpenAI API error (404): {...}``)."""


def supports_deferred(api: str) -> bool:
    """Whether ``api`` can defer responses (and fetch and cancel them)."""
    return api in DEFERRED_APIS


# ======================================================================================
# Start


def stream_background_response(
    client: httpx.AsyncClient, model: Model, context: Context, options: StreamOptions
) -> AssistantMessageEventStream:
    """Create a background response; the stream ends with a ``deferred`` message.

    The request body is the streaming one with ``background: true``, ``store: true``
    and ``stream: false`` (``options.on_payload`` sees it that way). If the server
    answers with a response that is already finished, the stream carries it as
    :func:`fetch_deferred` would. ``options.deferred`` may be ``True`` or a mapping;
    its ``window`` (for batch-style providers) does not apply to background mode.
    """
    service_tier = service_tier_option(options)

    async def produce(stream: AssistantMessageEventStream) -> None:
        output = PartialMessage(model)
        with run_request(stream, output, options):
            request = build_request(model, context, options)
            body = dict(request.body)
            body.update(stream=False, background=True, store=True)
            body = await apply_on_payload(options, body, model)
            response = await _send_for_json(
                client, model, "POST", request.url, request.headers, body, options
            )
            status = response.get("status")
            if status in _PENDING_STATUSES:
                handle = DeferredHandle(
                    provider=model.provider,
                    model_id=model.id,
                    api=model.api,
                    id=_response_id(response),
                    poll_after_ms=DEFAULT_POLL_AFTER_MS,
                    data={"serviceTier": service_tier} if service_tier is not None else None,
                )
                _push_deferred(stream, output, handle)
            else:
                _push_final(stream, output, model, response, options, service_tier)

    return AssistantMessageEventStream(produce, template=template_message(model))


# ======================================================================================
# Fetch


def fetch_deferred(
    client: httpx.AsyncClient,
    model: Model,
    handle: DeferredHandle,
    options: StreamOptions,
    wait_ms: float = 0,
) -> AssistantMessageEventStream:
    """The outcome of a deferred response, as a stream (pi-ai's ``fetchDeferred``).

    Checks once, then keeps polling every ``handle.poll_after_ms`` (default
    :data:`DEFAULT_POLL_AFTER_MS`) while ``wait_ms`` lasts. Still pending: the stream ends
    with a ``deferred`` message carrying ``handle``. Finished: the message streams block
    by block and ends with ``done`` (``stop``/``length``/``toolUse``) or ``error``
    (failed, cancelled, incomplete for another reason than the output limit). HTTP
    failures and aborts end the stream with an ``error`` event, as for a request.
    """

    async def produce(stream: AssistantMessageEventStream) -> None:
        output = PartialMessage(model)
        with run_request(stream, output, options):
            _check_handle(model, handle)
            response = await _poll(client, model, handle, options, wait_ms)
            status = response.get("status")
            if status in _PENDING_STATUSES:
                _push_deferred(stream, output, handle)
                return
            _push_final(stream, output, model, response, options, _handle_service_tier(handle))

    return AssistantMessageEventStream(produce, template=template_message(model))


async def _poll(
    client: httpx.AsyncClient,
    model: Model,
    handle: DeferredHandle,
    options: StreamOptions,
    wait_ms: float,
) -> JSONObject:
    url = responses_url(model, "/" + _quote(handle.id))
    headers = _headers(model, options)
    deadline = trio.current_time() + max(0.0, wait_ms) / 1000
    interval = (handle.poll_after_ms or DEFAULT_POLL_AFTER_MS) / 1000
    while True:
        response = await _send_for_json(client, model, "GET", url, headers, None, options)
        remaining = deadline - trio.current_time()
        if response.get("status") not in _PENDING_STATUSES or remaining <= 0:
            return response
        await trio.sleep(min(interval, remaining))


# ======================================================================================
# Cancel


async def cancel_deferred(
    client: httpx.AsyncClient, model: Model, handle: DeferredHandle, options: StreamOptions
) -> None:
    """Ask the provider to stop a deferred response (pi-ai's ``cancelDeferred``).

    Retries as a request does (``options.max_retries``); cancellation of the caller
    propagates.

    Raises:
        DeferredError: the API has no deferred responses, the handle belongs to another
            model, or the request failed.
    """
    if not supports_deferred(model.api):
        msg = "API cannot cancel deferred responses"
        raise DeferredError(msg)
    try:
        _check_handle(model, handle)
        url = responses_url(model, "/" + _quote(handle.id) + "/cancel")
        await _send_for_json(client, model, "POST", url, _headers(model, options), None, options)
    except trio.Cancelled:
        raise
    except Exception as exc:
        raise DeferredError(format_error(exc)) from exc


# ======================================================================================
# Shared parts


def _check_handle(model: Model, handle: DeferredHandle) -> None:
    if not supports_deferred(model.api):
        msg = "API does not support deferred responses"
        raise ProviderFailure(msg)
    if (handle.api, handle.provider, handle.model_id) != (model.api, model.provider, model.id):
        msg = (
            f"Deferred response {handle.id} belongs to {handle.provider}/{handle.model_id} "
            f"({handle.api}), not {model.provider}/{model.id} ({model.api})"
        )
        raise ProviderFailure(msg)


def _headers(model: Model, options: StreamOptions) -> dict[str, str]:
    api_key = require_api_key(model.provider, options.api_key, options.headers)
    headers = build_headers(model, api_key, options.headers, None, ResponsesCompat.of(model))
    # Requests without a body carry no Content-Type (as in the SDK).
    return {k: v for k, v in headers.items() if k.lower() != "content-type"}


async def _send_for_json(
    client: httpx.AsyncClient,
    model: Model,
    method: str,
    url: str,
    headers: Mapping[str, str],
    body: JSONObject | None,
    options: StreamOptions,
) -> JSONObject:
    """Send with retries, read the whole body, and decode a JSON object."""
    response = await send_request(client, method, url, headers, body, options)
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


def _handle_service_tier(handle: DeferredHandle) -> str | None:
    data = handle.data
    tier = data.get("serviceTier") if isinstance(data, dict) else None
    return tier if isinstance(tier, str) else None


def _push_deferred(
    stream: AssistantMessageEventStream, output: PartialMessage, handle: DeferredHandle
) -> None:
    """``start`` then ``done(deferred)``, as pi-ai's faux provider streams it."""
    stream.push(StartEvent(partial=output.snapshot()))
    output.stop_reason = "deferred"
    output.response_id = handle.id
    message = output.snapshot()
    stream.push(DoneEvent(reason="deferred", message=_with_handle(message, handle)))


def _with_handle(message: AssistantMessage, handle: DeferredHandle) -> AssistantMessage:
    return attrs.evolve(message, deferred=handle)


def _push_final(
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
    for event in _synthetic_events(response):
        processor.handle(event)
    status = response.get("status")
    if status == "cancelled" and output.stop_reason == "error" and not output.error_message:
        output.error_message = "Response was cancelled"
    push_done(stream, output, options)


def _synthetic_events(response: JSONObject) -> list[JSONValue]:
    """The stream events a finished response object stands for."""
    events: list[JSONValue] = [{"type": "response.created", "response": response}]
    items = response.get("output")
    for index, item in enumerate(items if isinstance(items, list) else []):
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "reasoning":
            added = {**item, "summary": [], "content": []}
            events.append(
                {"type": "response.output_item.added", "output_index": index, "item": added}
            )
            text = _texts(item.get("summary")) or _texts(item.get("content"))
            if text:
                events.append(
                    {"type": "response.reasoning_text.delta", "output_index": index, "delta": text}
                )
        elif kind == "message":
            added = {**item, "content": []}
            events.append(
                {"type": "response.output_item.added", "output_index": index, "item": added}
            )
            text = _message_text(item.get("content"))
            if text:
                events.append(
                    {"type": "response.output_text.delta", "output_index": index, "delta": text}
                )
        elif kind == "function_call":
            added = {**item, "arguments": ""}
            events.append(
                {"type": "response.output_item.added", "output_index": index, "item": added}
            )
            arguments = item.get("arguments")
            if isinstance(arguments, str) and arguments:
                events.append(
                    {
                        "type": "response.function_call_arguments.delta",
                        "output_index": index,
                        "delta": arguments,
                    }
                )
        else:
            continue
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    if response.get("status") == "failed":
        events.append({"type": "response.failed", "response": response})
    else:
        events.append({"type": "response.completed", "response": response})
    return events


def _message_text(parts: Any) -> str:
    out = []
    for part in parts if isinstance(parts, list) else []:
        if isinstance(part, dict):
            text = part.get("text") if part.get("type") == "output_text" else part.get("refusal")
            out.append(text if isinstance(text, str) else "")
    return "".join(out)


def _texts(parts: Any) -> str:
    if not isinstance(parts, list):
        return ""
    return "\n\n".join(
        p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)
    )


def _quote(response_id: str) -> str:
    return quote(response_id, safe="")
