"""Sessions in a PostgreSQL database, shared by every process that can reach it.

The same tables as :class:`SqliteSessionStore` (a row per entry, the current value per
address, list elements and usage rows), in one schema of a PostgreSQL database, through
psycopg 3's synchronous driver: every query runs in a worker thread
(:func:`trio.to_thread.run_sync`; psycopg's asyncio driver cannot run on Trio). psycopg is
imported when the store first connects, so ``import pitrio.harness`` works without it
(``pip install 'pitrio[postgres]'``).

Each change is committed as one SQL transaction when it is made: once a write returns,
the server has it, and a killed client loses nothing it recorded. The ``fsync`` policy is
the server's ``synchronous_commit`` for the session's commits: ``"always"`` waits for each
commit to reach the server's disk, ``"never"`` and ``"flush"`` do not (a crash of the
*server* may lose its last fraction of a second of commits, never half of one), and
``"flush"`` then waits at each :meth:`Session.flush` until everything committed so far is
on the server's disk.

A session open for writing has its own connection, which holds a session-level advisory
lock on it (``pg_try_advisory_lock``) for as long as it is open: a second writer, in this
process or on another machine, gets :class:`SessionLockedError`. The lock is the
connection's, so a worker that dies (or loses the network) releases it with its
connection. Read-only opens take no lock and read one consistent snapshot. A closed
session's connection (its lock released) serves the next session opened for writing.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import os
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, final

import trio

from pitrio import UsageError

from . import _encoding, _worker
from ._entries import Write, new_id, now_ms
from ._errors import (
    SessionError,
    SessionExistsError,
    SessionFormatError,
    SessionLockedError,
    SessionNotFoundError,
)
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

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresSessionStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    cwd TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    modified_at DOUBLE PRECISION NOT NULL,
    parent_session_id TEXT,
    next_seq BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS sessions_by_cwd ON sessions (cwd, created_at);
CREATE TABLE IF NOT EXISTS entries (
    session_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    id TEXT NOT NULL,
    parent_id TEXT,
    type TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE UNIQUE INDEX IF NOT EXISTS entries_by_id ON entries (session_id, id);
CREATE INDEX IF NOT EXISTS entries_tree ON entries (session_id, seq, id, parent_id, type);
CREATE TABLE IF NOT EXISTS kv (
    session_id TEXT NOT NULL,
    namespace TEXT NOT NULL,
    key TEXT NOT NULL,
    seq BIGINT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (session_id, namespace, key)
);
CREATE TABLE IF NOT EXISTS list_items (
    session_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    namespace TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE INDEX IF NOT EXISTS list_items_by_key ON list_items (session_id, namespace, key);
CREATE TABLE IF NOT EXISTS usage (
    session_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
"""

_TABLES = ("entries", "kv", "list_items", "usage")
_INSERT_SESSION = (
    "INSERT INTO sessions (id, cwd, created_at, modified_at, parent_session_id, next_seq)"
    " VALUES (%s, %s, %s, %s, %s, 1)"
)
_INSERT_ENTRY = (
    "INSERT INTO entries (session_id, seq, id, parent_id, type, body)"
    " VALUES (%s, %s, %s, %s, %s, %s)"
)
_SET_VALUE = (
    "INSERT INTO kv (session_id, namespace, key, seq, value) VALUES (%s, %s, %s, %s, %s)"
    " ON CONFLICT (session_id, namespace, key)"
    " DO UPDATE SET seq = EXCLUDED.seq, value = EXCLUDED.value"
)
_DELETE_VALUE = "DELETE FROM kv WHERE session_id = %s AND namespace = %s AND key = %s"
_INSERT_USAGE = "INSERT INTO usage (session_id, seq, body) VALUES (%s, %s, %s)"
_DELETE_LIST = "DELETE FROM list_items WHERE session_id = %s AND namespace = %s AND key = %s"
_APPEND_LIST = (
    "INSERT INTO list_items (session_id, seq, namespace, key, value) VALUES (%s, %s, %s, %s, %s)"
)
_SELECT_SESSION = "SELECT cwd, created_at, parent_session_id, next_seq FROM sessions WHERE id = %s"
_IDLE_MAX = 8  # connections kept for the next session opened for writing
_SCHEMA_LOCK = 0x7069_7472_696F  # "pitrio": creating the tables, one process at a time


def _dumps(value: Any) -> str:
    # json.dumps(value, separators=(",", ":"), ensure_ascii=False), the harness's records
    # with their repeated parts encoded once
    return _encoding.dumps(value)


def _lock_key(schema: str, session_id: str) -> int:
    """The advisory lock key of a session: 64 bits of a hash of its schema and id."""
    digest = hashlib.blake2b(f"{schema}\0{session_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        msg = (
            "PostgresSessionStore needs psycopg 3, which is not installed: "
            "pip install 'pitrio[postgres]' (or 'psycopg[binary]')"
        )
        raise UsageError(msg) from None
    return psycopg


@final
class _PostgresWriter:
    __slots__ = ("_conn", "_lock", "_session_id", "_store", "_unsynced")

    def __init__(
        self, store: PostgresSessionStore, session_id: str, conn: psycopg.Connection[Any]
    ) -> None:
        self._store = store
        self._session_id = session_id
        self._conn: psycopg.Connection[Any] | None = conn
        self._lock = threading.Lock()
        self._unsynced = False

    async def write(self, session: Session, transactions: Sequence[Sequence[Write]]) -> None:
        await _worker.run_sync(self._write_sync, transactions)
        self._unsynced = True

    def _write_sync(self, transactions: Sequence[Sequence[Write]]) -> None:
        with self._lock:
            conn = self._conn
            if conn is None:  # pragma: no cover - the session refuses writes once closed
                msg = f"session {self._session_id} is closed"
                raise SessionError(msg)
            with self._store._errors(), conn.transaction():
                _insert(conn, self._session_id, transactions)

    async def sync(self) -> None:
        if self._store.fsync == "flush" and self._unsynced:
            self._unsynced = False
            await _worker.run_sync(self._store._sync_sync, self)
        else:
            await trio.lowlevel.checkpoint()

    def _commit_durably(self) -> None:
        """Commit an empty-but-real transaction with ``synchronous_commit`` on: it returns
        once the server's log is on disk up to it, so every earlier commit is too."""
        with self._lock:
            conn = self._conn
            if conn is None:  # pragma: no cover - sync is not called after close
                return
            with self._store._errors(), conn.transaction():
                conn.execute("SET LOCAL synchronous_commit = on")
                conn.execute("SELECT pg_current_xact_id()")

    async def close(self) -> None:
        await _worker.run_sync(self._close_sync)

    def _close_sync(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            self._store._release(conn, self._session_id)


def _insert(
    conn: psycopg.Connection[Any], sid: str, transactions: Sequence[Sequence[Write]]
) -> None:
    next_seq = None
    entries: list[tuple[Any, ...]] = []
    values: dict[tuple[str, str], Write] = {}  # only the last write to an address counts
    with conn.cursor() as cur:
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
                        cur.execute(_DELETE_LIST, (sid, write["namespace"], write["key"]))
                    case "list":
                        value = _dumps(write.get("value"))
                        cur.execute(
                            _APPEND_LIST, (sid, seq, write["namespace"], write["key"], value)
                        )
                    case _:
                        cur.execute(_INSERT_USAGE, (sid, seq, _dumps(write)))
        if entries:
            cur.executemany(_INSERT_ENTRY, entries)
        deletes = [(sid, ns, key) for (ns, key), w in values.items() if w["op"] == "delete"]
        if deletes:
            cur.executemany(_DELETE_VALUE, deletes)
        sets = [
            (sid, ns, key, w["seq"], _dumps(w.get("value")))
            for (ns, key), w in values.items()
            if w["op"] != "delete"
        ]
        if sets:
            cur.executemany(_SET_VALUE, sets)
        if next_seq is not None:
            cur.execute(
                "UPDATE sessions SET next_seq = %s, modified_at = %s WHERE id = %s",
                (next_seq, time.time(), sid),
            )


@final
class PostgresSessionStore(StoreBase):
    """Sessions in the PostgreSQL database ``conninfo`` names (a ``postgresql://`` URL or
    a libpq ``key=value`` string), in the tables of ``schema`` (created if missing).

    Call :meth:`aclose` (or use ``async with``) to close the store's connections when
    done. Each session open for writing has a connection of its own; closing the session
    releases its lock and keeps the connection (up to 8) for the next session opened.
    ``fsync`` is the policy of :class:`JsonlSessionStore` (see the module docstring for
    what it does here). Needs the ``postgres`` extra (``pip install 'pitrio[postgres]'``).
    """

    def __init__(
        self,
        conninfo: str,
        *,
        schema: str = "pitrio",
        fsync: bool | FsyncPolicy = "flush",
        connect_timeout: float = 10.0,
    ) -> None:
        given: object = conninfo
        if not isinstance(given, str) or not given:
            msg = (
                "conninfo must be a PostgreSQL connection string, e.g. "
                f"'postgresql://user@host:5432/db'; got {conninfo!r}"
            )
            raise UsageError(msg)
        if not schema.isidentifier() or schema != schema.lower():
            msg = (
                "schema must be a lower-case SQL identifier (letters, digits, underscores); "
                f"got {schema!r}"
            )
            raise UsageError(msg)
        self.conninfo = conninfo
        self.schema = schema
        self.fsync: FsyncPolicy = fsync_policy(fsync)
        self.connect_timeout = connect_timeout
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()
        self._schema_ready = False
        self._idle: list[psycopg.Connection[Any]] = []  # unlocked, for the next writer
        self._idle_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"PostgresSessionStore({self._where()!r}, schema={self.schema!r})"

    def _where(self) -> str:
        """The server and database, without credentials (for messages)."""
        try:
            from psycopg.conninfo import conninfo_to_dict
        except ImportError:  # pragma: no cover - the constructor works without psycopg
            return "<postgres>"
        try:
            params = conninfo_to_dict(self.conninfo)
        except Exception:
            return "<postgres>"
        host = params.get("host") or "localhost"
        port = params.get("port") or 5432
        return f"{host}:{port}/{params.get('dbname') or params.get('user') or ''}"

    async def __aenter__(self) -> PostgresSessionStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the store's connection (reopened on the next use)."""
        await trio.to_thread.run_sync(self.close_sync)

    def close_sync(self) -> None:
        """:meth:`aclose` for synchronous code (e.g. a test's teardown)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
        with self._idle_lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # -- connections --------------------------------------------------------------------

    def _errors(self) -> Any:
        """A context that turns psycopg's connection and server errors into
        :class:`SessionError` naming the server."""
        return _Translate(self)

    def _new_connection(self) -> psycopg.Connection[Any]:
        pg = _psycopg()
        with self._errors():
            conn: psycopg.Connection[Any] = pg.connect(
                self.conninfo,
                autocommit=True,
                connect_timeout=max(1, round(self.connect_timeout)),
                application_name="pitrio",
            )
        try:
            with self._errors():
                conn.execute(f"SET search_path TO {self.schema}")
                sync = "on" if self.fsync == "always" else "off"
                conn.execute(f"SET synchronous_commit TO {sync}")
                if not self._schema_ready:
                    # Only when the tables are missing: CREATE INDEX IF NOT EXISTS locks
                    # its table even when the index exists, and so deadlocks with other
                    # processes writing sessions meanwhile. The tables are made in one
                    # transaction, so the last of them standing means all of them do.
                    if not self._tables_exist(conn):
                        with conn.transaction():
                            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                            if not self._tables_exist(conn):  # another process made them
                                conn.execute(f"CREATE SCHEMA IF NOT EXISTS {self.schema}")
                                conn.execute(_SCHEMA)
                    self._schema_ready = True
        except BaseException:
            conn.close()
            raise
        return conn

    def _tables_exist(self, conn: psycopg.Connection[Any]) -> bool:
        row = conn.execute("SELECT to_regclass(%s)", (f"{self.schema}.usage",)).fetchone()
        return row is not None and row[0] is not None

    def _release(self, conn: psycopg.Connection[Any], sid: str) -> None:
        """Release a session's lock, and keep its connection for the next session opened
        (a new connection costs a server process). Unlocked explicitly: the server drops
        a closed connection's locks only once its backend process has ended, a moment
        after the close returns, and a reopen right away would find the session locked."""
        try:
            if conn.closed or conn.broken:
                return
            conn.execute("SELECT pg_advisory_unlock(%s)", (_lock_key(self.schema, sid),))
        except Exception:  # the connection is gone: so is the lock (with its backend)
            conn.close()
            return
        self._keep(conn)

    def _keep(self, conn: psycopg.Connection[Any]) -> None:
        """Keep a connection that holds no lock for the next writer (or close it)."""
        with self._idle_lock:
            if len(self._idle) < _IDLE_MAX:
                self._idle.append(conn)
                return
        conn.close()

    def _idle_connection(self) -> psycopg.Connection[Any] | None:
        from psycopg.pq import TransactionStatus

        while True:
            with self._idle_lock:
                if not self._idle:
                    return None
                conn = self._idle.pop()
            if not conn.broken and conn.info.transaction_status == TransactionStatus.IDLE:
                return conn
            conn.close()

    def _shared(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = self._new_connection()
        return self._conn

    def _lock_session(self, sid: str) -> psycopg.Connection[Any]:
        """A new connection holding the session's advisory lock (SessionLockedError if
        another connection holds it)."""
        conn = self._idle_connection() or self._new_connection()
        try:
            with self._errors():
                row = conn.execute(
                    "SELECT pg_try_advisory_lock(%s)", (_lock_key(self.schema, sid),)
                ).fetchone()
        except BaseException:
            conn.close()
            raise
        if not (row and row[0]):
            self._keep(conn)  # it holds nothing: the next writer may use it
            msg = (
                f"session {sid} is open for writing elsewhere (another store, process "
                "or machine holds its lock); close it there first, or open it read-only"
            )
            raise SessionLockedError(msg)
        return conn

    # -- SessionStore -------------------------------------------------------------------

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
        conn = await trio.to_thread.run_sync(
            self._create_sync, sid, cwd, created, parent_session_id, initial
        )
        return Session(
            session_id=sid,
            cwd=cwd,
            created_at=created,
            parent_session_id=parent_session_id,
            state=state,
            writer=_PostgresWriter(self, sid, conn),
            store=self,
        )

    def _create_sync(
        self,
        sid: str,
        cwd: str,
        created: int,
        parent: str | None,
        initial: Sequence[Write],
    ) -> psycopg.Connection[Any]:
        pg = _psycopg()
        conn = self._lock_session(sid)
        try:
            try:
                with self._errors(), conn.transaction():
                    conn.execute(_INSERT_SESSION, (sid, cwd, created, time.time(), parent))
                    _insert(conn, sid, [initial] if initial else [])
            except SessionError as exc:
                if isinstance(exc.__cause__, pg.errors.UniqueViolation):
                    msg = f"a session with id {sid!r} exists already in {self}"
                    raise SessionExistsError(msg) from None
                raise
        except BaseException:
            self._release(conn, sid)
            raise
        return conn

    def _sync_sync(self, writer: _PostgresWriter) -> None:
        writer._commit_durably()

    async def open(self, session_id: str, *, read_only: bool = False) -> Session:
        """See :meth:`SessionStore.open`."""
        return await trio.to_thread.run_sync(self._open_sync, session_id, read_only)

    def _open_sync(self, sid: str, read_only: bool = False) -> Session:
        if read_only:
            with self._lock:
                conn = self._shared()
                row, state = self._read(conn, sid)
            return Session(
                session_id=sid,
                cwd=row[0],
                created_at=row[1],
                parent_session_id=row[2],
                state=state,
                writer=ReadOnlyWriter(),
                store=self,
                read_only=True,
            )
        with self._lock:
            self._shared()  # the schema exists before the session's own connection
        conn = self._lock_session(sid)
        try:
            row, state = self._read(conn, sid)
        except BaseException:
            self._release(conn, sid)
            raise
        return Session(
            session_id=sid,
            cwd=row[0],
            created_at=row[1],
            parent_session_id=row[2],
            state=state,
            writer=_PostgresWriter(self, sid, conn),
            store=self,
        )

    def _read(self, conn: psycopg.Connection[Any], sid: str) -> tuple[Any, SessionState]:
        """The session's row and its state, read in one snapshot."""
        with self._errors(), conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            row = conn.execute(_SELECT_SESSION, (sid,)).fetchone()
            if row is None:
                msg = f"no session {sid!r} in {self}"
                raise SessionNotFoundError(msg)
            state = SessionState()
            state.index_entries(
                conn.execute(
                    "SELECT id, parent_id, seq, type FROM entries WHERE session_id = %s"
                    " ORDER BY seq",
                    (sid,),
                )
            )
            last = state.next_seq - 1
            for seq, namespace, key, value in conn.execute(
                "SELECT seq, namespace, key, value FROM kv WHERE session_id = %s", (sid,)
            ):
                state.values[namespace, key] = (json.loads(value), seq)
                last = max(last, seq)
            for seq, namespace, key, value in conn.execute(
                "SELECT seq, namespace, key, value FROM list_items WHERE session_id = %s"
                " ORDER BY seq",
                (sid,),
            ):
                state.lists.setdefault((namespace, key), []).append((seq, json.loads(value)))
                last = max(last, seq)
            for seq, body in conn.execute(
                "SELECT seq, body FROM usage WHERE session_id = %s ORDER BY seq", (sid,)
            ):
                state.usage.append(json.loads(body))
                last = max(last, seq)
        state.next_seq = max(last + 1, row[3])
        state.loader = lambda positions: self._entries_sync(sid, [state.seqs[p] for p in positions])
        return row, state

    def _entries_sync(self, sid: str, seqs: Sequence[int]) -> list[Write]:
        """The entry writes with these sequence numbers, in that order."""
        with self._lock:
            # A store closed since the open keeps no connection for this: a short one.
            closed = self._conn is None or self._conn.closed
            with self._errors():
                conn = self._new_connection() if closed else self._shared()
                try:
                    rows = conn.execute(
                        "SELECT seq, body FROM entries WHERE session_id = %s AND seq = ANY(%s)",
                        (sid, list(seqs)),
                    ).fetchall()
                finally:
                    if closed:
                        conn.close()
        bodies: dict[int, str] = dict(rows)
        missing = [seq for seq in seqs if seq not in bodies]
        if missing:
            msg = (
                f"session {sid} in {self}: the entry of sequence number {missing[0]} is gone "
                "(the session was deleted or rewritten since it was opened)"
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
            conn = self._shared()
            with self._errors():
                rows = (
                    conn.execute(query).fetchall()
                    if cwd is None
                    else conn.execute(query + " WHERE cwd = %s", (cwd,)).fetchall()
                )
        return sort_infos(
            [
                SessionInfo(
                    id=r[0],
                    cwd=r[1],
                    created_at=r[2] / 1000,
                    modified_at=r[3],
                    parent_session_id=r[4],
                )
                for r in rows
            ]
        )

    async def delete(self, session_id: str) -> None:
        """See :meth:`SessionStore.delete`."""
        await trio.to_thread.run_sync(self._delete_sync, session_id)

    def _delete_sync(self, sid: str) -> None:
        try:
            conn = self._lock_session(sid)
        except SessionLockedError:
            msg = f"session {sid} is open; close it before deleting it"
            raise SessionLockedError(msg) from None
        try:
            with self._errors(), conn.transaction():
                deleted = conn.execute("DELETE FROM sessions WHERE id = %s", (sid,)).rowcount
                for table in _TABLES:
                    conn.execute(f"DELETE FROM {table} WHERE session_id = %s", (sid,))
        finally:
            self._release(conn, sid)
        if not deleted:
            msg = f"no session {sid!r} in {self}"
            raise SessionNotFoundError(msg)


@final
class _Translate:
    """psycopg's errors as :class:`SessionError` (the psycopg error is its cause)."""

    __slots__ = ("_store",)

    def __init__(self, store: PostgresSessionStore) -> None:
        self._store = store

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: object, tb: object) -> None:
        if not isinstance(exc, Exception) or isinstance(exc, SessionError):
            return
        if isinstance(exc, _psycopg().Error):
            detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            msg = f"PostgreSQL at {self._store._where()}: {detail}"
            raise SessionError(msg) from exc
