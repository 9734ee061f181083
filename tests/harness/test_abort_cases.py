"""Pi's tracker cases around abort, at the Agent level (against the oracle's traces) and
at the harness level (transcript, queues and the session), and the order of retry and
compaction.

The scenarios in ``data/oracle/scenarios`` were run through Pi 0.85.0's oracle
(``/work/shared/oracle/run``); ``data/oracle/expected`` holds Pi's traces. What Pi does:

- a steering message queued while a tool runs is delivered after the aborted batch's
  ``turn_end`` (the loop's steering poll), into a turn whose request is aborted at once:
  it stays in the transcript, the queue is empty;
- a follow-up queued meanwhile stays in the queue (an aborted run ends before the
  follow-up poll) and runs with the next ``continue()``;
- in a parallel batch, a sibling that finished keeps its own result when another tool
  stalls and the batch is aborted (the stalled one gets ``Operation aborted``);
- in a sequential batch, a tool not started when the abort comes never starts and
  gets no result.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from pitrio import (
    Model,
    TextContent,
    Tool,
    ToolResult,
    ToolResultMessage,
    Usage,
    UserMessage,
    text_result,
)
from pitrio.harness import (
    CompactionSettings,
    Harness,
    HarnessEvent,
    InMemorySessionStore,
    MessageEntry,
    RetrySettings,
    Session,
)
from pitrio.testing import ScriptedModel, ScriptedResponse
from pitrio.testing._compare import trace_difference
from pitrio.testing.conformance import format_trace, play

ORACLE = Path(__file__).parent / "data" / "oracle"
SCENARIOS = sorted((ORACLE / "scenarios").glob("*.json"))
ROOMY = Model(id="m", api="scripted", provider="scripted", context_window=200_000)
SMALL_WINDOW = Model(id="m", api="scripted", provider="scripted", context_window=1000)
SMALL = CompactionSettings(reserve_tokens=200, keep_recent_tokens=50)


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_the_agent_gives_pis_trace_on_an_abort_case(path: Path) -> None:
    scenario = json.loads(path.read_text(encoding="utf-8"))
    expected = json.loads((ORACLE / "expected" / path.name).read_text(encoding="utf-8"))
    records, problems = play(scenario)
    assert problems == []
    actual = json.loads(format_trace(records))
    assert trace_difference(expected, actual) is None, trace_difference(expected, actual)


def test_the_abort_cases_pin_what_pi_does() -> None:
    """What the traces show (so that a regenerated trace cannot change it unnoticed)."""

    def trace(name: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = json.loads((ORACLE / "expected" / f"{name}.json").read_text())
        return out

    def final_state(records: list[dict[str, Any]]) -> dict[str, Any]:
        return next(r for r in reversed(records) if r["type"] == "state" and r["final"])

    steered = final_state(trace("abort-steering-queued-during-a-tool"))
    assert [m["role"] for m in steered["messages"]] == [
        "user",
        "assistant",
        "toolResult",
        "user",
        "assistant",
    ]
    assert steered["messages"][3]["content"][0]["text"] == "actually, search for dogs"
    assert steered["messages"][4]["stopReason"] == "aborted"
    assert steered["hasQueuedMessages"] is False

    siblings = trace("abort-parallel-batch-keeps-finished-siblings")
    ends = {
        r["toolCallId"]: r["result"]["content"][0]["text"]
        for r in siblings
        if r["type"] == "tool_execution_end"
    }
    assert ends == {"f1": "fast result", "s1": "Operation aborted"}

    sequential = trace("abort-sequential-batch-next-tool-never-starts")
    started = [r["toolCallId"] for r in sequential if r["type"] == "tool_execution_start"]
    assert started == ["s1"]

    follow = trace("abort-follow-up-stays-queued")
    states = [r for r in follow if r["type"] == "state"]
    assert states[0]["hasQueuedMessages"] is True  # after the aborted run
    texts = [m["content"][0]["text"] for m in states[-1]["messages"] if m["role"] == "user"]
    assert texts == ["search", "also dogs", "then summarise"]


# -- the same cases through the harness ---------------------------------------------------


def _tool(name: str, seconds: float | None, text: str = "done") -> Tool:
    async def execute(call_id: str, params: Any, signal: Any, on_update: Any) -> ToolResult:
        if seconds is None:
            await trio.sleep_forever()
        await trio.sleep(seconds)
        return text_result(text)

    return Tool(name=name, description=name, execute=execute, parameters={"type": "object"})


def _user_texts(messages: Any) -> list[str]:
    return [
        "".join(b.text for b in m.content if isinstance(b, TextContent))
        for m in messages
        if isinstance(m, UserMessage)
    ]


def _text(message: Any) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(b.text for b in content if isinstance(b, TextContent))


def _stored(session: Session) -> list[Any]:
    return [e.message for e in session.entries if isinstance(e, MessageEntry)]


async def test_steering_queued_during_a_tool_survives_an_abort_of_the_harness(
    autojump_clock: trio.testing.MockClock,
) -> None:
    session = await InMemorySessionStore().create()
    scripted = ScriptedModel([ScriptedResponse.tool_calls(("c1", "slow", {}))])
    harness = Harness(model=ROOMY, stream_fn=scripted, session=session, tools=[_tool("slow", 10)])
    async with trio.open_nursery() as nursery:
        nursery.start_soon(harness.prompt, "go")
        await trio.sleep(1)  # the tool runs
        harness.steer("and dogs too")
        await trio.sleep(1)
        harness.abort()
    roles = [m.role for m in harness.messages]
    assert roles == ["user", "assistant", "toolResult", "user", "assistant"]
    assert _user_texts(harness.messages) == ["go", "and dogs too"]
    assert harness.messages[-1].stop_reason == "aborted"
    assert not harness.agent.has_queued_messages()
    assert _stored(session) == harness.messages  # the session has it too


async def test_a_follow_up_queued_during_a_tool_stays_queued_and_runs_next(
    autojump_clock: trio.testing.MockClock,
) -> None:
    session = await InMemorySessionStore().create()
    scripted = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("c1", "slow", {})),
            ScriptedResponse.text("never: this request is aborted"),
            ScriptedResponse.text("summary"),
        ]
    )
    harness = Harness(model=ROOMY, stream_fn=scripted, session=session, tools=[_tool("slow", 10)])
    async with trio.open_nursery() as nursery:
        nursery.start_soon(harness.prompt, "go")
        await trio.sleep(1)
        harness.follow_up("then summarise")
        harness.abort()
    assert harness.messages[-1].stop_reason == "aborted"
    assert _user_texts(harness.agent.queued_follow_up) == ["then summarise"]
    assert "then summarise" not in _user_texts(harness.messages)
    await harness.resume()  # an aborted assistant tail with a queued follow-up runs it
    assert _user_texts(harness.messages)[-1] == "then summarise"
    assert harness.messages[-1].text == "summary"
    assert not harness.agent.has_queued_messages()
    assert _stored(session) == harness.messages


async def test_a_stalled_tool_aborted_keeps_the_finished_siblings_results(
    autojump_clock: trio.testing.MockClock,
) -> None:
    session = await InMemorySessionStore().create()
    scripted = ScriptedModel([ScriptedResponse.tool_calls(("f1", "fast", {}), ("s1", "stall", {}))])
    harness = Harness(
        model=ROOMY,
        stream_fn=scripted,
        session=session,
        tools=[_tool("fast", 1, "fast result"), _tool("stall", None)],
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(harness.prompt, "run both")
        await trio.sleep(5)  # fast is done, stall stalls
        harness.abort()
    results = [m for m in harness.messages if isinstance(m, ToolResultMessage)]
    assert [(r.tool_call_id, r.is_error, r.content) for r in results] == [
        ("f1", False, (TextContent(text="fast result"),)),
        ("s1", True, (TextContent(text="Operation aborted"),)),
    ]
    assert _stored(session) == harness.messages


async def test_a_prepared_tool_does_not_start_after_an_abort(
    autojump_clock: trio.testing.MockClock,
) -> None:
    started: list[str] = []

    def tracked(name: str) -> Tool:
        inner = _tool(name, 10)

        async def execute(call_id: str, params: Any, signal: Any, on_update: Any) -> ToolResult:
            started.append(call_id)
            return await inner.execute(call_id, params, signal, on_update)

        return Tool(name=name, description=name, execute=execute, parameters={"type": "object"})

    scripted = ScriptedModel([ScriptedResponse.tool_calls(("a", "one", {}), ("b", "two", {}))])
    harness = Harness(
        model=ROOMY,
        stream_fn=scripted,
        tools=[tracked("one"), tracked("two")],
        tool_execution="sequential",
    )
    events: list[HarnessEvent] = []
    harness.subscribe(events.append)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(harness.prompt, "go")
        await trio.sleep(1)  # "a" runs; "b" is prepared, waiting its turn
        harness.abort()
    assert started == ["a"]
    assert [e.tool_call_id for e in events if e.type == "tool_execution_start"] == ["a"]
    results = [m.tool_call_id for m in harness.messages if isinstance(m, ToolResultMessage)]
    assert results == ["a"]


# -- retry and compaction: one after the other, never interleaved -------------------------


def _error(text: str) -> ScriptedResponse:
    return ScriptedResponse(stop_reason="error", error_message=text)


def _big(text: str, tokens: int) -> ScriptedResponse:
    return ScriptedResponse.text(text, usage=Usage(input=tokens, output=10, total_tokens=tokens))


def _harness_events(events: list[HarnessEvent]) -> list[str]:
    kept = {"auto_retry_start", "auto_retry_end", "compaction_start", "compaction_end", "settled"}
    return [e.type for e in events if e.type in kept]


async def test_a_retry_ends_before_the_threshold_compaction_starts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A run that fails, is retried, and then is over the threshold: the retry ends
    (successfully) before the compaction after the run starts."""
    session = await InMemorySessionStore().create()
    scripted = ScriptedModel(
        [
            _big("a" * 400, 300),
            _error("503 Service Unavailable"),
            _big("b" * 400, 900),
            ScriptedResponse.text("SUMMARY"),
            ScriptedResponse.text("PREFIX"),
        ]
    )
    harness = Harness(
        model=SMALL_WINDOW,
        stream_fn=scripted,
        session=session,
        compaction=SMALL,
        retry=RetrySettings(base_delay=1.0, jitter=0.0),
    )
    await harness.prompt("one " * 50)
    events: list[HarnessEvent] = []
    harness.subscribe(events.append)
    await harness.prompt("two " * 50)
    assert _harness_events(events) == [
        "auto_retry_start",
        "auto_retry_end",
        "compaction_start",
        "compaction_end",
        "settled",
    ]
    end = next(e for e in events if e.type == "compaction_end")
    assert end.status == "completed"


async def test_a_compaction_mid_run_ends_before_a_retry_is_scheduled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A threshold compaction between two turns of a run, then a retryable failure of the
    next request: the compaction has ended before the retry's back-off starts, and the
    retried request uses the compacted context."""
    session = await InMemorySessionStore().create()
    scripted = ScriptedModel(
        [
            ScriptedResponse.text("hi"),
            ScriptedResponse.tool_calls(
                ("c1", "t", {}), usage=Usage(input=900, output=10, total_tokens=900)
            ),
            ScriptedResponse.text("SUMMARY"),
            _error("overloaded"),
            ScriptedResponse.text("done"),
        ]
    )
    harness = Harness(
        model=SMALL_WINDOW,
        stream_fn=scripted,
        session=session,
        compaction=SMALL,
        retry=RetrySettings(base_delay=1.0, jitter=0.0),
        tools=[_tool("t", 0)],
    )
    await harness.prompt("hello")  # what the compaction summarises
    events: list[HarnessEvent] = []
    harness.subscribe(events.append)
    await harness.prompt("x " * 300)
    order = _harness_events(events)
    assert order[:4] == ["compaction_start", "compaction_end", "auto_retry_start", "auto_retry_end"]
    assert order[-1] == "settled"
    assert harness.messages[0].role == "compactionSummary"
    assert harness.messages[-1].text == "done"
    failed, retried = scripted.requests[3], scripted.requests[4]
    assert "SUMMARY" in _text(retried.messages[0])  # the summary, as the model sees it
    assert retried.messages == failed.messages  # the same compacted context
