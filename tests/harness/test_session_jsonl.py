"""The JSONL session files: Pi's layout, torn last lines, locks across processes, v3."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import given, strategies as st

from pitrio import UserMessage
from pitrio.harness import (
    JsonlSessionStore,
    Session,
    SessionFormatError,
    SessionLockedError,
    SessionRecoveredWarning,
    SqliteSessionStore,
    default_sessions_root,
)
from pitrio.harness._jsonl import session_directory_name, session_file_name

DATA = Path(__file__).parent / "data" / "sessions"


def user(text: str) -> UserMessage:
    return UserMessage(content=text, timestamp=1)


def session_path(store: JsonlSessionStore, session: Session) -> Path:
    (path,) = Path(store.directory(session.cwd)).glob(f"*_{session.id}.jsonl")
    return path


def test_directory_and_file_names_follow_pi() -> None:
    assert session_directory_name("/home/user/project") == "--home-user-project--"
    assert session_directory_name("C:\\Users\\me\\app") == "--C--Users-me-app--"
    assert session_file_name(1767225601000, "abc") == "2026-01-01T00-00-01-000Z_abc.jsonl"
    assert session_file_name(1767225601007, "a/b c") == "2026-01-01T00-00-01-007Z_a%2Fb%20c.jsonl"


def test_default_root_uses_the_platform_data_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PITRIO_SESSIONS_DIR", str(tmp_path / "override"))
    assert default_sessions_root() == str(tmp_path / "override")
    assert JsonlSessionStore().root == str(tmp_path / "override")
    monkeypatch.delenv("PITRIO_SESSIONS_DIR")
    if sys.platform.startswith("linux"):
        monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
        assert default_sessions_root() == str(tmp_path / "xdg" / "pitrio" / "sessions")
        monkeypatch.delenv("XDG_DATA_HOME")
        assert default_sessions_root() == os.path.expanduser("~/.local/share/pitrio/sessions")


async def test_the_file_is_pi_shaped(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    session = await store.create(cwd="/home/user/project")
    entry_id = await session.append_message(user("hi"))
    await session.append_label(entry_id, "first")
    await session.close()
    path = session_path(store, session)
    assert path.parent.name == "--home-user-project--"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-\d{3}Z_[0-9a-f-]{36}\.jsonl", path.name)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0] == {
        "v": 4,
        "kind": "header",
        "id": session.id,
        "storageVersion": 1,
        "createdAt": session.created_at,
        "cwd": "/home/user/project",
    }
    entry, tip = lines[1]  # one transaction: the entry and the moved tip
    assert entry == {
        "kind": "entry",
        "id": entry_id,
        "parentId": None,
        "type": "message",
        "message": {"role": "user", "content": "hi", "timestamp": 1},
        "seq": 1,
        "timestamp": entry["timestamp"],
    }
    assert tip == {
        "kind": "value",
        "op": "set",
        "seq": 2,
        "namespace": "pi.branch.tip",
        "key": "main",
        "value": entry_id,
    }
    assert lines[2] == {
        "kind": "value",
        "op": "set",
        "seq": 3,
        "namespace": "pi.entry.label",
        "key": entry_id,
        "value": "first",
    }


async def _write_sample(root: Path, n: int = 6) -> tuple[Path, JsonlSessionStore, Session]:
    store = JsonlSessionStore(root)
    session = await store.create(cwd="/w")
    for i in range(n):
        await session.append_message(user(f"message {i} ✓"))
        if i == 2:
            await session.append_custom("note", {"i": i})
    await session.close()
    return session_path(store, session), store, session


def _expected_after_cut(data: bytes, cut: int) -> tuple[list[str], str | None]:
    """Entry ids and tip held by the complete lines of data[:cut]."""
    complete = data[: data[:cut].rfind(b"\n") + 1]
    ids: list[str] = []
    tip = None
    for line in complete.splitlines()[1:]:
        value = json.loads(line)
        for write in value if isinstance(value, list) else [value]:
            if write["kind"] == "entry":
                ids.append(write["id"])
            elif write["namespace"] == "pi.branch.tip":
                tip = write["value"]
    return ids, tip


@given(st.data())
def test_a_file_cut_at_any_byte_keeps_every_complete_entry(
    tmp_path_factory: pytest.TempPathFactory, data: Any
) -> None:
    root = tmp_path_factory.mktemp("cut")

    async def main() -> None:
        path, store, _ = await _write_sample(root)
        full = path.read_bytes()
        header_end = full.index(b"\n") + 1
        cut = data.draw(st.integers(min_value=header_end, max_value=len(full)), label="cut")
        path.write_bytes(full[:cut])
        ids, tip = _expected_after_cut(full, cut)
        kept = full[:cut].rfind(b"\n") + 1
        torn = not full[:cut].endswith(b"\n")
        if torn:
            with pytest.warns(SessionRecoveredWarning, match="torn last line"):
                session = await store.open(path)
            assert session.recovered is not None
            assert f"after byte {kept}" in session.recovered
        else:
            session = await store.open(path)
            assert session.recovered is None
        assert [e.id for e in session.entries] == ids
        assert session.leaf_id == tip
        # The torn bytes are gone from the file, so the next append starts a clean line.
        assert path.read_bytes() == full[:kept]
        new = await session.append_message(user("after the crash"))
        await session.close()
        again = await store.open(path)
        assert [e.id for e in again.entries] == [*ids, new]
        assert again.recovered is None
        await again.close()

    trio.run(main)


async def test_a_file_cut_inside_the_header_is_not_a_session(tmp_path: Path) -> None:
    path, store, _ = await _write_sample(tmp_path)
    full = path.read_bytes()
    path.write_bytes(full[:10])
    with pytest.raises(SessionFormatError, match="no complete header"):
        await store.open(path)


async def test_a_damaged_complete_line_is_an_error_naming_the_line(tmp_path: Path) -> None:
    path, store, _ = await _write_sample(tmp_path)
    lines = path.read_bytes().split(b"\n")
    lines[2] = b'{"kind":"entry","broken'
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(SessionFormatError, match=r"line 3: not valid JSON"):
        await store.open(path)
    lines[2] = (
        b'{"kind":"entry","id":"x","parentId":"nobody","type":"custom","customType":"c","seq":99,"timestamp":0}'
    )
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(SessionFormatError, match=r"line 3: .*parent that does not exist: 'nobody'"):
        await store.open(path)


async def test_not_a_session_file(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text('{"hello": "world"}\n')
    with pytest.raises(SessionFormatError, match="not a session header"):
        await JsonlSessionStore(tmp_path).open(path)


LOCK_SCRIPT = """
import sys, trio
from pitrio.harness import JsonlSessionStore, SqliteSessionStore, SessionLockedError
kind, where, sid = sys.argv[1:]
async def main():
    store = JsonlSessionStore(where) if kind == "jsonl" else SqliteSessionStore(where)
    try:
        session = await store.open(sid)
    except SessionLockedError as exc:
        print("locked:", exc)
        return
    await session.append_message(__import__("pitrio").UserMessage(content="from the other process"))
    await session.close()
    print("wrote")
trio.run(main)
"""


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
async def test_another_process_cannot_open_a_session_being_written(
    tmp_path: Path, kind: str
) -> None:
    where = str(tmp_path / ("sessions" if kind == "jsonl" else "s.db"))
    store = JsonlSessionStore(where) if kind == "jsonl" else SqliteSessionStore(where)
    session = await store.create()
    await session.append_message(user("mine"))
    await session.flush()

    async def other() -> str:
        result = await trio.run_process(
            [sys.executable, "-c", LOCK_SCRIPT, kind, where, session.id], capture_stdout=True
        )
        return result.stdout.decode()

    out = await other()
    assert out.startswith("locked:")
    assert "close it there first" in out
    await session.close()
    assert await other() == "wrote\n"
    again = await store.open(session.id)
    assert [e.message.content for e in again.entries] == ["mine", "from the other process"]  # type: ignore[union-attr]
    await again.close()


async def test_two_stores_in_one_process_refuse_each_other(tmp_path: Path) -> None:
    session = await JsonlSessionStore(tmp_path).create()
    with pytest.raises(SessionLockedError, match=session.id):
        await JsonlSessionStore(tmp_path).open(session.id)
    await session.close()


async def test_legacy_v3_file_is_upgraded_on_the_first_flush(tmp_path: Path) -> None:
    directory = tmp_path / "--home-user-project--"
    directory.mkdir()
    path = directory / "2025-12-01T10-00-00-000Z_5f0c2a34-7d0e-4a6b-9c1d-2e3f4a5b6c7d.jsonl"
    shutil.copy(DATA / "legacy-v3.jsonl", path)
    store = JsonlSessionStore(tmp_path)
    (info,) = await store.list()
    assert info.id == "5f0c2a34-7d0e-4a6b-9c1d-2e3f4a5b6c7d"
    assert info.cwd == "/home/user/project"
    session = await store.open(info.id)
    before = list(session.build_context().messages)
    await session.flush()  # nothing new: the file stays v3
    assert path.read_bytes() == (DATA / "legacy-v3.jsonl").read_bytes()
    new = await session.append_message(user("now in v4"))
    await session.close()
    first = json.loads(path.read_text().splitlines()[0])
    assert first["kind"] == "header"
    assert first["v"] == 4
    assert first["id"] == info.id
    assert not list(directory.glob("*.tmp"))
    again = await store.open(info.id)
    assert list(again.build_context().messages) == [*before, user("now in v4")]
    assert again.leaf_id == new
    assert again.labels == session.labels
    usage_rows = [r for r in again.usage_rows if r.get("details") == {"source": "v3-import"}]
    assert len(usage_rows) == 1
    assert usage_rows[0]["usage"]["totalTokens"] == 64  # 19 + 45: the two assistant replies
    await again.close()


async def test_a_failed_write_leaves_no_half_line_and_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pitrio.harness import _jsonl

    store = JsonlSessionStore(tmp_path)
    session = await store.create()
    first = await session.append_message(user("saved"))
    real = _jsonl._write_all

    def half_then_fail(fd: int, data: bytes) -> None:
        real(fd, data[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_jsonl, "_write_all", half_then_fail)
    with pytest.raises(OSError, match="No space left"):
        await session.append_message(user("disk full while writing this"))
    second = session.leaf_id  # kept in the session, waiting to be written
    assert session.dirty
    data = await trio.Path(session.path or "").read_bytes()
    assert len(data.splitlines()) == 2  # the header and "saved": no half line
    monkeypatch.setattr(_jsonl, "_write_all", real)
    await session.close()
    again = await store.open(session.id)
    assert again.recovered is None
    assert [e.id for e in again.entries] == [first, second]
    await again.close()


@pytest.mark.parametrize("store_kind", ["jsonl", "pi"])
async def test_appends_and_a_save_point_each_take_one_worker_thread_hop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store_kind: str
) -> None:
    """Blocking file calls run in worker threads: an append is one hop, a save point's
    write and sync together one more (through Trio's thread cache, not ``to_thread``);
    what each wrote is on disk when it returns."""
    from pitrio.harness import PiSessionStore, _worker

    hops: list[str] = []
    real = _worker.run_sync

    async def counting(fn: Any, *args: Any) -> Any:
        hops.append(getattr(fn, "__name__", repr(fn)))
        return await real(fn, *args)

    async def refused(fn: Any, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"a write hopped through to_thread: {fn!r}")

    store: Any = (
        JsonlSessionStore(tmp_path, fsync="flush")
        if store_kind == "jsonl"
        else PiSessionStore(tmp_path, fsync="flush")
    )
    session = await store.create()
    monkeypatch.setattr(_worker, "run_sync", counting)
    monkeypatch.setattr(trio.to_thread, "run_sync", refused)
    await session.append_message(user("small"))
    assert hops == ["_append_sync"]
    assert "small" in await trio.Path(session.path or "").read_text()
    await session.append_message(user("at the save point"), write=False)
    await session.flush()  # the save point: its write and sync in one hop
    assert hops == ["_append_sync", "_append_and_sync_sync"]
    monkeypatch.undo()
    await session.close()
    again = await store.open(session.id)
    assert len(again.entries) == 2
    await again.close()


async def test_ids_that_end_like_another_id_are_told_apart(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    long = await store.create(session_id="x_abc")
    await long.close()
    short = await store.create(session_id="abc")  # not taken: "x_abc" is another id
    await short.append_message(user("short"))
    await short.close()
    again = await store.open("abc")
    assert again.id == "abc"
    assert len(again.entries) == 1
    await again.close()
    other = await store.open("x_abc")
    assert other.entries == ()
    await other.close()


async def test_v3_records_without_a_time_still_load(tmp_path: Path) -> None:
    path = tmp_path / "old.jsonl"
    path.write_text(
        '{"type":"session","version":3,"id":"s1","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"}\n'
        '{"type":"message","id":"u1","parentId":null,"message":{"role":"user","content":"hi"}}\n'
        '{"type":"message","id":"a1","parentId":"u1","timestamp":"not a date",'
        '"message":{"role":"assistant","content":[{"type":"text","text":"yo"}],"stopReason":"stop"}}\n'
    )
    session = await JsonlSessionStore(tmp_path).open(path)
    assert [e.timestamp for e in session.entries] == [0, 0]
    assert [m.role for m in session.build_context().messages] == ["user", "assistant"]
    await session.close()


async def test_a_read_only_open_leaves_a_torn_file_alone(tmp_path: Path) -> None:
    path, store, session = await _write_sample(tmp_path)
    full = path.read_bytes()
    path.write_bytes(full[:-5])
    with pytest.warns(SessionRecoveredWarning):
        reader = await store.open(path, read_only=True)
    assert reader.recovered is not None
    await reader.close()
    assert path.read_bytes() == full[:-5]  # only a writer repairs the file
    with pytest.warns(SessionRecoveredWarning):
        writer = await store.open(session.id)
    await writer.close()
    assert path.read_bytes() == full[: full[:-5].rfind(b"\n") + 1]
