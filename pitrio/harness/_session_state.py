"""A session's state, rebuilt by replaying its writes.

Reproduces Pi's ``session/in-memory-storage-state.js`` (entries by id, the current value
at each address, list elements, usage rows, the next sequence number) with the checks of
``commit.js``'s ``validateCommittedWrites`` (sequence numbers increase, entry ids are
new, parents exist), and the value addresses of ``values.js`` that pitrio reads and
writes (branch tips, lane configuration and state, entry labels, the session name; the
operation records are in ``_operations``).
Every store (memory, JSONL, SQLite) loads a session into a :class:`SessionState`.

Entries are held in two parts: an index of every entry (id, parent, sequence number,
type) in compact arrays, and the entries themselves, structured on first use. A store
that opens a long session fills the index without structuring an entry (``lazy=True``)
and gives an :data:`EntryLoader` that reads given entries back (a JSONL file's lines, a
database's rows); the context of the active branch then structures only the entries
after its last compaction, so a resume does not grow with the whole session. Entries
appended in this process are kept as they were appended.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, overload

from pitrio import AgentMessage

from ._entries import JSONValue, MessageEntry, SessionEntry, Write, entry_from_wire, entry_to_wire
from ._errors import SessionFormatError, SessionNotFoundError

__all__ = [
    "BRANCH_TIP",
    "ENTRY_LABEL",
    "IDLE_LANE",
    "LANE_CONFIG",
    "LANE_STATE",
    "MAIN_BRANCH",
    "PENDING_THINKING",
    "SESSION_NAME",
    "THINKING_LEVELS",
    "EntryLoader",
    "SessionState",
    "replay_writes",
]

# The value addresses (namespace, then key) of Pi's values.js that pitrio uses: pitrio
# works on the "main" branch and lane; PENDING_THINKING is pitrio's own (a thinking level
# set before any model, which Pi's lane configuration cannot hold yet).
MAIN_BRANCH = "main"
BRANCH_TIP = "pi.branch.tip"
LANE_CONFIG = "pi.lane.config"
LANE_STATE = "pi.lane.state"
ENTRY_LABEL = "pi.entry.label"
SESSION_NAME = "pi.session.name"
PENDING_THINKING = "pitrio.lane.thinking_level"
IDLE_LANE: dict[str, Any] = {"currentOperationId": None, "lastOperationId": None, "inbox": []}
THINKING_LEVELS = ("off", "minimal", "low", "medium", "high", "xhigh", "max")


EntryLoader = Callable[[Sequence[int]], Sequence[Mapping[str, Any]]]
"""Reads entries back from storage: given their positions (in append order), their
committed ``{"kind": "entry", ...}`` writes, in the same order."""

ENTRY_TYPES = ("message", "compaction", "branch_summary", "custom")
"""The entry types, by their code in :attr:`SessionState.types`."""
_TYPE_CODES = {name: code for code, name in enumerate(ENTRY_TYPES)}
COMPACTION = _TYPE_CODES["compaction"]


class SessionState:
    """Everything a session holds, rebuilt by replaying its writes (Pi's
    ``InMemoryStorageState``). Writes are validated before they are applied.

    ``ids``, ``parents`` (the position of each entry's parent, ``-1`` for a root),
    ``seqs`` and ``types`` index every entry by its position; ``by_id`` and ``entries``
    read them as entries, structuring (and keeping) each on first use."""

    __slots__ = (
        "_cache",
        "by_id",
        "entries",
        "ids",
        "lists",
        "loader",
        "next_seq",
        "parents",
        "position",
        "seqs",
        "types",
        "usage",
        "values",
    )

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.position: dict[str, int] = {}
        self.parents = array("i")
        self.seqs = array("q")
        self.types = bytearray()
        self._cache: dict[int, SessionEntry] = {}
        self.loader: EntryLoader | None = None
        self.by_id = _ById(self)
        self.entries = _Entries(self)
        self.values: dict[tuple[str, str], tuple[JSONValue, int]] = {}
        self.lists: dict[tuple[str, str], list[tuple[int, JSONValue]]] = {}
        self.usage: list[Write] = []
        self.next_seq = 1

    # -- the index ----------------------------------------------------------------------

    def restore_index(
        self, ids: list[str], parents: array[int], seqs: array[int], types: bytearray
    ) -> None:
        """Take a saved index of entries (a JSONL sidecar's) as it stands, for an empty
        state; the entries are read through :attr:`loader`."""
        assert not self.ids
        if not len(ids) == len(parents) == len(seqs) == len(types):
            msg = "an entry index with arrays of different lengths"
            raise SessionFormatError(msg)
        position = {entry_id: n for n, entry_id in enumerate(ids)}
        if len(position) != len(ids):
            msg = "an entry index that names an entry twice"
            raise SessionFormatError(msg)
        self.ids, self.position = ids, position
        self.parents, self.seqs, self.types = parents, seqs, types
        if seqs:
            self.next_seq = seqs[-1] + 1

    def index_entries(self, rows: Iterable[tuple[str, str | None, int, str]]) -> None:
        """Index entries read from a database as ``(id, parent_id, seq, type)`` rows in
        sequence order, with the checks of :meth:`apply`; the entries are read through
        :attr:`loader`. Values, list elements and usage rows are set after."""
        position = self.position
        for entry_id, parent_id, seq, type_name in rows:
            if seq < self.next_seq:
                msg = f"storage sequence numbers must increase: {seq!r} after {self.next_seq - 1}"
                raise SessionFormatError(msg)
            if entry_id in position:
                msg = f"duplicate or missing entry id: {entry_id!r}"
                raise SessionFormatError(msg)
            if parent_id is not None and parent_id not in position:
                msg = f"entry {entry_id!r} names a parent that does not exist: {parent_id!r}"
                raise SessionFormatError(msg)
            if type_name not in _TYPE_CODES:
                msg = (
                    f"unknown session entry type {type_name!r} "
                    "(expected message, compaction, branch_summary or custom)"
                )
                raise SessionFormatError(msg)
            self._index(entry_id, parent_id, seq, type_name)
            self.next_seq = seq + 1

    def entry_at(self, position: int) -> SessionEntry:
        """The entry at ``position`` (structured on first use)."""
        entry = self._cache.get(position)
        if entry is None:
            self.load((position,))
            entry = self._cache[position]
        return entry

    def load(self, positions: Iterable[int]) -> list[SessionEntry]:
        """The entries at ``positions``, reading those not structured yet in one call of
        the loader."""
        wanted = list(positions)
        missing = [p for p in wanted if p not in self._cache]
        if missing:
            if self.loader is None:  # pragma: no cover - every lazy store sets one
                msg = "this session's entries were indexed without a way to read them"
                raise SessionFormatError(msg)
            writes = self.loader(missing)
            for position, write in zip(missing, writes, strict=True):
                if write.get("id") != self.ids[position]:
                    msg = (
                        f"entry {self.ids[position]!r} reads back as {write.get('id')!r}: "
                        "the session changed in storage since it was opened; open it again"
                    )
                    raise SessionFormatError(msg)
                self._cache[position] = entry_from_wire(write)
        cache = self._cache
        return [cache[p] for p in wanted]

    def path_positions(self, leaf_id: str | None, *, stop_at_compaction: bool = False) -> list[int]:
        """The positions from the root (or, with ``stop_at_compaction``, from the last
        compaction) down to ``leaf_id``."""
        out: list[int] = []
        if leaf_id is None:
            return out
        current = self.position.get(leaf_id)
        if current is None:
            msg = f"no entry {leaf_id!r} in this session"
            raise SessionNotFoundError(msg)
        parents, types = self.parents, self.types
        while current >= 0:
            out.append(current)
            if stop_at_compaction and types[current] == COMPACTION:
                break
            current = parents[current]
        out.reverse()
        return out

    def child_positions(self, entry_id: str | None) -> list[int]:
        """The positions of the entries whose parent is ``entry_id`` (``None``: roots)."""
        parent = -1 if entry_id is None else self.position.get(entry_id, -2)
        return [n for n, p in enumerate(self.parents) if p == parent]

    def _index(self, entry_id: str, parent_id: str | None, seq: int, type_name: str) -> int:
        position = len(self.ids)
        self.ids.append(entry_id)
        self.position[entry_id] = position
        self.parents.append(-1 if parent_id is None else self.position[parent_id])
        self.seqs.append(seq)
        self.types.append(_TYPE_CODES[type_name])
        return position

    # -- writes -------------------------------------------------------------------------

    def apply(
        self, writes: Sequence[Write], message: AgentMessage | None = None, *, lazy: bool = False
    ) -> None:
        """Validate and apply one transaction (raise SessionFormatError, changing nothing,
        if it does not fit). With ``lazy``, entries are indexed but not structured (the
        store's :attr:`loader` reads them back when they are used)."""
        seen: set[str] = set()
        previous = self.next_seq - 1
        position = self.position
        for write in writes:
            seq = write.get("seq")
            if not isinstance(seq, int) or seq <= previous:
                msg = f"storage sequence numbers must increase: {seq!r} after {previous}"
                raise SessionFormatError(msg)
            previous = seq
            kind = write.get("kind")
            if kind in ("entry", "usage"):
                wid = write.get("id")
                if not isinstance(wid, str) or wid in position or wid in seen:
                    msg = f"duplicate or missing entry id: {wid!r}"
                    raise SessionFormatError(msg)
                if kind == "entry":
                    parent = write.get("parentId")
                    if parent is not None and parent not in position and parent not in seen:
                        msg = f"entry {wid!r} names a parent that does not exist: {parent!r}"
                        raise SessionFormatError(msg)
                    missing = [k for k in ("parentId", "timestamp") if k not in write]
                    if lazy and missing:
                        msg = f"a session entry is missing the field {missing[0]!r}: {write!r:.200}"
                        raise SessionFormatError(msg)
                    if lazy and write.get("type") not in _TYPE_CODES:
                        msg = (
                            f"unknown session entry type {write.get('type')!r} "
                            "(expected message, compaction, branch_summary or custom)"
                        )
                        raise SessionFormatError(msg)
                seen.add(wid)
            elif kind not in ("value", "list"):
                msg = f"unknown write kind {kind!r} (expected entry, value, list or usage)"
                raise SessionFormatError(msg)
        parsed = [
            None
            if w["kind"] != "entry" or lazy
            else entry_from_wire(w)
            if message is None
            # Appending: the caller's message object itself, not a copy read back from JSON.
            else _message_entry(w, message)
            for w in writes
        ]
        for write, entry in zip(writes, parsed, strict=True):
            kind = write["kind"]
            if kind == "entry":
                at = self._index(write["id"], write["parentId"], write["seq"], write["type"])
                if entry is not None:
                    self._cache[at] = entry
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

    def commit(
        self, writes: Sequence[Write], message: AgentMessage | None, timestamp: Callable[[], int]
    ) -> list[Write]:
        """Number one transaction of this process's writes from :attr:`next_seq`, check
        and apply it as :meth:`apply` does (raise SessionFormatError, changing nothing,
        if it does not fit); returns the committed writes.

        A write is committed in Pi's key order: ``kind, op, seq, namespace, key[, value]``
        for a value or list write (one built with ``"seq": None`` in that place is
        numbered where it is, not copied: ``_operations._set``), an entry's fields then
        ``seq`` and ``timestamp`` (one ``timestamp()`` for the transaction's entries), a
        usage row's fields then ``seq``."""
        seq = self.next_seq
        committed: list[Write] = []
        ts: int | None = None
        entries = False
        for write in writes:
            kind = write["kind"]
            if kind == "value" or kind == "list":
                if write.get("seq", 0) is None:  # built in committed order, never numbered
                    out = write
                else:
                    out = {"kind": kind, "op": write["op"], "seq": seq, **write}
                out["seq"] = seq
            elif kind == "entry":
                if ts is None:
                    ts = timestamp()
                out = dict(write)
                out["seq"] = seq
                out["timestamp"] = ts
                entries = True
            elif kind == "usage":
                out = dict(write)
                out["seq"] = seq
                entries = True
            else:
                msg = f"unknown write kind {kind!r} (expected entry, value, list or usage)"
                raise SessionFormatError(msg)
            committed.append(out)
            seq += 1
        parsed: list[SessionEntry] = []
        if entries:
            self._check_ids(committed)
            # Structured before anything changes (a bad entry raises here).
            parsed = [
                entry_from_wire(w)
                if message is None
                else _message_entry(w, message)
                for w in committed
                if w["kind"] == "entry"
            ]
        values, lists = self.values, self.lists
        parsed.reverse()
        for write in committed:
            kind = write["kind"]
            if kind == "value":
                if write["op"] == "delete":
                    values.pop((write["namespace"], write["key"]), None)
                else:
                    values[(write["namespace"], write["key"])] = (write.get("value"), write["seq"])
            elif kind == "entry":
                at = self._index(write["id"], write["parentId"], write["seq"], write["type"])
                self._cache[at] = parsed.pop()
            elif kind == "list":
                address = (write["namespace"], write["key"])
                if write["op"] == "delete":
                    lists.pop(address, None)
                else:
                    lists.setdefault(address, []).append((write["seq"], write.get("value")))
            else:
                self.usage.append(dict(write))
        self.next_seq = seq
        return committed

    def _check_ids(self, writes: Sequence[Write]) -> None:
        """:meth:`apply`'s checks of the entries and usage rows of a transaction."""
        seen: set[str] = set()
        position = self.position
        for write in writes:
            kind = write["kind"]
            if kind != "entry" and kind != "usage":
                continue
            wid = write.get("id")
            if not isinstance(wid, str) or wid in position or wid in seen:
                msg = f"duplicate or missing entry id: {wid!r}"
                raise SessionFormatError(msg)
            parent = write.get("parentId")
            known = parent is None or parent in position or parent in seen
            if kind == "entry" and not known:
                msg = f"entry {wid!r} names a parent that does not exist: {parent!r}"
                raise SessionFormatError(msg)
            seen.add(wid)

    def value(self, namespace: str, key: str = "", default: JSONValue = None) -> JSONValue:
        stored = self.values.get((namespace, key))
        return default if stored is None else stored[0]

    def path(self, leaf_id: str | None) -> list[SessionEntry]:
        """The entries from the root down to ``leaf_id``."""
        return self.load(self.path_positions(leaf_id))

    def context_path(self, leaf_id: str | None) -> list[SessionEntry]:
        """The end of the branch ``leaf_id`` ends: from its last compaction (or its root)
        down, what :func:`build_session_context` reads."""
        return self.load(self.path_positions(leaf_id, stop_at_compaction=True))

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


class _ById(Mapping[str, SessionEntry]):
    """The entries by id (structured on first use)."""

    __slots__ = ("_state",)

    def __init__(self, state: SessionState) -> None:
        self._state = state

    def __getitem__(self, entry_id: str) -> SessionEntry:
        return self._state.entry_at(self._state.position[entry_id])

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self._state.position

    def __iter__(self) -> Iterator[str]:
        return iter(self._state.ids)

    def __len__(self) -> int:
        return len(self._state.ids)


class _Entries(Sequence[SessionEntry]):
    """The entries in append order (structured on first use, a batch at a time)."""

    __slots__ = ("_state",)

    _BATCH = 1024

    def __init__(self, state: SessionState) -> None:
        self._state = state

    def __len__(self) -> int:
        return len(self._state.ids)

    @overload
    def __getitem__(self, index: int) -> SessionEntry: ...
    @overload
    def __getitem__(self, index: slice) -> list[SessionEntry]: ...
    def __getitem__(self, index: int | slice) -> SessionEntry | list[SessionEntry]:
        if isinstance(index, slice):
            return self._state.load(range(len(self._state.ids))[index])
        return self._state.entry_at(range(len(self._state.ids))[index])

    def __iter__(self) -> Iterator[SessionEntry]:
        count = len(self._state.ids)
        for start in range(0, count, self._BATCH):
            yield from self._state.load(range(start, min(start + self._BATCH, count)))


def replay_writes(transactions: Iterable[Sequence[Write]]) -> SessionState:
    """The state after applying ``transactions`` in order."""
    state = SessionState()
    for transaction in transactions:
        state.apply(transaction)
    return state


def _message_entry(write: Write, message: AgentMessage) -> MessageEntry:
    """The entry of an appended message's write, holding the caller's message object
    itself, not a copy read back from JSON."""
    return MessageEntry(
        id=write["id"],
        parent_id=write["parentId"],
        seq=write["seq"],
        timestamp=write["timestamp"],
        message=message,
        terminate=bool(write.get("terminate", False)),
    )
