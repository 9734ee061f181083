"""check_trace: it passes real and hand-built good traces and flags every kind of violation."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import trio
from hypothesis import given, strategies as st

from pitrio import (
    AbortSignal,
    Agent,
    AgentEnd,
    AgentEvent,
    AgentStart,
    AssistantMessage,
    Context,
    MessageEnd,
    MessageStart,
    MessageUpdate,
    Model,
    StreamOptions,
    TextContent,
    TextDeltaEvent,
    Tool,
    ToolCall,
    ToolExecutionEnd,
    ToolExecutionStart,
    ToolExecutionUpdate,
    ToolResult,
    ToolResultMessage,
    TurnEnd,
    TurnStart,
    text_result,
    user_text,
)
from pitrio.testing import ScriptedModel, ScriptedResponse, check_trace, run_virtual

# --------------------------------------------------------------------------------------
# Hand-built traces

PROMPT = user_text("go")
PARTIAL = AssistantMessage(stop_reason="pending")
ANSWER = AssistantMessage(content=(TextContent(text="hi"),))
CALLS = AssistantMessage(
    content=(ToolCall(id="a", name="t"), ToolCall(id="b", name="t")), stop_reason="toolUse"
)
RESULT_A = ToolResultMessage(tool_call_id="a", tool_name="t", content=(TextContent(text="A"),))
RESULT_B = ToolResultMessage(tool_call_id="b", tool_name="t", content=(TextContent(text="B"),))
OK = text_result("ok")
FAILURE = AssistantMessage(
    content=(TextContent(text=""),), stop_reason="error", error_message="listener failed"
)


def _update(message: AssistantMessage = PARTIAL) -> MessageUpdate:
    return MessageUpdate(
        message=message,
        assistant_message_event=TextDeltaEvent(content_index=0, delta="h", partial=message),
    )


def _start(call_id: str) -> ToolExecutionStart:
    return ToolExecutionStart(tool_call_id=call_id, tool_name="t", args={})


def _tool_update(call_id: str) -> ToolExecutionUpdate:
    return ToolExecutionUpdate(tool_call_id=call_id, tool_name="t", args={}, partial_result=OK)


def _end(call_id: str) -> ToolExecutionEnd:
    return ToolExecutionEnd(tool_call_id=call_id, tool_name="t", result=OK, is_error=False)


def _message(message: Any) -> list[AgentEvent]:
    return [MessageStart(message=message), MessageEnd(message=message)]


def plain_run() -> list[AgentEvent]:
    """A prompt and a streamed text answer."""
    return [
        AgentStart(),
        TurnStart(),
        *_message(PROMPT),
        MessageStart(message=PARTIAL),
        _update(),
        MessageEnd(message=ANSWER),
        TurnEnd(message=ANSWER, tool_results=()),
        AgentEnd(messages=(PROMPT, ANSWER)),
    ]


def tool_run() -> list[AgentEvent]:
    """A parallel batch finishing out of order, results in source order, then an answer."""
    return [
        AgentStart(),
        TurnStart(),
        *_message(PROMPT),
        *_message(CALLS),
        _start("a"),
        _start("b"),
        _tool_update("b"),
        _end("b"),
        _tool_update("a"),
        _end("a"),
        *_message(RESULT_A),
        *_message(RESULT_B),
        TurnEnd(message=CALLS, tool_results=(RESULT_A, RESULT_B)),
        TurnStart(),
        *_message(ANSWER),
        TurnEnd(message=ANSWER, tool_results=()),
        AgentEnd(messages=(PROMPT, CALLS, RESULT_A, RESULT_B, ANSWER)),
    ]


def failed_run() -> list[AgentEvent]:
    """Pi's handleRunFailure: agent_end lists only the failure message."""
    return [
        AgentStart(),
        TurnStart(),
        *_message(PROMPT),
        *_message(FAILURE),
        TurnEnd(message=FAILURE, tool_results=()),
        AgentEnd(messages=(FAILURE,)),
    ]


@pytest.mark.parametrize("build", [plain_run, tool_run, failed_run])
def test_good_hand_built_traces_pass(build: Callable[[], list[AgentEvent]]) -> None:
    assert check_trace(build()) == []


def _without(events: list[AgentEvent], index: int) -> list[AgentEvent]:
    return events[:index] + events[index + 1 :]


def _replace(events: list[AgentEvent], index: int, *new: AgentEvent) -> list[AgentEvent]:
    return [*events[:index], *new, *events[index + 1 :]]


def _index(events: list[AgentEvent], predicate: Callable[[AgentEvent], bool], nth: int = 0) -> int:
    return [i for i, e in enumerate(events) if predicate(e)][nth]


def _is(kind: str, call_id: str | None = None) -> Callable[[AgentEvent], bool]:
    return lambda e: (
        e.type == kind and (call_id is None or getattr(e, "tool_call_id", None) == call_id)
    )


def _result_start(call_id: str) -> Callable[[AgentEvent], bool]:
    return lambda e: (
        isinstance(e, MessageStart)
        and isinstance(e.message, ToolResultMessage)
        and e.message.tool_call_id == call_id
    )


def _bad_traces() -> list[Any]:
    plain, tools = plain_run(), tool_run()
    turn_end = _index(tools, _is("turn_end"))
    swapped_results = [
        *tools[: _index(tools, _result_start("a"))],
        *_message(RESULT_B),
        *_message(RESULT_A),
        TurnEnd(message=CALLS, tool_results=(RESULT_B, RESULT_A)),
        *tools[turn_end + 1 :],
    ]
    end_a = _index(tools, _is("tool_execution_end", "a"))
    result_a = _index(tools, _result_start("a"))
    result_before_end = [
        *tools[:end_a],
        *tools[end_a + 1 : result_a + 2],  # RESULT_A's message_start and message_end
        tools[end_a],
        *tools[result_a + 2 :],
    ]
    cases = [
        ("no events", [], "no events"),
        ("first event", plain[1:], "first event is 'turn_start'"),
        ("last event", plain[:-1], "last event is 'turn_end'"),
        ("two agent_start", [AgentStart(), *plain], "2 agent_start events"),
        ("two agent_end", [*plain, plain[-1]], "2 agent_end events"),
        (
            "nested turn",
            _replace(plain, 1, TurnStart(), TurnStart()),
            "turn_start inside an open turn",
        ),
        (
            "turn_end inside a message",
            _replace(plain, 5, plain[-2], plain[5]),
            "turn_end while a message is open",
        ),
        (
            "turn_end.tool_results",
            _replace(tools, turn_end, TurnEnd(message=CALLS, tool_results=(RESULT_A,))),
            "differ from the result messages",
        ),
        ("results out of source order", swapped_results, "not in source order"),
        ("nested message", _replace(plain, 3, plain[4], plain[3]), "inside an open message"),
        ("update outside a message", _replace(plain, 4, _update()), "outside an assistant"),
        (
            "update in a user message",
            _replace(plain, 3, _update(), plain[3]),
            "outside an assistant",
        ),
        ("message_end without start", _without(plain, 2), "message_end without message_start"),
        ("result before its end", result_before_end, "before its tool_execution_end"),
        (
            "started twice",
            _replace(tools, 7, _start("a"), tools[7]),
            "started twice",
        ),
        (
            "call not in the assistant message",
            _replace(tools, 6, _start("zz"), _end("zz"), tools[6]),
            "not in the turn's assistant message",
        ),
        (
            "update before start",
            _replace(tools, 6, _tool_update("a"), tools[6]),
            "outside its execution",
        ),
        (
            "update after end",
            _replace(tools, 11, tools[11], _tool_update("a")),
            "outside its execution",
        ),
        ("end without start", _without(tools, 6), "ended without starting"),
        ("ended twice", _replace(tools, 9, tools[9], tools[9]), "ended twice"),
        ("agent_end in a turn", _without(plain, 7), "agent_end inside an open turn"),
        (
            "agent_end.messages",
            [*plain[:-1], AgentEnd(messages=(ANSWER, PROMPT))],
            "agent_end.messages differ",
        ),
        ("never ended", _without(tools, _index(tools, _is("tool_execution_end", "a"))), "never"),
        (
            "message never ended",
            [*plain[:6], *plain[7:]],  # drop the assistant's message_end
            "never ended",
        ),
    ]
    return [pytest.param(events, expected, id=name) for name, events, expected in cases]


@pytest.mark.parametrize(("events", "expected"), _bad_traces())
def test_each_violation_is_flagged(events: list[AgentEvent], expected: str) -> None:
    problems = check_trace(events)
    assert any(expected in p for p in problems), problems


def test_hand_built_indexes_point_where_the_cases_expect() -> None:
    # The violation cases above splice at fixed positions; pin what is there.
    assert [e.type for e in plain_run()] == [
        "agent_start",
        "turn_start",
        "message_start",
        "message_end",
        "message_start",
        "message_update",
        "message_end",
        "turn_end",
        "agent_end",
    ]
    kinds = [(e.type, getattr(e, "tool_call_id", "")) for e in tool_run()]
    assert kinds[6:12] == [
        ("tool_execution_start", "a"),
        ("tool_execution_start", "b"),
        ("tool_execution_update", "b"),
        ("tool_execution_end", "b"),
        ("tool_execution_update", "a"),
        ("tool_execution_end", "a"),
    ]


# --------------------------------------------------------------------------------------
# Real traces


async def _tool(
    call_id: str, params: Any, signal: AbortSignal, on_update: Callable[[ToolResult], None]
) -> ToolResult:
    on_update(text_result(f"half of {call_id}"))
    await trio.sleep(3 if call_id.endswith("1") else 1)
    return text_result(f"done {call_id}")


def _record(
    responses: Sequence[ScriptedResponse],
    *,
    during: Callable[[Agent], None] | None = None,
    **options: Any,
) -> list[AgentEvent]:
    async def main() -> list[AgentEvent]:
        agent = Agent(
            stream_fn=ScriptedModel(responses), tools=[Tool(name="t", execute=_tool)], **options
        )
        events: list[AgentEvent] = []
        agent.subscribe(lambda event, signal: events.append(event))
        async with trio.open_nursery() as nursery:
            if during is not None:

                async def act() -> None:
                    await trio.sleep(2)
                    during(agent)

                nursery.start_soon(act)
            await agent.prompt("go")
        return events

    return run_virtual(main)


def _calls(*ids: str) -> ScriptedResponse:
    return ScriptedResponse.tool_calls(*[(i, "t", {}) for i in ids], chunk_size=2)


def _steer_and_follow(agent: Agent) -> None:
    agent.steer(user_text("steer"))
    agent.follow_up(user_text("more"))


def _raise(*args: Any) -> Any:
    msg = "no stream today"
    raise RuntimeError(msg)


@functools.cache
def real_traces() -> tuple[tuple[str, tuple[AgentEvent, ...]], ...]:
    text = ScriptedResponse.text("an answer", chunk_size=3)
    runs = {
        "text": _record([text]),
        "parallel": _record([_calls("c0", "c1", "c2"), text]),
        "sequential": _record([_calls("c0", "c1"), text], tool_execution="sequential"),
        "steering": _record([_calls("c0", "c1"), text, text, text], during=_steer_and_follow),
        "abort": _record([_calls("c0", "c1"), text], during=Agent.abort),
        "stream_fn raises": _run_failure(),
    }
    return tuple((name, tuple(events)) for name, events in runs.items())


def _run_failure() -> list[AgentEvent]:
    async def main() -> list[AgentEvent]:
        def stream_fn(model: Model, context: Context, options: StreamOptions) -> Any:
            return _raise()

        agent = Agent(stream_fn=stream_fn)
        events: list[AgentEvent] = []
        agent.subscribe(lambda event, signal: events.append(event))
        await agent.prompt("go")
        return events

    return run_virtual(main)


def test_real_traces_pass_and_cover_what_they_claim() -> None:
    traces = dict(real_traces())
    for name, events in traces.items():
        assert check_trace(events) == [], name
    kinds = {name: [e.type for e in events] for name, events in traces.items()}
    assert kinds["parallel"].count("tool_execution_update") == 3
    assert kinds["steering"].count("turn_start") == 3  # tools, steer + answer, follow-up
    aborted = traces["abort"][-2]
    assert isinstance(aborted, TurnEnd)
    assert aborted.message.stop_reason == "aborted"
    failed = traces["stream_fn raises"][-1]
    assert isinstance(failed, AgentEnd)
    assert failed.messages[0].error_message == "no stream today"


def _structural(events: Sequence[AgentEvent]) -> list[int]:
    """Indexes of the events whose removal must be noticed (updates are optional)."""
    optional = {"message_update", "tool_execution_update"}
    indexes = [i for i, e in enumerate(events) if e.type not in optional]
    if events[-1].type == "agent_end" and len(events[-1].messages) == 1 and len(events) > 4:
        # A failed run: its prefix is a run cut off anywhere, so dropping or repeating an
        # event there can leave another valid failed run. The tail and the start must hold.
        return [i for i in indexes if i == 0 or i >= len(events) - 4]
    return indexes


@st.composite
def trace_and_index(draw: st.DrawFn) -> tuple[str, list[AgentEvent], int]:
    name, events = draw(st.sampled_from(real_traces()))
    return name, list(events), draw(st.sampled_from(_structural(events)))


@given(trace_and_index())
def test_dropping_any_structural_event_is_flagged(case: tuple[str, list[AgentEvent], int]) -> None:
    _, events, index = case
    assert check_trace(_without(events, index)) != []


@given(trace_and_index())
def test_duplicating_any_structural_event_is_flagged(
    case: tuple[str, list[AgentEvent], int],
) -> None:
    _, events, index = case
    assert check_trace(_replace(events, index, events[index], events[index])) != []


# --------------------------------------------------------------------------------------
# Former gaps and false alarms of check_trace (fixed; kept as regression tests)


@pytest.mark.parametrize(
    "events",
    [
        pytest.param(_without(plain_run(), 1), id="turn_start dropped"),
        pytest.param(_replace(plain_run(), 7, plain_run()[7], plain_run()[7]), id="turn_end twice"),
        pytest.param(
            [*plain_run()[:-1], AgentEnd(messages=(ANSWER,))],
            id="agent_end lists only the last message of a run that did not fail",
        ),
    ],
)
def test_unbalanced_turns_and_a_lenient_agent_end_are_flagged(events: list[AgentEvent]) -> None:
    assert check_trace(events) != []


def _failing_listener_trace(fail_at: str) -> list[AgentEvent]:
    """A run whose listener raises at the first ``fail_at`` event (Pi: handleRunFailure)."""

    async def main() -> list[AgentEvent]:
        agent = Agent(
            stream_fn=ScriptedModel([_calls("c0"), ScriptedResponse.text("x", chunk_size=1)]),
            tools=[Tool(name="t", execute=_tool)],
        )
        events: list[AgentEvent] = []
        failed = False

        def listener(event: AgentEvent, signal: AbortSignal) -> None:
            nonlocal failed
            events.append(event)
            if event.type == fail_at and not failed:
                failed = True
                msg = f"listener failed at {fail_at}"
                raise RuntimeError(msg)

        agent.subscribe(listener)
        await agent.prompt("go")
        return events

    return run_virtual(main)


@pytest.mark.parametrize("fail_at", ["message_update", "turn_end"])
def test_failed_runs_pass(fail_at: str) -> None:
    events = _failing_listener_trace(fail_at)
    # The run ended with Pi's failure tail: the failure message, turn_end, agent_end.
    assert [e.type for e in events[-4:]] == [
        "message_start",
        "message_end",
        "turn_end",
        "agent_end",
    ]
    assert check_trace(events) == []
