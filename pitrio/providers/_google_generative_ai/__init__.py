"""The ``google-generative-ai`` API: Gemini's ``streamGenerateContent`` (pi-ai 0.85.0).

A port of pi-ai's ``api/google-generative-ai.js`` (``streamSimple``) and the parts of
``api/google-shared.js`` it uses, together with what ``@google/genai`` 1.52.0 does under
them: the request goes to ``<baseUrl>/models/<id>:streamGenerateContent?alt=sse`` with
the key in ``x-goog-api-key``, the body is the SDK's REST form of pi-ai's parameters
(``_payload``), and the response is framed and parsed as the SDK does (``_events``).

What the provider does, in order (everything runs in the stream's producer):

1. resolve the options: the max-tokens clamp, the thinking level or budget (Gemini 3 and
   Gemma 4 take a ``thinkingLevel``, Gemini 2.5 a ``thinkingBudget``);
2. build the body: ``contents`` from the history (thought signatures replayed only for
   the same provider and model, tool results merged into one user turn), the system
   instruction, the tools as ``parametersJsonSchema``, the function-calling mode;
3. send, retrying retryable failures (``options.max_retries``, default 0);
4. on a 2xx response push ``start``, then the events of each chunk (text and thinking
   blocks; each function call is a whole ``toolcall_start``/``_delta``/``_end``);
5. end the open block, then ``done``, or ``error`` (an error finish reason is
   ``Provider stopped with: <reason>``; no finish reason is ``Google stream ended without
   a finish reason``; an abort is ``Request aborted`` before the headers, ``Request was
   aborted`` after, with no ``*_end`` events for the open block).

HTTP errors read as the SDK's ``ApiError``: a JSON body is the text (re-serialized), any
other body becomes ``{"error":{"message":<body>,"code":<status>,"status":<reason>}}``.
Deliberate differences from pi-ai: ``docs/deviations.md`` ("google-generative-ai").
"""

from __future__ import annotations

from functools import partial
from typing import ClassVar

import httpx

from ..._messages import JSONValue
from ..._model import Context, Model, StreamOptions
from ..._stream import AssistantMessageEventStream
from .._http import APIError
from .._json import json_parse, json_stringify
from .._output import PartialMessage
from .._request import (
    ABORTED_BEFORE_HEADERS,
    EventDecoder,
    Exchange,
    HttpRequest,
    ProviderFailure,
    exchange_stream,
)
from .._sse import ServerSentEvent
from ._events import ChunkHandler, GoogleStreamDecoder
from ._payload import build_request

__all__ = ["build_request", "stream_google_generative_ai"]


def _status_error_text(exc: APIError) -> str:
    """The SDK's ``throwErrorIfNotOK`` message for an HTTP error."""
    body = exc.body_text if exc.body_text is not None else ""
    content_type = exc.headers.get("content-type", "") if exc.headers is not None else ""
    if "application/json" in content_type:
        try:
            return json_stringify(json_parse(body))
        except ValueError as parse_error:
            return str(parse_error)
    wrapped = {"error": {"message": body, "code": exc.status, "status": exc.reason}}
    return json_stringify(wrapped)


class _GoogleExchange(Exchange):
    """One ``streamGenerateContent`` request (``providers/_request.py`` runs it; the
    ``google-vertex`` API's exchange is this one with its own request)."""

    api_label = "Google"
    error_member = None
    no_finish_text: ClassVar[str] = "Google stream ended without a finish reason"

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
        self._handler = ChunkHandler(stream, output, model)

    def build_request(self) -> HttpRequest:
        request = build_request(self.model, self._context, self.options)
        return HttpRequest(url=request.url, headers=request.headers, body=request.body)

    def event_decoder(self) -> EventDecoder:
        return GoogleStreamDecoder()

    def handle_sse(self, sse: ServerSentEvent) -> bool:
        self._handler.handle(sse.data)
        return False

    def handle_complete(self, body: JSONValue) -> None:
        # A server that does not stream: one GenerateContentResponse, or the JSON array
        # of them that streamGenerateContent returns without alt=sse (pitrio's addition;
        # the SDK would fail with "Incomplete JSON segment at the end").
        chunks = body if isinstance(body, list) else [body]
        if not all(isinstance(c, dict) and "candidates" in c for c in chunks) or not chunks:
            super().handle_complete(body)
        for chunk in chunks:
            self._handler.handle(json_stringify(chunk))
        self._handler.end_block()

    def end_of_events(self, terminal: bool) -> None:
        self._handler.end_block()

    def check_end(self) -> None:
        output = self.output
        if output.stop_reason == "pending":
            raise ProviderFailure(self.no_finish_text)
        if output.stop_reason in ("aborted", "error"):
            raw = output.raw_stop_reason
            msg = f"Provider stopped with: {raw}" if raw else "An unknown error occurred"
            raise ProviderFailure(msg)

    def error_text(self, exc: Exception) -> str:
        if isinstance(exc, APIError) and exc.status is not None and exc.body_text is not None:
            return _status_error_text(exc)
        return super().error_text(exc)


def stream_google_generative_ai(
    client: httpx.AsyncClient, model: Model, context: Context, options: StreamOptions
) -> AssistantMessageEventStream:
    """Stream one Gemini response as pi-ai 0.85.0's ``streamSimple`` does.

    Returns at once; the request is made by the stream's producer when the stream is
    opened (``async with``). Failures end the stream with an ``error`` event; cancelling
    the producer (``stream.cancel()``) ends it with stop reason ``aborted``. The HTTP
    response is closed on every path, cancellation included.

    Args:
        client: the HTTP client (its connection pool is reused across requests).
        model: a ``google-generative-ai`` model; ``model.base_url`` is the API root
            with its version (``https://generativelanguage.googleapis.com/v1beta``).
        context: system prompt, messages and tools.
        options: ``api_key`` (required: ``GEMINI_API_KEY``), ``reasoning``,
            ``thinking_budgets``, ``max_tokens``, ``temperature``, ``tool_choice``
            (``auto``, ``none``, ``any``), ``headers``, ``max_retries``,
            ``max_retry_delay``, ``timeout``, ``on_payload``, ``on_response``.
    """
    return exchange_stream(
        partial(_GoogleExchange, context=context),
        client,
        model,
        options,
        abort_message=ABORTED_BEFORE_HEADERS,
    )
