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

Durability: every change is written to storage as it is made, one transaction per
change, as Pi commits them (a JSONL line appended, an SQLite transaction committed):
when an ``append_*`` call returns, the change is in the operating system's hands, and
a process killed right after (a SIGKILL mid-tool) keeps it. :meth:`Session.flush` makes
it survive a power loss as well, by the store's ``fsync`` policy (by default it syncs
the file at each flush: the harness flushes after each ``turn_end`` and when it
settles), and retries a write that failed. Storage is a :class:`SessionStore`:
:class:`InMemorySessionStore` here, ``JsonlSessionStore`` (Pi's file format, the
default) and ``SqliteSessionStore``.

Timestamps on entries are milliseconds since the epoch, as on messages;
:class:`SessionInfo` gives seconds, as :func:`os.stat` does.

This module holds :class:`Session` (Pi's ``session/session.js``, with the fork of
``fork.js``). The entries and the context rebuild are in ``_entries``, the replayed
state in ``_session_state``, the store interface and the in-memory store in ``_store``,
the file and database stores in ``_jsonl`` and ``_sqlite``.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol, final

import trio

from pitrio import AgentMessage, ArgumentTypeError, ThinkingLevel, Usage, UsageError, wire

from ._entries import (
    EntryProjector,
    JSONValue,
    ModelRef,
    SessionContext,
    SessionEntry,
    Write,
    build_session_context,
    entry_to_wire,
    new_id,
    now_ms,
)
from ._errors import SessionClosedError, SessionError, SessionFormatError, SessionNotFoundError
from ._session_state import (
    BRANCH_TIP,
    ENTRY_LABEL,
    IDLE_LANE,
    LANE_CONFIG,
    LANE_STATE,
    MAIN_BRANCH,
    PENDING_THINKING,
    SESSION_NAME,
    THINKING_LEVELS,
    SessionState,
)

__all__ = ["Session"]


class _Writer(Protocol):
    """How a session reaches its storage (one per open session)."""

    async def write(self, session: Session, transactions: Sequence[Sequence[Write]]) -> None: ...

    async def sync(self) -> None:
        """Make what was written survive a power loss, if the store's policy says so."""
        ...

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
    Every ``append_*`` method changes the session at once and writes the change to
    storage before it returns (see the module's "Durability"). If the write fails (a
    full disk) or the call is cancelled before it, the change stays in the session and
    is written by the next change, :meth:`flush` or :meth:`close`.
    While it is open, no other store or process can open the same session for writing.
    """

    __slots__ = (
        "_closed",
        "_flush_lock",
        "_lane",
        "_pending",
        "_root",
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
        state: SessionState,
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
        """Opened with ``read_only=True``: changes are refused, and other writers are not."""
        self.path = path
        """The file (JSONL) or database (SQLite) holding the session; ``None`` in memory."""
        self._state = state
        self._writer = writer
        self._store = store
        self._pending: list[list[Write]] = []
        self._flush_lock = trio.Lock()
        self._closed = False
        self._lane = MAIN_BRANCH
        self._root: Session | None = None  # the session a lane view shares storage with
        leaf = self.leaf_id
        if state.loader is not None and leaf in state.position:
            # Opened lazily, in the store's worker thread: the active branch's context is
            # structured here, so build_context() and a restore read nothing from storage
            # on the event loop's thread. An entry that does not structure fails when it is
            # used, as one read later does, not here, where the store still holds its file.
            with contextlib.suppress(SessionFormatError):
                state.context_path(leaf)

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
        value: str | None = self._state.value(BRANCH_TIP, self._lane)
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
        config = self._state.value(LANE_CONFIG, self._lane)
        if not isinstance(config, Mapping):
            return None
        model = config.get("model")
        if not isinstance(model, Mapping):
            return None
        return ModelRef(str(model.get("provider")), str(model.get("modelId")))

    @property
    def thinking_level(self) -> ThinkingLevel | None:
        """The thinking level last set with :meth:`append_thinking_level_change`."""
        config = self._state.value(LANE_CONFIG, self._lane)
        if isinstance(config, Mapping) and config.get("thinkingLevel") in THINKING_LEVELS:
            level: ThinkingLevel = config["thinkingLevel"]
            return level
        pending = self._state.value(PENDING_THINKING, self._lane)
        return pending if pending in THINKING_LEVELS else None

    @property
    def active_tool_names(self) -> tuple[str, ...] | None:
        """The tool names last set with :meth:`set_active_tools` (``None``: never set)."""
        config = self._state.value(LANE_CONFIG, self._lane)
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
        return self._state.load(self._state.child_positions(entry_id))

    def build_context(
        self,
        leaf_id: str | None = None,
        *,
        projectors: Mapping[str, EntryProjector] | None = None,
    ) -> SessionContext:
        """The conversation as the model sees it, on the current branch (or the branch
        ending at ``leaf_id``), with the session's model and thinking level. Failed and
        aborted answers are left out, except in a store that keeps them as its other
        reader does (:class:`~pitrio.harness.PiSessionStore`: Pi's coding agent shows
        them on resume)."""
        keep = bool(getattr(self._store, "keeps_failed_answers", False))
        # Only the branch from its last compaction down: what the context shows.
        path = self._state.context_path(self.leaf_id if leaf_id is None else leaf_id)
        return SessionContext(
            messages=tuple(build_session_context(path, projectors=projectors, keep_failed=keep)),
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
        if self._closed or (self._root is not None and self._root._closed):
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
        committed = self._state.commit(writes, message, now_ms)
        self._pending.append(committed)

    @staticmethod
    def _value(namespace: str, key: str, value: JSONValue) -> Write:
        if value is None:
            return {"kind": "value", "op": "delete", "namespace": namespace, "key": key}
        return {"kind": "value", "op": "set", "namespace": namespace, "key": key, "value": value}

    def _append_entry(
        self,
        fields: Write,
        message: AgentMessage | None = None,
        *,
        entry_id: str | None = None,
        before: Sequence[Write] = (),
        beside: Sequence[Write] = (),
        after: Sequence[Write] = (),
    ) -> str:
        entry_id = new_id() if entry_id is None else entry_id
        entry = {"kind": "entry", "id": entry_id, "parentId": self.leaf_id, **fields}
        tip = self._value(BRANCH_TIP, self._lane, entry_id)
        self._commit([*before, entry, *beside, tip, *after], message)
        return entry_id

    def _commit_message(
        self,
        message: AgentMessage,
        *,
        entry_id: str | None,
        before: Sequence[Write] = (),
        beside: Sequence[Write] = (),
        after: Sequence[Write] = (),
        wire_form: Write | None = None,
    ) -> str:
        """Append ``message`` under ``entry_id`` with other writes in the same
        transaction (the harness's operation records), without writing it yet: the
        next write carries it (the harness writes before each effect a record guards).
        ``beside``: writes between the entry and the branch tip (Pi's place for the
        deletion of the entry's staged copy). ``wire_form``: the message's
        :func:`pitrio.wire.unstructure`, when the caller has it already."""
        form = wire.unstructure(message) if wire_form is None else wire_form
        fields: Write = {"type": "message", "message": form}
        return self._append_entry(
            fields, message, entry_id=entry_id, before=before, beside=beside, after=after
        )

    async def _append_message_with(
        self,
        message: AgentMessage,
        *,
        entry_id: str | None,
        before: Sequence[Write] = (),
        after: Sequence[Write] = (),
    ) -> str:
        """Append ``message`` (as :meth:`append_message`) under ``entry_id`` with other
        writes in the same transaction (the harness's operation records)."""
        entry_id = self._commit_message(message, entry_id=entry_id, before=before, after=after)
        await self._write()
        return entry_id

    async def _record(self, transactions: Sequence[Sequence[Write]]) -> None:
        """Commit value writes, one transaction each, and write them (the harness's
        operation records)."""
        for writes in transactions:
            self._commit(writes)
        await self._write()

    async def append_message(
        self, message: AgentMessage, *, terminate: bool = False, write: bool = True
    ) -> str:
        """Append a message after the current leaf; return the new entry's id.

        With ``write=False`` the change is made but not yet written: the next change
        that writes, :meth:`write` or :meth:`flush` writes it (a caller batching several
        appends into one worker-thread hop; the harness writes each change as it is made,
        so that its operation records stay exact).
        """
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
        if write:
            await self._write()
        else:
            await trio.lowlevel.checkpoint()
        return entry_id

    async def append_custom(self, custom_type: str, data: JSONValue = None) -> str:
        """Append application data (not shown to the model); return the entry's id."""
        fields: Write = {"type": "custom", "customType": custom_type}
        if data is not None:
            fields["data"] = copy.deepcopy(data)
        entry_id = self._append_entry(fields)
        await self._write()
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
        await self._write()
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
        await self._write()
        return entry_id

    def _config(self) -> dict[str, Any]:
        config = self._state.value(LANE_CONFIG, self._lane)
        return dict(config) if isinstance(config, Mapping) else {}

    def _write_config(self, config: dict[str, Any]) -> None:
        writes = [self._value(LANE_CONFIG, self._lane, config)]
        one_lane = getattr(self._store, "single_lane", False)
        if (BRANCH_TIP, self._lane) not in self._state.values and not one_lane:
            # Pi's lane has a tip from its start, null before the first entry (its restore
            # needs the value).
            tip: Write = {"kind": "value", "op": "set", "namespace": BRANCH_TIP}
            tip.update(key=self._lane, value=None)
            writes.insert(0, tip)
        if (LANE_STATE, self._lane) not in self._state.values:
            writes.append(self._value(LANE_STATE, self._lane, dict(IDLE_LANE)))
        if (PENDING_THINKING, self._lane) in self._state.values:
            writes.append(self._value(PENDING_THINKING, self._lane, None))
        self._commit(writes)

    async def append_model_change(self, provider: str, model_id: str) -> None:
        """Record that the session now uses this model (Pi stores it as the lane
        configuration, together with the thinking level)."""
        config = self._config()
        config["model"] = {"provider": provider, "modelId": model_id}
        config.setdefault("thinkingLevel", self.thinking_level or "off")
        config.setdefault("activeToolNames", [])
        self._write_config(config)
        await self._write()

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
            self._commit([self._value(PENDING_THINKING, self._lane, level)])
        await self._write()

    async def set_active_tools(self, names: Sequence[str]) -> None:
        """Record which tools are active (by name); needs a model set first, as in Pi."""
        config = self._config()
        if "model" not in config:
            msg = "set_active_tools() needs a model first: call append_model_change()"
            raise SessionError(msg)
        config["activeToolNames"] = list(names)
        self._write_config(config)
        await self._write()

    async def append_label(self, target_id: str, label: str | None) -> None:
        """Label an entry (``None`` or ``""`` removes its label)."""
        self.get_entry(target_id)
        self._commit([self._value(ENTRY_LABEL, target_id, label or None)])
        await self._write()

    async def set_name(self, name: str | None) -> None:
        """Name the session (``None`` removes the name)."""
        self._commit([self._value(SESSION_NAME, "", name)])
        await self._write()

    async def set_leaf(self, entry_id: str | None) -> None:
        """Move the current leaf to an earlier entry (``None``: before the first); the
        next append starts a new branch there. Nothing is deleted."""
        if entry_id is not None:
            self.get_entry(entry_id)
        # Pi's branch keeps its tip when it points before the first entry: a set to null,
        # never a delete (Pi's restore needs the value: "missing branch.tip").
        tip: Write = {"kind": "value", "op": "set", "namespace": BRANCH_TIP, "key": self._lane}
        tip["value"] = entry_id
        self._commit([tip])
        await self._write()

    async def fork(
        self, entry_id: str | None = None, *, position: Literal["at", "before"] = "at"
    ) -> Session:
        """A new session in the same store holding the current branch up to ``entry_id``
        (default: the current leaf), with ``position="before"`` up to its parent.

        The new session keeps the entries' ids, the labels of copied entries, the
        model, thinking level and name; its ``parent_session_id`` is this session.
        Pending changes of this session are flushed first.

        Raises:
            SessionNotFoundError: ``entry_id`` is not on the current branch.
            UsageError: ``position`` is neither ``"at"`` nor ``"before"``.
        """
        if position not in ("at", "before"):
            msg = f'fork() position must be "at" or "before"; got {position!r}'
            raise UsageError(msg)
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
                value(namespace, key, IDLE_LANE if namespace == LANE_STATE else v)
            elif namespace in (SESSION_NAME, PENDING_THINKING) or (
                namespace == ENTRY_LABEL and key in copied
            ):
                value(namespace, key, v)
        return await self._store._create_session(
            cwd=self.cwd, session_id=None, parent_session_id=self.id, initial=writes
        )

    @property
    def lane_name(self) -> str:
        """The lane this object reads and appends on (``"main"``, or a :meth:`lane`'s)."""
        return self._lane

    async def lane(self, name: str, *, create_at: str | None = None) -> Session:
        """The session as lane ``name`` sees it (Pi's named lanes): the same entries and
        storage, with that lane's branch tip, configuration and state. A lane the session
        lacks is created with its tip at ``create_at`` (an entry id; ``None``: before the
        first entry), its configuration this lane's. Closing the view only flushes.

        Raises:
            UsageError: an empty name, or a name with ``\\u0000``; or the store keeps only
                one lane (:class:`~pitrio.harness.PiSessionStore`).
            SessionNotFoundError: ``create_at`` names no entry.
        """
        self._check_open()
        if not name or "\x00" in name:
            reason = "must not be empty" if not name else "must not contain \\u0000"
            msg = f"Invalid lane {name!r}: lane name {reason}"
            raise UsageError(msg)
        if getattr(self._store, "single_lane", False):
            msg = (
                "named lanes need a JSONL, SQLite or in-memory store "
                "(a Pi coding-agent session file has one lane)"
            )
            raise UsageError(msg)
        root = self._root or self
        if name == root._lane:
            return root
        view = object.__new__(Session)
        for slot in Session.__slots__:
            if slot not in ("_closed", "_lane", "_root"):
                setattr(view, slot, getattr(root, slot))
        view._closed = False
        view._lane = name
        view._root = root
        values = self._state.values
        writes: list[Write] = []
        if (BRANCH_TIP, name) not in values:
            if create_at is not None:
                self.get_entry(create_at)
            tip: Write = {"kind": "value", "op": "set", "namespace": BRANCH_TIP, "key": name}
            tip["value"] = create_at
            writes.append(tip)
        if (LANE_CONFIG, name) not in values:
            config = self._state.value(LANE_CONFIG, self._lane)
            if isinstance(config, Mapping) and "model" in config:
                writes.append(self._value(LANE_CONFIG, name, dict(config)))
        if writes and (LANE_STATE, name) not in values:
            writes.append(self._value(LANE_STATE, name, dict(IDLE_LANE)))
        if writes:
            self._commit(writes)
            await self._write()
        else:
            await trio.lowlevel.checkpoint()
        return view

    # -- storage ----------------------------------------------------------------------

    @property
    def dirty(self) -> bool:
        """Whether changes wait to be written (appended with ``write=False``, a write
        failed, or an append was cancelled before it wrote); :meth:`flush` writes them."""
        return bool(self._pending)

    async def _write(self, *, sync: bool = False) -> None:
        """Write the pending transactions in order (one writer at a time); with ``sync``
        also make them durable by the store's policy. Checkpoints."""
        lock = self._flush_lock
        if lock.locked():
            await lock.acquire()
        else:
            # The usual case: the lock costs no checkpoint (the write makes one), but a
            # cancelled caller stops here, before the writer took the pending writes.
            await trio.lowlevel.checkpoint_if_cancelled()
            lock.acquire_nowait()
        try:
            if not self._pending:
                if sync:
                    await self._writer.sync()
                else:
                    await trio.lowlevel.checkpoint()
                return
            pending = list(self._pending)  # (the list a lane view shares)
            self._pending.clear()
            # A file store writes and syncs a save point in one worker-thread hop.
            both = getattr(self._writer, "write_and_sync", None) if sync else None
            sync_error: OSError | None = None
            try:
                if both is not None:
                    sync_error = await both(self, pending)
                else:
                    await self._writer.write(self, pending)
            except BaseException:
                self._pending[:0] = pending
                raise
            if both is not None:
                if sync_error is not None:
                    raise sync_error
                return
            if sync:
                await self._writer.sync()
        finally:
            lock.release()

    async def write(self) -> None:
        """Write the changes that wait to be written (appended with ``write=False``, or
        left by a failed or cancelled write), without a sync. Checkpoints."""
        self._check_open()
        await self._write()

    async def flush(self) -> None:
        """Write what is pending (after a failed or cancelled write), then sync the
        storage by the store's ``fsync`` policy: a save point. Checkpoints."""
        self._check_open()
        await self._write(sync=True)

    async def close(self) -> None:
        """Flush, then release the session for other writers. Closing twice is fine.
        (A lane's view, :meth:`lane`, is only flushed: its session stays open.)"""
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        if self._root is not None:
            try:
                if not self._root._closed:
                    await self.flush()
            finally:
                self._closed = True
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
