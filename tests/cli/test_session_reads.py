"""The CLI's commands that read a whole resumed session (RPC ``get_entries``, ``get_tree``,
``get_session_stats``, ``get_fork_messages``; ``/tree``) read it in a worker thread, and
the JSON mode's compaction error reads only the branch's last entry: a resumed session
holds the active branch's context, and structures the other entries when they are read,
which must not block the event loop's thread."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import trio
from _structurings import record_structurings

from pitrio import TextContent, UserMessage
from pitrio.cli._json_mode import ALREADY_COMPACTED, NOTHING_TO_COMPACT, compaction_error
from pitrio.cli._rpc import _RpcServer
from pitrio.cli._slash import tree
from pitrio.harness import CompactionEnd, JsonlSessionStore, Session


class _Renderer:
    def __init__(self) -> None:
        self.said: list[str] = []

    def say(self, text: str) -> None:
        self.said.append(text)

    def error(self, text: str) -> None:  # pragma: no cover - a failure's message
        raise AssertionError(text)


@pytest.fixture
def structured(monkeypatch: pytest.MonkeyPatch) -> list[threading.Thread]:
    """The thread of each entry structured while the test runs."""
    return record_structurings(monkeypatch)


async def _resumed(
    tmp_path: Path, structured: list[threading.Thread], *, compact_last: bool = False
) -> Session:
    """A session whose first entries are before a compaction (the open does not read
    them), opened again (``structured`` counts from the open on)."""
    store = JsonlSessionStore(tmp_path)
    session = await store.create(cwd="/p")
    for n in range(6):
        text = (TextContent(text=f"early {n}"),)
        await session.append_message(UserMessage(content=text, timestamp=n))
    await session.append_compaction("earlier work", tokens_before=10)
    if not compact_last:
        await session.append_message(UserMessage(content="late", timestamp=9))
    await session.close()
    structured.clear()
    return await store.open(session.id)


async def test_rpc_commands_read_a_resumed_session_off_the_event_loop(
    tmp_path: Path, structured: list[threading.Thread]
) -> None:
    with trio.fail_after(30):
        session = await _resumed(tmp_path, structured)
        try:
            server = _RpcServer.__new__(_RpcServer)
            server.app = SimpleNamespace(  # type: ignore[assignment]
                session=session,
                model=SimpleNamespace(context_window=100_000),
                harness=SimpleNamespace(messages=[]),
            )
            at_open = len(structured)
            entries = await server.get_entries({})
            assert len(entries["entries"]) == 8
            tree_of = await server.get_tree({})
            assert len(tree_of["tree"]) == 1
            stats = await server.get_session_stats({})
            assert stats["userMessages"] == 7
            forks = await server.get_fork_messages({})
            assert [m["text"] for m in forks["messages"]][:2] == ["early 0", "early 1"]
        finally:
            await session.close()
    assert len(structured) > at_open  # the commands read the entries before the compaction
    assert threading.main_thread() not in structured


async def test_tree_reads_a_resumed_session_off_the_event_loop(
    tmp_path: Path, structured: list[threading.Thread]
) -> None:
    with trio.fail_after(30):
        session = await _resumed(tmp_path, structured)
        try:
            switched: list[Session] = []

            async def switch_session(to: Session) -> None:
                switched.append(to)

            app: Any = SimpleNamespace(
                session=session, switch_session=switch_session, harness=SimpleNamespace(messages=[])
            )
            renderer: Any = _Renderer()
            at_open = len(structured)
            await tree(app, renderer, "")
            assert "early 0" in renderer.said[0]
            first = session._state.ids[0]
            await tree(app, renderer, first)
            assert switched == [session]
            assert session.leaf_id == first
        finally:
            await session.close()
    assert len(structured) > at_open
    assert threading.main_thread() not in structured


@pytest.mark.parametrize("compact_last", [True, False])
async def test_a_declined_compaction_reads_only_the_branch_s_last_entry(
    tmp_path: Path, structured: list[threading.Thread], compact_last: bool
) -> None:
    with trio.fail_after(30):
        session = await _resumed(tmp_path, structured, compact_last=compact_last)
        try:
            at_open = len(structured)
            end = CompactionEnd(reason="manual", status="declined")
            expected = ALREADY_COMPACTED if compact_last else NOTHING_TO_COMPACT
            assert compaction_error(end, session) == expected
        finally:
            await session.close()
    assert len(structured) == at_open
