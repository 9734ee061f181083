"""The ``model.compat`` flags of an ``anthropic-messages`` model, and the Claude Code identity.

pi-ai 0.85.0's ``getAnthropicCompat`` (``api/anthropic-messages.js``): :class:`_Compat` holds
the flags read from ``model.compat`` (camelCase on the wire, Python names here) with
pi-ai's defaults (tool references on first-party Claude 4.5+). An OAuth token
(``sk-ant-oat``) makes pi-ai speak as Claude Code: the identity system prompt, Claude
Code's tool names (:func:`_to_claude_code_name` / :func:`_from_claude_code_name`) and
its ``user-agent``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Final, final

import attrs

from ..._messages import JSONValue
from ..._model import Model, ToolSpec

API: Final = "anthropic-messages"

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
_CLAUDE_VERSION: Final = re.compile(r"^claude-(?:opus|sonnet|fable)-(\d+)(?:-(\d+))?(?:-|$)")


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
