"""The ``bedrock-converse-stream`` API: Amazon Bedrock's ``ConverseStream`` (pi-ai 0.85.0).

A port of pi-ai's ``api/bedrock-converse-stream.js`` (``streamSimple``) together with
what ``@aws-sdk/client-bedrock-runtime`` 3.1048.0 does under it, on pitrio's shared
``httpx`` client (so an abort cancels the request like any other):

1. resolve the options as ``streamSimple`` does (``_payload.resolve_reasoning``);
2. build the command input (``_payload.build_payload``; ``on_payload`` sees and may
   replace it);
3. resolve the credentials, region and endpoint (``_auth``): a Bedrock bearer token, or
   AWS keys from the environment, a profile of the shared files or botocore's credential
   chain, signed with SigV4;
4. ``POST <endpoint>/model/<modelId>/converse-stream`` with the SDK's headers
   (``amz-sdk-invocation-id``, ``amz-sdk-request: attempt=N; max=3``), retried as the
   SDK's standard retry strategy does: three attempts, throttling (429,
   ``ThrottlingException``, ...) after ``random() * 1 s * 2^n``, transient and server
   errors (5xx, connection failures) after ``random() * 50 ms * 2^n``, each attempt
   signed anew;
5. read the binary event stream (``_events``): text, reasoning (text, signature,
   encrypted ``redactedContent``) and tool-use blocks, the stop reason and the usage;
6. end with ``done``, or ``error``: an HTTP error or an exception message is
   ``<prefix>: <message>`` (``Throttling error``, ``Validation error``, ...) with a
   ``bedrock_response_failure`` diagnostic (status, error code, request id); an abort
   is ``Request aborted`` before the headers and ``aborted`` after (the SDK's text),
   with no ``*_end`` events for the open blocks.

It needs botocore (``pip install 'pitrio[bedrock]'``) for SigV4 and the event-stream
parser. Options beyond :class:`~pitrio.StreamOptions`' own, in ``options.extra``:
``env`` (variables read before the process environment), ``region``, ``profile``,
``bearerToken``, ``thinkingDisplay``, ``interleavedThinking``, ``requestMetadata``.
Deliberate differences from pi-ai: ``docs/deviations.md`` ("bedrock-converse-stream").
"""

from __future__ import annotations

import hashlib
import importlib.util
import platform
import random
import uuid
from functools import partial
from typing import Final, final
from urllib.parse import quote

import httpx
import trio

from ..._messages import JSONValue
from ..._model import Context, Model, StreamOptions
from ..._stream import AssistantMessageEventStream
from .._http import APIConnectionError, APIError, merge_headers, send_streaming
from .._json import json_parse, json_stringify
from .._output import PartialMessage, now_ms
from .._request import (
    ABORTED_BEFORE_HEADERS,
    EventDecoder,
    Exchange,
    HttpRequest,
    ProviderFailure,
    exchange_stream,
)
from .._sse import ServerSentEvent
from ._auth import BedrockAuth, CredentialsError, resolve_auth, sign_sigv4
from ._events import BedrockError, ConverseHandler, EventStreamDecoder
from ._payload import build_payload, request_body

__all__ = ["stream_bedrock_converse_stream"]

MAX_ATTEMPTS: Final = 3
"""The SDK's standard retry strategy: three attempts in all."""

_THROTTLING_CODES: Final = frozenset(
    {
        "BandwidthLimitExceeded",
        "EC2ThrottledException",
        "LimitExceededException",
        "PriorRequestNotComplete",
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
        "RequestThrottled",
        "RequestThrottledException",
        "SlowDown",
        "ThrottledException",
        "Throttling",
        "ThrottlingException",
        "TooManyRequestsException",
        "TransactionInProgressException",
    }
)
_TRANSIENT_CODES: Final = frozenset({"TimeoutError", "RequestTimeout", "RequestTimeoutException"})

_PREFIXES: Final = {
    "InternalServerException": "Internal server error",
    "ModelStreamErrorException": "Model stream error",
    "ValidationException": "Validation error",
    "ThrottlingException": "Throttling error",
    "ServiceUnavailableException": "Service unavailable",
}
"""pi-ai's ``BEDROCK_ERROR_PREFIXES`` (agent-level retries match these texts)."""

_DATA_RETENTION_DOCS: Final = (
    "https://docs.aws.amazon.com/bedrock/latest/userguide/data-retention.html"
)
_RESERVED_HEADERS: Final = frozenset({"authorization", "host"})
_REQUEST_ID_HEADERS: Final = ("x-amzn-requestid", "x-amzn-request-id", "x-amz-request-id")


def _user_agent() -> str:
    from ... import __version__

    return f"pitrio/{__version__} lang/python#{platform.python_version()} api/bedrock-runtime"


def _retry_delay(attempt: int, throttling: bool) -> float:
    """Seconds before retry ``attempt`` (0-based): the SDK's ``computeNextBackoffDelay``."""
    base = 1.0 if throttling else 0.05
    return random.random() * min(base * 2.0**attempt, 20.0)  # jitter, not secrecy


def _diagnostic_value(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    trimmed = value.strip()
    return trimmed if trimmed and len(trimmed) <= 200 else None


def _request_id(headers: httpx.Headers | None) -> str | None:
    if headers is None:
        return None
    for name in _REQUEST_ID_HEADERS:
        if name in headers:
            return headers[name]
    return None


def _error_code(headers: httpx.Headers | None, body: JSONValue) -> str | None:
    """The SDK's ``loadRestJsonErrorCode``: ``x-amzn-errortype``, else the body's
    ``code`` or ``__type``; namespace and URI suffixes cut off."""

    def sanitize(value: str) -> str:
        cleaned = value.split(",")[0]
        cleaned = cleaned.split(":")[0] if ":" in cleaned else cleaned
        return cleaned.split("#")[-1]

    header = headers.get("x-amzn-errortype") if headers is not None else None
    if header:
        return sanitize(header)
    if isinstance(body, dict):
        for key in ("code", "__type"):
            value = body.get(key)
            if isinstance(value, str) and value:
                return sanitize(value)
    return None


def _http_error(exc: APIError) -> Exception:
    """An HTTP error response as the SDK reports it: a :class:`BedrockError` for a JSON
    body; a ``<status>: <body>`` failure for a body that is not JSON (pi-ai shows the
    SDK's JSON parse error there)."""
    text = exc.body_text or ""
    request_id = _request_id(exc.headers)
    try:
        body: JSONValue = json_parse(text) if text.strip() else {}
    except ValueError:
        return BedrockError(
            "Error",
            f"{exc.status}: {text.strip()[:4000]}",
            service=False,
            status=exc.status,
            request_id=request_id,
        )
    code = _error_code(exc.headers, body) or "UnknownError"
    message = None
    if isinstance(body, dict):
        message = body.get("message") or body.get("Message")
    return BedrockError(
        code,
        message if isinstance(message, str) else code,
        status=exc.status,
        request_id=request_id,
    )


def _retryable(error: Exception) -> tuple[bool, bool]:
    """``(retryable, throttling)`` as the SDK's error classification says."""
    if isinstance(error, BedrockError):
        if error.status == 429 or error.name in _THROTTLING_CODES:
            return True, True
        if error.name in _TRANSIENT_CODES:
            return True, False
        return error.status is not None and 500 <= error.status <= 599, False
    return isinstance(error, APIConnectionError), False


@final
class _BedrockExchange(Exchange):
    """One ``ConverseStream`` request (``providers/_request.py`` runs it)."""

    api_label = "Bedrock"
    aborted_after_headers = "aborted"

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
        self._handler = ConverseHandler(stream, output, model)
        self._payload: JSONValue = None
        self._response_request_id: str | None = None

    def build_request(self) -> HttpRequest:
        if importlib.util.find_spec("botocore") is None:
            msg = (
                "The bedrock-converse-stream API needs botocore (SigV4 and the AWS "
                "event-stream): pip install 'pitrio[bedrock]'"
            )
            raise ProviderFailure(msg)
        self._payload = build_payload(self.model, self._context, self.options)
        # The URL and the signed headers are made per attempt (send()).
        return HttpRequest(url="", headers={}, body=self._payload)

    def replace_payload(self, replaced: JSONValue) -> JSONValue:
        self._payload = replaced
        return replaced

    def encode(self, body: JSONValue) -> bytes:
        return json_stringify(request_body(body)).encode()

    def _url(self, auth: BedrockAuth) -> str:
        model_id = self._payload.get("modelId") if isinstance(self._payload, dict) else None
        model_id = model_id if isinstance(model_id, str) else self.model.id
        return f"{auth.endpoint}/model/{quote(model_id, safe='')}/converse-stream"

    def _headers(
        self, auth: BedrockAuth, url: str, content: bytes, attempt: int, invocation: str
    ) -> dict[str, str]:
        headers = {
            "content-type": "application/json",
            "x-amz-user-agent": _user_agent(),
            "user-agent": _user_agent(),
            "amz-sdk-invocation-id": invocation,
            "amz-sdk-request": f"attempt={attempt}; max={MAX_ATTEMPTS}",
        }
        for name, value in merge_headers(self.options.headers).items():
            lower = name.lower()
            if lower not in _RESERVED_HEADERS and not lower.startswith("x-amz-"):
                headers[lower] = value
        if auth.kind == "bearer":
            headers["authorization"] = f"Bearer {auth.token}"
            return headers
        assert auth.credentials is not None
        headers["x-amz-content-sha256"] = hashlib.sha256(content).hexdigest()
        headers["content-length"] = str(len(content))
        signed = sign_sigv4("POST", url, headers, content, auth.credentials, auth.region)
        signed.pop("content-length", None)
        return signed

    async def send(
        self, client: httpx.AsyncClient, request: HttpRequest, content: bytes | None
    ) -> httpx.Response:
        auth = await resolve_auth(self.model, self.options)
        body = content or b""
        url = self._url(auth)
        invocation = str(uuid.uuid4())
        timeout_ms = None if self.options.timeout is None else self.options.timeout * 1000
        attempt = 1
        while True:
            http_request = client.build_request(
                "POST",
                url,
                headers=self._headers(auth, url, body, attempt, invocation),
                content=body,
            )
            # The SDK sends no Accept header (httpx's client default is */*).
            http_request.headers.pop("accept", None)
            try:
                response = await send_streaming(client, http_request, timeout_ms=timeout_ms)
            except APIError as exc:
                error = _http_error(exc) if exc.status is not None else exc
                retryable, throttling = _retryable(error)
                if not retryable or attempt >= MAX_ATTEMPTS:
                    if self.options.on_error_response is not None and exc.status is not None:
                        headers = dict(exc.headers.items()) if exc.headers is not None else {}
                        self.options.on_error_response(exc.status, headers, self.model)
                    raise error from exc
                await trio.sleep(_retry_delay(attempt - 1, throttling))
                attempt += 1
                continue
            self._response_request_id = _diagnostic_value(_request_id(response.headers))
            return response

    def event_decoder(self) -> EventDecoder:
        limit = self.options.max_event_size
        return EventStreamDecoder() if limit is None else EventStreamDecoder(max_event_size=limit)

    def handle_sse(self, sse: ServerSentEvent) -> bool:
        self._handler.handle(sse)
        return False

    def close_blocks(self) -> None:
        self._handler.finalize()

    def check_end(self) -> None:
        output = self.output
        if output.stop_reason == "pending":
            msg = "Bedrock stream ended without a stop reason"
            raise ProviderFailure(msg)
        if output.stop_reason in ("error", "aborted"):
            raise ProviderFailure(output.error_message or "An unknown error occurred")

    def before_failure(self) -> None:
        self._handler.finalize()

    def error_text(self, exc: Exception) -> str:
        """pi-ai's ``formatBedrockError``; a failure that is not an abort also gets its
        ``bedrock_response_failure`` diagnostic (pi-ai's ``appendBedrockFailureDiagnostic``)."""
        if isinstance(exc, BedrockError):
            core = exc.message
        elif isinstance(exc, CredentialsError | ProviderFailure | APIError):
            core = str(exc)
        else:
            core = super().error_text(exc)
        hint = (
            f" See {_DATA_RETENTION_DOCS} for supported data retention modes."
            if "data retention mode" in core.lower()
            else ""
        )
        signal = self.options.signal
        if signal is None or not signal.aborted:
            self._add_diagnostic(exc)
        if isinstance(exc, BedrockError) and exc.service:
            return f"{_PREFIXES.get(exc.name, exc.name)}: {core}{hint}"
        return f"{core}{hint}"

    def _add_diagnostic(self, exc: Exception) -> None:
        details: dict[str, JSONValue] = {}
        status = exc.status if isinstance(exc, BedrockError | APIError) else None
        if isinstance(status, int):
            details["status"] = status
        name = exc.name if isinstance(exc, BedrockError) else None
        if name is not None and name.endswith("Exception"):
            code = _diagnostic_value(name)
            if code is not None:
                details["errorCode"] = code
        request_id = (
            _diagnostic_value(exc.request_id) if isinstance(exc, BedrockError) else None
        ) or self._response_request_id
        if request_id is not None:
            details["requestId"] = request_id
        if not details:
            return
        diagnostic: JSONValue = {
            "type": "bedrock_response_failure",
            "timestamp": now_ms(),
            "details": details,
        }
        self.output.diagnostics = (*(self.output.diagnostics or ()), diagnostic)


def stream_bedrock_converse_stream(
    client: httpx.AsyncClient, model: Model, context: Context, options: StreamOptions
) -> AssistantMessageEventStream:
    """Stream one Bedrock ``ConverseStream`` response as pi-ai 0.85.0's ``streamSimple``
    does.

    Returns at once; the request is made by the stream's producer when the stream is
    opened (``async with``). Failures end the stream with an ``error`` event; cancelling
    the producer ends it with stop reason ``aborted``. The response is closed on every
    path.

    Args:
        client: the HTTP client (its connection pool is reused across requests).
        model: a ``bedrock-converse-stream`` model; ``model.base_url`` is the runtime
            endpoint (``https://bedrock-runtime.us-east-1.amazonaws.com``) or a proxy's.
        context: system prompt, messages and tools.
        options: ``api_key`` (a Bedrock bearer token; ``"<authenticated>"`` or none:
            AWS credentials), ``reasoning``, ``thinking_budgets``, ``max_tokens``,
            ``temperature``, ``tool_choice`` (``auto``, ``any``, ``none``, or
            ``{"type": "tool", "name": ...}``), ``cache_retention``, ``headers``,
            ``timeout``, ``on_payload``, ``on_response``, and ``extra`` (see the module).
    """
    return exchange_stream(
        partial(_BedrockExchange, context=context),
        client,
        model,
        options,
        abort_message=ABORTED_BEFORE_HEADERS,
    )
