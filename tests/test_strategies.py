"""The public Hypothesis strategies of pitrio.testing: what they draw keeps the invariants
they promise, and a drawn event trace is exactly what a real Agent emits for the same run."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import trio
from hypothesis import given, settings, strategies as st

from pitrio import (
    AbortSignal,
    Agent,
    AgentEvent,
    AgentStart,
    ArgumentTypeError,
    AssistantMessage,
    MessageEnd,
    MessageStart,
    MessageUpdate,
    Model,
    TextContent,
    Tool,
    ToolCall,
    ToolExecutionEnd,
    ToolExecutionStart,
    ToolExecutionUpdate,
    ToolResult,
    ToolResultMessage,
    UsageError,
    text_result,
    wire,
)
from pitrio.testing import (
    ScriptedModel,
    ScriptedResponse,
    agent_event_traces,
    check_trace,
    event_stream_prefixes,
    run_virtual,
    scripted_responses,
    scripted_runs,
)


def _calls(response: ScriptedResponse) -> list[ToolCall]:
    return [b for b in response.content if isinstance(b, ToolCall)]


# --------------------------------------------------------------------------------------
# Scripts


@given(scripted_responses(["a", "b"], stop_reasons=["toolUse"], max_tool_calls=2))
def test_a_tool_use_answer_calls_the_given_tools_with_unique_ids(r: ScriptedResponse) -> None:
    calls = _calls(r)
    assert 1 <= len(calls) <= 2
    assert {c.name for c in calls} <= {"a", "b"}
    assert [c.id for c in calls] == [f"call_{i}" for i in range(len(calls))]
    assert r.stop_reason == "toolUse"


@given(scripted_responses(stop_reasons=["stop", "error", "aborted"], timing=False))
def test_answers_without_tools_are_text(r: ScriptedResponse) -> None:
    assert not _calls(r)
    assert any(isinstance(b, TextContent) for b in r.content)
    assert (r.chunk_size, r.delay, r.checkpoint_each_event) == (None, 0, False)
    if r.stop_reason == "stop":
        assert r.error_message is None


@given(
    scripted_responses(
        {"add": st.fixed_dictionaries({"a": st.integers(), "b": st.integers()})},
        stop_reasons=["toolUse"],
    )
)
def test_arguments_come_from_the_given_strategies(r: ScriptedResponse) -> None:
    for call in _calls(r):
        assert set(call.arguments) == {"a", "b"}


@given(scripted_runs(["work", "look"], max_turns=4))
def test_a_scripted_run_asks_for_tools_then_ends(script: list[ScriptedResponse]) -> None:
    assert 1 <= len(script) <= 4
    *middle, last = script
    assert all(_calls(r) for r in middle)
    assert not _calls(last)
    ids = [c.id for r in script for c in _calls(r)]
    assert len(ids) == len(set(ids))


@settings(max_examples=30)
@given(scripted_runs(["work"], failures=False))
def test_a_scripted_run_is_played_to_its_end(script: list[ScriptedResponse]) -> None:
    """Without failures, a real agent asks for exactly the scripted answers, and the
    run's events keep every invariant."""

    async def work(
        call_id: str, params: Any, signal: AbortSignal, on_update: Callable[[ToolResult], None]
    ) -> ToolResult:
        return text_result("worked")

    async def main() -> tuple[ScriptedModel, list[AgentEvent]]:
        model = ScriptedModel(script)
        agent = Agent(stream_fn=model, tools=[Tool(name="work", execute=work)])
        events: list[AgentEvent] = []
        agent.subscribe(lambda event, signal: events.append(event))
        await agent.prompt("go")
        return model, events

    model, events = run_virtual(main)
    assert model.calls == len(script)
    assert check_trace(events) == []


def test_strategy_arguments_are_checked() -> None:
    with pytest.raises(UsageError, match=r"stop_reasons=\['toolUse'\] needs tools"):
        scripted_responses(stop_reasons=["toolUse"])
    with pytest.raises(UsageError, match=r"'done' is not one of stop, toolUse"):
        scripted_responses(["a"], stop_reasons=["done"])  # type: ignore[list-item]
    with pytest.raises(UsageError, match=r"max_turns=0\): must be an int >= 1"):
        scripted_runs(["a"], max_turns=0)
    with pytest.raises(ArgumentTypeError, match=r"not one string"):
        scripted_runs("search")
    with pytest.raises(ArgumentTypeError, match=r"arguments of 'a' must be a Hypothesis strategy"):
        scripted_responses({"a": {"x": 1}})  # type: ignore[dict-item]
    with pytest.raises(ArgumentTypeError, match=r"give tool names"):
        agent_event_traces({"a": st.just({})})  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------
# Event traces


@given(agent_event_traces())
def test_a_drawn_trace_keeps_every_invariant(events: list[AgentEvent]) -> None:
    assert check_trace(events) == []
    ended = [e.message for e in events if isinstance(e, MessageEnd)]
    last = events[-1]
    assert isinstance(events[0], AgentStart)
    assert all(a is b for a, b in zip(last.messages, ended, strict=True))  # type: ignore[union-attr]


@given(event_stream_prefixes(failures=False))
def test_a_prefix_is_the_start_of_a_valid_trace(events: list[AgentEvent]) -> None:
    if events:
        assert isinstance(events[0], AgentStart)
    # An unfinished run breaks only the "it ended" invariants, never an ordering one.
    unfinished = ("no events", "not 'agent_end'", "0 agent_end events", "never ended")
    for problem in check_trace(events):
        assert any(text in problem for text in unfinished), problem


def _chunk_size(answer: list[AgentEvent]) -> int | None:
    """The chunk size that streams ``answer``'s updates as drawn."""
    deltas = [
        e.assistant_message_event
        for e in answer
        if isinstance(e, MessageUpdate) and e.assistant_message_event.type.endswith("_delta")
    ]
    lengths = [len(d.delta) for d in deltas]  # type: ignore[union-attr]
    has_calls = any(
        isinstance(e, MessageUpdate) and e.assistant_message_event.type == "toolcall_start"
        for e in answer
    )
    tool_deltas = any(d.type == "toolcall_delta" for d in deltas)
    if has_calls and not tool_deltas:
        return None
    return max(lengths, default=0) or None


def _replay(events: list[AgentEvent]) -> list[AgentEvent]:
    """The same run on a real Agent: the answers, tool outcomes and the batch's
    interleaving read off the trace (each parallel step at its own virtual second)."""
    responses: list[ScriptedResponse] = []
    current: list[AgentEvent] = []
    for e in events:
        if isinstance(e, MessageStart | MessageUpdate) and e.message.role == "assistant":
            current.append(e)
        elif isinstance(e, MessageEnd) and isinstance(e.message, AssistantMessage):
            m = e.message
            responses.append(
                ScriptedResponse(
                    content=m.content,
                    stop_reason=m.stop_reason,  # type: ignore[arg-type]
                    error_message=m.error_message,
                    chunk_size=_chunk_size(current),
                )
            )
            current = []
    # Each call's steps (update / end) and the instant each happens within its batch.
    steps: dict[str, list[tuple[str, int, ToolExecutionEnd | None]]] = {}
    batch_step = 0
    sequential = False
    seen_result = truncated = False
    for e in events:
        if isinstance(e, MessageEnd) and isinstance(e.message, AssistantMessage):
            batch_step, seen_result = 0, False
            truncated = e.message.stop_reason == "length"  # its calls never run
        elif isinstance(e, ToolExecutionStart):
            steps[e.tool_call_id] = []
            sequential = sequential or (seen_result and not truncated)
        elif isinstance(e, ToolExecutionUpdate):
            batch_step += 1
            steps[e.tool_call_id].append(("update", batch_step, None))
        elif isinstance(e, ToolExecutionEnd):
            batch_step += 1
            steps[e.tool_call_id].append(("end", batch_step, e))
        elif isinstance(e, MessageEnd) and isinstance(e.message, ToolResultMessage):
            seen_result = True

    async def execute(
        call_id: str, params: Any, signal: AbortSignal, on_update: Callable[[ToolResult], None]
    ) -> ToolResult:
        start = trio.current_time()
        sent = 0
        for what, at, end in steps[call_id]:
            if not sequential:
                await trio.sleep_until(start + at)
            if what == "update":
                on_update(text_result(f"update {sent} of {call_id}"))
                sent += 1
                continue
            assert end is not None
            text = end.result.content[0].text  # type: ignore[union-attr]
            if end.is_error:
                raise RuntimeError(text)
            return text_result(text)
        raise AssertionError(call_id)

    names = {e.tool_name for e in events if isinstance(e, ToolExecutionStart)}
    prompt = events[2]
    assert isinstance(prompt, MessageStart)

    async def main() -> list[AgentEvent]:
        agent = Agent(
            model=Model(id="scripted-model", api="scripted", provider="scripted"),
            stream_fn=ScriptedModel(responses),
            tools=[Tool(name=name, execute=execute) for name in sorted(names)],
            tool_execution="sequential" if sequential else "parallel",
        )
        out: list[AgentEvent] = []
        agent.subscribe(lambda event, signal: out.append(event))
        await agent.prompt(prompt.message)
        return out

    return run_virtual(main)


def _plain(value: Any) -> Any:
    """Wire form without timestamps (real messages carry the time they were made)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if k != "timestamp"}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


@pytest.mark.filterwarnings("ignore:Generating overly large repr")  # a failing trace's repr
@settings(max_examples=60)
@given(agent_event_traces(["search", "fetch"], max_turns=3))
def test_a_drawn_trace_is_what_a_real_agent_emits(events: list[AgentEvent]) -> None:
    real = _replay(events)
    drawn = [_plain(wire.unstructure(e)) for e in events]
    got = [_plain(wire.unstructure(e)) for e in real]
    assert got == drawn


def test_the_kit_imports_without_hypothesis(tmp_path: Any) -> None:
    """pitrio.testing itself does not need Hypothesis; the strategies name the extra."""
    blocker = tmp_path / "hypothesis.py"
    blocker.write_text("raise ImportError('no hypothesis here')\n")
    code = (
        "import pitrio.testing as t\n"
        "assert t.ScriptedModel\n"
        "try:\n"
        "    t.scripted_runs\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    assert "pip install 'pitrio[testing]'" in done.stdout
