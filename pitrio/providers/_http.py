"""One HTTP request as the vendor SDKs send it: errors, sending, retries, headers.

pi-ai 0.85.0 sends through the OpenAI and Anthropic SDKs; this module reproduces the
part of them (and of pi-ai's wrappers) that shows in the events:

- the error classes and their texts: :class:`APIError` (the SDKs' ``APIError`` and
  ``makeMessage``), :class:`APIConnectionError`, :class:`APIConnectionTimeoutError`,
  :class:`RetryDelayTooLongError`, :class:`MissingApiKeyError`; :func:`api_status_error`
  (the SDKs' ``makeStatusError`` for a non-2xx response) and
  :func:`format_provider_error` (pi-ai's ``normalizeProviderError`` +
  ``formatProviderError``, ``utils/error-body.js``);
- sending: :func:`send_streaming` (one request, the headers timeout, status errors),
  :func:`open_body` and :func:`close_response` (the body read and closed under Trio);
- retries: :func:`send_with_retries` (pi-ai's ``retryProviderRequest``,
  ``utils/provider-retry.js``), :func:`is_retryable`, :func:`retry_delay_ms`;
- headers and auth: :func:`merge_headers` (the SDKs' ``buildHeaders``),
  :func:`pi_user_agent`, :func:`require_api_key`.

:mod:`._request` runs these for every API; an API module only names the error member
of its error bodies.
"""

from __future__ import annotations

import math
import platform
import random
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from email.utils import parsedate_to_datetime
from typing import Final, cast

import httpx
import trio

from .._errors import ProviderError
from .._messages import JSONValue
from ._json import JS_WHITESPACE, js_truthy, json_parse, json_stringify

__all__ = [
    "DEFAULT_MAX_RETRY_DELAY_MS",
    "DEFAULT_TIMEOUT_MS",
    "APIConnectionError",
    "APIConnectionTimeoutError",
    "APIError",
    "MissingApiKeyError",
    "RetryDelayTooLongError",
    "api_status_error",
    "close_response",
    "format_provider_error",
    "is_retryable",
    "merge_headers",
    "open_body",
    "pi_user_agent",
    "require_api_key",
    "retry_delay_ms",
    "send_streaming",
    "send_with_retries",
]

DEFAULT_MAX_RETRY_DELAY_MS: Final = 60_000
"""pi-ai's cap on a server-requested retry delay (``maxRetryDelayMs``; 0 disables it)."""

DEFAULT_TIMEOUT_MS: Final = 600_000
"""The SDKs' default request timeout (covers only the wait for the response headers)."""

_MAX_ERROR_BODY_CHARS: Final = 4000


class APIError(ProviderError):
    """An SDK-style API error (the OpenAI and Anthropic SDKs' ``APIError``).

    Attributes:
        status: the HTTP status, ``None`` for connection errors and errors in a stream.
        headers: the response headers, when there was a response.
        error: the decoded error object (OpenAI: the body's ``error`` member;
            Anthropic: the whole body; a stream's ``error`` member).
        message: the SDK's message text (also ``str(exc)``).
        body_text: an HTTP error's body as text (``None`` for other errors).
        reason: an HTTP error's reason phrase (``statusText``; ``""`` when none).
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        headers: httpx.Headers | None = None,
        error: JSONValue = None,
        body_text: str | None = None,
        reason: str = "",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.headers = headers
        self.error = error
        self.body_text = body_text
        self.reason = reason

    @staticmethod
    def make_message(status: int | None, error: JSONValue, message: str | None) -> str:
        """The SDKs' ``APIError.makeMessage``."""
        text: str | None
        field = error.get("message") if isinstance(error, dict) else None
        if js_truthy(field):
            text = field if isinstance(field, str) else json_stringify(field)
        elif js_truthy(error):
            text = json_stringify(error)
        else:
            text = message
        if status and text:
            return f"{status} {text}"
        if status:
            return f"{status} status code (no body)"
        if text:
            return text
        return "(no status code or body)"


class APIConnectionError(APIError):
    """No response: the connection failed (``Connection error.``)."""

    def __init__(self, message: str = "Connection error.") -> None:
        super().__init__(message)


class APIConnectionTimeoutError(APIConnectionError):
    """The response headers did not arrive in time (``Request timed out.``)."""

    def __init__(self, message: str = "Request timed out.") -> None:
        super().__init__(message)


class RetryDelayTooLongError(ProviderError):
    """The server asked for a retry delay above ``StreamOptions.max_retry_delay``."""


class MissingApiKeyError(ProviderError):
    """No API key and no authorization header (``No API key for provider: <name>``)."""


def api_status_error(
    status: int,
    headers: httpx.Headers,
    body_text: str,
    *,
    error_member: str | None = "error",
    body_fallback: bool = False,
    reason: str = "",
) -> APIError:
    """The SDKs' error for a non-2xx response (``makeStatusError``).

    Args:
        status: the HTTP status.
        headers: the response headers.
        body_text: the response body as text.
        error_member: the body member that is the error object (OpenAI SDK:
            ``"error"``); ``None`` for the whole body (Anthropic SDK).
        body_fallback: when a JSON object body lacks ``error_member``, use the whole
            body as the error object instead of losing it (the OpenAI SDK then says
            ``<status> status code (no body)``; pitrio's openai-completions does not).
        reason: the response's reason phrase, kept on the error (``APIError.reason``).
    """
    try:
        body: JSONValue = json_parse(body_text)
        parsed = True
    except ValueError:
        body, parsed = None, False
        # A server that streams its error (an SSE body): its event's JSON is the body,
        # not the raw stream.
        event_body = _sse_error_body(body_text)
        if event_body is not None:
            body, parsed = event_body, True
    message = None if parsed and js_truthy(body) else body_text
    if error_member is None:
        error = body
    else:
        error = body.get(error_member) if isinstance(body, dict) else None
        if body_fallback and error is None and isinstance(body, dict) and body:
            error = body
    return APIError(
        APIError.make_message(status, error, message),
        status=status,
        headers=headers,
        error=error,
        body_text=body_text,
        reason=reason,
    )


def _sse_error_body(text: str) -> JSONValue:
    """The JSON of the first SSE event of ``text`` that has an ``error`` member (else of
    its first JSON object event); ``None`` when ``text`` is not an SSE stream of JSON."""
    if "data:" not in text:
        return None
    from ._sse import SSEDecoder  # _sse is a leaf; kept out of import time

    decoder = SSEDecoder(dispatch_at_eof=True)
    events = [*decoder.feed(text.encode()), *decoder.flush()]
    first: JSONValue = None
    for event in events:
        try:
            value = json_parse(event.data)
        except ValueError:
            continue
        if isinstance(value, dict):
            if js_truthy(value.get("error")):
                return value
            if first is None:
                first = value
    return first


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [truncated {len(text) - limit} chars]"


def format_provider_error(error: BaseException, prefix: str | None = None) -> str:
    """The display text of a provider failure (``normalizeProviderError`` +
    ``formatProviderError``): ``<status>: <body>`` (or ``<prefix> (<status>): <body>``)
    when the SDK message lost the body, else the message itself."""
    message = str(error)
    status = error.status if isinstance(error, APIError) else None
    body: str | None = None
    if isinstance(error, APIError) and isinstance(error.error, dict) and error.error:
        trimmed = json_stringify(error.error).strip(JS_WHITESPACE)
        if trimmed:
            body = _truncate(trimmed, _MAX_ERROR_BODY_CHARS)
    carries_body = body is None or body in message
    if carries_body or status is None or body is None:
        if prefix is not None and status is not None:
            return f"{prefix} ({status}): {message}"
        return message
    if prefix is not None:
        return f"{prefix} ({status}): {body}"
    return f"{status}: {body}"


# ---------------------------------------------------------------------------------------
# HTTP


def merge_headers(*layers: Mapping[str, str | None] | None) -> dict[str, str]:
    """Merge header layers; later layers win case-insensitively and ``None`` removes a
    header (the SDKs' ``buildHeaders``). Names keep the casing of their last setter."""
    merged: dict[str, tuple[str, str]] = {}
    for layer in layers:
        if not layer:
            continue
        for name, value in layer.items():
            key = name.lower()
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = (name, value)
    return dict(merged.values())


_ARCH: Final = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "i386": "ia32", "i686": "ia32"}


def pi_user_agent() -> str:
    """pi-ai's ``User-Agent``: ``pi (<platform> <release>; <arch>)``."""
    system = platform.system().lower() or "unknown"
    system = {"windows": "win32"}.get(system, system)
    machine = platform.machine().lower()
    return f"pi ({system} {platform.release()}; {_ARCH.get(machine, machine)})"


async def close_response(response: httpx.Response) -> None:
    """Close a streamed response even while the caller is being cancelled."""
    with trio.CancelScope(shield=True), trio.move_on_after(5):
        await response.aclose()


@asynccontextmanager
async def open_body(response: httpx.Response) -> AsyncIterator[AsyncIterator[bytes]]:
    """The body chunks of a streamed response (decoded), closed properly however the
    iteration ends.

    ``contextlib.aclosing(response.aiter_bytes())`` is not enough under Trio: when the
    consumer stops between two chunks (a parse error, an ``error`` chunk), httpx's and
    httpcore's nested async generators are left suspended and Trio warns
    (``ResourceWarning``) when they are garbage collected. On exit this closes the
    response first and then runs the generator chain to its end (the closed connection
    makes it raise), so every generator finishes; it also closes the response.
    """
    # aiter_bytes(): content-encoding (gzip, deflate) decoded, as fetch() does for pi-ai.
    chunks = cast("AsyncGenerator[bytes, None]", response.aiter_bytes())
    try:
        yield chunks
    finally:
        with trio.CancelScope(shield=True):
            await response.aclose()
            with trio.move_on_after(1):
                try:
                    while True:
                        await chunks.__anext__()
                except (Exception, trio.Cancelled):
                    pass
            await chunks.aclose()


async def send_streaming(
    client: httpx.AsyncClient,
    request: httpx.Request,
    *,
    timeout_ms: float | None = None,
    error_member: str | None = "error",
    body_fallback: bool = False,
) -> httpx.Response:
    """Send one request as the SDKs do and return the open, streamed 2xx response.

    ``timeout_ms`` (default :data:`DEFAULT_TIMEOUT_MS`) bounds only the wait for the
    response headers. The caller must close the response (:func:`close_response`).

    Raises:
        APIConnectionTimeoutError: no headers in time.
        APIConnectionError: the connection failed.
        APIError: a non-2xx status (the body is read and decoded, see
            :func:`api_status_error` for ``error_member`` and ``body_fallback``).
    """
    limit = DEFAULT_TIMEOUT_MS if timeout_ms is None else timeout_ms
    response: httpx.Response | None = None
    try:
        with trio.move_on_after(max(limit, 0) / 1000):
            try:
                response = await client.send(request, stream=True)
            except _DEAD_CONNECTION_ERRORS as exc:
                if not _nothing_received(exc):
                    raise
                # A pooled connection the server had closed (a streamed reply without
                # "Connection: close"): nothing of the response arrived, so the request
                # is sent once more (httpx dropped that connection), whatever
                # max_retries says.
                response = await client.send(request, stream=True)
    except httpx.TimeoutException:
        raise APIConnectionTimeoutError from None
    except httpx.TransportError as exc:
        raise APIConnectionError(_connection_error_text(exc, request)) from exc
    if response is None:
        raise APIConnectionTimeoutError
    if 200 <= response.status_code < 300:
        return response
    try:
        try:
            raw = await response.aread()
            text = raw.decode("utf-8", "replace")
        except httpx.TransportError as exc:
            text = str(exc)
    finally:
        await close_response(response)
    raise api_status_error(
        response.status_code,
        response.headers,
        text,
        error_member=error_member,
        body_fallback=body_fallback,
        reason=response.reason_phrase,
    )


_DEAD_CONNECTION_ERRORS: Final = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)


def _nothing_received(exc: httpx.TransportError) -> bool:
    """Whether ``exc`` ended a request before any byte of the response arrived."""
    if isinstance(exc, httpx.RemoteProtocolError):
        return "without sending a response" in str(exc)
    return True  # a read or write error while sending or waiting for the status line


def _connection_error_text(exc: BaseException, request: httpx.Request) -> str:
    """pi-ai's ``Connection error.`` (``Request timed out.``), followed by the URL and
    the cause, which pi-ai leaves out."""
    if re.search(r"timed? ?out", f"{exc!r} {exc.__cause__!r}", re.IGNORECASE):
        return "Request timed out."
    cause = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    inner = exc.__cause__ or exc.__context__
    if inner is not None and str(inner) and str(inner) not in cause:
        cause += f" ({type(inner).__name__}: {inner})"
    return f"Connection error. {request.method} {request.url} failed: {cause}"


def is_retryable(error: BaseException) -> bool:
    """Whether pi-ai's ``retryProviderRequest`` retries this error."""
    if not isinstance(error, APIError):
        return False
    should_retry = error.headers.get("x-should-retry") if error.headers is not None else None
    if should_retry == "true":
        return True
    if should_retry == "false":
        return False
    if error.status is None:
        return True
    return error.status in (408, 409, 429) or error.status >= 500


_FLOAT_PREFIX: Final = re.compile(r"\s*([+-]?(?:Infinity|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?))")


def _parse_float(text: str) -> float:
    """JavaScript's ``Number.parseFloat`` (a numeric prefix, else NaN)."""
    match = _FLOAT_PREFIX.match(text)
    if match is None:
        return math.nan
    return float(str(match.group(1)).replace("Infinity", "inf"))


def retry_delay_ms(
    error: APIError, retry_index: int, max_retry_delay_ms: float | None = None
) -> float:
    """The back-off before retry number ``retry_index`` (0-based), in milliseconds.

    ``retry-after-ms`` (float ms), else ``retry-after`` (seconds or an HTTP date), else
    ``min(0.5 * 2**i, 8)`` seconds with up to 25 % jitter.

    Raises:
        RetryDelayTooLongError: the server asked for more than ``max_retry_delay_ms``
            (default 60 s; 0 disables the cap).
    """
    headers = error.headers
    retry_after_ms = headers.get("retry-after-ms") if headers is not None else None
    if retry_after_ms:
        value = _parse_float(retry_after_ms)
        if not math.isnan(value):
            return _check_server_delay(value, max_retry_delay_ms, str(error))
    retry_after = headers.get("retry-after") if headers is not None else None
    if retry_after:
        seconds = _parse_float(retry_after)
        if math.isnan(seconds):
            try:
                when = parsedate_to_datetime(retry_after)
                delay = when.timestamp() * 1000 - time.time() * 1000
            except (TypeError, ValueError, IndexError):
                delay = math.nan
        else:
            delay = seconds * 1000
        return _check_server_delay(delay, max_retry_delay_ms, str(error))
    exponential: float = min(0.5 * 2.0**retry_index, 8.0) * 1000
    return exponential * (1 - random.random() * 0.25)


def _check_server_delay(delay_ms: float, max_retry_delay_ms: float | None, message: str) -> float:
    limit = DEFAULT_MAX_RETRY_DELAY_MS if max_retry_delay_ms is None else max_retry_delay_ms
    if limit > 0 and delay_ms > limit:
        text = (
            f"Server requested {math.ceil(delay_ms / 1000)}s retry delay "
            f"(max: {math.ceil(limit / 1000)}s). {message}"
        )
        raise RetryDelayTooLongError(text)
    return 0.0 if math.isnan(delay_ms) else delay_ms


async def send_with_retries(
    send_once: Callable[[], Awaitable[httpx.Response]],
    *,
    max_retries: int | None = None,
    max_retry_delay_ms: float | None = None,
) -> httpx.Response:
    """Call ``send_once`` until it succeeds or fails for good (``retryProviderRequest``).

    Retries (``max_retries``, default 0) only :func:`is_retryable` errors, each time with
    a fresh identical request, sleeping :func:`retry_delay_ms` in between. Cancellation
    (the caller's abort) propagates as ``trio.Cancelled``; the provider reports it as
    ``Request aborted`` (``_request.ABORTED_BEFORE_HEADERS``).
    """
    total = max_retries or 0
    remaining = total
    while True:
        try:
            return await send_once()
        except APIError as exc:
            if remaining <= 0 or not is_retryable(exc):
                raise
            index = total - remaining
            remaining -= 1
            delay = retry_delay_ms(exc, index, max_retry_delay_ms)
        await trio.sleep(max(0.0, delay) / 1000)


def require_api_key(
    provider: str,
    api_key: str | None,
    headers: Mapping[str, str | None] | None,
    auth_headers: Sequence[str] = ("authorization", "cf-aig-authorization"),
) -> str:
    """The key to send: ``api_key``, or ``"unused"`` when a non-blank auth header is
    given (the header then authenticates).

    Raises:
        MissingApiKeyError: neither is there.
    """
    if api_key:
        return api_key
    for name, value in (headers or {}).items():
        if name.lower() in auth_headers and value is not None and value.strip():
            return "unused"
    msg = f"No API key for provider: {provider}"
    raise MissingApiKeyError(msg)
