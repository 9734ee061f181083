"""The JSON body of a Messages API request (pi-ai's ``buildParams``).

A port of the request side of pi-ai 0.85.0's ``api/anthropic-messages.js``:

- the simple options (``streamSimple``): ``max_tokens`` clamped to the context window,
  the thinking budget or effort (:func:`_resolve_options`);
- the history converted to Messages API messages (``convertMessages``): tool results
  grouped into one user turn, thinking blocks and signatures kept for the same model,
  cache control on the last user message, the effort of managed-effort models as
  system messages;
- the tools (``convertTools``: strict schemas, deferred loading, Claude Code names);
- the body itself (:func:`_build_params`): system prompt, temperature, thinking,
  metadata, tool choice, fallbacks, ``sampling_params`` merged last.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, final

import attrs

from ..._messages import (
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
from ..._model import Context, Model, StreamOptions, ToolSpec
from .._json import JS_WHITESPACE
from .._options import (
    adjust_max_tokens_for_thinking,
    clamp_max_tokens_to_context,
    resolve_cache_retention,
)
from .._transform import (
    make_strict_json_schema,
    resolve_json_schema_strict,
    sanitize_surrogates,
    transform_messages,
)
from ._compat import _CLAUDE_CODE_IDENTITY, API, _Compat, _to_claude_code_name

_ANTHROPIC_EFFORTS: Final = frozenset({"low", "medium", "high", "xhigh", "max"})


def _blank(text: str) -> bool:
    """JavaScript's ``text.trim().length === 0``."""
    return not text.strip(JS_WHITESPACE)


def _normalize_tool_call_id(tool_call_id: str, *_: object) -> str:
    """Anthropic's tool-use id pattern: ``[a-zA-Z0-9_-]``, at most 64 characters."""
    out = "".join(
        ch if (ch.isascii() and (ch.isalnum() or ch in "_-")) else "_" for ch in tool_call_id
    )
    return out[:64]


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
# Messages and tools (``convertMessages``, ``convertTools``)


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


# ---------------------------------------------------------------------------------------
# The body (``buildParams``)


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
