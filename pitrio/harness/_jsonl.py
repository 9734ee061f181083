"""Sessions as JSONL files, in Pi's format (pi-agent-core 0.85.0, ``session/jsonl/``).

A file is one header line, then one line per transaction: a committed write, or a JSON
array of them when a transaction has several (appending a message writes the entry and
moves the branch tip)::

    {"v":4,"kind":"header","id":"0190…","storageVersion":1,"createdAt":1735689600000,"cwd":"/src/app"}
    [{"kind":"entry","id":"0190…","parentId":null,"type":"message","message":{…},"seq":1,…},{"kind":"value",…}]

Files live in one directory per working directory, named as Pi names them
(``--src-app--`` for ``/src/app``), under :func:`default_sessions_root`. Pi's legacy v3
files (first line ``{"type":"session","version":3,…}``) are read too; the first flush
of new writes rewrites such a file in the v4 format, atomically, as Pi does.

Crash safety: each change is appended as one line when it is made (Pi's
``appendFile`` per commit), and the store's ``fsync`` policy says when the file is
synced to the disk. A line is complete once its newline is written. When a file ends in a
torn line (a crash mid-write), opening the session drops that line, truncates the file
back to its last complete line, warns with :class:`SessionRecoveredWarning` and records
what was dropped in :attr:`Session.recovered`. Every complete line is kept. Any other
damage (a complete line that is not a valid write) raises :class:`SessionFormatError`
naming the file and line (at the open, or for the inside of an entry's message when the
entry is read).

Resuming a long session: opening reads each line but structures no entry; it keeps where
each entry's line is, its parent and its type, and the context of the active branch reads
back only the lines from its last compaction on (other entries are read when first used). A
line in the layout Pi's and pitrio's writers give an entry, alone or first in a
transaction, is indexed from the entry's first and last members and the writes after it
(``_scan_lines``); any other line is parsed whole. The rest of an entry's line is parsed
when the entry is read, and checked against the index, so a complete line damaged inside
its message is refused then rather than at the open.

A session of :data:`INDEX_MIN_ENTRIES` entries or more also gets a private sidecar index
(``<file>.idx``, ``0600``) when it is closed: those places and the stored values, checked
on the next open against the file's inode, size, modification time and the digests of its
first and last bytes. A valid index spares the scan of the lines it
covers; lines appended since (by Pi, or by a process killed before it closed the file)
are scanned on top of it; a stale or damaged one is ignored and the file scanned whole.
The ``.jsonl`` file stays exactly Pi's.

Concurrency: an open session holds an exclusive ``flock`` on its file; a second store
or process opening it gets :class:`SessionLockedError` instead of interleaving writes.
All file I/O runs in worker threads (:func:`trio.to_thread.run_sync`; a session's
writes through Trio's thread cache directly, ``_worker.run_sync``, at half the cost).

Privacy: a session holds the conversation, tool output and file contents, so the files
the store creates are ``0600`` and the directories it creates ``0700`` (the umask may
only narrow them). A directory that exists already is left as its owner set it.
"""

from __future__ import annotations

import abc
import builtins
import contextlib
import datetime
import errno
import hashlib
import json
import os
import re
import sys
import urllib.parse
import warnings
from array import array
from collections.abc import Callable, Mapping, Sequence
from typing import Any, final

import attrs
import trio

from . import _encoding, _worker
from ._entries import Write, new_id, now_ms
from ._errors import (
    SessionError,
    SessionExistsError,
    SessionFormatError,
    SessionLockedError,
    SessionNotFoundError,
)
from ._messages import timestamp_ms
from ._session import Session
from ._session_state import (
    BRANCH_TIP,
    ENTRY_LABEL,
    ENTRY_TYPES,
    LANE_CONFIG,
    LANE_STATE,
    MAIN_BRANCH,
    SESSION_NAME,
    THINKING_LEVELS,
    SessionState,
)
from ._store import (
    FsyncPolicy,
    ReadOnlyWriter,
    SessionInfo,
    StoreBase,
    fsync_policy,
    resolve_cwd,
    sort_infos,
)

__all__ = [
    "JsonlSessionStore",
    "SessionRecoveredWarning",
    "default_sessions_root",
    "session_directory_name",
]

FORMAT_VERSION = 4
STORAGE_VERSION = 1
SESSIONS_ROOT_ENV = "PITRIO_SESSIONS_DIR"


class SessionRecoveredWarning(UserWarning):
    """Opening a session dropped a torn last line left by a crash mid-write."""


def default_sessions_root() -> str:
    """Where :class:`JsonlSessionStore` keeps sessions when given no ``root``.

    ``$PITRIO_SESSIONS_DIR`` if set; otherwise ``pitrio/sessions`` under the user's data
    directory: ``$XDG_DATA_HOME`` (default ``~/.local/share``) on Linux and other Unix
    systems, ``~/Library/Application Support`` on macOS, ``%LOCALAPPDATA%`` on Windows.
    """
    override = os.environ.get(SESSIONS_ROOT_ENV)
    if override:
        return os.path.abspath(os.path.expanduser(override))
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or os.path.expanduser(r"~\AppData\Local")
    elif sys.platform == "darwin":
        base = os.path.expanduser("~/Library/Application Support")
    else:
        base = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    return os.path.join(base, "pitrio", "sessions")


def session_directory_name(cwd: str) -> str:
    """Pi's directory name for a working directory: ``/src/app`` -> ``--src-app--``."""
    stripped = cwd[1:] if cwd[:1] in ("/", "\\") else cwd
    for ch in "/\\:":
        stripped = stripped.replace(ch, "-")
    return f"--{stripped}--"


def session_file_name(created_at_ms: int, session_id: str) -> str:
    """Pi's file name: the creation time (ISO, ``:`` and ``.`` as ``-``), then the id."""
    when = datetime.datetime.fromtimestamp(created_at_ms // 1000, datetime.UTC)
    stamp = f"{when:%Y-%m-%dT%H-%M-%S}-{created_at_ms % 1000:03d}Z"
    return f"{stamp}_{_quote(session_id)}.jsonl"


def _quote(session_id: str) -> str:
    return urllib.parse.quote(session_id, safe="!~*'()")


def _names_session(file_name: str, session_id: str) -> bool:
    """Whether a file name is Pi's name for this session (the time has no ``_``)."""
    return file_name.partition("_")[2] == f"{_quote(session_id)}.jsonl"


def _dumps(value: Any) -> str:
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode().decode()
    except UnicodeEncodeError:  # a lone surrogate: JavaScript escapes it, so do we
        return json.dumps(value, separators=(",", ":"))


_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_ENCODE_ASCII = json.JSONEncoder(separators=(",", ":")).encode


def _encoded(value: Any) -> bytes:
    """``value`` as one JSON line, UTF-8 (one encoding pass; a lone surrogate, which
    UTF-8 cannot hold, is escaped as JavaScript escapes it)."""
    text = _ENCODE(value)
    try:
        return text.encode() + b"\n"
    except UnicodeEncodeError:
        return _ENCODE_ASCII(value).encode() + b"\n"


def _line(transaction: Sequence[Write]) -> bytes:
    return _encoding.line(transaction)  # the records' repeated parts encoded once


# --- locking ------------------------------------------------------------------------

if sys.platform == "win32":  # pragma: no cover - Windows
    import msvcrt

    def _try_lock(fd: int) -> bool:
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True

else:
    import fcntl

    def _try_lock(fd: int) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                return False
            raise
        return True


PRIVATE_FILE = 0o600
"""The mode of a file a store creates (only its owner reads or writes it)."""

PRIVATE_DIRECTORY = 0o700
"""The mode of a directory a store creates."""


def make_private_dirs(directory: str) -> None:
    """Create ``directory`` and its missing parents, each ``0700``; an existing one is
    left as it is (:func:`os.makedirs` gives parents the umask's default mode)."""
    missing: list[str] = []
    path = os.path.abspath(directory)
    while not os.path.isdir(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    for path in reversed(missing):
        try:
            os.mkdir(path, PRIVATE_DIRECTORY)
        except FileExistsError:
            if not os.path.isdir(path):
                raise


def open_locked(path: str, flags: int, what: str) -> int:
    """Open ``path`` and take its exclusive lock, or raise :class:`SessionLockedError`.
    A file it creates is ``0600``.

    After locking, the path must still name the locked file (another writer may have
    replaced it by rename in between); if not, try again.
    """
    while True:
        fd = os.open(path, flags, PRIVATE_FILE)
        try:
            if not _try_lock(fd):
                msg = (
                    f"{what} is open for writing elsewhere (another store or process holds "
                    f"{path}); close it there first"
                )
                raise SessionLockedError(msg)
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(path))
            except FileNotFoundError:
                same = False
            if same:
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


# --- reading ------------------------------------------------------------------------


@attrs.define
class _Loaded:
    header: dict[str, Any]
    state: SessionState
    legacy_writes: list[Write] | None
    legacy_usage: dict[str, Any] | None
    torn: bytes
    complete_size: int
    source: _Source | None = None


def _parse_json(line: bytes, path: str, number: int) -> Any:
    try:
        return json.loads(line)
    except ValueError as exc:
        msg = f"{path}, line {number}: not valid JSON ({exc})"
        raise SessionFormatError(msg) from None


def _is_v4_header(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and value.get("kind") == "header"
        and value.get("v") == FORMAT_VERSION
        and isinstance(value.get("id"), str)
        and isinstance(value.get("cwd"), str)
        and isinstance(value.get("createdAt"), int)
        and isinstance(value.get("storageVersion"), int)
    )


def _is_v3_header(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and value.get("type") == "session"
        and value.get("version") == 3
        and isinstance(value.get("id"), str)
        and isinstance(value.get("cwd"), str)
        and isinstance(value.get("timestamp"), str)
        and _v3_time(value) != 0
    )


def parse_header(line: bytes, path: str) -> tuple[str, dict[str, Any]]:
    """``("v4" | "v3", header)`` for a session file's first line."""
    value = _parse_json(line, path, 1)
    if _is_v4_header(value):
        return "v4", value
    if _is_v3_header(value):
        return "v3", value
    msg = (
        f"{path}: the first line is not a session header (expected Pi's "
        f'{{"v":4,"kind":"header",...}} or a legacy {{"type":"session","version":3,...}})'
    )
    raise SessionFormatError(msg)


def _no_header(path: str) -> SessionFormatError:
    msg = f"{path}: the file has no complete header line; it is not a session file"
    return SessionFormatError(msg)


def _check_storage_version(header: Mapping[str, Any], path: str) -> None:
    if header["storageVersion"] != STORAGE_VERSION:
        msg = (
            f"{path}: session {header['id']} uses storage version "
            f"{header['storageVersion']}; pitrio reads version {STORAGE_VERSION}"
        )
        raise SessionFormatError(msg)


def _legacy_loaded(
    path: str, header: dict[str, Any], lines: list[bytes], torn: bytes, end: int
) -> _Loaded:
    writes, usage = legacy_v3_writes(
        [_parse_json(line, path, i + 2) for i, line in enumerate(lines) if line.strip()],
        path,
    )
    state = SessionState()
    try:
        state.apply(writes)
    except SessionFormatError as exc:
        msg = f"{path}: {exc}"
        raise SessionFormatError(msg) from None
    state.next_seq += 1  # reserved for the usage row Pi writes when it upgrades the file
    v4 = legacy_v3_header(header)
    v4["nextSeq"] = state.next_seq
    return _Loaded(v4, state, writes, usage, torn, end)


def _finish(header: Mapping[str, Any], state: SessionState) -> None:
    next_seq = header.get("nextSeq")
    if isinstance(next_seq, int):
        state.next_seq = max(state.next_seq, next_seq)


def _scan_line(
    state: SessionState, source: _Source, line: bytes, at: int, path: str, number: int
) -> None:
    """Apply one transaction line at byte ``at`` to ``state``, indexing its entries."""
    value = _parse_json(line, path, number)
    transaction = value if isinstance(value, list) else [value]
    if not all(isinstance(w, dict) for w in transaction):
        msg = f"{path}, line {number}: a transaction must hold JSON objects"
        raise SessionFormatError(msg)
    try:
        state.apply(transaction, lazy=True)
    except SessionFormatError as exc:
        msg = f"{path}, line {number}: {exc}"
        raise SessionFormatError(msg) from None
    if transaction is value:
        for slot, write in enumerate(transaction):
            if write["kind"] == "entry":
                source.add(at, len(line), slot)
    elif value["kind"] == "entry":
        source.add(at, len(line), -1)


# The fast scan: what the index needs of a line, read from the layout Pi's and pitrio's
# writers give an entry (``kind``, ``id``, ``parentId``, ``type`` first, ``seq`` and
# ``timestamp`` last, no whitespace), alone or with the branch tip it moves. Each pattern
# matches tokens from a point outside every string (a ``"`` after ``{``, ``,`` or ``[`` opens
# one in valid JSON), so what it reads of a valid line is what ``json.loads`` reads.
_STRING = rb'"([^"\\\x00-\x1f]*)"'  # a string with no escape (json.loads reads those)
_ENTRY_HEAD = re.compile(
    rb'(\[?)\{"kind":"entry","id":'
    + _STRING
    + rb',"parentId":(?:null|'
    + _STRING
    + rb'),"type":'
    + _STRING
    + rb","
)
_SEQ_KEY = b',"seq":'
_ENTRY_END = rb',"seq":(0|[1-9][0-9]*),"timestamp":-?(?:0|[1-9][0-9]*)\}'
_ENTRY_ALONE = re.compile(_ENTRY_END + rb"\Z")
_ENTRY_THEN = re.compile(_ENTRY_END + rb",")
_ENTRY_AND_TIP = re.compile(
    _ENTRY_END
    + rb',\{"kind":"value","op":"set","seq":(0|[1-9][0-9]*),"namespace":'
    + _STRING
    + rb',"key":'
    + _STRING
    + rb',"value":(?:(null)|'
    + _STRING
    + rb")\}\]\Z"
)
_TYPE_CODES = {name.encode(): code for code, name in enumerate(ENTRY_TYPES)}


def _scan_lines(
    state: SessionState,
    source: _Source,
    lines: Sequence[bytes],
    at: int,
    path: str,
    number: int,
    raw_values: bool = True,
) -> tuple[int, int]:
    """Apply the transaction lines beginning at byte ``at`` (after line ``number``) to
    ``state``, indexing their entries; return where the next line begins and its number.

    A line in the writers' layout (an entry, or an entry and its branch tip) is indexed
    from its first and last bytes, and checked as :meth:`SessionState.apply` checks it;
    any other line, or one those checks refuse, goes through :func:`_scan_line`
    (``json.loads``, then :meth:`SessionState.apply`, whose error names the line). The rest
    of an entry's line is parsed when the entry is read (:meth:`_Source.load` checks it
    against the index)."""
    ids, position, parents, seqs, types = (
        state.ids,
        state.position,
        state.parents,
        state.seqs,
        state.types,
    )
    offsets, lengths, slots = source.offsets, source.lengths, source.slots
    codes = _TYPE_CODES
    head_match, alone_match, tip_match = (
        _ENTRY_HEAD.match,
        _ENTRY_ALONE.match,
        _ENTRY_AND_TIP.match,
    )
    addresses: dict[tuple[bytes, bytes], tuple[str, str]] = {}  # (the tips': one or two)
    next_seq = state.next_seq
    for line in lines:
        number += 1
        size = len(line)
        head = head_match(line)
        indexed = False
        # One pass; each ``break`` leaves the line to the full parse (so do bytes that are
        # not UTF-8: json.loads decides those).
        while head is not None:
            bracket, raw_id, raw_parent, raw_type = head.groups()
            start = head.end() - 1
            end = line.rfind(_SEQ_KEY)
            if bracket:  # an array: the entry, then its branch tip
                if line[-3:-2] != b'"' and line[-6:] != b"null}]":
                    break  # not a tip's string or null last: more writes (read below)
                end = line.rfind(_SEQ_KEY, start, end)
                tip = tip_match(line, end) if end >= 0 else None
                # Between the entry's first members and its last no other write can
                # hide: each has a "seq" member, and no key "seq" is spelled there.
                if (
                    tip is None
                    or line.find(b'q"', start, end) >= 0
                    or line.find(b"\\u0071", start, end) >= 0
                ):
                    break
                tail = tip
            else:
                alone = alone_match(line, end) if end >= start else None
                if alone is None:
                    break
                tip, tail = None, alone
            try:
                entry_id = raw_id.decode()
                parent = -1 if raw_parent is None else position.get(raw_parent.decode(), -2)
            except UnicodeDecodeError:
                break
            type_code = codes.get(raw_type)
            seq = last_seq = int(tail[1])
            if seq < next_seq or entry_id in position or parent == -2 or type_code is None:
                break
            if tip is not None:
                last_seq = int(tip[2])
                if last_seq <= seq:
                    break
                raw_address = (tip[3], tip[4])
                raw_value = tip[6]
                try:
                    address = addresses.get(raw_address)
                    if address is None:
                        address = addresses[raw_address] = (
                            raw_address[0].decode(),
                            raw_address[1].decode(),
                        )
                    value = (
                        None
                        if raw_value is None
                        else entry_id
                        if raw_value == raw_id
                        else raw_value.decode()
                    )
                except UnicodeDecodeError:
                    break
                state.values[address] = (value, last_seq)
            position[entry_id] = len(ids)
            ids.append(entry_id)
            parents.append(parent)
            seqs.append(seq)
            types.append(type_code)
            next_seq = last_seq + 1
            offsets.append(at)
            lengths.append(size)
            slots.append(-1 if tip is None else 0)
            indexed = True
            break
        if not indexed:
            state.next_seq = next_seq
            if head is None and raw_values and line[:9] in _VALUE_STARTS:
                if not _values_line(state, line, addresses):
                    _scan_line(state, source, line, at, path, number)
            elif (
                head is None
                or not head[1]
                or not (
                    (raw_values and _entry_then_values(state, source, line, at, head, addresses))
                    or _entry_then_writes(state, source, line, at, head)
                )
            ):
                _scan_line(state, source, line, at, path, number)
            next_seq = state.next_seq
        at += size + 1
    state.next_seq = next_seq
    return at, number


def _entry_then_writes(
    state: SessionState, source: _Source, line: bytes, at: int, head: re.Match[bytes]
) -> bool:
    """Index an array line whose first write is an entry in the writers' layout, followed by
    any writes (Pi's harness commits an entry with its tip, operation and lane records): the
    entry from its first and last members, the writes after it parsed, the transaction
    checked by :meth:`SessionState.apply`. ``False`` (nothing changed): the line is not one."""
    start = head.end() - 1
    end = line.find(_SEQ_KEY, start)  # the entry's own "seq" if none is spelled before it
    if end < 0 or line.find(b'q"', start, end) >= 0 or line.find(b"\\u0071", start, end) >= 0:
        return False
    last = _ENTRY_THEN.match(line, end)
    if last is None:
        return False
    try:
        # Parses only where the entry's "}" closes a write of the array itself (a "}," inside
        # its message would leave brackets unclosed), so this is the entry's end.
        rest = json.loads(b"[" + line[last.end() :])
        entry: Write = {
            "kind": "entry",
            "id": head[2].decode(),
            "parentId": None if head[3] is None else head[3].decode(),
            "type": head[4].decode(),
            "seq": int(last[1]),
            "timestamp": 0,  # (there; what it is is read with the entry)
        }
    except ValueError:
        return False
    if not all(isinstance(write, dict) for write in rest):
        return False
    try:
        state.apply([entry, *rest], lazy=True)
    except SessionFormatError:
        return False  # the full parse names what is wrong
    source.add(at, len(line), 0)
    for slot, write in enumerate(rest, start=1):
        if write["kind"] == "entry":
            source.add(at, len(line), slot)
    return True


# The writes after an entry in the layout of Pi's ``commitWrite``: each value or list write
# (``kind``, ``op``, ``seq``, ``namespace``, ``key``, then ``value`` last, or none for a
# delete) after the ``}`` that closes the write before it; ``split`` gives each write's
# members, then the text between it and the next (its value and ``}``).
_WRITES = re.compile(
    rb',\{"kind":"(?<=\},\{"kind":")(value|list)","op":"(set|append|delete)",'
    rb'"seq":(0|[1-9][0-9]*),'
    rb'"namespace":' + _STRING + rb',"key":' + _STRING + rb'(,"value":|\})'
)
_ENTRY_CLOSE = re.compile(_ENTRY_END)
_VALUE_STARTS = (b'{"kind":"', b'[{"kind":')


@final
class _RawValue(bytes):
    """A value's JSON as the fast scan found it in its line, parsed when the scan is done
    if no later write replaced it (:func:`_parse_raw_values`)."""

    __slots__ = ()


def _entry_then_values(
    state: SessionState,
    source: _Source,
    line: bytes,
    at: int,
    head: re.Match[bytes],
    addresses: dict[tuple[bytes, bytes], tuple[str, str]],
) -> bool:
    """Index an array line of an entry in the writers' layout followed by value and list
    writes in Pi's layout with the sequence numbers after the entry's (what Pi's harness
    commits with an entry: its branch tip, operation and lane records), reading no value
    that a later write may replace: each value's JSON is kept as it stands in the line, and
    parsed when the scan is done (:func:`_parse_raw_values`). ``False`` (nothing changed):
    the line is not one, or not one this can read exactly.

    Exact for a valid line: every write of the array has a ``"seq"`` member, and no key
    ``seq`` is spelled outside the writes' own (no ``q"`` or ``\\u0071`` but theirs), so
    the writes found are all the array's writes, unless one found is nested in the value
    before it; a write found after ``},`` is in an array, so that value would hold an
    unclosed ``[``: a value before another write that holds a ``[`` is parsed there (a
    value cut short does not parse)."""
    start = head.end() - 1
    end = line.find(_SEQ_KEY, start)
    last = _ENTRY_CLOSE.match(line, end) if end >= 0 else None
    if last is None or line[-2:] != b"}]" or line.find(b"\\u0071", start) >= 0:
        return False
    parts = _WRITES.split(line[last.end() - 1 : -1])  # from the entry's "}" to the last write's
    count = len(parts) // 7
    # One "q" before '"' in the entry's "seq" and in each write's: no other key "seq".
    if count == 0 or parts[0] != b"}" or line.count(b'q"', start) != count + 1:
        return False
    position = state.position
    seq = int(last[1])
    type_code = _TYPE_CODES.get(head[4])
    try:
        entry_id = head[2].decode()
        parent = -1 if head[3] is None else position.get(head[3].decode(), -2)
    except UnicodeDecodeError:
        return False
    if seq < state.next_seq or entry_id in position or parent == -2 or type_code is None:
        return False
    found = _read_writes(parts, seq + 1, addresses)
    if found is None:
        return False
    position[entry_id] = len(state.ids)
    state.ids.append(entry_id)
    state.parents.append(parent)
    state.seqs.append(seq)
    state.types.append(type_code)
    source.add(at, len(line), 0)
    _apply_writes(state, found, seq + 1)
    return True


def _values_line(
    state: SessionState, line: bytes, addresses: dict[tuple[bytes, bytes], tuple[str, str]]
) -> bool:
    """Apply a line of value and list writes in Pi's layout (alone, or an array of them
    with consecutive sequence numbers: an operation's state, a frame of a pending answer),
    as :func:`_entry_then_values` reads the writes after an entry. ``False`` (nothing
    changed): the line is not one, or not one this can read exactly."""
    if line[:1] == b"[":
        if line[-2:] != b"}]":
            return False
        body = line[1:-1]
    elif line[-1:] == b"}":
        body = line
    else:
        return False
    if b"\\u0071" in body:
        return False
    parts = _WRITES.split(b"}," + body)
    count = len(parts) // 7
    if count == 0 or parts[0] != b"}" or body.count(b'q"') != count:
        return False
    first = int(parts[3])
    if first < state.next_seq:
        return False
    found = _read_writes(parts, first, addresses)
    if found is None:
        return False
    _apply_writes(state, found, first)
    return True


_Found = list[tuple[tuple[str, str], bytes, bytes, Any]]  # address, kind, op, value


def _read_writes(
    parts: list[bytes], seq: int, addresses: dict[tuple[bytes, bytes], tuple[str, str]]
) -> _Found | None:
    """The writes :data:`_WRITES` split ``parts`` into, numbered from ``seq`` on; ``None``
    if one is out of that order or is not read exactly (see :func:`_entry_then_values`)."""
    found: _Found = []
    expected = seq - 1
    for n in range(1, len(parts), 7):
        kind, op, raw_seq, namespace, key, tail, text = parts[n : n + 7]
        expected += 1
        if int(raw_seq) != expected:
            return None
        raw_address = (namespace, key)
        address = addresses.get(raw_address)
        if address is None:
            try:
                address = addresses[raw_address] = (namespace.decode(), key.decode())
            except UnicodeDecodeError:
                return None
        value: Any = None
        # ``text`` is the value and the "}" that closes its write (the next write's match
        # follows a "}"; the last write's line ends in one).
        if tail == b"}":  # no value: a delete (or a set of nothing, as apply reads it)
            if text:
                return None
        elif n + 7 < len(parts) and b"[" in text:
            try:
                value = json.loads(text[:-1])
            except ValueError:
                return None
        else:
            value = _RawValue(text[:-1])
        found.append((address, kind, op, value))
    return found


def _apply_writes(state: SessionState, found: _Found, seq: int) -> None:
    """Apply what :func:`_read_writes` found, as :meth:`SessionState.apply` applies it."""
    values, lists = state.values, state.lists
    for write_seq, (address, kind, op, value) in enumerate(found, start=seq):
        if kind == b"value":
            if op == b"delete":
                values.pop(address, None)
            else:
                values[address] = (value, write_seq)
        elif op == b"delete":
            lists.pop(address, None)
        else:
            lists.setdefault(address, []).append((write_seq, value))
    state.next_seq = seq + len(found)


def _parse_raw_values(state: SessionState) -> bool:
    """Parse the values the fast scan kept as JSON (:class:`_RawValue`); ``False`` if one
    is not JSON (the line is read again by the full parse, which names it)."""
    try:
        for address, (value, seq) in state.values.items():
            if isinstance(value, _RawValue):
                state.values[address] = (json.loads(value), seq)
        for elements in state.lists.values():
            for n, (seq, value) in enumerate(elements):
                if isinstance(value, _RawValue):
                    elements[n] = (seq, json.loads(value))
    except ValueError:
        return False
    return True


_CHUNK = 1 << 20


def _first_line(fd: int, size: int) -> bytes | None:
    """The file's first line (without its newline); ``None`` if it has none."""
    data = b""
    while len(data) < size:
        block = os.pread(fd, min(_CHUNK, size - len(data)), len(data))
        if not block:
            break
        data += block
        end = data.find(b"\n")
        if end >= 0:
            return data[:end]
    return None


def read_session(path: str, fd: int, *, use_index: bool = True, raw_values: bool = True) -> _Loaded:
    """Read the session file open as ``fd``: its header, then each line after what a
    valid sidecar index covers (all of them without one), a chunk at a time. Entries are
    indexed, not structured (legacy v3 files excepted). With ``raw_values``, a value the
    fast scan kept as JSON is parsed at the end (if one is not JSON, the file is read again
    without, so that the full parse names its line)."""
    stat = os.fstat(fd)
    size = stat.st_size
    head = _first_line(fd, size)
    if head is None or not head.strip():
        raise _no_header(path)
    fmt, header = parse_header(head, path)
    if fmt == "v3":
        data = _read_all(fd, size)
        end = data.rfind(b"\n") + 1
        return _legacy_loaded(path, header, data[:end].split(b"\n")[1:-1], data[end:], end)
    _check_storage_version(header, path)
    state = SessionState()
    source = _Source(path)
    start, number = len(head) + 1, 1
    saved = _read_index(path, fd, stat, header["id"]) if use_index else None
    if saved is not None:
        try:
            start, number = saved.restore(state, source)
        except (SessionFormatError, ValueError, KeyError, TypeError):  # a damaged index
            saved, state, source = None, SessionState(), _Source(path)
    rest = b""
    at = start  # where the next line begins
    pos = start
    while pos < size:
        block = os.pread(fd, min(_CHUNK, size - pos), pos)
        if not block:
            break
        pos += len(block)
        parts = (rest + block if rest else block).split(b"\n")
        rest = parts.pop()
        at, number = _scan_lines(state, source, parts, at, path, number, raw_values)
    if raw_values and not _parse_raw_values(state):
        return read_session(path, fd, use_index=use_index, raw_values=False)
    source.lines = number
    source.dirty = saved is None or at > start
    _finish(header, state)
    source.state = state
    state.loader = source.load
    return _Loaded(header, state, None, None, rest, at, source)


# --- the sidecar index --------------------------------------------------------------

INDEX_MIN_ENTRIES = 512
"""A session with fewer entries gets no sidecar index (scanning it is quick)."""

_INDEX_MAGIC = b"pitrio-session-index 1\n"
_DIGEST_SPAN = 4096


def index_path(path: str) -> str:
    """Where the sidecar index of the session file ``path`` lives."""
    return f"{path}.idx"


def _digest(fd: int, start: int, end: int) -> str:
    data = os.pread(fd, end - start, start) if end > start else b""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


@final
class _Source:
    """Where each entry of a JSONL session is in its file (by position: the line's
    offset and length, the write's slot in the line's array or ``-1``), and how to read
    entries back from there."""

    __slots__ = ("dirty", "fd", "lengths", "lines", "offsets", "path", "slots", "state")

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd: int | None = None  # the open session's locked descriptor, if any
        self.state: SessionState | None = None  # the index to check entries read against
        self.offsets = array("q")
        self.lengths = array("i")
        self.slots = array("i")
        self.lines = 1
        self.dirty = False

    def add(self, offset: int, length: int, slot: int) -> None:
        self.offsets.append(offset)
        self.lengths.append(length)
        self.slots.append(slot)

    def load(self, positions: Sequence[int]) -> list[Write]:
        """The entry writes at ``positions``, read back from their lines."""
        fd = self.fd
        try:
            own = os.open(self.path, os.O_RDONLY) if fd is None else None
        except OSError as exc:
            msg = f"{self.path}: cannot read the session's entries back ({exc})"
            raise SessionError(msg) from exc
        try:
            reader = own if own is not None else fd
            assert reader is not None
            out: list[Write] = []
            for position in positions:
                offset, slot = self.offsets[position], self.slots[position]
                line = os.pread(reader, self.lengths[position], offset)
                try:
                    value = json.loads(line)
                    write = value[slot] if slot >= 0 else value
                except (ValueError, IndexError, KeyError, TypeError):
                    write = None
                if not isinstance(write, dict) or not self._as_indexed(position, write):
                    msg = (
                        f"{self.path}: the line at byte {offset} is no longer the entry it "
                        "was when the session was opened (the file changed, or the line is "
                        "damaged or names a key twice); open it again"
                    )
                    raise SessionFormatError(msg)
                out.append(write)
            return out
        except OSError as exc:
            msg = f"{self.path}: cannot read the session's entries back ({exc})"
            raise SessionError(msg) from exc
        finally:
            if own is not None:
                os.close(own)

    def _as_indexed(self, position: int, write: Mapping[str, Any]) -> bool:
        """Whether an entry read back is what the index says of it (the fast scan reads
        only a line's first and last members; the rest is parsed here)."""
        state = self.state
        if state is None:
            return True
        parent = state.parents[position]
        return (
            write.get("kind") == "entry"
            and write.get("id") == state.ids[position]
            and write.get("parentId") == (None if parent < 0 else state.ids[parent])
            and write.get("seq") == state.seqs[position]
            and write.get("type") == ENTRY_TYPES[state.types[position]]
            and "timestamp" in write
        )


@attrs.define
class _SavedIndex:
    meta: dict[str, Any]
    body: memoryview

    def restore(self, state: SessionState, source: _Source) -> tuple[int, int]:
        """Fill ``state`` and ``source``; return where the scan goes on (byte, line)."""
        meta, body = self.meta, self.body
        n = len(meta["ids"])
        parents, seqs, offsets = array("i"), array("q"), array("q")
        lengths, slots = array("i"), array("i")
        at = 0
        for arr in (parents, seqs, offsets, lengths, slots):
            size = n * arr.itemsize
            arr.frombytes(body[at : at + size])
            at += size
        state.restore_index(meta["ids"], parents, seqs, bytearray(body[at : at + n]))
        source.offsets, source.lengths, source.slots = offsets, lengths, slots
        for namespace, key, value, seq in meta["values"]:
            state.values[namespace, key] = (value, seq)
        for namespace, key, elements in meta["lists"]:
            state.lists[namespace, key] = [(seq, value) for seq, value in elements]
        state.usage[:] = meta["usage"]
        state.next_seq = max(state.next_seq, meta["nextSeq"])
        return meta["size"], meta["lines"]


def _read_index(path: str, fd: int, stat: os.stat_result, session_id: str) -> _SavedIndex | None:
    """The sidecar index of ``path`` if it is there and still describes the file."""
    try:
        with open(index_path(path), "rb") as f:
            data = f.read()
    except OSError:
        return None
    try:
        if not data.startswith(_INDEX_MAGIC):
            return None
        end = data.index(b"\n", len(_INDEX_MAGIC))
        meta = json.loads(data[len(_INDEX_MAGIC) : end])
        size = meta["size"]
        n = len(meta["ids"])
        if (
            meta["id"] != session_id
            or meta["ino"] != stat.st_ino
            or not 0 < size <= stat.st_size
            or (size == stat.st_size and meta["mtimeNs"] != stat.st_mtime_ns)
            or len(data) - end - 1 != n * (4 + 8 + 8 + 4 + 4 + 1)
            or _digest(fd, 0, min(size, _DIGEST_SPAN)) != meta["head"]
            or _digest(fd, max(0, size - _DIGEST_SPAN), size) != meta["tail"]
            or os.pread(fd, 1, size - 1) != b"\n"
        ):
            return None
    except (ValueError, KeyError, TypeError, OSError):
        return None
    return _SavedIndex(meta, memoryview(data)[end + 1 :])


def write_index(path: str, fd: int, session_id: str, state: SessionState, source: _Source) -> None:
    """Save the sidecar index of the session file open as ``fd`` (whose every line
    ``state`` and ``source`` describe), atomically; a failure leaves no index."""
    target = index_path(path)
    tmp = f"{target}.{os.getpid()}.tmp"
    try:
        size = os.lseek(fd, 0, os.SEEK_END)
        stat = os.fstat(fd)
        meta = {
            "id": session_id,
            "size": size,
            "ino": stat.st_ino,
            "mtimeNs": stat.st_mtime_ns,
            "head": _digest(fd, 0, min(size, _DIGEST_SPAN)),
            "tail": _digest(fd, max(0, size - _DIGEST_SPAN), size),
            "lines": source.lines,
            "nextSeq": state.next_seq,
            "values": [[ns, key, v, seq] for (ns, key), (v, seq) in state.values.items()],
            "lists": [[ns, key, elements] for (ns, key), elements in state.lists.items()],
            "usage": state.usage,
            "ids": state.ids,
        }
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
        try:
            _write_all(out, _INDEX_MAGIC + json.dumps(meta, separators=(",", ":")).encode())
            _write_all(out, b"\n")
            for arr in (state.parents, state.seqs, source.offsets, source.lengths, source.slots):
                _write_all(out, arr.tobytes())
            _write_all(out, bytes(state.types))
        finally:
            os.close(out)
        os.replace(tmp, target)
        source.dirty = False
    except (OSError, ValueError, TypeError):
        # Only a cache: without it the next open scans the file.
        with contextlib.suppress(OSError):
            os.unlink(tmp)


# --- legacy v3 ----------------------------------------------------------------------

_V3_TYPES = {
    "message",
    "custom",
    "custom_message",
    "branch_summary",
    "compaction",
    "model_change",
    "thinking_level_change",
    "active_tools_change",
    "session_info",
    "label",
}
_V3_DROPPED = {
    "model_change",
    "thinking_level_change",
    "active_tools_change",
    "session_info",
    "label",
}


def legacy_v3_header(header: Mapping[str, Any]) -> dict[str, Any]:
    """The v4 header Pi makes from a v3 one."""
    out: dict[str, Any] = {
        "v": FORMAT_VERSION,
        "kind": "header",
        "id": header["id"],
        "createdAt": timestamp_ms(header["timestamp"]),
        "storageVersion": STORAGE_VERSION,
        "cwd": header["cwd"],
    }
    parent = header.get("parentSession")
    if isinstance(parent, str):
        parent_id = _header_id(parent)
        if parent_id is not None:
            out["parentSessionId"] = parent_id
        else:
            out["legacyParentSessionPath"] = parent
    return out


def _header_id(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            first = f.readline()
        return str(parse_header(first, path)[1]["id"])
    except (OSError, SessionFormatError):
        return None


def _v3_time(record: Mapping[str, Any]) -> int:
    """A v3 record's time in milliseconds; 0 when it has none (Pi reads those too)."""
    try:
        return timestamp_ms(record["timestamp"])
    except (KeyError, TypeError, ValueError):
        return 0


def _custom_message(entry: Mapping[str, Any]) -> dict[str, Any]:
    out = {"role": "custom", "customType": entry.get("customType"), "content": entry.get("content")}
    for key in ("details", "display"):
        if entry.get(key) is not None:
            out[key] = entry[key]
    out["timestamp"] = _v3_time(entry)
    return out


def legacy_v3_writes(
    records: list[Any],
    path: str,
    *,
    transparent: Callable[[Mapping[str, Any]], bool] | None = None,
) -> tuple[list[Write], dict[str, Any]]:
    """Pi's ``normalizeLegacyV3Records``: v3 records as v4 writes, and their summed usage.

    Unlike Pi, entry ids are kept (Pi mints new UUIDs); everything else follows Pi:
    model, thinking-level and tool changes become the lane configuration of the last
    entry's branch, labels and the session name become values, a compaction's kept
    entries are copied into its retained tail (or its ``retainedTail`` is taken as it
    stands). Records for which ``transparent`` is true are read through like the change
    records: they are no entries, and a parent naming one is its parent.
    """
    by_id: dict[str, dict[str, Any]] = {}
    for number, record in enumerate(records, start=2):
        if not isinstance(record, dict) or record.get("type") not in _V3_TYPES:
            kind = record.get("type") if isinstance(record, dict) else record
            msg = f"{path}: unsupported legacy v3 record type {kind!r} at line {number}"
            raise SessionFormatError(msg)
        if record.get("id") in by_id:
            msg = f"{path}: duplicate legacy v3 entry id {record.get('id')!r}"
            raise SessionFormatError(msg)
        by_id[record["id"]] = record
    retained = {
        r["id"]
        for r in records
        if r["type"] not in _V3_DROPPED and (transparent is None or not transparent(r))
    }
    resolved: dict[str, str | None] = {}

    def resolve(legacy_id: str | None) -> str | None:
        seen: list[str] = []
        current = legacy_id
        while current is not None:
            if current in retained:
                break
            if current in resolved:
                current = resolved[current]
                break
            if current in seen or current not in by_id:
                msg = f"{path}: broken legacy v3 parent chain at entry {current!r}"
                raise SessionFormatError(msg)
            seen.append(current)
            current = by_id[current].get("parentId")
        for s in seen:
            resolved[s] = current
        return current

    def from_id(value: Any) -> str | None:
        return None if value == "root" or value is None else resolve(value)

    def project(entry: Mapping[str, Any]) -> list[dict[str, Any]]:
        match entry["type"]:
            case "message":
                return [entry["message"]]
            case "custom_message":
                return [_custom_message(entry)]
            case "branch_summary" if entry.get("summary"):
                return [
                    {
                        "role": "branchSummary",
                        "summary": entry["summary"],
                        "fromId": from_id(entry.get("fromId")),
                        "timestamp": _v3_time(entry),
                    }
                ]
            case "compaction":
                return [
                    {
                        "role": "compactionSummary",
                        "summary": entry["summary"],
                        "tokensBefore": entry["tokensBefore"],
                        "timestamp": _v3_time(entry),
                    }
                ]
        return []

    def retained_tail(compaction: Mapping[str, Any]) -> list[dict[str, Any]]:
        tail: list[Mapping[str, Any]] = []
        current = compaction.get("parentId")
        first_kept = compaction.get("firstKeptEntryId")
        while current is not None and current in by_id:
            entry = by_id[current]
            tail.append(entry)
            if current == first_kept:
                return [m for e in reversed(tail) for m in project(e)]
            current = entry.get("parentId")
        msg = (
            f"{path}: compaction {compaction['id']} keeps {first_kept!r}, "
            "which is not on its branch"
        )
        raise SessionFormatError(msg)

    writes: list[Write] = []
    for record in records:
        if record["id"] not in retained:
            continue
        base: Write = {
            "kind": "entry",
            "id": record["id"],
            "parentId": resolve(record.get("parentId")),
            "seq": len(writes) + 1,
            "timestamp": _v3_time(record),
        }
        match record["type"]:
            case "message":
                base |= {"type": "message", "message": record["message"]}
            case "custom_message":
                base |= {"type": "message", "message": _custom_message(record)}
            case "branch_summary":
                base |= {
                    "type": "branch_summary",
                    "fromId": from_id(record.get("fromId")),
                    "summary": record.get("summary", ""),
                    "details": record.get("details"),
                    "usage": record.get("usage"),
                    "fromHook": record.get("fromHook") or False,
                }
            case "compaction":
                base |= {
                    "type": "compaction",
                    "summary": record.get("summary", ""),
                    "retainedTail": (
                        record["retainedTail"]
                        if isinstance(record.get("retainedTail"), list)
                        else retained_tail(record)
                    ),
                    "tokensBefore": record.get("tokensBefore", 0),
                    "details": record.get("details"),
                    "usage": record.get("usage"),
                    "fromHook": record.get("fromHook") or False,
                }
            case _:
                base |= {
                    "type": "custom",
                    "customType": record.get("customType"),
                    "data": record.get("data"),
                }
        writes.append(
            {k: v for k, v in base.items() if v is not None or k == "parentId" or k == "fromId"}
        )

    def value(namespace: str, key: str, v: Any) -> None:
        writes.append(
            {
                "kind": "value",
                "op": "set",
                "seq": len(writes) + 1,
                "namespace": namespace,
                "key": key,
                "value": v,
            }
        )

    name = None
    labels: dict[str, str] = {}
    for record in records:
        if record["type"] == "session_info":
            name = record.get("name")
        elif record["type"] == "label":
            target = resolve(record.get("targetId"))
            if target is None:
                continue
            if record.get("label"):
                labels[target] = record["label"]
            else:
                labels.pop(target, None)
    if name:
        value(SESSION_NAME, "", name)
    for target, label in labels.items():
        value(ENTRY_LABEL, target, label)
    last = records[-1]["id"] if records else None
    value(BRANCH_TIP, MAIN_BRANCH, resolve(last))
    config = _legacy_configuration(by_id, last)
    if config is not None:
        value(LANE_CONFIG, MAIN_BRANCH, config)
        value(
            LANE_STATE,
            MAIN_BRANCH,
            {"currentOperationId": None, "lastOperationId": None, "inbox": []},
        )
    return writes, _sum_usage(records)


def _legacy_configuration(
    by_id: Mapping[str, Mapping[str, Any]], leaf: str | None
) -> dict[str, Any] | None:
    model = thinking = tools = None
    saw: set[str] = set()
    current = leaf
    while current is not None and len(saw) < 3:
        entry = by_id[current]
        kind = entry["type"]
        if kind == "model_change" and kind not in saw:
            saw.add(kind)
            if entry.get("provider") and entry.get("modelId"):
                model = {"provider": entry["provider"], "modelId": entry["modelId"]}
        elif kind == "thinking_level_change" and kind not in saw:
            saw.add(kind)
            if entry.get("thinkingLevel") in THINKING_LEVELS:
                thinking = entry["thinkingLevel"]
        elif kind == "active_tools_change" and kind not in saw:
            saw.add(kind)
            names = entry.get("activeToolNames")
            if isinstance(names, list) and all(isinstance(n, str) for n in names):
                tools = list(names)
        current = entry.get("parentId")
    if model is None or thinking is None:
        return None
    return {"model": model, "thinkingLevel": thinking, "activeToolNames": tools or []}


_USAGE_KEYS = ("input", "output", "cacheRead", "cacheWrite", "totalTokens")
_COST_KEYS = ("input", "output", "cacheRead", "cacheWrite", "total")


def _sum_usage(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    total: dict[str, Any] = dict.fromkeys(_USAGE_KEYS, 0)
    total["cost"] = dict.fromkeys(_COST_KEYS, 0)
    for record in records:
        usage = None
        if record["type"] == "message":
            message = record.get("message") or {}
            if message.get("role") in ("assistant", "toolResult"):
                usage = message.get("usage")
        elif record["type"] in ("compaction", "branch_summary"):
            usage = record.get("usage")
        if not isinstance(usage, Mapping):
            continue
        for key in _USAGE_KEYS:
            total[key] += usage.get(key) or 0
        cost = usage.get("cost") or {}
        for key in _COST_KEYS:
            total["cost"][key] += cost.get(key) or 0
    return total


# --- writing ------------------------------------------------------------------------


def _read_all(fd: int, size: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while size > 0:
        chunk = os.read(fd, size)
        if not chunk:
            break
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class _Appender:
    """Appends bytes to one locked file, synced by a store's ``fsync`` policy.

    Each append is complete or absent: a failed write truncates the file back to where
    it began, so no half line is left for the next append or reader."""

    __slots__ = ("_fd", "_fsync", "_offset", "_unsynced", "header", "path")

    def __init__(
        self, path: str, fd: int, header: dict[str, Any], *, fsync: FsyncPolicy, unsynced: bool
    ) -> None:
        self.path = path
        self.header = header
        self._fd: int | None = fd
        self._fsync = fsync
        self._unsynced = unsynced
        self._offset = 0  # where the last append began

    async def _append(self, data: bytes) -> None:
        await _worker.run_sync(self._append_sync, data)

    async def _append_and_sync(self, data: bytes) -> OSError | None:
        """Append, then sync by the ``flush`` policy (a save point), in one worker-thread
        hop. A failed sync is returned: what it was to sync is written."""
        return await _worker.run_sync(self._append_and_sync_sync, data)

    def _append_and_sync_sync(self, data: bytes) -> OSError | None:
        self._append_sync(data)  # raises if nothing was written
        if self._fsync == "flush":
            try:
                self._sync_sync()
            except OSError as exc:
                return exc  # written, not synced: the caller must not write it again
        return None

    def _append_sync(self, data: bytes) -> None:
        assert self._fd is not None
        size = os.lseek(self._fd, 0, os.SEEK_END)
        self._offset = size
        try:
            _write_all(self._fd, data)
            if self._fsync == "always":
                os.fsync(self._fd)
            else:
                self._unsynced = True
        except BaseException:
            # A failed write (disk full...) must not leave half a line for the next
            # flush to append to: the session keeps the writes and retries them.
            os.ftruncate(self._fd, size)
            raise

    async def sync(self) -> None:
        if self._fsync == "flush" and self._unsynced and self._fd is not None:
            await _worker.run_sync(self._sync_sync)
        else:
            await trio.lowlevel.checkpoint()

    def _sync_sync(self) -> None:
        assert self._fd is not None
        self._unsynced = False
        os.fsync(self._fd)

    async def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            await _worker.run_sync(os.close, fd)


@final
class _JsonlWriter(_Appender):
    """Appends transactions to one locked session file, keeping the file's index of
    entries (:class:`_Source`) up to date, and saves that index when it closes."""

    __slots__ = ("_legacy", "_legacy_usage", "_source", "_state", "_written_seq")

    def __init__(
        self,
        path: str,
        fd: int,
        header: dict[str, Any],
        *,
        fsync: FsyncPolicy,
        state: SessionState,
        source: _Source | None,
        legacy: list[Write] | None = None,
        legacy_usage: dict[str, Any] | None = None,
        unsynced: bool = False,
    ) -> None:
        super().__init__(path, fd, header, fsync=fsync, unsynced=unsynced)
        self._legacy = legacy
        self._legacy_usage = legacy_usage
        self._state = state
        self._source = source
        self._written_seq = state.next_seq  # every write before it is in the file
        if source is not None:
            source.fd = fd

    async def write(self, session: Session, transactions: Sequence[Sequence[Write]]) -> None:
        if self._legacy is not None:
            await _worker.run_sync(self._upgrade_sync, session, transactions)
            return
        lines = [_line(t) for t in transactions]
        await self._append(b"".join(lines))
        self._indexed(lines, transactions)

    async def write_and_sync(
        self, session: Session, transactions: Sequence[Sequence[Write]]
    ) -> OSError | None:
        """:meth:`write`, then the sync of :meth:`sync`, in one worker-thread hop (a save
        point's). A failed sync is returned: what it was to sync is written."""
        if self._legacy is not None:
            await self.write(session, transactions)
            await self.sync()
            return None
        lines = [_line(t) for t in transactions]
        error = await self._append_and_sync(b"".join(lines))
        self._indexed(lines, transactions)
        return error

    def _indexed(self, lines: Sequence[bytes], transactions: Sequence[Sequence[Write]]) -> None:
        """Index the entries of lines just appended at ``self._offset``."""
        if transactions:
            self._written_seq = transactions[-1][-1]["seq"] + 1
        source = self._source
        if source is None:
            return
        at = self._offset
        position = self._state.position
        for line, transaction in zip(lines, transactions, strict=True):
            for slot, write in enumerate(transaction):
                if write["kind"] == "entry":
                    if position.get(write["id"]) != len(source.offsets):
                        self._source = None  # out of step: no index for this file
                        return
                    source.add(at, len(line) - 1, -1 if len(transaction) == 1 else slot)
            at += len(line)
        source.lines += len(lines)
        source.dirty = True

    async def close(self) -> None:
        source = self._source
        if (
            source is not None
            and self._fd is not None
            and source.dirty
            and self._written_seq == self._state.next_seq  # nothing committed is unwritten
            and len(source.offsets) == len(self._state.ids) >= INDEX_MIN_ENTRIES
        ):
            await _worker.run_sync(
                write_index, self.path, self._fd, self.header["id"], self._state, source
            )
        if source is not None:
            source.fd = None  # read back through the path from now on
        await super().close()

    def _upgrade_sync(self, session: Session, transactions: Sequence[Sequence[Write]]) -> None:
        """Rewrite a legacy v3 file as v4 (Pi's ``upgradeLegacyV3ToV4``), atomically."""
        assert self._legacy is not None
        assert self._fd is not None
        first = transactions[0][0]["seq"] if transactions else session._state.next_seq
        usage_row: Write = {
            "kind": "usage",
            "id": new_id(),
            "usage": self._legacy_usage,
            "adjustment": True,
            "details": {"source": "v3-import"},
            "seq": first - 1,
        }
        header = dict(self.header)
        header["nextSeq"] = max(session._state.next_seq, first)
        lines = [_dumps(header).encode() + b"\n"]
        lines += [_line([w]) for w in self._legacy]
        lines.append(_line([usage_row]))
        lines += [_line(t) for t in transactions]
        tmp = f"{self.path}.tmp"
        fd = open_locked(
            tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND, f"session {header['id']}"
        )
        try:
            _write_all(fd, b"".join(lines))
            if self._fsync != "never":  # the rename must not publish an unsynced file
                os.fsync(fd)
            os.replace(tmp, self.path)
        except BaseException:
            os.close(fd)
            raise
        os.close(self._fd)  # the old inode's lock goes; the new file is locked already
        self._fd = fd
        self._source = None
        self.header = header
        self._legacy = None
        session._state.usage.append(usage_row)


# --- the store ----------------------------------------------------------------------


class _FileStore(StoreBase):
    """What the two file stores share (:class:`JsonlSessionStore`, Pi's harness format,
    and :class:`~pitrio.harness.PiSessionStore`, Pi's coding-agent format): one directory
    per working directory under ``root``, files named as Pi names them, found, listed and
    deleted alike; each store reads its own headers (``_info``)."""

    root: str

    @abc.abstractmethod
    def _info(self, path: str) -> SessionInfo | None:
        """The listing of the session file ``path`` (``None``: not one of this store's)."""

    def directory(self, cwd: str | os.PathLike[str]) -> str:
        """The directory holding the sessions of working directory ``cwd``."""
        return os.path.join(self.root, session_directory_name(resolve_cwd(cwd)))

    def _find(self, session_id: str) -> str:
        if os.path.isdir(self.root):
            for directory in sorted(os.scandir(self.root), key=lambda d: d.name):
                if not directory.is_dir():
                    continue
                for name in os.listdir(directory.path):
                    if _names_session(name, session_id):
                        return os.path.join(directory.path, name)
        msg = f"no session {session_id!r} under {self.root}"
        raise SessionNotFoundError(msg)

    async def list(self, *, cwd: str | os.PathLike[str] | None = None) -> list[SessionInfo]:
        """See :meth:`SessionStore.list` (reads only each file's first line)."""
        want = None if cwd is None else resolve_cwd(cwd)
        return await trio.to_thread.run_sync(self._list_sync, want)

    def _list_sync(self, cwd: str | None) -> builtins.list[SessionInfo]:
        if not os.path.isdir(self.root):
            return []
        if cwd is None:
            directories = [d.path for d in os.scandir(self.root) if d.is_dir()]
        else:
            directories = [self.directory(cwd)]
        infos: list[SessionInfo] = []
        for directory in directories:
            try:
                names = os.listdir(directory)
            except FileNotFoundError:
                continue
            for name in names:
                if not name.endswith(".jsonl"):
                    continue
                info = self._info(os.path.join(directory, name))
                # Directory names are lossy (/a/b and /a-b share one): check the header.
                if info is not None and (cwd is None or info.cwd == cwd):
                    infos.append(info)
        return sort_infos(infos)

    async def delete(self, session_id: str) -> None:
        """See :meth:`SessionStore.delete`."""
        await trio.to_thread.run_sync(self._delete_sync, session_id)

    def _delete_sync(self, session_id: str) -> None:
        path = self._find(session_id)
        fd = open_locked(path, os.O_RDONLY, f"session {session_id}")
        try:
            os.unlink(path)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(index_path(path))
        finally:
            os.close(fd)


@final
class JsonlSessionStore(_FileStore):
    """Sessions as JSONL files in Pi's format, one directory per working directory.

    ``root`` defaults to :func:`default_sessions_root`. Each change is appended to its
    file as it is made (a killed process loses nothing it recorded). ``fsync`` says when
    the file is also synced to the disk, so that it survives a power loss: ``"flush"``
    (the default) at each :meth:`Session.flush` (the harness's save points, after each
    ``turn_end``), ``"always"`` (or ``True``) after every change, ``"never"`` (or
    ``False``) never, as Pi does.
    """

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        fsync: bool | FsyncPolicy = "flush",
    ) -> None:
        self.root = (
            os.path.abspath(os.fspath(root)) if root is not None else default_sessions_root()
        )
        self.fsync: FsyncPolicy = fsync_policy(fsync)

    def __repr__(self) -> str:
        return f"JsonlSessionStore({self.root!r})"

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
        header: dict[str, Any] = {
            "v": FORMAT_VERSION,
            "kind": "header",
            "id": sid,
            "storageVersion": STORAGE_VERSION,
            "createdAt": created,
            "cwd": cwd,
        }
        if parent_session_id is not None:
            header["parentSessionId"] = parent_session_id
        state = SessionState()
        if initial:
            state.apply(initial)
            header["nextSeq"] = state.next_seq
        path = os.path.join(self.directory(cwd), session_file_name(created, sid))
        head = _dumps(header).encode() + b"\n"
        lines = [_line([w]) for w in initial]
        source = _Source(path)
        at = len(head)
        for write, line in zip(initial, lines, strict=True):
            if write["kind"] == "entry":
                source.add(at, len(line) - 1, -1)
            at += len(line)
        source.lines += len(lines)
        source.dirty = True
        data = head + b"".join(lines)
        fd = await trio.to_thread.run_sync(self._create_sync, path, sid, data)
        state.loader = source.load
        writer = _JsonlWriter(
            path, fd, header, fsync=self.fsync, state=state, source=source, unsynced=True
        )
        return Session(
            session_id=sid,
            cwd=cwd,
            created_at=created,
            parent_session_id=parent_session_id,
            state=state,
            writer=writer,
            store=self,
            path=path,
        )

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
        """Open a session by id, or by the path of its file (any JSONL session file,
        such as one Pi wrote). See :meth:`SessionStore.open`; a read-only open leaves a
        torn last line in the file (only a writer repairs it)."""
        return await trio.to_thread.run_sync(self._open_sync, session_id, read_only)

    def _open_sync(self, session_id: str | os.PathLike[str], read_only: bool = False) -> Session:
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
            loaded = read_session(path, fd)
            recovered = None
            if loaded.torn:
                recovered = (
                    f"{path}: dropped a torn last line ({len(loaded.torn)} bytes after byte "
                    f"{loaded.complete_size}) left by an interrupted write"
                )
                if not read_only:
                    os.ftruncate(fd, loaded.complete_size)
                warnings.warn(recovered, SessionRecoveredWarning, stacklevel=1)
        except BaseException:
            os.close(fd)
            raise
        header = loaded.header
        if read_only:
            os.close(fd)
            return Session(
                session_id=header["id"],
                cwd=header["cwd"],
                created_at=header["createdAt"],
                parent_session_id=header.get("parentSessionId"),
                state=loaded.state,
                writer=ReadOnlyWriter(),
                store=self,
                recovered=recovered,
                read_only=True,
                path=path,
            )
        return Session(
            session_id=header["id"],
            cwd=header["cwd"],
            created_at=header["createdAt"],
            parent_session_id=header.get("parentSessionId"),
            state=loaded.state,
            writer=_JsonlWriter(
                path,
                fd,
                header,
                fsync=self.fsync,
                state=loaded.state,
                source=loaded.source,
                legacy=loaded.legacy_writes,
                legacy_usage=loaded.legacy_usage,
            ),
            store=self,
            recovered=recovered,
            path=path,
        )

    def _info(self, path: str) -> SessionInfo | None:
        try:
            with open(path, "rb") as f:
                first = f.readline()
                mtime = os.fstat(f.fileno()).st_mtime
            fmt, header = parse_header(first, path)
        except (OSError, SessionFormatError):
            return None
        if fmt == "v3":
            header = legacy_v3_header(header)
        return SessionInfo(
            id=header["id"],
            cwd=header["cwd"],
            created_at=header["createdAt"] / 1000,
            modified_at=mtime,
            parent_session_id=header.get("parentSessionId"),
            path=path,
        )
