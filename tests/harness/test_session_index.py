"""Resuming a long session reads what the active branch needs: the entry index of the
stores (lazy entries), the JSONL sidecar index and its checks (stale, damaged, a file
Pi appended to after pitrio closed it), and the same result as a full load."""

from __future__ import annotations

import json
import os
import unittest.mock
from array import array
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings, strategies as st

from pitrio import UserMessage, wire
from pitrio.harness import (
    JsonlSessionStore,
    Session,
    SessionError,
    SessionFormatError,
    SqliteSessionStore,
    _jsonl,
)
from pitrio.harness._entries import entry_to_wire
from pitrio.harness._session_state import SessionState

from .test_session_interop import run_pi
from .test_session_properties import OPS, apply, snapshot


def user(text: str, ts: int = 1) -> UserMessage:
    return UserMessage(content=text, timestamp=ts)


@pytest.fixture
def small_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every JSONL session gets a sidecar index, however short."""
    monkeypatch.setattr(_jsonl, "INDEX_MIN_ENTRIES", 0)


def counting(state: SessionState) -> list[int]:
    """Record the positions the state's loader reads back from storage."""
    loaded: list[int] = []
    loader = state.loader
    assert loader is not None

    def wrapped(positions: Any) -> Any:
        loaded.extend(positions)
        return loader(positions)

    state.loader = wrapped
    return loaded


@pytest.fixture
def scanned(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The line numbers the JSONL reader scans (by the fast scan or ``json.loads``)."""
    lines: list[int] = []
    scan = _jsonl._scan_lines

    def wrapped(
        state: Any, source: Any, chunk: list[bytes], at: int, path: str, number: int, *rest: Any
    ) -> tuple[int, int]:
        lines.extend(range(number + 1, number + 1 + len(chunk)))
        return scan(state, source, chunk, at, path, number, *rest)

    monkeypatch.setattr(_jsonl, "_scan_lines", wrapped)
    return lines


def facts(session: Session) -> dict[str, Any]:
    """Everything a session holds, entries as Pi's JSON."""
    state = session._state
    return {
        "entries": [entry_to_wire(e) for e in session.entries],
        "values": dict(state.values),
        "lists": dict(state.lists),
        "usage": list(state.usage),
        "next_seq": state.next_seq,
        "leaf": session.leaf_id,
        "branch": [e.id for e in session.get_branch()],
        "context": session.build_context(),
    }


def full_load(path: str) -> _jsonl._Loaded:
    fd = os.open(path, os.O_RDONLY)
    try:
        return _jsonl.read_session(path, fd, use_index=False)
    finally:
        os.close(fd)


async def long_session(store: Any, turns: int, compact_at: int) -> Session:
    session: Session = await store.create(cwd="/p")
    for i in range(turns):
        if i == compact_at:
            await session.append_compaction(
                "summary", tokens_before=1, retained_tail=[user("kept")]
            )
        await session.append_message(user(f"message {i}", i), write=False)
    await session.write()
    return session


async def test_resume_reads_only_the_branch_after_its_last_compaction(tmp_path: Path) -> None:
    for store in (JsonlSessionStore(tmp_path / "s"), SqliteSessionStore(tmp_path / "s.db")):
        session = await long_session(store, 300, compact_at=250)
        await session.close()
        session = await store.open(session.id)
        # The open (in the store's worker thread) structured the branch from its last
        # compaction down, and nothing else; build_context() reads nothing more.
        assert len(session._state._cache) == 51
        loaded = counting(session._state)
        context = session.build_context()
        # The compaction (its summary and retained tail), then the 50 messages after it.
        assert [m.role for m in context.messages[:2]] == ["compactionSummary", "user"]
        assert len(context.messages) == 52
        assert loaded == []
        assert len(session._state.ids) == 301
        # The rest is read when asked for, once.
        assert [e.id for e in session.get_branch()][-1] == session.leaf_id
        assert len(loaded) == 250
        assert len(session.entries) == 301
        assert len(loaded) == 250
        await session.close()
        if isinstance(store, SqliteSessionStore):
            reader = await store.open(session.id, read_only=True)
            await store.aclose()
            assert len(reader.get_branch()) == 301  # read back after the store closed
            assert store._conn is None  # with a connection of its own, closed again
            await store.delete(session.id)
            reader._state._cache.clear()
            with pytest.raises(SessionFormatError, match="is gone"):
                reader.get_branch()
            await store.aclose()


async def test_a_long_session_gets_a_sidecar_index_used_on_the_next_open(
    tmp_path: Path, scanned: list[int]
) -> None:
    store = JsonlSessionStore(tmp_path)
    session = await long_session(store, _jsonl.INDEX_MIN_ENTRIES + 10, compact_at=100)
    before = facts(session)
    await session.close()
    assert session.path is not None
    assert mode_of(_jsonl.index_path(session.path)) == 0o600
    scanned.clear()
    again = await store.open(session.id)
    assert scanned == []  # nothing parsed but the header: the index covers every line
    assert facts(again) == before
    await again.close()
    await store.delete(session.id)
    assert mode_of(_jsonl.index_path(session.path)) is None


async def test_a_short_session_gets_no_sidecar_index(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    session = await long_session(store, 10, compact_at=5)
    await session.close()
    assert session.path is not None
    assert mode_of(_jsonl.index_path(session.path)) is None


def mode_of(path: str) -> int | None:
    try:
        return os.stat(path).st_mode & 0o777
    except FileNotFoundError:
        return None


def pi_appends(path: str, text: str, *, seq: int, parent: str | None, entry_id: str) -> None:
    """Append a message as Pi's harness appends one: the entry and the main tip, one line."""
    message = wire.unstructure(user(text))
    entry: dict[str, Any] = {"kind": "entry", "id": entry_id, "parentId": parent}
    entry |= {"type": "message", "message": message, "seq": seq, "timestamp": 5}
    tip: dict[str, Any] = {"kind": "value", "op": "set", "seq": seq + 1}
    tip |= {"namespace": "pi.branch.tip", "key": "main", "value": entry_id}
    with open(path, "a") as f:
        f.write(json.dumps([entry, tip], separators=(",", ":")) + "\n")


@pytest.mark.usefixtures("small_index")
async def test_lines_appended_after_the_index_are_scanned_on_top_of_it(
    tmp_path: Path, scanned: list[int]
) -> None:
    store = JsonlSessionStore(tmp_path)
    session = await long_session(store, 20, compact_at=10)
    await session.close()
    assert session.path is not None
    pi_appends(
        session.path,
        "from pi",
        seq=session._state.next_seq,
        parent=session.leaf_id,
        entry_id="pi-1",
    )
    scanned.clear()
    again = await store.open(session.id)
    assert scanned == [23]  # after the header and the 21 entries' lines: Pi's one line
    assert again.leaf_id == "pi-1"
    assert again.build_context().messages[-1] == user("from pi")
    expected = full_load(session.path)
    assert again._state.ids == expected.state.ids
    assert again._state.values == expected.state.values
    await again.append_message(user("after pi"))
    await again.close()
    scanned.clear()
    third = await store.open(session.id)
    assert scanned == []  # the close saved the index again, Pi's line in it
    assert [m.content for m in third.build_context().messages[-2:]] == ["from pi", "after pi"]
    await third.close()


@pytest.mark.usefixtures("small_index")
@pytest.mark.parametrize(
    "damage", ["garbage", "truncated", "other_file", "rewritten", "shrunk", "missing"]
)
async def test_a_stale_or_damaged_index_is_ignored(
    tmp_path: Path, scanned: list[int], damage: str
) -> None:
    store = JsonlSessionStore(tmp_path)
    session = await long_session(store, 30, compact_at=20)
    other = await long_session(store, 5, compact_at=1)
    await other.close()
    await session.close()
    assert session.path is not None
    assert other.path is not None
    spoil(Path(session.path), Path(other.path), damage)
    scanned.clear()
    again = await store.open(session.id, read_only=True)
    assert scanned  # the file was read again
    expected = full_load(session.path)
    assert again._state.ids == expected.state.ids
    assert again._state.values == expected.state.values
    assert again.build_context() == Session.build_context(_session_from(expected, again), None)
    if damage == "rewritten":
        assert "message 52" in [getattr(m, "content", "") for m in again.build_context().messages]


def spoil(path: Path, other: Path, damage: str) -> None:
    index = Path(_jsonl.index_path(str(path)))
    data = path.read_bytes()
    match damage:
        case "garbage":
            index.write_bytes(b"pitrio-session-index 1\n{not json")
        case "truncated":
            index.write_bytes(index.read_bytes()[:-7])
        case "other_file":
            index.write_bytes(Path(_jsonl.index_path(str(other))).read_bytes())
        case "rewritten":  # same size, other bytes in the middle (the mtime moves)
            middle = data.index(b"message 25")
            path.write_bytes(data[:middle] + b"message 52" + data[middle + 10 :])
        case "shrunk":  # a line dropped from the end
            path.write_bytes(data[: data.rstrip(b"\n").rfind(b"\n") + 1])
        case "missing":
            index.unlink()


def overwrite(path: str) -> None:
    Path(path).write_text("x" * 100_000)


def _session_from(loaded: _jsonl._Loaded, like: Session) -> Session:
    view = object.__new__(Session)
    for slot in Session.__slots__:
        setattr(view, slot, getattr(like, slot))
    view._state = loaded.state
    return view


async def test_a_file_changed_under_an_open_session_fails_clearly(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    session = await long_session(store, 30, compact_at=20)
    await session.close()
    assert session.path is not None
    reader = await store.open(session.id, read_only=True)
    overwrite(session.path)
    with pytest.raises(SessionFormatError, match="no longer the entry"):
        reader.get_branch()
    await trio.Path(session.path).unlink()
    with pytest.raises(SessionError, match="cannot read the session's entries back"):
        reader.get_branch()


@pytest.mark.usefixtures("small_index")
async def test_branches_and_compactions_through_the_index(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    session = await store.create(cwd="/p")
    first = await session.append_message(user("a"))
    await session.append_message(user("b"))
    await session.set_leaf(first)
    await session.append_message(user("c"))
    await session.append_compaction("s", tokens_before=1, first_kept_entry_id=first)
    await session.append_message(user("d"))
    before = facts(session)
    children = [e.id for e in session.children(first)]
    await session.close()
    again = await store.open(session.id)
    assert facts(again) == before
    assert [e.id for e in again.children(first)] == children
    assert [e.id for e in again.children(None)] == [first]
    await again.set_leaf(children[0])  # back to "b": a branch switch on the indexed file
    await again.append_message(user("e"))
    branch = [getattr(e, "message", None) for e in again.get_branch()]
    assert [m.content for m in branch if m is not None] == ["a", "b", "e"]
    await again.close()


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS, pi_after=st.booleans())
def test_an_indexed_open_equals_a_full_load(
    tmp_path_factory: pytest.TempPathFactory, ops: Any, pi_after: bool
) -> None:
    where = tmp_path_factory.mktemp("index")

    async def main() -> None:
        store = JsonlSessionStore(where)
        session = await store.create(cwd="/p")
        for step, op in enumerate(ops):
            if op == ("reopen",):
                before = snapshot(session)
                await session.close()
                session = await store.open(session.id)
                assert snapshot(session) == before
            else:
                await apply(session, op, step)
        await session.close()
        assert session.path is not None
        if pi_after:
            state = session._state
            pi_appends(session.path, "pi", seq=state.next_seq, parent=session.leaf_id, entry_id="p")
        again = await store.open(session.id)
        expected = _session_from(full_load(session.path), again)
        assert facts(again) == facts(expected)
        await again.close()

    with unittest.mock.patch.object(_jsonl, "INDEX_MIN_ENTRIES", 0):
        trio.run(main)


def duplicate_an_id(index: Path) -> None:
    data = index.read_bytes()
    magic = b"pitrio-session-index 1\n"
    end = data.index(b"\n", len(magic))
    meta = json.loads(data[len(magic) : end])
    meta["ids"][1] = meta["ids"][0]
    index.write_bytes(magic + json.dumps(meta).encode() + data[end:])


@pytest.mark.usefixtures("small_index")
async def test_an_index_naming_an_entry_twice_is_ignored(
    tmp_path: Path, scanned: list[int]
) -> None:
    store = JsonlSessionStore(tmp_path)
    session = await long_session(store, 12, compact_at=4)
    before = facts(session)
    await session.close()
    assert session.path is not None
    duplicate_an_id(Path(_jsonl.index_path(session.path)))
    scanned.clear()
    again = await store.open(session.id)
    assert scanned  # scanned whole
    assert facts(again) == before
    await again.close()


@pytest.mark.usefixtures("small_index")
async def test_an_index_that_cannot_be_saved_is_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JsonlSessionStore(tmp_path)
    session = await long_session(store, 12, compact_at=4)

    def refuse(src: str, dst: str) -> None:
        raise PermissionError(13, "refused", dst)

    monkeypatch.setattr(os, "replace", refuse)
    await session.close()  # closes all the same
    monkeypatch.undo()
    assert session.path is not None
    directory = os.path.dirname(session.path)
    assert sorted(os.listdir(directory)) == [os.path.basename(session.path)]  # no tmp left
    again = await store.open(session.id)
    assert len(again.entries) == 13
    await again.close()


def write_file(path: Path, *lines: Any) -> None:
    header = {"v": 4, "kind": "header", "id": "s1", "storageVersion": 1}
    header |= {"createdAt": 1, "cwd": "/p"}
    path.write_text("".join(json.dumps(x) + "\n" for x in (header, *lines)))


@pytest.mark.parametrize(
    ("entry", "error"),
    [
        ({"type": "message", "parentId": None, "message": {}}, "missing the field 'timestamp'"),
        ({"type": "note", "parentId": None, "timestamp": 1}, "unknown session entry type 'note'"),
    ],
)
async def test_an_entry_the_open_cannot_index_names_its_line(
    tmp_path: Path, entry: dict[str, Any], error: str
) -> None:
    path = tmp_path / "2026-01-01T00-00-00-000Z_s1.jsonl"
    write_file(path, {"kind": "entry", "id": "e1", "seq": 1, **entry})
    with pytest.raises(SessionFormatError, match=rf"line 2: .*{error}"):
        await JsonlSessionStore(tmp_path / "root").open(str(path))


async def test_an_entry_that_does_not_structure_fails_when_read(tmp_path: Path) -> None:
    path = tmp_path / "2026-01-01T00-00-00-000Z_s1.jsonl"
    entry = {"kind": "entry", "id": "e1", "seq": 1, "parentId": None, "timestamp": 1}
    tip = {"kind": "value", "op": "set", "seq": 2, "namespace": "pi.branch.tip", "key": "main"}
    write_file(path, [{**entry, "type": "message", "message": {"role": 5}}, {**tip, "value": "e1"}])
    session = await JsonlSessionStore(tmp_path / "root").open(str(path), read_only=True)
    assert session.leaf_id == "e1"
    with pytest.raises(SessionFormatError, match="entry 'e1'"):
        session.build_context()


@pytest.mark.parametrize(
    ("rows", "error"),
    [
        ([("a", None, 2, "message"), ("b", "a", 1, "message")], "must increase"),
        ([("a", None, 1, "message"), ("a", None, 2, "message")], "duplicate"),
        ([("a", "zz", 1, "message")], "parent that does not exist"),
        ([("a", None, 1, "note")], "unknown session entry type"),
    ],
)
def test_a_database_index_is_checked_as_writes_are(
    rows: list[tuple[str, str | None, int, str]], error: str
) -> None:
    with pytest.raises(SessionFormatError, match=error):
        SessionState().index_entries(rows)


def test_a_saved_index_must_hold_arrays_of_one_length() -> None:
    state = SessionState()
    with pytest.raises(SessionFormatError, match="different lengths"):
        state.restore_index(["a"], array("i"), array("q", [1]), bytearray(1))
    with pytest.raises(SessionFormatError, match="twice"):
        state.restore_index(["a", "a"], array("i", [-1, 0]), array("q", [1, 2]), bytearray(2))


@pytest.mark.usefixtures("small_index")
async def test_a_file_pi_appended_to_after_the_index_reads_as_pi_left_it(
    pi_node_modules: Path, tmp_path: Path, scanned: list[int]
) -> None:
    store = JsonlSessionStore(tmp_path)
    session = await long_session(store, 20, compact_at=10)
    await session.close()
    assert session.path is not None
    pi = await run_pi(pi_node_modules, "read", session.path, "from pi")  # Pi appends
    scanned.clear()
    again = await store.open(session.id)
    assert scanned  # Pi's lines, scanned on top of the index
    assert min(scanned) > 22  # (not the lines the index covers)
    assert again.leaf_id == pi["tip"]
    assert again.build_context().messages[-1].content == "from pi"
    expected = _session_from(full_load(session.path), again)
    assert facts(again) == facts(expected)
    await again.close()
