"""Sessions in one SQLite database (the standard library's :mod:`sqlite3`, WAL mode).

The same sessions as the JSONL files, stored by what they hold rather than as a log:
a row per entry, the current value per address (later writes replace earlier ones), list
elements and usage rows. Each change is committed as one SQL transaction when it is
made, so a killed process loses nothing it recorded and never leaves half a change
behind. The ``fsync`` policy says when the write-ahead log reaches the disk (survives a
power loss): ``"flush"`` checkpoints it at each :meth:`Session.flush`, ``"always"``
syncs every commit (``PRAGMA synchronous=FULL``), ``"never"`` leaves it to SQLite's own
checkpoints.

Every query runs in a worker thread (:func:`trio.to_thread.run_sync`) on the store's one
connection. An open session holds an exclusive ``flock`` on a small file in
``<database>.locks/``, so a second store or process opening it gets
:class:`SessionLockedError`. As with the JSONL files, what the store creates is private:
the database (and SQLite's ``-wal`` and ``-shm`` files, which take its mode) ``0600``,
its directories and ``<database>.locks/`` ``0700``.
"""

from __future__ import annotations

import builtins
import json
import os
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Sequence
from typing import Any, final

import trio

from . import _encoding, _worker
from ._entries import Write, new_id, now_ms
from ._errors import (
    SessionExistsError,
    SessionFormatError,
    SessionLockedError,
    SessionNotFoundError,
)
from ._jsonl import PRIVATE_FILE, make_private_dirs, open_locked
from ._session import Session
from ._session_state import SessionState
from ._store import (
    FsyncPolicy,
    ReadOnlyWriter,
    SessionInfo,
    StoreBase,
    fsync_policy,
    resolve_cwd,
    sort_infos,
)

__all__ = ["SqliteSessionStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    cwd TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    modified_at REAL NOT NULL,
    parent_session_id TEXT,
    next_seq INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS sessions_by_cwd ON sessions (cwd, created_at);
CREATE TABLE IF NOT EXISTS entries (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    id TEXT NOT NULL,
    parent_id TEXT,
    type TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
CREATE UNIQUE INDEX IF NOT EXISTS entries_by_id ON entries (session_id, id);
CREATE INDEX IF NOT EXISTS entries_tree ON entries (session_id, seq, id, parent_id, type);
CREATE TABLE IF NOT EXISTS kv (
    session_id TEXT NOT NULL,
    namespace TEXT NOT NULL,
    key TEXT NOT NULL,
    seq INTEGER NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (session_id, namespace, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS list_items (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    namespace TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS usage (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
"""

_TABLES = ("entries", "kv", "list_items", "usage")
_INSERT_SESSION = (
    "INSERT INTO sessions (id, cwd, created_at, modified_at, parent_session_id, next_seq)"
    " VALUES (?, ?, ?, ?, ?, 1)"
)
_INSERT_ENTRY = (
    "INSERT INTO entries (session_id, seq, id, parent_id, type, body) VALUES (?, ?, ?, ?, ?, ?)"
)
_SET_VALUE = (
    "INSERT OR REPLACE INTO kv (session_id, namespace, key, seq, value) VALUES (?, ?, ?, ?, ?)"
)
_DELETE_VALUE = "DELETE FROM kv WHERE session_id = ? AND namespace = ? AND key = ?"
_INSERT_USAGE = "INSERT INTO usage (session_id, seq, body) VALUES (?, ?, ?)"
_DELETE_LIST = "DELETE FROM list_items WHERE session_id = ? AND namespace = ? AND key = ?"
_APPEND_LIST = (
    "INSERT INTO list_items (session_id, seq, namespace, key, value) VALUES (?, ?, ?, ?, ?)"
)
_SELECT_SESSION = "SELECT cwd, created_at, parent_session_id, next_seq FROM sessions WHERE id = ?"


def _dumps(value: Any) -> str:
    # json.dumps(value, separators=(",", ":"), ensure_ascii=False), the harness's records
    # with their repeated parts encoded once
    return _encoding.dumps(value)


@final
class _SqliteWriter:
    __slots__ = ("_lock_fd", "_lock_path", "_session_id", "_store", "_unsynced")

    def __init__(
        self, store: SqliteSessionStore, session_id: str, lock_fd: int, lock_path: str
    ) -> None:
        self._store = store
        self._session_id = session_id
        self._lock_fd: int | None = lock_fd
        self._lock_path = lock_path
        self._unsynced = True

    async def write(self, session: Session, transactions: Sequence[Sequence[Write]]) -> None:
        await _worker.run_sync(self._store._write_sync, self._session_id, transactions)
        self._unsynced = True

    async def sync(self) -> None:
        if self._store.fsync == "flush" and self._unsynced:
            self._unsynced = False
            await _worker.run_sync(self._store._checkpoint_sync)
        else:
            await trio.lowlevel.checkpoint()

    async def close(self) -> None:
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            await _worker.run_sync(_release, self._lock_path, fd)


def _release(path: str, fd: int) -> None:
    try:
        os.unlink(path)  # still ours: a waiter re-checks the path after locking
    finally:
        os.close(fd)


@final
class SqliteSessionStore(StoreBase):
    """Sessions in the SQLite database at ``path`` (created if missing).

    Call :meth:`aclose` (or use ``async with``) to close the database connection when
    done; sessions opened from the store must be closed first. ``fsync`` is the policy
    of :class:`JsonlSessionStore` (see the module docstring for what it does here).
    """

    def __init__(
        self, path: str | os.PathLike[str], *, fsync: bool | FsyncPolicy = "flush"
    ) -> None:
        self.path = os.path.abspath(os.fspath(path))
        self.fsync: FsyncPolicy = fsync_policy(fsync)
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SqliteSessionStore({self.path!r})"

    async def __aenter__(self) -> SqliteSessionStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the database connection (reopened on the next use)."""
        await trio.to_thread.run_sync(self._close_sync)

    def _close_sync(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            make_private_dirs(os.path.dirname(self.path))
            # Created here first, private: SQLite would create it (and its -wal and -shm
            # files, which copy its mode) with the umask's default.
            os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, PRIVATE_FILE))
            conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={'FULL' if self.fsync == 'always' else 'NORMAL'}")
            conn.execute("PRAGMA busy_timeout=5000")
            conn.executescript(_SCHEMA)
            self._conn = conn
        return self._conn

    def _lock_session(self, session_id: str) -> tuple[int, str]:
        directory = f"{self.path}.locks"
        make_private_dirs(directory)
        lock_path = os.path.join(directory, urllib.parse.quote(session_id, safe="") + ".lock")
        fd = open_locked(lock_path, os.O_RDWR | os.O_CREAT, f"session {session_id}")
        return fd, lock_path

    # -- SessionStore -----------------------------------------------------------------

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
        state = SessionState()
        if initial:
            state.apply(initial)
        fd, lock_path = await trio.to_thread.run_sync(
            self._create_sync, sid, cwd, created, parent_session_id, initial
        )
        return Session(
            session_id=sid,
            cwd=cwd,
            created_at=created,
            parent_session_id=parent_session_id,
            state=state,
            writer=_SqliteWriter(self, sid, fd, lock_path),
            store=self,
            path=self.path,
        )

    def _create_sync(
        self,
        sid: str,
        cwd: str,
        created: int,
        parent: str | None,
        initial: Sequence[Write],
    ) -> tuple[int, str]:
        fd, lock_path = self._lock_session(sid)
        try:
            with self._lock:
                conn = self._connect()
                conn.execute("BEGIN IMMEDIATE")
                try:
                    conn.execute(
                        _INSERT_SESSION,
                        (sid, cwd, created, time.time(), parent),
                    )
                    self._insert(conn, sid, [initial] if initial else [])
                except sqlite3.IntegrityError:
                    conn.execute("ROLLBACK")
                    msg = f"a session with id {sid!r} exists already in {self.path}"
                    raise SessionExistsError(msg) from None
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
        except BaseException:
            _release(lock_path, fd)
            raise
        return fd, lock_path

    @staticmethod
    def _insert(
        conn: sqlite3.Connection, sid: str, transactions: Sequence[Sequence[Write]]
    ) -> None:
        next_seq = None
        entries: list[tuple[Any, ...]] = []
        values: dict[tuple[str, str], Write] = {}  # only the last write to an address counts
        for transaction in transactions:
            for write in transaction:
                seq = write["seq"]
                next_seq = seq + 1
                match write["kind"]:
                    case "entry":
                        body = _dumps(write)
                        entries.append(
                            (sid, seq, write["id"], write["parentId"], write["type"], body)
                        )
                    case "value":
                        values[write["namespace"], write["key"]] = write
                    case "list" if write["op"] == "delete":
                        conn.execute(_DELETE_LIST, (sid, write["namespace"], write["key"]))
                    case "list":
                        value = _dumps(write.get("value"))
                        conn.execute(
                            _APPEND_LIST, (sid, seq, write["namespace"], write["key"], value)
                        )
                    case _:
                        conn.execute(_INSERT_USAGE, (sid, seq, _dumps(write)))
        conn.executemany(_INSERT_ENTRY, entries)
        conn.executemany(
            _DELETE_VALUE,
            [(sid, ns, key) for (ns, key), w in values.items() if w["op"] == "delete"],
        )
        conn.executemany(
            _SET_VALUE,
            [
                (sid, ns, key, w["seq"], _dumps(w.get("value")))
                for (ns, key), w in values.items()
                if w["op"] != "delete"
            ],
        )
        if next_seq is not None:
            conn.execute(
                "UPDATE sessions SET next_seq = ?, modified_at = ? WHERE id = ?",
                (next_seq, time.time(), sid),
            )

    def _write_sync(self, sid: str, transactions: Sequence[Sequence[Write]]) -> None:
        with self._lock:
            conn = self._connect()
            conn.execute("BEGIN IMMEDIATE")
            try:
                self._insert(conn, sid, transactions)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def _checkpoint_sync(self) -> None:
        """Sync the write-ahead log (a checkpoint syncs it before copying it back)."""
        with self._lock:
            self._connect().execute("PRAGMA wal_checkpoint(PASSIVE)")

    async def open(self, session_id: str, *, read_only: bool = False) -> Session:
        """See :meth:`SessionStore.open`."""
        return await trio.to_thread.run_sync(self._open_sync, session_id, read_only)

    def _open_sync(self, sid: str, read_only: bool = False) -> Session:
        with self._lock:
            row = (
                self._connect()
                .execute(
                    _SELECT_SESSION,
                    (sid,),
                )
                .fetchone()
            )
        if row is None:
            msg = f"no session {sid!r} in {self.path}"
            raise SessionNotFoundError(msg)
        if read_only:
            return Session(
                session_id=sid,
                cwd=row[0],
                created_at=row[1],
                parent_session_id=row[2],
                state=self._load(sid),
                writer=ReadOnlyWriter(),
                store=self,
                path=self.path,
                read_only=True,
            )
        fd, lock_path = self._lock_session(sid)
        try:
            state = self._load(sid)
            state.next_seq = max(state.next_seq, row[3])
        except BaseException:
            _release(lock_path, fd)
            raise
        return Session(
            session_id=sid,
            cwd=row[0],
            created_at=row[1],
            parent_session_id=row[2],
            state=state,
            writer=_SqliteWriter(self, sid, fd, lock_path),
            store=self,
            path=self.path,
        )

    def _load(self, sid: str) -> SessionState:
        """The session's state: every entry indexed (id, parent, seq, type), none read;
        the values, list elements and usage rows as stored."""
        state = SessionState()
        with self._lock:
            conn = self._connect()
            conn.execute("BEGIN")
            try:
                state.index_entries(
                    conn.execute(
                        "SELECT id, parent_id, seq, type FROM entries WHERE session_id = ?"
                        " ORDER BY seq",
                        (sid,),
                    )
                )
                last = state.next_seq - 1
                for seq, namespace, key, value in conn.execute(
                    "SELECT seq, namespace, key, value FROM kv WHERE session_id = ?", (sid,)
                ):
                    state.values[namespace, key] = (json.loads(value), seq)
                    last = max(last, seq)
                for seq, namespace, key, value in conn.execute(
                    "SELECT seq, namespace, key, value FROM list_items WHERE session_id = ?"
                    " ORDER BY seq",
                    (sid,),
                ):
                    state.lists.setdefault((namespace, key), []).append((seq, json.loads(value)))
                    last = max(last, seq)
                for seq, body in conn.execute(
                    "SELECT seq, body FROM usage WHERE session_id = ? ORDER BY seq", (sid,)
                ):
                    state.usage.append(json.loads(body))
                    last = max(last, seq)
            finally:
                conn.execute("COMMIT")
        state.next_seq = last + 1
        state.loader = lambda positions: self._entries_sync(sid, [state.seqs[p] for p in positions])
        return state

    def _entries_sync(self, sid: str, seqs: Sequence[int]) -> list[Write]:
        """The entry writes with these sequence numbers, in that order."""
        bodies: dict[int, str] = {}
        with self._lock:
            closed = self._conn is None  # (the store closed since the open: not kept open)
            conn = self._connect()
            try:
                for start in range(0, len(seqs), 500):
                    part = seqs[start : start + 500]
                    query = (
                        "SELECT seq, body FROM entries WHERE session_id = ? AND seq IN "
                        f"({','.join('?' * len(part))})"
                    )
                    bodies.update(conn.execute(query, (sid, *part)))
            finally:
                if closed:
                    conn.close()
                    self._conn = None
        missing = [seq for seq in seqs if seq not in bodies]
        if missing:
            msg = (
                f"session {sid} in {self.path}: the entry of sequence number {missing[0]} is "
                "gone (the session was deleted or rewritten since it was opened)"
            )
            raise SessionFormatError(msg)
        return [json.loads(bodies[seq]) for seq in seqs]

    async def list(
        self, *, cwd: str | os.PathLike[str] | None = None
    ) -> builtins.list[SessionInfo]:
        """See :meth:`SessionStore.list`."""
        want = None if cwd is None else resolve_cwd(cwd)
        return await trio.to_thread.run_sync(self._list_sync, want)

    def _list_sync(self, cwd: str | None) -> builtins.list[SessionInfo]:
        query = "SELECT id, cwd, created_at, modified_at, parent_session_id FROM sessions"
        with self._lock:
            conn = self._connect()
            rows = (
                conn.execute(query).fetchall()
                if cwd is None
                else conn.execute(query + " WHERE cwd = ?", (cwd,)).fetchall()
            )
        return sort_infos(
            [
                SessionInfo(
                    id=r[0],
                    cwd=r[1],
                    created_at=r[2] / 1000,
                    modified_at=r[3],
                    parent_session_id=r[4],
                    path=self.path,
                )
                for r in rows
            ]
        )

    async def delete(self, session_id: str) -> None:
        """See :meth:`SessionStore.delete`."""
        await trio.to_thread.run_sync(self._delete_sync, session_id)

    def _delete_sync(self, sid: str) -> None:
        try:
            fd, lock_path = self._lock_session(sid)
        except SessionLockedError:
            msg = f"session {sid} is open; close it before deleting it"
            raise SessionLockedError(msg) from None
        try:
            with self._lock:
                conn = self._connect()
                conn.execute("BEGIN IMMEDIATE")
                try:
                    deleted = conn.execute("DELETE FROM sessions WHERE id = ?", (sid,)).rowcount
                    for table in _TABLES:
                        conn.execute(f"DELETE FROM {table} WHERE session_id = ?", (sid,))
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
        finally:
            _release(lock_path, fd)
        if not deleted:
            msg = f"no session {sid!r} in {self.path}"
            raise SessionNotFoundError(msg)
