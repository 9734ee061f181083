"""The durable queue, usage rows, idle callbacks and watching, as Pi's lane has them.

``enqueue`` / ``next_run`` / ``cancel_queued`` keep messages in the session as Pi's lane
does (``pi.pending.entry`` payloads, the lane state's ``inbox``), so a queued message
survives an abort and the death of its process; a run takes them under the entry ids
they were given. Pi's own harness takes a message pitrio queued, and pitrio one Pi
queued (``node/pi_prompt.mjs``). ``record_usage`` writes Pi's usage row;
``run_when_idle`` and ``watch`` follow Pi's ``runWhenIdle`` and ``watch``.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import trio

from pitrio import (
    AgentBusyError,
    AssistantMessage,
    Model,
    TextContent,
    Tool,
    ToolResult,
    Usage,
    UsageError,
    UserMessage,
    text_result,
)
from pitrio.harness import (
    Harness,
    InMemorySessionStore,
    JsonlSessionStore,
    MessageEntry,
    QueuedMessage,
    Session,
    restore_lane,
)
from pitrio.testing import ScriptedModel, ScriptedResponse

from .test_operations import _pi

MODEL = Model(id="scripted", api="scripted", provider="local", context_window=200_000)


def _texts(session: Session) -> list[tuple[str, str]]:
    out = []
    for m in session.build_context().messages:
        content = m.content if not isinstance(m.content, str) else ()
        out.append((m.role, " ".join(getattr(b, "text", "") for b in content)))
    return out


def _inbox(session: Session) -> list[Any]:
    return list(session.get_value("pi.lane.state", "main")["inbox"])


async def _session() -> Session:
    return await InMemorySessionStore().create(cwd="/w", session_id="s")


async def test_a_next_run_message_is_durable_and_taken_by_the_next_prompt() -> None:
    session = await _session()
    harness = Harness(
        model=MODEL, stream_fn=ScriptedModel([ScriptedResponse.text("done")]), session=session
    )
    events: list[Any] = []
    harness.subscribe(events.append)
    entry_id = await harness.next_run("first, this")
    # In the session as Pi keeps it.
    assert _inbox(session) == [{"entryId": entry_id, "kind": "nextRun"}]
    payload = session.get_value("pi.pending.entry", entry_id)
    assert payload["type"] == "message"
    assert payload["payload"]["content"] == [{"type": "text", "text": "first, this"}]
    (item,) = harness.queued
    assert (item.entry_id, item.kind) == (entry_id, "next_run")
    assert [e.type for e in events] == ["queue_update"]
    assert events[0].queued == harness.queued
    await harness.prompt("then this")
    assert _texts(session) == [
        ("user", "first, this"),
        ("user", "then this"),
        ("assistant", "done"),
    ]
    # Under its reserved id; out of the queue; not one of the prompt's entries.
    entry = session.get_entry(entry_id)
    assert isinstance(entry, MessageEntry)
    assert _inbox(session) == []
    assert session.get_value("pi.pending.entry", entry_id) is None
    assert harness.queued == ()
    assert sum(e.type == "queue_update" for e in events) == 2


async def test_queue_modes_decide_what_a_prompt_takes() -> None:
    session = await _session()
    harness = Harness(
        model=MODEL,
        stream_fn=ScriptedModel([ScriptedResponse.text("one"), ScriptedResponse.text("two")]),
        session=session,
    )
    await harness.enqueue("steer", "s1")
    await harness.enqueue("steer", "s2")
    await harness.enqueue("follow_up", "f1")
    await harness.prompt("p")
    # One steering and one follow-up message per run ("one-at-a-time"), Pi's order.
    assert [t for _, t in _texts(session)] == ["s1", "f1", "p", "one"]
    assert [q.message.content[0].text for q in harness.queued] == ["s2"]
    harness.agent.steering_mode = "all"
    await harness.prompt("q")
    assert [t for _, t in _texts(session)][-3:] == ["s2", "q", "two"]


async def test_a_steering_message_queued_mid_tool_is_delivered_under_its_id() -> None:
    session = await _session()
    ids: list[str] = []
    harness: Harness

    async def step(call_id: str, params: Any, signal: Any, on_update: Any) -> ToolResult:
        ids.append(await harness.enqueue("steer", "change of plan"))
        assert harness.queued[0].kind == "steer"
        return text_result("stepped")

    harness = Harness(
        model=MODEL,
        stream_fn=ScriptedModel(
            [ScriptedResponse.tool_calls(("c1", "step", {})), ScriptedResponse.text("ok")]
        ),
        session=session,
        tools=[Tool(name="step", execute=step)],
    )
    await harness.prompt("go")
    roles = [r for r, _ in _texts(session)]
    assert roles == ["user", "assistant", "toolResult", "user", "assistant"]
    assert _texts(session)[3] == ("user", "change of plan")
    assert session.leaf_id is not None
    assert isinstance(session.get_entry(ids[0]), MessageEntry)
    assert _inbox(session) == []


async def test_queued_messages_survive_an_abort() -> None:
    session = await _session()
    harness: Harness
    started = trio.Event()

    async def step(call_id: str, params: Any, signal: Any, on_update: Any) -> ToolResult:
        await harness.enqueue("steer", "steered")
        await harness.enqueue("follow_up", "do not lose me")
        started.set()
        await trio.sleep_forever()
        raise AssertionError

    harness = Harness(
        model=MODEL,
        stream_fn=ScriptedModel(
            [ScriptedResponse.tool_calls(("c1", "step", {})), ScriptedResponse.text("ok")]
        ),
        session=session,
        tools=[Tool(name="step", execute=step)],
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(harness.prompt, "go")
        await started.wait()
        harness.abort()
    # The steering message is delivered after the aborted tool (as Pi's loop does); the
    # follow-up, which no turn took, stays queued, in the session, not in the Agent.
    texts = [t for _, t in _texts(session)]
    assert texts[2:4] == ["Operation aborted", "steered"]
    assert [q.message.content for q in harness.queued] == [(TextContent(text="do not lose me"),)]
    assert harness.agent.queued_follow_up == ()
    await harness.prompt("again")
    assert [t for _, t in _texts(session)][3:6] == ["steered", "do not lose me", "again"]
    assert harness.queued == ()


async def test_a_queued_message_survives_the_death_of_its_process(tmp_path: Path) -> None:
    root, copy = tmp_path / "run", tmp_path / "copy"
    session = await JsonlSessionStore(root).create(cwd="/w", session_id="crash")
    harness: Harness
    queued = trio.Event()

    async def step(call_id: str, params: Any, signal: Any, on_update: Any) -> ToolResult:
        await harness.enqueue("steer", "after the crash")
        queued.set()
        await trio.sleep_forever()
        raise AssertionError

    harness = Harness(
        model=MODEL,
        stream_fn=ScriptedModel([ScriptedResponse.tool_calls(("c1", "step", {}))]),
        session=session,
        tools=[Tool(name="step", execute=step, replay="safe")],
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(harness.prompt, "go")
        with trio.fail_after(10):
            await queued.wait()
        shutil.copytree(root, copy)  # what a SIGKILL leaves
        nursery.cancel_scope.cancel()
    await session.close()

    restored = await JsonlSessionStore(copy).open("crash")
    assert [i["kind"] for i in restore_lane(restored).inbox] == ["steer"]

    async def replayed(call_id: str, params: Any, signal: Any, on_update: Any) -> ToolResult:
        return text_result("stepped")

    again = Harness(
        model=MODEL,
        stream_fn=ScriptedModel([ScriptedResponse.text("ok")]),
        session=restored,
        tools=[Tool(name="step", execute=replayed, replay="safe")],
    )
    assert [q.kind for q in again.queued] == ["steer"]
    await again.resume()
    # The recovered run delivers it after its turn, as the killed one would have.
    assert _texts(restored)[2:] == [
        ("toolResult", "stepped"),
        ("user", "after the crash"),
        ("assistant", "ok"),
    ]
    assert again.queued == ()
    await restored.close()


async def test_cancel_queued() -> None:
    session = await _session()
    harness: Harness
    results: list[str] = []

    async def step(call_id: str, params: Any, signal: Any, on_update: Any) -> ToolResult:
        entry_id = await harness.enqueue("follow_up", "never mind")
        queued_before = len(harness.agent.queued_follow_up)
        results.append(await harness.cancel_queued(entry_id))
        results.append(f"{queued_before} -> {len(harness.agent.queued_follow_up)}")
        return text_result("stepped")

    harness = Harness(
        model=MODEL,
        stream_fn=ScriptedModel(
            [
                ScriptedResponse.tool_calls(("c1", "step", {})),
                ScriptedResponse.text("ok"),
                ScriptedResponse.text("two"),
            ]
        ),
        session=session,
        tools=[Tool(name="step", execute=step)],
    )
    await harness.prompt("go")
    assert results == ["cancelled", "1 -> 0"]
    assert "never mind" not in [t for _, t in _texts(session)]
    taken = await harness.next_run("taken")
    await harness.prompt("p")
    assert await harness.cancel_queued(taken) == "already_consumed"
    assert await harness.cancel_queued("no-such-id") == "not_found"


async def test_the_queue_refuses_what_it_cannot_keep() -> None:
    without = Harness(model=MODEL, stream_fn=ScriptedModel([]))
    with pytest.raises(UsageError, match="needs a session"):
        await without.next_run("x")
    assert without.queued == ()
    harness = Harness(model=MODEL, stream_fn=ScriptedModel([]), session=await _session())
    with pytest.raises(UsageError, match="unknown queue kind"):
        await harness.enqueue("later", "x")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="must contain text or an image"):
        await harness.next_run("")
    with pytest.raises(UsageError, match="pending assistant"):
        await harness.next_run(
            AssistantMessage(api="a", provider="p", model="m", stop_reason="pending")
        )
    message = UserMessage(content=(TextContent(text="as a message"),), timestamp=1)
    entry_id = await harness.next_run(message)
    assert harness.queued == (QueuedMessage(entry_id=entry_id, kind="next_run", message=message),)


async def test_record_usage_writes_pis_usage_row(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    session = await store.create(cwd="/w", session_id="u")
    harness = Harness(
        model=MODEL, stream_fn=ScriptedModel([ScriptedResponse.text("done")]), session=session
    )
    await harness.prompt("hi")
    usage = Usage(input=10, output=5, total_tokens=15)
    leaf = session.leaf_id
    usage_id = await harness.record_usage(usage, entry_id=leaf, details={"why": "cache"})
    await harness.record_usage({"input": 1, "output": 0})
    await session.close()
    reopened = await store.open("u")
    rows = [r for r in reopened.usage_rows if r.get("adjustment")]
    assert rows[0]["id"] == usage_id
    assert rows[0]["entryId"] == leaf
    assert rows[0]["details"] == {"why": "cache"}
    assert rows[0]["usage"]["input"] == 10
    assert rows[1]["usage"] == {"input": 1, "output": 0}
    assert "entryId" not in rows[1]
    await reopened.close()


async def test_run_when_idle_waits_for_the_run_and_holds_the_harness() -> None:
    session = await _session()
    harness = Harness(
        model=MODEL,
        stream_fn=ScriptedModel([ScriptedResponse.text("a"), ScriptedResponse.text("b")]),
        session=session,
    )
    order: list[str] = []

    async def callback() -> None:
        order.append(f"callback after {len(harness.messages)} messages")
        with pytest.raises(AgentBusyError):
            await harness.prompt("refused")
        await trio.sleep(1)
        order.append("callback done")

    async with trio.open_nursery() as nursery:
        await nursery.start(harness.prompt, "first")
        nursery.start_soon(harness.run_when_idle, callback)
        await trio.sleep(0.5)
        order.append(f"busy: {harness.is_busy}")
    assert order == ["callback after 2 messages", "busy: True", "callback done"]
    assert harness.is_busy is False
    await harness.prompt("second")


async def test_watch_gives_a_snapshot_then_the_events() -> None:
    session = await _session()
    harness = Harness(
        model=MODEL,
        stream_fn=ScriptedModel([ScriptedResponse.text("a"), ScriptedResponse.text("b")]),
        session=session,
    )
    await harness.prompt("first")
    await harness.next_run("queued")
    seen: list[str] = []
    async with harness.watch() as watcher:
        snapshot = watcher.snapshot
        assert len(snapshot.messages) == 2
        assert [q.kind for q in snapshot.queued] == ["next_run"]
        assert snapshot.operation is None
        assert not snapshot.busy
        await harness.prompt("second")
        async for event in watcher:
            seen.append(event.type)
            if event.type == "settled":
                break
    assert seen[0] == "agent_start"
    assert seen.index("queue_update") < seen.index("turn_end")  # the prompt took it
    assert seen[-1] == "settled"


async def test_pi_takes_the_message_pitrio_queued_and_pitrio_the_one_pi_queued(
    tmp_path: Path, pi_node_modules: Path
) -> None:
    store = JsonlSessionStore(tmp_path)
    session = await store.create(cwd="/w", session_id="q")
    harness = Harness(
        model=MODEL, stream_fn=ScriptedModel([ScriptedResponse.text("done")]), session=session
    )
    await harness.set_model(MODEL)
    await harness.prompt("hello")
    queued_id = await harness.next_run("from pitrio")
    await harness.enqueue("steer", "steer from pitrio")
    await session.close()
    path = session.path
    assert path is not None
    pi = await _pi(pi_node_modules, "prompt", str(path), "pi's turn", "from pi")
    assert pi["before"] == [["nextRun", "from pitrio"], ["steer", "steer from pitrio"]]
    assert pi["result"] == "completed"
    assert pi["messages"] == [
        ["user", "hello"],
        ["assistant", "done"],
        ["user", "from pitrio"],
        ["user", "steer from pitrio"],
        ["user", "pi's turn"],
        ["assistant", "finished"],
    ]
    assert pi["after"] == [["nextRun", "from pi"]]
    session = await store.open("q")
    assert isinstance(session.get_entry(queued_id), MessageEntry)
    harness = Harness(
        model=MODEL, stream_fn=ScriptedModel([ScriptedResponse.text("again")]), session=session
    )
    assert [(q.kind, q.message.content[0].text) for q in harness.queued] == [
        ("next_run", "from pi")
    ]
    await harness.prompt("pitrio's turn")
    assert [t for _, t in _texts(session)][-3:] == ["from pi", "pitrio's turn", "again"]
    await session.close()
