"""Sessions in the files of Pi's coding agent (``pi`` 0.85.0, ``core/session-manager.js``,
format v3), read and appended in place, so that ``pi`` and pitrio share them both ways.

A file is a header line ``{"type":"session","version":3,"id":…,"timestamp":ISO,"cwd":…}``,
then one entry per line, each with ``id``, ``parentId`` and an ISO ``timestamp``. Files
live where ``pi`` keeps them: ``~/.pi/agent/sessions/--<cwd>--/<time>_<id>.jsonl``
(``$PI_CODING_AGENT_DIR`` moves ``~/.pi/agent``), so ``pi -c`` and ``/resume`` list the
sessions of both tools.

pitrio's session model is Pi's harness (v4): entries plus values (branch tips, the
lane's configuration and state, labels, the name). The writer turns each committed
transaction into the lines ``pi`` itself would write, and never rewrites a file:

- a message entry is a ``message`` line (a ``custom`` role one a ``custom_message``
  line), a compaction a ``compaction`` line (with ``firstKeptEntryId``, which ``pi``
  reads, and the ``retainedTail`` pitrio reads), a branch summary a ``branch_summary``
  line, a custom entry a ``custom`` line;
- a change of the lane's model, thinking level or tools is a ``model_change``,
  ``thinking_level_change`` or ``active_tools_change`` line, the name a
  ``session_info`` line, a label a ``label`` line;
- what v3 has no line for (the lane's run state, pitrio's own values, usage rows) goes
  into a ``custom`` line of type ``pitrio.state`` that ``pi`` carries along without
  acting on it, and moving the leaf without appending (``set_leaf``) writes one too,
  parented at the new leaf, because ``pi`` takes the last line as the leaf.

These "transparent" lines (changes, labels, names, ``pitrio.state``) sit in the tree as
``pi`` puts them, on top of the current leaf; the next entry is parented at the last of
them, so ``pi`` finds each change on the path, and pitrio reads through them to the
entry below. Reading is Pi's harness migration of v3 files (``legacy_v3_writes``) with
``pitrio.state`` lines treated as transparent, then their writes applied in file order.

Unlike ``pi``, the header is written when the session is created, and every change is
appended as it is made (``pi`` waits for the first assistant message): a run killed
before its answer still leaves its prompt in the file.
"""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any, Final, final

import trio

from ._entries import Write, new_id, now_ms
from ._errors import SessionExistsError, SessionFormatError, SessionNotFoundError
from ._jsonl import (
    _Appender,
    _dumps,
    _encoded,
    _FileStore,
    _names_session,
    _read_all,
    _write_all,
    legacy_v3_header,
    legacy_v3_writes,
    make_private_dirs,
    open_locked,
    parse_header,
)
from ._session import Session
from ._session_state import (
    BRANCH_TIP,
    ENTRY_LABEL,
    LANE_CONFIG,
    MAIN_BRANCH,
    PENDING_THINKING,
    SESSION_NAME,
    SessionState,
)
from ._store import (
    FsyncPolicy,
    ReadOnlyWriter,
    SessionInfo,
    fsync_policy,
)

__all__ = ["PI_STATE_TYPE", "PiSessionStore", "default_pi_sessions_root"]

VERSION: Final = 3
PI_STATE_TYPE: Final = "pitrio.state"
"""The ``customType`` of the lines holding what v3 has no line for."""
AGENT_DIR_ENV: Final = "PI_CODING_AGENT_DIR"
SESSION_DIR_ENV: Final = "PI_CODING_AGENT_SESSION_DIR"


def default_pi_sessions_root(env: Mapping[str, str] | None = None) -> str:
    """Where ``pi`` keeps its sessions: ``$PI_CODING_AGENT_DIR/sessions``, default
    ``~/.pi/agent/sessions`` (Pi's ``getAgentDir()``)."""
    environ = os.environ if env is None else env
    agent_dir = environ.get(AGENT_DIR_ENV) or os.path.join("~", ".pi", "agent")
    return os.path.abspath(os.path.join(os.path.expanduser(agent_dir), "sessions"))


def iso(ms: int) -> str:
    """JavaScript's ``new Date(ms).toISOString()``."""
    when = datetime.datetime.fromtimestamp(ms // 1000, datetime.UTC)
    return f"{when:%Y-%m-%dT%H:%M:%S}.{ms % 1000:03d}Z"


def _file_name(created_ms: int, session_id: str) -> str:
    """Pi's file name: the ISO creation time with ``:`` and ``.`` as ``-``, then the id."""
    return f"{iso(created_ms).replace(':', '-').replace('.', '-')}_{session_id}.jsonl"


def _is_state(record: Mapping[str, Any]) -> bool:
    return record.get("type") == "custom" and record.get("customType") == PI_STATE_TYPE


# --- writing ------------------------------------------------------------------------


@final
class _Translator:
    """Turns pitrio's committed writes into the v3 lines ``pi`` writes.

    ``heads`` maps an entry id to the last transparent line above it, so that the next
    line on that entry's branch is parented there (``pi`` reads the changes from the
    path); ``config`` is the lane configuration the file states last.
    """

    __slots__ = ("config", "heads", "tip")

    def __init__(self, tip: str | None, config: Any) -> None:
        self.tip = tip
        self.config = config if isinstance(config, dict) else None
        self.heads: dict[str | None, str] = {}

    def _head(self, entry_id: str | None) -> str | None:
        return self.heads.get(entry_id, entry_id)

    def lines(self, session: Session, transaction: Sequence[Write]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        transparent: list[dict[str, Any]] = []
        config: list[dict[str, Any]] = []
        extra: list[Write] = []
        moved = False
        appended: str | None = None
        first_parent: str | None = None  # the parent of the transaction's first entry
        for write in transaction:
            kind = write.get("kind")
            if kind == "entry":
                if not out:
                    first_parent = write.get("parentId")
                out.append(self._entry(session, write))
                appended = write["id"]
                continue
            if kind != "value":
                extra.append(write)
                continue
            namespace, key = write.get("namespace"), write.get("key")
            value = write.get("value") if write.get("op") == "set" else None
            stamp = iso(now_ms())
            if namespace == BRANCH_TIP and key == MAIN_BRANCH:
                self.tip = value
                # Moved unless this transaction appended the entry it points at (a move
                # to before the first entry points at None, with nothing appended).
                moved = appended is None or value != appended
            elif namespace == LANE_CONFIG and key == MAIN_BRANCH:
                config += self._config_lines(value, stamp)
            elif namespace == SESSION_NAME:
                name = " ".join(str(value or "").splitlines()).strip()
                transparent.append({"type": "session_info", "timestamp": stamp, "name": name})
            elif namespace == ENTRY_LABEL:
                line = {"type": "label", "timestamp": stamp, "targetId": key}
                if value:
                    line["label"] = value
                transparent.append(line)
            elif namespace == PENDING_THINKING and value is not None:
                transparent.append(
                    {"type": "thinking_level_change", "timestamp": stamp, "thinkingLevel": value}
                )
                extra.append(write)
            else:
                extra.append(write)
        if config and out:
            # pi writes a model or level change when it is made, before the prompt that
            # runs with it: the lines go between the first entry (out holds only entries
            # so far) and its parent
            parent = out[0]["parentId"]
            above = []
            for line in config:
                line["id"] = new_id()
                line["parentId"] = parent
                parent = line["id"]
                above.append(_ordered(line))
            out[0]["parentId"] = parent
            self.heads[first_parent] = parent
            out[:0] = above
        else:
            transparent = config + transparent
        if moved and self.config is not None:
            # A new leaf: state the lane's settings on its path, where pi looks for them.
            transparent += self._config_lines(self.config, iso(now_ms()), force=True)
        if extra or (moved and not transparent):
            transparent.append(_state_line(extra, iso(now_ms())))
        for line in transparent:
            line["id"] = new_id()
            line["parentId"] = self._head(self.tip)
            self.heads[self.tip] = line["id"]
            out.append(_ordered(line))
        return out

    def _entry(self, session: Session, write: Write) -> dict[str, Any]:
        kind = write.get("type")
        line: dict[str, Any] = {
            "type": kind,
            "id": write["id"],
            "parentId": self._head(write.get("parentId")),
            "timestamp": iso(int(write.get("timestamp") or now_ms())),
        }
        if kind == "message":
            message = write["message"]
            if isinstance(message, dict) and message.get("role") == "custom":
                # pi gives a custom message its entry's time
                line["type"] = "custom_message"
                line["timestamp"] = iso(int(message.get("timestamp") or now_ms()))
                for field in ("customType", "content", "display", "details"):
                    if message.get(field) is not None:
                        line[field] = message[field]
                line.setdefault("display", True)
            else:
                line["message"] = message
        elif kind == "compaction":
            line["summary"] = write.get("summary", "")
            line["firstKeptEntryId"] = _first_kept(session, write)
            line["tokensBefore"] = write.get("tokensBefore", 0)
            for field in ("details", "usage", "fromHook"):
                if write.get(field) is not None:
                    line[field] = write[field]
            line["retainedTail"] = write.get("retainedTail") or []
        elif kind == "branch_summary":
            line["fromId"] = write.get("fromId") or "root"
            line["summary"] = write.get("summary", "")
            for field in ("details", "usage", "fromHook"):
                if write.get(field) is not None:
                    line[field] = write[field]
        else:
            line["customType"] = write.get("customType")
            if write.get("data") is not None:
                line["data"] = write["data"]
        return line

    def _config_lines(
        self, config: Any, stamp: str, *, force: bool = False
    ) -> list[dict[str, Any]]:
        old = {} if force or self.config is None else self.config
        new = config if isinstance(config, dict) else {}
        lines: list[dict[str, Any]] = []
        model = new.get("model")
        if isinstance(model, dict) and model != old.get("model"):
            lines.append(
                {
                    "type": "model_change",
                    "timestamp": stamp,
                    "provider": model.get("provider"),
                    "modelId": model.get("modelId"),
                }
            )
        level = new.get("thinkingLevel")
        if level is not None and level != old.get("thinkingLevel"):
            lines.append(
                {"type": "thinking_level_change", "timestamp": stamp, "thinkingLevel": level}
            )
        tools = new.get("activeToolNames")
        if isinstance(tools, list) and tools != (old.get("activeToolNames") or []):
            # pi 0.85.0 has no line for the active tools: pitrio's own state line holds them
            lines.append(_state_line([], stamp, activeToolNames=tools))
        self.config = dict(new) if new else None
        return lines


def _state_line(writes: Sequence[Write], stamp: str, **data: Any) -> dict[str, Any]:
    return {
        "type": "custom",
        "customType": PI_STATE_TYPE,
        "data": {"writes": list(writes), **data},
        "timestamp": stamp,
    }


_KEY_ORDER = ("type", "id", "parentId", "timestamp")


def _ordered(line: dict[str, Any]) -> dict[str, Any]:
    """Pi's key order: type, id, parentId, timestamp, then the entry's own fields."""
    return {k: line[k] for k in _KEY_ORDER if k in line} | {
        k: v for k, v in line.items() if k not in _KEY_ORDER
    }


def _first_kept(session: Session, write: Write) -> str:
    """The entry ``pi`` starts the kept messages at: where the retained tail begins on
    the compaction's branch (the compaction's own id, kept by nothing, when the tail is
    empty or is not found there)."""
    tail = write.get("retainedTail") or []
    own = str(write["id"])
    if not tail:
        return own
    state = session._state
    current = write.get("parentId")
    count = 0
    while current is not None and current in state.by_id:
        entry = state.by_id[current]
        if entry.type == "message":
            count += 1
            if count == len(tail):
                return entry.id
        elif entry.type in ("compaction", "branch_summary"):
            break
        current = entry.parent_id
    return own


@final
class _PiWriter(_Appender):
    """Appends the v3 lines of each transaction to one locked session file."""

    __slots__ = ("_translator",)

    def __init__(
        self,
        path: str,
        fd: int,
        header: dict[str, Any],
        translator: _Translator,
        *,
        fsync: FsyncPolicy,
        unsynced: bool = False,
    ) -> None:
        super().__init__(path, fd, header, fsync=fsync, unsynced=unsynced)
        self._translator = translator

    def _data(self, session: Session, transactions: Sequence[Sequence[Write]]) -> bytes:
        lines = [line for t in transactions for line in self._translator.lines(session, t)]
        return b"".join(_encoded(line) for line in lines)

    async def write(self, session: Session, transactions: Sequence[Sequence[Write]]) -> None:
        await self._append(self._data(session, transactions))

    async def write_and_sync(
        self, session: Session, transactions: Sequence[Sequence[Write]]
    ) -> OSError | None:
        """:meth:`write`, then the sync of :meth:`sync`, in one worker-thread hop (a save
        point's). A failed sync is returned: what it was to sync is written."""
        return await self._append_and_sync(self._data(session, transactions))


# --- reading ------------------------------------------------------------------------


def _load(path: str, data: bytes) -> tuple[dict[str, Any], SessionState, int]:
    """A v3 file's header (as v4), state, and the size of its complete lines.

    Lines that do not parse are skipped, as ``pi`` skips them; a torn last line (a crash
    mid-write) is left out of the size so that the writer truncates it.
    """
    end = data.rfind(b"\n") + 1
    lines = data[:end].split(b"\n")[:-1] if end else []
    if not lines or not lines[0].strip():
        msg = f"{path}: the file has no complete header line; it is not a session file"
        raise SessionFormatError(msg)
    fmt, header = parse_header(lines[0], path)
    if fmt != "v3":
        msg = (
            f"{path} is a Pi harness (v4) session; open it with JsonlSessionStore, "
            "which reads that format"
        )
        raise SessionFormatError(msg)
    records: list[dict[str, Any]] = []
    for line in lines[1:]:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # pi skips malformed lines too
        if isinstance(record, dict) and isinstance(record.get("id"), str):
            records.append(record)
    writes, _usage = legacy_v3_writes(records, path, transparent=_is_state)
    state = SessionState()
    tools: Any = None
    try:
        state.apply(writes)
        for record in records:
            if not _is_state(record):
                continue
            data_: dict[str, Any] = record["data"] if isinstance(record.get("data"), dict) else {}
            if isinstance(data_.get("activeToolNames"), list):
                tools = data_["activeToolNames"]
            for w in data_.get("writes", []):
                if isinstance(w, dict):
                    state.apply([{**w, "seq": state.next_seq}])
        config = state.values.get((LANE_CONFIG, MAIN_BRANCH), (None, 0))[0]
        if tools is not None and isinstance(config, dict):
            config = {**config, "activeToolNames": tools}
            state.apply([_set(LANE_CONFIG, MAIN_BRANCH, config, state.next_seq)])
    except SessionFormatError as exc:
        msg = f"{path}: {exc}"
        raise SessionFormatError(msg) from None
    v4 = legacy_v3_header(header)
    v4["pi"] = header
    return v4, state, end


def _set(namespace: str, key: str, value: Any, seq: int) -> Write:
    return {"kind": "value", "op": "set", "seq": seq, "namespace": namespace, "key": key,
            "value": value}  # fmt: skip


@final
class PiSessionStore(_FileStore):
    """Sessions in the files of Pi's coding agent (v3), one directory per working
    directory under ``root`` (default: :func:`default_pi_sessions_root`).

    ``pi`` opens every file this store writes (``pi --session FILE``, ``pi -c``,
    ``/resume``), and this store appends to files ``pi`` wrote without rewriting them.
    ``fsync`` is :class:`JsonlSessionStore`'s policy (each change is appended as it is
    made; the file is synced at each flush by default). A session's context keeps failed
    and aborted answers, as ``pi`` shows them on resume (the providers leave them out of
    requests).
    """

    keeps_failed_answers: Final = True
    single_lane: Final = True
    """Pi's coding-agent file has one branch tip, so no named lanes (``Session.lane``)."""

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        fsync: bool | FsyncPolicy = "flush",
    ) -> None:
        self.root = (
            os.path.abspath(os.fspath(root)) if root is not None else default_pi_sessions_root()
        )
        self.fsync: FsyncPolicy = fsync_policy(fsync)

    def __repr__(self) -> str:
        return f"PiSessionStore({self.root!r})"

    async def _create_session(
        self,
        *,
        cwd: str,
        session_id: str | None,
        parent_session_id: str | None,
        initial: Sequence[Write],
    ) -> Session:
        path = os.path.join(self.directory(cwd), "")
        return await self.create_at(
            None, cwd=cwd, session_id=session_id, parent_session_id=parent_session_id,
            initial=initial, directory=path,
        )  # fmt: skip

    async def create_at(
        self,
        path: str | None,
        *,
        cwd: str,
        session_id: str | None = None,
        parent_session_id: str | None = None,
        initial: Sequence[Write] = (),
        directory: str | None = None,
    ) -> Session:
        """A new session in the file ``path`` (``pi --session FILE`` for a new file), or
        under ``directory`` with Pi's file name when ``path`` is ``None``."""
        created = now_ms()
        sid = session_id or new_id(created)
        if path is None:
            path = os.path.join(directory or self.directory(cwd), _file_name(created, sid))
        pi_header: dict[str, Any] = {
            "type": "session",
            "version": VERSION,
            "id": sid,
            "timestamp": iso(created),
            "cwd": cwd,
        }
        if parent_session_id is not None:
            parent = await trio.to_thread.run_sync(self._find_or_none, parent_session_id)
            if parent is not None:
                pi_header["parentSession"] = parent
        state = SessionState()
        translator = _Translator(None, None)
        session = Session(
            session_id=sid,
            cwd=cwd,
            created_at=created,
            parent_session_id=parent_session_id,
            state=state,
            writer=ReadOnlyWriter(),  # replaced below, once the file exists
            store=self,
            path=path,
        )
        if initial:
            state.apply(initial)
        lines = translator.lines(session, initial) if initial else []
        data = "".join(_dumps(x) + "\n" for x in [pi_header, *lines]).encode()
        fd = await trio.to_thread.run_sync(self._create_sync, path, sid, data)
        header = legacy_v3_header(pi_header)
        session._writer = _PiWriter(path, fd, header, translator, fsync=self.fsync, unsynced=True)
        return session

    def _create_sync(self, path: str, sid: str, data: bytes) -> int:
        directory = os.path.dirname(path)
        make_private_dirs(directory)
        if any(_names_session(name, sid) for name in os.listdir(directory)):
            msg = f"a session with id {sid!r} exists already in {directory}"
            raise SessionExistsError(msg)
        tmp = f"{path}.{os.getpid()}.tmp"
        fd = open_locked(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND, f"session {sid}")
        try:
            _write_all(fd, data)
            if self.fsync == "always":
                os.fsync(fd)
            try:
                os.link(tmp, path)
            except FileExistsError:
                msg = f"a session file exists already at {path}"
                raise SessionExistsError(msg) from None
            finally:
                os.unlink(tmp)
        except BaseException:
            os.close(fd)
            raise
        return fd

    async def open(self, session_id: str | os.PathLike[str], *, read_only: bool = False) -> Session:
        """Open a session by id, or by the path of its file (any file ``pi`` wrote). See
        :meth:`SessionStore.open`."""
        return await trio.to_thread.run_sync(self._open_sync, session_id, read_only)

    def _find_or_none(self, session_id: str) -> str | None:
        try:
            return self._find(session_id)
        except SessionNotFoundError:
            return None

    def _open_sync(self, session_id: str | os.PathLike[str], read_only: bool) -> Session:
        text = os.fspath(session_id)
        if text.endswith(".jsonl") and os.path.exists(text):
            path = os.path.abspath(text)
        else:
            path = self._find(text)
        if read_only:
            fd = os.open(path, os.O_RDONLY)
        else:
            fd = open_locked(path, os.O_RDWR | os.O_APPEND, f"session {os.path.basename(path)}")
        try:
            data = _read_all(fd, os.fstat(fd).st_size)
            header, state, complete = _load(path, data)
            recovered = None
            if complete < len(data):
                recovered = (
                    f"{path}: dropped a torn last line ({len(data) - complete} bytes after "
                    f"byte {complete}) left by an interrupted write"
                )
                if not read_only:
                    os.ftruncate(fd, complete)
        except BaseException:
            os.close(fd)
            raise
        common: dict[str, Any] = {
            "session_id": header["id"],
            "cwd": header["cwd"],
            "created_at": header["createdAt"],
            "parent_session_id": header.get("parentSessionId"),
            "state": state,
            "store": self,
            "recovered": recovered,
            "path": path,
        }
        if read_only:
            os.close(fd)
            return Session(writer=ReadOnlyWriter(), read_only=True, **common)
        tip = state.values.get((BRANCH_TIP, MAIN_BRANCH), (None, 0))[0]
        config = state.values.get((LANE_CONFIG, MAIN_BRANCH), (None, 0))[0]
        translator = _Translator(tip, config)
        last = _last_line_id(data[:complete])
        if last is not None and last != tip:
            translator.heads[tip] = last  # pi's leaf: the last line, above our tip
        writer = _PiWriter(path, fd, header, translator, fsync=self.fsync)
        return Session(writer=writer, **common)

    def _info(self, path: str) -> SessionInfo | None:
        return _info(path)


def _info(path: str) -> SessionInfo | None:
    try:
        with open(path, "rb") as f:
            first = f.readline()
            mtime = os.fstat(f.fileno()).st_mtime
        fmt, header = parse_header(first, path)
    except (OSError, SessionFormatError):
        return None
    if fmt != "v3":
        return None
    v4 = legacy_v3_header(header)
    return SessionInfo(
        id=v4["id"],
        cwd=v4["cwd"],
        created_at=v4["createdAt"] / 1000,
        modified_at=mtime,
        parent_session_id=v4.get("parentSessionId"),
        path=path,
    )


def _last_line_id(data: bytes) -> str | None:
    """The id of the file's last entry line (``pi``'s leaf)."""
    for line in reversed(data.split(b"\n")):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("type") != "session":
            value = record.get("id")
            return value if isinstance(value, str) else None
        return None
    return None
