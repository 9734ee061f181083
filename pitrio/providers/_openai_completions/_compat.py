"""The per-server switches of ``openai-completions`` (pi-ai's ``OpenAICompletionsCompat``).

pi-ai 0.85.0's ``getCompat`` / ``detectCompat`` of ``api/openai-completions.js``: which
dialect of chat completions a server speaks (``store``, the ``developer`` role,
``reasoning_effort``, usage in the stream, ``max_tokens`` or ``max_completion_tokens``,
how thinking is requested and replayed, ...), detected from the provider name and base
URL and overridden by ``model.compat`` under pi-ai's camelCase names.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, final

import attrs

from ..._messages import JSONValue
from ..._model import Model

__all__ = ["CompletionsCompat", "JSONObject", "get_compat"]


JSONObject = dict[str, Any]


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
