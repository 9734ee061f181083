"""The request lifecycle every HTTP API of :mod:`pitrio.providers` shares.

This module is the only place that sends a provider request, applies the caller's
``on_payload``/``on_response`` hooks, reads the body, turns ``trio.Cancelled`` into an
``aborted`` event and exceptions into ``error`` events, and closes the response. An API
module supplies an :class:`Exchange` subclass: how to build the request, how to handle
one SSE event, and what to check when the events are over. A new API is one module (or
one package, as the three built-in APIs are) with an ``Exchange`` and a ``stream_<api>``
function that calls :func:`exchange_stream`, plus one line in the registry
(``providers/__init__.py``).

The lifecycle, as pi-ai 0.85.0's three ``streamSimple`` implementations share it::

    build the request         (a failure: error event, no start event)
    on_payload(body, model)   (may replace the body)
    send, with retries        (an abort here: "Request aborted")
    on_response(status, headers, model)
    start event
    read the body             (SSE events to the Exchange; an abort: "Request was aborted")
    end checks                (the Exchange's; the signal aborted: "Request was aborted")
    done event

What pitrio adds to pi-ai (``docs/providers.md``): an idle timeout per body read
(:data:`DEFAULT_IDLE_TIMEOUT`, ``StreamOptions.idle_timeout``), the message finished at
the API's terminal event without waiting for the body to close, and a JSON body that
answers a streaming request read as the complete response.
"""

from __future__ import annotations

import inspect
import math
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, ClassVar, Final, Literal, Protocol, final

import attrs
import httpx
import trio

from .._events import DoneEvent, ErrorEvent, StartEvent
from .._messages import AssistantMessage, JSONValue
from .._model import Model, StreamOptions
from .._stream import AssistantMessageEventStream
from ._http import APIError, close_response, open_body, send_streaming, send_with_retries
from ._json import json_parse, json_stringify
from ._output import PartialMessage
from ._sse import ServerSentEvent, SSEDecoder

__all__ = [
    "ABORTED_AFTER_HEADERS",
    "ABORTED_BEFORE_HEADERS",
    "DEFAULT_IDLE_TIMEOUT",
    "EventDecoder",
    "Exchange",
    "HttpRequest",
    "ProviderFailure",
    "RequestPhase",
    "call_on_response",
    "exchange_stream",
    "idle_timeout",
    "maybe_await",
    "push_failure",
    "read_body",
    "run_exchange",
    "send_request",
    "settle",
]

ABORTED_BEFORE_HEADERS: Final = "Request aborted"
"""pi-ai's text for an abort before the response headers arrived."""
ABORTED_AFTER_HEADERS: Final = "Request was aborted"
"""pi-ai's text for an abort once the response started."""

DEFAULT_IDLE_TIMEOUT: Final = 600.0
"""Seconds a body read may wait for the next bytes: the OpenAI and Anthropic Python
SDKs' read timeout (``httpx.Timeout(600, connect=5)``)."""


class ProviderFailure(Exception):
    """A failure whose text becomes the final message's ``errorMessage`` as it is.

    ``reason="aborted"`` makes it an ``aborted`` failure even when the signal is not
    aborted (a backend that reports an abort as its terminal event)."""

    def __init__(self, text: str, *, reason: Literal["error", "aborted"] = "error") -> None:
        super().__init__(text)
        self.reason: Literal["error", "aborted"] = reason


async def maybe_await(value: Any) -> Any:
    """``await value`` when it is awaitable (a hook may be sync or async)."""
    if inspect.isawaitable(value):
        return await value
    return value


class EventDecoder(Protocol):
    """Body bytes in, events out (:class:`SSEDecoder`, or an API's own framing)."""

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """The events ``chunk`` completed."""
        ...

    def flush(self) -> list[ServerSentEvent]:
        """The end of the body: what is left (may raise :class:`ProviderFailure`)."""
        ...


@final
@attrs.frozen(kw_only=True)
class HttpRequest:
    """A request ready to send: ``body`` is JSON (``None``: no body)."""

    url: str
    headers: Mapping[str, str]
    body: JSONValue
    method: str = "POST"


class Exchange(ABC):
    """One request of one API: the parts the lifecycle asks the API module for.

    Attributes:
        stream: where the events go (``stream.push``).
        output: the message being built.
        model, options: the request's.
    """

    api_label: ClassVar[str] = "provider"
    """How error texts name the API (``"OpenAI Completions"``)."""
    dispatch_at_eof: ClassVar[bool] = False
    """Dispatch an SSE event left open at the end of the body (see :class:`SSEDecoder`)."""
    error_member: ClassVar[str | None] = "error"
    """The member of an HTTP error body that is the error (``None``: the whole body)."""
    body_fallback: ClassVar[bool] = False
    """An HTTP error body without ``error_member`` keeps its body in the text."""
    aborted_after_headers: ClassVar[str] = ABORTED_AFTER_HEADERS
    """The text of an abort once the response started (Bedrock's SDK says ``aborted``)."""

    def __init__(
        self,
        stream: AssistantMessageEventStream,
        output: PartialMessage,
        model: Model,
        options: StreamOptions,
    ) -> None:
        self.stream = stream
        self.output = output
        self.model = model
        self.options = options

    @abstractmethod
    def build_request(self) -> HttpRequest:
        """The request to send (raising here ends the stream before its start event)."""

    async def send(
        self, client: httpx.AsyncClient, request: HttpRequest, content: bytes | None
    ) -> httpx.Response:
        """Send the request (retries included) and return the open 2xx response; the
        default is :func:`send_request`. An API that signs each attempt (Bedrock's
        SigV4) or retries as its SDK does overrides it."""
        return await send_request(
            client,
            request,
            content,
            self.options,
            error_member=self.error_member,
            body_fallback=self.body_fallback,
        )

    async def authorize(self, client: httpx.AsyncClient, request: HttpRequest) -> HttpRequest:
        """``request`` with its credentials, just before it is sent (after
        ``on_payload``, as an SDK adds its auth headers): an API whose credentials need
        a request of their own (an OAuth access token) gets them here. The default
        sends ``request`` as it is."""
        return request

    def replace_payload(self, replaced: JSONValue) -> JSONValue:
        """The body to send when ``on_payload`` returned ``replaced``."""
        return replaced

    def encode(self, body: JSONValue) -> bytes:
        """The request body's bytes."""
        return json_stringify(body).encode()

    def start(self, response: httpx.Response) -> None:  # noqa: B027  # optional hook
        """The response headers arrived and the start event was pushed."""

    def event_decoder(self) -> EventDecoder:
        """The decoder of the body (default: :class:`SSEDecoder` with
        :attr:`dispatch_at_eof` and ``options.max_event_size``)."""
        max_event_size = self.options.max_event_size
        if max_event_size is None:
            return SSEDecoder(dispatch_at_eof=self.dispatch_at_eof)
        return SSEDecoder(dispatch_at_eof=self.dispatch_at_eof, max_event_size=max_event_size)

    @abstractmethod
    def handle_sse(self, sse: ServerSentEvent) -> bool:
        """Handle one SSE event; ``True`` at the API's terminal event (the body is not
        read further)."""

    def handle_complete(self, body: JSONValue) -> None:
        """Handle a JSON body that answered the streaming request (a server that does
        not stream). The default refuses it."""
        msg = (
            f"{self.api_label}: the server answered the streaming request with a JSON "
            f"body that is not a response: {_excerpt(json_stringify(body))}"
        )
        raise ProviderFailure(msg)

    def end_of_events(self, terminal: bool) -> None:  # noqa: B027  # optional hook
        """The body is over (``terminal``: the API's terminal event was seen)."""

    def close_blocks(self) -> None:  # noqa: B027  # optional hook
        """After the events (normal end or abort): end the blocks still open."""

    @abstractmethod
    def check_end(self) -> None:
        """pi-ai's checks once the events are over (raise :class:`ProviderFailure`)."""

    def final_message(self) -> AssistantMessage:
        """The message of the ``done`` event."""
        return self.output.snapshot()

    def error_text(self, exc: Exception) -> str:
        """The ``errorMessage`` of a failure."""
        return str(exc) or type(exc).__name__

    def before_failure(self) -> None:  # noqa: B027  # optional hook
        """Just before the ``error`` event of a failure or an abort."""


def exchange_stream(
    make: Callable[[AssistantMessageEventStream, PartialMessage, Model, StreamOptions], Exchange],
    client: httpx.AsyncClient,
    model: Model,
    options: StreamOptions,
    *,
    template: AssistantMessage | None = None,
    abort_message: str = ABORTED_AFTER_HEADERS,
) -> AssistantMessageEventStream:
    """The stream of one request: ``make(stream, output, model, options)`` builds the
    API's :class:`Exchange` when the stream is opened, then :func:`run_exchange` runs.

    ``template`` (default: the empty message of ``model``) and ``abort_message`` are
    what the stream reports if its producer never gets to push an event."""
    output = PartialMessage(model)

    async def produce(stream: AssistantMessageEventStream) -> None:
        await run_exchange(make(stream, output, model, options), client)

    return AssistantMessageEventStream(
        produce,
        template=output.snapshot() if template is None else template,
        abort_message=abort_message,
    )


def _signal_scope(options: StreamOptions) -> AbstractContextManager[object]:
    # The loop cancels the producer on abort; a caller that only flips the signal gets
    # the same behaviour through the signal's own cancel scope.
    signal = options.signal
    return signal.cancel_scope() if signal is not None else nullcontext()


def _aborted(options: StreamOptions) -> bool:
    return options.signal is not None and options.signal.aborted


@final
@attrs.define(eq=False)
class RequestPhase:
    """How far a request got: pi-ai says ``Request aborted`` for an abort before the
    response headers arrive, ``Request was aborted`` after."""

    headers_received: bool = False


@contextmanager
def settle(
    stream: AssistantMessageEventStream,
    output: PartialMessage,
    options: StreamOptions,
    *,
    error_text: Callable[[Exception], str],
    before_failure: Callable[[RequestPhase, bool], None] | None = None,
    aborted_after_headers: str = ABORTED_AFTER_HEADERS,
) -> Iterator[RequestPhase]:
    """Run a request's block; what it raises becomes the stream's final ``error`` event.

    - ``trio.Cancelled`` (``stream.cancel()``, the agent's abort, or ``options.signal``
      aborted: the block runs in the signal's cancel scope): an ``aborted`` event, then
      the cancellation goes on;
    - any other exception: an ``error`` event (``aborted`` when the signal is aborted,
      or for a :class:`ProviderFailure` with that reason) whose text is
      ``error_text(exc)``.

    ``before_failure(phase, cancelled)`` runs just before either event;
    ``aborted_after_headers`` is the text of an abort once the headers arrived.
    """
    phase = RequestPhase()
    try:
        with _signal_scope(options):
            try:
                yield phase
            except trio.Cancelled:
                # Report the abort as data, then let the cancellation go on (push()
                # never blocks).
                if before_failure is not None:
                    before_failure(phase, True)
                text = aborted_after_headers if phase.headers_received else ABORTED_BEFORE_HEADERS
                push_failure(stream, output, "aborted", text)
                raise
    except Exception as exc:
        if before_failure is not None:
            before_failure(phase, False)
        reason: Literal["error", "aborted"] = "aborted" if _aborted(options) else "error"
        if isinstance(exc, ProviderFailure) and exc.reason == "aborted":
            reason = "aborted"
        push_failure(stream, output, reason, error_text(exc))


async def run_exchange(exchange: Exchange, client: httpx.AsyncClient) -> None:
    """Run one request to its final ``done`` or ``error`` event (never raises, except
    ``trio.Cancelled`` after its ``aborted`` event)."""
    stream, output, options = exchange.stream, exchange.output, exchange.options

    def before_failure(phase: RequestPhase, cancelled: bool) -> None:
        if cancelled and phase.headers_received:
            exchange.close_blocks()
        exchange.before_failure()

    with settle(
        stream,
        output,
        options,
        error_text=exchange.error_text,
        before_failure=before_failure,
        aborted_after_headers=exchange.aborted_after_headers,
    ) as phase:
        request = exchange.build_request()
        body = request.body
        if options.on_payload is not None:
            replaced = await maybe_await(options.on_payload(body, exchange.model))
            if replaced is not None:
                body = exchange.replace_payload(replaced)
        request = await exchange.authorize(client, request)
        try:
            response = await exchange.send(
                client, request, None if body is None else exchange.encode(body)
            )
        except APIError as exc:
            if options.on_error_response is not None and exc.status is not None:
                headers = dict(exc.headers.items()) if exc.headers is not None else {}
                options.on_error_response(exc.status, headers, exchange.model)
            raise
        phase.headers_received = True
        try:
            await call_on_response(options, response, exchange.model)
            stream.push(StartEvent(partial=output.snapshot()))
            exchange.start(response)
            async with open_body(response) as chunks:
                await read_body(exchange, response, chunks)
                exchange.close_blocks()
                if _aborted(options):
                    raise ProviderFailure(ABORTED_AFTER_HEADERS)
                exchange.check_end()
                message = exchange.final_message()
                stream.push(DoneEvent(reason=message.stop_reason, message=message))  # type: ignore[arg-type]  # stop, length, toolUse or deferred here
                await _drain(chunks)
        finally:
            await close_response(response)


async def call_on_response(options: StreamOptions, response: httpx.Response, model: Model) -> None:
    """``options.on_response(status, headers, model)`` once the headers arrived."""
    if options.on_response is not None:
        await maybe_await(
            options.on_response(response.status_code, dict(response.headers.items()), model)
        )


def push_failure(
    stream: AssistantMessageEventStream,
    output: PartialMessage,
    reason: Literal["error", "aborted"],
    text: str,
) -> None:
    """End the stream with an ``error`` event built from ``output``."""
    output.stop_reason = reason
    output.error_message = text
    stream.push(ErrorEvent(reason=reason, error=output.snapshot()))


async def send_request(
    client: httpx.AsyncClient,
    request: HttpRequest,
    content: bytes | None,
    options: StreamOptions,
    *,
    error_member: str | None = "error",
    body_fallback: bool = False,
) -> httpx.Response:
    """Send ``request`` with ``content`` as its body, with pi-ai's retries and the SDKs'
    header timeout; returns the open 2xx response (the caller closes it).

    Raises:
        APIError: an HTTP error status, a connection error or a timeout, once the
            retries are used up.
        RetryDelayTooLongError: the server asked for a retry delay over the limit.
    """

    async def send_once() -> httpx.Response:
        http_request = client.build_request(
            request.method, request.url, headers=request.headers, content=content
        )
        return await send_streaming(
            client,
            http_request,
            timeout_ms=None if options.timeout is None else options.timeout * 1000,
            error_member=error_member,
            body_fallback=body_fallback,
        )

    max_delay = options.max_retry_delay
    return await send_with_retries(
        send_once,
        max_retries=options.max_retries,
        max_retry_delay_ms=None if max_delay is None else max_delay * 1000,
    )


def idle_timeout(options: StreamOptions) -> float:
    """The idle timeout of ``options`` in seconds (``inf``: none)."""
    value = options.idle_timeout
    if value is None:
        return DEFAULT_IDLE_TIMEOUT
    return math.inf if value <= 0 else float(value)


def _idle_failure(exchange: Exchange, seconds: float) -> ProviderFailure:
    return ProviderFailure(
        f"{exchange.api_label} stream stalled: no data for {seconds:g} s "
        "(StreamOptions.idle_timeout; the server may have hung)"
    )


def _is_json(response: httpx.Response) -> bool:
    content_type = str(response.headers.get("content-type", ""))
    return content_type.split(";")[0].strip().lower() == "application/json"


_DRAIN_GRACE: Final = 1.0
"""Seconds the body may take to end after the terminal event (the message is already
done); a body that ends is what lets httpx put the connection back in its pool."""
_DRAIN_LIMIT: Final = 1 << 16
"""Bytes read after the terminal event, at most, before the connection is dropped."""


async def _drain(chunks: AsyncIterator[bytes]) -> None:
    """Read what follows the terminal event (usually nothing but the end of the chunked
    body) for at most :data:`_DRAIN_GRACE` seconds, so the connection can be reused; a
    server that does not end the body in time only costs its connection."""
    received = 0
    with trio.move_on_after(_DRAIN_GRACE):
        try:
            async for chunk in chunks:
                received += len(chunk)
                if received > _DRAIN_LIMIT:
                    return
        except httpx.TransportError:
            return


async def read_body(
    exchange: Exchange, response: httpx.Response, chunks: AsyncIterator[bytes]
) -> None:
    """Feed the body to ``exchange``: SSE events one by one, or a whole JSON body.

    Each read may wait at most the idle timeout; reading stops at the API's terminal
    event (the message is finished without waiting for the server to end the body).
    """
    idle = idle_timeout(exchange.options)
    decoder = exchange.event_decoder()
    # A JSON body: labelled so, and starting like JSON (a mislabelled event stream is
    # still read as one).
    maybe_json = _is_json(response)
    is_json = False
    received: list[bytes] = []
    terminal = False
    try:
        # One scope whose deadline moves on after each chunk (cheaper than a scope
        # per read); only the awaits for the next chunk can be cancelled by it.
        with trio.CancelScope(deadline=trio.current_time() + idle) as idle_scope:
            async for chunk in chunks:
                idle_scope.deadline = trio.current_time() + idle
                if maybe_json and not received:
                    start = chunk.lstrip()[:1]
                    if not start:
                        continue  # only whitespace so far
                    is_json = start in (b"{", b"[")
                    maybe_json = is_json
                if is_json:
                    received.append(chunk)
                else:
                    for sse in decoder.feed(chunk):
                        if exchange.handle_sse(sse):
                            terminal = True
                            break
                    if terminal:
                        break
        if idle_scope.cancelled_caught:
            raise _idle_failure(exchange, idle)
    except httpx.TransportError as exc:
        # The connection broke mid-body (Node's fetch says "terminated").
        raise ProviderFailure(str(exc) or "terminated") from exc
    if is_json:
        _handle_json_body(exchange, b"".join(received))
        return
    if not terminal:
        for sse in decoder.flush():
            if exchange.handle_sse(sse):
                terminal = True
                break
    exchange.end_of_events(terminal)


def _handle_json_body(exchange: Exchange, raw: bytes) -> None:
    text = raw.decode("utf-8", "replace")
    try:
        body = json_parse(text)
    except ValueError as exc:
        msg = (
            f"{exchange.api_label}: the server answered the streaming request with "
            f"invalid JSON ({exc}): {_excerpt(text)}"
        )
        raise ProviderFailure(msg) from None
    if isinstance(body, dict) and body.get("error"):
        error = body["error"]
        detail = error.get("message") if isinstance(error, dict) else None
        text = detail if isinstance(detail, str) else json_stringify(error)
        msg = f"{exchange.api_label}: the server answered with an error: {text}"
        raise ProviderFailure(msg)
    exchange.handle_complete(body)


def _excerpt(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... [{len(text) - limit} more chars]"
