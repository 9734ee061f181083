"""Where sessions live: the store interface, the base every store derives from, and
the in-memory store.

Reproduces Pi's ``session/memory.js`` (``MemorySessionRepo``: create, open, list,
delete; sessions newest first) as :class:`InMemorySessionStore`, and the repository
interface the JSONL and SQLite stores share (:class:`SessionStore`, :class:`StoreBase`,
:class:`SessionInfo`).
"""

from __future__ import annotations

import abc
import copy
import os
import time
from collections.abc import Sequence
from typing import Literal, Protocol, final

import attrs
import trio

from pitrio import UsageError

from ._entries import Write, new_id, now_ms
from ._errors import SessionError, SessionExistsError, SessionLockedError, SessionNotFoundError
from ._session import Session
from ._session_state import replay_writes

__all__ = [
    "FsyncPolicy",
    "InMemorySessionStore",
    "ReadOnlyWriter",
    "SessionInfo",
    "SessionStore",
    "StoreBase",
    "fsync_policy",
    "most_recent",
    "resolve_cwd",
    "sort_infos",
]


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

        With ``read_only=True``: a snapshot of what was written, which refuses changes and
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


FsyncPolicy = Literal["never", "flush", "always"]
"""When a file store makes written changes survive a power loss (``fsync``): never (a
killed process loses nothing written, a power loss may), at each
:meth:`Session.flush` (the harness's save points: each ``turn_end``), or after every
write."""

_FSYNC_POLICIES = ("never", "flush", "always")


def fsync_policy(value: object) -> FsyncPolicy:
    """A store's ``fsync`` argument as a policy (``True``: ``"always"``, ``False``:
    ``"never"``)."""
    if value is True:
        return "always"
    if value is False:
        return "never"
    if value == "never" or value == "flush" or value == "always":
        return value
    msg = (
        f"fsync must be one of {', '.join(map(repr, _FSYNC_POLICIES))} (or a bool); "
        f"got {value!r} ({type(value).__name__})"
    )
    raise UsageError(msg)


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

    async def sync(self) -> None:
        await trio.lowlevel.checkpoint()

    async def close(self) -> None:
        await trio.lowlevel.checkpoint()


@final
class _MemoryWriter:
    __slots__ = ("_record", "_store")

    def __init__(self, store: InMemorySessionStore, record: _MemoryRecord) -> None:
        self._store = store
        self._record = record

    async def write(self, session: Session, transactions: Sequence[Sequence[Write]]) -> None:
        # No copy: a session never changes a write it committed, and open() copies.
        self._record.transactions.extend(transactions)
        self._record.modified_at = time.time()
        await trio.lowlevel.checkpoint()

    async def sync(self) -> None:
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

    The store keeps the writes a session committed (a session never changes them) and
    copies them when the session is opened again, so reopening shows exactly what was
    written.
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
        created = now_ms()
        sid = session_id or new_id(created)
        if sid in self._records:
            msg = f"a session with id {sid!r} exists already"
            raise SessionExistsError(msg)
        state = replay_writes([initial] if initial else [])
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
                state=replay_writes(copy.deepcopy(record.transactions)),
                writer=ReadOnlyWriter(),
                store=self,
                read_only=True,
            )
        if session_id in self._open:
            msg = f"session {session_id} is already open for writing; close it first"
            raise SessionLockedError(msg)
        state = replay_writes(copy.deepcopy(record.transactions))
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
