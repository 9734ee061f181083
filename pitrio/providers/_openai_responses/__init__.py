"""The ``openai-responses`` API: OpenAI's Responses endpoint, streamed as SSE.

A port of pi-ai 0.85.0's ``api/openai-responses.js`` and ``openai-responses-shared.js``,
with the parts of the OpenAI SDK (6.40.0) that pi-ai relies on: its request headers, its
SSE iteration (``[DONE]``; a top-level ``error`` member raises) and its HTTP error texts.
The oracle's ``resp-*`` fixtures pin the behaviour (``PROVIDERS.md`` §5.4); the deliberate
differences are in ``docs/deviations-providers-responses.md``.

The entry point is :func:`stream_openai_responses`, pi-ai's ``streamSimple`` for this API::

    stream = stream_openai_responses(client, model, context, options)
    async with stream:
        async for event in stream:
            ...
        message = await stream.result()

This package holds the entry point and the streamed request (``_ResponsesExchange``:
what the shared lifecycle of ``providers/_request.py`` asks this API for). Its private
modules, on which :mod:`pitrio.providers._deferred` (fetching and cancelling background
responses) builds and which never import it:

- ``_payload``: request conversion (``build_request``, ``convert_messages``,
  ``convert_tools``): pitrio messages and tools into Responses ``input`` items, a
  request body and its headers;
- ``_events``: event handling (``ResponsesEventProcessor``): Responses stream events
  into provider events, building the assistant message as they come;
- ``_background``: background mode (``stream_background_response``, ``push_final``): a
  request made with ``options.deferred``, and a finished response object streamed as
  events;
- ``_finish``: how every stream of this API ends (the end checks, the ``done`` event,
  the error text).
"""

from __future__ import annotations

from functools import partial
from typing import ClassVar

import httpx

from ..._messages import JSONValue
from ..._model import Context, Model, StreamOptions
from ..._stream import AssistantMessageEventStream
from .._output import PartialMessage
from .._request import Exchange, HttpRequest, exchange_stream
from .._sse import ServerSentEvent
from ._background import apply_response_object, stream_background_response
from ._events import ResponsesEventProcessor, _dispatch
from ._finish import ERROR_PREFIX, check_done, format_error, template_message
from ._payload import build_request, service_tier_option

__all__ = ["stream_openai_responses"]


def stream_openai_responses(
    client: httpx.AsyncClient, model: Model, context: Context, options: StreamOptions
) -> AssistantMessageEventStream:
    """Stream one response from the Responses API (pi-ai's ``streamSimple``).

    Returns at once; the request is made when the caller opens the stream with
    ``async with``. Failures and aborts end the stream with an ``error`` event (stop
    reason ``error`` or ``aborted``); nothing is raised. With ``options.deferred`` set,
    the request runs in OpenAI's background mode and the stream ends with a ``deferred``
    message (see :func:`stream_background_response`).

    Args:
        client: the HTTP client (borrowed, not closed).
        model: a model whose ``api`` is ``"openai-responses"``; requests go to
            ``<base_url>/responses``.
        context: system prompt, messages and tools.
        options: the request options. Besides the common ones this API reads
            ``options.extra["service_tier"]`` (sent as ``service_tier``; prices the
            response when it names no tier) and ``options.extra["reasoning_summary"]``
            (``reasoning.summary``, default ``"auto"``), which pi-ai offers only through
            its lower-level ``stream``.
    """
    if options.deferred:
        return stream_background_response(client, model, context, options)
    return exchange_stream(
        partial(_ResponsesExchange, context=context),
        client,
        model,
        options,
        template=template_message(model),
    )


class _ResponsesExchange(Exchange):
    """One streamed Responses request (``providers/_request.py`` runs its lifecycle; the
    ``azure-openai-responses`` API's exchange is this one with its own request, texts
    and no service-tier pricing)."""

    api_label = "OpenAI Responses"
    error_prefix: ClassVar[str] = ERROR_PREFIX
    prices_service_tier: ClassVar[bool] = True

    def __init__(
        self,
        stream: AssistantMessageEventStream,
        output: PartialMessage,
        model: Model,
        options: StreamOptions,
        *,
        context: Context,
    ) -> None:
        super().__init__(stream, output, model, options)
        self._context = context
        self._processor = ResponsesEventProcessor(
            output,
            stream.push,
            model,
            service_tier=service_tier_option(options),
            price_service_tier=self.prices_service_tier,
        )

    def build_request(self) -> HttpRequest:
        request = build_request(self.model, self._context, self.options)
        return HttpRequest(url=request.url, headers=request.headers, body=request.body)

    def handle_sse(self, sse: ServerSentEvent) -> bool:
        return _dispatch(sse, self._processor)

    def handle_complete(self, body: JSONValue) -> None:
        if not isinstance(body, dict) or body.get("object") != "response":
            super().handle_complete(body)
        assert isinstance(body, dict)
        apply_response_object(self._processor, self.output, body)

    def end_of_events(self, terminal: bool) -> None:
        self._processor.finish()

    def check_end(self) -> None:
        check_done(self.output, self.api_label)

    def error_text(self, exc: Exception) -> str:
        return format_error(exc, self.error_prefix)
