"""Session entries: the nodes of a session's tree, their JSON form, and what the model
sees of a branch.

Reproduces from Pi (pi-agent-core 0.85.0, ``harness/session/``): the committed entry
writes of ``types.d.ts`` (``message``, ``compaction``, ``branch_summary``, ``custom``)
as frozen records, read from and written to Pi's JSON exactly; the time-ordered
UUIDv7 ids Pi mints (pi-ai's ``utils/uuid``); and ``context.js``'s
``buildSessionContext`` (:func:`build_session_context`).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Literal, TypeAlias, final

import attrs

from pitrio import AgentMessage, ThinkingLevel, Usage, wire

from ._errors import SessionFormatError
from ._messages import BranchSummaryMessage, CompactionSummaryMessage

__all__ = [
    "BranchSummaryEntry",
    "CompactionEntry",
    "CustomEntry",
    "EntryProjector",
    "JSONValue",
    "MessageEntry",
    "ModelRef",
    "SessionContext",
    "SessionEntry",
    "Write",
    "build_session_context",
    "entry_from_wire",
    "entry_to_wire",
    "new_id",
    "now_ms",
]

JSONValue: TypeAlias = Any
Write: TypeAlias = dict[str, Any]
"""One committed write in Pi's JSON form: ``{"kind": "entry" | "value" | "list" |
"usage", "seq": N, ...}``."""


# --- ids ----------------------------------------------------------------------------

_last_ms = -1
_sequence = -1


def new_id(timestamp_ms: int | None = None) -> str:
    """A time-ordered UUIDv7, as Pi mints session and entry ids.

    Ids minted in one process sort in creation order (a counter fills the random bits).
    """
    global _last_ms, _sequence
    now = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    if timestamp_ms is None:
        now = max(now, _last_ms)
        _last_ms = now
    if _sequence < 0 or _sequence >= (1 << 41) - 1:
        _sequence = secrets.randbits(40)
    else:
        _sequence += 1
    value = (
        (now & 0xFFFFFFFFFFFF) << 80
        | 0x7 << 76
        | ((_sequence >> 29) & 0xFFF) << 64
        | 0b10 << 62
        | ((_sequence & 0x1FFFFFFF) << 33)
        | secrets.randbits(33)  # Pi's 16 random bits, then 17 (one draw)
    )
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def now_ms() -> int:
    """Milliseconds since the epoch (the unit of entry and message timestamps)."""
    return int(time.time() * 1000)


# --- entries ------------------------------------------------------------------------


@final
@attrs.frozen(kw_only=True)
class MessageEntry:
    """A message in the transcript (user, assistant, tool result, or a custom role)."""

    type: ClassVar[Literal["message"]] = "message"
    id: str
    parent_id: str | None
    seq: int
    timestamp: int
    message: AgentMessage
    terminate: bool = False


@final
@attrs.frozen(kw_only=True)
class CompactionEntry:
    """The older part of the branch summarised: the model sees ``summary``, then
    ``retained_tail`` (the recent messages kept intact), then what follows this entry."""

    type: ClassVar[Literal["compaction"]] = "compaction"
    id: str
    parent_id: str | None
    seq: int
    timestamp: int
    summary: str
    retained_tail: tuple[AgentMessage, ...]
    tokens_before: int
    details: JSONValue = None
    usage: Usage | None = None
    from_hook: bool = False


@final
@attrs.frozen(kw_only=True)
class BranchSummaryEntry:
    """A summary of the branch the conversation left (``from_id`` was its tip)."""

    type: ClassVar[Literal["branch_summary"]] = "branch_summary"
    id: str
    parent_id: str | None
    seq: int
    timestamp: int
    from_id: str | None
    summary: str
    details: JSONValue = None
    usage: Usage | None = None
    from_hook: bool = False


@final
@attrs.frozen(kw_only=True)
class CustomEntry:
    """Application data in the tree; the model does not see it (unless a projector
    passed to :meth:`Session.build_context` turns it into messages)."""

    type: ClassVar[Literal["custom"]] = "custom"
    id: str
    parent_id: str | None
    seq: int
    timestamp: int
    custom_type: str
    data: JSONValue = None


SessionEntry: TypeAlias = MessageEntry | CompactionEntry | BranchSummaryEntry | CustomEntry


def _usage_from_wire(data: Any, where: str) -> Usage | None:
    if data is None:
        return None
    try:
        return wire.converter.structure(data, Usage)
    except Exception as exc:
        msg = f"{where}: cannot read its usage: {exc}"
        raise SessionFormatError(msg) from None


def _message_from_wire(data: Any, where: str) -> AgentMessage:
    if not isinstance(data, Mapping):
        msg = f"{where}: a message must be a JSON object, got {type(data).__name__}"
        raise SessionFormatError(msg)
    try:
        return wire.structure_message(data)
    except (ValueError, KeyError, TypeError) as exc:
        msg = f"{where}: {exc}"
        raise SessionFormatError(msg) from None


def entry_from_wire(write: Mapping[str, Any]) -> SessionEntry:
    """One committed ``{"kind": "entry", ...}`` write (Pi's JSON) as an entry."""
    try:
        entry_type = write["type"]
        base: dict[str, Any] = {
            "id": write["id"],
            "parent_id": write["parentId"],
            "seq": write["seq"],
            "timestamp": write["timestamp"],
        }
        where = f"entry {write['id']!r}"
        if entry_type == "message":
            return MessageEntry(
                **base,
                message=_message_from_wire(write["message"], where),
                terminate=bool(write.get("terminate", False)),
            )
        if entry_type == "compaction":
            return CompactionEntry(
                **base,
                summary=write["summary"],
                retained_tail=tuple(
                    _message_from_wire(m, where) for m in write.get("retainedTail", ())
                ),
                tokens_before=write["tokensBefore"],
                details=write.get("details"),
                usage=_usage_from_wire(write.get("usage"), where),
                from_hook=bool(write.get("fromHook", False)),
            )
        if entry_type == "branch_summary":
            return BranchSummaryEntry(
                **base,
                from_id=write.get("fromId"),
                summary=write["summary"],
                details=write.get("details"),
                usage=_usage_from_wire(write.get("usage"), where),
                from_hook=bool(write.get("fromHook", False)),
            )
        if entry_type == "custom":
            return CustomEntry(**base, custom_type=write["customType"], data=write.get("data"))
    except KeyError as exc:
        msg = f"a session entry is missing the field {exc.args[0]!r}: {dict(write)!r:.200}"
        raise SessionFormatError(msg) from None
    msg = (
        f"unknown session entry type {entry_type!r} "
        "(expected message, compaction, branch_summary or custom)"
    )
    raise SessionFormatError(msg)


def entry_to_wire(entry: SessionEntry) -> Write:
    """An entry as Pi's committed ``{"kind": "entry", ...}`` write."""
    out: Write = {"kind": "entry", "id": entry.id, "parentId": entry.parent_id}
    out["type"] = entry.type
    match entry:
        case MessageEntry():
            out["message"] = wire.unstructure(entry.message)
            if entry.terminate:
                out["terminate"] = True
        case CompactionEntry():
            out["summary"] = entry.summary
            out["retainedTail"] = [wire.unstructure(m) for m in entry.retained_tail]
            out["tokensBefore"] = entry.tokens_before
            if entry.details is not None:
                out["details"] = entry.details
            if entry.usage is not None:
                out["usage"] = wire.unstructure(entry.usage)
            out["fromHook"] = entry.from_hook
        case BranchSummaryEntry():
            out["fromId"] = entry.from_id
            out["summary"] = entry.summary
            if entry.details is not None:
                out["details"] = entry.details
            if entry.usage is not None:
                out["usage"] = wire.unstructure(entry.usage)
            out["fromHook"] = entry.from_hook
        case CustomEntry():
            out["customType"] = entry.custom_type
            if entry.data is not None:
                out["data"] = entry.data
    out["seq"] = entry.seq
    out["timestamp"] = entry.timestamp
    return out


# --- context ------------------------------------------------------------------------


@final
@attrs.frozen
class ModelRef:
    """Which model a session uses: a provider name and the provider's model id."""

    provider: str
    model_id: str


@final
@attrs.frozen(kw_only=True)
class SessionContext:
    """What a resumed conversation looks like to the model.

    ``messages`` is the current branch with its last compaction applied (the summary,
    the retained tail, then everything after it); failed and aborted assistant messages
    are left out, as Pi does. ``model`` and ``thinking_level`` are the last ones set
    (``None`` when never set).
    """

    messages: tuple[AgentMessage, ...]
    model: ModelRef | None = None
    thinking_level: ThinkingLevel | None = None
    active_tool_names: tuple[str, ...] | None = None


EntryProjector: TypeAlias = Callable[[CustomEntry], Iterable[AgentMessage] | None]


def _is_context_message(message: AgentMessage, keep_failed: bool = False) -> bool:
    if message.role != "assistant":
        return True
    left_out = ("deferred",) if keep_failed else ("error", "aborted", "deferred")
    return getattr(message, "stop_reason", None) not in left_out


def build_session_context(
    path: Sequence[SessionEntry],
    *,
    projectors: Mapping[str, EntryProjector] | None = None,
    keep_failed: bool = False,
) -> list[AgentMessage]:
    """The messages the model sees for a branch (``path``: entries from the root down).

    Pi's ``buildSessionContext``: the last compaction entry replaces everything before
    it with its summary and retained tail; failed and aborted answers are left out
    (``keep_failed=True`` keeps them, as Pi's coding agent does: the providers drop them
    from requests anyway); branch summaries become
    :class:`BranchSummaryMessage`; custom entries are shown only through
    ``projectors[custom_type]``.
    """
    start = 0
    for index in range(len(path) - 1, -1, -1):
        if path[index].type == "compaction":
            start = index
            break
    messages: list[AgentMessage] = []
    for entry in path[start:]:
        match entry:
            case MessageEntry():
                if _is_context_message(entry.message, keep_failed):
                    messages.append(entry.message)
            case CompactionEntry():
                messages.append(
                    CompactionSummaryMessage(
                        summary=entry.summary,
                        tokens_before=entry.tokens_before,
                        timestamp=entry.timestamp,
                    )
                )
                messages.extend(
                    m for m in entry.retained_tail if _is_context_message(m, keep_failed)
                )
            case BranchSummaryEntry():
                if entry.summary:
                    messages.append(
                        BranchSummaryMessage(
                            summary=entry.summary, from_id=entry.from_id, timestamp=entry.timestamp
                        )
                    )
            case CustomEntry():
                projector = (projectors or {}).get(entry.custom_type)
                if projector is not None:
                    messages.extend(projector(entry) or ())
    return messages
