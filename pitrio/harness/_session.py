"""Sessions: an append-only conversation tree that survives a restart.

The model is Pi's (pi-agent-core 0.85.0, ``harness/session/``). A session is a log of
*writes*, each with a sequence number:

- **entries**, the nodes of a tree linked by ``parent_id``: :class:`MessageEntry`,
  :class:`CompactionEntry`, :class:`BranchSummaryEntry`, :class:`CustomEntry`;
- **values**, named by ``(namespace, key)`` and overwritten by later writes: the tip of
  each branch (``pi.branch.tip``), the model and thinking level (``pi.lane.config``),
  entry labels (``pi.entry.label``), the session name (``pi.session.name``);
- **list elements** and **usage rows**, kept as written (Pi uses them; pitrio reads them
  back and writes them out again unchanged).

Appending a message adds the entry and moves the tip of the ``main`` branch to it, in
one transaction (pitrio works on Pi's ``main`` branch; the tips of other named branches
in a file Pi wrote are kept as values). Going back to an earlier entry
(:meth:`Session.set_leaf`) and appending again makes a new branch of the tree;
:meth:`Session.fork` copies the path to an entry into a new session.
:meth:`Session.build_context` rebuilds what the model sees.

Appends change the session in memory at once and reach storage at :meth:`Session.flush`
(the harness flushes after each ``turn_end`` and when it settles) and at
:meth:`Session.close`. Storage is a :class:`SessionStore`: :class:`InMemorySessionStore`
here, ``JsonlSessionStore`` (Pi's file format, the default) and ``SqliteSessionStore``.

Timestamps on entries are milliseconds since the epoch, as on messages;
:class:`SessionInfo` gives seconds, as :func:`os.stat` does.
"""

from __future__ import annotations

import abc
import copy
import os
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Literal, Protocol, TypeAlias, final

import attrs
import trio

from pitrio import (
    AgentMessage,
    ArgumentTypeError,
    HarnessError,
    ThinkingLevel,
    Usage,
    UsageError,
    wire,
)

from ._messages import BranchSummaryMessage, CompactionSummaryMessage

__all__ = [
    "BranchSummaryEntry",
    "CompactionEntry",
    "CustomEntry",
    "InMemorySessionStore",
    "MessageEntry",
    "ModelRef",
    "Session",
    "SessionClosedError",
    "SessionContext",
    "SessionEntry",
    "SessionError",
    "SessionExistsError",
    "SessionFormatError",
    "SessionInfo",
    "SessionLockedError",
    "SessionNotFoundError",
    "SessionStore",
    "build_session_context",
    "new_id",
]

JSONValue: TypeAlias = Any
Write: TypeAlias = dict[str, Any]
"""One committed write in Pi's JSON form: ``{"kind": "entry" | "value" | "list" |
"usage", "seq": N, ...}``."""

MAIN_BRANCH = "main"
BRANCH_TIP = "pi.branch.tip"
LANE_CONFIG = "pi.lane.config"
LANE_STATE = "pi.lane.state"
ENTRY_LABEL = "pi.entry.label"
SESSION_NAME = "pi.session.name"
PENDING_THINKING = "pitrio.lane.thinking_level"
_IDLE_LANE: dict[str, Any] = {"currentOperationId": None, "lastOperationId": None, "inbox": []}
THINKING_LEVELS = ("off", "minimal", "low", "medium", "high", "xhigh", "max")


# --- errors -------------------------------------------------------------------------


class SessionError(HarnessError):
    """Base class of the session errors."""


class SessionNotFoundError(SessionError, LookupError):
    """No session with that id (or no entry with that id) exists."""


class SessionExistsError(SessionError):
    """A session with that id exists already."""


class SessionLockedError(SessionError):
    """The session is open for writing elsewhere (another store or process)."""


class SessionClosedError(SessionError):
    """The session was closed; open it again from its store."""


class SessionFormatError(SessionError, ValueError):
    """Stored session data is not in a format pitrio can read (the message says where)."""


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
    rand = secrets.randbits(16)
    value = (
        (now & 0xFFFFFFFFFFFF) << 80
        | 0x7 << 76
        | ((_sequence >> 29) & 0xFFF) << 64
        | 0b10 << 62
        | ((_sequence & 0x1FFFFFFF) << 33)
        | (rand << 17)
        | secrets.randbits(17)
    )
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _now_ms() -> int:
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


def _is_context_message(message: AgentMessage) -> bool:
    if message.role != "assistant":
        return True
    return getattr(message, "stop_reason", None) not in ("error", "aborted", "deferred")


def build_session_context(
    path: Sequence[SessionEntry],
    *,
    projectors: Mapping[str, EntryProjector] | None = None,
) -> list[AgentMessage]:
    """The messages the model sees for a branch (``path``: entries from the root down).

    Pi's ``buildSessionContext``: the last compaction entry replaces everything before
    it with its summary and retained tail; branch summaries become
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
                if _is_context_message(entry.message):
                    messages.append(entry.message)
            case CompactionEntry():
                messages.append(
                    CompactionSummaryMessage(
                        summary=entry.summary,
                        tokens_before=entry.tokens_before,
                        timestamp=entry.timestamp,
                    )
                )
                messages.extend(m for m in entry.retained_tail if _is_context_message(m))
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


# --- state --------------------------------------------------------------------------


class _State:
    """Everything a session holds, rebuilt by replaying its writes (Pi's
    ``InMemoryStorageState``). Writes are validated before they are applied."""

    __slots__ = ("by_id", "entries", "lists", "next_seq", "usage", "values")

    def __init__(self) -> None:
        self.by_id: dict[str, SessionEntry] = {}
        self.entries: list[SessionEntry] = []
        self.values: dict[tuple[str, str], tuple[JSONValue, int]] = {}
        self.lists: dict[tuple[str, str], list[tuple[int, JSONValue]]] = {}
        self.usage: list[Write] = []
        self.next_seq = 1

    def apply(self, writes: Sequence[Write], message: AgentMessage | None = None) -> None:
        """Validate and apply one transaction (raise SessionFormatError, changing nothing,
        if it does not fit)."""
        seen: set[str] = set()
        previous = self.next_seq - 1
        for write in writes:
            seq = write.get("seq")
            if not isinstance(seq, int) or seq <= previous:
                msg = f"storage sequence numbers must increase: {seq!r} after {previous}"
                raise SessionFormatError(msg)
            previous = seq
            kind = write.get("kind")
            if kind in ("entry", "usage"):
                wid = write.get("id")
                if not isinstance(wid, str) or wid in self.by_id or wid in seen:
                    msg = f"duplicate or missing entry id: {wid!r}"
                    raise SessionFormatError(msg)
                if kind == "entry":
                    parent = write.get("parentId")
                    if parent is not None and parent not in self.by_id and parent not in seen:
                        msg = f"entry {wid!r} names a parent that does not exist: {parent!r}"
                        raise SessionFormatError(msg)
                seen.add(wid)
            elif kind not in ("value", "list"):
                msg = f"unknown write kind {kind!r} (expected entry, value, list or usage)"
                raise SessionFormatError(msg)
        parsed = [
            None
            if w["kind"] != "entry"
            else entry_from_wire(w)
            if message is None
            # Appending: the caller's message object itself, not a copy read back from JSON.
            else MessageEntry(
                id=w["id"],
                parent_id=w["parentId"],
                seq=w["seq"],
                timestamp=w["timestamp"],
                message=message,
                terminate=bool(w.get("terminate", False)),
            )
            for w in writes
        ]
        for write, entry in zip(writes, parsed, strict=True):
            kind = write["kind"]
            if entry is not None:
                self.by_id[entry.id] = entry
                self.entries.append(entry)
            elif kind == "value":
                address = (write["namespace"], write["key"])
                if write.get("op") == "delete":
                    self.values.pop(address, None)
                else:
                    self.values[address] = (write.get("value"), write["seq"])
            elif kind == "list":
                address = (write["namespace"], write["key"])
                if write.get("op") == "delete":
                    self.lists.pop(address, None)
                else:
                    self.lists.setdefault(address, []).append((write["seq"], write.get("value")))
            else:
                self.usage.append(dict(write))
            self.next_seq = write["seq"] + 1

    def value(self, namespace: str, key: str = "", default: JSONValue = None) -> JSONValue:
        stored = self.values.get((namespace, key))
        return default if stored is None else stored[0]

    def path(self, leaf_id: str | None) -> list[SessionEntry]:
        out: list[SessionEntry] = []
        current = leaf_id
        while current is not None:
            entry = self.by_id.get(current)
            if entry is None:
                msg = f"no entry {current!r} in this session"
                raise SessionNotFoundError(msg)
            out.append(entry)
            current = entry.parent_id
        out.reverse()
        return out

    def snapshot_writes(self) -> list[Write]:
        """Every current fact as writes in sequence order (what a compacted file holds)."""
        writes: list[Write] = [entry_to_wire(e) for e in self.entries]
        for (namespace, key), (value, seq) in self.values.items():
            writes.append(
                {
                    "kind": "value",
                    "op": "set",
                    "seq": seq,
                    "namespace": namespace,
                    "key": key,
                    "value": value,
                }
            )
        for (namespace, key), elements in self.lists.items():
            for seq, value in elements:
                writes.append(
                    {
                        "kind": "list",
                        "op": "append",
                        "seq": seq,
                        "namespace": namespace,
                        "key": key,
                        "value": value,
                    }
                )
        writes.extend(self.usage)
        writes.sort(key=lambda w: w["seq"])
        return writes


# --- session ------------------------------------------------------------------------


@final
@attrs.frozen(kw_only=True)
class SessionInfo:
    """A stored session, as listed by :meth:`SessionStore.list`.

    ``created_at`` and ``modified_at`` are seconds since the epoch. ``path`` is the
    file (JSONL) or database (SQLite) holding it, ``None`` in memory.
    """

    id: str
    cwd: str
    created_at: float
    modified_at: float
    parent_session_id: str | None = None
    path: str | None = None


class _Writer(Protocol):
    """How a session reaches its storage (one per open session)."""

    async def write(self, session: Session, transactions: Sequence[Sequence[Write]]) -> None: ...

    async def close(self) -> None: ...


class _Creator(Protocol):
    async def _create_session(
        self,
        *,
        cwd: str,
        session_id: str | None,
        parent_session_id: str | None,
        initial: Sequence[Write],
    ) -> Session: ...


@final
class Session:
    """One open conversation: an append-only tree of entries with a current leaf.

    Get one from a store (:meth:`SessionStore.create`, :meth:`SessionStore.open`).
    Every ``append_*`` method changes the session at once and returns after a
    checkpoint; the change reaches storage at the next :meth:`flush` or :meth:`close`.
    While it is open, no other store or process can open the same session for writing.
    """

    __slots__ = (
        "_closed",
        "_flush_lock",
        "_pending",
        "_state",
        "_store",
        "_writer",
        "created_at",
        "cwd",
        "id",
        "parent_session_id",
        "path",
        "read_only",
        "recovered",
    )

    def __init__(
        self,
        *,
        session_id: str,
        cwd: str,
        created_at: int,
        parent_session_id: str | None,
        state: _State,
        writer: _Writer,
        store: _Creator,
        recovered: str | None = None,
        read_only: bool = False,
        path: str | None = None,
    ) -> None:
        self.id = session_id
        self.cwd = cwd
        self.created_at = created_at
        """Milliseconds since the epoch."""
        self.parent_session_id = parent_session_id
        self.recovered = recovered
        """What opening dropped when the last write was torn (a crash mid-write);
        ``None`` when the stored session was complete."""
        self.read_only = read_only
        self.path = path
        """The file (JSONL) or database (SQLite) holding the session; ``None`` in memory."""
        """Opened with ``read_only=True``: changes are refused, and other writers are not."""
        self._state = state
        self._writer = writer
        self._store = store
        self._pending: list[list[Write]] = []
        self._flush_lock = trio.Lock()
        self._closed = False

    def __repr__(self) -> str:
        return f"<Session {self.id} cwd={self.cwd!r} entries={len(self._state.entries)}>"

    # -- reading ----------------------------------------------------------------------

    @property
    def entries(self) -> tuple[SessionEntry, ...]:
        """Every entry of every branch, in the order they were appended."""
        return tuple(self._state.entries)

    @property
    def leaf_id(self) -> str | None:
        """The id of the current entry, which the next append becomes a child of
        (``None`` while the session is empty)."""
        value: str | None = self._state.value(BRANCH_TIP, MAIN_BRANCH)
        return value

    @property
    def name(self) -> str | None:
        """The session's display name (:meth:`set_name`)."""
        value: str | None = self._state.value(SESSION_NAME, "")
        return value

    @property
    def labels(self) -> dict[str, str]:
        """Labels by entry id (:meth:`append_label`)."""
        return {
            key: value
            for (namespace, key), (value, _) in self._state.values.items()
            if namespace == ENTRY_LABEL
        }

    @property
    def model(self) -> ModelRef | None:
        """The model last set with :meth:`append_model_change`."""
        config = self._state.value(LANE_CONFIG, MAIN_BRANCH)
        if not isinstance(config, Mapping):
            return None
        model = config.get("model")
        if not isinstance(model, Mapping):
            return None
        return ModelRef(str(model.get("provider")), str(model.get("modelId")))

    @property
    def thinking_level(self) -> ThinkingLevel | None:
        """The thinking level last set with :meth:`append_thinking_level_change`."""
        config = self._state.value(LANE_CONFIG, MAIN_BRANCH)
        if isinstance(config, Mapping) and config.get("thinkingLevel") in THINKING_LEVELS:
            level: ThinkingLevel = config["thinkingLevel"]
            return level
        pending = self._state.value(PENDING_THINKING, MAIN_BRANCH)
        return pending if pending in THINKING_LEVELS else None

    @property
    def active_tool_names(self) -> tuple[str, ...] | None:
        """The tool names last set with :meth:`set_active_tools` (``None``: never set)."""
        config = self._state.value(LANE_CONFIG, MAIN_BRANCH)
        if isinstance(config, Mapping) and isinstance(config.get("activeToolNames"), list):
            return tuple(config["activeToolNames"])
        return None

    def get_entry(self, entry_id: str) -> SessionEntry:
        """The entry with this id (raise :class:`SessionNotFoundError` if none)."""
        try:
            return self._state.by_id[entry_id]
        except KeyError:
            msg = f"no entry {entry_id!r} in session {self.id}"
            raise SessionNotFoundError(msg) from None

    def get_branch(self, leaf_id: str | None = None) -> list[SessionEntry]:
        """The entries from the root down to ``leaf_id`` (default: the current leaf)."""
        return self._state.path(self.leaf_id if leaf_id is None else leaf_id)

    def children(self, entry_id: str | None) -> list[SessionEntry]:
        """The entries whose parent is ``entry_id`` (``None``: the roots)."""
        return [e for e in self._state.entries if e.parent_id == entry_id]

    def build_context(
        self,
        leaf_id: str | None = None,
        *,
        projectors: Mapping[str, EntryProjector] | None = None,
    ) -> SessionContext:
        """The conversation as the model sees it, on the current branch (or the branch
        ending at ``leaf_id``), with the session's model and thinking level."""
        return SessionContext(
            messages=tuple(build_session_context(self.get_branch(leaf_id), projectors=projectors)),
            model=self.model,
            thinking_level=self.thinking_level,
            active_tool_names=self.active_tool_names,
        )

    @property
    def usage_rows(self) -> tuple[Mapping[str, Any], ...]:
        """Pi's usage rows (JSON), as stored."""
        return tuple(self._state.usage)

    def get_value(self, namespace: str, key: str = "") -> JSONValue:
        """A stored value by address (Pi's ``getValue``), ``None`` when unset."""
        return self._state.value(namespace, key)

    # -- writing ----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            msg = f"session {self.id} is closed; open it again from its store"
            raise SessionClosedError(msg)

    def _commit(self, writes: Sequence[Write], message: AgentMessage | None = None) -> None:
        self._check_open()
        if self.read_only:
            msg = (
                f"session {self.id} was opened read-only; open it with read_only=False "
                "(no other writer may hold it) to change it"
            )
            raise SessionError(msg)
        ts = _now_ms()
        committed: list[Write] = []
        seq = self._state.next_seq
        for write in writes:
            if write["kind"] == "entry":
                out = dict(write)
                out["seq"] = seq
                out["timestamp"] = ts
            else:  # Pi's key order: kind, op, seq, namespace, key, value
                out = {"kind": write["kind"], "op": write["op"], "seq": seq}
                out.update(write)
                out["seq"] = seq
            committed.append(out)
            seq += 1
        self._state.apply(committed, message)
        self._pending.append(committed)

    @staticmethod
    def _value(namespace: str, key: str, value: JSONValue) -> Write:
        if value is None:
            return {"kind": "value", "op": "delete", "namespace": namespace, "key": key}
        return {"kind": "value", "op": "set", "namespace": namespace, "key": key, "value": value}

    def _append_entry(self, fields: Write, message: AgentMessage | None = None) -> str:
        entry_id = new_id()
        entry = {"kind": "entry", "id": entry_id, "parentId": self.leaf_id, **fields}
        self._commit([entry, self._value(BRANCH_TIP, MAIN_BRANCH, entry_id)], message)
        return entry_id

    async def append_message(self, message: AgentMessage, *, terminate: bool = False) -> str:
        """Append a message after the current leaf; return the new entry's id."""
        if getattr(message, "role", None) is None:
            msg = f"append_message() needs a message with a role; got {message!r:.100}"
            raise ArgumentTypeError(msg)
        if message.role == "assistant" and getattr(message, "stop_reason", None) == "pending":
            # Pi's SessionPendingAssistantMessageError: only settled replies are history.
            msg = "cannot persist a pending assistant message; append it at message_end"
            raise SessionError(msg)
        fields: Write = {"type": "message", "message": wire.unstructure(message)}
        if terminate:
            fields["terminate"] = True
        entry_id = self._append_entry(fields, message)
        await trio.lowlevel.checkpoint()
        return entry_id

    async def append_custom(self, custom_type: str, data: JSONValue = None) -> str:
        """Append application data (not shown to the model); return the entry's id."""
        fields: Write = {"type": "custom", "customType": custom_type}
        if data is not None:
            fields["data"] = copy.deepcopy(data)
        entry_id = self._append_entry(fields)
        await trio.lowlevel.checkpoint()
        return entry_id

    async def append_compaction(
        self,
        summary: str,
        *,
        tokens_before: int,
        retained_tail: Sequence[AgentMessage] | None = None,
        first_kept_entry_id: str | None = None,
        details: JSONValue = None,
        usage: Usage | None = None,
        from_hook: bool = False,
    ) -> str:
        """Record a compaction: from now on the model sees ``summary``, the retained tail,
        then what is appended after it.

        Give the kept messages as ``retained_tail`` (Pi's form), or name the first kept
        entry of the current branch with ``first_kept_entry_id`` and they are copied from
        the branch. Neither: nothing is kept besides the summary.
        """
        if retained_tail is not None and first_kept_entry_id is not None:
            msg = "append_compaction() takes retained_tail or first_kept_entry_id, not both"
            raise ArgumentTypeError(msg)
        if first_kept_entry_id is not None:
            branch = self.get_branch()
            ids = [e.id for e in branch]
            if first_kept_entry_id not in ids:
                msg = (
                    f"first_kept_entry_id {first_kept_entry_id!r} is not on the current branch "
                    f"of session {self.id}"
                )
                raise SessionNotFoundError(msg)
            # What the model saw from that entry on (an earlier compaction's tail included).
            retained_tail = build_session_context(branch[ids.index(first_kept_entry_id) :])
        fields: Write = {
            "type": "compaction",
            "summary": summary,
            "retainedTail": [wire.unstructure(m) for m in retained_tail or ()],
            "tokensBefore": tokens_before,
        }
        if details is not None:
            fields["details"] = copy.deepcopy(details)
        if usage is not None:
            fields["usage"] = wire.unstructure(usage)
        fields["fromHook"] = from_hook
        entry_id = self._append_entry(fields)
        await trio.lowlevel.checkpoint()
        return entry_id

    async def append_branch_summary(
        self,
        summary: str,
        *,
        from_id: str | None,
        details: JSONValue = None,
        usage: Usage | None = None,
        from_hook: bool = False,
    ) -> str:
        """Append a summary of the branch that ended at ``from_id`` (usually called right
        after :meth:`set_leaf` moved back to an earlier entry)."""
        fields: Write = {"type": "branch_summary", "fromId": from_id, "summary": summary}
        if details is not None:
            fields["details"] = copy.deepcopy(details)
        if usage is not None:
            fields["usage"] = wire.unstructure(usage)
        fields["fromHook"] = from_hook
        entry_id = self._append_entry(fields)
        await trio.lowlevel.checkpoint()
        return entry_id

    def _config(self) -> dict[str, Any]:
        config = self._state.value(LANE_CONFIG, MAIN_BRANCH)
        return dict(config) if isinstance(config, Mapping) else {}

    def _write_config(self, config: dict[str, Any]) -> None:
        writes = [self._value(LANE_CONFIG, MAIN_BRANCH, config)]
        if (LANE_STATE, MAIN_BRANCH) not in self._state.values:
            writes.append(self._value(LANE_STATE, MAIN_BRANCH, dict(_IDLE_LANE)))
        if (PENDING_THINKING, MAIN_BRANCH) in self._state.values:
            writes.append(self._value(PENDING_THINKING, MAIN_BRANCH, None))
        self._commit(writes)

    async def append_model_change(self, provider: str, model_id: str) -> None:
        """Record that the session now uses this model (Pi stores it as the lane
        configuration, together with the thinking level)."""
        config = self._config()
        config["model"] = {"provider": provider, "modelId": model_id}
        config.setdefault("thinkingLevel", self.thinking_level or "off")
        config.setdefault("activeToolNames", [])
        self._write_config(config)
        await trio.lowlevel.checkpoint()

    async def append_thinking_level_change(self, level: ThinkingLevel) -> None:
        """Record the session's new thinking level."""
        if level not in THINKING_LEVELS:
            msg = f"unknown thinking level {level!r}; expected one of {', '.join(THINKING_LEVELS)}"
            raise UsageError(msg)
        config = self._config()
        if "model" in config:
            config["thinkingLevel"] = level
            self._write_config(config)
        else:
            # Pi's lane configuration needs a model; keep the level until one is set.
            self._commit([self._value(PENDING_THINKING, MAIN_BRANCH, level)])
        await trio.lowlevel.checkpoint()

    async def set_active_tools(self, names: Sequence[str]) -> None:
        """Record which tools are active (by name); needs a model set first, as in Pi."""
        config = self._config()
        if "model" not in config:
            msg = "set_active_tools() needs a model first: call append_model_change()"
            raise SessionError(msg)
        config["activeToolNames"] = list(names)
        self._write_config(config)
        await trio.lowlevel.checkpoint()

    async def append_label(self, target_id: str, label: str | None) -> None:
        """Label an entry (``None`` or ``""`` removes its label)."""
        self.get_entry(target_id)
        self._commit([self._value(ENTRY_LABEL, target_id, label or None)])
        await trio.lowlevel.checkpoint()

    async def set_name(self, name: str | None) -> None:
        """Name the session (``None`` removes the name)."""
        self._commit([self._value(SESSION_NAME, "", name)])
        await trio.lowlevel.checkpoint()

    async def set_leaf(self, entry_id: str | None) -> None:
        """Move the current leaf to an earlier entry (``None``: before the first); the
        next append starts a new branch there. Nothing is deleted."""
        if entry_id is not None:
            self.get_entry(entry_id)
        self._commit([self._value(BRANCH_TIP, MAIN_BRANCH, entry_id)])
        await trio.lowlevel.checkpoint()

    async def fork(
        self, entry_id: str | None = None, *, position: Literal["at", "before"] = "at"
    ) -> Session:
        """A new session in the same store holding the current branch up to ``entry_id``
        (default: the current leaf), with ``position="before"`` up to its parent.

        The new session keeps the entries' ids, the labels of copied entries, the
        model, thinking level and name; its ``parent_session_id`` is this session.
        Pending changes of this session are flushed first.
        """
        self._check_open()
        branch = self.get_branch()
        if entry_id is None:
            kept = branch
        else:
            ids = [e.id for e in branch]
            if entry_id not in ids:
                msg = (
                    f"cannot fork at {entry_id!r}: it is not on the current branch "
                    f"of session {self.id}"
                )
                raise SessionNotFoundError(msg)
            end = ids.index(entry_id) + (1 if position == "at" else 0)
            kept = branch[:end]
        await self.flush()
        writes = [entry_to_wire(e) for e in kept]
        seq = max((e.seq for e in kept), default=0) + 1
        copied = {e.id for e in kept}

        def value(namespace: str, key: str, v: JSONValue) -> None:
            nonlocal seq
            writes.append(
                {
                    "kind": "value",
                    "op": "set",
                    "seq": seq,
                    "namespace": namespace,
                    "key": key,
                    "value": v,
                }
            )
            seq += 1

        value(BRANCH_TIP, MAIN_BRANCH, kept[-1].id if kept else None)
        for (namespace, key), (v, _) in sorted(self._state.values.items(), key=lambda kv: kv[1][1]):
            if namespace in (LANE_CONFIG, LANE_STATE) and key == MAIN_BRANCH:
                value(namespace, key, _IDLE_LANE if namespace == LANE_STATE else v)
            elif namespace in (SESSION_NAME, PENDING_THINKING) or (
                namespace == ENTRY_LABEL and key in copied
            ):
                value(namespace, key, v)
        return await self._store._create_session(
            cwd=self.cwd, session_id=None, parent_session_id=self.id, initial=writes
        )

    # -- storage ----------------------------------------------------------------------

    @property
    def dirty(self) -> bool:
        """Whether changes are waiting for :meth:`flush`."""
        return bool(self._pending)

    async def flush(self) -> None:
        """Write the pending changes to storage (one call may write many transactions)."""
        self._check_open()
        async with self._flush_lock:
            if not self._pending:
                await trio.lowlevel.checkpoint()
                return
            pending, self._pending = self._pending, []
            try:
                await self._writer.write(self, pending)
            except BaseException:
                self._pending[:0] = pending
                raise

    async def close(self) -> None:
        """Flush, then release the session for other writers. Closing twice is fine."""
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        try:
            await self.flush()
        finally:
            self._closed = True
            with trio.CancelScope(shield=True):
                await self._writer.close()

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


def _replay(transactions: Iterable[Sequence[Write]]) -> _State:
    state = _State()
    for transaction in transactions:
        state.apply(transaction)
    return state


# --- stores -------------------------------------------------------------------------


class SessionStore(Protocol):
    """Where sessions live. :class:`InMemorySessionStore`, ``JsonlSessionStore`` and
    ``SqliteSessionStore`` implement it."""

    async def create(
        self, *, cwd: str | os.PathLike[str] | None = None, session_id: str | None = None
    ) -> Session:
        """A new, empty session for the working directory ``cwd`` (default: the
        process's), open for writing."""
        ...

    async def open(self, session_id: str, *, read_only: bool = False) -> Session:
        """Open a stored session for writing (raise :class:`SessionNotFoundError`, or
        :class:`SessionLockedError` if it is open elsewhere).

        With ``read_only=True``: a snapshot of what was flushed, which refuses changes and
        takes no lock (it opens even while another process writes the session).
        """
        ...

    async def list(self, *, cwd: str | os.PathLike[str] | None = None) -> list[SessionInfo]:
        """The stored sessions (only those of ``cwd`` if given), newest first."""
        ...

    async def latest(self, cwd: str | os.PathLike[str] | None = None) -> SessionInfo | None:
        """The session of ``cwd`` (default: the process's) written to last, if any:
        the one to continue."""
        ...

    async def delete(self, session_id: str) -> None:
        """Remove a stored session (it must not be open)."""
        ...


def resolve_cwd(cwd: str | os.PathLike[str] | None) -> str:
    """An absolute working directory (the process's when ``None``)."""
    return os.path.abspath(os.fspath(cwd) if cwd is not None else os.getcwd())


@final
class ReadOnlyWriter:
    """The writer of a session opened read-only: nothing to write, nothing to release."""

    __slots__ = ()

    async def write(self, session: Session, transactions: Sequence[Sequence[Write]]) -> None:
        msg = f"session {session.id} was opened read-only"  # pragma: no cover - refused earlier
        raise SessionError(msg)  # pragma: no cover

    async def close(self) -> None:
        await trio.lowlevel.checkpoint()


@final
class _MemoryWriter:
    __slots__ = ("_record", "_store")

    def __init__(self, store: InMemorySessionStore, record: _MemoryRecord) -> None:
        self._store = store
        self._record = record

    async def write(self, session: Session, transactions: Sequence[Sequence[Write]]) -> None:
        self._record.transactions.extend(copy.deepcopy(list(transactions)))
        self._record.modified_at = time.time()
        await trio.lowlevel.checkpoint()

    async def close(self) -> None:
        self._store._open.discard(self._record.info_id)
        await trio.lowlevel.checkpoint()


@attrs.define
class _MemoryRecord:
    info_id: str
    cwd: str
    created_at: int
    parent_session_id: str | None
    modified_at: float
    transactions: list[Sequence[Write]] = attrs.field(factory=list)


class StoreBase(abc.ABC):
    """What every store derives from its own ``_create_session`` and ``list``:
    :meth:`create` and :meth:`latest` (one definition for the three stores)."""

    @abc.abstractmethod
    async def _create_session(
        self,
        *,
        cwd: str,
        session_id: str | None,
        parent_session_id: str | None,
        initial: Sequence[Write],
    ) -> Session: ...

    @abc.abstractmethod
    async def list(self, *, cwd: str | os.PathLike[str] | None = None) -> list[SessionInfo]: ...

    async def create(
        self, *, cwd: str | os.PathLike[str] | None = None, session_id: str | None = None
    ) -> Session:
        """See :meth:`SessionStore.create`."""
        return await self._create_session(
            cwd=resolve_cwd(cwd), session_id=session_id, parent_session_id=None, initial=()
        )

    async def latest(self, cwd: str | os.PathLike[str] | None = None) -> SessionInfo | None:
        """See :meth:`SessionStore.latest`."""
        return most_recent(await self.list(cwd=resolve_cwd(cwd)))


@final
class InMemorySessionStore(StoreBase):
    """Sessions kept in this object only (tests, throwaway agents).

    Stored data is copied at each flush, so reopening shows exactly what was flushed.
    """

    def __init__(self) -> None:
        self._records: dict[str, _MemoryRecord] = {}
        self._open: set[str] = set()

    async def _create_session(
        self,
        *,
        cwd: str,
        session_id: str | None,
        parent_session_id: str | None,
        initial: Sequence[Write],
    ) -> Session:
        created = _now_ms()
        sid = session_id or new_id(created)
        if sid in self._records:
            msg = f"a session with id {sid!r} exists already"
            raise SessionExistsError(msg)
        state = _replay([initial] if initial else [])
        record = _MemoryRecord(sid, cwd, created, parent_session_id, time.time())
        if initial:
            record.transactions.append(copy.deepcopy(list(initial)))
        self._records[sid] = record
        self._open.add(sid)
        await trio.lowlevel.checkpoint()
        return Session(
            session_id=sid,
            cwd=cwd,
            created_at=created,
            parent_session_id=parent_session_id,
            state=state,
            writer=_MemoryWriter(self, record),
            store=self,
        )

    async def open(self, session_id: str, *, read_only: bool = False) -> Session:
        """See :meth:`SessionStore.open`."""
        await trio.lowlevel.checkpoint()
        record = self._records.get(session_id)
        if record is None:
            msg = f"no session {session_id!r} in this store"
            raise SessionNotFoundError(msg)
        if read_only:
            return Session(
                session_id=session_id,
                cwd=record.cwd,
                created_at=record.created_at,
                parent_session_id=record.parent_session_id,
                state=_replay(copy.deepcopy(record.transactions)),
                writer=ReadOnlyWriter(),
                store=self,
                read_only=True,
            )
        if session_id in self._open:
            msg = f"session {session_id} is already open for writing; close it first"
            raise SessionLockedError(msg)
        state = _replay(copy.deepcopy(record.transactions))
        self._open.add(session_id)
        return Session(
            session_id=session_id,
            cwd=record.cwd,
            created_at=record.created_at,
            parent_session_id=record.parent_session_id,
            state=state,
            writer=_MemoryWriter(self, record),
            store=self,
        )

    async def list(self, *, cwd: str | os.PathLike[str] | None = None) -> list[SessionInfo]:
        """See :meth:`SessionStore.list`."""
        await trio.lowlevel.checkpoint()
        want = None if cwd is None else resolve_cwd(cwd)
        infos = [
            SessionInfo(
                id=r.info_id,
                cwd=r.cwd,
                created_at=r.created_at / 1000,
                modified_at=r.modified_at,
                parent_session_id=r.parent_session_id,
            )
            for r in self._records.values()
            if want is None or r.cwd == want
        ]
        return sort_infos(infos)

    async def delete(self, session_id: str) -> None:
        """See :meth:`SessionStore.delete`."""
        await trio.lowlevel.checkpoint()
        if session_id in self._open:
            msg = f"session {session_id} is open; close it before deleting it"
            raise SessionLockedError(msg)
        if self._records.pop(session_id, None) is None:
            msg = f"no session {session_id!r} in this store"
            raise SessionNotFoundError(msg)


def most_recent(infos: Sequence[SessionInfo]) -> SessionInfo | None:
    """The session modified last (ties: created last)."""
    return max(infos, key=lambda i: (i.modified_at, i.created_at), default=None)


def sort_infos(infos: list[SessionInfo]) -> list[SessionInfo]:
    """Newest first, then by id (Pi's order)."""
    infos.sort(key=lambda i: i.id)
    infos.sort(key=lambda i: i.created_at, reverse=True)
    return infos
