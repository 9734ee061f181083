"""A session's state, rebuilt by replaying its writes.

Reproduces Pi's ``session/in-memory-storage-state.js`` (entries by id, the current value
at each address, list elements, usage rows, the next sequence number) with the checks of
``commit.js``'s ``validateCommittedWrites`` (sequence numbers increase, entry ids are
new, parents exist), and the value addresses of ``values.js`` that pitrio reads and
writes (branch tips, lane configuration and state, entry labels, the session name; the
operation records are in ``_operations``).
Every store (memory, JSONL, SQLite) loads a session into a :class:`SessionState`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

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


class SessionState:
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
        by_id = self.by_id
        seen: set[str] = set()
        entries = False
        previous = self.next_seq - 1
        for write in writes:
            seq = write.get("seq")
            if not isinstance(seq, int) or seq <= previous:
                msg = f"storage sequence numbers must increase: {seq!r} after {previous}"
                raise SessionFormatError(msg)
            previous = seq
            kind = write.get("kind")
            if kind == "value" or kind == "list":
                continue
            if kind == "entry" or kind == "usage":
                wid = write.get("id")
                if not isinstance(wid, str) or wid in by_id or wid in seen:
                    msg = f"duplicate or missing entry id: {wid!r}"
                    raise SessionFormatError(msg)
                if kind == "entry":
                    entries = True
                    parent = write.get("parentId")
                    if parent is not None and parent not in by_id and parent not in seen:
                        msg = f"entry {wid!r} names a parent that does not exist: {parent!r}"
                        raise SessionFormatError(msg)
                seen.add(wid)
            else:
                msg = f"unknown write kind {kind!r} (expected entry, value, list or usage)"
                raise SessionFormatError(msg)
        # Entries read from storage are parsed before anything is applied (a malformed
        # one changes nothing); an appended message is the caller's object itself, not
        # a copy read back from JSON.
        parsed = (
            [entry_from_wire(w) if w["kind"] == "entry" else None for w in writes]
            if entries and message is None
            else None
        )
        values = self.values
        for n, write in enumerate(writes):
            kind = write["kind"]
            if kind == "value":
                address = (write["namespace"], write["key"])
                if write.get("op") == "delete":
                    values.pop(address, None)
                else:
                    values[address] = (write.get("value"), write["seq"])
            elif kind == "entry":
                entry = (
                    parsed[n]
                    if parsed is not None
                    else MessageEntry(
                        id=write["id"],
                        parent_id=write["parentId"],
                        seq=write["seq"],
                        timestamp=write["timestamp"],
                        message=message,
                        terminate=bool(write.get("terminate", False)),
                    )
                )
                assert entry is not None
                by_id[entry.id] = entry
                self.entries.append(entry)
            elif kind == "list":
                address = (write["namespace"], write["key"])
                if write.get("op") == "delete":
                    self.lists.pop(address, None)
                else:
                    self.lists.setdefault(address, []).append((write["seq"], write.get("value")))
            else:
                self.usage.append(dict(write))
        if writes:
            self.next_seq = writes[-1]["seq"] + 1

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


def replay_writes(transactions: Iterable[Sequence[Write]]) -> SessionState:
    """The state after applying ``transactions`` in order."""
    state = SessionState()
    for transaction in transactions:
        state.apply(transaction)
    return state
