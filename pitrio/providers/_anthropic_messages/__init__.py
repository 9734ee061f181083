"""The ``anthropic-messages`` API: Anthropic's Messages API, streamed (pi-ai 0.85.0).

A port of pi-ai's ``api/anthropic-messages.js`` (``streamSimple``) together with the
parts of ``@anthropic-ai/sdk`` 0.123.0 it relies on (headers, status errors), event for
event. The request goes to ``<baseUrl>/v1/messages?beta=true`` with the SDK's headers;
the response is read as raw SSE and parsed here, as pi-ai does.

What the provider does, in order (everything runs in the stream's producer):

1. resolve the simple options: the max-tokens clamp, the thinking budget or effort
   (``_payload._resolve_options``);
2. build the body and the headers (``_payload._build_params``, ``_headers._build_headers``;
   the ``model.compat`` flags are read in ``_compat``);
3. send, retrying retryable failures (``options.max_retries``, default 0) with the
   server's ``retry-after``/``retry-after-ms`` (capped by ``max_retry_delay``);
4. on a 2xx response push ``start``, then one event per SSE event
   (``_events._EventHandler``);
5. end with ``done``, or with ``error`` (stop reason ``error``, or ``aborted`` when the
   producer is cancelled: ``Request aborted`` before the response headers, ``Request was
   aborted`` after). No ``*_end`` events are sent for blocks left open by a failure.

Deliberate differences from pi-ai (``docs/deviations-providers-anthropic.md``): a CRLF
split across two reads is one line break; a tool ``input`` given whole in
``content_block_start`` survives ``content_block_stop``; ``reasoning="off"`` means no
thinking.

This package holds the whole request (:func:`build_request`) and its ``Exchange`` (the
shared lifecycle of ``providers/_request.py``); its private modules build the body
(``_payload``) and the headers (``_headers``), read ``model.compat`` (``_compat``) and
handle the events (``_events``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import partial
from typing import final

import attrs
import httpx

from ..._messages import JSONValue
from ..._model import Context, Model, StreamOptions
from ..._stream import AssistantMessageEventStream
from .._http import require_api_key
from .._output import PartialMessage
from .._request import ABORTED_BEFORE_HEADERS, Exchange, HttpRequest, exchange_stream
from .._sse import ServerSentEvent
from ._compat import _compat, _is_oauth_token
from ._events import _diagnostic, _dispatch, _EventHandler, _message_as_events, _StreamError
from ._headers import _beta_features, _build_headers, _messages_url
from ._payload import _build_params, _resolve_options

__all__ = ["build_request", "stream_anthropic_messages"]


@final
@attrs.frozen(kw_only=True)
class AnthropicRequest:
    """One Messages API request as pi-ai would send it.

    Attributes:
        url: ``<baseUrl>/v1/messages?beta=true``.
        headers: lower-cased names.
        body: the JSON body (``betas`` already moved to the ``anthropic-beta`` header).
        is_oauth: an ``sk-ant-oat`` key (Claude Code identity, tool renaming).
        provider_thinking_level: recorded on the output of managed-effort models.
    """

    url: str
    headers: Mapping[str, str]
    body: dict[str, JSONValue]
    is_oauth: bool
    provider_thinking_level: str | None = None


def build_request(model: Model, context: Context, options: StreamOptions) -> AnthropicRequest:
    """The request pi-ai's ``streamSimple`` sends for these arguments.

    Raises:
        MissingApiKeyError: no API key and no authorization header.
        ValueError: an unsupported option or tool schema (the text is pi-ai's where it
            has one).
    """
    require_api_key(
        model.provider,
        options.api_key,
        options.headers,
        ("authorization", "x-api-key", "cf-aig-authorization"),
    )
    resolved = _resolve_options(model, context, options)
    compat = _compat(model)
    is_oauth = (
        model.provider != "github-copilot"
        and bool(options.api_key)
        and _is_oauth_token(options.api_key or "")
    )
    body = _build_params(model, context, options, resolved, compat, is_oauth=is_oauth)
    betas = _beta_features(model, context, compat, is_oauth, resolved.thinking_enabled, options)
    headers = _build_headers(model, context, options, is_oauth=is_oauth, betas=betas)
    return AnthropicRequest(
        url=_messages_url(model),
        headers=headers,
        body=body,
        is_oauth=is_oauth,
        provider_thinking_level=(resolved.effort or "high")
        if compat.supports_mid_convo_effort
        else None,
    )


def _encode_body(body: JSONValue) -> bytes:
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        # Surrogates left in arguments or schemas: let JSON escapes carry them.
        return json.dumps(body, separators=(",", ":")).encode("ascii")


@final
class _AnthropicExchange(Exchange):
    """One Messages API request (``providers/_request.py`` runs its lifecycle)."""

    api_label = "Anthropic"
    dispatch_at_eof = True
    error_member = None

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
        self._is_oauth = False
        self._handler: _EventHandler | None = None

    def build_request(self) -> HttpRequest:
        request = build_request(self.model, self._context, self.options)
        self.output.provider_thinking_level = request.provider_thinking_level
        self._is_oauth = request.is_oauth
        return HttpRequest(url=request.url, headers=request.headers, body=request.body)

    def replace_payload(self, replaced: JSONValue) -> JSONValue:
        return {**replaced, "stream": True} if isinstance(replaced, dict) else replaced

    def encode(self, body: JSONValue) -> bytes:
        return _encode_body(body)

    def start(self, response: httpx.Response) -> None:
        self._handler = _EventHandler(
            self.stream,
            self.output,
            self.model,
            is_oauth=self._is_oauth,
            tools=self._context.tools,
        )

    def handle_sse(self, sse: ServerSentEvent) -> bool:
        assert self._handler is not None
        return _dispatch(sse.event, sse.data, sse.raw, self._handler)

    def handle_complete(self, body: JSONValue) -> None:
        assert self._handler is not None
        if not isinstance(body, dict) or body.get("type") != "message":
            super().handle_complete(body)
        assert isinstance(body, dict)
        for event in _message_as_events(body):
            self._handler.handle(event)
        self._handler.saw_message_start = self._handler.saw_message_stop = True

    def end_of_events(self, terminal: bool) -> None:
        handler = self._handler
        assert handler is not None
        if handler.saw_message_start and not handler.saw_message_stop:
            msg = "Anthropic stream ended before message_stop"
            raise _StreamError(msg)

    def check_end(self) -> None:
        output = self.output
        if output.stop_reason == "pending":
            msg = "Anthropic stream ended without a stop reason"
            raise _StreamError(msg)
        if output.stop_reason in ("aborted", "error"):
            raise _StreamError(output.error_message or "An unknown error occurred")
        assert self._handler is not None
        if self._handler.input_transformations:
            output.diagnostics = (
                *(output.diagnostics or ()),
                _diagnostic(self._handler.input_transformations),
            )


def stream_anthropic_messages(
    client: httpx.AsyncClient, model: Model, context: Context, options: StreamOptions
) -> AssistantMessageEventStream:
    """Stream one response of the Messages API as pi-ai 0.85.0's ``streamSimple`` does.

    Returns at once; the request is made by the stream's producer when the stream is
    opened (``async with``). Failures end the stream with an ``error`` event; cancelling
    the producer (``stream.cancel()``) ends it with stop reason ``aborted``. The HTTP
    response is closed on every path, cancellation included.

    Args:
        client: the HTTP client (its connection pool is reused across requests).
        model: an ``anthropic-messages`` model; ``model.base_url`` is the API root.
        context: system prompt, messages and tools.
        options: ``api_key``, ``reasoning``, ``max_tokens``, ``temperature``,
            ``tool_choice`` (a string or a Messages API object), ``cache_retention``,
            ``session_id``, ``headers``, ``max_retries``, ``max_retry_delay``,
            ``timeout``, ``metadata``, ``thinking_budgets``, ``sampling_params``
            (merged into the body last), ``on_payload``, ``on_response``; ``extra`` may
            hold ``thinkingDisplay`` and ``interleavedThinking``.
    """
    return exchange_stream(
        partial(_AnthropicExchange, context=context),
        client,
        model,
        options,
        abort_message=ABORTED_BEFORE_HEADERS,
    )
