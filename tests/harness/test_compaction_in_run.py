"""Compaction inside a run, and the run Pi starts after a compaction or navigation.

Pi 0.85.0's lane (``lane.js``, ``continueAfterStructural``): once ``lane.compact()`` or
``lane.navigateTree()`` has settled, and unless it was aborted, the lane accepts a run
with no prompt of its own: when the inbox holds steering, follow-up or next-run messages
the run takes them (as a prompt's start does) and goes on; with an empty inbox nothing
runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from pitrio import AssistantMessage, TextContent, UserMessage
from pitrio.harness import CompactionEntry, CompactionSettings, Harness, JsonlSessionStore
from pitrio.testing import ScriptedModel, ScriptedResponse

from .test_compaction_ops import MODEL, leftovers


def _text(message: Any) -> str:
    return "".join(c.text for c in message.content if isinstance(c, TextContent))


async def _two_turns(tmp_path: Path, stream_fn: Any) -> tuple[Any, Harness]:
    session = await JsonlSessionStore(tmp_path).create(cwd=str(tmp_path), session_id="s")
    harness = Harness(
        model=MODEL,
        stream_fn=stream_fn,
        session=session,
        compaction=CompactionSettings(keep_recent_tokens=1),
    )
    await harness.set_model(MODEL)
    for question, answer in (("first", "one"), ("second", "two")):
        await session.append_message(
            UserMessage(content=(TextContent(text=question),), timestamp=1)
        )
        reply = AssistantMessage(
            content=(TextContent(text=answer),),
            api="scripted",
            provider="local",
            model="scripted",
            stop_reason="stop",
            timestamp=1,
        )
        await session.append_message(reply)
    harness.agent.state.messages = list(session.build_context().messages)
    return session, harness


def _answers(context: Any) -> ScriptedResponse:
    last = _text(context.messages[-1])
    return ScriptedResponse.text(f"answer to {last}")


async def test_a_navigation_runs_the_messages_queued_for_the_next_run(tmp_path: Path) -> None:
    session, harness = await _two_turns(tmp_path, ScriptedModel(_answers))
    first_answer = session.get_branch()[1].id
    events: list[Any] = []
    harness.subscribe(events.append)
    await harness.enqueue("next_run", "third")
    end = await harness.navigate_tree(first_answer)
    assert end.status == "completed"
    kinds = [e.type for e in events]
    # The run starts after the navigation has ended, and settles before navigate_tree returns.
    assert kinds.index("navigation_end") < kinds.index("agent_start") < kinds.index("agent_end")
    branch = [e.message for e in session.get_branch() if hasattr(e, "message")]
    assert [_text(m) for m in branch] == ["first", "one", "third", "answer to third"]
    assert harness.queued == ()
    assert leftovers(session) == []
    await session.close()


async def test_a_compaction_runs_what_was_queued_while_it_summarised(tmp_path: Path) -> None:
    summary = ScriptedModel(lambda _: ScriptedResponse.text("SUMMARY"))
    harness: Harness | None = None
    summaries: list[Any] = []
    runs: list[Any] = []

    async def stream(model: Any, context: Any, options: Any) -> Any:
        if _text(context.messages[0]).startswith("<conversation>"):
            if not summaries:  # a follow-up is queued while the summary is asked
                assert harness is not None
                await harness.enqueue("follow_up", "later")
            summaries.append(context)
            return summary(model, context, options)
        runs.append(context)
        return ScriptedModel(_answers)(model, context, options)

    session, harness = await _two_turns(tmp_path, stream)
    end = await harness.compact()
    assert end.status == "completed"
    assert len(summaries) == 2  # (a split turn: its prefix is summarised too)
    assert [_text(m) for m in runs[0].messages][1:] == ["two", "later"]  # after the summary
    assert len(runs) == 1
    branch = session.get_branch()
    compaction = next(n for n, e in enumerate(branch) if isinstance(e, CompactionEntry))
    after = [_text(e.message) for e in branch[compaction + 1 :]]
    assert after == ["later", "answer to later"]
    assert harness.queued == ()
    assert leftovers(session) == []
    await session.close()


async def test_nothing_runs_after_an_aborted_compaction(tmp_path: Path) -> None:
    started = trio.Event()

    async def hanging(model: Any, context: Any, options: Any) -> Any:
        started.set()
        await trio.sleep_forever()

    session, harness = await _two_turns(tmp_path, hanging)
    ends: list[Any] = []
    async with trio.open_nursery() as nursery:

        async def run() -> None:
            ends.append(await harness.compact())

        nursery.start_soon(run)
        await started.wait()
        await harness.enqueue("follow_up", "later")
        harness.abort()
    assert ends[0].status == "aborted"
    assert [_text(q.message) for q in harness.queued] == ["later"]  # still queued
    assert len(session.get_branch()) == 4
    await session.close()


async def test_nothing_runs_after_a_navigation_with_an_empty_queue(tmp_path: Path) -> None:
    calls = 0

    async def counting(model: Any, context: Any, options: Any) -> Any:
        nonlocal calls
        calls += 1
        return ScriptedModel(_answers)(model, context, options)

    session, harness = await _two_turns(tmp_path, counting)
    end = await harness.navigate_tree(session.get_branch()[1].id)
    assert end.status == "completed"
    assert calls == 0
    assert len(session.get_branch()) == 2
    await session.close()
