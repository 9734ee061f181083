"""The ``openai-completions`` API: OpenAI chat completions, streamed.

A port of pi-ai 0.85.0's ``api/openai-completions.js`` (``streamSimple``) on httpx and
Trio, with the OpenAI SDK's transport behaviour (headers, error texts, SSE decoding)
that pi-ai relies on. It is the dialect of OpenAI and of most local and hosted
OpenAI-compatible servers (llama.cpp, vLLM, Ollama, LM Studio, TGI, OpenRouter, Groq,
DeepSeek, ...); per-server differences are ``compat`` switches, detected from the
provider name and base URL and overridable through ``model.compat``.

One deliberate difference from pi-ai (``docs/deviations-providers-chat.md``): an HTTP
error whose JSON body has no ``error`` member keeps its body in the error text (pi-ai
says ``400 status code (no body)``, losing e.g. vLLM's and FastAPI's ``detail``).

This package holds the entry point and its ``Exchange`` (the shared lifecycle of
``providers/_request.py``); its private modules detect the server's dialect
(``_compat``), convert the history and tools (``_convert``), build the body, headers
and URL (``_payload``) and handle the stream's chunks (``_events``).
"""

from __future__ import annotations

from functools import partial
from typing import final

import httpx

from ..._events import ErrorEvent
from ..._messages import JSONValue
from ..._model import Context, Model, StreamOptions
from ..._stream import AssistantMessageEventStream
from .._http import format_provider_error, require_api_key
from .._json import js_truthy
from .._options import clamp_max_tokens_to_context, clamp_thinking_level, resolve_cache_retention
from .._output import PartialMessage, setup_error_message
from .._request import Exchange, HttpRequest, exchange_stream
from .._sse import ServerSentEvent
from ._compat import CompletionsCompat, get_compat
from ._events import _check_end, _ChunkHandler, _completion_as_chunk, _dispatch, _get, _js_str
from ._payload import _endpoint, _request_headers, build_params

__all__ = ["stream_openai_completions"]


@final
class _CompletionsExchange(Exchange):
    """One chat-completions request (``providers/_request.py`` runs its lifecycle)."""

    api_label = "OpenAI Completions"
    body_fallback = True

    def __init__(
        self,
        stream: AssistantMessageEventStream,
        output: PartialMessage,
        model: Model,
        options: StreamOptions,
        *,
        context: Context,
        api_key: str,
        max_tokens: int,
        effort: str | None,
    ) -> None:
        super().__init__(stream, output, model, options)
        self._context = context
        self._api_key = api_key
        self._max_tokens = max_tokens
        self._effort = effort
        self._compat: CompletionsCompat | None = None
        self._handler: _ChunkHandler | None = None
        self._headers: httpx.Headers | None = None

    def build_request(self) -> HttpRequest:
        model, options = self.model, self.options
        compat = self._compat = get_compat(model)
        retention = resolve_cache_retention(options.cache_retention)
        session_id = None if retention == "none" else options.session_id
        headers = _request_headers(model, options, self._api_key, session_id, compat)
        params = build_params(
            model,
            self._context,
            options,
            max_tokens=self._max_tokens,
            effort=self._effort,
            compat=compat,
            retention=retention,
        )
        return HttpRequest(url=_endpoint(model.base_url), headers=headers, body=params)

    def start(self, response: httpx.Response) -> None:
        self._headers = response.headers
        self._handler = _ChunkHandler(self.model, self.output, self.stream)

    def handle_sse(self, sse: ServerSentEvent) -> bool:
        assert self._handler is not None
        return _dispatch(sse.event, sse.data, self._headers, self._handler)

    def handle_complete(self, body: JSONValue) -> None:
        assert self._handler is not None
        chunk = _completion_as_chunk(body)
        if chunk is None:
            super().handle_complete(body)
        self._handler.handle(chunk)

    def close_blocks(self) -> None:
        if self._handler is not None:
            self._handler.finish_blocks()

    def check_end(self) -> None:
        assert self._handler is not None
        assert self._compat is not None
        _check_end(self._handler, self._compat)

    def before_failure(self) -> None:
        if self._handler is not None:
            self._handler.apply_reasoning_details()

    def error_text(self, exc: Exception) -> str:
        message = format_provider_error(exc)
        raw = _get(_get(getattr(exc, "error", None), "metadata"), "raw")
        if js_truthy(raw) and _js_str(raw) not in message:
            message += f"\n{_js_str(raw)}"
        return message


def stream_openai_completions(
    client: httpx.AsyncClient, model: Model, context: Context, options: StreamOptions
) -> AssistantMessageEventStream:
    """Stream one chat-completions response (pi-ai's ``streamSimple`` for this API).

    Returns at once; the request is made when the stream is opened (``async with``).
    Failures end the stream with an ``error`` event; a cancel (``stream.cancel()``, the
    agent's abort) ends it with stop reason ``aborted``.
    """
    try:
        api_key = require_api_key(model.provider, options.api_key, options.headers)
        base = options.max_tokens if options.max_tokens is not None else model.max_tokens
        max_tokens = clamp_max_tokens_to_context(model, context, base)
        clamped = clamp_thinking_level(model, options.reasoning) if options.reasoning else None
        effort = None if clamped == "off" else clamped
    except Exception as exc:
        message = setup_error_message(model, str(exc))

        async def setup_failed(stream: AssistantMessageEventStream) -> None:
            stream.push(ErrorEvent(reason="error", error=message))

        return AssistantMessageEventStream(setup_failed)

    return exchange_stream(
        partial(
            _CompletionsExchange,
            context=context,
            api_key=api_key,
            max_tokens=max_tokens,
            effort=effort,
        ),
        client,
        model,
        options,
    )
