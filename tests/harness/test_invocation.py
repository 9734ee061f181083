"""Tool invocations: Pi's identity, durable memos and checkpoints for each tool call.

A tool running under a harness with a session gets its call's
:class:`~pitrio.harness.ToolInvocation` from :func:`~pitrio.harness.current_invocation`:
the ids Pi's harness gives it (the invocation id is the result entry's, the operation
and turn ids those of the run's records), memos kept in the session as
``pi.op.tool_memo`` and deleted with the call's outcome, and checkpoints kept as
``pi.pending.tool_output``. A crash is simulated by copying the JSONL session while the
tool runs (each transaction is written as it commits, so the copy is what a SIGKILL
would leave); a fresh harness restores the copy: a ``safe`` tool runs again with the
same invocation id and sees its memos, an unsafe one ends as interrupted with its last
checkpoint's content. Both ways with Pi's own harness (``node/pi_resume.mjs``,
``node/pi_run_and_hang.mjs``).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import trio

from pitrio import (
    InvalidStateError,
    Model,
    TextContent,
    Tool,
    ToolResult,
    ToolResultMessage,
    UsageError,
    text_result,
)
from pitrio.harness import (
    Harness,
    InMemorySessionStore,
    JsonlSessionStore,
    MessageEntry,
    ToolInvocation,
    current_invocation,
    restore_lane,
)
from pitrio.testing import ScriptedModel, ScriptedResponse

from .test_operations import INTERRUPTED, _pi, _pi_killed_mid_tool

MODEL = Model(id="scripted", api="scripted", provider="local", context_window=200_000)
MEMO = "pi.op.tool_memo"
OUTPUT = "pi.pending.tool_output"


def _script(*calls: tuple[str, str, dict[str, Any]]) -> ScriptedModel:
    return ScriptedModel([ScriptedResponse.tool_calls(*calls), ScriptedResponse.text("finished")])


def _invocation() -> ToolInvocation:
    invocation = current_invocation()
    assert invocation is not None
    return invocation


async def test_a_tool_gets_its_calls_identity_and_memos() -> None:
    session = await InMemorySessionStore().create(cwd="/w", session_id="s")
    seen: dict[str, Any] = {}

    async def step(call_id: str, params: Any, signal: Any, on_update: Any) -> ToolResult:
        invocation = _invocation()
        seen["invocation"] = invocation
        assert invocation.get_memo("count") is None
        assert invocation.get_memo("count", 0) == 0
        await invocation.set_memo("count", {"n": 1})
        key = f"{invocation.operation_id}:{invocation.invocation_id}:count"
        seen["stored"] = session.get_value(MEMO, key)
        seen["read"] = invocation.get_memo("count")
        await invocation.set_memo("other", None)
        seen["null"] = invocation.get_memo("other", "missing")
        await invocation.delete_memo("other")
        seen["deleted"] = invocation.get_memo("other", "missing")
        for bad in ("", "a:b"):
            with pytest.raises(UsageError, match="memo name must not"):
                invocation.get_memo(bad)
        await invocation.checkpoint(text_result("half"))
        seen["checkpoint"] = session.get_value(
            OUTPUT, f"{invocation.operation_id}:{invocation.invocation_id}"
        )
        return text_result("done")

    updates: list[Any] = []
    harness = Harness(
        model=MODEL,
        stream_fn=_script(("c1", "step", {})),
        session=session,
        tools=[Tool(name="step", execute=step)],
    )
    harness.subscribe(
        lambda e: updates.append(e.partial_result) if e.type == "tool_execution_update" else None
    )
    await harness.prompt("go")
    invocation = seen["invocation"]
    assert seen["stored"] == seen["read"] == {"n": 1}
    assert (seen["null"], seen["deleted"]) == (None, "missing")
    assert seen["checkpoint"] == {"content": [{"type": "text", "text": "half"}]}
    assert updates == [text_result("half")]  # a checkpoint is an update too
    # Pi's ids: the invocation is the result's entry; the operation is the run's.
    result = next(
        e
        for e in session.entries
        if isinstance(e, MessageEntry) and isinstance(e.message, ToolResultMessage)
    )
    assert result.id == invocation.invocation_id
    lane = restore_lane(session)
    assert lane.last_operation_id == invocation.operation_id
    assert session.get_value("pi.result", invocation.operation_id)["status"] == "completed"
    assert invocation.turn_id not in ("", invocation.invocation_id)
    assert repr(invocation).startswith("ToolInvocation(invocation_id=")
    # The outcome took the memos and the checkpoint with it.
    leftovers = [k for k in session._state.values if k[0] in (MEMO, OUTPUT)]
    assert leftovers == []
    # The invocation ended with its call.
    with pytest.raises(InvalidStateError, match="no longer owns"):
        invocation.get_memo("count")
    with pytest.raises(InvalidStateError, match="no longer owns"):
        await invocation.set_memo("count", 2)
    await invocation.checkpoint(text_result("late"))  # ignored, as Pi's
    assert updates == [text_result("half")]


async def test_a_memo_name_must_be_a_str() -> None:
    session = await InMemorySessionStore().create(cwd="/w", session_id="s")
    errors: list[BaseException] = []

    async def step(call_id: str, params: Any, signal: Any, on_update: Any) -> ToolResult:
        try:
            await _invocation().set_memo(3, 1)  # type: ignore[arg-type]
        except TypeError as exc:
            errors.append(exc)
        return text_result("done")

    harness = Harness(
        model=MODEL,
        stream_fn=_script(("c1", "step", {})),
        session=session,
        tools=[Tool(name="step", execute=step)],
    )
    await harness.prompt("go")
    assert [str(e) for e in errors] == ["Tool invocation memo name must be a str; got 3"]


async def test_no_invocation_outside_a_call_or_without_a_session() -> None:
    assert current_invocation() is None
    seen: list[ToolInvocation | None] = []

    async def step(call_id: str, params: Any, signal: Any, on_update: Any) -> ToolResult:
        seen.append(current_invocation())
        return text_result("done")

    harness = Harness(
        model=MODEL, stream_fn=_script(("c1", "step", {})), tools=[Tool(name="step", execute=step)]
    )
    await harness.prompt("go")
    assert seen == [None]


class _BareTool:
    """A tool with only what the loop needs (no ``prepare_arguments``, no ``replay``)."""

    name = "bare"
    description = "a bare tool"
    parameters: dict[str, Any] = {"type": "object"}  # noqa: RUF012
    label = "Bare"

    def __init__(self) -> None:
        self.seen: list[ToolInvocation | None] = []

    async def execute(self, call_id: str, params: Any, signal: Any, on_update: Any) -> ToolResult:
        self.seen.append(current_invocation())
        return text_result("bare")


async def test_any_tool_object_gets_its_invocation() -> None:
    session = await InMemorySessionStore().create(cwd="/w", session_id="s")
    tool = _BareTool()
    harness = Harness(
        model=MODEL,
        stream_fn=_script(("c1", "bare", {"a": 1})),
        session=session,
        tools=[tool],  # type: ignore[list-item]
    )
    await harness.prompt("go")
    (invocation,) = tool.seen
    assert invocation is not None
    # The Agent runs the harness's wrapper, which is the tool in all else.
    (given,) = harness.agent.state.tools
    assert not isinstance(given, _BareTool)
    assert (given.name, given.description, given.parameters) == (
        "bare",
        "a bare tool",
        {"type": "object"},
    )
    assert getattr(given, "label", None) == "Bare"
    assert given.execution_mode is None
    assert given.prepare_arguments({"a": 1}) == {"a": 1}
    assert repr(given) == f"InvokedTool({tool!r})"
    # The same wrapper for the next turn's unchanged tools.
    await harness.prompt("again")
    assert harness.agent.state.tools[0] is given


async def test_parallel_calls_each_see_their_own_invocation() -> None:
    session = await InMemorySessionStore().create(cwd="/w", session_id="s")
    seen: dict[str, str] = {}

    async def step(call_id: str, params: Any, signal: Any, on_update: Any) -> ToolResult:
        before = _invocation().invocation_id
        await trio.sleep(params["wait"])  # the calls interleave
        await _invocation().set_memo("me", call_id)
        assert _invocation().get_memo("me") == call_id
        assert _invocation().invocation_id == before
        seen[call_id] = before
        return text_result(call_id)

    harness = Harness(
        model=MODEL,
        stream_fn=_script(("a", "step", {"wait": 0.02}), ("b", "step", {"wait": 0.01})),
        session=session,
        tools=[Tool(name="step", execute=step)],
    )
    await harness.prompt("go")
    ids = {
        e.message.tool_call_id: e.id
        for e in session.entries
        if isinstance(e, MessageEntry) and isinstance(e.message, ToolResultMessage)
    }
    assert seen == ids
    assert len(set(ids.values())) == 2


async def _crash_mid_tool(root: Path, copy: Path, replay: str, name: str = "step") -> str:
    """Run until the tool has set its memo and checkpoint and blocks, copy the session
    (what a kill leaves), then cancel the run. The call's invocation id."""
    blocked = trio.Event()
    seen: list[str] = []

    async def step(call_id: str, params: Any, signal: Any, on_update: Any) -> ToolResult:
        invocation = _invocation()
        await invocation.set_memo("charged", "receipt-1")
        await invocation.checkpoint(
            ToolResult(content=(TextContent(text="half done"),), details={"p": 1})
        )
        seen.append(invocation.invocation_id)
        blocked.set()
        await trio.sleep_forever()
        raise AssertionError

    session = await JsonlSessionStore(root).create(cwd="/w", session_id="crash")
    harness = Harness(
        model=MODEL,
        stream_fn=_script(("c1", name, {"x": 1})),
        session=session,
        tools=[Tool(name=name, execute=step, replay=replay)],  # type: ignore[arg-type]
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(harness.prompt, "run the slow tool")
        with trio.fail_after(10):
            await blocked.wait()
        shutil.copytree(root, copy)
        nursery.cancel_scope.cancel()
    await session.close()
    return seen[0]


async def test_a_safe_tool_replayed_after_a_crash_sees_its_memos(tmp_path: Path) -> None:
    first_id = await _crash_mid_tool(tmp_path / "run", copy := tmp_path / "copy", "safe")
    session = await JsonlSessionStore(copy).open("crash")
    interrupted = restore_lane(session).operation
    assert interrupted is not None
    assert interrupted.state["batch"]["calls"][0]["status"] == "effect_pending"
    seen: dict[str, Any] = {}

    async def replayed(call_id: str, params: Any, signal: Any, on_update: Any) -> ToolResult:
        invocation = _invocation()
        seen["id"] = invocation.invocation_id
        seen["memo"] = invocation.get_memo("charged")
        # Pi clears the checkpoint before a replay.
        seen["checkpoint"] = session.get_value(
            OUTPUT, f"{invocation.operation_id}:{invocation.invocation_id}"
        )
        seen["args"] = params
        return text_result("charged once")

    harness = Harness(
        model=MODEL,
        stream_fn=ScriptedModel([ScriptedResponse.text("finished")]),
        session=session,
        tools=[Tool(name="step", execute=replayed, replay="safe")],
    )
    await harness.resume()
    assert seen == {"id": first_id, "memo": "receipt-1", "checkpoint": None, "args": {"x": 1}}
    messages = list(session.build_context().messages)
    assert [m.role for m in messages] == ["user", "assistant", "toolResult", "assistant"]
    assert messages[2].content == (TextContent(text="charged once"),)
    assert [k for k in session._state.values if k[0] in (MEMO, OUTPUT)] == []
    await session.close()


async def test_an_unsafe_tool_interrupted_by_a_crash_ends_with_its_checkpoint(
    tmp_path: Path,
) -> None:
    await _crash_mid_tool(tmp_path / "run", copy := tmp_path / "copy", "never")
    session = await JsonlSessionStore(copy).open("crash")
    ran: list[str] = []

    async def again(call_id: str, params: Any, signal: Any, on_update: Any) -> ToolResult:
        ran.append(call_id)
        return text_result("ran again")

    harness = Harness(
        model=MODEL,
        stream_fn=ScriptedModel([ScriptedResponse.text("finished")]),
        session=session,
        tools=[Tool(name="step", execute=again)],
    )
    await harness.resume()
    assert ran == []
    result = list(session.build_context().messages)[2]
    assert isinstance(result, ToolResultMessage)
    assert result.is_error
    assert result.content == (TextContent(text="half done"), TextContent(text=INTERRUPTED))
    assert result.details == {"p": 1}
    assert [k for k in session._state.values if k[0] in (MEMO, OUTPUT)] == []
    await session.close()


async def test_pi_restores_the_memos_and_checkpoint_pitrio_left(
    tmp_path: Path, pi_node_modules: Path
) -> None:
    for replay in ("never", "safe"):
        copy = tmp_path / f"copy-{replay}"
        first_id = await _crash_mid_tool(tmp_path / f"run-{replay}", copy, replay, "slow")
        (path,) = copy.rglob("*.jsonl")
        pi = await _pi(pi_node_modules, "resume", str(path), replay)
        assert pi["open"] == [{"lane": "main", "kind": "run"}]
        assert pi["result"] == "completed"
        if replay == "never":
            # Pi's interrupted result starts with pitrio's checkpoint.
            assert pi["ran"] == 0
            assert pi["messages"][2] == ["toolResult", f"half done {INTERRUPTED}"]
        else:
            # Pi's safe tool runs again and reads the memo pitrio's tool set.
            assert pi["ran"] == 1
            assert pi["memo"] == "receipt-1"
            assert pi["invocationId"] == first_id
            assert pi["messages"][2] == ["toolResult", "slow ran"]


async def test_pitrio_restores_the_memos_and_checkpoint_pi_left(
    tmp_path: Path, pi_node_modules: Path
) -> None:
    for replay in ("never", "safe"):
        root = tmp_path / replay
        await _pi_killed_mid_tool(pi_node_modules, root, "pi-run", replay=replay, memo=True)
        session = await JsonlSessionStore(root).open("pi-run")
        seen: dict[str, Any] = {}

        async def slow(
            call_id: str, params: Any, signal: Any, on_update: Any, seen: Any = seen
        ) -> ToolResult:
            seen["memo"] = _invocation().get_memo("charged")
            return text_result("slow ran")

        harness = Harness(
            model=MODEL,
            stream_fn=ScriptedModel([ScriptedResponse.text("finished")]),
            session=session,
            tools=[Tool(name="slow", execute=slow, replay=replay)],
        )
        await harness.resume()
        result = list(session.build_context().messages)[2]
        assert isinstance(result, ToolResultMessage)
        if replay == "never":
            assert seen == {}
            assert result.content == (
                TextContent(text="pi half done"),
                TextContent(text=INTERRUPTED),
            )
            assert result.details == {"step": 1}
        else:
            assert seen == {"memo": "pi-receipt"}
            assert result.content == (TextContent(text="slow ran"),)
        await session.close()
