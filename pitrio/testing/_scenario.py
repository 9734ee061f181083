"""The scenario file of Pi's oracle (``SCENARIOS.md``): its checks and its values.

:func:`validate_scenario` checks a decoded scenario's top level; :func:`make_model` and
:func:`make_message` build the oracle's scripted model object and a scenario's message
specs (§2) as pitrio values; the small helpers read the parts of a spec that the
scripted model, tools and hooks share (text blocks, usage, chunking, ``details``).
:class:`Recorder` is what those scripted parts record through (the player).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, Protocol, cast

from .._messages import (
    AgentMessage,
    AssistantContent,
    AssistantMessage,
    CustomMessage,
    StopReason,
    ToolResultMessage,
    Usage,
    UserContent,
    UserMessage,
)
from .._model import Model
from .._wire import converter
from ._errors import ScenarioError
from ._trace import JS_NULL, ZERO_USAGE_WIRE, Record

__all__ = [
    "BLOCK_UNION",
    "DEFAULT_ERRORS",
    "USER_UNION",
    "Recorder",
    "assistant_blocks",
    "chunk",
    "default_stop",
    "spec_details",
    "final_block",
    "js_or",
    "make_message",
    "make_model",
    "merge_usage",
    "roles",
    "text_blocks",
    "validate_scenario",
]

BLOCK_UNION: Any = AssistantContent
USER_UNION: Any = UserContent


class Recorder(Protocol):
    """Where the scripted model, tools and hooks of a scenario record (the player)."""

    problems: list[str]

    async def emit(self, rec: Record, *, loop_side: bool = False) -> None:
        """Record ``rec``, then run the ops of the actions it triggers."""


_TOP_KEYS = {
    "name",
    "description",
    "mode",
    "loopApi",
    "systemPrompt",
    "thinkingLevel",
    "modelId",
    "messages",
    "tools",
    "model",
    "config",
    "script",
    "actions",
    "timeoutMs",
    "note",
}


def validate_scenario(s: Any) -> None:
    """Check a decoded scenario's top level.

    Raises:
        ScenarioError: the first problem, naming the key and what it must be.
    """
    if not isinstance(s, dict):
        msg = "scenario: must be an object"
        raise ScenarioError(msg)
    for key in s:
        if key not in _TOP_KEYS:
            msg = f'scenario: unknown key "{key}" (allowed: {", ".join(sorted(_TOP_KEYS))})'
            raise ScenarioError(msg)
    if s.get("mode") not in ("agent", "loop"):
        msg = "scenario.mode: must be one of agent | loop"
        raise ScenarioError(msg)
    if not isinstance(s.get("model"), dict) or not isinstance(s["model"].get("responses"), list):
        msg = 'scenario.model: is required: {"responses": [...]}'
        raise ScenarioError(msg)
    if not isinstance(s.get("script"), list) or not s["script"]:
        msg = "scenario.script: must be a non-empty array"
        raise ScenarioError(msg)
    if s.get("loopApi") is not None and s["mode"] != "loop":
        msg = 'scenario.loopApi: only valid with mode "loop"'
        raise ScenarioError(msg)


def make_model(model_id: str) -> Model:
    """The oracle's scripted model object."""
    return Model(
        id=model_id,
        name=model_id,
        api="scripted",
        provider="scripted",
        base_url="",
        reasoning=True,
        input=("text",),
        context_window=100000,
        max_tokens=4096,
    )


def text_blocks(text: str) -> list[Record]:
    """One text block (wire JSON)."""
    return [{"type": "text", "text": text}]


def merge_usage(usage: Any) -> Record:
    """A spec's usage over zero usage (wire JSON)."""
    merged = copy.deepcopy(ZERO_USAGE_WIRE)
    if usage:
        cost = {**merged["cost"], **(usage.get("cost") or {})}
        merged.update(copy.deepcopy(usage))
        merged["cost"] = cost
    return merged


def default_stop(content: Sequence[Record]) -> str:
    """The stop reason of content without one: ``toolUse`` with a tool call, else ``stop``."""
    return "toolUse" if any(b.get("type") == "toolCall" for b in content) else "stop"


def assistant_blocks(data: Any) -> Any:
    """Assistant content blocks (wire JSON) as pitrio values; a string stays a string."""
    if isinstance(data, str):
        return data
    return tuple(converter.structure(b, BLOCK_UNION) for b in data)


def make_message(spec: Record, model: Model) -> AgentMessage:
    """A scenario message spec as a runtime message (SCENARIOS.md §2)."""
    role = spec.get("role")
    if role == "user":
        content = text_blocks(spec["text"]) if "text" in spec else copy.deepcopy(spec["content"])
        return UserMessage(
            content=content
            if isinstance(content, str)
            else tuple(converter.structure(b, USER_UNION) for b in content),
            timestamp=0,
        )
    if role == "assistant":
        content = (
            text_blocks(spec["text"]) if "text" in spec else copy.deepcopy(spec.get("content", []))
        )
        return AssistantMessage(
            content=assistant_blocks(content),
            api=model.api,
            provider=model.provider,
            model=model.id,
            usage=converter.structure(merge_usage(spec.get("usage")), Usage),
            stop_reason=cast(StopReason, spec.get("stopReason") or default_stop(content)),
            error_message=spec.get("errorMessage"),
            timestamp=0,
        )
    if role == "toolResult":
        content = (
            text_blocks(spec["text"]) if "text" in spec else copy.deepcopy(spec.get("content", []))
        )
        return ToolResultMessage(
            tool_call_id=spec["toolCallId"],
            tool_name=spec["toolName"],
            content=tuple(converter.structure(b, USER_UNION) for b in content),
            details=JS_NULL
            if "details" in spec and spec["details"] is None
            else copy.deepcopy(spec.get("details")),
            is_error=spec.get("isError", False),
            timestamp=0,
        )
    fields = {k: copy.deepcopy(v) for k, v in spec.items() if k != "role"}
    fields["timestamp"] = 0
    return CustomMessage(role=str(role), fields=fields)


def roles(messages: Sequence[AgentMessage]) -> list[str]:
    """The messages' roles, as hook records list them."""
    return [m.role for m in messages]


def js_or(value: Any, default: Any) -> Any:
    """JavaScript's ``value ?? default`` for a decoded JSON value."""
    return default if value is None else value


def spec_details(spec: Record) -> Any:
    """A spec's ``details`` (``{}`` when absent, :data:`JS_NULL` for ``null``)."""
    if "details" not in spec:
        return {}
    value = spec["details"]
    return JS_NULL if value is None else copy.deepcopy(value)


DEFAULT_ERRORS: dict[str, str] = {
    "error": "An unknown error occurred",
    "aborted": "Request was aborted",
}


def final_block(b: Record) -> Record:
    """A scripted response's block as it ends (defaults filled in, extra keys dropped)."""
    if b["type"] == "text":
        return {"type": "text", "text": b.get("text", "")}
    if b["type"] == "thinking":
        out: Record = {"type": "thinking", "thinking": b["thinking"]}
        if "thinkingSignature" in b:
            out["thinkingSignature"] = b["thinkingSignature"]
        if "redacted" in b:
            out["redacted"] = b["redacted"]
        return out
    return {
        "type": "toolCall",
        "id": b["id"],
        "name": b["name"],
        "arguments": copy.deepcopy(b.get("arguments", {})),
    }


def chunk(text: str, size: int, explicit: list[str] | None) -> list[str]:
    """The deltas of ``text``: the explicit ones, or pieces of ``size`` characters."""
    if explicit:
        return list(explicit)
    if not text:
        return [""]
    return [text[i : i + size] for i in range(0, len(text), size)]
