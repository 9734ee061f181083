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

from typing import Final
from urllib.parse import quote

import httpx
import trio

from .._errors import ProviderError
from .._messages import DeferredHandle
from .._model import Model, StreamOptions
from .._stream import AssistantMessageEventStream
from ._http import require_api_key
from ._openai_responses._background import (
    DEFAULT_POLL_AFTER_MS,
    PENDING_STATUSES,
    push_deferred,
    push_final,
    send_for_json,
    stream_background_response,
)
from ._openai_responses._finish import API as OPENAI_RESPONSES_API, format_error, template_message
from ._openai_responses._payload import JSONObject, ResponsesCompat, build_headers, responses_url
from ._output import PartialMessage
from ._request import HttpRequest, ProviderFailure, settle

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


class DeferredError(ProviderError):
    """A deferred-response operation failed; the text is pi-ai-style (e.g.
    ``OpenAI API error (404): {...}``)."""


def supports_deferred(api: str) -> bool:
    """Whether ``api`` can defer responses (and fetch and cancel them)."""
    return api in DEFERRED_APIS


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
        with settle(stream, output, options, error_text=format_error):
            _check_handle(model, handle)
            response = await _poll(client, model, handle, options, wait_ms)
            status = response.get("status")
            if status in PENDING_STATUSES:
                push_deferred(stream, output, handle)
                return
            push_final(stream, output, model, response, options, _handle_service_tier(handle))

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
        request = HttpRequest(method="GET", url=url, headers=headers, body=None)
        response = await send_for_json(client, model, request, options)
        remaining = deadline - trio.current_time()
        if response.get("status") not in PENDING_STATUSES or remaining <= 0:
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
        request = HttpRequest(url=url, headers=_headers(model, options), body=None)
        await send_for_json(client, model, request, options)
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


def _handle_service_tier(handle: DeferredHandle) -> str | None:
    data = handle.data
    tier = data.get("serviceTier") if isinstance(data, dict) else None
    return tier if isinstance(tier, str) else None


def _quote(response_id: str) -> str:
    return quote(response_id, safe="")
