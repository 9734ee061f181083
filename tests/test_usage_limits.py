"""Usage limits: a run that goes over one is aborted and settles as data (virtual time)."""

from __future__ import annotations

import math
from typing import Any

import attrs
import pytest
import trio
from hypothesis import given, settings, strategies as st

from pitrio import (
    AbortSignal,
    Agent,
    AgentEvent,
    AssistantMessage,
    AssistantMessageEventStream,
    Context,
    Cost,
    DoneEvent,
    Model,
    StartEvent,
    StreamOptions,
    TextContent,
    TextDeltaEvent,
    TextStartEvent,
    ToolResultMessage,
    Usage,
    UsageError,
    UsageLimits,
    tool,
)
from pitrio.testing import (
    ScriptedModel,
    ScriptedResponse,
    check_trace,
    run_virtual,
    scripted_runs,
)

calls: list[int] = []


@tool
async def step(n: int) -> str:
    """One step of work."""
    calls.append(n)
    return f"step {n} done"


def usage(output: int, dollars: float = 0.0) -> Usage:
    return Usage(
        input=100,
        output=output,
        cache_read=20,
        total_tokens=120 + output,
        cost=Cost(total=dollars),
    )


def looping_model(**response: Any) -> ScriptedModel:
    """A model that always asks for one more step."""

    def respond(context: Context) -> ScriptedResponse:
        call_id = f"c{len(context.messages)}"
        return ScriptedResponse.tool_calls((call_id, "step", {"n": 1}), **response)

    return ScriptedModel(respond)


async def run_traced(agent: Agent, limits: UsageLimits) -> tuple[Any, list[AgentEvent]]:
    events: list[AgentEvent] = []
    agent.subscribe(lambda event, signal: events.append(event))
    result = await agent.run("work", limits=limits)
    assert check_trace(events) == []
    assert not agent.is_running
    return result, events


async def test_max_requests_stops_before_the_next_request() -> None:
    """With max_requests=2 the third request is never sent; the run ends aborted."""
    calls.clear()
    model = looping_model()
    agent = Agent(stream_fn=model, tools=[step])
    result, events = await run_traced(agent, UsageLimits(max_requests=2))
    assert result.requests == 2
    assert calls == [1, 1]  # both answered requests' tools ran
    assert result.exceeded_limit == "max_requests"
    assert result.stop_reason == "aborted"
    assert result.error_message == (
        "Usage limit exceeded: the next request would exceed max_requests=2"
    )
    assert [m.role for m in result.messages] == [
        "user", "assistant", "toolResult", "assistant", "toolResult", "assistant",
    ]  # fmt: skip
    last = result.messages[-1]
    assert isinstance(last, AssistantMessage)
    assert (last.stop_reason, last.error_message) == ("aborted", "Request was aborted")
    assert events[-1].type == "agent_end"


async def test_max_requests_zero_sends_nothing() -> None:
    """max_requests=0: the run is aborted before its first request."""
    result = await Agent(stream_fn=looping_model(), tools=[step]).run(
        "work", limits=UsageLimits(max_requests=0)
    )
    assert (result.requests, result.exceeded_limit, result.stop_reason) == (
        0,
        "max_requests",
        "aborted",
    )


@pytest.mark.parametrize(
    ("limits", "name", "text"),
    [
        (UsageLimits(max_output_tokens=450), "max_output_tokens", "600 tokens > max_output_tokens=450"),  # noqa: E501
        (UsageLimits(max_input_tokens=300), "max_input_tokens", "360 tokens > max_input_tokens=300"),  # noqa: E501
        (UsageLimits(max_total_tokens=700), "max_total_tokens", "960 tokens > max_total_tokens=700"),  # noqa: E501
        (UsageLimits(max_cost=0.5), "max_cost", "$0.75 > max_cost=0.5"),
    ],
)
async def test_token_and_cost_limits_abort_at_the_message_that_crosses_them(
    limits: UsageLimits, name: str, text: str
) -> None:
    """Tokens and cost are summed over the run; the message that crosses a cap aborts it."""
    calls.clear()
    agent = Agent(stream_fn=looping_model(usage=usage(200, 0.25)), tools=[step])
    result, _ = await run_traced(agent, limits)
    assert result.exceeded_limit == name
    assert result.error_message == f"Usage limit exceeded: {text}"
    assert result.stop_reason == "aborted"
    # the third response crossed the cap: its tool call was cut off by the abort
    assert result.requests == 3
    assert calls == [1, 1]
    cut = result.messages[-2]
    assert isinstance(cut, ToolResultMessage)
    assert cut.is_error
    assert result.usage.output == 600


async def test_a_run_under_its_limits_is_untouched() -> None:
    """Limits that are not reached change nothing."""
    model = ScriptedModel(
        [ScriptedResponse.tool_calls(("c", "step", {"n": 2})), ScriptedResponse.text("done")]
    )
    result = await Agent(stream_fn=model, tools=[step]).run(
        "work",
        limits=UsageLimits(
            max_requests=2, max_total_tokens=10, max_cost=0.0, max_seconds=1
        ),
    )
    assert (result.output, result.stop_reason, result.exceeded_limit) == ("done", "stop", None)


async def test_max_seconds_is_a_deadline_on_the_stream(autojump_clock: trio.abc.Clock) -> None:
    """A response still streaming at the deadline is aborted at exactly that time."""
    model = ScriptedModel([ScriptedResponse.text("slow " * 20, chunk_size=5, delay=60)])
    agent = Agent(stream_fn=model)
    start = trio.current_time()
    result, _ = await run_traced(agent, UsageLimits(max_seconds=10))
    assert trio.current_time() - start == 10
    assert (result.exceeded_limit, result.stop_reason) == ("max_seconds", "aborted")
    assert result.error_message == (
        "Usage limit exceeded: the run took longer than max_seconds=10"
    )


async def test_max_seconds_cancels_a_running_tool(autojump_clock: trio.abc.Clock) -> None:
    """A tool still running at the deadline is cancelled; its result says so."""

    @tool
    async def wait(seconds: float) -> str:
        await trio.sleep(seconds)
        return "waited"

    model = ScriptedModel(
        [ScriptedResponse.tool_calls(("c", "wait", {"seconds": 100})), ScriptedResponse.text("")]
    )
    start = trio.current_time()
    result = await Agent(stream_fn=model, tools=[wait]).run(
        "go", limits=UsageLimits(max_seconds=3)
    )
    assert trio.current_time() - start == 3
    assert result.exceeded_limit == "max_seconds"
    tool_result = result.messages[2]
    assert isinstance(tool_result, ToolResultMessage)
    assert tool_result.is_error


async def test_the_callers_own_deadline_still_propagates(autojump_clock: trio.abc.Clock) -> None:
    """A caller's cancel scope is not swallowed by the run's wall-time limit."""
    model = ScriptedModel([ScriptedResponse.text("slow", delay=60)])
    agent = Agent(stream_fn=model)
    with trio.move_on_after(5) as outer:
        await agent.run("hi", limits=UsageLimits(max_seconds=30))
    assert outer.cancelled_caught
    assert not agent.is_running
    assert agent.state.messages[-1].stop_reason == "aborted"


def test_limits_under_hypothesis_style_virtual_runs() -> None:
    """run_virtual drives a limited run from sync code (as property tests do)."""

    async def main() -> tuple[str | None, float]:
        model = ScriptedModel([ScriptedResponse.text("slow", delay=60)])
        start = trio.current_time()
        result = await Agent(stream_fn=model).run("hi", limits=UsageLimits(max_seconds=2.5))
        return result.exceeded_limit, trio.current_time() - start

    assert run_virtual(main) == ("max_seconds", 2.5)


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({"max_requests": -1}, "UsageLimits.max_requests must be at least 0; got -1"),
        ({"max_cost": math.nan}, "UsageLimits.max_cost must be at least 0; got nan"),
        ({"max_seconds": "10"}, "UsageLimits.max_seconds must be a number or None; got '10'"),
        ({"max_output_tokens": True}, "must be a number or None; got True"),
    ],
)
def test_bad_limits_are_refused(kwargs: dict[str, Any], text: str) -> None:
    """A negative, NaN or non-number cap is a UsageError naming the field."""
    with pytest.raises(UsageError) as info:  # text checked below
        UsageLimits(**kwargs)
    assert text in str(info.value)


async def test_a_limit_abort_reaches_listeners_as_the_signal(
    autojump_clock: trio.abc.Clock,
) -> None:
    """The run's signal is aborted with the limit's text as its reason."""
    reasons: list[object] = []
    agent = Agent(stream_fn=looping_model(), tools=[step])

    def listener(event: AgentEvent, signal: AbortSignal) -> None:
        if event.type == "agent_end":
            reasons.append(signal.reason)

    agent.subscribe(listener)
    await agent.run("work", limits=UsageLimits(max_requests=1))
    assert reasons == ["Usage limit exceeded: the next request would exceed max_requests=1"]


@tool
async def pause() -> str:
    """A tool that takes a virtual second."""
    await trio.sleep(1)
    return "paused"


@settings(deadline=None, max_examples=60)
@given(
    script=scripted_runs(["pause"]),
    max_requests=st.none() | st.integers(0, 4),
    max_output_tokens=st.none() | st.integers(0, 50),
    max_seconds=st.none() | st.floats(0, 6, allow_nan=False),
)
def test_any_run_under_any_limits_settles_as_data(
    script: list[ScriptedResponse],
    max_requests: int | None,
    max_output_tokens: int | None,
    max_seconds: float | None,
) -> None:
    """Whatever the script and the caps: a result, a valid trace, an idle agent, and
    never more requests than max_requests."""
    limits = UsageLimits(
        max_requests=max_requests, max_output_tokens=max_output_tokens, max_seconds=max_seconds
    )
    script = [
        attrs.evolve(r, usage=Usage(output=20, total_tokens=20)) for r in script
    ]

    async def main() -> None:
        agent = Agent(stream_fn=ScriptedModel(script), tools=[pause])
        events: list[AgentEvent] = []
        agent.subscribe(lambda event, signal: events.append(event))
        start = trio.current_time()
        result = await agent.run("go", limits=limits)
        assert check_trace(events) == []
        assert not agent.is_running
        assert list(result.messages) == agent.state.messages
        if max_requests is not None:
            assert result.requests <= max_requests
        if max_seconds is not None:
            assert trio.current_time() - start <= max_seconds
        if result.exceeded_limit is not None:
            assert result.error_message is not None
            assert result.error_message.startswith("Usage limit exceeded: ")
        elif max_output_tokens is not None:
            assert result.usage.output <= max_output_tokens

    run_virtual(main)


async def test_usage_reported_while_streaming_is_checked_mid_response(
    autojump_clock: trio.abc.Clock,
) -> None:
    """A provider that reports usage in its partial messages is cut off mid-stream."""

    def stream_fn(model: Model, context: Context, options: StreamOptions) -> Any:
        async def produce(stream: AssistantMessageEventStream) -> None:
            partial = AssistantMessage(content=(TextContent(text=""),), stop_reason="pending")
            stream.push(StartEvent(partial=partial))
            stream.push(TextStartEvent(content_index=0, partial=partial))
            for n in range(1, 11):
                await trio.sleep(1)
                partial = attrs.evolve(
                    partial,
                    content=(TextContent(text="x" * n),),
                    usage=Usage(output=n * 10, total_tokens=n * 10),
                )
                stream.push(TextDeltaEvent(content_index=0, delta="x", partial=partial))
            stream.push(DoneEvent(reason="stop", message=attrs.evolve(partial, stop_reason="stop")))

        return AssistantMessageEventStream(produce)

    start = trio.current_time()
    result = await Agent(stream_fn=stream_fn).run(
        "talk", limits=UsageLimits(max_output_tokens=35)
    )
    assert trio.current_time() - start == 4  # the fourth delta reported 40 tokens
    assert result.exceeded_limit == "max_output_tokens"
    assert result.error_message == "Usage limit exceeded: 40 tokens > max_output_tokens=35"
    assert result.stop_reason == "aborted"
    assert result.output == "xxxx"  # the partial is kept
