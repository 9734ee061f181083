"""The WebSocket transport of the Codex API (pi-ai 0.85.0's ``processWebSocketStream``).

One connection per request, opened with ``trio-websocket`` inside the stream's producer
(no task outlives the request): the handshake carries the Codex headers, one
``{"type": "response.create", ...body}`` message goes out, and each message back is one
Codex event, up to ``response.completed`` (or ``.done``/``.incomplete``); then the
connection is closed (1000, ``done``).

A failure of the transport itself (no ``trio-websocket``, no connection, a close before
the response completed, the idle limit) before the first event is a
:class:`WebSocketFallback`: the caller sends the request over SSE, the message gets a
``provider_transport_failure`` diagnostic, and the session stays on SSE from then on.
After the first event the failure ends the request. An ``error`` event or an event that
is not JSON is the backend's answer, not the transport's: it ends the request as it is
(but ``websocket_connection_limit_reached`` before the first event is tried once more).
"""

from __future__ import annotations

import math
import os
import ssl
import time
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

import trio

from ..._events import StartEvent
from ..._messages import JSONValue
from ..._model import Model, StreamOptions
from ..._stream import AssistantMessageEventStream
from .._json import json_stringify
from .._openai_responses._payload import service_tier_option
from .._output import PartialMessage, now_ms
from .._request import ProviderFailure, idle_timeout
from ._events import CodexApiError, CodexEvents, CodexProtocolError, parse_event, push_done
from ._payload import CodexRequest, websocket_headers, websocket_url

if TYPE_CHECKING:
    from trio_websocket import WebSocketConnection

__all__ = ["WebSocketFallback", "reset_sse_fallback", "run_websocket", "sse_fallback_active"]

_DEFAULT_CONNECT_TIMEOUT: Final = 15.0
_MAX_MESSAGE_SIZE: Final = 64 * 1024 * 1024
_MESSAGE_TOO_BIG: Final = 1009
_CONNECTION_LIMIT_REACHED: Final = "websocket_connection_limit_reached"

_sse_fallback_sessions: set[str] = set()
"""Sessions whose WebSocket failed once: their requests go over SSE (pi-ai's
``websocketSseFallbackSessions``, for the life of the process)."""


class WebSocketFallback(Exception):  # control flow: "use SSE instead"
    """The WebSocket failed before its first event; send the request over SSE."""


class _TransportFailure(ProviderFailure):
    """The WebSocket itself failed (``name``: the JavaScript error's name in the
    diagnostic; ``code``: a close code)."""

    def __init__(self, message: str, *, name: str = "Error", code: int | None = None) -> None:
        super().__init__(message)
        self.name = name
        self.code = code


def sse_fallback_active(session_id: str | None) -> bool:
    """Whether ``session_id``'s WebSocket failed before (its requests use SSE)."""
    return session_id is not None and session_id in _sse_fallback_sessions


def reset_sse_fallback(session_id: str | None = None) -> None:
    """Let ``session_id`` (every session: ``None``) try the WebSocket again (pi-ai's
    ``resetOpenAICodexWebSocketDebugStats``)."""
    if session_id is None:
        _sse_fallback_sessions.clear()
    else:
        _sse_fallback_sessions.discard(session_id)


async def run_websocket(
    stream: AssistantMessageEventStream,
    output: PartialMessage,
    model: Model,
    options: StreamOptions,
    request: CodexRequest,
    body: JSONValue,
    body_json: str,
    transport: str,
) -> None:
    """Run the request over a WebSocket, to its ``done`` event.

    Checkpoints. Cancellation closes the connection and propagates.

    Raises:
        WebSocketFallback: the transport failed before the first event (the diagnostic
            is on ``output``).
        ProviderFailure: the request failed (the ``error`` event's text).
    """
    started = False

    def on_first_event() -> None:
        nonlocal started
        if not started:
            started = True
            stream.push(StartEvent(partial=output.snapshot()))

    retried_limit = False
    while True:
        events = CodexEvents(
            output,
            stream.push,
            model,
            service_tier=service_tier_option(options),
            on_first_event=on_first_event,
        )
        try:
            await _exchange(model, options, request, body, events)
            break
        except CodexApiError as exc:
            limit_before_start = not started and exc.code == _CONNECTION_LIMIT_REACHED
            if limit_before_start and not retried_limit:
                retried_limit = True
                continue
            if not limit_before_start:
                raise
            failure: ProviderFailure = exc
        except CodexProtocolError:
            raise
        except _TransportFailure as exc:
            failure = exc
        _record_failure(output, request, failure, transport, started, body_json)
        if started:
            raise failure
        raise WebSocketFallback
    # pi-ai counts a response that ended in an error here as a transport failure too
    # (a diagnostic, and the session moved to SSE); it is the backend's answer.
    push_done(stream, output, options)


def _record_failure(
    output: PartialMessage,
    request: CodexRequest,
    failure: ProviderFailure,
    transport: str,
    started: bool,
    body_json: str,
) -> None:
    error: dict[str, JSONValue] = {
        "name": getattr(failure, "name", "Error"),
        "message": str(failure),
    }
    code = getattr(failure, "code", None)
    if code is not None:
        error["code"] = code
    details: dict[str, JSONValue] = {"configuredTransport": transport}
    if not started:
        details["fallbackTransport"] = "sse"
    details["eventsEmitted"] = started
    details["phase"] = "after_message_stream_start" if started else "before_message_stream_start"
    details["requestBytes"] = len(body_json.encode())
    diagnostic: dict[str, JSONValue] = {
        "type": "provider_transport_failure",
        "timestamp": now_ms(),
        "error": error,
        "details": details,
    }
    output.diagnostics = (*(output.diagnostics or ()), diagnostic)
    if request.cache_session_id is not None:
        _sse_fallback_sessions.add(request.cache_session_id)


async def _exchange(
    model: Model,
    options: StreamOptions,
    request: CodexRequest,
    body: JSONValue,
    events: CodexEvents,
) -> None:
    try:
        import trio_websocket
    except ImportError:
        msg = "WebSocket transport is not available in this runtime"
        raise _TransportFailure(msg) from None
    request_id = request.session_id or uuid7()
    headers = websocket_headers(model, options, request, request_id)
    connect_timeout = options.extra.get("websocket_connect_timeout")
    if not isinstance(connect_timeout, int | float) or isinstance(connect_timeout, bool):
        connect_timeout = _DEFAULT_CONNECT_TIMEOUT
    url = urlsplit(websocket_url(model.base_url))
    secure = url.scheme == "wss"
    host = url.hostname or ""
    port = url.port or (443 if secure else 80)
    resource = (url.path or "/") + (f"?{url.query}" if url.query else "")
    message = {"type": "response.create", **body} if isinstance(body, dict) else body
    failure: BaseException | None = None
    # The stream is opened and closed here (trio-websocket leaves a rejected one open).
    stream: trio.SocketStream | trio.SSLStream[trio.SocketStream] | None = None
    try:
        async with trio.open_nursery() as nursery:
            try:
                # pi-ai's connect timeout runs until the socket is open (the handshake).
                with trio.move_on_after(
                    connect_timeout if connect_timeout > 0 else math.inf
                ) as scope:
                    if secure:
                        stream = await trio.open_ssl_over_tcp_stream(
                            host,
                            port,
                            ssl_context=ssl.create_default_context(),
                            https_compatible=True,
                        )
                    else:
                        stream = await trio.open_tcp_stream(host, port)
                    ws = await trio_websocket.wrap_client_stream(
                        nursery,
                        stream,
                        host if port in (80, 443) else f"{host}:{port}",
                        resource,
                        extra_headers=[(k.encode(), v.encode()) for k, v in headers.items()],
                        max_message_size=options.max_event_size or _MAX_MESSAGE_SIZE,
                    )
                if scope.cancelled_caught:
                    ms = math.floor(connect_timeout * 1000)
                    msg = f"WebSocket connect timeout after {ms}ms"
                    raise _TransportFailure(msg)
                try:
                    await ws.send_message(json_stringify(message))
                    await _read(ws, options, events)
                finally:
                    with trio.CancelScope(shield=True), trio.move_on_after(1):
                        await ws.aclose(code=1000, reason="done")
            except Exception as exc:  # kept out of the nursery's exception group
                failure = exc
            nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # The connection's reader task failed too (a rejected handshake): its error
        # unless the body's own came first; a group of cancellations goes on.
        leaves = _leaves(group)
        errors = [e for e in leaves if not isinstance(e, trio.Cancelled)]
        if not errors:
            # An abort: the cancellation goes on bare, as the caller's scope expects.
            raise leaves[0] from None
        failure = failure or errors[0]
    finally:
        if stream is not None:
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await stream.aclose()
    if failure is None:
        return
    if isinstance(failure, trio_websocket.ConnectionRejected):
        msg = f"WebSocket handshake rejected: HTTP {failure.status_code}"
        raise _TransportFailure(msg) from None
    if isinstance(failure, trio_websocket.ConnectionClosed):
        raise _close_failure(failure.reason) from None
    if isinstance(failure, OSError | trio_websocket.HandshakeError | trio.BrokenResourceError):
        msg = f"WebSocket connection failed: {str(failure) or type(failure).__name__}"
        raise _TransportFailure(msg) from None
    raise failure


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


async def _read(ws: WebSocketConnection, options: StreamOptions, events: CodexEvents) -> None:
    """Messages to ``events`` up to the terminal event (``timeout`` or the idle limit
    bounds each wait)."""
    if options.timeout is not None and options.timeout > 0:
        limit = float(options.timeout)
        stalled = f"WebSocket idle timeout after {math.floor(limit * 1000)}ms"
    else:
        limit = idle_timeout(options)
        stalled = (
            f"OpenAI Codex stream stalled: no data for {limit:g} s "
            "(StreamOptions.idle_timeout; the server may have hung)"
        )
    while True:
        with trio.move_on_after(limit) as scope:
            data = await ws.get_message()
        if scope.cancelled_caught:
            raise _TransportFailure(stalled)
        text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
        if text and events.handle(parse_event(text, "WebSocket")):
            return


def _close_failure(reason: Any) -> _TransportFailure:
    """``WebSocket closed <code> <reason>`` (pi-ai's ``extractWebSocketCloseError``)."""
    code = getattr(reason, "code", None)
    text = getattr(reason, "reason", None)
    code_text = f" {code}" if isinstance(code, int) else ""
    reason_text = f" {text}" if isinstance(text, str) and text else ""
    if not reason_text and code == _MESSAGE_TOO_BIG:
        reason_text = " message too big"
    return _TransportFailure(
        f"WebSocket closed{code_text}{reason_text}".strip(),
        name="WebSocketCloseError",
        code=code if isinstance(code, int) else None,
    )


def uuid7() -> str:
    """A UUID version 7 (a millisecond timestamp, then random bits), as pi-ai's
    ``uuidv7`` makes a request id when there is no session."""
    value = bytearray((time.time_ns() // 1_000_000).to_bytes(6, "big") + os.urandom(10))
    value[6] = 0x70 | (value[6] & 0x0F)
    value[8] = 0x80 | (value[8] & 0x3F)
    hex_text = value.hex()
    return "-".join((hex_text[:8], hex_text[8:12], hex_text[12:16], hex_text[16:20], hex_text[20:]))
