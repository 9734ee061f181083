"""The ``ConverseStream`` command input (pi-ai 0.85.0's ``bedrock-converse-stream.js``).

:func:`build_payload` is pi-ai's ``commandInput`` after its ``streamSimple`` resolved the
options: ``modelId``, ``messages`` (the history after ``transformMessages``; images as
base64 bytes; tool results merged into one user turn; cache points for the Claude models
that take them), ``system``, ``inferenceConfig``, ``toolConfig`` and
``additionalModelRequestFields`` (Claude's thinking: adaptive with an effort on Opus 4.6+
and Sonnet 4.6+, a token budget before). :func:`request_body` is the SDK's REST JSON of it
(``modelId`` goes in the path); blobs are base64 on the wire, so the payload holds them as
base64 text already.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Sequence
from typing import Any, Final

from ..._messages import (
    AssistantMessage,
    ImageContent,
    JSONValue,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from ..._model import Context, Model, StreamOptions
from .._json import JS_WHITESPACE
from .._options import adjust_max_tokens_for_thinking, clamp_max_tokens_to_context
from .._transform import (
    make_strict_json_schema,
    resolve_json_schema_strict,
    sanitize_surrogates,
    transform_messages,
)
from ._auth import env_value

__all__ = [
    "EMPTY_TEXT_PLACEHOLDER",
    "build_payload",
    "is_anthropic_claude",
    "request_body",
    "resolve_reasoning",
]

JSONObject = dict[str, Any]

EMPTY_TEXT_PLACEHOLDER: Final = "<empty>"
"""The text of a user turn (or tool result) that would otherwise be empty."""

_DEFAULT_BUDGETS: Final = {
    "minimal": 1024,
    "low": 2048,
    "medium": 8192,
    "high": 16384,
    "xhigh": 16384,
    "max": 16384,
}
_IMAGE_FORMATS: Final = {
    "image/jpeg": "jpeg",
    "image/jpg": "jpeg",
    "image/png": "png",
    "image/gif": "gif",
    "image/webp": "webp",
}


# ---------------------------------------------------------------------------------------
# Model families


def _candidates(model: Model) -> list[str]:
    """``getModelMatchCandidates``: id and name, lowercased, also with separators as ``-``."""
    values = [model.id, model.name] if model.name else [model.id]
    out: list[str] = []
    for value in values:
        lower = value.lower()
        out += [lower, re.sub(r"[\s_.:]+", "-", lower)]
    return out


def is_anthropic_claude(model: Model) -> bool:
    """``isAnthropicClaudeModel`` (the id or the name names Claude)."""
    model_id, name = model.id.lower(), (model.name or "").lower()
    return (
        "anthropic.claude" in model_id
        or "anthropic/claude" in model_id
        or "anthropic.claude" in name
        or "anthropic/claude" in name
        or "claude" in name
    )


def _any(model: Model, *fragments: str) -> bool:
    return any(fragment in c for c in _candidates(model) for fragment in fragments)


def _adaptive_thinking(model: Model) -> bool:
    return _any(
        model, "opus-4-6", "opus-4-7", "opus-4-8", "opus-5", "sonnet-4-6", "sonnet-5", "fable-5"
    )


def _native_xhigh(model: Model) -> bool:
    return _any(model, "opus-4-7", "opus-4-8", "opus-5", "sonnet-5", "fable-5")


def _prompt_caching(model: Model, options: StreamOptions) -> bool:
    """``supportsPromptCaching``: Claude 3.5 Haiku, 3.7 Sonnet, 4.x and 5; any model with
    ``AWS_BEDROCK_FORCE_CACHE=1`` (application inference profiles hide the name)."""
    if not _any(model, "claude"):
        return env_value("AWS_BEDROCK_FORCE_CACHE", options) == "1"
    return _any(
        model, "fable-5", "opus-5", "sonnet-5", "-4-", "claude-3-7-sonnet", "claude-3-5-haiku"
    )


def _gov_cloud(model: Model, options: StreamOptions) -> bool:
    region = (
        options.extra.get("region")
        or env_value("AWS_REGION", options)
        or env_value("AWS_DEFAULT_REGION", options)
    )
    if isinstance(region, str) and region.lower().startswith("us-gov-"):
        return True
    model_id = model.id.lower()
    return model_id.startswith(("us-gov.", "arn:aws-us-gov:"))


# ---------------------------------------------------------------------------------------
# streamSimple's options


def resolve_reasoning(
    model: Model, context: Context, options: StreamOptions
) -> tuple[str | None, int, dict[str, int] | None]:
    """``(reasoning level, max tokens, thinking budgets)`` as ``streamSimple`` passes them.

    ``off`` is no reasoning (pi-ai would treat the string as a level). A budget-based
    Claude model gets room for the budget: the max tokens raised (up to the model's),
    the level's budget lowered to leave 1,024 tokens for the answer."""
    requested = options.max_tokens if options.max_tokens is not None else model.max_tokens
    max_tokens = clamp_max_tokens_to_context(model, context, requested)
    level = options.reasoning if options.reasoning and options.reasoning != "off" else None
    budgets = dict(options.thinking_budgets) if options.thinking_budgets else None
    if level is None or not is_anthropic_claude(model) or _adaptive_thinking(model):
        return level, max_tokens, budgets
    adjusted, budget = adjust_max_tokens_for_thinking(
        max_tokens, model.max_tokens, level, options.thinking_budgets
    )
    max_tokens = clamp_max_tokens_to_context(model, context, adjusted)
    clamped = "high" if level in ("xhigh", "max") else level
    return level, max_tokens, {**(budgets or {}), clamped: min(budget, max(0, max_tokens - 1024))}


def _effort(model: Model, level: str) -> str:
    if level == "xhigh" and _native_xhigh(model):
        return "xhigh"
    mapped = (model.thinking_level_map or {}).get(level)
    if isinstance(mapped, str):
        return mapped
    return {"minimal": "low", "low": "low", "medium": "medium"}.get(level, "high")


def _additional_fields(
    model: Model, options: StreamOptions, level: str | None, budgets: dict[str, int] | None
) -> JSONObject | None:
    """``buildAdditionalModelRequestFields``: Claude's thinking, else nothing."""
    if not level or not model.reasoning or not is_anthropic_claude(model):
        return None
    display_option = options.extra.get("thinkingDisplay")
    display = None if _gov_cloud(model, options) else (display_option or "summarized")
    thinking: JSONObject
    fields: JSONObject
    if _adaptive_thinking(model):
        thinking = {"type": "adaptive"}
        if display is not None:
            thinking["display"] = display
        return {"thinking": thinking, "output_config": {"effort": _effort(model, level)}}
    clamped = "high" if level in ("xhigh", "max") else level
    budget = (budgets or {}).get(clamped)
    thinking = {
        "type": "enabled",
        "budget_tokens": budget if budget is not None else _DEFAULT_BUDGETS.get(level),
    }
    if display is not None:
        thinking["display"] = display
    fields = {"thinking": thinking}
    if options.extra.get("interleavedThinking", True) is not False:
        fields["anthropic_beta"] = ["interleaved-thinking-2025-05-14"]
    return fields


def _cache_retention(options: StreamOptions) -> str:
    if options.cache_retention:
        return options.cache_retention
    return "long" if env_value("PI_CACHE_RETENTION", options) == "long" else "short"


def _cache_point(retention: str) -> JSONObject:
    point: JSONObject = {"type": "default"}
    if retention == "long":
        point["ttl"] = "1h"
    return {"cachePoint": point}


# ---------------------------------------------------------------------------------------
# Messages


def _blank(text: str) -> bool:
    return not text.strip(JS_WHITESPACE)


def _text_block(text: str) -> JSONObject | None:
    sanitized = sanitize_surrogates(text)
    return None if _blank(sanitized) else {"text": sanitized}


def _image_block(block: ImageContent) -> JSONObject:
    image_format = _IMAGE_FORMATS.get(block.mime_type)
    if image_format is None:
        msg = f"Unknown image type: {block.mime_type}"
        raise ValueError(msg)
    return {"image": {"format": image_format, "source": {"bytes": _canonical_base64(block.data)}}}


def _canonical_base64(data: str) -> str:
    """``data`` decoded as ``atob`` does and encoded again (what reaches the wire).

    Raises:
        ValueError: not base64 (``atob``'s ``InvalidCharacterError``).
    """
    compact = re.sub(r"[\t\n\f\r ]", "", data)
    try:
        raw = base64.b64decode(compact + "=" * (-len(compact) % 4), validate=True)
    except (binascii.Error, ValueError):
        msg = "The string to be decoded is not correctly encoded."
        raise ValueError(msg) from None
    return base64.b64encode(raw).decode("ascii")


def _redacted_bytes(signature: str | None) -> str | None:
    if not signature:
        return None
    try:
        encoded = _canonical_base64(signature)
    except ValueError:
        return None
    return encoded or None


def _sanitize_document(value: JSONValue) -> JSONValue:
    """``sanitizeBedrockDocument``: object members with an empty key dropped."""
    if isinstance(value, list):
        return [_sanitize_document(v) for v in value]
    if isinstance(value, dict):
        return {k: _sanitize_document(v) for k, v in value.items() if k}
    return value


def _tool_result_content(content: Iterable[TextContent | ImageContent]) -> list[JSONObject]:
    out: list[JSONObject] = []
    for block in content:
        if isinstance(block, ImageContent):
            out.append(_image_block(block))
        else:
            text = _text_block(block.text)
            if text is not None:
                out.append(text)
    return out or [{"text": EMPTY_TEXT_PLACEHOLDER}]


def _tool_result(message: ToolResultMessage) -> JSONObject:
    return {
        "toolResult": {
            "toolUseId": message.tool_call_id,
            "content": _tool_result_content(message.content),
            "status": "error" if message.is_error else "success",
        }
    }


def _normalize_call_id(call_id: str, _model: Model, _message: AssistantMessage) -> str:
    return re.sub(r"[^a-zA-Z0-9_-]", "_", call_id)[:64]


def _assistant_blocks(model: Model, message: AssistantMessage) -> list[JSONObject]:
    claude = is_anthropic_claude(model)
    blocks: list[JSONObject] = []
    for block in message.content:
        if isinstance(block, TextContent):
            text = _text_block(block.text)
            if text is not None:
                blocks.append(text)
        elif isinstance(block, ToolCall):
            blocks.append(
                {
                    "toolUse": {
                        "toolUseId": block.id,
                        "name": block.name,
                        "input": _sanitize_document(block.arguments),
                    }
                }
            )
        elif isinstance(block, ThinkingContent):
            if block.redacted:
                redacted = _redacted_bytes(block.thinking_signature)
                if redacted:
                    blocks.append({"reasoningContent": {"redactedContent": redacted}})
                continue
            thinking = sanitize_surrogates(block.thinking)
            if _blank(thinking):
                continue
            if not claude:
                blocks.append({"reasoningContent": {"reasoningText": {"text": thinking}}})
            elif not block.thinking_signature or _blank(block.thinking_signature):
                blocks.append({"text": thinking})
            else:
                blocks.append(
                    {
                        "reasoningContent": {
                            "reasoningText": {
                                "text": thinking,
                                "signature": block.thinking_signature,
                            }
                        }
                    }
                )
    return blocks


def convert_messages(
    model: Model, context: Context, options: StreamOptions, retention: str
) -> list[JSONObject]:
    """``convertMessages``: the ``messages`` of the command."""
    result: list[JSONObject] = []
    messages = transform_messages(context.messages, model, _normalize_call_id)
    i = 0
    while i < len(messages):
        message = messages[i]
        if isinstance(message, UserMessage):
            content: list[JSONObject] = []
            if isinstance(message.content, str):
                content.append(_text_block(message.content) or {"text": EMPTY_TEXT_PLACEHOLDER})
            else:
                for block in message.content:
                    if isinstance(block, TextContent):
                        text = _text_block(block.text)
                        if text is not None:
                            content.append(text)
                    else:
                        content.append(_image_block(block))
                content = content or [{"text": EMPTY_TEXT_PLACEHOLDER}]
            result.append({"role": "user", "content": content})
        elif isinstance(message, AssistantMessage):
            blocks = _assistant_blocks(model, message) if message.content else []
            if blocks:
                result.append({"role": "assistant", "content": blocks})
        else:
            results = [_tool_result(message)]
            while i + 1 < len(messages) and isinstance(messages[i + 1], ToolResultMessage):
                i += 1
                follower = messages[i]
                assert isinstance(follower, ToolResultMessage)
                results.append(_tool_result(follower))
            result.append({"role": "user", "content": results})
        i += 1
    if retention != "none" and _prompt_caching(model, options) and result:
        last = result[-1]
        if last["role"] == "user" and last["content"]:
            last["content"].append(_cache_point(retention))
    return result


def _system(context: Context, model: Model, options: StreamOptions, retention: str) -> Any:
    if not context.system_prompt:
        return None
    blocks: list[JSONObject] = [{"text": sanitize_surrogates(context.system_prompt)}]
    if retention != "none" and _prompt_caching(model, options):
        blocks.append(_cache_point(retention))
    return blocks


def _tool_config(
    tools: Sequence[Any], tool_choice: object, supports_strict_mode: bool
) -> JSONObject | None:
    """``convertToolConfig``: no tools, or ``toolChoice: none``, is no ``toolConfig``."""
    if not tools or tool_choice == "none":
        return None
    specs = []
    for tool in tools:
        strict = resolve_json_schema_strict(tool, supports_strict_mode)
        # The SDK's member order (the body's bytes are signed).
        spec: JSONObject = {
            "name": tool.name,
            "inputSchema": {
                "json": make_strict_json_schema(tool.parameters)
                if strict is True
                else tool.parameters
            },
            "description": tool.description,
        }
        if strict is True:
            spec["strict"] = True
        specs.append({"toolSpec": spec})
    config: JSONObject = {"tools": specs}
    if tool_choice == "auto":
        config["toolChoice"] = {"auto": {}}
    elif tool_choice == "any":
        config["toolChoice"] = {"any": {}}
    elif isinstance(tool_choice, dict) and tool_choice.get("type") == "tool":
        config["toolChoice"] = {"tool": {"name": tool_choice.get("name")}}
    return config


def build_payload(model: Model, context: Context, options: StreamOptions) -> JSONObject:
    """pi-ai's ``commandInput`` (what ``on_payload`` sees), keys absent when undefined."""
    level, max_tokens, budgets = resolve_reasoning(model, context, options)
    retention = _cache_retention(options)
    inference: JSONObject = {"maxTokens": max_tokens}
    if options.temperature is not None:
        inference["temperature"] = options.temperature
    compat = model.compat or {}
    payload: JSONObject = {
        "modelId": model.id,
        "messages": convert_messages(model, context, options, retention),
    }
    system = _system(context, model, options, retention)
    if system is not None:
        payload["system"] = system
    payload["inferenceConfig"] = inference
    tool_config = _tool_config(
        context.tools, options.tool_choice, compat.get("supportsStrictMode") is True
    )
    if tool_config is not None:
        payload["toolConfig"] = tool_config
    fields = _additional_fields(model, options, level, budgets)
    if fields is not None:
        payload["additionalModelRequestFields"] = fields
    metadata = options.extra.get("requestMetadata")
    if metadata is not None:
        payload["requestMetadata"] = metadata
    return payload


def request_body(payload: JSONValue) -> JSONValue:
    """The HTTP body of the command: its members but ``modelId`` (the path has it)."""
    if isinstance(payload, dict):
        return {k: v for k, v in payload.items() if k != "modelId"}
    return payload
