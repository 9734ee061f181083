"""The SQLite session store: WAL mode, all-or-nothing flushes, many sessions in one file."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import trio

from pitrio import UserMessage
from pitrio.harness import Session, SqliteSessionStore, _sqlite


def user(text: str) -> UserMessage:
    return UserMessage(content=text, timestamp=1)


async def test_the_database_is_in_wal_mode(tmp_path: Path) -> None:
    async with SqliteSessionStore(tmp_path / "s.db") as store:
        session = await store.create()
        await session.close()
    with sqlite3.connect(tmp_path / "s.db") as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def _dirty(session: Session) -> bool:
    return session.dirty  # a call: mypy would keep the property narrowed across writes


async def test_a_failed_write_writes_nothing_and_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SqliteSessionStore(tmp_path / "s.db")
    session = await store.create()
    first = await session.append_message(user("one"))
    real = _sqlite._dumps
    calls = 0

    def fail_on_the_second_entry(value: object) -> str:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise OSError("disk I/O error")
        return real(value)

    monkeypatch.setattr(_sqlite, "_dumps", fail_on_the_second_entry)
    with pytest.raises(OSError, match="disk I/O"):  # the entry, then its tip: one transaction
        await session.append_message(user("two"))
    second = session.leaf_id
    assert _dirty(session)
    with sqlite3.connect(store.path) as db:  # the entry written before the failure was rolled back
        assert db.execute("SELECT count(*) FROM entries").fetchone() == (1,)
    monkeypatch.setattr(_sqlite, "_dumps", real)
    third = await session.append_message(user("three"))  # writes "two" first
    assert not _dirty(session)
    with sqlite3.connect(store.path) as db:
        assert db.execute("SELECT count(*) FROM entries").fetchone() == (3,)
    await session.close()
    again = await store.open(session.id)
    assert [e.id for e in again.entries] == [first, second, third]
    await again.close()
    await store.aclose()


async def test_sessions_written_at_once_through_two_stores_stay_apart(tmp_path: Path) -> None:
    a_store = SqliteSessionStore(tmp_path / "s.db")
    b_store = SqliteSessionStore(tmp_path / "s.db")
    a = await a_store.create(cwd="/a")
    b = await b_store.create(cwd="/b")

    async def write(session: Session, name: str) -> None:
        for i in range(25):
            await session.append_message(user(f"{name}{i}"))
            await session.flush()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(write, a, "a")
        nursery.start_soon(write, b, "b")
    await a.close()
    await b.close()
    for sid, name in ((a.id, "a"), (b.id, "b")):
        again = await a_store.open(sid)
        assert [m.content for m in again.build_context().messages] == [
            f"{name}{i}" for i in range(25)
        ]
        await again.close()
    assert {i.cwd for i in await b_store.list()} == {"/a", "/b"}
    await a_store.aclose()
    await b_store.aclose()
