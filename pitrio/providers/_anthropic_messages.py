"""The ``anthropic-messages`` API: Anthropic's Messages API, streamed (pi-ai 0.85.0).

A port of pi-ai's ``api/anthropic-messages.js`` (``streamSimple``) together with the
parts of ``@anthropic-ai/sdk`` 0.123.0 it relies on (headers, status errors), event for
event. The request goes to ``<baseUrl>/v1/messages?beta=true`` with the SDK's headers;
the response is read as raw SSE and parsed here, as pi-ai does.

What the provider does, in order (everything runs in the stream's producer):

1. resolve the simple options: the max-tokens clamp, the thinking budget or effort
   (:func:`_resolve_options`);
2. build the body and the headers (:func:`_build_params`, :func:`_build_headers`);
3. send, retrying retryable failures (``options.max_retries``, default 0) with the
   server's ``retry-after``/``retry-after-ms`` (capped by ``max_retry_delay``);
4. on a 2xx response push ``start``, then one event per SSE event (:class:`_EventHandler`);
5. end with ``done``, or with ``error`` (stop reason ``error``, or ``aborted`` when the
   producer is cancelled: ``Request aborted`` before the response headers, ``Request was
   aborted`` after). No ``*_end`` events are sent for blocks left open by a failure.

Deliberate differences from pi-ai (``docs/deviations-providers-anthropic.md``): a CRLF
split across two reads is one line break; a tool ``input`` given whole in
``content_block_start`` survives ``content_block_stop``; ``reasoning="off"`` means no
thinking.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Final, final

import attrs
import httpx

from .._events import (
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
    LlmMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserContent,
    UserMessage,
)
from .._model import Context, Model, ModelCost, StreamOptions, ToolSpec
from .._stream import AssistantMessageEventStream
from ._http import pi_user_agent, require_api_key
from ._json import json_stringify, parse_json_with_repair
from ._options import (
    adjust_max_tokens_for_thinking,
    clamp_max_tokens_to_context,
    resolve_cache_retention,
)
from ._output import PartialMessage, calculate_cost, now_ms
from ._partial_json import PartialJSONParser, lazy_arguments
from ._request import (
    ABORTED_BEFORE_HEADERS,
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
    transform_messages,
)

if TYPE_CHECKING:
    pass

__all__ = ["build_request", "stream_anthropic_messages"]

API: Final = "anthropic-messages"
DEFAULT_BASE_URL: Final = "https://api.anthropic.com"
ANTHROPIC_VERSION: Final = "2023-06-01"

FINE_GRAINED_TOOL_STREAMING_BETA: Final = "fine-grained-tool-streaming-2025-05-14"
INTERLEAVED_THINKING_BETA: Final = "interleaved-thinking-2025-05-14"
SERVER_SIDE_FALLBACK_BETA: Final = "server-side-fallback-2026-07-01"
MID_CONVERSATION_OUTPUT_CONFIG_BETA: Final = "mid-conversation-output-config-2026-07-01"
THINKING_BINDING_CONTROLS_BETA: Final = "thinking-binding-controls-2026-08-01"
OAUTH_BETAS: Final = ("claude-code-20250219", "oauth-2025-04-20")


_CLAUDE_CODE_VERSION: Final = "2.1.251"
_CLAUDE_CODE_IDENTITY: Final = "You are Claude Code, Anthropic's official CLI for Claude."
_CLAUDE_CODE_TOOLS: Final = (
    "Read",
    "Write",
    "Edit",
    "Bash",
    "Grep",
    "Glob",
    "AskUserQuestion",
    "EnterPlanMode",
    "ExitPlanMode",
    "KillShell",
    "NotebookEdit",
    "Skill",
    "Task",
    "TaskOutput",
    "TodoWrite",
    "WebFetch",
    "WebSearch",
)
_CC_TOOL_LOOKUP: Final = {name.lower(): name for name in _CLAUDE_CODE_TOOLS}

_ANTHROPIC_MESSAGE_EVENTS: Final = frozenset(
    {
        "message_start",
        "message_delta",
        "message_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
    }
)
_CLAUDE_VERSION: Final = re.compile(r"^claude-(?:opus|sonnet|fable)-(\d+)(?:-(\d+))?(?:-|$)")
_ANTHROPIC_EFFORTS: Final = frozenset({"low", "medium", "high", "xhigh", "max"})

_JS_WHITESPACE: Final = (
    " \t\n\r\v\f\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
    "\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)


def _blank(text: str) -> bool:
    """JavaScript's ``text.trim().length === 0``."""
    return not text.strip(_JS_WHITESPACE)


def _to_claude_code_name(name: str) -> str:
    return _CC_TOOL_LOOKUP.get(name.lower(), name)


def _from_claude_code_name(name: str, tools: Sequence[ToolSpec]) -> str:
    lower = name.lower()
    for tool in tools:
        if tool.name.lower() == lower:
            return tool.name
    return name


def _is_oauth_token(api_key: str) -> bool:
    return "sk-ant-oat" in api_key


def _normalize_tool_call_id(tool_call_id: str, *_: object) -> str:
    """Anthropic's tool-use id pattern: ``[a-zA-Z0-9_-]``, at most 64 characters."""
    out = "".join(
        ch if (ch.isascii() and (ch.isalnum() or ch in "_-")) else "_" for ch in tool_call_id
    )
    return out[:64]


# ---------------------------------------------------------------------------------------
# Model compatibility flags (``model.compat``)


@final
@attrs.frozen(kw_only=True)
class _Compat:
    supports_eager_tool_input_streaming: bool
    supports_long_cache_retention: bool
    send_session_affinity_headers: bool
    supports_cache_control_on_tools: bool
    supports_temperature: bool
    allow_empty_signature: bool
    supports_strict_tools: bool
    supports_tool_references: bool
    force_adaptive_thinking: bool
    supports_mid_convo_effort: bool
    allowed_fallback_models: tuple[Mapping[str, JSONValue], ...]


def _compat_flag(compat: Mapping[str, JSONValue], name: str, default: bool) -> bool:
    value = compat.get(name)
    return default if value is None else bool(value)


def _default_supports_tool_references(model: Model) -> bool:
    """First-party Claude models from Opus/Sonnet 4.5 on, except Haiku."""
    if model.provider != "anthropic" or "haiku" in model.id:
        return False
    match = _CLAUDE_VERSION.match(model.id)
    if match is None:
        return False
    major = int(match.group(1))
    minor_text = match.group(2)
    minor = int(minor_text) if minor_text and len(minor_text) < 8 else 0
    return major > 4 or (major == 4 and minor >= 5)


def _compat(model: Model) -> _Compat:
    compat: Mapping[str, JSONValue] = model.compat or {}
    fallbacks = compat.get("allowedFallbackModels")
    return _Compat(
        supports_eager_tool_input_streaming=_compat_flag(
            compat, "supportsEagerToolInputStreaming", True
        ),
        supports_long_cache_retention=_compat_flag(compat, "supportsLongCacheRetention", True),
        send_session_affinity_headers=_compat_flag(compat, "sendSessionAffinityHeaders", False),
        supports_cache_control_on_tools=_compat_flag(compat, "supportsCacheControlOnTools", True),
        supports_temperature=_compat_flag(compat, "supportsTemperature", True),
        allow_empty_signature=_compat_flag(compat, "allowEmptySignature", False),
        supports_strict_tools=_compat_flag(compat, "supportsStrictTools", False),
        supports_tool_references=_compat_flag(
            compat, "supportsToolReferences", _default_supports_tool_references(model)
        ),
        force_adaptive_thinking=compat.get("forceAdaptiveThinking") is True,
        supports_mid_convo_effort=compat.get("supportsMidConvoEffort") is True,
        allowed_fallback_models=tuple(
            f for f in (fallbacks if isinstance(fallbacks, list) else []) if isinstance(f, Mapping)
        ),
    )


# ---------------------------------------------------------------------------------------
# Simple options (``streamSimple``)


@final
@attrs.frozen(kw_only=True)
class _Resolved:
    """What ``streamSimple`` hands to ``stream``: the clamped max tokens and thinking."""

    max_tokens: int
    thinking_enabled: bool
    thinking_budget_tokens: int | None = None
    effort: str | None = None


def _map_thinking_level_to_effort(model: Model, level: str) -> str:
    mapped = (model.thinking_level_map or {}).get(level)
    if isinstance(mapped, str):
        return mapped
    if level in ("minimal", "low"):
        return "low"
    if level == "medium":
        return "medium"
    return "high"


def _resolve_options(model: Model, context: Context, options: StreamOptions) -> _Resolved:
    requested = options.max_tokens if options.max_tokens is not None else model.max_tokens
    base_max_tokens = clamp_max_tokens_to_context(model, context, requested)
    level = options.reasoning
    # pi-ai tests `!options.reasoning`, so "off" (a truthy string) would enable thinking
    # with a NaN budget; pitrio treats "off" as no thinking (PROVIDERS.md §6.18).
    if not level or level == "off":
        return _Resolved(max_tokens=base_max_tokens, thinking_enabled=False)
    compat = model.compat or {}
    if compat.get("forceAdaptiveThinking") is True:
        return _Resolved(
            max_tokens=base_max_tokens,
            thinking_enabled=True,
            effort=_map_thinking_level_to_effort(model, level),
        )
    if level not in ("minimal", "low", "medium", "high", "xhigh", "max"):
        msg = (
            f"unknown thinking level {level!r}; expected one of 'off', 'minimal', 'low', "
            f"'medium', 'high', 'xhigh', 'max'"
        )
        raise ValueError(msg)
    adjusted, budget = adjust_max_tokens_for_thinking(
        base_max_tokens, model.max_tokens, level, options.thinking_budgets
    )
    max_tokens = clamp_max_tokens_to_context(model, context, adjusted)
    return _Resolved(
        max_tokens=max_tokens,
        thinking_enabled=True,
        thinking_budget_tokens=min(budget, max(0, max_tokens - 1024)),
    )


# ---------------------------------------------------------------------------------------
# Request body (``buildParams``)


def _cache_control(model: Model, compat: _Compat, retention: str | None) -> dict[str, str] | None:
    resolved = resolve_cache_retention(retention)
    if resolved == "none":
        return None
    if resolved == "long" and compat.supports_long_cache_retention:
        return {"type": "ephemeral", "ttl": "1h"}
    return {"type": "ephemeral"}


def _image_block(image: ImageContent) -> dict[str, JSONValue]:
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": image.mime_type, "data": image.data},
    }


def _convert_content_blocks(content: Sequence[UserContent]) -> str | list[dict[str, JSONValue]]:
    """A tool result's content: joined text, or blocks when there are images."""
    if not any(isinstance(block, ImageContent) for block in content):
        return sanitize_surrogates("\n".join(b.text for b in content if isinstance(b, TextContent)))
    blocks: list[dict[str, JSONValue]] = []
    for block in content:
        if isinstance(block, TextContent):
            blocks.append({"type": "text", "text": sanitize_surrogates(block.text)})
        else:
            blocks.append(_image_block(block))
    if not any(b["type"] == "text" for b in blocks):
        blocks.insert(0, {"type": "text", "text": "(see attached image)"})
    return blocks


def _split_deferred_tools(
    tools: Sequence[ToolSpec],
    messages: Sequence[LlmMessage],
    enabled: bool,
    normalize_name: Any,
) -> tuple[list[ToolSpec], dict[str, ToolSpec]]:
    """Tools sent up front, and tools only loaded by a tool result (``splitDeferredTools``)."""
    unique: dict[str, ToolSpec] = {}
    for tool in tools:
        unique[normalize_name(tool.name)] = tool
    if not enabled:
        return list(unique.values()), {}
    deferred_names: set[str] = set()
    used_names: set[str] = set()
    for message in messages:
        if isinstance(message, AssistantMessage):
            for block in message.content:
                if isinstance(block, ToolCall):
                    used_names.add(normalize_name(block.name))
        elif isinstance(message, ToolResultMessage):
            for name in message.added_tool_names or ():
                normalized = normalize_name(name)
                if normalized not in used_names:
                    deferred_names.add(normalized)
    immediate: list[ToolSpec] = []
    deferred: dict[str, ToolSpec] = {}
    for name, tool in unique.items():
        if name in deferred_names:
            deferred[name] = tool
        else:
            immediate.append(tool)
    return immediate, deferred


def _convert_messages(
    messages: Sequence[LlmMessage],
    *,
    is_oauth: bool,
    cache_control: dict[str, str] | None,
    allow_empty_signature: bool,
    deferred_tool_names: set[str],
    normalize_name: Any,
    managed_provider: str | None,
) -> tuple[list[dict[str, JSONValue]], dict[int, str]]:
    """The wire messages, and the thinking effort of managed-effort assistant turns
    keyed by their wire position (``convertMessages``)."""
    params: list[dict[str, JSONValue]] = []
    assistant_levels: dict[int, str] = {}
    loaded_tool_names: set[str] = set()
    index = 0
    while index < len(messages):
        message = messages[index]
        if isinstance(message, UserMessage):
            if isinstance(message.content, str):
                if not _blank(message.content):
                    params.append({"role": "user", "content": sanitize_surrogates(message.content)})
            else:
                blocks: list[dict[str, JSONValue]] = []
                for item in message.content:
                    if isinstance(item, TextContent):
                        if not _blank(item.text):
                            blocks.append({"type": "text", "text": sanitize_surrogates(item.text)})
                    else:
                        blocks.append(_image_block(item))
                if blocks:
                    params.append({"role": "user", "content": blocks})
        elif isinstance(message, AssistantMessage):
            blocks = _convert_assistant_blocks(message, is_oauth, allow_empty_signature)
            if blocks:
                if (
                    managed_provider is not None
                    and message.api == API
                    and message.provider == managed_provider
                    and message.provider_thinking_level in _ANTHROPIC_EFFORTS
                ):
                    assert message.provider_thinking_level is not None
                    assistant_levels[len(params)] = message.provider_thinking_level
                params.append({"role": "assistant", "content": blocks})
        elif isinstance(message, ToolResultMessage):
            # Consecutive tool results go into one user message (needed by z.ai too).
            results: list[dict[str, JSONValue]] = []
            siblings: list[dict[str, JSONValue]] = []
            while index < len(messages):
                result = messages[index]
                if not isinstance(result, ToolResultMessage):
                    break
                block, sibling = _convert_tool_result(
                    result, is_oauth, deferred_tool_names, loaded_tool_names, normalize_name
                )
                results.append(block)
                siblings.extend(sibling)
                index += 1
            index -= 1
            params.append({"role": "user", "content": [*results, *siblings]})
        index += 1

    # cache_control on the last user message caches the whole conversation prefix.
    if cache_control is not None and params:
        last = params[-1]
        if last["role"] == "user":
            content = last["content"]
            if isinstance(content, list):
                if content and content[-1].get("type") in ("text", "image", "tool_result"):
                    content[-1]["cache_control"] = cache_control
            elif isinstance(content, str):
                last["content"] = [
                    {"type": "text", "text": content, "cache_control": cache_control}
                ]
    return params, assistant_levels


def _convert_assistant_blocks(
    message: AssistantMessage, is_oauth: bool, allow_empty_signature: bool
) -> list[dict[str, JSONValue]]:
    blocks: list[dict[str, JSONValue]] = []
    for block in message.content:
        if isinstance(block, TextContent):
            if _blank(block.text):
                continue
            blocks.append({"type": "text", "text": sanitize_surrogates(block.text)})
        elif isinstance(block, ThinkingContent):
            if block.redacted:
                redacted: dict[str, JSONValue] = {"type": "redacted_thinking"}
                if block.thinking_signature is not None:
                    redacted["data"] = block.thinking_signature
                blocks.append(redacted)
                continue
            signature = block.thinking_signature
            has_signature = bool(signature) and not _blank(signature or "")
            if _blank(block.thinking) and not has_signature:
                continue
            if not has_signature:
                # A missing signature (e.g. an aborted stream) cannot be replayed as
                # thinking, except by providers that accept empty signatures.
                if allow_empty_signature:
                    blocks.append(
                        {
                            "type": "thinking",
                            "thinking": sanitize_surrogates(block.thinking),
                            "signature": "",
                        }
                    )
                else:
                    blocks.append({"type": "text", "text": sanitize_surrogates(block.thinking)})
            else:
                blocks.append(
                    {
                        "type": "thinking",
                        "thinking": sanitize_surrogates(block.thinking),
                        "signature": signature,
                    }
                )
        elif isinstance(block, ToolCall):
            blocks.append(
                {
                    "type": "tool_use",
                    "id": block.id,
                    "name": _to_claude_code_name(block.name) if is_oauth else block.name,
                    "input": block.arguments,
                }
            )
    return blocks


def _convert_tool_result(
    message: ToolResultMessage,
    is_oauth: bool,
    deferred_tool_names: set[str],
    loaded_tool_names: set[str],
    normalize_name: Any,
) -> tuple[dict[str, JSONValue], list[dict[str, JSONValue]]]:
    references: list[dict[str, JSONValue]] = []
    for name in message.added_tool_names or ():
        normalized = normalize_name(name)
        if normalized not in deferred_tool_names or normalized in loaded_tool_names:
            continue
        loaded_tool_names.add(normalized)
        references.append(
            {
                "type": "tool_reference",
                "tool_name": _to_claude_code_name(name) if is_oauth else name,
            }
        )
    converted = _convert_content_blocks(message.content)
    # Anthropic rejects tool references mixed with ordinary tool-result content.
    block: dict[str, JSONValue] = {
        "type": "tool_result",
        "tool_use_id": message.tool_call_id,
        "content": references if references else converted,
        "is_error": message.is_error,
    }
    siblings: list[dict[str, JSONValue]]
    if not references:
        siblings = []
    elif isinstance(converted, str):
        siblings = [{"type": "text", "text": converted}]
    else:
        siblings = converted
    return block, siblings


def _insert_thinking_level_messages(
    messages: list[dict[str, JSONValue]], levels: dict[int, str], active_effort: str
) -> list[dict[str, JSONValue]]:
    out: list[dict[str, JSONValue]] = []
    for index, message in enumerate(messages):
        historical = levels.get(index)
        if historical is not None:
            out.append({"role": "system", "content": [], "output_config": {"effort": historical}})
        out.append(message)
    out.append({"role": "system", "content": [], "output_config": {"effort": active_effort}})
    return out


# -- strict tool schemas: pi-ai's constrained-sampling.js, shared in _transform ------------


def _resolve_strict(tool: ToolSpec, supports_strict: bool) -> bool:
    return resolve_json_schema_strict(tool, supports_strict) is True


def _convert_tools(
    tools: Sequence[ToolSpec],
    *,
    is_oauth: bool,
    compat: _Compat,
    cache_control: dict[str, str] | None,
    defer_loading: bool = False,
) -> list[dict[str, JSONValue]]:
    out: list[dict[str, JSONValue]] = []
    for position, tool in enumerate(tools):
        strict = _resolve_strict(tool, compat.supports_strict_tools)
        parameters: Mapping[str, JSONValue] = (
            make_strict_json_schema(tool.parameters) if strict else tool.parameters
        )
        properties = parameters.get("properties")
        required = parameters.get("required")
        legacy: dict[str, JSONValue] = {
            "type": "object",
            "properties": properties if properties is not None else {},
            "required": required if required is not None else [],
        }
        converted: dict[str, JSONValue] = {
            "name": _to_claude_code_name(tool.name) if is_oauth else tool.name,
            "description": tool.description,
        }
        if compat.supports_eager_tool_input_streaming:
            converted["eager_input_streaming"] = True
        if strict:
            converted["strict"] = True
        converted["input_schema"] = {**parameters, **legacy} if strict else legacy
        if defer_loading:
            converted["defer_loading"] = True
        if cache_control is not None and position == len(tools) - 1:
            converted["cache_control"] = cache_control
        out.append(converted)
    return out


def _beta_features(
    model: Model,
    context: Context,
    compat: _Compat,
    is_oauth: bool,
    thinking_enabled: bool,
    options: StreamOptions,
) -> list[str]:
    configured: str | None = None
    configured_seen = False
    for headers in (model.headers, options.headers):
        for name, value in (headers or {}).items():
            if name.lower() == "anthropic-beta":
                configured, configured_seen = value, True
    if configured_seen:
        if configured is None:
            return []
        return list(dict.fromkeys(f.strip() for f in configured.split(",") if f.strip()))
    features: list[str] = []
    if is_oauth:
        features.extend(OAUTH_BETAS)
    if context.tools and not compat.supports_eager_tool_input_streaming:
        features.append(FINE_GRAINED_TOOL_STREAMING_BETA)
    if (
        model.reasoning
        and thinking_enabled
        and options.extra.get("interleavedThinking", True) is not False
        and not compat.force_adaptive_thinking
    ):
        features.append(INTERLEAVED_THINKING_BETA)
    if compat.allowed_fallback_models:
        features.append(SERVER_SIDE_FALLBACK_BETA)
    if compat.supports_mid_convo_effort:
        features.extend((MID_CONVERSATION_OUTPUT_CONFIG_BETA, THINKING_BINDING_CONTROLS_BETA))
    return list(dict.fromkeys(features))


def _build_params(
    model: Model,
    context: Context,
    options: StreamOptions,
    resolved: _Resolved,
    compat: _Compat,
    *,
    is_oauth: bool,
) -> dict[str, JSONValue]:
    cache_control = _cache_control(model, compat, options.cache_retention)
    transformed = transform_messages(context.messages, model, _normalize_tool_call_id)
    normalize_name = _to_claude_code_name if is_oauth else (lambda name: name)
    immediate, deferred_map = _split_deferred_tools(
        context.tools, transformed, compat.supports_tool_references, normalize_name
    )
    deferred = list(deferred_map.values())
    if not immediate and deferred:
        immediate, deferred = deferred, []
    deferred_names = {normalize_name(tool.name) for tool in deferred}
    messages, levels = _convert_messages(
        transformed,
        is_oauth=is_oauth,
        cache_control=cache_control,
        allow_empty_signature=compat.allow_empty_signature,
        deferred_tool_names=deferred_names,
        normalize_name=normalize_name,
        managed_provider=model.provider if compat.supports_mid_convo_effort else None,
    )
    params: dict[str, JSONValue] = {
        "model": model.id,
        "messages": (
            _insert_thinking_level_messages(messages, levels, resolved.effort or "high")
            if compat.supports_mid_convo_effort
            else messages
        ),
        "max_tokens": resolved.max_tokens,
        "stream": True,
    }
    cache = {"cache_control": cache_control} if cache_control is not None else {}
    if is_oauth:
        system: list[dict[str, JSONValue]] = [
            {"type": "text", "text": _CLAUDE_CODE_IDENTITY, **cache}
        ]
        if context.system_prompt:
            system.append(
                {"type": "text", "text": sanitize_surrogates(context.system_prompt), **cache}
            )
        params["system"] = system
    elif context.system_prompt:
        params["system"] = [
            {"type": "text", "text": sanitize_surrogates(context.system_prompt), **cache}
        ]
    # Temperature is incompatible with extended thinking and unsupported on Opus 4.7+.
    if (
        options.temperature is not None
        and not resolved.thinking_enabled
        and not compat.supports_mid_convo_effort
        and compat.supports_temperature
    ):
        params["temperature"] = options.temperature
    if immediate or deferred:
        params["tools"] = [
            *_convert_tools(
                immediate,
                is_oauth=is_oauth,
                compat=compat,
                cache_control=cache_control if compat.supports_cache_control_on_tools else None,
            ),
            *_convert_tools(
                deferred, is_oauth=is_oauth, compat=compat, cache_control=None, defer_loading=True
            ),
        ]
    display = options.extra.get("thinkingDisplay") or "summarized"
    if compat.supports_mid_convo_effort:
        # Managed-effort models always think adaptively, so a prefix mismatch drops a
        # block instead of failing every later request.
        params["thinking"] = {
            "type": "adaptive",
            "display": display,
            "block_binding": {"prefix_mismatch_behavior": "drop_block"},
        }
        params["output_config"] = {"effort": "high"}
    elif model.reasoning:
        if resolved.thinking_enabled:
            if compat.force_adaptive_thinking:
                params["thinking"] = {"type": "adaptive", "display": display}
                if resolved.effort:
                    params["output_config"] = {"effort": resolved.effort}
            else:
                params["thinking"] = {
                    "type": "enabled",
                    "budget_tokens": resolved.thinking_budget_tokens or 1024,
                    "display": display,
                }
        elif not (
            model.thinking_level_map is not None
            and "off" in model.thinking_level_map
            and model.thinking_level_map["off"] is None
        ):
            params["thinking"] = {"type": "disabled"}
    if options.metadata:
        user_id = options.metadata.get("user_id")
        if isinstance(user_id, str):
            params["metadata"] = {"user_id": user_id}
    tool_choice: object = options.tool_choice
    if tool_choice:
        params["tool_choice"] = (
            {"type": tool_choice} if isinstance(tool_choice, str) else tool_choice
        )
    if compat.allowed_fallback_models:
        params["fallbacks"] = [{"model": f.get("model")} for f in compat.allowed_fallback_models]
    if options.sampling_params:
        # Merged last, as the other two APIs do (pi-ai's anthropic-messages drops them).
        params.update(options.sampling_params)
    return params


# ---------------------------------------------------------------------------------------
# Headers (pi-ai's createClient + the SDK's buildHeaders)


def _build_headers(
    model: Model,
    context: Context,
    options: StreamOptions,
    *,
    is_oauth: bool,
    betas: Sequence[str],
) -> dict[str, str]:
    """The request headers, merged as the SDK does: later layers win case-insensitively
    and a ``None`` value removes a header."""
    api_key = options.api_key
    client_defaults: dict[str, str | None] = {
        "User-Agent": pi_user_agent(),
        "accept": "application/json",
        "anthropic-dangerous-direct-browser-access": "true",
    }
    auth: dict[str, str | None] = {}
    if model.provider == "github-copilot":
        if api_key is not None:
            auth["Authorization"] = f"Bearer {api_key}"
        client_defaults.update(model.headers or {})
        client_defaults.update(_copilot_headers(context.messages))
    elif api_key and is_oauth:
        auth["Authorization"] = f"Bearer {api_key}"
        client_defaults.update({"user-agent": f"claude-cli/{_CLAUDE_CODE_VERSION}", "x-app": "cli"})
        client_defaults.update(model.headers or {})
    else:
        if api_key is not None:
            auth["X-Api-Key"] = api_key
        retention = resolve_cache_retention(options.cache_retention)
        session_id = options.session_id if retention != "none" else None
        if session_id and _compat(model).send_session_affinity_headers:
            client_defaults["x-session-affinity"] = session_id
        client_defaults.update(model.headers or {})
    # pi-ai merges its header objects with Object.assign (case-sensitive keys, first
    # position kept) before the SDK merges the layers case-insensitively.
    client_defaults.update(options.headers or {})
    layers: list[Mapping[str, str | None]] = [
        {
            "accept": "application/json",
            "anthropic-dangerous-direct-browser-access": "true",
            "anthropic-version": ANTHROPIC_VERSION,
        },
        auth,
        client_defaults,
        {"content-type": "application/json"},
    ]
    if betas:
        layers.append({"anthropic-beta": ",".join(betas)})
    merged: dict[str, str] = {}
    removed: set[str] = set()
    for layer in layers:
        for name, value in layer.items():
            key = name.lower()
            if value is None:
                merged.pop(key, None)
                removed.add(key)
            else:
                merged[key] = value
                removed.discard(key)
    if (
        not merged.get("x-api-key")
        and not merged.get("authorization")
        and "x-api-key" not in removed
        and "authorization" not in removed
    ):
        msg = (
            "Could not resolve authentication method. Expected one of apiKey, authToken, "
            'credentials, config, or profile to be set. Or for one of the "X-Api-Key" or '
            '"Authorization" headers to be explicitly omitted'
        )
        raise ValueError(msg)
    return merged


def _copilot_headers(messages: Sequence[LlmMessage]) -> dict[str, str]:
    last = messages[-1] if messages else None
    headers = {
        "X-Initiator": "agent" if last is not None and last.role != "user" else "user",
        "Openai-Intent": "conversation-edits",
    }
    for message in messages:
        if (
            isinstance(message, UserMessage | ToolResultMessage)
            and not isinstance(message.content, str)
            and any(isinstance(block, ImageContent) for block in message.content)
        ):
            headers["Copilot-Vision-Request"] = "true"
            break
    return headers


def _messages_url(model: Model) -> str:
    base = model.base_url or os.environ.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL
    path = "v1/messages?beta=true" if base.endswith("/") else "/v1/messages?beta=true"
    return base + path


# ---------------------------------------------------------------------------------------
# The whole request


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


# ---------------------------------------------------------------------------------------
# Streaming


def _stop_reason(reason: str, details: JSONValue) -> tuple[str, str | None]:
    """pi-ai's ``mapStopReason``: ``(stop_reason, error_message)``."""
    if reason in ("end_turn", "pause_turn", "stop_sequence"):
        return "stop", None
    if reason == "max_tokens":
        return "length", None
    if reason == "tool_use":
        return "toolUse", None
    if reason == "refusal":
        explanation = details.get("explanation") if isinstance(details, dict) else None
        return "error", explanation or "The model refused to complete the request"
    if reason == "sensitive":
        return "error", "Provider stopped with: sensitive"
    msg = f"Unhandled stop reason: {reason}"
    raise ValueError(msg)


_UNDEFINED: Final = object()
"""A missing JSON member (JavaScript's ``undefined``)."""


def _js_string(value: object) -> str:
    """JavaScript's ``String(value)`` of a decoded JSON value (what ``+=`` appends)."""
    if isinstance(value, str):
        return value
    if value is _UNDEFINED:
        return "undefined"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join("" if item is None else _js_string(item) for item in value)
    if isinstance(value, dict):
        return "[object Object]"
    return json_stringify(value)


class _StreamError(ProviderFailure):
    """A failure while reading the stream (its text becomes ``errorMessage``)."""


def _parse_event(name: str, sse_data: str, raw: Sequence[str]) -> JSONValue:
    try:
        event = parse_json_with_repair(sse_data)
        if event is None:
            msg = "Cannot read properties of null (reading 'type')"
            raise ValueError(msg)
    except (ValueError, RecursionError) as exc:
        # pi-ai joins the raw lines with the two characters backslash and n.
        joined = "\\n".join(raw)
        text = f"Could not parse Anthropic SSE event {name}: {exc}; data={sse_data}; raw={joined}"
        raise _StreamError(text) from None
    return event


@final
class _EventHandler:
    """Turns parsed Messages API events into pi-ai's stream events."""

    __slots__ = (
        "_context_tools",
        "_is_oauth",
        "_json",
        "_model",
        "_open",
        "_stream",
        "_usage_cost",
        "input_transformations",
        "output",
        "saw_message_start",
        "saw_message_stop",
    )

    def __init__(
        self,
        stream: AssistantMessageEventStream,
        output: PartialMessage,
        model: Model,
        *,
        is_oauth: bool,
        tools: Sequence[ToolSpec],
    ) -> None:
        self._stream = stream
        self.output = output
        self._model = model
        self._usage_cost: Model = model
        self._is_oauth = is_oauth
        self._context_tools = tools
        # Open blocks by wire index (content indexes in order: pi-ai's findIndex takes
        # the first block with that index that has not stopped yet).
        self._open: dict[object, list[int]] = {}
        # Accumulated input JSON of tool-call blocks, by content index.
        self._json: dict[int, PartialJSONParser] = {}  # tool input, parsed incrementally
        self.input_transformations: list[JSONValue] | None = None
        self.saw_message_start = False
        self.saw_message_stop = False

    def _find(self, wire_index: object) -> int | None:
        indexes = self._open.get(wire_index)
        return indexes[0] if indexes else None

    def _recompute_cost(self) -> None:
        usage = self.output.usage
        usage = attrs.evolve(
            usage, total_tokens=usage.input + usage.output + usage.cache_read + usage.cache_write
        )
        self.output.usage = calculate_cost(self._usage_cost, usage)

    def handle(self, event: dict[str, JSONValue]) -> None:
        kind = event.get("type")
        if kind == "message_start":
            self._message_start(event)
        elif kind == "content_block_start":
            self._block_start(event)
        elif kind == "content_block_delta":
            self._block_delta(event)
        elif kind == "content_block_stop":
            self._block_stop(event)
        elif kind == "message_delta":
            self._message_delta(event)

    def _message_start(self, event: dict[str, JSONValue]) -> None:
        message = event.get("message")
        if not isinstance(message, dict):
            message = {}
        output = self.output
        output.response_id = message.get("id")
        transformations = message.get("input_transformations")
        if isinstance(transformations, list):
            self.input_transformations = transformations
        output.model = message.get("model")  # type: ignore[assignment]  # the served model id
        self._usage_cost = self._model
        if output.model != self._model.id:
            for fallback in _compat(self._model).allowed_fallback_models:
                if (
                    fallback.get("provider") == self._model.provider
                    and fallback.get("model") == output.model
                ):
                    cost = fallback.get("cost")
                    if isinstance(cost, dict):
                        self._usage_cost = attrs.evolve(
                            self._model, id=str(output.model), cost=_model_cost(cost)
                        )
                    break
        usage = message.get("usage")
        if not isinstance(usage, dict):
            usage = {}
        creation = usage.get("cache_creation")
        output.usage = attrs.evolve(
            output.usage,
            input=usage.get("input_tokens") or 0,
            output=usage.get("output_tokens") or 0,
            cache_read=usage.get("cache_read_input_tokens") or 0,
            cache_write=usage.get("cache_creation_input_tokens") or 0,
            cache_write_1h=(
                creation.get("ephemeral_1h_input_tokens") if isinstance(creation, dict) else None
            )
            or 0,
        )
        self._recompute_cost()

    def _block_start(self, event: dict[str, JSONValue]) -> None:
        block = event.get("content_block")
        if not isinstance(block, dict):
            return
        kind = block.get("type")
        output = self.output
        wire_index = event.get("index")
        if kind == "fallback":
            if output.content:
                msg = "Anthropic performed an unsupported mid-output model fallback"
                raise _StreamError(msg)
            return
        if kind == "text":
            text = block.get("text")
            index = output.add_block(TextContent(text=text if text is not None else ""))
            self._open.setdefault(wire_index, []).append(index)
            self._stream.push(TextStartEvent(content_index=index, partial=output.snapshot()))
        elif kind == "thinking":
            thinking = block.get("thinking")
            signature = block.get("signature")
            index = output.add_block(
                ThinkingContent(
                    thinking=thinking if thinking is not None else "",
                    thinking_signature=signature if signature is not None else "",
                )
            )
            self._open.setdefault(wire_index, []).append(index)
            self._stream.push(ThinkingStartEvent(content_index=index, partial=output.snapshot()))
        elif kind == "redacted_thinking":
            index = output.add_block(
                ThinkingContent(
                    thinking="[Reasoning redacted]",
                    thinking_signature=block.get("data"),
                    redacted=True,
                )
            )
            self._open.setdefault(wire_index, []).append(index)
            self._stream.push(ThinkingStartEvent(content_index=index, partial=output.snapshot()))
        elif kind == "tool_use":
            name = str(block.get("name"))
            if self._is_oauth:
                name = _from_claude_code_name(name, self._context_tools)
            tool_input = block.get("input")
            if not isinstance(tool_input, dict):
                tool_input = {}
            index = output.add_block(
                ToolCall(
                    id=block.get("id"),  # type: ignore[arg-type]  # a string on the wire
                    name=name,
                    arguments=tool_input,
                )
            )
            self._open.setdefault(wire_index, []).append(index)
            self._json[index] = PartialJSONParser()
            self._stream.push(ToolCallStartEvent(content_index=index, partial=output.snapshot()))

    def _block_delta(self, event: dict[str, JSONValue]) -> None:
        delta = event.get("delta")
        if not isinstance(delta, dict):
            return
        index = self._find(event.get("index"))
        if index is None:
            return
        output = self.output
        block = output.content[index]
        kind = delta.get("type")
        if kind == "text_delta":
            if isinstance(block, TextContent):
                text = delta.get("text", _UNDEFINED)
                if type(text) is not str:
                    text = _js_string(text)
                output.append_text(index, text)
                self._stream.push(
                    TextDeltaEvent(content_index=index, delta=text, partial=output.snapshot())
                )
        elif kind == "thinking_delta":
            if isinstance(block, ThinkingContent):
                thinking = delta.get("thinking", _UNDEFINED)
                if type(thinking) is not str:
                    thinking = _js_string(thinking)
                output.append_thinking(index, thinking)
                self._stream.push(
                    ThinkingDeltaEvent(
                        content_index=index, delta=thinking, partial=output.snapshot()
                    )
                )
        elif kind == "input_json_delta":
            if isinstance(block, ToolCall):
                fragment = _js_string(delta.get("partial_json", _UNDEFINED))
                parser = self._json.get(index)
                if parser is None:
                    parser = self._json[index] = PartialJSONParser()
                parser.feed(fragment)
                if not parser.empty:
                    # Until some input JSON arrives, the arguments stay those given in
                    # content_block_start (pi-ai would reset them to {}).
                    output.content[index] = attrs.evolve(
                        block, arguments=lazy_arguments(parser, objects_only=True)
                    )
                self._stream.push(
                    ToolCallDeltaEvent(
                        content_index=index, delta=fragment, partial=output.snapshot()
                    )
                )
        elif kind == "signature_delta" and isinstance(block, ThinkingContent):
            # The signature accumulates silently (no event), as in pi-ai.
            signature = block.thinking_signature or ""
            output.content[index] = attrs.evolve(
                block, thinking_signature=signature + _js_string(delta.get("signature", _UNDEFINED))
            )

    def _block_stop(self, event: dict[str, JSONValue]) -> None:
        wire_index = event.get("index")
        index = self._find(wire_index)
        if index is None:
            return
        self._open[wire_index].pop(0)
        output = self.output
        block = output.content[index]
        if isinstance(block, TextContent):
            self._stream.push(
                TextEndEvent(content_index=index, content=block.text, partial=output.snapshot())
            )
        elif isinstance(block, ThinkingContent):
            self._stream.push(
                ThinkingEndEvent(
                    content_index=index, content=block.thinking, partial=output.snapshot()
                )
            )
        else:
            parser = self._json.pop(index, None)
            if parser is not None and not parser.empty:
                block = attrs.evolve(block, arguments=_arguments(parser))
                output.content[index] = block
            self._stream.push(
                ToolCallEndEvent(content_index=index, tool_call=block, partial=output.snapshot())
            )

    def _message_delta(self, event: dict[str, JSONValue]) -> None:
        output = self.output
        transformations = event.get("input_transformations")
        if isinstance(transformations, list):
            self.input_transformations = transformations
        delta = event.get("delta")
        if not isinstance(delta, dict):
            delta = {}
        reason = delta.get("stop_reason")
        if reason:
            raw = _js_string(reason)
            output.raw_stop_reason = raw
            stop_reason, error_message = _stop_reason(raw, delta.get("stop_details"))
            output.stop_reason = stop_reason
            if error_message:
                output.error_message = error_message
        usage = event.get("usage")
        if isinstance(usage, dict):
            changes: dict[str, Any] = {}
            for wire, field in (
                ("input_tokens", "input"),
                ("output_tokens", "output"),
                ("cache_read_input_tokens", "cache_read"),
                ("cache_creation_input_tokens", "cache_write"),
            ):
                value = usage.get(wire)
                if value is not None:
                    changes[field] = value
            details = usage.get("output_tokens_details")
            thinking_tokens = details.get("thinking_tokens") if isinstance(details, dict) else None
            if thinking_tokens is not None:
                changes["reasoning"] = thinking_tokens
            if changes:
                output.usage = attrs.evolve(output.usage, **changes)
        self._recompute_cost()


def _arguments(parser: PartialJSONParser) -> dict[str, JSONValue]:
    """The partial-JSON parse of a tool call's input text, as an object: JSON that is
    not an object (pi-ai would keep e.g. ``12`` or a list) gives ``{}``."""
    arguments = parser.value()
    return arguments if isinstance(arguments, dict) else {}


def _model_cost(cost: Mapping[str, JSONValue]) -> ModelCost:
    def rate(*names: str) -> float:
        for name in names:
            value = cost.get(name)
            if isinstance(value, int | float):
                return float(value)
        return 0.0

    return ModelCost(
        input=rate("input"),
        output=rate("output"),
        cache_read=rate("cacheRead", "cache_read"),
        cache_write=rate("cacheWrite", "cache_write"),
    )


def _diagnostic(transformations: Sequence[JSONValue]) -> dict[str, JSONValue]:
    items: list[JSONValue] = []
    for item in transformations:
        entry: dict[str, JSONValue] = {}
        if isinstance(item, dict):
            for key in ("type", "path", "reason"):
                if item.get(key) is not None:
                    entry[key] = item[key]
        items.append(entry)
    return {
        "type": "anthropic_input_transformations",
        "timestamp": now_ms(),
        "details": {"transformations": items},
    }


@final
class _AnthropicExchange(Exchange):
    """One Messages API request (see :mod:`._request` for the lifecycle)."""

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


def _message_as_events(message: dict[str, JSONValue]) -> list[dict[str, JSONValue]]:
    """The stream events a whole Messages API ``message`` object (a server that did not
    stream) stands for."""
    blocks = message.get("content")
    start: dict[str, JSONValue] = {**message, "content": []}
    events: list[dict[str, JSONValue]] = [{"type": "message_start", "message": start}]
    for index, block in enumerate(blocks if isinstance(blocks, list) else []):
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        delta: dict[str, JSONValue] | None = None
        opening: dict[str, JSONValue] = dict(block)
        if kind == "text":
            opening["text"] = ""
            delta = {"type": "text_delta", "text": block.get("text") or ""}
        elif kind == "thinking":
            opening["thinking"] = ""
            delta = {"type": "thinking_delta", "thinking": block.get("thinking") or ""}
        elif kind == "tool_use":
            opening["input"] = {}
            delta = {"type": "input_json_delta", "partial_json": json_stringify(block.get("input"))}
        events.append({"type": "content_block_start", "index": index, "content_block": opening})
        if delta is not None:
            events.append({"type": "content_block_delta", "index": index, "delta": delta})
        events.append({"type": "content_block_stop", "index": index})
    events.append(
        {
            "type": "message_delta",
            "delta": {
                "stop_reason": message.get("stop_reason"),
                "stop_details": message.get("stop_details"),
            },
            "usage": message.get("usage"),
        }
    )
    events.append({"type": "message_stop"})
    return events


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


def _dispatch(name: str | None, data: str, raw: Sequence[str], handler: _EventHandler) -> bool:
    """One SSE event by its event name; ``True`` at ``message_stop`` (the body is not
    read further). Data-only events and unknown names are skipped."""
    if name == "error":
        raise _StreamError(data)
    if name not in _ANTHROPIC_MESSAGE_EVENTS:
        return False
    assert name is not None
    event = _parse_event(name, data, raw)
    if not isinstance(event, dict):
        return False
    kind = event.get("type")
    if kind == "message_start":
        handler.saw_message_start = True
    elif kind == "message_stop":
        handler.saw_message_stop = True
    handler.handle(event)
    return kind == "message_stop"
