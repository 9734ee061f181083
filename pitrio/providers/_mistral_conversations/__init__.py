"""The ``mistral-conversations`` API: Mistral's chat completions (pi-ai 0.85.0).

A port of pi-ai's ``api/mistral-conversations.js`` (``streamSimple``). Despite its
name, pi-ai 0.85.0 does not go through the ``@mistralai`` SDK: it posts the SDK's
payload, renamed to the API's snake_case fields, with Node's ``fetch`` to
``<baseUrl>/v1/chat/completions`` (``Authorization: Bearer``, pi's ``User-Agent``) and
reads the server-sent events itself.

What the provider does, in order (everything runs in the stream's producer):

1. resolve the options: the API key (required), the max-tokens clamp, the thinking
   level as ``prompt_mode: "reasoning"`` (Magistral) or ``reasoning_effort`` (Mistral
   Small and Medium 3.5), the session id as ``prompt_cache_key`` and ``x-affinity``
   unless ``cache_retention`` is ``"none"``;
2. build the body (``_payload``): the history with tool-call ids made Mistral's nine
   letters and digits, thinking replayed as ``thinking`` chunks, tool results as
   ``tool`` messages, images as data URLs for models that take them;
3. send it once (pi-ai's Mistral provider does not retry, whatever ``max_retries``
   says);
4. on a 2xx response push ``start``, then the events of each chunk (``_events``);
5. at the end of the events end the open block and every tool call, then ``done``, or
   ``error``: an error finish reason is ``Provider stopped with: <reason>``, none at
   all ``Mistral stream ended without a finish reason``, an HTTP error
   ``Mistral API error (<status>): <body>`` (the body trimmed, cut after 4,000
   characters), an abort ``Request aborted`` before the headers and ``Request was
   aborted`` after (pitrio's texts on every API; pi-ai shows Node's ``This operation
   was aborted``), with no ``*_end`` event for the open block.

Deliberate differences from pi-ai: ``docs/deviations.md`` ("mistral-conversations").
"""

from __future__ import annotations

from functools import partial
from typing import Final, final

import attrs
import httpx

from ..._messages import JSONValue
from ..._model import Context, Model, StreamOptions
from ..._stream import AssistantMessageEventStream
from .._http import APIError
from .._json import json_stringify
from .._output import PartialMessage
from .._request import Exchange, HttpRequest, ProviderFailure, exchange_stream
from .._sse import ServerSentEvent
from ._events import ChunkHandler
from ._payload import build_request, to_wire_payload

__all__ = ["build_request", "stream_mistral_conversations"]

DEFAULT_TIMEOUT: Final = 60.0
"""Seconds to wait for the response headers (pi-ai's ``timeoutMs ?? 60_000``)."""
_MAX_ERROR_BODY_CHARS: Final = 4000


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [truncated {len(text) - limit} chars]"


def error_text(exc: Exception) -> str:
    """``formatMistralError``: an HTTP error's status and body, else the text."""
    if isinstance(exc, APIError) and exc.status is not None:
        body = (exc.body_text or "").strip()
        if body:
            return f"Mistral API error ({exc.status}): {_truncate(body, _MAX_ERROR_BODY_CHARS)}"
        reason = exc.reason or f"Request failed with status {exc.status}"
        return f"Mistral API error ({exc.status}): {reason}"
    return str(exc) or type(exc).__name__


@final
class _MistralExchange(Exchange):
    """One chat-completions request (``providers/_request.py`` runs it)."""

    api_label = "Mistral"
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
        # One attempt; the timeout bounds the wait for the headers (pi-ai's bounds the
        # whole response: docs/deviations.md).
        timeout = DEFAULT_TIMEOUT if options.timeout is None else options.timeout
        super().__init__(
            stream, output, model, attrs.evolve(options, max_retries=0, timeout=timeout)
        )
        self._context = context
        self._handler = ChunkHandler(stream, output, model)

    def build_request(self) -> HttpRequest:
        return build_request(self.model, self._context, self.options)

    def encode(self, body: JSONValue) -> bytes:
        return json_stringify(to_wire_payload(body)).encode()

    def handle_sse(self, sse: ServerSentEvent) -> bool:
        return self._handler.handle(sse.data)

    def end_of_events(self, terminal: bool) -> None:
        self._handler.end()

    def check_end(self) -> None:
        output = self.output
        if output.stop_reason == "pending":
            msg = "Mistral stream ended without a finish reason"
            raise ProviderFailure(msg)
        if output.stop_reason in ("aborted", "error"):
            raise ProviderFailure(output.error_message or "An unknown error occurred")

    def error_text(self, exc: Exception) -> str:
        return error_text(exc)


def stream_mistral_conversations(
    client: httpx.AsyncClient, model: Model, context: Context, options: StreamOptions
) -> AssistantMessageEventStream:
    """Stream one Mistral chat completion as pi-ai 0.85.0's ``streamSimple`` does.

    Returns at once; the request is made by the stream's producer when the stream is
    opened (``async with``). Failures end the stream with an ``error`` event; cancelling
    the producer (``stream.cancel()``) ends it with stop reason ``aborted``. The HTTP
    response is closed on every path, cancellation included.

    Args:
        client: the HTTP client (its connection pool is reused across requests).
        model: a ``mistral-conversations`` model; ``model.base_url`` is the API root
            without its version (``https://api.mistral.ai``).
        context: system prompt, messages and tools.
        options: ``api_key`` (required: ``MISTRAL_API_KEY``), ``reasoning``,
            ``max_tokens``, ``temperature``, ``tool_choice`` (``auto``, ``none``,
            ``any``, ``required`` or a function), ``session_id`` and
            ``cache_retention``, ``headers``, ``timeout`` (the wait for the headers,
            default 60 s), ``on_payload`` (sees the camelCase payload),
            ``on_response``.
    """
    return exchange_stream(
        partial(_MistralExchange, context=context),
        client,
        model,
        options,
    )
