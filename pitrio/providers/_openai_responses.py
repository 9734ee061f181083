"""The ``openai-responses`` API: OpenAI's Responses endpoint, streamed as SSE.

A port of pi-ai 0.85.0's ``api/openai-responses.js`` and ``openai-responses-shared.js``,
with the parts of the OpenAI SDK (6.40.0) that pi-ai relies on: its request headers, its
SSE iteration (``[DONE]``; a top-level ``error`` member raises) and its HTTP error texts.
The oracle's ``resp-*`` fixtures pin the behaviour (``PROVIDERS.md`` §5.4); the deliberate
differences are in ``docs/deviations-providers-responses.md``.

The entry point is :func:`stream_openai_responses`, pi-ai's ``streamSimple`` for this API::

    stream = stream_openai_responses(client, model, context, options)
    async with stream:
        async for event in stream:
            ...
        message = await stream.result()

The module has four parts; :mod:`pitrio.providers._deferred` (fetching and cancelling
background responses) builds on them and this module never imports it:

- request conversion (:func:`build_request`, :func:`convert_messages`,
  :func:`convert_tools`): pitrio messages and tools into Responses ``input`` items and a
  request body;
- the streamed request (:class:`_ResponsesExchange`): what the shared lifecycle of
  :mod:`._request` asks this API for;
- background mode (:func:`stream_background_response`, :func:`push_final`): a request
  made with ``options.deferred``, and a finished response object streamed as events;
- event handling (:class:`ResponsesEventProcessor`): Responses stream events into
  provider events, building the assistant message as they come.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any, Final, Literal, TypeAlias, final

import attrs
import httpx

from .._events import (
    AssistantMessageEvent,
    DoneEvent,
    StartEvent,
    TextDeltaEvent,
    TextEndEvent,
    TextStartEvent,
    ThinkingDeltaEvent,
    ThinkingEndEvent,
    ThinkingStartEvent,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
)
from .._messages import (
    AssistantMessage,
    Cost,
    DeferredHandle,
    ImageContent,
    JSONValue,
    TextContent,
    ThinkingContent,
    ToolCall,
    Usage,
    UserContent,
    UserMessage,
)
from .._model import Context, Model, StreamOptions
from .._stream import AssistantMessageEventStream
from ._http import (
    APIError,
    close_response,
    format_provider_error,
    merge_headers,
    pi_user_agent,
    require_api_key,
)
from ._json import js_length, js_truthy, json_parse, json_stringify, parse_streaming_json
from ._options import clamp_max_tokens_to_context, clamp_thinking_level, resolve_cache_retention
from ._output import PartialMessage, calculate_cost
from ._partial_json import PartialJSONParser, lazy_arguments
from ._request import (
    ABORTED_AFTER_HEADERS,
    Exchange,
    HttpRequest,
    ProviderFailure,
    call_on_response,
    exchange_stream,
    maybe_await,
    send_request,
    settle,
)
from ._sse import ServerSentEvent
from ._transform import sanitize_surrogates, short_hash, transform_messages

__all__ = [
    "API",
    "DEFAULT_POLL_AFTER_MS",
    "ERROR_PREFIX",
    "PENDING_STATUSES",
    "ProviderFailure",
    "ResponsesCompat",
    "ResponsesEventProcessor",
    "ResponsesRequest",
    "apply_response_object",
    "apply_service_tier_pricing",
    "build_body",
    "build_headers",
    "build_request",
    "check_done",
    "convert_messages",
    "convert_tools",
    "format_error",
    "push_deferred",
    "push_done",
    "push_final",
    "response_as_events",
    "responses_url",
    "send_for_json",
    "stream_background_response",
    "stream_openai_responses",
    "template_message",
]

API: Final = "openai-responses"
ERROR_PREFIX: Final = "OpenAI API error"
"""pi-ai's prefix for HTTP errors of this API: ``OpenAI API error (<status>): ...``."""

JSONObject: TypeAlias = dict[str, Any]

# Providers whose foreign tool-call ids get an ``fc_`` item id (OPENAI_TOOL_CALL_PROVIDERS).
_OPENAI_TOOL_CALL_PROVIDERS: Final = frozenset({"openai", "openai-codex", "opencode"})
# OpenAI Responses rejects max_output_tokens below 16.
_MIN_OUTPUT_TOKENS: Final = 16
_PROMPT_CACHE_KEY_MAX_CHARS: Final = 64

# ======================================================================================
# Entry point


def stream_openai_responses(
    client: httpx.AsyncClient, model: Model, context: Context, options: StreamOptions
) -> AssistantMessageEventStream:
    """Stream one response from the Responses API (pi-ai's ``streamSimple``).

    Returns at once; the request is made when the caller opens the stream with
    ``async with``. Failures and aborts end the stream with an ``error`` event (stop
    reason ``error`` or ``aborted``); nothing is raised. With ``options.deferred`` set,
    the request runs in OpenAI's background mode and the stream ends with a ``deferred``
    message (see :func:`stream_background_response`).

    Args:
        client: the HTTP client (borrowed, not closed).
        model: a model whose ``api`` is ``"openai-responses"``; requests go to
            ``<base_url>/responses``.
        context: system prompt, messages and tools.
        options: the request options. Besides the common ones this API reads
            ``options.extra["service_tier"]`` (sent as ``service_tier``; prices the
            response when it names no tier) and ``options.extra["reasoning_summary"]``
            (``reasoning.summary``, default ``"auto"``), which pi-ai offers only through
            its lower-level ``stream``.
    """
    if options.deferred:
        return stream_background_response(client, model, context, options)
    return exchange_stream(
        partial(_ResponsesExchange, context=context),
        client,
        model,
        options,
        template=template_message(model),
    )


def template_message(model: Model) -> AssistantMessage:
    """The empty partial a stream of ``model`` starts from."""
    return AssistantMessage(
        api=model.api, provider=model.provider, model=model.id, stop_reason="pending"
    )


@final
class _ResponsesExchange(Exchange):
    """One streamed Responses request (see :mod:`._request` for the lifecycle)."""

    api_label = "OpenAI Responses"

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
        self._processor = ResponsesEventProcessor(
            output, stream.push, model, service_tier=service_tier_option(options)
        )

    def build_request(self) -> HttpRequest:
        request = build_request(self.model, self._context, self.options)
        return HttpRequest(url=request.url, headers=request.headers, body=request.body)

    def handle_sse(self, sse: ServerSentEvent) -> bool:
        return _dispatch(sse, self._processor)

    def handle_complete(self, body: JSONValue) -> None:
        if not isinstance(body, dict) or body.get("object") != "response":
            super().handle_complete(body)
        assert isinstance(body, dict)
        apply_response_object(self._processor, self.output, body)

    def end_of_events(self, terminal: bool) -> None:
        self._processor.finish()

    def check_end(self) -> None:
        check_done(self.output)

    def error_text(self, exc: Exception) -> str:
        return format_error(exc)


def check_done(output: PartialMessage) -> None:
    """pi-ai's checks once the events are over.

    Raises:
        ProviderFailure: no stop reason came, or the response ended in an error
            (``Response incomplete: <reason>`` and the like).
    """
    reason = output.stop_reason
    if reason == "pending":
        msg = "OpenAI Responses stream ended without a stop reason"
        raise ProviderFailure(msg)
    if reason in ("aborted", "error"):
        raise ProviderFailure(output.error_message or "An unknown error occurred")


def push_done(
    stream: AssistantMessageEventStream, output: PartialMessage, options: StreamOptions
) -> None:
    """:func:`check_done` (and the signal not aborted), then the ``done`` event.

    Raises:
        ProviderFailure: see :func:`check_done`; ``Request was aborted``.
    """
    if options.signal is not None and options.signal.aborted:
        raise ProviderFailure(ABORTED_AFTER_HEADERS)
    check_done(output)
    stream.push(DoneEvent(reason=output.stop_reason, message=output.snapshot()))  # type: ignore[arg-type]  # stop, length, toolUse or deferred


def format_error(exc: BaseException) -> str:
    """An exception's ``errorMessage`` (pi-ai's ``formatOpenAIResponsesError``)."""
    if isinstance(exc, ProviderFailure):
        return str(exc)
    return format_provider_error(exc, ERROR_PREFIX) or type(exc).__name__


# ======================================================================================
# Background mode (the create request; fetching and cancelling are in ._deferred)


def stream_background_response(
    client: httpx.AsyncClient, model: Model, context: Context, options: StreamOptions
) -> AssistantMessageEventStream:
    """Create a background response; the stream ends with a ``deferred`` message.

    The request body is the streaming one with ``background: true``, ``store: true``
    and ``stream: false`` (``options.on_payload`` sees it that way). If the server
    answers with a response that is already finished, the stream carries it as
    :func:`~pitrio.providers._deferred.fetch_deferred` would. ``options.deferred`` may
    be ``True`` or a mapping; its ``window`` (for batch-style providers) does not apply
    to background mode.
    """
    service_tier = service_tier_option(options)

    async def produce(stream: AssistantMessageEventStream) -> None:
        output = PartialMessage(model)
        with settle(stream, output, options, error_text=_format_error_text):
            request = build_request(model, context, options)
            body: JSONValue = dict(request.body)
            assert isinstance(body, dict)
            body.update(stream=False, background=True, store=True)
            if options.on_payload is not None:
                replaced = await maybe_await(options.on_payload(body, model))
                if replaced is not None:
                    body = replaced
            http_request = HttpRequest(url=request.url, headers=request.headers, body=body)
            response = await send_for_json(client, model, http_request, options)
            if response.get("status") in PENDING_STATUSES:
                handle = DeferredHandle(
                    provider=model.provider,
                    model_id=model.id,
                    api=model.api,
                    id=_response_id(response),
                    poll_after_ms=DEFAULT_POLL_AFTER_MS,
                    data={"serviceTier": service_tier} if service_tier is not None else None,
                )
                push_deferred(stream, output, handle)
            else:
                push_final(stream, output, model, response, options, service_tier)

    return AssistantMessageEventStream(produce, template=template_message(model))


def _format_error_text(exc: Exception) -> str:
    return format_error(exc)


DEFAULT_POLL_AFTER_MS: Final = 1000
"""The polling interval suggested in a handle (``poll_after_ms``)."""

PENDING_STATUSES: Final = frozenset({"queued", "in_progress"})
"""The statuses of a background response that is not finished."""


async def send_for_json(
    client: httpx.AsyncClient, model: Model, request: HttpRequest, options: StreamOptions
) -> JSONObject:
    """Send with retries, read the whole body, and decode a JSON object."""
    content = None if request.body is None else json_stringify(request.body).encode()
    response = await send_request(client, request, content, options)
    try:
        await call_on_response(options, response, model)
        raw = await response.aread()
    finally:
        await close_response(response)
    value = json_parse(raw.decode("utf-8", "replace"))
    if not isinstance(value, dict):
        msg = f"OpenAI returned {type(value).__name__} instead of a response object"
        raise ProviderFailure(msg)
    return value


def _response_id(response: Mapping[str, Any]) -> str:
    response_id = response.get("id")
    if not isinstance(response_id, str) or not response_id:
        msg = "OpenAI background response without an id"
        raise ProviderFailure(msg)
    return response_id


def push_deferred(
    stream: AssistantMessageEventStream, output: PartialMessage, handle: DeferredHandle
) -> None:
    """``start`` then ``done(deferred)``, as pi-ai's faux provider streams it."""
    stream.push(StartEvent(partial=output.snapshot()))
    output.stop_reason = "deferred"
    output.response_id = handle.id
    message = output.snapshot()
    stream.push(DoneEvent(reason="deferred", message=attrs.evolve(message, deferred=handle)))


def push_final(
    stream: AssistantMessageEventStream,
    output: PartialMessage,
    model: Model,
    response: JSONObject,
    options: StreamOptions,
    service_tier: str | None,
) -> None:
    """Stream a finished response object as a streamed response would have arrived:
    ``start``, each output item as added, one delta, done; then the terminal event."""
    stream.push(StartEvent(partial=output.snapshot()))
    processor = ResponsesEventProcessor(output, stream.push, model, service_tier=service_tier)
    apply_response_object(processor, output, response)
    push_done(stream, output, options)


def apply_response_object(
    processor: ResponsesEventProcessor, output: PartialMessage, response: JSONObject
) -> None:
    """Feed a whole response object to ``processor`` as the events it stands for."""
    for event in response_as_events(response):
        processor.handle(event)
    status = response.get("status")
    if status == "cancelled" and output.stop_reason == "error" and not output.error_message:
        output.error_message = "Response was cancelled"


def response_as_events(response: JSONObject) -> list[JSONValue]:
    """The stream events a finished response object stands for."""
    events: list[JSONValue] = [{"type": "response.created", "response": response}]
    items = response.get("output")
    for index, item in enumerate(items if isinstance(items, list) else []):
        if not isinstance(item, dict):
            continue
        where: JSONObject = {"output_index": index}
        if isinstance(item.get("id"), str):
            where["item_id"] = item["id"]
        kind = item.get("type")
        if kind == "reasoning":
            added = {**item, "summary": [], "content": []}
            events.append({"type": "response.output_item.added", **where, "item": added})
            text = _texts(item.get("summary")) or _texts(item.get("content"))
            if text:
                events.append({"type": "response.reasoning_text.delta", **where, "delta": text})
        elif kind == "message":
            added = {**item, "content": []}
            events.append({"type": "response.output_item.added", **where, "item": added})
            text = _message_text(item.get("content"))
            if text:
                events.append({"type": "response.output_text.delta", **where, "delta": text})
        elif kind == "function_call":
            added = {**item, "arguments": ""}
            events.append({"type": "response.output_item.added", **where, "item": added})
            arguments = item.get("arguments")
            if isinstance(arguments, str) and arguments:
                events.append(
                    {"type": "response.function_call_arguments.delta", **where, "delta": arguments}
                )
        else:
            continue
        events.append({"type": "response.output_item.done", **where, "item": item})
    if response.get("status") == "failed":
        events.append({"type": "response.failed", "response": response})
    else:
        events.append({"type": "response.completed", "response": response})
    return events


def _texts(parts: Any) -> str:
    if not isinstance(parts, list):
        return ""
    return "\n\n".join(
        p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)
    )


# ======================================================================================
# Request conversion


@final
@attrs.frozen(kw_only=True)
class ResponsesCompat:
    """The ``model.compat`` switches this API reads, with pi-ai's defaults."""

    supports_developer_role: bool = True
    session_affinity_format: str = "openai"
    supports_long_cache_retention: bool = True
    supports_strict_mode: bool = False
    supports_explicit_prompt_cache_mode: bool = False
    supports_max_output_tokens: bool = True

    @classmethod
    def of(cls, model: Model) -> ResponsesCompat:
        """The switches of ``model`` (its ``compat`` over pi-ai's defaults)."""
        compat = model.compat or {}

        def flag(name: str, default: bool) -> bool:
            value = compat.get(name)
            return default if value is None else bool(value)

        affinity = compat.get("sessionAffinityFormat")
        if affinity is None:
            openrouter = model.provider == "openrouter" or "openrouter.ai" in model.base_url
            affinity = "openrouter" if openrouter else "openai"
        return cls(
            supports_developer_role=flag("supportsDeveloperRole", True),
            session_affinity_format=str(affinity),
            supports_long_cache_retention=flag("supportsLongCacheRetention", True),
            supports_strict_mode=flag("supportsStrictMode", False),
            supports_explicit_prompt_cache_mode=flag("supportsExplicitPromptCacheMode", False),
            supports_max_output_tokens=flag("supportsMaxOutputTokens", True),
        )


@final
@attrs.frozen(kw_only=True)
class ResponsesRequest:
    """A ``POST <base_url>/responses`` request, ready to send."""

    url: str
    headers: dict[str, str]
    body: JSONObject


def build_request(model: Model, context: Context, options: StreamOptions) -> ResponsesRequest:
    """The request pi-ai's ``streamSimple`` sends for this model, context and options.

    Raises:
        MissingApiKeyError: no ``options.api_key`` and no ``Authorization`` header.
    """
    api_key = require_api_key(model.provider, options.api_key, options.headers)
    retention = resolve_cache_retention(options.cache_retention)
    compat = ResponsesCompat.of(model)
    session_id = None if retention == "none" else options.session_id
    headers = build_headers(model, api_key, options.headers, session_id, compat)
    body = build_body(model, context, options, compat=compat, retention=retention)
    return ResponsesRequest(url=responses_url(model), headers=headers, body=body)


def responses_url(model: Model, suffix: str = "") -> str:
    """``<base_url>/responses<suffix>``."""
    return model.base_url.rstrip("/") + "/responses" + suffix


def build_headers(
    model: Model,
    api_key: str,
    option_headers: Mapping[str, str | None] | None,
    session_id: str | None,
    compat: ResponsesCompat,
) -> dict[str, str]:
    """The request headers in the OpenAI SDK's layers: its defaults, ``Authorization``,
    pi-ai's client headers (``User-Agent``, ``model.headers``, session affinity,
    ``options.headers``), then the JSON content type. ``None`` removes a header."""
    client_headers: dict[str, str | None] = {"User-Agent": pi_user_agent()}
    client_headers.update(model.headers or {})
    if session_id:
        if compat.session_affinity_format == "openrouter":
            client_headers["x-session-id"] = session_id
        else:
            if compat.session_affinity_format == "openai":
                client_headers["session_id"] = session_id
            client_headers["x-client-request-id"] = session_id
    client_headers.update(option_headers or {})
    return merge_headers(
        {"Accept": "application/json"},
        {"Authorization": f"Bearer {api_key}"},
        client_headers,
        {"Content-Type": "application/json"},
    )


def build_body(
    model: Model,
    context: Context,
    options: StreamOptions,
    *,
    compat: ResponsesCompat | None = None,
    retention: str | None = None,
) -> JSONObject:
    """The JSON body: ``streamSimple``'s option handling, then pi-ai's ``buildParams``."""
    compat = compat or ResponsesCompat.of(model)
    retention = retention or resolve_cache_retention(options.cache_retention)
    requested = options.max_tokens if options.max_tokens is not None else model.max_tokens
    max_tokens = clamp_max_tokens_to_context(model, context, requested)
    effort = None
    if options.reasoning:
        level = clamp_thinking_level(model, options.reasoning)
        effort = None if level == "off" else level
    summary = options.extra.get("reasoning_summary")
    service_tier = service_tier_option(options)

    body: JSONObject = {
        "model": model.id,
        "input": convert_messages(model, context),
        "stream": True,
    }
    if retention != "none" and options.session_id is not None:
        body["prompt_cache_key"] = options.session_id[:_PROMPT_CACHE_KEY_MAX_CHARS]
    if retention == "long" and compat.supports_long_cache_retention:
        body["prompt_cache_retention"] = "24h"
    if retention == "none" and compat.supports_explicit_prompt_cache_mode:
        body["prompt_cache_options"] = {"mode": "explicit"}
    body["store"] = False
    if max_tokens and compat.supports_max_output_tokens:
        body["max_output_tokens"] = max(max_tokens, _MIN_OUTPUT_TOKENS)
    if options.temperature is not None:
        body["temperature"] = options.temperature
    if service_tier is not None:
        body["service_tier"] = service_tier
    tools = _unique_tools(context.tools)
    if tools:
        body["tools"] = convert_tools(tools, supports_strict_mode=compat.supports_strict_mode)
    if options.tool_choice is not None:
        body["tool_choice"] = options.tool_choice
    if model.reasoning:
        _add_reasoning(body, model, effort, summary)
    if options.sampling_params:
        body.update(options.sampling_params)
    return body


def _add_reasoning(body: JSONObject, model: Model, effort: str | None, summary: Any) -> None:
    level_map = model.thinking_level_map or {}
    if effort or summary:
        wire_effort = "medium"
        if effort:
            mapped = level_map.get(effort)
            wire_effort = mapped if mapped is not None else effort
        body["reasoning"] = {"effort": wire_effort, "summary": summary or "auto"}
        body["include"] = ["reasoning.encrypted_content"]
    elif model.provider != "github-copilot" and not (
        "off" in level_map and level_map["off"] is None
    ):
        off = level_map.get("off")
        body["reasoning"] = {"effort": off if off is not None else "none"}
    if model.provider == "xai":
        body["include"] = ["reasoning.encrypted_content"]


def service_tier_option(options: StreamOptions) -> str | None:
    """The requested service tier (``options.extra["service_tier"]``)."""
    tier = options.extra.get("service_tier")
    return tier if isinstance(tier, str) else None


def _unique_tools(tools: Sequence[Any]) -> list[Any]:
    """Tools by name; a later definition replaces an earlier one in its place."""
    by_name: dict[str, Any] = {}
    for tool in tools:
        by_name[tool.name] = tool
    return list(by_name.values())


def convert_tools(tools: Iterable[Any], *, supports_strict_mode: bool = False) -> list[JSONObject]:
    """Function tools: ``{type: "function", name, description, parameters[, strict]}``."""
    out: list[JSONObject] = []
    for tool in tools:
        item: JSONObject = {
            "type": "function",
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        }
        if supports_strict_mode:
            item["strict"] = False
        out.append(item)
    return out


# -- messages ---------------------------------------------------------------------------


def convert_messages(model: Model, context: Context) -> list[JSONObject]:
    """The request's ``input`` items (pi-ai's ``convertResponsesMessages``)."""
    items: list[JSONObject] = []
    if context.system_prompt:
        compat = model.compat or {}
        developer = model.reasoning and compat.get("supportsDeveloperRole") is not False
        role = "developer" if developer else "system"
        items.append({"role": role, "content": sanitize_surrogates(context.system_prompt)})
    msg_index = 0
    for message in transform_messages(context.messages, model, _normalize_tool_call_id):
        if isinstance(message, UserMessage):
            content = _user_content(message.content)
            if not content:
                continue
            items.append({"role": "user", "content": content})
        elif isinstance(message, AssistantMessage):
            output = _assistant_items(model, message, msg_index)
            if not output:
                continue
            items.extend(output)
        else:
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message.tool_call_id.split("|")[0],
                    "output": _tool_result_output(model, message.content),
                }
            )
        msg_index += 1
    return items


def _user_content(content: str | tuple[UserContent, ...]) -> list[JSONObject]:
    if isinstance(content, str):
        return [{"type": "input_text", "text": sanitize_surrogates(content)}]
    return [
        {"type": "input_text", "text": sanitize_surrogates(block.text)}
        if isinstance(block, TextContent)
        else _input_image(block)
        for block in content
    ]


def _input_image(image: ImageContent) -> JSONObject:
    return {
        "type": "input_image",
        "detail": "auto",
        "image_url": f"data:{image.mime_type};base64,{image.data}",
    }


def _assistant_items(model: Model, message: AssistantMessage, msg_index: int) -> list[JSONObject]:
    same_provider_api = message.provider == model.provider and message.api == model.api
    same_model = same_provider_api and message.model == model.id
    different_model = same_provider_api and message.model != model.id
    output: list[JSONObject] = []
    text_index = 0
    for block in message.content:
        if isinstance(block, ThinkingContent):
            # The signature is the whole reasoning item (with its encrypted content).
            if block.thinking_signature:
                output.append(json_parse(block.thinking_signature))
        elif isinstance(block, TextContent):
            msg_id, phase = _parse_text_signature(block.text_signature)
            if text_index == 0:
                fallback = f"msg_pi_{msg_index}"
            else:
                fallback = f"msg_pi_{msg_index}_{text_index}"
            text_index += 1
            if not msg_id:
                msg_id = fallback
            elif js_length(msg_id) > 64:  # OpenAI's limit for item ids
                msg_id = f"msg_{short_hash(msg_id)}"
            text_part = {
                "type": "output_text",
                "text": sanitize_surrogates(block.text),
                "annotations": [],
            }
            item: JSONObject = {
                "type": "message",
                "role": "assistant",
                "content": [text_part],
                "status": "completed",
                "id": msg_id,
            }
            if phase is not None:
                item["phase"] = phase
            output.append(item)
        else:
            parts = block.id.split("|")
            item_id: str | None = parts[1] if len(parts) > 1 else None
            # The fc_ item id is dropped for another model's turn: OpenAI checks which
            # fc_ ids were paired with which reasoning items.
            if item_id is None or not item_id.startswith("fc_") or different_model:
                item_id = None
            call: JSONObject = {"type": "function_call"}
            if item_id is not None:
                call["id"] = item_id
            call["call_id"] = parts[0]
            call["name"] = block.name
            call["arguments"] = json_stringify(block.arguments)
            if same_model and block.namespace is not None:
                call["namespace"] = block.namespace
            output.append(call)
    return output


def _parse_text_signature(signature: str | None) -> tuple[str | None, str | None]:
    """``(id, phase)`` of a ``textSignature``: v1 JSON, or a legacy plain id."""
    if not signature:
        return None, None
    if signature.startswith("{"):
        try:
            parsed = json_parse(signature)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and parsed.get("v") == 1 and isinstance(parsed.get("id"), str):
            phase = parsed.get("phase")
            return parsed["id"], phase if phase in ("commentary", "final_answer") else None
    return signature, None


def _tool_result_output(model: Model, content: tuple[UserContent, ...]) -> str | list[JSONObject]:
    text = "\n".join(b.text for b in content if isinstance(b, TextContent))
    images = [b for b in content if isinstance(b, ImageContent)]
    if not images or "image" not in model.input:
        if text:
            return sanitize_surrogates(text)
        return "(see attached image)" if images else "(no tool output)"
    out: list[JSONObject] = []
    if text:
        out.append({"type": "input_text", "text": sanitize_surrogates(text)})
    out.extend(_input_image(image) for image in images)
    return out


def _normalize_tool_call_id(tool_call_id: str, model: Model, source: AssistantMessage) -> str:
    """A foreign tool call's id for the Responses API (``call|fc_item``)."""
    if model.provider not in _OPENAI_TOOL_CALL_PROVIDERS or "|" not in tool_call_id:
        return _normalize_id_part(tool_call_id)
    parts = tool_call_id.split("|")
    call_id = _normalize_id_part(parts[0])
    if source.provider != model.provider or source.api != model.api:
        item_id = f"fc_{short_hash(parts[1])}"[:64]
    else:
        item_id = _normalize_id_part(parts[1])
    if not item_id.startswith("fc_"):
        item_id = _normalize_id_part(f"fc_{item_id}")
    return f"{call_id}|{item_id}"


def _normalize_id_part(part: str) -> str:
    # JavaScript replaces per UTF-16 code unit: an astral character becomes "__".
    sanitized = "".join(
        ch if ch.isascii() and (ch.isalnum() or ch in "_-") else ("__" if ord(ch) > 0xFFFF else "_")
        for ch in part
    )
    return sanitized[:64].rstrip("_")


# ======================================================================================
# Event handling

SlotKind: TypeAlias = Literal["thinking", "text", "toolCall"]


@final
@attrs.define
class _Slot:
    """An open output item: its block's content index and, for a function call, the
    argument JSON received so far."""

    kind: SlotKind
    index: int
    arguments_json: PartialJSONParser = attrs.field(factory=PartialJSONParser, eq=False)
    item_id: str | None = None
    index_key: Any = None


@final
class ResponsesEventProcessor:
    """Applies Responses stream events to a :class:`PartialMessage` and pushes the
    provider events (pi-ai's ``processResponsesStream``, one event at a time).

    Output items are tracked by their ``item_id`` (pi-ai uses ``output_index``, which
    some servers leave out); an event without ``item_id`` is matched by
    ``output_index``, and one whose ``output_index`` several open items share is an
    error naming the event. Events for no open item, or an item of another kind, are
    ignored, as are event types pi-ai does not handle.

    Args:
        output: the message being built.
        push: where the events go (``stream.push``).
        model: for pricing.
        service_tier: the requested tier; prices a response that names none.
    """

    __slots__ = (
        "_by_id",
        "_by_index",
        "_model",
        "_output",
        "_push",
        "_reasoning_by_id",
        "_service_tier",
        "saw_terminal",
    )

    def __init__(
        self,
        output: PartialMessage,
        push: Callable[[AssistantMessageEvent], None],
        model: Model,
        *,
        service_tier: str | None = None,
    ) -> None:
        self._output = output
        self._push = push
        self._model = model
        self._service_tier = service_tier
        # Open output items by item id, and by output index (several when a server
        # leaves the index out).
        self._by_id: dict[str, _Slot] = {}
        self._by_index: dict[Any, list[_Slot]] = {}
        self._reasoning_by_id: dict[Any, int] = {}
        self.saw_terminal = False
        """Whether ``response.completed``, ``.incomplete`` or ``.failed`` arrived."""

    def handle(self, event: JSONValue) -> None:
        """Apply one stream event (a decoded JSON value).

        Raises:
            ProviderFailure: an ``error`` event, ``response.failed``, or a response
                status pi-ai does not know.
        """
        if not isinstance(event, dict):
            return
        kind = event.get("type")
        if kind in ("response.output_text.delta", "response.refusal.delta"):
            self._text_delta(event)
        elif kind == "response.function_call_arguments.delta":
            self._arguments_delta(event)
        elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            self._thinking_delta(event, _js_string(event.get("delta", _UNDEFINED)))
        elif kind == "response.reasoning_summary_part.done":
            self._thinking_delta(event, "\n\n")
        elif kind == "response.output_item.added":
            item = event.get("item")
            if isinstance(item, dict):
                self._create_slot(event, item)
        elif kind == "response.output_item.done":
            item = event.get("item")
            if isinstance(item, dict):
                self._item_done(event, item)
        elif kind == "response.function_call_arguments.done":
            self._arguments_done(event)
        elif kind == "response.created":
            response = event.get("response")
            if isinstance(response, dict):
                self._output.response_id = response.get("id")
        elif kind in ("response.completed", "response.incomplete"):
            response = event.get("response")
            self.finalize(response if isinstance(response, dict) else {})
        elif kind == "error":
            code = _js_string(event.get("code", _UNDEFINED))
            message = _js_string(event.get("message", _UNDEFINED))
            msg = f"Error Code {code}: {message}"
            raise ProviderFailure(msg)
        elif kind == "response.failed":
            self._failed(event.get("response"))

    def finish(self) -> None:
        """The events are over.

        Raises:
            ProviderFailure: no terminal response event came.
        """
        if not self.saw_terminal:
            msg = "OpenAI Responses stream ended before a terminal response event"
            raise ProviderFailure(msg)

    # -- items ------------------------------------------------------------------------

    def _find(self, event: Mapping[str, Any], item_id: Any) -> _Slot | None:
        if isinstance(item_id, str) and item_id:
            slot = self._by_id.get(item_id)
            if slot is not None:
                return slot
        # No open item with that id: pi-ai's match by output_index.
        at_index = self._by_index.get(_slot_key(event.get("output_index")))
        if not at_index:
            return None
        if len(at_index) > 1:
            msg = (
                f"OpenAI Responses: cannot tell which output item the "
                f"{_js_string(event.get('type'))} event belongs to: it names no open item "
                f"(item_id {_js_string(event.get('item_id', _UNDEFINED))}) and "
                f"{len(at_index)} open items share its output_index "
                f"({_js_string(event.get('output_index', _UNDEFINED))})"
            )
            raise ProviderFailure(msg)
        return at_index[0]

    def _slot(self, event: Mapping[str, Any], kind: SlotKind) -> _Slot | None:
        slot = self._find(event, event.get("item_id"))
        return slot if slot is not None and slot.kind == kind else None

    def _open(self, slot: _Slot, event: Mapping[str, Any], item: Mapping[str, Any]) -> None:
        item_id = item.get("id")
        if isinstance(item_id, str) and item_id:
            slot.item_id = item_id
            self._by_id[item_id] = slot
        slot.index_key = _slot_key(event.get("output_index"))
        self._by_index.setdefault(slot.index_key, []).append(slot)

    def _close(self, slot: _Slot) -> None:
        if slot.item_id is not None and self._by_id.get(slot.item_id) is slot:
            del self._by_id[slot.item_id]
        at_index = self._by_index[slot.index_key]
        at_index.remove(slot)
        if not at_index:
            del self._by_index[slot.index_key]

    def _create_slot(self, event: Mapping[str, Any], item: Mapping[str, Any]) -> _Slot | None:
        output = self._output
        item_type = item.get("type")
        if item_type == "reasoning":
            slot = _Slot("thinking", output.add_block(ThinkingContent(thinking="")))
            self._open(slot, event, item)
            self._push(ThinkingStartEvent(content_index=slot.index, partial=output.snapshot()))
            return slot
        if item_type == "message":
            self._apply_phase(item)
            slot = _Slot("text", output.add_block(TextContent(text="")))
            self._open(slot, event, item)
            self._push(TextStartEvent(content_index=slot.index, partial=output.snapshot()))
            return slot
        if item_type == "function_call":
            call_id = _js_string(item.get("call_id", _UNDEFINED))
            item_id = _js_string(item.get("id", _UNDEFINED))
            name = item.get("name")
            namespace = item.get("namespace")
            block = ToolCall(
                id=f"{call_id}|{item_id}",
                name=name if isinstance(name, str) else "",
                arguments={},
                namespace=namespace if isinstance(namespace, str) else None,
            )
            initial = item.get("arguments")
            slot = _Slot("toolCall", output.add_block(block))
            if js_truthy(initial):
                slot.arguments_json.feed(_js_string(initial))
            self._open(slot, event, item)
            self._push(ToolCallStartEvent(content_index=slot.index, partial=output.snapshot()))
            return slot
        # custom_tool_call answers grammar tools, which pitrio never offers.
        return None

    def _apply_phase(self, item: Mapping[str, Any]) -> None:
        # A final-answer message settles the stop reason before the response ends.
        if item.get("type") == "message" and item.get("phase") == "final_answer":
            self._output.stop_reason = "stop"

    def _item_done(self, event: Mapping[str, Any], item: Mapping[str, Any]) -> None:
        self._apply_phase(item)
        item_id = event.get("item_id")
        if not (isinstance(item_id, str) and item_id):
            item_id = item.get("id")
        slot = self._find(event, item_id) or self._create_slot(event, item)
        if slot is None:
            return
        output = self._output
        item_type = item.get("type")
        if item_type == "reasoning" and slot.kind == "thinking":
            block = output.content[slot.index]
            assert isinstance(block, ThinkingContent)
            summary = _join_texts(item.get("summary"), "\n\n")
            thinking = summary or _join_texts(item.get("content"), "\n\n") or block.thinking
            output.set_block(
                slot.index,
                attrs.evolve(block, thinking=thinking, thinking_signature=json_stringify(item)),
            )
            self._reasoning_by_id[_slot_key(item.get("id"))] = slot.index
            self._push(
                ThinkingEndEvent(
                    content_index=slot.index, content=thinking, partial=output.snapshot()
                )
            )
        elif item_type == "message" and slot.kind == "text":
            text = _message_text(item.get("content"))
            signature: JSONObject = {"v": 1, "id": item.get("id", _UNDEFINED)}
            if js_truthy(item.get("phase")):
                signature["phase"] = item["phase"]
            output.set_block(
                slot.index,
                TextContent(text=text, text_signature=json_stringify(_defined(signature))),
            )
            self._push(
                TextEndEvent(content_index=slot.index, content=text, partial=output.snapshot())
            )
        elif item_type == "function_call" and slot.kind == "toolCall":
            block = output.content[slot.index]
            assert isinstance(block, ToolCall)
            source = item.get("arguments")
            if not js_truthy(source):
                source = slot.arguments_json.text or "{}"
            namespace = item.get("namespace")
            call = attrs.evolve(
                block,
                arguments=_arguments(_js_string(source)),
                namespace=namespace if isinstance(namespace, str) else block.namespace,
            )
            output.set_block(slot.index, call)
            self._push(
                ToolCallEndEvent(
                    content_index=slot.index, tool_call=call, partial=output.snapshot()
                )
            )
        else:
            return
        self._close(slot)

    # -- deltas -----------------------------------------------------------------------

    def _text_delta(self, event: Mapping[str, Any]) -> None:
        slot = self._slot(event, "text")
        if slot is None:
            return
        delta = _js_string(event.get("delta", _UNDEFINED))
        self._output.append_text(slot.index, delta)
        self._push(
            TextDeltaEvent(content_index=slot.index, delta=delta, partial=self._output.snapshot())
        )

    def _thinking_delta(self, event: Mapping[str, Any], delta: str) -> None:
        slot = self._slot(event, "thinking")
        if slot is None:
            return
        self._output.append_thinking(slot.index, delta)
        self._push(
            ThinkingDeltaEvent(
                content_index=slot.index, delta=delta, partial=self._output.snapshot()
            )
        )

    def _arguments_delta(self, event: Mapping[str, Any]) -> None:
        slot = self._slot(event, "toolCall")
        if slot is None:
            return
        delta = _js_string(event.get("delta", _UNDEFINED))
        slot.arguments_json.feed(delta)
        self._set_arguments(slot)
        self._push_arguments_delta(slot, delta)

    def _arguments_done(self, event: Mapping[str, Any]) -> None:
        slot = self._slot(event, "toolCall")
        if slot is None:
            return
        previous = slot.arguments_json.text
        arguments = _js_string(event.get("arguments", _UNDEFINED))
        if arguments != previous:
            slot.arguments_json = PartialJSONParser()
            slot.arguments_json.feed(arguments)
        self._set_arguments(slot)
        # Whatever the deltas missed is sent as one more delta.
        if arguments.startswith(previous) and len(arguments) > len(previous):
            self._push_arguments_delta(slot, arguments[len(previous) :])

    def _set_arguments(self, slot: _Slot) -> None:
        block = self._output.content[slot.index]
        assert isinstance(block, ToolCall)
        self._output.set_block(
            slot.index,
            attrs.evolve(block, arguments=lazy_arguments(slot.arguments_json, objects_only=True)),
        )

    def _push_arguments_delta(self, slot: _Slot, delta: str) -> None:
        self._push(
            ToolCallDeltaEvent(
                content_index=slot.index, delta=delta, partial=self._output.snapshot()
            )
        )

    # -- the end of a response --------------------------------------------------------

    def finalize(self, response: Mapping[str, Any]) -> None:
        """Apply a finished response object: its id, usage and cost, and the stop
        reason from its ``status`` (``response.completed``/``.incomplete``, or a
        background response fetched once it finished)."""
        output = self._output
        self.saw_terminal = True
        self._backfill_reasoning_signatures(response.get("output"))
        if js_truthy(response.get("id")):
            output.response_id = response["id"]
        usage = response.get("usage")
        if js_truthy(usage) and isinstance(usage, dict):
            output.usage = _parse_usage(usage)
        output.usage = calculate_cost(self._model, output.usage)
        tier = response.get("service_tier")
        if tier is None:
            tier = self._service_tier
        output.usage = attrs.evolve(
            output.usage, cost=apply_service_tier_pricing(output.usage.cost, tier, self._model)
        )
        status = response.get("status")
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        reason = reason if isinstance(reason, str) else None
        if reason:
            output.raw_stop_reason = f"{_js_string(status)}.{reason}"
        else:
            output.raw_stop_reason = status if isinstance(status, str) else None
        output.stop_reason, output.error_message = _map_status(status, reason)
        if output.stop_reason == "stop" and any(isinstance(b, ToolCall) for b in output.content):
            output.stop_reason = "toolUse"

    def _backfill_reasoning_signatures(self, items: Any) -> None:
        # Azure may leave encrypted_content out of output_item.done and send it only in
        # the final response; keep store=false replay stateless.
        if not isinstance(items, list):
            return
        output = self._output
        for item in items:
            if not isinstance(item, dict) or item.get("type") != "reasoning":
                continue
            encrypted = item.get("encrypted_content")
            index = self._reasoning_by_id.get(_slot_key(item.get("id")))
            if not js_truthy(encrypted) or index is None:
                continue
            block = output.content[index]
            if not isinstance(block, ThinkingContent) or not block.thinking_signature:
                continue
            stored = json_parse(block.thinking_signature)
            if not isinstance(stored, dict) or js_truthy(stored.get("encrypted_content")):
                continue
            stored["encrypted_content"] = encrypted
            output.set_block(index, attrs.evolve(block, thinking_signature=json_stringify(stored)))

    def _failed(self, response: Any) -> None:
        self.saw_terminal = True
        response = response if isinstance(response, dict) else {}
        status = response.get("status")
        self._output.raw_stop_reason = status if isinstance(status, str) else None
        error = response.get("error")
        details = response.get("incomplete_details")
        if js_truthy(error):
            error = error if isinstance(error, dict) else {}
            code = error.get("code")
            message = error.get("message")
            code_text = _js_string(code) if js_truthy(code) else "unknown"
            message_text = _js_string(message) if js_truthy(message) else "no message"
            text = f"{code_text}: {message_text}"
        elif isinstance(details, dict) and js_truthy(details.get("reason")):
            text = f"incomplete: {_js_string(details['reason'])}"
        else:
            text = "Unknown error (no error details in response)"
        raise ProviderFailure(text)


def _parse_usage(usage: Mapping[str, Any]) -> Usage:
    details = usage.get("input_tokens_details")
    details = details if isinstance(details, dict) else {}
    output_details = usage.get("output_tokens_details")
    output_details = output_details if isinstance(output_details, dict) else {}
    # OpenAI counts cached and cache-write tokens inside input_tokens.
    cached = _count(details.get("cached_tokens"))
    written = _count(details.get("cache_write_tokens"))
    return Usage(
        input=max(0, _count(usage.get("input_tokens")) - cached - written),
        output=_count(usage.get("output_tokens")),
        cache_read=cached,
        cache_write=written,
        reasoning=_count(output_details.get("reasoning_tokens")),
        total_tokens=_count(usage.get("total_tokens")),
    )


def _map_status(status: Any, reason: str | None) -> tuple[str, str | None]:
    """``(stop_reason, error_message)`` of a response status (pi-ai's ``mapStopReason``)."""
    if not js_truthy(status) or status in ("completed", "in_progress", "queued"):
        return "stop", None
    if status == "incomplete":
        if reason == "max_output_tokens":
            return "length", None
        if reason:
            return "error", f"Response incomplete: {reason}"
        return "error", "Response incomplete without a provider reason"
    if status in ("failed", "cancelled"):
        return "error", None
    msg = f"Unhandled stop reason: {_js_string(status)}"
    raise ProviderFailure(msg)


def apply_service_tier_pricing(cost: Cost, tier: Any, model: Model) -> Cost:
    """Scale every cost component for a service tier: ``flex`` x0.5, ``priority`` x2
    (x2.5 for ``gpt-5.5``); the total is summed again."""
    if tier == "flex":
        multiplier = 0.5
    elif tier == "priority":
        multiplier = 2.5 if model.id == "gpt-5.5" else 2.0
    else:
        return cost
    i, o = cost.input * multiplier, cost.output * multiplier
    r, w = cost.cache_read * multiplier, cost.cache_write * multiplier
    return Cost(input=i, output=o, cache_read=r, cache_write=w, total=i + o + r + w)


def _message_text(parts: Any) -> str:
    if not isinstance(parts, list):
        return ""
    return "".join(
        _join_element(
            part.get("text") if part.get("type") == "output_text" else part.get("refusal")
        )
        if isinstance(part, dict)
        else ""
        for part in parts
    )


def _join_texts(parts: Any, separator: str) -> str:
    if not isinstance(parts, list):
        return ""
    return separator.join(
        _join_element(part.get("text") if isinstance(part, dict) else None) for part in parts
    )


def _arguments(text: str) -> dict[str, Any]:
    value = parse_streaming_json(text)
    return value if isinstance(value, dict) else {}


def _slot_key(value: Any) -> Any:
    # JavaScript Map keys: 1 and 1.0 are the same number; objects never match.
    if type(value) is int:
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, (dict, list)):
        return object()
    return value


def _count(value: Any) -> int:
    """``value || 0`` for a token count."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not js_truthy(value):
        return 0
    return int(value)


# -- JavaScript string conversion -------------------------------------------------------

_UNDEFINED: Final[Any] = object()


def _js_string(value: Any) -> str:
    """``String(value)`` (a template literal) for a decoded JSON value."""
    if value is _UNDEFINED:
        return "undefined"
    if isinstance(value, str):
        return value
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json_stringify(value)
    if isinstance(value, list):
        return ",".join(_join_element(v) for v in value)
    return "[object Object]"


def _join_element(value: Any) -> str:
    """``Array.prototype.join``: ``null`` and ``undefined`` become ``""``."""
    return "" if value is None or value is _UNDEFINED else _js_string(value)


def _defined(obj: JSONObject) -> JSONObject:
    """Drop ``undefined`` members, as ``JSON.stringify`` does."""
    return {k: v for k, v in obj.items() if v is not _UNDEFINED}


# ======================================================================================
# The SSE body


def _reject_constant(name: str) -> Any:
    msg = f"Unexpected token '{name[0]}', \"{name}\" is not valid JSON"
    raise ValueError(msg)


# ``JSON.parse`` for event data: ``_json.json_parse`` builds a decoder per call (the
# ``parse_constant`` argument does), a fifth of the time of a text delta.
_EVENT_DECODER: Final = json.JSONDecoder(parse_constant=_reject_constant)


def _dispatch(sse: ServerSentEvent, processor: ResponsesEventProcessor) -> bool:
    """Handle one SSE event with the OpenAI SDK's iteration rules; ``True`` at ``[DONE]``
    or a terminal response event (the body is not read further).

    All data but ``[DONE]`` must be JSON; a value with a truthy top-level ``error``
    member raises it as an :class:`APIError`; events named ``thread.*`` are parsed and
    dropped.
    """
    if sse.data.startswith("[DONE]"):
        return True
    try:
        value = _EVENT_DECODER.decode(sse.data)
    except ValueError as exc:
        name = sse.event or "message"
        msg = f"Could not parse OpenAI Responses SSE event {name}: {exc}; data={_excerpt(sse.data)}"
        raise ProviderFailure(msg) from None
    if sse.event is not None and sse.event.startswith("thread."):
        return False
    if isinstance(value, dict):
        error = value.get("error")
        if js_truthy(error):
            raise APIError(APIError.make_message(None, error, None), error=error)
    processor.handle(value)
    return processor.saw_terminal


def _excerpt(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... [{len(text) - limit} more chars]"
