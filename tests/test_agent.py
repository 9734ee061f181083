"""The Agent on Trio: runs as nurseries, abort as cancel scopes, Pi's API and error texts."""

from __future__ import annotations

import types
from collections.abc import Generator
from typing import Any

import pytest
import trio
import trio.testing

from pitrio import (
    AbortSignal,
    Agent,
    AgentBusyError,
    AgentContext,
    AgentEvent,
    AgentMessage,
    AssistantMessage,
    LoopConfig,
    Model,
    TextContent,
    Tool,
    ToolExecutionEnd,
    ToolExecutionUpdate,
    ToolResult,
    UsageError,
    UserMessage,
    agent_loop,
    agent_loop_continue,
    run_agent_loop,
    text_result,
    user_text,
)
from pitrio.testing import ScriptedModel, ScriptedResponse, check_trace

MODEL = Model(id="m", api="scripted", provider="scripted")


def _events(agent: Agent) -> list[AgentEvent]:
    seen: list[AgentEvent] = []
    agent.subscribe(lambda event, signal: seen.append(event))
    return seen


def _tool(name: str, delay: float = 0, *, text: str = "ok", shielded: bool = False) -> Tool:
    async def execute(call_id: str, params: Any, signal: AbortSignal, on_update: Any) -> ToolResult:
        if shielded:
            with trio.CancelScope(shield=True):
                await trio.sleep(delay)
        else:
            await trio.sleep(delay)
        return text_result(text)

    return Tool(name=name, execute=execute)


async def test_prompt_runs_to_completion_and_reduces_state() -> None:
    """A prompt with one tool call produces Pi's events; the transcript is the message_ends."""
    model = ScriptedModel(
        [ScriptedResponse.tool_calls(("c1", "t", {})), ScriptedResponse.text("done")]
    )
    agent = Agent(stream_fn=model, model=MODEL, tools=[_tool("t")])
    events = _events(agent)
    await agent.prompt("hi")
    assert check_trace(events) == []
    ended = [e.message for e in events if e.type == "message_end"]
    assert agent.state.messages == ended
    assert [m.role for m in ended] == ["user", "assistant", "toolResult", "assistant"]
    assert agent.state.messages[-1].text == "done"
    assert not agent.is_running
    assert not agent.state.is_streaming
    assert model.calls == 2


async def test_busy_errors_use_pis_texts(autojump_clock: trio.testing.MockClock) -> None:
    """prompt(), resume() and reset() while running fail with Pi's messages."""
    agent = Agent(stream_fn=ScriptedModel([ScriptedResponse.text("slow", delay=5)]), model=MODEL)
    async with trio.open_nursery() as nursery:
        await nursery.start(agent.prompt, "first")
        assert agent.is_running
        with pytest.raises(AgentBusyError, match=r"^Agent is already processing a prompt\. Use"):
            await agent.prompt("second")
        with pytest.raises(
            AgentBusyError,
            match=r"^Agent is already processing\. Wait for completion before continuing\.$",
        ):
            await agent.resume()
        with pytest.raises(
            AgentBusyError,
            match=r"^Agent is already processing\. Wait for completion before resetting\.$",
        ):
            agent.reset()
    assert not agent.is_running


async def test_resume_errors() -> None:
    """resume() explains why there is nothing to continue from."""
    agent = Agent(stream_fn=ScriptedModel([]), model=MODEL)
    with pytest.raises(UsageError, match=r"^No messages to continue from$"):
        await agent.resume()
    agent.state.messages = [AssistantMessage(content=(TextContent(text="x"),))]
    with pytest.raises(UsageError, match=r"^Cannot continue from message role: assistant$"):
        await agent.resume()


async def test_abort_cancels_a_running_tool_and_the_run_settles(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """abort() cancels the tool's scope (Operation aborted); the next request is aborted too."""
    model = ScriptedModel([ScriptedResponse.tool_calls(("c1", "slow", {}))])
    agent = Agent(stream_fn=model, model=MODEL, tools=[_tool("slow", delay=100)])
    events = _events(agent)
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        await nursery.start(agent.prompt, "go")
        await trio.sleep(1)
        agent.abort()
    assert trio.current_time() - start == 1
    assert check_trace(events) == []
    end = next(e for e in events if e.type == "tool_execution_end")
    assert end.is_error
    assert end.result.content == (TextContent(text="Operation aborted"),)
    last = agent.state.messages[-1]
    assert last.stop_reason == "aborted"
    assert last.error_message == "Request was aborted"
    assert agent.state.error_message == "Request was aborted"
    assert agent.state.pending_tool_calls == frozenset()
    assert not agent.is_running


async def test_a_shielded_tool_finishes_and_its_result_is_used(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A tool that must finish shields itself; abort waits for it, as Pi uses its result."""
    model = ScriptedModel([ScriptedResponse.tool_calls(("c1", "safe", {}))])
    agent = Agent(
        stream_fn=model, model=MODEL, tools=[_tool("safe", 3, text="saved", shielded=True)]
    )
    events = _events(agent)
    async with trio.open_nursery() as nursery:
        await nursery.start(agent.prompt, "go")
        await trio.sleep(1)
        agent.abort()
    end = next(e for e in events if e.type == "tool_execution_end")
    assert not end.is_error
    assert end.result.content == (TextContent(text="saved"),)
    assert trio.current_time() == pytest.approx(3)


async def test_abort_while_streaming_keeps_the_partial_message(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The provider stream is cancelled; its partial content ends as an aborted message."""
    model = ScriptedModel([ScriptedResponse.text("partial answer", delay=10)])
    agent = Agent(stream_fn=model, model=MODEL)
    events = _events(agent)
    async with trio.open_nursery() as nursery:
        await nursery.start(agent.prompt, "go")
        await trio.sleep(1)
        assert agent.state.streaming_message is not None
        agent.abort()
    assert check_trace(events) == []
    final = agent.state.messages[-1]
    assert final.stop_reason == "aborted"
    assert final.text == "partial answer"
    assert [e.type for e in events][-3:] == ["message_end", "turn_end", "agent_end"]


async def test_no_task_is_left_behind_after_an_aborted_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Everything a run starts lives in nurseries inside the run: none survives it."""
    model = ScriptedModel(
        [ScriptedResponse.tool_calls(("a", "slow", {}), ("b", "slow", {}), ("c", "slow", {}))]
    )
    agent = Agent(stream_fn=model, model=MODEL, tools=[_tool("slow", 50)])
    async with trio.open_nursery() as nursery:
        await nursery.start(agent.prompt, "go")
        await trio.sleep(1)
        agent.abort()
        await agent.wait_for_idle()
        await trio.testing.wait_all_tasks_blocked()
        assert nursery.child_tasks == frozenset()
    assert trio.current_time() == pytest.approx(1)


async def test_steering_from_another_task_lands_after_the_turn(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """steer() while a tool runs delivers the message before the next model request."""
    model = ScriptedModel(
        [ScriptedResponse.tool_calls(("c1", "slow", {})), ScriptedResponse.text("ok then")]
    )
    agent = Agent(stream_fn=model, model=MODEL, tools=[_tool("slow", 5)])
    async with trio.open_nursery() as nursery:
        await nursery.start(agent.prompt, "go")
        await trio.sleep(1)
        agent.steer("use the other approach")
    roles = [m.role for m in agent.state.messages]
    assert roles == ["user", "assistant", "toolResult", "user", "assistant"]
    second_request = model.requests[1]
    assert second_request.messages[-1] == agent.state.messages[3]


async def test_follow_up_queued_before_prompt_runs_after_the_answer() -> None:
    """A follow-up waits until the agent would stop, then continues the same run."""
    model = ScriptedModel([ScriptedResponse.text("one"), ScriptedResponse.text("two")])
    agent = Agent(stream_fn=model, model=MODEL)
    agent.follow_up(user_text("and then?"))
    events = _events(agent)
    await agent.prompt("start")
    assert [e.type for e in events].count("agent_start") == 1
    assert [m.text for m in agent.state.messages if m.role == "assistant"] == ["one", "two"]
    assert not agent.has_queued_messages()


async def test_a_failing_listener_ends_the_run_as_data() -> None:
    """A listener that raises ends the run with an error message (Pi's handleRunFailure)."""
    agent = Agent(stream_fn=ScriptedModel([ScriptedResponse.text("x")]), model=MODEL)

    def listener(event: AgentEvent, signal: AbortSignal) -> None:
        if event.type == "message_update":
            raise RuntimeError("listener broke")

    agent.subscribe(listener)
    await agent.prompt("go")
    assert agent.state.error_message == "listener broke"
    assert agent.state.messages[-1].stop_reason == "error"
    assert not agent.is_running


async def test_a_stream_function_that_raises_is_handled() -> None:
    """A broken stream function becomes Pi's failure sequence, not an exception."""

    def broken(model: Model, context: Any, options: Any) -> Any:
        raise ConnectionError("no route")

    agent = Agent(stream_fn=broken, model=MODEL)
    events = _events(agent)
    await agent.prompt("go")
    kinds = [e.type for e in events]
    assert kinds[-4:] == ["message_start", "message_end", "turn_end", "agent_end"]
    assert agent.state.error_message == "no route"


async def test_unsubscribe_and_async_listeners_in_order() -> None:
    """Listeners run in subscription order, async ones awaited; unsubscribe removes one."""
    agent = Agent(stream_fn=ScriptedModel([ScriptedResponse.text("x")] * 2), model=MODEL)
    order: list[str] = []

    async def first(event: AgentEvent, signal: AbortSignal) -> None:
        await trio.lowlevel.checkpoint()
        order.append("first")

    def second(event: AgentEvent, signal: AbortSignal) -> None:
        order.append("second")

    unsubscribe = agent.subscribe(first)
    agent.subscribe(second)
    await agent.prompt("a")
    assert order[:2] == ["first", "second"]
    unsubscribe()
    order.clear()
    await agent.prompt("b")
    assert set(order) == {"second"}


async def test_reset_clears_transcript_queues_and_error() -> None:
    """reset() keeps system prompt, model and tools, clears the rest."""
    agent = Agent(
        stream_fn=ScriptedModel([ScriptedResponse(stop_reason="error", error_message="boom")]),
        model=MODEL,
        system_prompt="sys",
    )
    await agent.prompt("go")
    agent.steer("later")
    before = agent.state.error_message
    agent.reset()
    assert before == "boom"
    assert agent.state.messages == []
    assert agent.state.error_message is None
    assert not agent.has_queued_messages()
    assert agent.state.system_prompt == "sys"


async def test_queue_modes_validate() -> None:
    """A queue mode other than Pi's two is rejected with the allowed values."""
    agent = Agent(stream_fn=ScriptedModel([]), model=MODEL)
    with pytest.raises(ValueError, match="'one-at-a-time' or 'all'"):
        agent.steering_mode = "some"  # type: ignore[assignment]
    agent.follow_up_mode = "all"
    assert agent.follow_up_mode == "all"


async def test_agent_loop_stream_and_continue_validation() -> None:
    """agent_loop yields events and returns the new messages; continue validates at once."""
    config = LoopConfig(model=MODEL)
    context = AgentContext(system_prompt="", messages=[])
    prompt = UserMessage(content=(TextContent(text="hi"),))
    stream = agent_loop(
        [prompt], context, config, stream_fn=ScriptedModel([ScriptedResponse.text("yo")])
    )
    async with stream:
        kinds = [e.type async for e in stream]
    assert kinds[0] == "agent_start"
    assert kinds[-1] == "agent_end"
    new = await stream.result()
    assert [m.role for m in new] == ["user", "assistant"]
    with pytest.raises(ValueError, match=r"^Cannot continue: no messages in context$"):
        agent_loop_continue(context, config, stream_fn=ScriptedModel([]))
    context.messages.append(new[-1])
    with pytest.raises(ValueError, match=r"^Cannot continue from message role: assistant$"):
        agent_loop_continue(context, config, stream_fn=ScriptedModel([]))


async def test_prompt_accepts_messages_lists_and_images() -> None:
    """A string (with images), one message or a list of messages can be prompted."""
    from pitrio import ImageContent

    model = ScriptedModel([ScriptedResponse.text("a")] * 3)
    agent = Agent(stream_fn=model, model=MODEL)
    await agent.prompt("look", [ImageContent(data="AAAA", mime_type="image/png")])
    first = agent.state.messages[0]
    assert isinstance(first.content, tuple)
    assert first.content[1] == ImageContent(data="AAAA", mime_type="image/png")
    await agent.prompt(user_text("one"))
    await agent.prompt([user_text("two"), user_text("three")])
    users = [m for m in agent.state.messages if m.role == "user"]
    assert len(users) == 4
    with pytest.raises(TypeError, match="expected a message"):
        await agent.prompt(42)


# -- issue 6: outer cancellation, listener failures, is_streaming, updates after end -------


def _tasks_below(task: trio.lowlevel.Task) -> list[str]:
    names: list[str] = []
    for nursery in task.child_nurseries:
        for child in nursery.child_tasks:
            names.append(child.name)
            names.extend(_tasks_below(child))
    return names


async def test_a_deadline_around_prompt_settles_the_run_like_abort(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A deadline cancels the run as abort() does (agent_end, the partial kept as an
    aborted message, idle state, no task left), then the Cancelled reaches the deadline."""
    model = ScriptedModel([ScriptedResponse.text("a long answer", chunk_size=2, delay=10)])
    agent = Agent(stream_fn=model, model=MODEL)
    events = _events(agent)
    with trio.move_on_after(1) as scope:
        await agent.prompt("go")
    assert scope.cancelled_caught
    kinds = [e.type for e in events]
    assert kinds[-3:] == ["message_end", "turn_end", "agent_end"]
    last = agent.state.messages[-1]
    assert isinstance(last, AssistantMessage)
    assert last.stop_reason == "aborted"
    assert last.text == "a long answer"  # every delta streamed before the deadline is kept
    assert not agent.state.is_streaming
    assert not agent.is_running
    assert agent.state.pending_tool_calls == frozenset()
    assert _tasks_below(trio.lowlevel.current_task()) == []
    assert trio.current_time() == pytest.approx(1)


async def test_an_outer_cancel_during_a_tool_settles_and_propagates(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Cancelling the caller's nursery mid-tool: the tool ends as aborted, the run ends with
    agent_end, and the nursery's cancel scope catches the Cancelled."""
    model = ScriptedModel([ScriptedResponse.tool_calls(("c1", "slow", {}))])
    agent = Agent(stream_fn=model, model=MODEL, tools=[_tool("slow", 100)])
    events = _events(agent)
    async with trio.open_nursery() as nursery:
        await nursery.start(agent.prompt, "go")
        await trio.sleep(5)
        assert agent.is_running
        nursery.cancel_scope.cancel()
    assert nursery.cancel_scope.cancelled_caught
    ends = [e for e in events if isinstance(e, ToolExecutionEnd)]
    assert [(e.tool_call_id, e.result.content) for e in ends] == [
        ("c1", (TextContent(text="Operation aborted"),))
    ]
    assert events[-1].type == "agent_end"
    last = agent.state.messages[-1]
    assert isinstance(last, AssistantMessage)
    assert last.stop_reason == "aborted"
    assert agent.signal is None  # idle
    assert trio.current_time() == pytest.approx(5)


class _Spawned(trio.abc.Instrument):
    def __init__(self) -> None:
        self.names: list[str] = []

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.names.append(task.name)


async def test_the_watcher_starts_only_when_the_run_first_waits(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A run that never waits starts no task (its watcher would have nothing to watch);
    one that waits starts the watcher, which turns an outer cancel into the abort."""
    spawned = _Spawned()
    trio.lowlevel.add_instrument(spawned)
    try:
        agent = Agent(stream_fn=ScriptedModel([ScriptedResponse.text("at once")]), model=MODEL)
        await agent.prompt("go")
        assert agent.state.messages[-1].text == "at once"
        assert spawned.names == []

        async def listener(event: AgentEvent, signal: AbortSignal) -> None:
            if event.type == "turn_end":
                await signal.wait()  # the run's first wait, until the watcher aborts

        waiting = Agent(stream_fn=ScriptedModel([ScriptedResponse.text("later")]), model=MODEL)
        waiting.subscribe(listener)
        with trio.fail_after(10), trio.move_on_after(1) as scope:
            await waiting.prompt("go")
    finally:
        trio.lowlevel.remove_instrument(spawned)
    assert scope.cancelled_caught
    assert [name.rsplit(".", 1)[-1] for name in spawned.names] == ["_abort_when_cancelled"]
    assert waiting.signal is None  # settled: the abort ended the listener's wait
    assert not waiting.is_running


async def test_a_run_that_passes_only_shielded_schedule_points_starts_no_watcher() -> None:
    """Two tools that return at once, then a lone tool that checkpoints with nothing
    cancelled: the run's only pauses are the tool nursery's exit and that checkpoint
    (schedule points no cancellation can interrupt), so no watcher task is started."""
    spawned = _Spawned()

    async def at_once(call_id: str, params: Any, signal: AbortSignal, on_update: Any) -> ToolResult:
        return text_result("ok")

    async def checkpoints(
        call_id: str, params: Any, signal: AbortSignal, on_update: Any
    ) -> ToolResult:
        await trio.lowlevel.checkpoint()  # not cancelled: a schedule point only
        return text_result("ok")

    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("c1", "a", {}), ("c2", "a", {})),
            ScriptedResponse.tool_calls(("c3", "c", {})),
            ScriptedResponse.text("done"),
        ]
    )
    tools = [Tool(name="a", execute=at_once), Tool(name="c", execute=checkpoints)]
    agent = Agent(stream_fn=model, model=MODEL, tools=tools)
    trio.lowlevel.add_instrument(spawned)
    try:
        await agent.prompt("go")
    finally:
        trio.lowlevel.remove_instrument(spawned)
    assert agent.state.messages[-1].text == "done"
    assert [m.role for m in agent.state.messages].count("toolResult") == 3
    assert spawned.names == []


@pytest.mark.parametrize("waits", [False, True])
async def test_an_outer_cancel_reaches_the_run_at_its_first_real_wait(
    waits: bool, autojump_clock: trio.testing.MockClock
) -> None:
    """A tool cancels the caller's scope and returns at once: the run goes on (nothing it
    did could be interrupted) until it first waits for something, where the watcher turns
    the cancel into the abort (the next answer streams with a delay: aborted); a run that
    never waits again ends normally. Either way prompt() then raises the Cancelled."""
    outer = trio.CancelScope()

    async def cancel_outer(
        call_id: str, params: Any, signal: AbortSignal, on_update: Any
    ) -> ToolResult:
        outer.cancel()
        return text_result("ok")

    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("c1", "t", {}), ("c2", "t", {})),
            ScriptedResponse.text("done", delay=1 if waits else 0),
        ]
    )
    agent = Agent(stream_fn=model, model=MODEL, tools=[Tool(name="t", execute=cancel_outer)])
    events = _events(agent)
    with trio.fail_after(10), outer:
        await agent.prompt("go")
    assert outer.cancelled_caught
    assert check_trace(events) == []
    last = agent.state.messages[-1]
    assert isinstance(last, AssistantMessage)
    assert last.stop_reason == ("aborted" if waits else "stop")
    assert [m.role for m in agent.state.messages].count("toolResult") == 2
    assert not agent.is_running


def test_watch_on_wait_passes_throws_and_close_to_the_run() -> None:
    """What Trio throws into the waiting task reaches the run's coroutine; closing the
    awaitable closes it; the watcher is started once, at the first yield."""
    from pitrio._agent import _Run, _WatchOnWait

    seen: list[object] = []

    @types.coroutine
    def body() -> Generator[str, object, Exception | None]:
        try:
            seen.append((yield "first"))
            yield "second"
        except KeyError as exc:
            return exc
        except GeneratorExit:
            seen.append("closed")
            raise
        return None

    class Nursery:
        def start_soon(self, fn: object, *args: object) -> None:
            seen.append("watcher")

    def watched() -> Generator[Any, Any, Exception | None]:
        awaitable = _WatchOnWait(body(), Nursery(), _Run())  # type: ignore[arg-type]
        return awaitable.__await__()

    gen = watched()
    assert gen.send(None) == "first"
    assert gen.send("resumed") == "second"
    with pytest.raises(StopIteration) as stop:
        gen.throw(KeyError("k"))
    assert isinstance(stop.value.value, KeyError)
    assert seen == ["watcher", "resumed"]
    gen = watched()
    gen.send(None)
    gen.close()
    assert seen[-2:] == ["watcher", "closed"]

    from pitrio._agent import _SHIELDED_TRAP

    @types.coroutine
    def shielded_first() -> Generator[object, object, Exception | None]:
        seen.append((yield _SHIELDED_TRAP))  # a schedule point nothing can cancel
        yield "waits"
        return None

    gen = _WatchOnWait(shielded_first(), Nursery(), _Run()).__await__()  # type: ignore[arg-type]
    count = seen.count("watcher")
    assert gen.send(None) is _SHIELDED_TRAP
    assert seen.count("watcher") == count  # not yet
    assert gen.send("after") == "waits"
    assert seen[-2:] == ["after", "watcher"]
    with pytest.raises(StopIteration):
        gen.send(None)

    async def at_once() -> Exception | None:
        return None

    with pytest.raises(StopIteration):  # a coroutine that ends at once: no watcher
        _WatchOnWait(at_once(), Nursery(), _Run()).__await__().send(None)  # type: ignore[arg-type]
    assert seen.count("watcher") == 3


async def test_a_cancelled_prompt_raises_cancelled_not_a_group() -> None:
    """The Cancelled that leaves prompt() is Trio's own (a scope outside catches it)."""
    agent = Agent(stream_fn=ScriptedModel([ScriptedResponse.text("x", delay=1)]), model=MODEL)
    raised: list[BaseException] = []
    with trio.CancelScope() as scope:
        scope.cancel()
        try:
            await agent.prompt("go")
        except BaseException as exc:
            raised.append(exc)
            raise
    assert scope.cancelled_caught
    assert [type(exc) for exc in raised] == [trio.Cancelled]
    last = agent.state.messages[-1]
    assert isinstance(last, AssistantMessage)
    assert last.stop_reason == "aborted"


@pytest.mark.parametrize("kind", ["turn_end", "agent_end"])
async def test_a_listener_failing_once_at_the_end_fails_the_run_as_data(kind: str) -> None:
    """Pi: a listener raising at turn_end/agent_end ends the run with the failure tail
    (after the run's own agent_end for agent_end: the listener sees agent_end twice);
    prompt() returns (tests/data/oracle-extra-3/lf-*-x1)."""
    agent = Agent(stream_fn=ScriptedModel([ScriptedResponse.text("x")]), model=MODEL)
    seen: list[str] = []

    def listener(event: AgentEvent, signal: AbortSignal) -> None:
        seen.append(event.type)
        if event.type == kind and seen.count(kind) == 1:
            raise RuntimeError("listener broke")

    agent.subscribe(listener)
    await agent.prompt("go")
    assert seen[-4:] == ["message_start", "message_end", "turn_end", "agent_end"]
    assert seen.count("agent_end") == (2 if kind == "agent_end" else 1)
    assert agent.state.error_message == "listener broke"
    assert not agent.is_running


@pytest.mark.parametrize("kind", ["turn_end", "agent_end"])
async def test_a_listener_failing_in_the_failure_tail_too_raises_its_own_error(
    kind: str,
) -> None:
    """Pi's prompt() rejects with the listener's error when the failure tail fails too;
    pitrio raises that exception itself, never an ExceptionGroup, after the run settled."""
    agent = Agent(stream_fn=ScriptedModel([ScriptedResponse.text("x")]), model=MODEL)

    def listener(event: AgentEvent, signal: AbortSignal) -> None:
        if event.type == kind:
            raise KeyError("listener broke again")

    agent.subscribe(listener)
    with pytest.raises(KeyError, match="listener broke again"):
        await agent.prompt("go")
    assert not agent.is_running
    assert not agent.state.is_streaming
    await agent.wait_for_idle()


async def test_is_streaming_lasts_through_agent_end_listeners() -> None:
    """Pi: agent_end listeners still see is_streaming; once prompt() returns it is False."""
    agent = Agent(stream_fn=ScriptedModel([ScriptedResponse.text("x")]), model=MODEL)
    seen: list[tuple[bool, bool]] = []

    def listener(event: AgentEvent, signal: AbortSignal) -> None:
        if event.type == "agent_end":
            seen.append((agent.state.is_streaming, agent.is_running))

    agent.subscribe(listener)
    await agent.prompt("go")
    assert seen == [(True, True)]
    assert agent.state.is_streaming is False
    assert agent.is_running is False


async def test_no_tool_update_follows_its_end(autojump_clock: trio.testing.MockClock) -> None:
    """Updates a tool sends after it returned (from a task it left behind) are dropped."""
    leftover: list[Any] = []

    async def execute(call_id: str, params: Any, signal: AbortSignal, on_update: Any) -> ToolResult:
        on_update(text_result("before"))
        leftover.append(on_update)
        return text_result("done")

    model = ScriptedModel(
        [ScriptedResponse.tool_calls(("c1", "t", {}), ("c2", "t", {})), ScriptedResponse.text("x")]
    )
    agent = Agent(stream_fn=model, model=MODEL, tools=[Tool(name="t", execute=execute)])
    order: list[tuple[str, str]] = []

    def listener(event: AgentEvent, signal: AbortSignal) -> None:
        if isinstance(event, ToolExecutionUpdate | ToolExecutionEnd):
            order.append((event.type, event.tool_call_id))
            if isinstance(event, ToolExecutionEnd):
                for on_update in leftover:
                    on_update(text_result("too late"))

    agent.subscribe(listener)
    await agent.prompt("go")
    for call_id in ("c1", "c2"):
        mine = [kind for kind, cid in order if cid == call_id]
        assert mine == ["tool_execution_update", "tool_execution_end"]


async def test_a_runs_waits_return_once_it_has_settled_and_is_idle() -> None:
    """The run's events are made for the first waiter: one before the end is woken by it,
    one after the end returns at once (a checkpoint still), and a watcher that first runs
    after the end watches nothing."""
    from pitrio._agent import _abort_when_cancelled, _Run

    run = _Run()
    woken: list[str] = []

    async def wait_settled() -> None:
        await run.wait_settled()
        woken.append("settled")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait_settled)
        await trio.testing.wait_all_tasks_blocked()
        assert woken == []
        run.settle()
    assert woken == ["settled"]
    run.make_idle()
    with trio.testing.assert_checkpoints():
        await run.wait_idle()
    late = _Run()
    late.settle()
    late.make_idle()
    with trio.testing.assert_checkpoints():
        await late.wait_settled()
        await late.wait_idle()
    await _abort_when_cancelled(late)
    assert not late.signal.aborted


async def test_async_queue_polls_are_awaited() -> None:
    """A loop whose steering and follow-up hooks are async: their answers are awaited,
    an empty one (None) is no message."""
    polls: list[str] = []

    async def steering() -> list[AgentMessage]:
        polls.append("steering")
        return []

    async def follow_ups() -> None:
        polls.append("follow_up")

    config = LoopConfig(
        model=MODEL, get_steering_messages=steering, get_follow_up_messages=follow_ups
    )
    model = ScriptedModel([ScriptedResponse.text("hi")])
    seen: list[AgentEvent] = []
    new = await run_agent_loop([user_text("go")], AgentContext(), config, seen.append, None, model)
    assert [m.role for m in new] == ["user", "assistant"]
    assert polls == ["steering", "steering", "follow_up"]
    assert seen[-1].type == "agent_end"
