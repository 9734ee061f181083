"""The ``pi-messages`` API: Pi's own message protocol (pi-ai 0.85.0).

A port of pi-ai's ``api/pi-messages.js``, the wire of Pi's Radius gateway (provider
``radius``, ``RADIUS_API_KEY``) and of any backend that speaks it (a custom provider
with ``"api": "pi-messages"``): the request is one POST of ``{model, context,
options}`` to ``<baseUrl>/messages`` (``?debug=1`` with ``options.extra["debug"]``),
``context`` in Pi's JSON form (``pitrio.wire``) and ``options`` the sampling,
thinking, caching and tool-choice options as given; the response is an SSE stream of
serialized assistant-message events ending with ``done`` or ``error`` (``_events``).

What the provider does, in order (everything runs in the stream's producer):

1. require the API key (``No API key provided for provider "<name>"``);
2. send the request once (pi-ai does not retry), ``Authorization: Bearer <key>``;
3. on a 2xx response push ``start``, then rebuild the message from the backend's
   events;
4. at ``done`` push ``done`` with the backend's stop reason, usage (its cost included:
   the backend prices the response) and response id; at the backend's ``error`` push
   ``error`` with its reason, text and usage.

Every other failure ends the stream with an ``error`` event carrying a fresh message
(no content, zero usage), as pi-ai's ``createErrorEvent`` builds it: an HTTP error is
``<status> <statusText>: <error.message or body>[ (<error.code>)]`` with a
``pi_messages_response_failure`` diagnostic, a body without a terminal event
``<provider> stream ended without a terminal event``, an abort ``Request aborted``
before the headers and ``Request was aborted`` after (pitrio's texts on every API;
pi-ai shows Node's ``This operation was aborted``).

Deliberate differences from pi-ai: ``docs/deviations.md`` ("pi-messages").
"""

from __future__ import annotations

import os
from functools import partial
from typing import Any, Final, final

import attrs
import httpx

from ... import _wire as wire
from ..._messages import JSONValue, Usage
from ..._model import Context, Model, StreamOptions
from ..._stream import AssistantMessageEventStream
from .._http import APIError, MissingApiKeyError, merge_headers
from .._json import json_parse
from .._output import PartialMessage, now_ms
from .._request import Exchange, HttpRequest, ProviderFailure, exchange_stream
from .._sse import ServerSentEvent
from .._transform import tool_json
from ._events import BackendError, EventConverter

__all__ = ["build_payload", "messages_url", "response_error", "stream_pi_messages"]

_MAX_DIAGNOSTIC_BODY: Final = 8192


def messages_url(model: Model, options: StreamOptions) -> str:
    """``<baseUrl>/messages``, the base URL's trailing slashes dropped."""
    url = f"{model.base_url.rstrip('/')}/messages"
    if options.extra.get("debug"):
        url = str(httpx.URL(url).copy_merge_params({"debug": "1"}))
    return url


def _context_json(context: Context) -> dict[str, Any]:
    """The context as pi-ai's ``Context`` object (what the caller passed to pi-ai)."""
    out: dict[str, Any] = {}
    if context.system_prompt:
        out["systemPrompt"] = context.system_prompt
    out["messages"] = wire.messages_to_wire(context.messages)
    if context.tools:
        tools = []
        for tool in context.tools:
            spec: dict[str, Any] = tool_json(tool)
            constrained = getattr(tool, "constrained_sampling", None)
            if constrained is not None:
                spec["constrainedSampling"] = dict(constrained)
            tools.append(spec)
        out["tools"] = tools
    return out


def _cache_retention(options: StreamOptions) -> str | None:
    """The caller's retention; unset, the backend's default (only the legacy
    ``PI_CACHE_RETENTION=long`` opt-in is passed on)."""
    if options.cache_retention:
        return options.cache_retention
    return "long" if os.environ.get("PI_CACHE_RETENTION") == "long" else None


def build_payload(model: Model, context: Context, options: StreamOptions) -> dict[str, Any]:
    """``{model, context, options}`` as pi-ai sends it (options left unset are left out)."""
    given = {
        "temperature": options.temperature,
        "maxTokens": options.max_tokens,
        "reasoning": options.reasoning,
        "cacheRetention": _cache_retention(options),
        "sessionId": options.session_id,
        "toolChoice": options.tool_choice,
    }
    return {
        "model": model.id,
        "context": _context_json(context),
        "options": {k: v for k, v in given.items() if v is not None},
    }


def response_error(exc: APIError, model: Model, url: str) -> tuple[str, dict[str, Any]]:
    """``createPiMessagesResponseError``: the text of an HTTP error and its
    ``pi_messages_response_failure`` diagnostic."""
    body = exc.body_text or ""
    error: Any = None
    try:
        parsed = json_parse(body)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
        error = parsed["error"]
    message = error.get("message") if error is not None else None
    code = error.get("code") if error is not None else None
    code = code if isinstance(code, str) else None
    suffix = message if isinstance(message, str) else body
    text = f"{exc.status} {exc.reason}: {suffix}{f' ({code})' if code else ''}"
    details: dict[str, Any] = {
        "version": 1,
        "provider": model.provider,
        "model": model.id,
        "url": url,
        "status": exc.status,
        "statusText": exc.reason,
        "timestampMs": now_ms(),
    }
    if error is not None:
        details["error"] = error
    else:
        short = body if len(body) <= _MAX_DIAGNOSTIC_BODY else f"{body[:_MAX_DIAGNOSTIC_BODY]}…"
        details["body"] = short
    described: dict[str, Any] = {"name": "PiMessagesResponseError", "message": text}
    if code is not None:
        described["code"] = code
    diagnostic = {
        "type": "pi_messages_response_failure",
        "timestamp": now_ms(),
        "error": described,
        "details": details,
    }
    return text, diagnostic


@final
class _PiMessagesExchange(Exchange):
    """One ``/messages`` request (``providers/_request.py`` runs it)."""

    api_label = "pi-messages"
    dispatch_at_eof = True

    def __init__(
        self,
        stream: AssistantMessageEventStream,
        output: PartialMessage,
        model: Model,
        options: StreamOptions,
        *,
        context: Context,
    ) -> None:
        super().__init__(stream, output, model, attrs.evolve(options, max_retries=0))
        self._context = context
        self._converter = EventConverter(stream, output)
        self._url = ""
        self._done = False
        self._diagnostic: JSONValue = None

    def build_request(self) -> HttpRequest:
        options = self.options
        if not options.api_key:
            msg = f'No API key provided for provider "{self.model.provider}"'
            raise MissingApiKeyError(msg)
        self._url = messages_url(self.model, options)
        # model.headers too: pi-ai sends only the options' (docs/deviations.md).
        headers = merge_headers(
            {
                "authorization": f"Bearer {options.api_key}",
                "accept": "text/event-stream",
                "content-type": "application/json",
            },
            self.model.headers,
            options.headers,
        )
        return HttpRequest(
            url=self._url,
            headers=headers,
            body=build_payload(self.model, self._context, options),
        )

    def handle_sse(self, sse: ServerSentEvent) -> bool:
        self._done = self._converter.handle(sse.data)
        return self._done

    def check_end(self) -> None:
        if not self._done:
            msg = f"{self.model.provider} stream ended without a terminal event"
            raise ProviderFailure(msg)

    def error_text(self, exc: Exception) -> str:
        if isinstance(exc, BackendError):
            return str(exc)
        if isinstance(exc, APIError) and exc.status is not None:
            text, diagnostic = response_error(exc, self.model, self._url)
            if not (self.options.signal is not None and self.options.signal.aborted):
                self.output.diagnostics = (diagnostic,)
            return text
        return str(exc) or type(exc).__name__

    def before_failure(self) -> None:
        # pi-ai's createErrorEvent: a failure of pi-ai's own (not the backend's error
        # event) reports a fresh message, the content streamed so far dropped.
        if self._converter.backend_failed:
            return
        output = self.output
        output.content = []
        output.usage = Usage()
        output.response_id = None
        output.provider_thinking_level = None
        output.diagnostics = None


def stream_pi_messages(
    client: httpx.AsyncClient, model: Model, context: Context, options: StreamOptions
) -> AssistantMessageEventStream:
    """Stream one response over Pi's message protocol as pi-ai 0.85.0's
    ``streamSimple`` does.

    Returns at once; the request is made by the stream's producer when the stream is
    opened (``async with``). Failures end the stream with an ``error`` event; cancelling
    the producer (``stream.cancel()``) ends it with stop reason ``aborted``. The HTTP
    response is closed on every path, cancellation included.

    Args:
        client: the HTTP client (its connection pool is reused across requests).
        model: a ``pi-messages`` model; ``model.base_url`` is the backend's root
            (``/messages`` is appended).
        context: system prompt, messages and tools, sent as they are.
        options: ``api_key`` (required: ``RADIUS_API_KEY`` for Radius),
            ``temperature``, ``max_tokens``, ``reasoning``, ``cache_retention``,
            ``session_id``, ``tool_choice`` (passed to the backend), ``headers``,
            ``timeout``, ``on_payload``, ``on_response``; ``extra["debug"]`` asks the
            backend for its debug mode.
    """
    return exchange_stream(
        partial(_PiMessagesExchange, context=context),
        client,
        model,
        options,
    )
