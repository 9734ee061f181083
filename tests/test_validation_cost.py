"""What validating huge, model-produced arguments costs (issue 6), and that it is bounded.

A model can send a million-item array. Validation is synchronous Python, so before
these fixes such a call held the event loop for seconds (an abort could not get in)
and its error result echoed every argument (11.9 MB). Now the echo is capped, and
:meth:`Validator.validate_async` (what the tool batch awaits) moves a long validation
to a worker thread that cancellation and the abort signal interrupt. Timing is not
asserted here (benchmarks/bench_validation.py measures it); what is asserted is where
the work runs, that it stops, and the texts.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
import trio

from pitrio import (
    AbortSignal,
    AgentContext,
    AgentEvent,
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
from pitrio._validation import (
    ToolArgumentsError,
    ValidationAborted,
    _validator,
    _work,
    compile_validator,
    js_json_dumps,
)
from pitrio._validation._jsvalues import js_json_dumps_capped
from pitrio._validation._validator import ECHO_CUT, ECHO_LIMIT
from pitrio.testing import ScriptedModel, ScriptedResponse, check_trace

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"items": {"type": "array", "items": {"type": "integer"}}},
    "required": ["items"],
}


def _one_bad(n: int) -> dict[str, Any]:
    items: list[Any] = list(range(n))
    items[n // 2] = "x"
    return {"items": items}


# ---------------------------------------------------------------------------------------
# The echo in the error result


def test_a_huge_echo_is_cut_with_a_marker() -> None:
    """The message shows Pi's header and errors, the beginning of the arguments'
    JSON (exactly as Pi writes it) and the marker; the exception keeps them whole."""
    args = _one_bad(100_000)
    with pytest.raises(ToolArgumentsError) as info:
        compile_validator(SCHEMA).validate("t", args)
    text = str(info.value)
    head = (
        'Validation failed for tool "t":\n  - items.50000: must be integer\n\nReceived arguments:\n'
    )
    assert text.startswith(head)
    assert text.endswith(ECHO_CUT)
    echo = text[len(head) : -len(ECHO_CUT)]
    assert len(echo) == ECHO_LIMIT
    assert js_json_dumps(args, indent=2).startswith(echo)
    assert info.value.arguments is args
    assert "32,000 characters" in ECHO_CUT


@pytest.mark.parametrize("extra", [0, 1])
def test_the_echo_is_pis_up_to_the_limit(extra: int) -> None:
    """An echo of exactly ECHO_LIMIT characters is Pi's whole text; one more is cut."""
    frame = len(js_json_dumps({"n": "x", "s": ""}, indent=2))
    args = {"n": "x", "s": "a" * (ECHO_LIMIT - frame + extra)}
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    with pytest.raises(ToolArgumentsError) as info:
        compile_validator(schema).validate("t", args)
    full = js_json_dumps(args, indent=2)
    assert len(full) == ECHO_LIMIT + extra
    text = str(info.value)
    assert text.startswith('Validation failed for tool "t":\n  - n: must be integer\n\n')
    if extra == 0:
        assert text.endswith("Received arguments:\n" + full)
    else:
        assert text.endswith("Received arguments:\n" + full[:ECHO_LIMIT] + ECHO_CUT)


class _Trap:
    """A value that fails the test if the JSON writer ever reaches it."""

    def __repr__(self) -> str:
        raise AssertionError("the capped dump wrote past its limit")


def test_the_capped_dump_stops_writing_at_the_limit() -> None:
    """Its cost is bounded by the limit: what comes after is never visited."""
    value: Any = [*range(100_000), _Trap()]
    text, complete = js_json_dumps_capped(value, indent=2, limit=1_000)
    assert not complete
    assert text == js_json_dumps(list(range(1_000)), indent=2)[:1_000]


# ---------------------------------------------------------------------------------------
# validate_async: inline when small, in a worker when long


async def test_small_arguments_are_validated_inline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No thread and no checkpoint for a normal call: same value as validate()."""

    def no_thread(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a small validation went to a thread")

    monkeypatch.setattr(trio.to_thread, "run_sync", no_thread)
    v = compile_validator(SCHEMA)
    args = {"items": ["1", 2, 3]}
    assert await v.validate_async("t", args) == v.validate("t", args) == {"items": [1, 2, 3]}
    with pytest.raises(ToolArgumentsError) as info:
        await v.validate_async("t", _one_bad(10))
    assert "items.5: must be integer" in str(info.value)


async def test_long_validation_runs_in_a_worker_with_the_same_outcome(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    threads: list[str] = []
    real = _validator._validate_in_worker

    def spy(*args: Any) -> Any:
        threads.append(threading.current_thread().name)
        return real(*args)

    monkeypatch.setattr(_validator, "_validate_in_worker", spy)
    v = compile_validator(SCHEMA)
    n = _work.INLINE_UNITS + 1
    good = {"items": [str(i) for i in range(n)]}
    assert await v.validate_async("t", good) == {"items": list(range(n))}
    bad = _one_bad(n)
    with pytest.raises(ToolArgumentsError) as info:
        await v.validate_async("t", bad)
    with pytest.raises(ToolArgumentsError) as expected:
        v.validate("t", bad)
    assert str(info.value) == str(expected.value)
    assert len(threads) == 2
    assert threading.main_thread().name not in threads


class _GatedWorker:
    """Replaces the worker body: it waits for ``gate`` before validating, then records
    how the real validation ended."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.finished = threading.Event()
        self.outcome: BaseException | str | None = None
        self.real = _validator._validate_in_worker

    def __call__(self, *args: Any) -> Any:
        self.entered.set()
        self.gate.wait()
        try:
            result = self.real(*args)
        except BaseException as exc:
            self.outcome = exc
            raise
        else:
            self.outcome = "finished"
            return result
        finally:
            self.finished.set()


async def test_a_long_validation_is_cancellable(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cancel scope gets in at once; the worker then stops at its first look at the
    stop flag instead of finishing the walk."""
    worker = _GatedWorker()
    monkeypatch.setattr(_validator, "_validate_in_worker", worker)
    v = compile_validator(SCHEMA)
    cancelled: list[bool] = []

    async def validate(scope: trio.CancelScope) -> None:
        with scope:
            await v.validate_async("t", _one_bad(4 * _work.CHECK_UNITS))
        cancelled.append(scope.cancelled_caught)

    scope = trio.CancelScope()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(validate, scope)
        await trio.to_thread.run_sync(worker.entered.wait)
        scope.cancel()
    assert cancelled == [True]
    worker.gate.set()
    await trio.to_thread.run_sync(worker.finished.wait)
    assert isinstance(worker.outcome, _work._Stopped)


async def test_the_abort_signal_stops_a_long_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    worker = _GatedWorker()
    monkeypatch.setattr(_validator, "_validate_in_worker", worker)
    v = compile_validator(SCHEMA)
    signal = AbortSignal()
    raised: list[BaseException] = []

    async def validate() -> None:
        try:
            await v.validate_async("t", _one_bad(4 * _work.CHECK_UNITS), signal=signal)
        except ValidationAborted as exc:
            raised.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(validate)
        await trio.to_thread.run_sync(worker.entered.wait)
        signal.abort()
    assert [str(e) for e in raised] == ["Operation aborted"]
    worker.gate.set()
    await trio.to_thread.run_sync(worker.finished.wait)
    assert isinstance(worker.outcome, _work._Stopped)


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param({"items": [str(i) for i in range(1_000)]}, id="clone-and-coerce"),
        pytest.param({"items": [{"a": i} for i in range(1_000)]}, id="check-and-errors"),
    ],
)
def test_every_walk_looks_at_the_stop_flag(arguments: dict[str, Any]) -> None:
    """In a worker's budget, the real validation counts its work: once the stop flag is
    set it stops; while it is not, the outcome is the one without a budget."""
    v = compile_validator(SCHEMA)
    stop = threading.Event()
    stop.set()
    with _work.budget(100, stop), pytest.raises(_work._Stopped):
        v.validate("t", arguments)
    with _work.budget(100, threading.Event()):
        try:
            outcome: Any = v.validate("t", arguments)
        except ToolArgumentsError as exc:
            outcome = str(exc)
    try:
        expected: Any = v.validate("t", arguments)
    except ToolArgumentsError as exc:
        expected = str(exc)
    assert outcome == expected


@pytest.mark.parametrize(
    ("value", "big"),
    [
        ({"i": 1}, False),
        ([0] * _work.INLINE_UNITS, False),
        ([0] * (_work.INLINE_UNITS + 1), True),
        ({"a": [{"b": [0] * 100}] * 196}, False),  # 1 + 196 * (1 + 1 + 100) = 19,993 units
        ({"a": [{"b": [0] * 100}] * 197}, True),  # 20,095 units
        ("x" * (64 * _work.INLINE_UNITS), False),
        ({"s": "x" * (64 * _work.INLINE_UNITS + 64)}, True),
    ],
)
def test_the_size_that_moves_a_validation_to_a_worker(value: Any, big: bool) -> None:
    assert _work.exceeds(value, _work.INLINE_UNITS) is big


# ---------------------------------------------------------------------------------------
# In the agent loop


async def test_an_abort_gets_into_a_long_validation_in_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Aborting a run while a huge call is validated ends that call as ``Operation
    aborted`` (the tool never runs) and the run settles."""
    worker = _GatedWorker()
    monkeypatch.setattr(_validator, "_validate_in_worker", worker)
    ran: list[Any] = []

    async def execute(call_id: str, params: Any, signal: AbortSignal, on_update: Any) -> ToolResult:
        ran.append(params)
        return text_result("ran")

    events: list[AgentEvent] = []

    async def emit(event: AgentEvent) -> None:
        events.append(event)

    signal = AbortSignal()
    new: list[Any] = []

    async def run() -> None:
        new.extend(
            await run_agent_loop(
                [UserMessage(content=(TextContent(text="go"),))],
                AgentContext(tools=[Tool(name="t", execute=execute, parameters=SCHEMA)]),
                LoopConfig(model=Model(id="m", api="scripted", provider="scripted")),
                emit,
                signal,
                ScriptedModel(
                    [
                        ScriptedResponse.tool_calls(("a", "t", _one_bad(4 * _work.CHECK_UNITS))),
                        ScriptedResponse.text("never"),
                    ]
                ),
            )
        )

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        await trio.to_thread.run_sync(worker.entered.wait)
        signal.abort()
    worker.gate.set()
    await trio.to_thread.run_sync(worker.finished.wait)
    assert ran == []
    results = [m for m in new if isinstance(m, ToolResultMessage)]
    assert len(results) == 1
    assert results[0].is_error
    block = results[0].content[0]
    assert isinstance(block, TextContent)
    assert block.text == "Operation aborted"
    assert check_trace(events) == []
