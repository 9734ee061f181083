"""A Responses request: the body, its ``input`` items and tools, and the headers.

The request side of pi-ai 0.85.0's ``api/openai-responses.js`` and
``openai-responses-shared.js``: :class:`ResponsesCompat` (the ``model.compat`` switches
this API reads), ``streamSimple``'s option handling and ``buildParams``
(:func:`build_body`: prompt caching, ``max_output_tokens``, service tier, tools,
reasoning effort and summary, ``sampling_params`` last), ``convertResponsesMessages``
(:func:`convert_messages`: user content, assistant text with its signature, reasoning
items replayed, function calls with ``fc_`` item ids, tool outputs) and the OpenAI
SDK's header layers (:func:`build_headers`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from typing import Any, Final, TypeAlias, final

import attrs

from ..._messages import (
    AssistantMessage,
    ImageContent,
    JSONValue,
    TextContent,
    ThinkingContent,
    UserContent,
    UserMessage,
)
from ..._model import Context, Model, StreamOptions
from .._http import merge_headers, pi_user_agent, require_api_key
from .._json import js_length, json_parse, json_stringify
from .._options import clamp_max_tokens_to_context, clamp_thinking_level, resolve_cache_retention
from .._transform import (
    resolve_response_format,
    sanitize_surrogates,
    short_hash,
    transform_messages,
)

__all__ = [
    "JSONObject",
    "ResponsesCompat",
    "ResponsesRequest",
    "build_body",
    "build_headers",
    "build_request",
    "convert_messages",
    "convert_tools",
    "responses_url",
    "service_tier_option",
]


JSONObject: TypeAlias = dict[str, Any]

# Providers whose foreign tool-call ids get an ``fc_`` item id (OPENAI_TOOL_CALL_PROVIDERS).
_OPENAI_TOOL_CALL_PROVIDERS: Final = frozenset({"openai", "openai-codex", "opencode"})
# OpenAI Responses rejects max_output_tokens below 16.
_MIN_OUTPUT_TOKENS: Final = 16
_PROMPT_CACHE_KEY_MAX_CHARS: Final = 64


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
    if options.response_format is not None:
        body["text"] = {"format": _text_format(options.response_format, compat)}
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


def _text_format(
    response_format: Mapping[str, JSONValue], compat: ResponsesCompat
) -> JSONObject:
    """``StreamOptions.response_format`` (chat completions' form) as the Responses API's
    ``text.format``: a ``json_schema`` one's ``name``, ``schema``, ``strict`` (and
    ``description``) move up a level (pitrio's own: pi-ai has no such option)."""
    resolved = resolve_response_format(response_format, compat.supports_strict_mode)
    spec = resolved.pop("json_schema", None)
    if resolved.get("type") == "json_schema" and isinstance(spec, Mapping):
        return {"type": "json_schema", **spec}
    return resolved


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


def convert_messages(
    model: Model,
    context: Context,
    *,
    tool_call_providers: frozenset[str] = _OPENAI_TOOL_CALL_PROVIDERS,
) -> list[JSONObject]:
    """The request's ``input`` items (pi-ai's ``convertResponsesMessages``).

    ``tool_call_providers`` are the providers whose foreign ``call|item`` tool-call ids
    keep an ``fc_`` item id (pi-ai's ``allowedToolCallProviders``)."""
    items: list[JSONObject] = []
    if context.system_prompt:
        compat = model.compat or {}
        developer = model.reasoning and compat.get("supportsDeveloperRole") is not False
        role = "developer" if developer else "system"
        items.append({"role": role, "content": sanitize_surrogates(context.system_prompt)})
    msg_index = 0
    normalize = partial(_normalize_tool_call_id, providers=tool_call_providers)
    for message in transform_messages(context.messages, model, normalize):
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


def _normalize_tool_call_id(
    tool_call_id: str, model: Model, source: AssistantMessage, *, providers: frozenset[str]
) -> str:
    """A foreign tool call's id for the Responses API (``call|fc_item``)."""
    if model.provider not in providers or "|" not in tool_call_id:
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
