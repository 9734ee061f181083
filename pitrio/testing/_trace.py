"""Pi's trace format: agent events and messages as the oracle records them.

The oracle writes each event of a run as a JSON record (``SCENARIOS.md`` §7): Pi's wire
names, no timestamps, zero usage and provider ids left out. :func:`normalize_event` and
:func:`normalize_message` turn pitrio's values into those records, :func:`format_trace`
prints a trace as the oracle does, and :func:`pi_text` turns pitrio's error texts (which
name Python API) back into Pi's (which name JavaScript API) where a trace needs them.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any, assert_never

from .._events import (
    AgentEnd,
    AgentEvent,
    AgentStart,
    MessageEnd,
    MessageStart,
    MessageUpdate,
    TextDeltaEvent,
    TextEndEvent,
    TextStartEvent,
    ThinkingDeltaEvent,
    ThinkingEndEvent,
    ThinkingStartEvent,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
    ToolExecutionEnd,
    ToolExecutionStart,
    ToolExecutionUpdate,
    ToolResult,
    TurnEnd,
    TurnStart,
    UpdateEvent,
)
from .._messages import AgentMessage, CustomMessage, UserMessage
from .._wire import unstructure

__all__ = [
    "JS_NULL",
    "PI_TEXTS",
    "ZERO_USAGE_WIRE",
    "Record",
    "canonical",
    "format_trace",
    "normalize_event",
    "normalize_message",
    "normalize_tool_result",
    "pi_text",
]

Record = dict[str, Any]
"""A trace record, or a piece of a scenario: decoded JSON."""

PI_TEXTS: tuple[tuple[str, str], ...] = (
    (
        "Use steer() or follow_up() to queue messages",
        "Use steer() or followUp() to queue messages",
    ),
    (
        "Pass stream_fn= explicitly or call pitrio.set_default_stream_fn().",
        "Pass streamFn explicitly or call setDefaultStreamFn().",
    ),
)
"""Where pitrio's error texts name Python API and Pi's name JavaScript API: pairs of
(pitrio's words, Pi's words). The runtime speaks Python; :func:`pi_text` turns its
texts back into Pi's when a trace is compared with the oracle's (``docs/conformance.md``)."""


def pi_text(text: str) -> str:
    """``text`` with pitrio's Python API names replaced by Pi's (:data:`PI_TEXTS`)."""
    for python, pi in PI_TEXTS:
        if python in text:
            text = text.replace(python, pi)
    return text


ZERO_USAGE_WIRE: dict[str, Any] = {
    "input": 0,
    "output": 0,
    "cacheRead": 0,
    "cacheWrite": 0,
    "totalTokens": 0,
    "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
}
_ASSISTANT_DROPPED = ("api", "provider", "model", "responseId", "responseModel")


class _JsNull:
    """JSON ``null`` where pitrio's ``None`` would mean "absent" (JavaScript's
    ``undefined``): a scripted ``details: null`` travels through the loop as this and is
    written back as ``null`` in records."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "null"


JS_NULL: Any = _JsNull()


def _is_zero_usage(value: Any) -> bool:
    return isinstance(value, dict) and value == ZERO_USAGE_WIRE


def _norm_obj(wire: Any) -> Any:
    if not isinstance(wire, dict):
        return wire
    return {
        k: (None if v is JS_NULL else v)
        for k, v in wire.items()
        if v is not None and k != "timestamp" and not (k == "usage" and _is_zero_usage(v))
    }


def normalize_message(message: AgentMessage) -> Record:
    """A message as the oracle writes it (no timestamps, zero usage or provider ids)."""
    if isinstance(message, CustomMessage):
        # Every field of a custom message is the application's: a None is JSON null.
        return {k: v for k, v in unstructure(message).items() if k != "timestamp"}
    out: Record = _norm_obj(unstructure(message))
    content: object = getattr(message, "content", "")
    if isinstance(message, UserMessage) and content is None:
        out["content"] = None  # a custom message's null content, mapped to a user message
    if out.get("role") == "assistant":
        for key in _ASSISTANT_DROPPED:
            out.pop(key, None)
    return out


def normalize_tool_result(result: ToolResult) -> Record:
    """A tool result as the oracle writes it (``null`` details kept, absent ones dropped)."""
    record: Record = _norm_obj(unstructure(result))  # a ToolResult unstructures to a dict
    return record


def _norm_assistant_event(event: UpdateEvent) -> Record:
    out: Record = {"type": event.type, "contentIndex": event.content_index}
    match event:
        case TextDeltaEvent() | ThinkingDeltaEvent() | ToolCallDeltaEvent():
            out["delta"] = event.delta
        case TextEndEvent() | ThinkingEndEvent():
            out["content"] = event.content
        case ToolCallEndEvent():
            out["toolCall"] = unstructure(event.tool_call)
        case TextStartEvent() | ThinkingStartEvent() | ToolCallStartEvent():
            pass
        case _:
            assert_never(event)
    return out


def normalize_event(event: AgentEvent) -> Record:
    """An agent event as a trace record."""
    kind = event.type
    match event:
        case AgentStart() | TurnStart():
            return {"type": kind}
        case MessageStart() | MessageEnd():
            return {"type": kind, "message": normalize_message(event.message)}
        case MessageUpdate():
            return {
                "type": kind,
                "event": _norm_assistant_event(event.assistant_message_event),
                "message": normalize_message(event.message),
            }
        case ToolExecutionStart():
            return {
                "type": kind,
                "toolCallId": event.tool_call_id,
                "toolName": event.tool_name,
                "args": copy.deepcopy(event.args),
            }
        case ToolExecutionUpdate():
            return {
                "type": kind,
                "toolCallId": event.tool_call_id,
                "toolName": event.tool_name,
                "args": copy.deepcopy(event.args),
                "partialResult": normalize_tool_result(event.partial_result),
            }
        case ToolExecutionEnd():
            return {
                "type": kind,
                "toolCallId": event.tool_call_id,
                "toolName": event.tool_name,
                "result": normalize_tool_result(event.result),
                "isError": event.is_error,
            }
        case TurnEnd():
            return {
                "type": kind,
                "message": normalize_message(event.message),
                "toolResults": [normalize_message(m) for m in event.tool_results],
            }
        case AgentEnd():
            return {"type": kind, "messages": [normalize_message(m) for m in event.messages]}
        case _:
            assert_never(event)


_LEADING = ("type", "role", "op", "hook")


def canonical(value: Any) -> Any:
    """Keys sorted as the oracle prints them (``type``, ``role``, ``op``, ``hook`` first)."""
    if isinstance(value, list):
        return [canonical(v) for v in value]
    if not isinstance(value, dict):
        return value
    # A None here is JSON null (absent fields were left out when the record was built).
    keys = sorted(value, key=lambda k: (_LEADING.index(k) if k in _LEADING else 99, k))
    return {k: canonical(value[k]) for k in keys}


def format_trace(records: Sequence[Record]) -> str:
    """The trace as the oracle prints it: a JSON array, one record per line."""
    lines = [json.dumps(canonical(r), ensure_ascii=False, separators=(",", ":")) for r in records]
    return "[\n" + ",\n".join(lines) + "\n]\n" if lines else "[]\n"
