"""The body, headers and URL of a chat-completions request (pi-ai's ``buildParams``).

From pi-ai 0.85.0's ``api/openai-completions.js`` and the OpenAI SDK's headers: the
model, messages and tools, ``stream_options``, ``max_tokens`` or
``max_completion_tokens``, ``store``, the prompt cache key and ``cache_control``
markers, the thinking request in the server's dialect (``reasoning_effort``,
``reasoning``, ``thinking``, ``enable_thinking``, chat-template arguments), OpenRouter
routing and vLLM priority, pitrio's ``response_format``, ``sampling_params`` last;
then the SDK's headers (key, ``User-Agent``, session affinity, the model's and the
caller's) and ``<baseUrl>/chat/completions``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ..._messages import AssistantMessage, JSONValue, ToolCall, ToolResultMessage
from ..._model import Context, Model, StreamOptions
from .._http import merge_headers, pi_user_agent
from .._options import resolve_cache_retention, thinking_budget_for_level
from .._transform import resolve_response_format
from ._compat import CompletionsCompat, JSONObject, get_compat
from ._convert import _convert_tools, convert_messages

__all__ = ["build_params"]


_MIN_ANSWER_TOKENS: Final = 1024


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
    if options.response_format is not None:
        params["response_format"] = resolve_response_format(
            options.response_format, compat.supports_strict_mode
        )
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


# ---------------------------------------------------------------------------------------
# Headers and URL


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
