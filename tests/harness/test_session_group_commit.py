"""Group commit: appends that arrive while a write is in flight go out together in the
next write (one worker-thread hop), and each append still returns only once its change
is in storage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from pitrio import UserMessage
from pitrio.harness import JsonlSessionStore, MessageEntry, Session, SqliteSessionStore


def file_holds(path: str, text: str) -> bool:
    return text in Path(path).read_text()


def make_store(kind: str, where: Path) -> Any:
    if kind == "jsonl":
        return JsonlSessionStore(where / "s", fsync="never")
    return SqliteSessionStore(where / "s.db", fsync="never")


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
async def test_concurrent_appends_share_one_write(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store(kind, tmp_path)
    session: Session = await store.create(cwd="/p")
    writes: list[int] = []
    writer = type(session._writer)
    write = writer.write

    async def counted(self: Any, s: Session, transactions: Any) -> None:
        writes.append(len(transactions))
        await write(self, s, transactions)

    monkeypatch.setattr(writer, "write", counted)
    returned: list[str] = []

    async def append(i: int) -> None:
        await session.append_message(UserMessage(content=f"message {i}", timestamp=i))
        if kind == "jsonl":
            assert session.path is not None
            assert file_holds(session.path, f"message {i}")  # written before it returned
        returned.append(f"message {i}")

    async with trio.open_nursery() as nursery:
        for i in range(10):
            nursery.start_soon(append, i)
    assert len(returned) == 10
    # Ten appends, at most two worker-thread hops: the changes committed while a write
    # waited for its turn or was in flight go out together.
    assert sum(writes) == 10
    assert len(writes) <= 2
    await session.close()
    again = await store.open(session.id, read_only=True)
    contents = sorted(str(e.message.content) for e in again.entries if isinstance(e, MessageEntry))
    assert contents == sorted(returned)
    if isinstance(store, SqliteSessionStore):
        await store.aclose()
