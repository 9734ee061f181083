"""The loop with ordinary pitrio tools: batches, updates, hooks, terminate, truncation."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from pitrio import (
    AbortSignal,
    AfterToolCallResult,
    AgentContext,
    AgentEvent,
    BeforeToolCallResult,
    LoopConfig,
    Model,
    TextContent,
    Tool,
    ToolResult,
    ToolResultMessage,
    UserMessage,
    run_agent_loop,
    text_result,
)
from pitrio.testing import ScriptedModel, ScriptedResponse, check_trace

MODEL = Model(id="m", api="scripted", provider="scripted")
PROMPT = UserMessage(content=(TextContent(text="go"),))


def _text(result: ToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def _run(
    responses: list[ScriptedResponse], tools: list[Tool], **config: Any
) -> tuple[list[AgentEvent], list[Any]]:
    events: list[AgentEvent] = []

    async def emit(event: AgentEvent) -> None:
        events.append(event)

    new = await run_agent_loop(
        [PROMPT],
        AgentContext(tools=list(tools)),
        LoopConfig(model=MODEL, **config),
        emit,
        AbortSignal(),
        ScriptedModel(responses),
    )
    assert check_trace(events) == []
    return events, new


def _sleeper(name: str, delays: dict[str, float], log: list[str] | None = None) -> Tool:
    async def execute(call_id: str, params: Any, signal: AbortSignal, on_update: Any) -> ToolResult:
        if log is not None:
            log.append(f"start {call_id}")
        await trio.sleep(delays[call_id])
        if log is not None:
            log.append(f"end {call_id}")
        return text_result(f"{call_id} done")

    return Tool(name=name, execute=execute)


async def test_parallel_ends_in_completion_order_results_in_source_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Three tools with different delays: ends by completion, messages by source order."""
    tool = _sleeper("t", {"a": 3, "b": 1, "c": 2})
    events, new = await _run(
        [
            ScriptedResponse.tool_calls(("a", "t", {}), ("b", "t", {}), ("c", "t", {})),
            ScriptedResponse.text("ok"),
        ],
        [tool],
    )
    ends = [e.tool_call_id for e in events if e.type == "tool_execution_end"]
    assert ends == ["b", "c", "a"]
    results = [m.tool_call_id for m in new if isinstance(m, ToolResultMessage)]
    assert results == ["a", "b", "c"]
    assert trio.current_time() == pytest.approx(3)


async def test_sequential_execution_mode_forces_the_whole_batch(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """One sequential tool in the message makes every call run one after another."""
    log: list[str] = []
    seq = Tool(
        name="seq", execute=_sleeper("seq", {"a": 1}, log).execute_fn, execution_mode="sequential"
    )
    par = _sleeper("par", {"b": 1}, log)
    await _run(
        [
            ScriptedResponse.tool_calls(("a", "seq", {}), ("b", "par", {})),
            ScriptedResponse.text("ok"),
        ],
        [seq, par],
    )
    assert log == ["start a", "end a", "start b", "end b"]
    assert trio.current_time() == pytest.approx(2)


async def test_updates_are_emitted_while_running_and_dropped_after(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """on_update becomes tool_execution_update in order; a late update is ignored."""
    saved: list[Any] = []

    async def execute(call_id: str, params: Any, signal: AbortSignal, on_update: Any) -> ToolResult:
        on_update(text_result("one"))
        await trio.sleep(1)
        on_update(text_result("two"))
        saved.append(on_update)
        return text_result("final")

    events, _ = await _run(
        [ScriptedResponse.tool_calls(("u", "up", {})), ScriptedResponse.text("ok")],
        [Tool(name="up", execute=execute)],
    )
    saved[0](text_result("too late"))
    updates = [_text(e.partial_result) for e in events if e.type == "tool_execution_update"]
    assert updates == ["one", "two"]


async def test_hooks_block_override_and_terminate() -> None:
    """before_tool_call blocks; after_tool_call overrides fields; all-terminate stops the run."""

    async def execute(call_id: str, params: Any, signal: AbortSignal, on_update: Any) -> ToolResult:
        return text_result("ran", terminate=True)

    def before(ctx: Any, signal: AbortSignal) -> BeforeToolCallResult | None:
        if ctx.tool_call.id == "blocked":
            return BeforeToolCallResult(block=True, reason="", terminate=True)
        return None

    async def after(ctx: Any, signal: AbortSignal) -> AfterToolCallResult:
        return AfterToolCallResult(content=(TextContent(text="patched"),), details={"x": 1})

    events, new = await _run(
        [ScriptedResponse.tool_calls(("blocked", "t", {}), ("ok", "t", {}))],
        [Tool(name="t", execute=execute)],
        before_tool_call=before,
        after_tool_call=after,
    )
    results = [m for m in new if isinstance(m, ToolResultMessage)]
    assert results[0].content == (TextContent(text="Tool execution was blocked"),)
    assert results[0].is_error
    assert results[1].content == (TextContent(text="patched"),)
    assert results[1].details == {"x": 1}
    # Both results terminate, so no second model request was made.
    assert events[-1].type == "agent_end"
    assert sum(1 for e in events if e.type == "turn_start") == 1


async def test_a_raising_tool_and_an_unknown_tool_become_error_results() -> None:
    """Exceptions and unknown names are data: error results with the texts Pi uses."""

    async def execute(call_id: str, params: Any, signal: AbortSignal, on_update: Any) -> ToolResult:
        raise OSError("disk full")

    _, new = await _run(
        [
            ScriptedResponse.tool_calls(("a", "t", {}), ("b", "nope", {})),
            ScriptedResponse.text("ok"),
        ],
        [Tool(name="t", execute=execute)],
    )
    results = [m for m in new if isinstance(m, ToolResultMessage)]
    assert [r.content[0].text for r in results] == ["disk full", "Tool nope not found"]  # type: ignore[union-attr]
    assert all(r.is_error for r in results)


async def test_length_stop_fails_every_call_without_running_it() -> None:
    """A truncated response's tool calls fail with Pi's re-issue text; the loop goes on."""
    ran: list[str] = []

    async def execute(call_id: str, params: Any, signal: AbortSignal, on_update: Any) -> ToolResult:
        ran.append(call_id)
        return text_result("x")

    _, new = await _run(
        [
            ScriptedResponse.tool_calls(("a", "t", {}), stop_reason="length"),
            ScriptedResponse.text("ok"),
        ],
        [Tool(name="t", execute=execute)],
    )
    assert ran == []
    result = next(m for m in new if isinstance(m, ToolResultMessage))
    assert result.content[0].text.startswith('Tool call "t" was not executed: the response hit')  # type: ignore[union-attr]
    assert new[-1].text == "ok"


async def test_validation_errors_and_coercion_reach_the_tool() -> None:
    """Arguments are coerced as Pi does before execute; invalid ones fail with Pi's text."""
    seen: list[Any] = []

    async def execute(call_id: str, params: Any, signal: AbortSignal, on_update: Any) -> ToolResult:
        seen.append(params)
        return text_result("x")

    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    _, new = await _run(
        [
            ScriptedResponse.tool_calls(("a", "t", {"n": "5"}), ("b", "t", {})),
            ScriptedResponse.text("ok"),
        ],
        [Tool(name="t", execute=execute, parameters=schema)],
    )
    assert seen == [{"n": 5}]
    failed = [m for m in new if isinstance(m, ToolResultMessage) and m.is_error]
    assert failed[0].content[0].text.startswith('Validation failed for tool "t":\n  - n: ')  # type: ignore[union-attr]


async def test_request_options_are_built_per_invocation() -> None:
    """Requests of one invocation share their options while template, signal, key and
    reasoning stay; a changed thinking level builds new ones; another invocation (another
    signal) never sees the first one's options (no process-wide cache)."""
    from pitrio import NextTurn, StreamOptions

    seen: list[Any] = []
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("c1", "t", {})),
            ScriptedResponse.tool_calls(("c2", "t", {})),
            ScriptedResponse.text("done"),
        ]
        * 2
    )

    def stream_fn(m: Model, context: Any, options: StreamOptions) -> Any:
        seen.append(options)
        return model(m, context, options)

    turns = 0

    def prepare_next_turn(turn: Any) -> NextTurn | None:
        nonlocal turns
        turns += 1
        return NextTurn(thinking_level="high") if turns == 2 else None

    async def execute(call_id: str, params: Any, signal: AbortSignal, on_update: Any) -> ToolResult:
        return text_result("ok")

    template = StreamOptions()
    config = LoopConfig(
        model=MODEL, stream_options=template, reasoning="low", prepare_next_turn=prepare_next_turn
    )
    signals = [AbortSignal(), AbortSignal()]
    for signal in signals:
        turns = 0

        async def emit(event: AgentEvent) -> None:
            pass

        context = AgentContext(tools=[Tool(name="t", execute=execute)])
        await run_agent_loop([PROMPT], context, config, emit, signal, stream_fn)
    first, second = seen[:3], seen[3:]
    assert [o.reasoning for o in seen] == ["low", "low", "high"] * 2
    assert first[0] is first[1]
    assert first[2] is not first[1]
    assert all(o.signal is signals[0] for o in first)
    assert all(o.signal is signals[1] for o in second)
    assert second[0] is not first[0]
    assert template.signal is None  # the template itself is never changed


def test_request_options_copy_every_field_of_the_template() -> None:
    """The request's options are ``attrs.evolve(template, signal=..., api_key=...,
    reasoning=...)``, field for field (the copier is written from the class's fields), and
    a new object: the template is left as it was."""
    import attrs

    from pitrio import StreamOptions
    from pitrio._model import request_options

    values: dict[str, Any] = {}
    for number, name in enumerate(attrs.fields_dict(StreamOptions)):
        values[name] = {"extra": {"k": number}}.get(name, f"value {number}")
    template = StreamOptions(**values)
    signal = AbortSignal()
    got = request_options(template, signal, "key", "high")
    assert got == attrs.evolve(template, signal=signal, api_key="key", reasoning="high")
    assert got is not template
    assert (got.signal, got.api_key, got.reasoning) == (signal, "key", "high")
    assert template.api_key == values["api_key"]
    assert request_options(template, signal, None, None).session_id == values["session_id"]
