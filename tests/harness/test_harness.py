"""The Harness: per-turn state, sessions, save points, settling, compaction, overflow."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from pitrio import (
    AgentBusyError,
    Context,
    Model,
    StreamOptions,
    TextContent,
    Tool,
    ToolResult,
    Usage,
    UsageError,
    UserMessage,
    text_result,
)
from pitrio.harness import (
    CompactionEnd,
    CompactionSettings,
    Harness,
    HarnessEvent,
    InMemorySessionStore,
    Resources,
    Session,
    ToolContext,
    TurnState,
)
from pitrio.testing import ScriptedModel, ScriptedResponse

MODEL = Model(id="m", api="scripted", provider="scripted", context_window=1000)
OTHER = Model(id="m2", api="scripted", provider="scripted", context_window=1000)
ROOMY = Model(id="m", api="scripted", provider="scripted", context_window=200_000)
"""With Pi's default reserve (16384 tokens) a 1000-token window is always over the
compaction threshold; tests that are not about compaction use this model."""


class Recording:
    """A scripted stream function that also records the model and options of each request."""

    def __init__(self, responses: list[ScriptedResponse]) -> None:
        self.scripted = ScriptedModel(responses)
        self.models: list[str] = []
        self.options: list[StreamOptions] = []

    def __call__(self, model: Model, context: Context, options: StreamOptions) -> Any:
        self.models.append(model.id)
        self.options.append(options)
        return self.scripted(model, context, options)

    @property
    def requests(self) -> list[Context]:
        return self.scripted.requests


def _tool(name: str, action: Any = None) -> Tool:
    async def execute(call_id: str, params: Any, signal: Any, on_update: Any) -> ToolResult:
        if action is not None:
            await action()
        return text_result(f"{name} ran")

    return Tool(name=name, description=name, execute=execute, parameters={"type": "object"})


async def _session() -> tuple[InMemorySessionStore, Session]:
    store = InMemorySessionStore()
    return store, await store.create(cwd="/tmp")


def _types(events: list[HarnessEvent]) -> list[str]:
    return [e.type for e in events]


async def test_save_point_follows_each_turn_end_with_the_session_flushed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store, session = await _session()
    stream = Recording(
        [
            ScriptedResponse.tool_calls(("c1", "t", {})),
            ScriptedResponse.tool_calls(("c2", "t", {})),
            ScriptedResponse.text("done"),
        ]
    )
    harness = Harness(model=ROOMY, stream_fn=stream, session=session, tools=[_tool("t")])
    events: list[HarnessEvent] = []
    ended: list[Any] = []
    checks: list[tuple[bool, int, int]] = []

    def listener(event: HarnessEvent) -> None:
        events.append(event)
        if event.type == "message_end":
            ended.append(event.message)
        if event.type == "save_point":
            entries = [e for e in session.entries if e.type == "message"]
            checks.append((session.dirty, len(entries), len(ended)))
            assert event.entry_id == session.leaf_id

    harness.subscribe(listener)
    await harness.prompt("go")
    types = _types(events)
    turn_ends = [i for i, t in enumerate(types) if t == "turn_end"]
    assert len(turn_ends) == 3
    assert all(types[i + 1] == "save_point" for i in turn_ends)
    assert types.count("save_point") == 3
    # At each save point every message so far is in the session, and it is flushed.
    assert all(not dirty and stored == seen for dirty, stored, seen in checks)
    assert types[-2:] == ["agent_end", "settled"]
    # What was flushed is what a reader of the store sees.
    await session.close()
    reopened = await store.open(session.id)
    assert [e.message for e in reopened.entries if e.type == "message"] == ended


async def test_settled_is_last_and_the_harness_is_idle_by_then(
    autojump_clock: trio.testing.MockClock,
) -> None:
    harness = Harness(model=MODEL, stream_fn=ScriptedModel([ScriptedResponse.text("hi")]))
    states: list[bool] = []
    harness.subscribe(lambda e: states.append(harness.is_busy) if e.type == "settled" else None)
    async with trio.open_nursery() as nursery:
        await nursery.start(harness.prompt, "x")
        assert harness.is_busy
        with pytest.raises(AgentBusyError, match="busy"):
            await harness.prompt("y")
        await harness.wait_for_idle()
    assert states == [False]
    message = harness.messages[-1]
    assert message.text == "hi"


async def test_system_prompt_function_is_called_before_every_request(
    autojump_clock: trio.testing.MockClock,
) -> None:
    stream = Recording(
        [
            ScriptedResponse.tool_calls(("c1", "a", {})),
            ScriptedResponse.tool_calls(("c2", "b", {})),
            ScriptedResponse.text("done"),
        ]
    )
    seen: list[TurnState] = []
    harness: Harness

    async def switch() -> None:
        # Changes made while a tool runs apply from the next request on.
        if len(seen) == 1:
            await harness.set_model(OTHER)
            await harness.set_thinking_level("high")
            harness.set_active_tools(["b"])
        else:
            harness.set_active_tools(None)

    def system_prompt(turn: TurnState) -> str:
        seen.append(turn)
        names = ",".join(t.name for t in turn.tools)
        return f"{turn.model.id}/{turn.thinking_level}/{names}"

    harness = Harness(
        model=MODEL,
        stream_fn=stream,
        tools=[_tool("a", switch), _tool("b", switch)],
        system_prompt=system_prompt,
    )
    await harness.prompt("go")
    assert [r.system_prompt for r in stream.requests] == [
        "m/off/a,b",
        "m2/high/b",
        "m2/high/a,b",
    ]
    assert [[t.name for t in r.tools] for r in stream.requests] == [["a", "b"], ["b"], ["a", "b"]]
    assert stream.models == ["m", "m2", "m2"]
    assert [o.reasoning for o in stream.options] == [None, "high", "high"]
    assert harness.turn is seen[-1]


async def test_model_and_thinking_changes_are_session_entries(
    autojump_clock: trio.testing.MockClock,
) -> None:
    _, session = await _session()
    harness = Harness(model=MODEL, stream_fn=ScriptedModel([]), session=session)
    await harness.set_model(OTHER)
    await harness.set_thinking_level("low")
    assert session.model is not None
    assert (session.model.provider, session.model.model_id) == ("scripted", "m2")
    assert session.thinking_level == "low"



async def test_a_runs_first_lane_configuration_has_the_harness_thinking_level(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A session's lane configuration, written with a run's first prompt, records the
    level the harness runs at (as Pi's harness does; it recorded the session's, "off",
    so a continued session lost the level)."""
    store, session = await _session()
    reasoner = Model(id="r", api="scripted", provider="scripted", reasoning=True)
    answer = ScriptedModel([ScriptedResponse.text("ok")])
    harness = Harness(model=reasoner, stream_fn=answer, session=session, thinking_level="high")
    await harness.prompt("hi")
    assert session.thinking_level == "high"
    await session.close()
    reopened = await store.open(session.id)
    assert reopened.thinking_level == "high"
    await reopened.close()

async def test_tools_are_bound_to_the_tool_context(
    autojump_clock: trio.testing.MockClock,
) -> None:
    built: list[ToolContext] = []

    def factory(context: ToolContext) -> Tool:
        built.append(context)

        async def execute(call_id: str, params: Any, signal: Any, on_update: Any) -> ToolResult:
            return text_result(f"cwd={context.cwd} data={context.data_dir}")

        return Tool(name="where", execute=execute, parameters={"type": "object"})

    scripted = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("c1", "where", {})),
            ScriptedResponse.text("ok"),
            ScriptedResponse.tool_calls(("c2", "where", {})),
            ScriptedResponse.text("ok"),
        ]
    )
    harness = Harness(
        model=MODEL, stream_fn=scripted, tools=[factory], cwd="/work/a", data_dir="/data"
    )
    await harness.prompt("where?")
    assert len(built) == 1  # bound once, reused while the context is unchanged
    harness.set_tool_context(cwd="/work/b")
    await harness.prompt("and now?")
    results = [m for m in harness.messages if m.role == "toolResult"]
    assert [r.content[0].text for r in results] == [
        "cwd=/work/a data=/data",
        "cwd=/work/b data=/data",
    ]
    assert built[-1] == ToolContext(cwd="/work/b", data_dir="/data")


async def test_a_failing_system_prompt_function_ends_the_run_as_an_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    scripted = ScriptedModel([ScriptedResponse.text("never")])

    def broken(turn: TurnState) -> str:
        msg = "no prompt today"
        raise KeyError(msg)

    harness = Harness(model=MODEL, stream_fn=scripted, system_prompt=broken)
    await harness.prompt("hi")
    assert scripted.calls == 0
    assert "system prompt function failed" in (harness.messages[-1].error_message or "")
    assert not harness.is_busy


async def test_resume_from_a_reopened_session(autojump_clock: trio.testing.MockClock) -> None:
    store, session = await _session()
    harness = Harness(
        model=ROOMY, stream_fn=ScriptedModel([ScriptedResponse.text("one")]), session=session
    )
    await harness.prompt("first")
    await session.close()
    reopened = await store.open(session.id)
    scripted = ScriptedModel([ScriptedResponse.text("two")])
    again = Harness(model=ROOMY, stream_fn=scripted, session=reopened)
    assert [m.role for m in again.messages] == ["user", "assistant"]
    await again.prompt("second")
    assert [m.role for m in scripted.requests[0].messages] == ["user", "assistant", "user"]


async def test_compact_needs_a_session_and_an_idle_harness(
    autojump_clock: trio.testing.MockClock,
) -> None:
    harness = Harness(model=MODEL, stream_fn=ScriptedModel([]))
    with pytest.raises(UsageError, match="session"):
        await harness.compact()
    _, session = await _session()
    harness = Harness(model=MODEL, stream_fn=ScriptedModel([]), session=session)
    end = await harness.compact()
    assert end == CompactionEnd(reason="manual", status="declined")


def _big(text: str, tokens: int) -> ScriptedResponse:
    return ScriptedResponse.text(text, usage=Usage(input=tokens, output=10, total_tokens=tokens))


SMALL = CompactionSettings(reserve_tokens=200, keep_recent_tokens=50)


async def test_manual_compaction_writes_an_entry(autojump_clock: trio.testing.MockClock) -> None:
    _, session = await _session()
    scripted = ScriptedModel(
        [
            _big("a" * 400, 300),
            _big("b" * 400, 600),
            ScriptedResponse.text("THE SUMMARY"),
            ScriptedResponse.text("TURN PREFIX"),
        ]
    )
    harness = Harness(model=MODEL, stream_fn=scripted, session=session, compaction=SMALL)
    events: list[HarnessEvent] = []
    harness.subscribe(events.append)
    await harness.prompt("one " * 100)
    await harness.prompt("two " * 100)
    events.clear()
    end = await harness.compact("focus on b")
    assert _types(events) == ["compaction_start", "compaction_end"]
    assert end.status == "completed"
    assert end.summary is not None
    assert end.summary.startswith("THE SUMMARY")
    entry = session.get_entry(end.entry_id or "")
    assert entry.type == "compaction"
    assert "focus on b" in _text(scripted.requests[2].messages[-1])
    assert harness.messages[0].role == "compactionSummary"
    assert harness.messages == list(session.build_context().messages)


def _text(message: Any) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(b.text for b in content if isinstance(b, TextContent))


async def test_threshold_compaction_between_turns_of_a_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    _, session = await _session()
    scripted = ScriptedModel(
        [
            ScriptedResponse.text("hi"),
            ScriptedResponse.tool_calls(
                ("c1", "t", {}), usage=Usage(input=900, output=10, total_tokens=910)
            ),
            ScriptedResponse.text("SUMMARY"),
            _big("done", 100),
        ]
    )
    harness = Harness(
        model=MODEL, stream_fn=scripted, session=session, tools=[_tool("t")], compaction=SMALL
    )
    await harness.prompt("hello")  # what the compaction summarises
    events: list[HarnessEvent] = []
    harness.subscribe(events.append)
    await harness.prompt("work " * 200)
    types = _types(events)
    start = types.index("compaction_start")
    # After the first turn was saved, before the second turn starts.
    assert types[start - 1] == "save_point"
    assert types[start + 1] == "compaction_end"
    assert types[start + 2] == "turn_start"
    assert types.count("agent_start") == 1
    # The next request sees the summary and the kept tail, not the full history.
    last_request = scripted.requests[-1]
    assert last_request.messages[0].role == "user"
    assert "SUMMARY" in _text(last_request.messages[0])
    assert harness.messages == list(session.build_context().messages)


@pytest.mark.parametrize("over", ["threshold", "overflow"])
async def test_nothing_to_summarise_is_no_compaction(
    over: str, autojump_clock: trio.testing.MockClock
) -> None:
    """Over the threshold (or overflowed) with everything inside what a compaction keeps:
    no summary is asked for and no compaction is written, as Pi's coding agent does (Pi's
    harness would summarise nothing and keep everything; docs/deviations.md). An
    overflow's error stands."""
    _, session = await _session()
    if over == "threshold":
        last = ScriptedResponse.text("hi", usage=Usage(input=900, output=10, total_tokens=910))
    else:
        last = ScriptedResponse(
            stop_reason="error", error_message="prompt is too long: 1500 tokens > 1000 maximum"
        )
    scripted = ScriptedModel([last, ScriptedResponse.text("SUMMARY")])
    harness = Harness(model=MODEL, stream_fn=scripted, session=session, compaction=SMALL)
    events: list[HarnessEvent] = []
    harness.subscribe(events.append)
    await harness.prompt("x " * 300)  # the prompt alone is more than what is kept
    assert "compaction_start" not in _types(events)
    assert len(scripted.requests) == 1
    assert not [e for e in session.entries if e.type == "compaction"]
    assert harness.messages[-1].stop_reason == ("stop" if over == "threshold" else "error")
    # With an earlier exchange to summarise, the same answer compacts.
    session2 = (await _session())[1]
    answers = [ScriptedResponse.text("hello"), last, ScriptedResponse.text("SUMMARY")]
    scripted2 = ScriptedModel([*answers, ScriptedResponse.text("recovered")])
    harness2 = Harness(model=MODEL, stream_fn=scripted2, session=session2, compaction=SMALL)
    await harness2.prompt("first")
    await harness2.prompt("x " * 300)
    assert [e.type for e in session2.entries].count("compaction") == 1


async def test_a_compaction_walks_the_branch_once(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check that there is something to summarise and the threshold compaction
    share one prepare_compaction() of the branch (it walks the branch from its last
    compaction); under the threshold the branch is not walked at all."""
    from pitrio.harness import prepare_compaction

    calls: list[int] = []

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return prepare_compaction(*args, **kwargs)

    monkeypatch.setattr("pitrio.harness._harness.prepare_compaction", counting)
    last = ScriptedResponse.text("hi", usage=Usage(input=900, output=10, total_tokens=910))
    session = (await _session())[1]
    answers = [ScriptedResponse.text("hello"), last, ScriptedResponse.text("SUMMARY")]
    scripted = ScriptedModel([*answers, ScriptedResponse.text("recovered")])
    harness = Harness(model=MODEL, stream_fn=scripted, session=session, compaction=SMALL)
    await harness.prompt("first")
    assert calls == []
    await harness.prompt("x " * 300)
    assert [e.type for e in session.entries].count("compaction") == 1
    assert len(calls) == 1


async def test_overflow_is_compacted_and_continued_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    _, session = await _session()
    overflow = ScriptedResponse(
        stop_reason="error", error_message="prompt is too long: 1500 tokens > 1000 maximum"
    )
    scripted = ScriptedModel(
        [
            _big("x" * 400, 700),
            overflow,
            ScriptedResponse.text("SUMMARY"),
            ScriptedResponse.text("recovered"),
        ]
    )
    harness = Harness(
        model=MODEL,
        stream_fn=scripted,
        session=session,
        compaction=CompactionSettings(reserve_tokens=10, keep_recent_tokens=50),
    )
    await harness.prompt("one " * 100)
    events: list[HarnessEvent] = []
    harness.subscribe(events.append)
    await harness.prompt("two " * 100)
    types = _types(events)
    assert types.count("agent_start") == 2
    ends = [e for e in events if isinstance(e, CompactionEnd)]
    assert [(e.reason, e.status, e.will_retry) for e in ends] == [("overflow", "completed", True)]
    i = types.index("compaction_start")
    assert types[i - 1] == "agent_end"
    assert types[i + 2] == "agent_start"
    assert harness.messages[-1].text == "recovered"
    # The failed response is in the session (history) but not in the context.
    stored = [e.message for e in session.entries if e.type == "message"]
    assert any(m.role == "assistant" and m.stop_reason == "error" for m in stored)
    assert all(getattr(m, "stop_reason", None) != "error" for m in harness.messages)
    assert types[-1] == "settled"


async def test_a_second_overflow_is_not_compacted_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    _, session = await _session()
    overflow = ScriptedResponse(
        stop_reason="error", error_message="prompt is too long: 1500 tokens > 1000 maximum"
    )
    scripted = ScriptedModel(
        [_big("x" * 400, 700), overflow, ScriptedResponse.text("SUMMARY"), overflow]
    )
    harness = Harness(
        model=MODEL,
        stream_fn=scripted,
        session=session,
        compaction=CompactionSettings(reserve_tokens=10, keep_recent_tokens=50),
    )
    await harness.prompt("one " * 100)
    events: list[HarnessEvent] = []
    harness.subscribe(events.append)
    await harness.prompt("two " * 100)
    assert _types(events).count("compaction_start") == 1
    assert scripted.calls == 4
    assert harness.messages[-1].stop_reason == "error"
    assert not harness.is_busy


async def test_overflow_without_a_session_just_ends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    scripted = ScriptedModel(
        [ScriptedResponse(stop_reason="error", error_message="prompt is too long")]
    )
    harness = Harness(model=MODEL, stream_fn=scripted)
    events: list[HarnessEvent] = []
    harness.subscribe(events.append)
    await harness.prompt("hi")
    assert "compaction_start" not in _types(events)
    assert scripted.calls == 1


async def test_abort_mid_run_settles(autojump_clock: trio.testing.MockClock) -> None:
    _, session = await _session()
    scripted = ScriptedModel([ScriptedResponse.text("slow", delay=10)])
    harness = Harness(model=ROOMY, stream_fn=scripted, session=session)
    events: list[HarnessEvent] = []
    harness.subscribe(events.append)
    async with trio.open_nursery() as nursery:
        await nursery.start(harness.prompt, "hi")
        await trio.sleep(1)
        harness.abort()
    assert harness.messages[-1].stop_reason == "aborted"
    assert _types(events)[-3:] == ["save_point", "agent_end", "settled"]
    assert not session.dirty


async def test_changes_apply_on_the_fast_path_too(autojump_clock: trio.testing.MockClock) -> None:
    # A fixed system prompt and no session: unchanged turns skip the rebuild, but a
    # change made during a turn still reaches the next request.
    stream = Recording(
        [
            ScriptedResponse.tool_calls(("c1", "a", {})),
            ScriptedResponse.tool_calls(("c2", "a", {})),
            ScriptedResponse.tool_calls(("c3", "a", {})),
            ScriptedResponse.text("done"),
        ]
    )
    harness: Harness
    calls = 0

    async def switch() -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            await harness.set_model(OTHER)
            harness.set_system_prompt("second")

    harness = Harness(
        model=ROOMY, stream_fn=stream, tools=[_tool("a", switch)], system_prompt="first"
    )
    await harness.prompt("go")
    assert stream.models == ["m", "m", "m2", "m2"]
    assert [r.system_prompt for r in stream.requests] == ["first", "first", "second", "second"]


async def test_resume_continues_from_a_user_tail(autojump_clock: trio.testing.MockClock) -> None:
    _, session = await _session()
    await session.append_message(UserMessage(content="left unanswered"))
    await session.flush()
    scripted = ScriptedModel([ScriptedResponse.text("answered"), ScriptedResponse.text("then")])
    harness = Harness(model=ROOMY, stream_fn=scripted, session=session)
    events: list[HarnessEvent] = []
    harness.subscribe(events.append)
    await harness.resume()
    assert [_text(m) for m in scripted.requests[0].messages] == ["left unanswered"]
    assert harness.messages[-1].text == "answered"
    assert _types(events)[-1] == "settled"
    with pytest.raises(UsageError, match="Cannot continue from message role: assistant"):
        await harness.resume()
    assert not harness.is_busy
    harness.follow_up("and then?")
    await harness.resume()  # an assistant tail with a queued follow-up runs it
    assert [m.role for m in session.build_context().messages] == [
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    empty = Harness(model=ROOMY, stream_fn=scripted)
    with pytest.raises(UsageError, match="No messages"):
        await empty.resume()


async def test_abort_during_a_compaction(autojump_clock: trio.testing.MockClock) -> None:
    _, session = await _session()
    scripted = ScriptedModel(
        [
            _big("a" * 400, 300),
            _big("b" * 400, 600),
            ScriptedResponse.text("slow summary", delay=10),
        ]
    )
    harness = Harness(model=MODEL, stream_fn=scripted, session=session, compaction=SMALL)
    await harness.prompt("one " * 100)
    await harness.prompt("two " * 100)
    entries = len(session.entries)
    ends: list[CompactionEnd] = []
    async with trio.open_nursery() as nursery:

        async def run() -> None:
            ends.append(await harness.compact())

        nursery.start_soon(run)
        await trio.sleep(1)
        assert harness.is_busy
        harness.abort()
    assert [e.status for e in ends] == ["aborted"]
    assert len(session.entries) == entries
    assert not harness.is_busy


async def test_an_outer_cancel_of_compact_still_ends_the_compaction(
    autojump_clock: trio.testing.MockClock,
) -> None:
    _, session = await _session()
    scripted = ScriptedModel(
        [
            _big("a" * 400, 300),
            _big("b" * 400, 600),
            ScriptedResponse.text("slow summary", delay=10),
        ]
    )
    harness = Harness(model=MODEL, stream_fn=scripted, session=session, compaction=SMALL)
    await harness.prompt("one " * 100)
    await harness.prompt("two " * 100)
    entries = len(session.entries)
    events: list[HarnessEvent] = []
    harness.subscribe(events.append)
    with trio.move_on_after(1) as scope:  # the caller's own deadline, not abort()
        await harness.compact()
    assert scope.cancelled_caught
    assert _types(events) == ["compaction_start", "compaction_end"]
    end = events[-1]
    assert isinstance(end, CompactionEnd)
    assert (end.reason, end.status) == ("manual", "aborted")
    assert len(session.entries) == entries
    assert not harness.is_busy


async def test_abort_before_the_run_starts(autojump_clock: trio.testing.MockClock) -> None:
    scripted = ScriptedModel([ScriptedResponse.text("never")])

    async def slow_prompt(turn: TurnState) -> str:
        await trio.sleep(5)
        return "slow"

    harness = Harness(model=ROOMY, stream_fn=scripted, system_prompt=slow_prompt)
    events: list[HarnessEvent] = []
    harness.subscribe(events.append)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(harness.prompt, "hi")
        await trio.sleep(1)  # the system prompt is being built
        assert harness.is_busy
        harness.abort()
    assert scripted.calls == 0
    assert _types(events) == ["settled"]
    assert not harness.is_busy


async def test_resources_reach_the_system_prompt(autojump_clock: trio.testing.MockClock) -> None:
    from pitrio.harness._resources import ContextFile, Skill, format_skills_for_prompt

    scripted = ScriptedModel([ScriptedResponse.text("a"), ScriptedResponse.text("b")])
    skill = Skill(name="pdf", description="Read PDFs", content="...", file_path="/s/pdf/SKILL.md")

    def system_prompt(turn: TurnState) -> str:
        files = "".join(f.content for f in turn.resources.context_files)
        return files + format_skills_for_prompt(turn.resources.skills)

    harness = Harness(
        model=ROOMY,
        stream_fn=scripted,
        system_prompt=system_prompt,
        resources=Resources(context_files=[ContextFile("/p/AGENTS.md", "Be brief.\n")]),
    )
    await harness.prompt("one")
    assert scripted.requests[0].system_prompt == "Be brief.\n"
    harness.set_resources(Resources(skills=[skill]))
    await harness.prompt("two")
    assert "<name>pdf</name>" in scripted.requests[1].system_prompt
    assert "/s/pdf/SKILL.md" in scripted.requests[1].system_prompt


async def test_threshold_compaction_after_the_run(autojump_clock: trio.testing.MockClock) -> None:
    _, session = await _session()
    scripted = ScriptedModel(
        [
            _big("a" * 400, 300),
            _big("b" * 400, 900),  # now above the threshold (1000 - 200)
            ScriptedResponse.text("SUMMARY"),
            ScriptedResponse.text("PREFIX"),
        ]
    )
    harness = Harness(model=MODEL, stream_fn=scripted, session=session, compaction=SMALL)
    events: list[HarnessEvent] = []
    harness.subscribe(events.append)
    await harness.prompt("one " * 100)
    assert "compaction_start" not in _types(events)
    events.clear()
    await harness.prompt("two " * 100)
    assert _types(events)[-4:] == ["agent_end", "compaction_start", "compaction_end", "settled"]
    end = events[-2]
    assert isinstance(end, CompactionEnd)
    assert (end.reason, end.status, end.will_retry) == ("threshold", "completed", False)
    assert harness.messages[0].role == "compactionSummary"
    # With automatic compaction disabled, the same context is left as it is.
    disabled = Harness(
        model=MODEL,
        stream_fn=ScriptedModel([_big("c", 990)]),
        session=session,
        compaction=CompactionSettings(enabled=False),
    )
    await disabled.prompt("three")
    assert disabled.messages[0].role == "compactionSummary"
    assert len([e for e in session.entries if e.type == "compaction"]) == 1


async def test_the_coding_tools_bound_to_the_working_directory(
    tmp_path: Any, autojump_clock: trio.testing.MockClock
) -> None:
    from pitrio.coding import coding_tools

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "only-in-a.txt").write_text("x")
    (tmp_path / "b" / "only-in-b.txt").write_text("y")
    scripted = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("c1", "ls", {})),
            ScriptedResponse.text("ok"),
            ScriptedResponse.tool_calls(("c2", "ls", {})),
            ScriptedResponse.text("ok"),
        ]
    )
    harness = Harness(
        model=ROOMY,
        stream_fn=scripted,
        tools=[lambda ctx: coding_tools(ctx.cwd)],  # a factory returning several tools
        cwd=tmp_path / "a",
    )
    await harness.prompt("list")
    harness.set_tool_context(cwd=tmp_path / "b")
    await harness.prompt("list again")
    listings = [_text(m) for m in harness.messages if m.role == "toolResult"]
    assert "only-in-a.txt" in listings[0]
    assert "only-in-b.txt" in listings[1]
    assert "only-in-a.txt" not in listings[1]
    assert {t.name for t in scripted.requests[0].tools} >= {"ls", "read", "bash"}
