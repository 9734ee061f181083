"""Request options every API derives alike: thinking levels, token budgets, cache retention.

The parts of pi-ai 0.85.0's ``streamSimple`` option handling the three APIs share:

- thinking levels: :func:`supported_thinking_levels` and :func:`clamp_thinking_level`
  (``getSupportedThinkingLevels`` / ``clampThinkingLevel`` of ``models.js``),
  :func:`thinking_budget_for_level` and :func:`adjust_max_tokens_for_thinking`
  (``api/simple-options.js``);
- ``max_tokens`` kept inside the context window: :func:`estimate_context_tokens`
  (``utils/estimate.js``) and :func:`clamp_max_tokens_to_context`
  (``clampMaxTokensToContext``, which warns with :class:`MaxTokensClampedWarning`);
- :func:`resolve_cache_retention` (``PI_CACHE_RETENTION``).
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from .._messages import (
    AssistantMessage,
    LlmMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserContent,
    UserMessage,
)
from .._model import Context, Model, StreamOptions, ToolSpec
from ._json import js_length, json_stringify
from ._transform import tool_json

__all__ = [
    "DEFAULT_THINKING_BUDGETS",
    "THINKING_LEVELS",
    "MaxTokensClampedWarning",
    "adjust_max_tokens_for_thinking",
    "clamp_max_tokens_to_context",
    "clamp_thinking_level",
    "estimate_context_tokens",
    "provider_env",
    "resolve_cache_retention",
    "supported_thinking_levels",
    "thinking_budget_for_level",
]

THINKING_LEVELS: Final = ("off", "minimal", "low", "medium", "high", "xhigh", "max")

DEFAULT_THINKING_BUDGETS: Final[Mapping[str, int]] = {
    "minimal": 1024,
    "low": 2048,
    "medium": 8192,
    "high": 16384,
}

MIN_ANSWER_TOKENS: Final = 1024
_CONTEXT_SAFETY_TOKENS: Final = 4096


def _estimate_content_chars(content: str | Sequence[UserContent]) -> int:
    if isinstance(content, str):
        return js_length(content)
    return sum(
        js_length(block.text) if isinstance(block, TextContent) else 4800 for block in content
    )


def _estimate_message_tokens(message: LlmMessage) -> int:
    if isinstance(message, UserMessage | ToolResultMessage):
        return math.ceil(_estimate_content_chars(message.content) / 4)
    chars = 0
    for block in message.content:
        if isinstance(block, TextContent):
            chars += js_length(block.text)
        elif isinstance(block, ThinkingContent):
            chars += js_length(block.thinking)
        elif isinstance(block, ToolCall):
            chars += js_length(block.name) + js_length(json_stringify(block.arguments))
    return math.ceil(chars / 4)


def _usage_total(usage: Usage) -> int:
    return usage.total_tokens or (usage.input + usage.output + usage.cache_read + usage.cache_write)


def _estimate_tools_tokens(tools: Iterable[ToolSpec]) -> int:
    tool_list = [tool_json(tool) for tool in tools]
    if not tool_list:
        return 0
    return math.ceil(js_length(json_stringify(tool_list)) / 4)


def estimate_context_tokens(context: Context) -> int:
    """pi-ai's ``estimateContextTokens(context).tokens``: the last usable assistant
    usage plus estimates of what follows it, else estimates of everything."""
    messages = list(context.messages)
    latest_prefix = -math.inf
    usage_index: int | None = None
    for index, message in enumerate(messages):
        if (
            isinstance(message, AssistantMessage)
            and message.timestamp >= latest_prefix
            and message.stop_reason not in ("aborted", "error")
            and _usage_total(message.usage) > 0
        ):
            usage_index = index
        latest_prefix = max(latest_prefix, message.timestamp)
    if usage_index is not None:
        last = messages[usage_index]
        assert isinstance(last, AssistantMessage)
        tokens = _usage_total(last.usage)
        added: set[str] = set()
        for message in messages[usage_index + 1 :]:
            tokens += _estimate_message_tokens(message)
            if isinstance(message, ToolResultMessage):
                added.update(message.added_tool_names or ())
        return tokens + _estimate_tools_tokens(t for t in context.tools if t.name in added)
    tokens = sum(_estimate_message_tokens(m) for m in messages)
    if context.system_prompt:
        tokens += math.ceil(js_length(context.system_prompt) / 4)
    return tokens + _estimate_tools_tokens(context.tools)


class MaxTokensClampedWarning(UserWarning):
    """``max_tokens`` was lowered to fit the model's context window (pi-ai's clamp)."""


def clamp_max_tokens_to_context(model: Model, context: Context, max_tokens: int) -> int:
    """``min(max_tokens, max(1, context_window - estimate - 4096))`` (pi-ai's
    ``clampMaxTokensToContext``).

    A clamp warns (:class:`MaxTokensClampedWarning`, once per model, window and
    requested ``max_tokens`` under Python's default warning filter): with a small
    ``context_window`` the 4,096-token safety margin alone can bring ``max_tokens``
    down to 1.
    """
    if model.context_window <= 0:
        return max(1, max_tokens)
    available = model.context_window - estimate_context_tokens(context) - _CONTEXT_SAFETY_TOKENS
    clamped = min(max_tokens, max(1, available))
    if clamped < max_tokens:
        warnings.warn(
            f"max_tokens={max_tokens} for model {model.provider}/{model.id} is lowered to "
            f"fit its context_window of {model.context_window} tokens: pi-ai's clamp "
            f"allows context_window - estimated context - {_CONTEXT_SAFETY_TOKENS} (at "
            f"most {max(1, model.context_window - _CONTEXT_SAFETY_TOKENS)}, at least 1). "
            "If the server's window is larger, give the Model its real context_window "
            "(or a larger one) to avoid this.",
            MaxTokensClampedWarning,
            stacklevel=3,
        )
    return clamped


def supported_thinking_levels(model: Model) -> list[str]:
    """The thinking levels ``model`` accepts (``getSupportedThinkingLevels``)."""
    if not model.reasoning:
        return ["off"]
    level_map = model.thinking_level_map or {}
    levels = []
    for level in THINKING_LEVELS:
        if level in level_map and level_map[level] is None:
            continue
        if level in ("xhigh", "max") and level not in level_map:
            continue
        levels.append(level)
    return levels


def clamp_thinking_level(model: Model, level: str) -> str:
    """The nearest supported level: ``level`` itself, else the next higher, else the
    next lower (``clampThinkingLevel``)."""
    available = supported_thinking_levels(model)
    if level in available:
        return level
    if level not in THINKING_LEVELS:
        return available[0] if available else "off"
    requested = THINKING_LEVELS.index(level)
    for candidate in THINKING_LEVELS[requested:]:
        if candidate in available:
            return candidate
    for candidate in reversed(THINKING_LEVELS[:requested]):
        if candidate in available:
            return candidate
    return available[0] if available else "off"


def thinking_budget_for_level(level: str, custom: Mapping[str, int] | None = None) -> int | None:
    """The thinking token budget of a level (``xhigh``/``max`` count as ``high``)."""
    budgets = {**DEFAULT_THINKING_BUDGETS, **(custom or {})}
    return budgets.get("high" if level in ("xhigh", "max") else level)


def adjust_max_tokens_for_thinking(
    base_max_tokens: int | None,
    model_max_tokens: int,
    level: str,
    custom: Mapping[str, int] | None = None,
) -> tuple[int, int]:
    """``(max_tokens, thinking_budget)`` so that thinking fits (``adjustMaxTokensForThinking``)."""
    budget = thinking_budget_for_level(level, custom) or 0
    if base_max_tokens is None:
        max_tokens = model_max_tokens
    else:
        max_tokens = min(base_max_tokens + budget, model_max_tokens)
    if max_tokens <= budget:
        budget = min(budget, max(0, max_tokens - MIN_ANSWER_TOKENS))
    return max_tokens, budget


def resolve_cache_retention(value: str | None) -> str:
    """``value``, else ``long`` if ``PI_CACHE_RETENTION=long``, else ``short``."""
    if value:
        return value
    if os.environ.get("PI_CACHE_RETENTION") == "long":
        return "long"
    return "short"


def provider_env(name: str, options: StreamOptions) -> str | None:
    """pi-ai's ``getProviderEnvValue``: ``options.extra["env"][name]`` (the request's
    scoped environment, pi-ai's ``options.env``), else ``os.environ[name]``; an empty
    value counts as unset."""
    scoped = options.extra.get("env")
    if isinstance(scoped, Mapping):
        value = scoped.get(name)
        if isinstance(value, str) and value:
            return value
    return os.environ.get(name) or None
