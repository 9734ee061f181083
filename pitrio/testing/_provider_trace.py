"""The provider oracle's trace format (``PROVIDERS.md`` §3): events and messages as records.

:func:`normalize_event` and :func:`normalize_message` write a provider's events and
messages in Pi's wire form without timestamps, response ids and the providers' scratch
fields; :func:`format_trace` prints a trace as the oracle does (keys sorted with
``type`` and ``role`` first, ``None`` left out).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final, assert_never

from .. import _wire as wire
from .._events import (
    AssistantMessageEvent,
    DoneEvent,
    ErrorEvent,
    StartEvent,
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
from .._messages import AssistantMessage, ToolCall

__all__ = ["canon", "format_trace", "normalize_event", "normalize_message"]

_BLOCK_SCRATCH_KEYS: Final = ("partialArgs", "partialJson", "streamIndex", "customInput", "index")


def normalize_message(message: AssistantMessage) -> dict[str, Any]:
    """A message in trace form: wire JSON without ``timestamp``/``responseId`` and
    scratch fields."""
    out: dict[str, Any] = wire.unstructure(message)
    out.pop("timestamp", None)
    out.pop("responseId", None)
    for block in out.get("content", ()):
        if isinstance(block, dict):
            for key in _BLOCK_SCRATCH_KEYS:
                block.pop(key, None)
    for entry in out.get("diagnostics") or ():
        if isinstance(entry, dict):
            entry.pop("timestamp", None)
    return out


def _normalize_block(block: ToolCall) -> dict[str, Any]:
    out: dict[str, Any] = wire.unstructure(block)
    for key in _BLOCK_SCRATCH_KEYS:
        out.pop(key, None)
    return out


def normalize_event(event: AssistantMessageEvent) -> dict[str, Any]:
    """One event record (``PROVIDERS.md`` §3.3)."""
    record: dict[str, Any] = {"type": event.type}
    match event:
        case StartEvent():
            pass
        case TextStartEvent() | ThinkingStartEvent() | ToolCallStartEvent():
            record["contentIndex"] = event.content_index
        case TextDeltaEvent() | ThinkingDeltaEvent() | ToolCallDeltaEvent():
            record["contentIndex"] = event.content_index
            record["delta"] = event.delta
        case TextEndEvent() | ThinkingEndEvent():
            record["contentIndex"] = event.content_index
            record["content"] = event.content
        case ToolCallEndEvent():
            record["contentIndex"] = event.content_index
            record["toolCall"] = _normalize_block(event.tool_call)
        case DoneEvent():
            record["reason"] = event.reason
            record["message"] = normalize_message(event.message)
        case ErrorEvent():
            record["reason"] = event.reason
            record["error"] = normalize_message(event.error)
        case _:
            assert_never(event)
    if not isinstance(event, DoneEvent | ErrorEvent):
        record["partial"] = normalize_message(event.partial)
    return record


_LEADING_KEYS: Final = ("type", "role")


def canon(value: Any, *, keep_null: bool = False) -> Any:
    """Keys sorted with ``type`` and ``role`` first; ``None`` dropped from objects (pi-ai's
    ``undefined``), except in a request record's body or a WebSocket record's message,
    where it is the JSON ``null`` the client sent."""
    if isinstance(value, list | tuple):
        return [canon(v, keep_null=keep_null) for v in value]
    if not isinstance(value, dict):
        return value

    def order(key: str) -> tuple[int, str]:
        return (_LEADING_KEYS.index(key) if key in _LEADING_KEYS else 99, key)

    sent = {"request": "body", "websocket": "message"}.get(value.get("type"))  # type: ignore[arg-type]  # any value
    return {
        k: canon(value[k], keep_null=keep_null or k == sent)
        for k in sorted(value, key=order)
        if keep_null or value[k] is not None
    }


def format_trace(records: Sequence[Mapping[str, Any]]) -> str:
    """The oracle's printed form: a JSON array, one record per line."""
    lines = [
        json.dumps(canon(r), separators=(",", ":"), ensure_ascii=False, allow_nan=True)
        for r in records
    ]
    return "[\n" + ",\n".join(lines) + "\n]\n" if lines else "[]\n"
