"""``Agent.run()``: one call, one settled run, one frozen result."""

from __future__ import annotations

import functools

import attrs
import pytest
import trio
import trio.testing

from pitrio import (
    AbortSignal,
    Agent,
    AgentBusyError,
    AgentEvent,
    Cost,
    RunResult,
    ToolResultMessage,
    Usage,
    UserMessage,
    tool,
)
from pitrio.testing import ScriptedModel, ScriptedResponse, check_trace


@tool
async def add(a: float, b: float) -> str:
    """Add two numbers."""
    return str(a + b)


def record(events: list[AgentEvent], event: AgentEvent, signal: AbortSignal) -> None:
    events.append(event)


def usage(input: int, output: int, dollars: float) -> Usage:
    return Usage(
        input=input,
        output=output,
        total_tokens=input + output,
        cost=Cost(input=dollars / 2, output=dollars / 2, total=dollars),
    )


def adding_model() -> ScriptedModel:
    return ScriptedModel(
        [
            ScriptedResponse.tool_calls(("c1", "add", {"a": 2, "b": 3}), usage=usage(10, 5, 0.25)),
            ScriptedResponse.text("2 + 3 = 5", usage=usage(20, 7, 0.5)),
        ]
    )


async def test_run_returns_the_answer_usage_and_new_messages() -> None:
    """output is the last text, usage the sum, messages what the run added."""
    agent = Agent(stream_fn=adding_model(), tools=[add])
    agent.state.messages = [UserMessage(content="earlier")]
    result = await agent.run("What is 2 + 3?")
    assert isinstance(result, RunResult)
    assert result.output == "2 + 3 = 5"
    assert [m.role for m in result.messages] == ["user", "assistant", "toolResult", "assistant"]
    assert list(result.messages) == agent.state.messages[1:]
    assert result.usage == usage(30, 12, 0.75)
    assert result.requests == 2
    assert (result.stop_reason, result.error_message, result.exceeded_limit) == (
        "stop",
        None,
        None,
    )
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        result.output = "changed"  # type: ignore[misc]  # frozen: the case under test
    assert not agent.is_running


async def test_run_emits_the_events_prompt_emits() -> None:
    """run() is prompt() plus a result: the same events in the same order."""
    traces: list[list[str]] = []
    for method in ("prompt", "run"):
        agent = Agent(stream_fn=adding_model(), tools=[add])
        events: list[AgentEvent] = []
        agent.subscribe(functools.partial(record, events))
        await getattr(agent, method)("What is 2 + 3?")
        assert check_trace(events) == []
        traces.append([e.type for e in events])
    assert traces[0] == traces[1]


async def test_a_failed_request_is_a_result_not_an_exception() -> None:
    """A provider error ends the run; the result carries its stop reason and text."""
    model = ScriptedModel([ScriptedResponse(stop_reason="error", error_message="HTTP 500")])
    result = await Agent(stream_fn=model).run("hi")
    assert (result.stop_reason, result.error_message, result.output) == ("error", "HTTP 500", "")
    assert result.requests == 1


async def test_an_aborted_run_keeps_its_partial(autojump_clock: trio.abc.Clock) -> None:
    """abort() during run(): the result is the aborted run's, partial text included."""
    model = ScriptedModel([ScriptedResponse.text("partial answer", chunk_size=4, delay=60)])
    agent = Agent(stream_fn=model)
    results: list[RunResult[str]] = []

    async def run() -> None:
        results.append(await agent.run("hi"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        await trio.sleep(1)
        agent.abort()
    (result,) = results
    assert result.stop_reason == "aborted"
    assert result.error_message == "Request was aborted"
    assert result.exceeded_limit is None


async def test_run_starts_in_a_nursery_and_is_busy_meanwhile(
    autojump_clock: trio.abc.Clock,
) -> None:
    """nursery.start(agent.run, ...) returns once the run is active, as prompt does."""
    model = ScriptedModel([ScriptedResponse.text("slow", delay=5)])
    agent = Agent(stream_fn=model)
    async with trio.open_nursery() as nursery:
        await nursery.start(agent.run, "hi")
        assert agent.is_running
        with pytest.raises(AgentBusyError, match=r"^Agent is already processing a prompt\."):
            await agent.run("again")
    assert agent.state.messages[-1].text == "slow"


async def test_run_checkpoints() -> None:
    """run() is a checkpoint even when the model answers at once."""
    agent = Agent(stream_fn=ScriptedModel([ScriptedResponse.text("at once")]))
    with trio.testing.assert_checkpoints():
        await agent.run("hi")


async def test_a_listener_that_fails_ends_the_run_as_an_error() -> None:
    """A failing listener makes the run's failure tail, which the result reports."""
    agent = Agent(stream_fn=adding_model(), tools=[add])

    def listener(event: AgentEvent, signal: AbortSignal) -> None:
        if event.type == "tool_execution_end":
            raise RuntimeError("listener broke")

    agent.subscribe(listener)
    result = await agent.run("go")
    assert (result.stop_reason, result.error_message) == ("error", "listener broke")
    assert not any(isinstance(m, ToolResultMessage) for m in result.messages[-1:])
