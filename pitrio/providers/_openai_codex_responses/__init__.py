"""The ``openai-codex-responses`` API: ChatGPT's Codex backend (a ChatGPT subscription).

A port of pi-ai 0.85.0's ``api/openai-codex-responses.js``. The credential is the
ChatGPT OAuth access token, passed as the API key (``StreamOptions.api_key``); the
account id in its claims goes into the ``chatgpt-account-id`` header. The request is a
Responses request (``_payload``: the ``input`` items of the openai-responses API, the
system prompt as ``instructions``, ``store: false``, the session id as
``prompt_cache_key`` and ``session-id`` header) sent to ``<base_url>/codex/responses``,
and its events are the Responses events (``_events``: pi-ai's ``mapCodexEvents`` in
front of the openai-responses event processor).

Two transports, as in pi-ai (``options.extra["transport"]``):

- ``"auto"`` (the default), ``"websocket"``, ``"websocket-cached"``: a WebSocket to the
  same URL (``wss:``), one ``response.create`` message out, the events back as messages
  (``_websocket``; needs ``trio-websocket``, the ``cli``/``web`` extra). When it cannot
  connect, or fails before its first event, the request is made over SSE instead and
  the final message carries a ``provider_transport_failure`` diagnostic; the session
  (``options.session_id``) then stays on SSE;
- ``"sse"``: ``POST`` with ``Accept: text/event-stream``.

Failures end the stream with an ``error`` event (``aborted`` with ``Request was
aborted``, at any stage, as pi-ai says); nothing is raised. HTTP errors read as pi-ai's
``parseErrorResponse``: ChatGPT's usage limit as ``You have hit your ChatGPT usage limit
(<plan> plan). Try again in ~<n> min.``, else the error's ``message``, else the body.
Deliberate differences from pi-ai: ``docs/deviations.md`` ("openai-codex-responses").
"""

from __future__ import annotations

import math
import re
import time
from email.utils import parsedate_to_datetime
from functools import cached_property
from typing import Any, Final, final

import httpx
import trio

from ..._errors import InvalidStateError
from ..._events import StartEvent
from ..._messages import JSONValue
from ..._model import Context, Model, StreamOptions
from ..._stream import AssistantMessageEventStream
from .._http import APIConnectionTimeoutError, APIError, close_response, open_body, send_streaming
from .._json import json_parse, json_stringify
from .._openai_responses._payload import service_tier_option
from .._output import PartialMessage
from .._request import (
    ABORTED_AFTER_HEADERS,
    Exchange,
    HttpRequest,
    ProviderFailure,
    call_on_response,
    maybe_await,
    read_body,
    settle,
)
from .._sse import ServerSentEvent
from ._events import CodexEvents, parse_event, push_done
from ._payload import CodexRequest, build_request, codex_url, sse_headers, transport_option
from ._websocket import WebSocketFallback, run_websocket, sse_fallback_active

__all__ = ["stream_openai_codex_responses"]

_BASE_DELAY_MS: Final = 1000
_DEFAULT_MAX_RETRY_DELAY_MS: Final = 60_000
_TERMINAL_RATE_LIMIT: Final = re.compile(
    r"GoUsageLimitError|FreeUsageLimitError|Monthly usage limit reached|available balance"
    r"|insufficient_quota|out of budget|quota exceeded|billing",
    re.IGNORECASE,
)
_RETRYABLE_TEXT: Final = re.compile(
    r"rate.?limit|overloaded|service.?unavailable|upstream.?connect|connection.?refused",
    re.IGNORECASE,
)
_USAGE_LIMIT_CODE: Final = re.compile(
    r"usage_limit_reached|usage_not_included|rate_limit_exceeded", re.IGNORECASE
)


def stream_openai_codex_responses(
    client: httpx.AsyncClient, model: Model, context: Context, options: StreamOptions
) -> AssistantMessageEventStream:
    """Stream one Codex response as pi-ai 0.85.0's ``streamSimple`` does.

    Returns at once; the request is made by the stream's producer when the stream is
    opened (``async with``). Failures end the stream with an ``error`` event; cancelling
    the producer (``stream.cancel()``, the agent's abort) ends it with stop reason
    ``aborted``. The HTTP response or WebSocket is closed on every path.

    Args:
        client: the HTTP client of the SSE transport (borrowed, not closed).
        model: an ``openai-codex-responses`` model; requests go to
            ``<base_url>/codex/responses`` (``https://chatgpt.com/backend-api``).
        context: system prompt, messages and tools.
        options: ``api_key`` (required: the ChatGPT OAuth access token), ``reasoning``,
            ``session_id``, ``cache_retention``, ``temperature``, ``tool_choice``,
            ``headers``, ``max_retries``, ``max_retry_delay``, ``timeout`` (the SSE
            headers' limit and the WebSocket's idle limit), ``on_payload``,
            ``on_response``; in ``options.extra``: ``transport`` (see the module),
            ``service_tier``, ``reasoning_summary``, ``text_verbosity`` (default
            ``"low"``) and ``websocket_connect_timeout`` (seconds, default 15).
    """
    output = PartialMessage(model)

    async def produce(stream: AssistantMessageEventStream) -> None:
        await _run(stream, output, client, model, context, options)

    return AssistantMessageEventStream(
        produce, template=output.snapshot(), abort_message=ABORTED_AFTER_HEADERS
    )


async def _run(
    stream: AssistantMessageEventStream,
    output: PartialMessage,
    client: httpx.AsyncClient,
    model: Model,
    context: Context,
    options: StreamOptions,
) -> None:
    with settle(stream, output, options, error_text=_error_text) as phase:
        # pi-ai says "Request was aborted" for an abort at any stage of this API.
        phase.headers_received = True
        request = build_request(model, context, options)
        body: JSONValue = request.body
        if options.on_payload is not None:
            replaced = await maybe_await(options.on_payload(body, model))
            if replaced is not None:
                body = replaced
        body_json = json_stringify(body)
        transport = transport_option(options)
        if transport != "sse" and not sse_fallback_active(request.cache_session_id):
            try:
                await run_websocket(
                    stream, output, model, options, request, body, body_json, transport
                )
                return
            except WebSocketFallback:
                pass
        await _run_sse(stream, output, client, model, options, request, body_json)


def _error_text(exc: Exception) -> str:
    return str(exc) or type(exc).__name__


# -- SSE --------------------------------------------------------------------------------


@final
class _SseExchange(Exchange):
    """Reads the SSE body for :func:`read_body` (pi-ai's own ``parseSSE``: data lines
    only, ``[DONE]`` skipped, the end of the body ends the last event)."""

    api_label = "OpenAI Codex"
    dispatch_at_eof = True

    @cached_property
    def events(self) -> CodexEvents:
        """The Codex events of this body, into the message."""
        return CodexEvents(
            self.output,
            self.stream.push,
            self.model,
            service_tier=service_tier_option(self.options),
        )

    def build_request(self) -> HttpRequest:  # pragma: no cover - sent by _send_sse
        msg = "the Codex exchange sends its requests itself (_run_sse), not by build_request"
        raise InvalidStateError(msg)

    def handle_sse(self, sse: ServerSentEvent) -> bool:
        data = sse.data.strip()
        if not data or data == "[DONE]":
            return False
        return self.events.handle(parse_event(data, "SSE"))

    def end_of_events(self, terminal: bool) -> None:
        self.events.finish()

    def check_end(self) -> None:  # pragma: no cover - push_done checks
        msg = "the Codex exchange checks its end when it pushes done, not by check_end"
        raise InvalidStateError(msg)


async def _run_sse(
    stream: AssistantMessageEventStream,
    output: PartialMessage,
    client: httpx.AsyncClient,
    model: Model,
    options: StreamOptions,
    request: CodexRequest,
    body_json: str,
) -> None:
    headers = sse_headers(model, options, request)
    response = await _send_sse(client, model, options, headers, body_json.encode())
    try:
        # A WebSocket attempt falls back only before its first event.
        assert not output.content, output.content
        stream.push(StartEvent(partial=output.snapshot()))
        exchange = _SseExchange(stream, output, model, options)
        async with open_body(response) as chunks:
            await read_body(exchange, response, chunks)
            push_done(stream, output, options)
    finally:
        await close_response(response)


async def _send_sse(
    client: httpx.AsyncClient,
    model: Model,
    options: StreamOptions,
    headers: dict[str, str],
    content: bytes,
) -> httpx.Response:
    """POST the request with pi-ai's Codex retries; the open 2xx response."""
    url = codex_url(model.base_url)
    max_retries = options.max_retries or 0
    timeout_ms = None if options.timeout is None else options.timeout * 1000
    attempt = 0
    while True:
        may_retry = attempt < max_retries
        try:
            return await _send_once(
                client, model, options, url, headers, content, timeout_ms, attempt, may_retry
            )
        except _RetryAfter as retry:
            delay_ms = retry.delay_ms
        except ProviderFailure as exc:
            # pi-ai's outer catch retries every failure but a too-long retry delay and
            # a usage limit (an HTTP error it did not call retryable included).
            if not may_retry or isinstance(exc, _RetryDelayExceeded) or "usage limit" in str(exc):
                raise
            delay_ms = _BASE_DELAY_MS * 2**attempt
        attempt += 1
        await trio.sleep(max(0.0, delay_ms) / 1000)


class _RetryAfter(Exception):  # control flow, never escapes _send_sse
    def __init__(self, delay_ms: float) -> None:
        super().__init__(delay_ms)
        self.delay_ms = delay_ms


class _RetryDelayExceeded(ProviderFailure):
    """The server asked for a retry delay above the limit (not retried)."""


async def _send_once(
    client: httpx.AsyncClient,
    model: Model,
    options: StreamOptions,
    url: str,
    headers: dict[str, str],
    content: bytes,
    timeout_ms: float | None,
    attempt: int,
    may_retry: bool,
) -> httpx.Response:
    http_request = client.build_request("POST", url, headers=headers, content=content)
    try:
        response = await send_streaming(client, http_request, timeout_ms=timeout_ms)
    except APIConnectionTimeoutError:
        if timeout_ms is None:
            msg = "Request timed out."
            raise ProviderFailure(msg) from None
        msg = f"Codex SSE response headers timed out after {math.floor(timeout_ms)}ms"
        raise ProviderFailure(msg) from None
    except APIError as exc:
        if exc.status is None:
            raise ProviderFailure(str(exc)) from exc
        seen = exc.headers if exc.headers is not None else httpx.Headers()
        if options.on_response is not None:
            await maybe_await(options.on_response(exc.status, dict(seen.items()), model))
        text = exc.body_text or ""
        if may_retry and _is_retryable(exc.status, text):
            raise _retry(seen, options, attempt) from None
        raise ProviderFailure(parse_error_response(exc.status, exc.reason, text)) from None
    await call_on_response(options, response, model)
    return response


def _retry(headers: httpx.Headers, options: StreamOptions, attempt: int) -> Exception:
    """The retry of a retryable status: after the server's delay (at most
    ``max_retry_delay``), else after 1 s, 2 s, 4 s..."""
    server_delay = _retry_after_ms(headers)
    if server_delay is None:
        return _RetryAfter(_BASE_DELAY_MS * 2**attempt)
    limit = (
        _DEFAULT_MAX_RETRY_DELAY_MS
        if options.max_retry_delay is None
        else options.max_retry_delay * 1000
    )
    if limit > 0 and server_delay > limit:
        return _RetryDelayExceeded(
            f"Server requested {math.ceil(server_delay / 1000)}s retry delay "
            f"(max: {math.ceil(limit / 1000)}s)"
        )
    return _RetryAfter(server_delay)


def _is_retryable(status: int, text: str) -> bool:
    if status == 429 and _TERMINAL_RATE_LIMIT.search(text):
        return False
    if status in (429, 500, 502, 503, 504):
        return True
    return _RETRYABLE_TEXT.search(text) is not None


def _js_number(text: str) -> float | None:
    """``Number(text)`` for a header value: ``None`` for ``NaN`` or an infinity."""
    stripped = text.strip()
    if not stripped:
        return 0.0
    try:
        value = float(stripped)
    except ValueError:
        return None
    return value if math.isfinite(value) and stripped.lower() not in ("nan",) else None


def _retry_after_ms(headers: httpx.Headers) -> float | None:
    """``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date) in milliseconds."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        value = _js_number(millis)
        if value is not None:
            return max(0.0, value)
    after = headers.get("retry-after")
    if not after:
        return None
    seconds = _js_number(after)
    if seconds is not None:
        return max(0.0, seconds * 1000)
    try:
        date = parsedate_to_datetime(after)
    except (TypeError, ValueError):
        return None
    return max(0.0, date.timestamp() * 1000 - time.time() * 1000)


def parse_error_response(status: int, reason: str, text: str) -> str:
    """The text of an HTTP error (pi-ai's ``parseErrorResponse``: the friendly usage
    limit text, else the error's ``message``, else the body or the reason phrase)."""
    message = text or reason or "Request failed"
    friendly: str | None = None
    try:
        parsed: Any = json_parse(text)
    except ValueError:
        return message
    err = parsed.get("error") if isinstance(parsed, dict) else None
    if not err:
        return message
    err = err if isinstance(err, dict) else {}
    code = err.get("code") or err.get("type") or ""
    if _USAGE_LIMIT_CODE.search(str(code)) or status == 429:
        plan_type = err.get("plan_type")
        plan = f" ({plan_type.lower()} plan)" if isinstance(plan_type, str) and plan_type else ""
        resets_at = err.get("resets_at")
        when = ""
        if isinstance(resets_at, int | float) and not isinstance(resets_at, bool) and resets_at:
            minutes = max(0, math.floor((resets_at * 1000 - time.time() * 1000) / 60000 + 0.5))
            when = f" Try again in ~{minutes} min."
        friendly = f"You have hit your ChatGPT usage limit{plan}.{when}".strip()
    detail = err.get("message")
    message = detail if isinstance(detail, str) and detail else friendly or message
    return friendly or message
