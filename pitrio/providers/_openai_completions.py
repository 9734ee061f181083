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
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any, Final, final

import attrs
import httpx

from .._events import (
    ErrorEvent,
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
    ImageContent,
    JSONValue,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from .._model import Context, Model, StreamOptions, ToolSpec
from .._stream import AssistantMessageEventStream
from ._http import APIError, format_provider_error, merge_headers, pi_user_agent, require_api_key
from ._json import js_truthy, json_parse, json_stringify
from ._options import (
    clamp_max_tokens_to_context,
    clamp_thinking_level,
    resolve_cache_retention,
    thinking_budget_for_level,
)
from ._output import PartialMessage, calculate_cost, setup_error_message
from ._partial_json import PartialJSONParser, lazy_arguments
from ._request import (
    ABORTED_AFTER_HEADERS,
    Exchange,
    HttpRequest,
    ProviderFailure,
    exchange_stream,
)
from ._sse import ServerSentEvent
from ._transform import (
    make_strict_json_schema,
    resolve_json_schema_strict,
    sanitize_surrogates,
    short_hash,
    transform_messages,
)

__all__ = [
    "CompletionsCompat",
    "build_params",
    "convert_messages",
    "get_compat",
    "stream_openai_completions",
]

JSONObject = dict[str, Any]

_REASONING_FIELDS: Final = ("reasoning_content", "reasoning", "reasoning_text")
_REPLAY_FIELDS: Final = frozenset({"reasoning", "reasoning_content", "reasoning_text"})
_MIN_ANSWER_TOKENS: Final = 1024


# ---------------------------------------------------------------------------------------
# Compat


@final
@attrs.frozen(kw_only=True)
class CompletionsCompat:
    """The per-server switches of this API (pi-ai's ``OpenAICompletionsCompat``).

    Detected from the provider name and base URL (:func:`get_compat`); each can be
    overridden by ``model.compat`` under its pi-ai name (each field's ``wire``
    metadata, e.g. ``supports_store`` is ``supportsStore``). Overrides are kept as
    given: pi-ai reads the switches by truthiness.
    """

    supports_store: bool = attrs.field(metadata={"wire": "supportsStore"})
    supports_developer_role: bool = attrs.field(metadata={"wire": "supportsDeveloperRole"})
    supports_reasoning_effort: bool = attrs.field(metadata={"wire": "supportsReasoningEffort"})
    supports_usage_in_streaming: bool = attrs.field(metadata={"wire": "supportsUsageInStreaming"})
    supports_finish_reason: bool = attrs.field(metadata={"wire": "supportsFinishReason"})
    max_tokens_field: str = attrs.field(metadata={"wire": "maxTokensField"})
    requires_tool_result_name: bool = attrs.field(metadata={"wire": "requiresToolResultName"})
    requires_assistant_after_tool_result: bool = attrs.field(
        metadata={"wire": "requiresAssistantAfterToolResult"}
    )
    requires_thinking_as_text: bool = attrs.field(metadata={"wire": "requiresThinkingAsText"})
    requires_reasoning_content_on_assistant_messages: bool = attrs.field(
        metadata={"wire": "requiresReasoningContentOnAssistantMessages"}
    )
    thinking_format: str = attrs.field(metadata={"wire": "thinkingFormat"})
    open_router_routing: Mapping[str, JSONValue] = attrs.field(
        metadata={"wire": "openRouterRouting"}
    )
    vercel_gateway_routing: Mapping[str, JSONValue] = attrs.field(
        metadata={"wire": "vercelGatewayRouting"}
    )
    chat_template_kwargs: Mapping[str, JSONValue] = attrs.field(
        metadata={"wire": "chatTemplateKwargs"}
    )
    chat_template_args: Mapping[str, JSONValue] = attrs.field(metadata={"wire": "chatTemplateArgs"})
    zai_tool_stream: bool = attrs.field(metadata={"wire": "zaiToolStream"})
    supports_thinking_token_budget: bool = attrs.field(
        metadata={"wire": "supportsThinkingTokenBudget"}
    )
    thinking_token_budget_field: str | None = attrs.field(
        metadata={"wire": "thinkingTokenBudgetField"}
    )
    supports_strict_mode: bool = attrs.field(metadata={"wire": "supportsStrictMode"})
    supports_openai_grammar_tools: bool = attrs.field(
        metadata={"wire": "supportsOpenAIGrammarTools"}
    )
    cache_control_format: str | None = attrs.field(metadata={"wire": "cacheControlFormat"})
    send_session_affinity_headers: bool = attrs.field(
        metadata={"wire": "sendSessionAffinityHeaders"}
    )
    deferred_tools_mode: str | None = attrs.field(metadata={"wire": "deferredToolsMode"})
    session_affinity_format: str = attrs.field(metadata={"wire": "sessionAffinityFormat"})
    supports_long_cache_retention: bool = attrs.field(
        metadata={"wire": "supportsLongCacheRetention"}
    )
    vllm_priority: JSONValue = attrs.field(metadata={"wire": "vllmPriority"})


_COMPAT_WIRE_NAMES: Final[Mapping[str, str]] = {
    field.name: field.metadata["wire"] for field in attrs.fields(CompletionsCompat)
}
"""Field name -> pi-ai's camelCase key in ``model.compat``."""


def _detect_compat(model: Model) -> CompletionsCompat:
    provider = model.provider
    base_url = model.base_url
    is_zai = (
        provider in ("zai", "zai-coding-cn")
        or "api.z.ai" in base_url
        or ("open.bigmodel.cn" in base_url)
    )
    is_together = (
        provider == "together" or "api.together.ai" in base_url or ("api.together.xyz" in base_url)
    )
    is_moonshot = provider in ("moonshotai", "moonshotai-cn") or "api.moonshot." in base_url
    is_openrouter = provider == "openrouter" or "openrouter.ai" in base_url
    is_cf_workers = provider == "cloudflare-workers-ai" or "api.cloudflare.com" in base_url
    is_cf_gateway = provider == "cloudflare-ai-gateway" or "gateway.ai.cloudflare.com" in base_url
    is_nvidia = provider == "nvidia" or "integrate.api.nvidia.com" in base_url
    is_ant_ling = provider == "ant-ling" or "api.ant-ling.com" in base_url
    is_deepseek = provider == "deepseek" or "deepseek.com" in base_url.lower()
    is_grok = provider == "xai" or "api.x.ai" in base_url
    non_standard = (
        is_nvidia
        or provider == "cerebras"
        or "cerebras.ai" in base_url
        or is_grok
        or is_together
        or "chutes.ai" in base_url
        or is_deepseek
        or is_zai
        or is_moonshot
        or provider == "opencode"
        or "opencode.ai" in base_url
        or is_cf_workers
        or is_cf_gateway
        or is_ant_ling
    )
    use_max_tokens = (
        "chutes.ai" in base_url
        or is_deepseek
        or is_moonshot
        or is_cf_gateway
        or is_together
        or is_nvidia
        or is_ant_ling
        or is_zai
    )
    openrouter_developer = is_openrouter and (
        model.id.startswith("anthropic/") or model.id.startswith("openai/")
    )
    if is_deepseek:
        thinking_format = "deepseek"
    elif is_zai:
        thinking_format = "zai"
    elif is_together:
        thinking_format = "together"
    elif is_ant_ling:
        thinking_format = "ant-ling"
    elif is_openrouter:
        thinking_format = "openrouter"
    else:
        thinking_format = "openai"
    return CompletionsCompat(
        supports_store=not non_standard,
        supports_developer_role=openrouter_developer or (not non_standard and not is_openrouter),
        supports_reasoning_effort=not (
            is_grok or is_zai or is_moonshot or is_together or is_cf_gateway or is_nvidia
        )
        and not is_ant_ling,
        supports_usage_in_streaming=True,
        supports_finish_reason=True,
        max_tokens_field="max_tokens" if use_max_tokens else "max_completion_tokens",
        requires_tool_result_name=False,
        requires_assistant_after_tool_result=False,
        requires_thinking_as_text=False,
        requires_reasoning_content_on_assistant_messages=is_deepseek,
        thinking_format=thinking_format,
        open_router_routing={},
        vercel_gateway_routing={},
        chat_template_kwargs={},
        chat_template_args={},
        zai_tool_stream=False,
        supports_thinking_token_budget=False,
        thinking_token_budget_field=None,
        supports_strict_mode=not (is_moonshot or is_together or is_cf_gateway or is_nvidia),
        supports_openai_grammar_tools=False,
        cache_control_format=(
            "anthropic" if provider == "openrouter" and model.id.startswith("anthropic/") else None
        ),
        send_session_affinity_headers=False,
        deferred_tools_mode=None,
        session_affinity_format="openrouter" if is_openrouter else "openai",
        supports_long_cache_retention=not (
            is_together or is_cf_workers or is_cf_gateway or is_nvidia or is_ant_ling
        ),
        vllm_priority=None,
    )


def get_compat(model: Model) -> CompletionsCompat:
    """The compat switches of ``model``: detected from provider and base URL, each
    overridden by ``model.compat`` when given there (pi-ai's ``getCompat``).
    ``model.compat`` speaks pi-ai's camelCase names (``supportsStore``)."""
    detected = _detect_compat(model)
    overrides = model.compat or {}
    if not overrides:
        return detected
    changes: dict[str, Any] = {
        name: overrides[wire]
        for name, wire in _COMPAT_WIRE_NAMES.items()
        if overrides.get(wire) is not None
    }
    changes["open_router_routing"] = overrides.get("openRouterRouting") or {}
    changes["vllm_priority"] = overrides.get("vllmPriority")
    return attrs.evolve(detected, **changes)


# ---------------------------------------------------------------------------------------
# Messages


def _normalize_tool_call_id(model: Model) -> Any:
    def normalize(tool_call_id: str, _model: Model, _source: AssistantMessage) -> str:
        if "|" in tool_call_id:
            call_part, _, item_part = tool_call_id.partition("|")
            call_id = re.sub(r"[^a-zA-Z0-9_-]", "_", call_part)
            item_id = re.sub(r"[^a-zA-Z0-9_-]", "_", item_part)
            combined = f"{call_id}_{item_id}" if item_id else call_id
            if len(combined) <= 40:
                return combined
            digest = short_hash(tool_call_id)[:8]
            return f"{call_id[: max(1, 40 - len(digest) - 1)]}_{digest}"
        if model.provider == "openai" and len(tool_call_id) > 40:
            return tool_call_id[:40]
        return tool_call_id

    return normalize


def _image_url(block: ImageContent) -> JSONObject:
    return {
        "type": "image_url",
        "image_url": {"url": f"data:{block.mime_type};base64,{block.data}"},
    }


def _is_reasoning_detail(detail: JSONValue) -> bool:
    if not isinstance(detail, dict):
        return False
    if not (
        (detail.get("id") is None or isinstance(detail["id"], str))
        and ("format" not in detail or isinstance(detail["format"], str))
        and (
            "index" not in detail
            or (isinstance(detail["index"], int | float) and not isinstance(detail["index"], bool))
        )
    ):
        return False
    kind = detail.get("type")
    if kind == "reasoning.summary":
        return isinstance(detail.get("summary"), str)
    if kind == "reasoning.encrypted":
        return isinstance(detail.get("data"), str)
    if kind == "reasoning.text":
        return isinstance(detail.get("text"), str) and (
            detail.get("signature") is None or isinstance(detail["signature"], str)
        )
    return False


def _parse_reasoning_details(signature: str | None) -> list[JSONValue] | None:
    if not signature:
        return None
    try:
        parsed = json_parse(signature)
    except ValueError:
        return None
    if isinstance(parsed, list) and parsed and all(_is_reasoning_detail(d) for d in parsed):
        return parsed
    return None


def _parse_legacy_encrypted_detail(signature: str | None) -> JSONValue:
    if not signature:
        return None
    try:
        parsed = json_parse(signature)
    except ValueError:
        return None
    if (
        _is_reasoning_detail(parsed)
        and parsed.get("type") == "reasoning.encrypted"
        and isinstance(parsed.get("id"), str)
        and parsed["id"]
        and parsed["data"]
    ):
        return parsed
    return None


def _convert_tools(tools: Sequence[ToolSpec], compat: CompletionsCompat) -> list[JSONObject]:
    supports_strict = compat.supports_strict_mode is not False
    out = []
    for tool in tools:
        strict = resolve_json_schema_strict(tool, supports_strict)
        parameters = make_strict_json_schema(tool.parameters) if strict else dict(tool.parameters)
        function: JSONObject = {
            "name": tool.name,
            "description": tool.description,
            "parameters": parameters,
        }
        if supports_strict:
            function["strict"] = bool(strict)
        out.append({"type": "function", "function": function})
    return out


def convert_messages(model: Model, context: Context, compat: CompletionsCompat) -> list[JSONObject]:
    """The ``messages`` of a chat-completions request (pi-ai's ``convertMessages``)."""
    params: list[JSONObject] = []
    messages = transform_messages(context.messages, model, _normalize_tool_call_id(model))
    if context.system_prompt:
        role = "developer" if model.reasoning and compat.supports_developer_role else "system"
        params.append({"role": role, "content": sanitize_surrogates(context.system_prompt)})
    last_role: str | None = None
    index = 0
    while index < len(messages):
        message = messages[index]
        if (
            compat.requires_assistant_after_tool_result
            and last_role == "toolResult"
            and isinstance(message, UserMessage)
        ):
            params.append({"role": "assistant", "content": "I have processed the tool results."})
        if isinstance(message, UserMessage):
            if isinstance(message.content, str):
                params.append({"role": "user", "content": sanitize_surrogates(message.content)})
            else:
                parts = [
                    {"type": "text", "text": sanitize_surrogates(block.text)}
                    if isinstance(block, TextContent)
                    else _image_url(block)
                    for block in message.content
                ]
                if parts:
                    params.append({"role": "user", "content": parts})
                else:
                    index += 1
                    continue
            last_role = "user"
        elif isinstance(message, AssistantMessage):
            converted = _convert_assistant(model, message, compat)
            if converted is not None:
                params.append(converted)
            last_role = "assistant"
        else:
            images: list[JSONObject] = []
            while index < len(messages) and isinstance(messages[index], ToolResultMessage):
                result = messages[index]
                assert isinstance(result, ToolResultMessage)
                text = "\n".join(b.text for b in result.content if isinstance(b, TextContent))
                has_images = any(isinstance(b, ImageContent) for b in result.content)
                if not text:
                    text = "(see attached image)" if has_images else "(no tool output)"
                tool_message: JSONObject = {
                    "role": "tool",
                    "content": sanitize_surrogates(text),
                    "tool_call_id": result.tool_call_id,
                }
                if compat.requires_tool_result_name and result.tool_name:
                    tool_message["name"] = result.tool_name
                params.append(tool_message)
                if has_images and "image" in model.input:
                    images.extend(
                        _image_url(b) for b in result.content if isinstance(b, ImageContent)
                    )
                index += 1
            if images:
                if compat.requires_assistant_after_tool_result:
                    params.append(
                        {"role": "assistant", "content": "I have processed the tool results."}
                    )
                params.append(
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "Attached image(s) from tool result:"},
                            *images,
                        ],
                    }
                )
                last_role = "user"
            else:
                last_role = "toolResult"
            continue
        index += 1
    return params


def _convert_assistant(
    model: Model, message: AssistantMessage, compat: CompletionsCompat
) -> JSONObject | None:
    out: JSONObject = {
        "role": "assistant",
        "content": "" if compat.requires_assistant_after_tool_result else None,
    }
    text_parts = [
        {"type": "text", "text": sanitize_surrogates(b.text)}
        for b in message.content
        if isinstance(b, TextContent) and b.text.strip()
    ]
    text = "".join(p["text"] for p in text_parts)
    thinking = [b for b in message.content if isinstance(b, ThinkingContent)]
    calls = [b for b in message.content if isinstance(b, ToolCall)]
    signed = next(
        (
            d
            for d in (_parse_reasoning_details(b.thinking_signature) for b in thinking)
            if d is not None
        ),
        None,
    )
    legacy = [
        d
        for d in (_parse_legacy_encrypted_detail(c.thought_signature) for c in calls)
        if d is not None
    ]
    preserved = signed if signed is not None else (legacy or None)
    non_empty = [b for b in thinking if b.thinking.strip()]
    if non_empty:
        if compat.requires_thinking_as_text:
            thinking_text = "\n\n".join(sanitize_surrogates(b.thinking) for b in non_empty)
            out["content"] = [{"type": "text", "text": thinking_text}, *text_parts]
        else:
            if text:
                out["content"] = text
            if not preserved:
                signature = non_empty[0].thinking_signature
                if model.provider == "opencode-go" and signature == "reasoning":
                    signature = "reasoning_content"
                if signature and signature in _REPLAY_FIELDS:
                    out[signature] = "\n".join(b.thinking for b in non_empty)
    elif text:
        out["content"] = text
    if calls:
        out["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": json_stringify(call.arguments)},
            }
            for call in calls
        ]
    if preserved:
        out["reasoning_details"] = preserved
    if (
        compat.requires_reasoning_content_on_assistant_messages
        and model.reasoning
        and "reasoning_content" not in out
    ):
        out["reasoning_content"] = ""
    content = out["content"]
    if not content and "tool_calls" not in out:
        return None
    return out


# ---------------------------------------------------------------------------------------
# Request parameters


def _has_tool_history(context: Context) -> bool:
    for message in context.messages:
        if isinstance(message, ToolResultMessage):
            return True
        if isinstance(message, AssistantMessage) and any(
            isinstance(b, ToolCall) for b in message.content
        ):
            return True
    return False


def _clamp_cache_key(key: str | None) -> str | None:
    if key is None:
        return None
    return key[:64]


def _cache_control(compat: CompletionsCompat, retention: str) -> JSONObject | None:
    if compat.cache_control_format != "anthropic" or retention == "none":
        return None
    control: JSONObject = {"type": "ephemeral"}
    if retention == "long" and compat.supports_long_cache_retention:
        control["ttl"] = "1h"
    return control


def _add_cache_control_to_text(message: JSONObject, control: JSONObject) -> bool:
    content = message.get("content")
    if isinstance(content, str):
        if not content:
            return False
        message["content"] = [{"type": "text", "text": content, "cache_control": control}]
        return True
    if not isinstance(content, list):
        return False
    for part in reversed(content):
        if isinstance(part, dict) and part.get("type") == "text":
            part["cache_control"] = control
            return True
    return False


def _apply_cache_control(
    messages: list[JSONObject], tools: list[JSONObject] | None, control: JSONObject
) -> None:
    for message in messages:
        if message.get("role") in ("system", "developer"):
            _add_cache_control_to_text(message, control)
            break
    if tools:
        tools[-1]["cache_control"] = control
    for message in reversed(messages):
        if message.get("role") in ("user", "assistant", "tool") and _add_cache_control_to_text(
            message, control
        ):
            return


def _map_level(model: Model, level: str | None) -> Any:
    """``thinkingLevelMap[level] ?? level`` (``None`` when the map says ``null``... and
    the level is then used, as ``??`` does)."""
    mapped = (model.thinking_level_map or {}).get(level) if level is not None else None
    return mapped if mapped is not None else level


def _chat_template_value(
    model: Model, effort: str | None, value: JSONValue, budget: int | None
) -> JSONValue:
    if not isinstance(value, dict):
        return value
    if not effort and value.get("omitWhenOff"):
        return None
    if value.get("$var") == "thinking.enabled":
        return bool(effort)
    if value.get("$var") == "thinking.budget":
        return budget
    level_map = model.thinking_level_map or {}
    key = effort if effort else "off"
    if key not in level_map:
        return effort
    mapped = level_map[key]
    return mapped if isinstance(mapped, str) else None


def _chat_template_values(
    model: Model, effort: str | None, values: Mapping[str, JSONValue], budget: int | None
) -> JSONObject | None:
    out = {}
    for key, value in values.items():
        resolved = _chat_template_value(model, effort, value, budget)
        if resolved is not None:
            out[key] = resolved
    return out or None


def build_params(
    model: Model,
    context: Context,
    options: StreamOptions,
    *,
    max_tokens: int | None,
    effort: str | None,
    compat: CompletionsCompat | None = None,
    retention: str | None = None,
) -> JSONObject:
    """The request body (pi-ai's ``buildParams``)."""
    compat = compat or get_compat(model)
    retention = retention or resolve_cache_retention(options.cache_retention)
    messages = convert_messages(model, context, compat)
    control = _cache_control(compat, retention)
    params: JSONObject = {"model": model.id, "messages": messages, "stream": True}
    long_ok = retention == "long" and compat.supports_long_cache_retention
    if ("api.openai.com" in model.base_url and retention != "none") or long_ok:
        key = _clamp_cache_key(options.session_id)
        if key is not None:
            params["prompt_cache_key"] = key
    if long_ok:
        params["prompt_cache_retention"] = "24h"
    if compat.supports_usage_in_streaming is not False:
        params["stream_options"] = {"include_usage": True}
    if compat.supports_store:
        params["store"] = False
    if max_tokens:
        field = "max_tokens" if compat.max_tokens_field == "max_tokens" else "max_completion_tokens"
        params[field] = max_tokens
    if options.temperature is not None:
        params["temperature"] = options.temperature
    tools = list(context.tools)
    if compat.deferred_tools_mode == "kimi":
        deferred = {
            name
            for m in context.messages
            if isinstance(m, ToolResultMessage)
            for name in (m.added_tool_names or ())
        }
        tools = [t for t in tools if t.name not in deferred]
    if tools:
        params["tools"] = _convert_tools(tools, compat)
        if compat.zai_tool_stream:
            params["tool_stream"] = True
    elif _has_tool_history(context):
        params["tools"] = []
    if control is not None:
        _apply_cache_control(messages, params.get("tools"), control)
    if options.tool_choice:
        params["tool_choice"] = options.tool_choice
    if compat.vllm_priority is not None:
        params["priority"] = compat.vllm_priority
    budget_field = compat.thinking_token_budget_field or (
        "thinking_token_budget" if compat.supports_thinking_token_budget else None
    )
    budget: int | None = None
    if effort and model.reasoning:
        ceiling = (
            params.get("max_tokens") or params.get("max_completion_tokens") or model.max_tokens
        )
        raw_budget = thinking_budget_for_level(effort, options.thinking_budgets) or 0
        clamped = min(raw_budget, max(0, ceiling - _MIN_ANSWER_TOKENS))
        budget = clamped if clamped > 0 else None
    _apply_thinking(params, model, compat, effort, budget)
    if budget_field and budget is not None:
        params[budget_field] = budget
    if model.compat and model.compat.get("openRouterRouting"):
        params["provider"] = model.compat["openRouterRouting"]
    if model.compat and model.compat.get("vercelGatewayRouting"):
        routing = model.compat["vercelGatewayRouting"]
        if isinstance(routing, dict) and (routing.get("only") or routing.get("order")):
            gateway = {k: routing[k] for k in ("only", "order") if routing.get(k)}
            params["providerOptions"] = {"gateway": gateway}
    if options.sampling_params:
        params.update(options.sampling_params)
    return params


def _apply_thinking(
    params: JSONObject,
    model: Model,
    compat: CompletionsCompat,
    effort: str | None,
    budget: int | None,
) -> None:
    fmt = compat.thinking_format
    level_map = model.thinking_level_map or {}
    supports_effort = compat.supports_reasoning_effort
    if not model.reasoning:
        return
    if fmt == "zai":
        params["thinking"] = (
            {"type": "enabled", "clear_thinking": False} if effort else {"type": "disabled"}
        )
        if effort and supports_effort:
            mapped = level_map.get(effort, effort)
            if isinstance(mapped, str):
                params["reasoning_effort"] = mapped
    elif fmt == "qwen":
        params["enable_thinking"] = bool(effort)
        if effort and supports_effort:
            mapped = _map_level(model, effort)
            if isinstance(mapped, str):
                params["reasoning_effort"] = mapped
    elif fmt == "qwen-chat-template":
        params["chat_template_kwargs"] = {
            "enable_thinking": bool(effort),
            "preserve_thinking": True,
        }
    elif fmt == "chat-template":
        values = _chat_template_values(model, effort, compat.chat_template_kwargs or {}, budget)
        if values:
            params["chat_template_kwargs"] = values
    elif fmt == "baseten":
        values = _chat_template_values(model, effort, compat.chat_template_args or {}, budget)
        if values:
            params["chat_template_args"] = values
        if supports_effort:
            key = effort if effort else "off"
            mapped = level_map.get(key, effort)
            if isinstance(mapped, str):
                params["reasoning_effort"] = mapped
    elif fmt == "deepseek":
        if effort:
            params["thinking"] = {"type": "enabled"}
        elif not ("off" in level_map and level_map["off"] is None):
            params["thinking"] = {"type": "disabled"}
        if effort and supports_effort:
            params["reasoning_effort"] = _map_level(model, effort)
    elif fmt == "openrouter":
        if effort:
            params["reasoning"] = {"effort": _map_level(model, effort)}
        elif not ("off" in level_map and level_map["off"] is None):
            off = level_map.get("off")
            params["reasoning"] = {"effort": off if off is not None else "none"}
    elif fmt == "ant-ling":
        if effort:
            mapped = level_map.get(effort)
            if isinstance(mapped, str):
                params["reasoning"] = {"effort": mapped}
    elif fmt == "together":
        params["reasoning"] = {"enabled": bool(effort)}
        if effort and supports_effort:
            params["reasoning_effort"] = _map_level(model, effort)
    elif fmt == "string-thinking":
        if effort:
            params["thinking"] = _map_level(model, effort)
        elif not ("off" in level_map and level_map["off"] is None):
            off = level_map.get("off")
            params["thinking"] = off if off is not None else "none"
    elif effort and supports_effort:
        params["reasoning_effort"] = _map_level(model, effort)
    elif not effort and supports_effort:
        off = level_map.get("off")
        if isinstance(off, str):
            params["reasoning_effort"] = off


def _request_headers(
    model: Model, options: StreamOptions, api_key: str, session_id: str | None, compat: Any
) -> dict[str, str]:
    defaults: dict[str, str | None] = {"User-Agent": pi_user_agent(), **(model.headers or {})}
    if session_id and compat.send_session_affinity_headers:
        if compat.session_affinity_format == "openrouter":
            defaults["x-session-id"] = session_id
        else:
            if compat.session_affinity_format == "openai":
                defaults["session_id"] = session_id
            defaults["x-client-request-id"] = session_id
            defaults["x-session-affinity"] = session_id
    return merge_headers(
        {"Accept": "application/json"},
        {"Authorization": f"Bearer {api_key}"},
        defaults,
        options.headers,
        {"Content-Type": "application/json"},
    )


def _endpoint(base_url: str) -> str:
    if base_url.endswith("/"):
        return base_url + "chat/completions"
    return base_url + "/chat/completions"


# ---------------------------------------------------------------------------------------
# Streaming


def _nullish(*values: JSONValue) -> JSONValue:
    for value in values:
        if value is not None:
            return value
    return None


def _get(obj: JSONValue, key: str) -> JSONValue:
    return obj.get(key) if isinstance(obj, dict) else None


def _num(value: JSONValue) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return value


def _parse_usage(raw: JSONValue, model: Model) -> Usage:
    details = _get(raw, "prompt_tokens_details")
    prompt = _num(_get(raw, "prompt_tokens")) or 0
    cache_read = _num(
        _nullish(
            _get(details, "cached_tokens"),
            _get(raw, "prompt_cache_hit_tokens"),
            _get(raw, "cached_tokens"),
            0,
        )
    )
    cache_write = _num(_get(details, "cache_write_tokens")) or 0
    input_tokens = max(0, prompt - cache_read - cache_write)
    output = _num(_get(raw, "completion_tokens")) or 0
    reasoning = _num(_get(_get(raw, "completion_tokens_details"), "reasoning_tokens")) or 0
    usage = Usage(
        input=_int(input_tokens),
        output=_int(output),
        cache_read=_int(cache_read),
        cache_write=_int(cache_write),
        reasoning=_int(reasoning),
        total_tokens=_int(input_tokens + output + cache_read + cache_write),
    )
    return calculate_cost(model, usage)


def _int(value: float) -> int:
    return int(value) if float(value).is_integer() else value  # type: ignore[return-value]  # JS numbers


def _js_str(value: JSONValue) -> str:
    if isinstance(value, str):
        return value
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return json_stringify(value)
    if isinstance(value, list):
        return ",".join("" if v is None else _js_str(v) for v in value)
    return "[object Object]"


def _map_stop_reason(reason: JSONValue) -> tuple[str, str | None]:
    if reason in ("stop", "end"):
        return "stop", None
    if reason == "length":
        return "length", None
    if reason in ("function_call", "tool_calls"):
        return "toolUse", None
    return "error", f"Provider finish_reason: {_js_str(reason)}"


@final
class _ToolDraft:
    __slots__ = ("args", "index", "stream_index")

    def __init__(self, index: int, stream_index: float | None) -> None:
        self.index = index
        self.stream_index = stream_index
        self.args = PartialJSONParser()  # the streamed arguments, parsed incrementally


@final
class _ChunkHandler:
    """pi-ai's per-chunk logic on a :class:`PartialMessage`."""

    __slots__ = (
        "has_finish_reason",
        "model",
        "output",
        "reasoning_details",
        "stream",
        "text_index",
        "thinking_index",
        "tools",
        "tools_by_id",
        "tools_by_index",
    )

    def __init__(
        self, model: Model, output: PartialMessage, stream: AssistantMessageEventStream
    ) -> None:
        self.model = model
        self.output = output
        self.stream = stream
        self.text_index: int | None = None
        self.thinking_index: int | None = None
        self.tools: list[_ToolDraft] = []
        self.tools_by_index: dict[float, _ToolDraft] = {}
        self.tools_by_id: dict[str, _ToolDraft] = {}
        self.has_finish_reason = False
        self.reasoning_details: list[JSONObject] | None = None

    def handle(self, chunk: JSONValue) -> None:
        if not isinstance(chunk, dict):
            return
        output = self.output
        if not output.response_id and js_truthy(chunk.get("id")):
            output.response_id = _js_str(chunk["id"])
        chunk_model = chunk.get("model")
        if isinstance(chunk_model, str) and chunk_model and chunk_model != self.model.id:
            output.response_model = output.response_model or chunk_model
        if js_truthy(chunk.get("usage")):
            output.usage = _parse_usage(chunk["usage"], self.model)
        choices = chunk.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices else None
        if not js_truthy(choice):
            return
        if not isinstance(choice, dict):
            choice = {}
        if not js_truthy(chunk.get("usage")) and js_truthy(choice.get("usage")):
            output.usage = _parse_usage(choice["usage"], self.model)
        finish = choice.get("finish_reason")
        if js_truthy(finish):
            output.raw_stop_reason = _js_str(finish)
            stop_reason, error_message = _map_stop_reason(finish)
            output.stop_reason = stop_reason
            if error_message:
                output.error_message = error_message
            self.has_finish_reason = True
        delta = choice.get("delta")
        if not js_truthy(delta):
            return
        if not isinstance(delta, dict):
            delta = {}
        content = delta.get("content")
        if isinstance(content, str) and content:
            index = self._ensure_text()
            output.append_text(index, content)
            self.stream.push(
                TextDeltaEvent(content_index=index, delta=content, partial=output.snapshot())
            )
        field = next(
            (f for f in _REASONING_FIELDS if isinstance(delta.get(f), str) and delta[f]), None
        )
        if field is not None:
            text = delta[field]
            signature = (
                "reasoning_content"
                if self.model.provider == "opencode-go" and field == "reasoning"
                else field
            )
            index = self._ensure_thinking(signature)
            output.append_thinking(index, text)
            self.stream.push(
                ThinkingDeltaEvent(content_index=index, delta=text, partial=output.snapshot())
            )
        tool_calls = delta.get("tool_calls")
        if js_truthy(tool_calls) and isinstance(tool_calls, list):
            for tool_call in tool_calls:
                self._tool_call(tool_call if isinstance(tool_call, dict) else {})
        details = delta.get("reasoning_details")
        if isinstance(details, list):
            for detail in details:
                if not _is_reasoning_detail(detail):
                    continue
                self._ensure_thinking("")
                if self.reasoning_details is None:
                    self.reasoning_details = []
                _append_reasoning_detail(self.reasoning_details, detail)

    def _ensure_text(self) -> int:
        if self.text_index is None:
            self.text_index = self.output.add_block(TextContent(text=""))
            self.stream.push(
                TextStartEvent(content_index=self.text_index, partial=self.output.snapshot())
            )
        return self.text_index

    def _ensure_thinking(self, signature: str) -> int:
        if self.thinking_index is None:
            self.thinking_index = self.output.add_block(
                ThinkingContent(thinking="", thinking_signature=signature)
            )
            self.stream.push(
                ThinkingStartEvent(
                    content_index=self.thinking_index, partial=self.output.snapshot()
                )
            )
        return self.thinking_index

    def _tool_call(self, tool_call: JSONObject) -> None:
        output = self.output
        raw_index = tool_call.get("index")
        stream_index: float | None = (
            raw_index
            if isinstance(raw_index, int | float) and not isinstance(raw_index, bool)
            else None
        )
        function = tool_call.get("function")
        name_value = _nullish(_get(function, "name"), _get(tool_call.get("custom"), "name"))
        call_id = tool_call.get("id")
        draft = self.tools_by_index.get(stream_index) if stream_index is not None else None
        if draft is None and js_truthy(call_id):
            draft = self.tools_by_id.get(_js_str(call_id))
        if draft is None:
            block = ToolCall(
                id=_js_str(call_id) if js_truthy(call_id) else "",
                name=_js_str(name_value) if name_value is not None else "",
                arguments={},
            )
            draft = _ToolDraft(output.add_block(block), stream_index)
            self.tools.append(draft)
            if stream_index is not None:
                self.tools_by_index[stream_index] = draft
            if js_truthy(call_id):
                self.tools_by_id[_js_str(call_id)] = draft
            self.stream.push(
                ToolCallStartEvent(content_index=draft.index, partial=output.snapshot())
            )
        if stream_index is not None and draft.stream_index is None:
            draft.stream_index = stream_index
            self.tools_by_index[stream_index] = draft
        if js_truthy(call_id):
            self.tools_by_id[_js_str(call_id)] = draft
        current = output.content[draft.index]
        assert isinstance(current, ToolCall)
        block = current
        if not block.id and js_truthy(call_id):
            block = ToolCall(
                id=_js_str(call_id),
                name=block.name,
                arguments=block.arguments,
                thought_signature=block.thought_signature,
            )
        if not block.name and js_truthy(name_value):
            block = ToolCall(
                id=block.id,
                name=_js_str(name_value),
                arguments=block.arguments,
                thought_signature=block.thought_signature,
            )
        delta = ""
        arguments = _get(function, "arguments")
        if js_truthy(arguments):
            delta = _js_str(arguments)
            draft.args.feed(delta)
            parsed = lazy_arguments(draft.args, objects_only=False)
            block = ToolCall(
                id=block.id,
                name=block.name,
                arguments=parsed,
                thought_signature=block.thought_signature,
            )
        output.content[draft.index] = block
        self.stream.push(
            ToolCallDeltaEvent(content_index=draft.index, delta=delta, partial=output.snapshot())
        )

    def apply_reasoning_details(self) -> None:
        """Store the accumulated ``reasoning_details`` as the thinking block's signature."""
        if self.reasoning_details is None or self.thinking_index is None:
            return
        block = self.output.content[self.thinking_index]
        assert isinstance(block, ThinkingContent)
        self.output.content[self.thinking_index] = ThinkingContent(
            thinking=block.thinking,
            thinking_signature=json_stringify(self.reasoning_details),
            redacted=block.redacted,
        )

    def finish_blocks(self) -> None:
        """End every block, in content order (pi-ai ends them only now)."""
        output = self.output
        drafts = {d.index: d for d in self.tools}
        for index, block in enumerate(list(output.content)):
            if isinstance(block, TextContent):
                self.stream.push(
                    TextEndEvent(content_index=index, content=block.text, partial=output.snapshot())
                )
            elif isinstance(block, ThinkingContent):
                if index == self.thinking_index:
                    self.apply_reasoning_details()
                current = output.content[index]
                assert isinstance(current, ThinkingContent)
                self.stream.push(
                    ThinkingEndEvent(
                        content_index=index, content=current.thinking, partial=output.snapshot()
                    )
                )
            elif isinstance(block, ToolCall):
                draft = drafts.get(index)
                arguments = draft.args.value() if draft else {}
                call = ToolCall(
                    id=block.id,
                    name=block.name,
                    arguments=arguments,
                    thought_signature=block.thought_signature,
                )
                output.content[index] = call
                self.stream.push(
                    ToolCallEndEvent(content_index=index, tool_call=call, partial=output.snapshot())
                )


def _append_reasoning_detail(details: list[JSONObject], detail: JSONObject) -> None:
    last = details[-1] if details else None
    kind = detail.get("type")
    if (
        last is not None
        and kind == last.get("type")
        and kind in ("reasoning.text", "reasoning.summary")
    ):
        field = "text" if kind == "reasoning.text" else "summary"
        last[field] = last[field] + detail[field]
        if kind == "reasoning.text" and not last.get("signature"):
            last["signature"] = detail.get("signature")
        if last.get("id") is None and "id" in detail:
            last["id"] = detail["id"]
        if not last.get("format") and "format" in detail:
            last["format"] = detail["format"]
        if last.get("index") is None and "index" in detail:
            last["index"] = detail["index"]
        return
    details.append(dict(detail))


class _StreamAPIError(APIError):
    """An ``error`` member in a streamed chunk (the SDK throws ``APIError``)."""


def _check_end(handler: _ChunkHandler, compat: CompletionsCompat) -> None:
    output = handler.output
    if output.stop_reason == "aborted":
        raise ProviderFailure(ABORTED_AFTER_HEADERS)
    if not handler.has_finish_reason and not compat.supports_finish_reason:
        output.stop_reason = (
            "toolUse" if any(isinstance(b, ToolCall) for b in output.content) else "stop"
        )
    if output.stop_reason == "error":
        msg = output.error_message or "Provider returned an error stop reason"
        raise ProviderFailure(msg)
    if (compat.supports_finish_reason and not handler.has_finish_reason) or (
        output.stop_reason == "pending"
    ):
        msg = "Stream ended without finish_reason"
        raise ProviderFailure(msg)


@final
class _CompletionsExchange(Exchange):
    """One chat-completions request (see :mod:`._request` for the lifecycle)."""

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


def _completion_as_chunk(body: JSONValue) -> JSONObject | None:
    """A whole ``chat.completion`` object (a server that did not stream) as the one
    chunk that carries all of it; ``None`` when ``body`` is not one."""
    if not isinstance(body, dict):
        return None
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        return None
    delta = dict(message)
    tool_calls = delta.get("tool_calls")
    if isinstance(tool_calls, list):
        delta["tool_calls"] = [
            {**call, "index": index} if isinstance(call, dict) else call
            for index, call in enumerate(tool_calls)
        ]
    chunk = {**body, "choices": [{**choice, "delta": delta}]}
    chunk["choices"][0].pop("message", None)
    return chunk


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


def _dispatch(
    event: str | None, data: str, headers: httpx.Headers | None, handler: _ChunkHandler
) -> bool:
    """One SSE event; returns True at ``[DONE]`` (the body is not read further)."""
    if data.startswith("[DONE]"):
        return True
    try:
        chunk = json_parse(data)
    except ValueError as exc:
        name = event or "message"
        msg = f"Could not parse OpenAI Completions SSE event {name}: {exc}; data={_excerpt(data)}"
        raise ProviderFailure(msg) from None
    if event is not None and event.startswith("thread."):
        return False
    error = chunk.get("error") if isinstance(chunk, dict) else None
    if js_truthy(chunk) and js_truthy(error):
        raise _StreamAPIError(
            APIError.make_message(None, error, None), headers=headers, error=error
        )
    handler.handle(chunk)
    return False


def _excerpt(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... [{len(text) - limit} more chars]"
