"""The cluster view reads a session's jobs and history in a worker thread: they are in
entries of the whole session, which an open reads back from storage (any store)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import trio
from _structurings import record_structurings

from pitrio import UserMessage
from pitrio.harness import JsonlSessionStore
from pitrio.web._cluster import _read_view
from pitrio.worker._jobs import JOB_ENTRY


async def test_the_cluster_view_reads_a_resumed_session_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JsonlSessionStore(tmp_path)
    session = await store.create(cwd="/p")
    await session.append_custom(JOB_ENTRY, {"key": "a", "state": "started"})
    await session.append_message(UserMessage(content="first", timestamp=1))
    await session.append_custom(JOB_ENTRY, {"key": "a", "state": "done"})
    await session.append_compaction("earlier work", tokens_before=10)
    await session.append_custom(JOB_ENTRY, {"key": "b", "state": "started"})
    await session.append_message(UserMessage(content="second", timestamp=2))
    await session.close()

    threads = record_structurings(monkeypatch)
    with trio.fail_after(30):
        resumed = await store.open(session.id, read_only=True)
        try:
            at_open = len(threads)
            ended, messages = await _read_view(resumed)
        finally:
            await resumed.close()
    # Job "b" runs: its prompt is left to its events; the history ends at the compaction.
    assert ended == {"a"}
    assert [m.role for m in messages] == ["compactionSummary"]
    assert len(threads) > at_open  # job "a"'s entries are before the compaction
    assert threading.main_thread() not in threads
