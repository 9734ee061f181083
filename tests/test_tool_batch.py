"""A parallel batch runs its calls in as few tasks as it can; every guarantee still holds.

Calls whose tools return without waiting run one after another in the batch's own task;
a call that waits keeps the task it started in and the others go on in a new one. These
tests mix both kinds in one batch and check what a task per call gave: ends in
completion order, results in source order, abort cancels the waiting tools (even one
that ignores its signal) but never a finished call's after-hook or listeners, a
shielded tool finishes, and no task is left behind.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from pitrio import (
    AbortSignal,
    AfterToolCallContext,
    Agent,
    AgentEvent,
    Model,
    TextContent,
    Tool,
    ToolExecutionEnd,
    ToolResult,
    ToolResultMessage,
    text_result,
)
from pitrio.testing import ScriptedModel, ScriptedResponse, check_trace

MODEL = Model(id="m", api="scripted", provider="scripted")


def _tool(name: str, delay: float | None, *, shielded: bool = False) -> Tool:
    """``delay`` None: returns at once; ``inf``: waits forever, ignoring the signal."""

    async def execute(call_id: str, params: Any, signal: AbortSignal, on_update: Any) -> ToolResult:
        if delay is not None:
            with trio.CancelScope(shield=shielded):
                await trio.sleep(delay)
        return text_result(f"{name} done")

    return Tool(name=name, execute=execute)


def _texts(result: ToolResult) -> list[str]:
    return [c.text for c in result.content if isinstance(c, TextContent)]


async def test_a_mixed_batch_keeps_every_guarantee_under_abort(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Five calls: two return at once, one waits 1 s, one ignores the abort forever, one
    is shielded for 3 s. The after-hook waits 1 s for every finished call; the abort at
    1.5 s lands while the 1 s call's after-hook and a listener of the fast calls' ends
    run: both still complete."""
    hooks: list[tuple[str, float, float]] = []

    async def after_tool_call(ctx: AfterToolCallContext, signal: AbortSignal) -> None:
        start = trio.current_time()
        await trio.sleep(1)
        hooks.append((ctx.tool_call.id, start, trio.current_time()))

    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(
                ("fast1", "fast", {}),
                ("slow", "slow", {}),
                ("stuck", "stuck", {}),
                ("safe", "safe", {}),
                ("fast2", "fast", {}),
            )
        ]
    )
    agent = Agent(
        stream_fn=model,
        model=MODEL,
        tools=[
            _tool("fast", None),
            _tool("slow", 1),
            _tool("stuck", float("inf")),
            _tool("safe", 3, shielded=True),
        ],
        after_tool_call=after_tool_call,
    )
    events: list[AgentEvent] = []
    agent.subscribe(lambda event, signal: events.append(event))
    listened: list[tuple[str, float, float]] = []

    async def slow_listener(event: AgentEvent, signal: AbortSignal) -> None:
        # The fast calls' ends come at 1 s: this listener's work spans the abort.
        if isinstance(event, ToolExecutionEnd) and event.tool_call_id.startswith("fast"):
            start = trio.current_time()
            await trio.sleep(1)
            listened.append((event.tool_call_id, start, trio.current_time()))

    agent.subscribe(slow_listener)
    async with trio.open_nursery() as nursery:
        await nursery.start(agent.prompt, "go")
        await trio.sleep(1.5)
        agent.abort()
        await agent.wait_for_idle()
        await trio.testing.wait_all_tasks_blocked()
        assert nursery.child_tasks == frozenset()  # the run left no task behind
    assert check_trace(events) == []

    ends = [e for e in events if isinstance(e, ToolExecutionEnd)]
    # Completion order: the two fast calls (after-hooks end at 1 s), the slow one (its
    # hook ran 1 -> 2 s, across the abort), the stuck one (aborted at 1.5 s: its hook
    # runs 1.5 -> 2.5 s), the shielded one (3 -> 4 s).
    ids = [e.tool_call_id for e in ends]
    assert set(ids[:2]) == {"fast1", "fast2"}  # together at 1 s: Trio picks the order
    assert ids[2:] == ["slow", "stuck", "safe"]
    assert [_texts(e.result) for e in ends] == [
        ["fast done"],
        ["fast done"],
        ["slow done"],
        ["Operation aborted"],
        ["safe done"],
    ]
    assert [e.is_error for e in ends] == [False, False, False, True, False]
    assert sorted(hooks) == [
        ("fast1", 0, 1),
        ("fast2", 0, 1),
        ("safe", 3, 4),
        ("slow", 1, 2),  # started before the abort, not cancelled by it
        ("stuck", 1.5, 2.5),
    ]
    assert sorted(listened) == [("fast1", 1, 2), ("fast2", 1, 2)]  # not cancelled either
    results = [m for m in agent.state.messages if isinstance(m, ToolResultMessage)]
    assert [m.tool_call_id for m in results] == ["fast1", "slow", "stuck", "safe", "fast2"]
    assert agent.state.messages[-1].stop_reason == "aborted"
    assert trio.current_time() == pytest.approx(4)


async def test_calls_that_return_at_once_keep_pis_lockstep_order() -> None:
    """Every execute() runs before any after-hook, every after-hook before any end, each
    step in source order as in Pi (with a task per call, Trio picked the order within a
    step: only the conformance player's FIFO patch made it Pi's)."""
    seen: list[str] = []

    async def execute(call_id: str, params: Any, signal: AbortSignal, on_update: Any) -> ToolResult:
        seen.append(f"execute {call_id}")
        return text_result("ok")

    def after_tool_call(ctx: AfterToolCallContext, signal: AbortSignal) -> None:
        seen.append(f"after {ctx.tool_call.id}")

    def listener(event: AgentEvent, signal: AbortSignal) -> None:
        if isinstance(event, ToolExecutionEnd):
            seen.append(f"end {event.tool_call_id}")

    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("a", "t", {}), ("b", "t", {}), ("c", "t", {})),
            ScriptedResponse.text("done"),
        ]
    )
    agent = Agent(
        stream_fn=model,
        model=MODEL,
        tools=[Tool(name="t", execute=execute)],
        after_tool_call=after_tool_call,
    )
    agent.subscribe(listener)
    await agent.prompt("go")
    assert seen == [
        *(f"execute {c}" for c in "abc"),
        *(f"after {c}" for c in "abc"),
        *(f"end {c}" for c in "abc"),
    ]


async def test_a_listener_failing_in_a_batch_fails_the_run_as_data(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A listener raising at one call's end (the others still waiting in other tasks)
    ends the run with the failure tail; nothing is left running."""
    model = ScriptedModel(
        [ScriptedResponse.tool_calls(("a", "fast", {}), ("b", "slow", {}), ("c", "fast", {}))]
    )
    agent = Agent(stream_fn=model, model=MODEL, tools=[_tool("fast", None), _tool("slow", 5)])

    def listener(event: AgentEvent, signal: AbortSignal) -> None:
        if isinstance(event, ToolExecutionEnd) and event.tool_call_id == "c":
            raise RuntimeError("listener broke")

    agent.subscribe(listener)
    await agent.prompt("go")
    assert agent.state.error_message == "listener broke"
    assert not agent.is_running
    assert trio.current_time() == 0  # the slow call was cancelled with the batch


@pytest.mark.parametrize("calls", [1, 2])
async def test_async_update_listeners_run_while_the_tool_runs(
    autojump_clock: trio.testing.MockClock, calls: int
) -> None:
    """An async listener's work for an update (what it awaits) happens while the tool is
    still running, as Pi's listener promises do, for a lone call and in a batch."""
    seen: list[tuple[str, float]] = []

    async def execute(call_id: str, params: Any, signal: AbortSignal, on_update: Any) -> ToolResult:
        on_update(text_result("half way"))
        await trio.sleep(10)
        seen.append(("tool done", trio.current_time()))
        return text_result("ok")

    async def listener(event: AgentEvent, signal: AbortSignal) -> None:
        if event.type == "tool_execution_update":
            await trio.sleep(1)
            seen.append(("update handled", trio.current_time()))

    ids = [f"c{i}" for i in range(calls)]
    model = ScriptedModel([ScriptedResponse.tool_calls(*[(i, "t", {}) for i in ids])])
    agent = Agent(stream_fn=model, model=MODEL, tools=[Tool(name="t", execute=execute)])
    agent.subscribe(listener)
    await agent.prompt("go")
    assert seen == [("update handled", 1)] * calls + [("tool done", 10)] * calls
    assert not agent.is_running


@pytest.mark.parametrize("sequential", [False, True])
async def test_arguments_too_big_to_validate_inline_go_to_a_worker(
    sequential: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call whose arguments are too big to check inline is prepared by the awaited path
    (the validation in a worker thread): valid ones run with the coerced value, invalid
    ones end with the validator's error; small ones are checked inline, with no worker."""
    from pitrio._validation import _validator, _work

    workers: list[int] = []
    real = _validator._validate_in_worker

    def spy(*args: Any) -> Any:
        workers.append(1)
        return real(*args)

    monkeypatch.setattr(_validator, "_validate_in_worker", spy)
    seen: list[Any] = []

    async def execute(call_id: str, params: Any, signal: AbortSignal, on_update: Any) -> ToolResult:
        seen.append(params)
        return text_result("ok")

    schema = {
        "type": "object",
        "properties": {"items": {"type": "array", "items": {"type": "integer"}}},
        "required": ["items"],
    }
    n = _work.INLINE_UNITS + 1
    good = {"items": [str(i) for i in range(n)]}
    bad = {"items": [*range(n - 1), "x"]}
    small = {"items": ["7"]}
    validator = _validator.compile_validator(schema)
    assert validator.validate_inline("big", good) is _validator.TOO_BIG_INLINE
    assert validator.validate_inline("big", small) == {"items": [7]}
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(
                ("c1", "big", good), ("c2", "big", bad), ("c3", "big", small)
            ),
            ScriptedResponse.text("done"),
        ]
    )
    agent = Agent(
        stream_fn=model,
        model=MODEL,
        tools=[Tool(name="big", parameters=schema, execute=execute)],
        tool_execution="sequential" if sequential else "parallel",
    )
    events: list[AgentEvent] = []
    agent.subscribe(lambda event, signal: events.append(event))
    with trio.fail_after(30):
        await agent.prompt("go")
    assert check_trace(events) == []
    assert seen == [{"items": list(range(n))}, {"items": [7]}]
    ends = {e.tool_call_id: e for e in events if isinstance(e, ToolExecutionEnd)}
    assert [ends[c].is_error for c in ("c1", "c2", "c3")] == [False, True, False]
    assert "must be integer" in _texts(ends["c2"].result)[0]
    assert len(workers) == 2  # the two big ones
