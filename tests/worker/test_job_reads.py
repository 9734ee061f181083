"""A job reads its states from the whole session, which a resumed session reads back from
storage: in a worker thread, not on the event loop's (no services needed: any store)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import trio
from _structurings import record_structurings

from pitrio import UserMessage
from pitrio.harness import JsonlSessionStore
from pitrio.worker._jobs import JOB_ENTRY, _job_facts


async def test_a_resumed_job_reads_its_entries_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JsonlSessionStore(tmp_path)
    session = await store.create(cwd="/p")
    await session.append_custom(JOB_ENTRY, {"key": "k", "state": "started"})
    await session.append_message(UserMessage(content="go", timestamp=1))
    await session.append_compaction("earlier work", tokens_before=10)
    await session.append_message(UserMessage(content="more", timestamp=2))
    await session.close()

    threads = record_structurings(monkeypatch)
    with trio.fail_after(30):
        resumed = await store.open(session.id)
        try:
            at_open = len(threads)
            assert await _job_facts(resumed, "k") == (["started"], True)
        finally:
            await resumed.close()
    # The job's entries are before the compaction: the open did not read them, the job did.
    assert len(threads) > at_open
    assert threading.main_thread() not in threads
