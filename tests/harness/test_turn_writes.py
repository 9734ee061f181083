"""How a harness run reaches storage: the records between two effects share one write.

Each operation record is its own transaction (the lines Pi writes), but a record needs to
be in storage only before the effect it guards: the request's (``effect_pending``)
before it is sent, a call's intent before its tool runs. So a turn of a parallel batch
of tools that do not wait costs three writes (the request; the answer and every intent;
the outcomes, the result entries and the save point's sync), a sequential batch one
more per tool (each tool's intent before it runs), and an outcome is written at once
while a sibling still runs (a stalled tool does not hold back a finished one's result).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import trio
import trio.testing

from pitrio import (
    Model,
    TextContent,
    Tool,
    ToolResult,
    ToolResultMessage,
    Usage,
    text_result,
    wire,
)
from pitrio.harness import Harness, InMemorySessionStore, JsonlSessionStore, Session
from pitrio.testing import ScriptedModel, ScriptedResponse

MODEL = Model(id="m", api="scripted", provider="scripted", context_window=200_000)


class _CountingWriter:
    """A session's writer, counting the transactions of each write to storage."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.sizes: list[int] = []

    async def write(self, session: Session, transactions: Sequence[Any]) -> None:
        self.sizes.append(len(transactions))
        await self.inner.write(session, transactions)

    async def sync(self) -> None:
        await self.inner.sync()

    async def close(self) -> None:
        await self.inner.close()


def _count_writes(session: Session) -> list[int]:
    """The number of transactions of each write the session makes to its storage."""
    writer = _CountingWriter(session._writer)
    session._writer = writer
    return writer.sizes


def _stored(store: InMemorySessionStore, session: Session) -> list[dict[str, Any]]:
    """Every write the memory store holds for ``session`` (what a crash would keep)."""
    return [w for t in store._records[session.id].transactions for w in t]


def _tools(names: Sequence[str], seen: list[Any], check: Any) -> list[Tool]:
    def make(name: str) -> Tool:
        async def execute(call_id: str, params: Any, signal: Any, on_update: Any) -> ToolResult:
            seen.append(check(call_id))
            return text_result(f"{name} done")

        return Tool(name=name, description=name, execute=execute, parameters={"type": "object"})

    return [make(n) for n in names]


async def _run(
    execution: Literal["parallel", "sequential"], turns: int, k: int
) -> tuple[list[int], list[Any], Session, InMemorySessionStore, Harness]:
    store = InMemorySessionStore()
    session = await store.create()
    seen: list[Any] = []

    def intent_stored(call_id: str) -> tuple[str, bool, bool]:
        """When a tool runs: is its call's intent, and its assistant entry, in storage?"""
        writes = _stored(store, session)
        states = [w["value"] for w in writes if w.get("namespace") == "pi.op.state"]
        batch = states[-1].get("batch") if states else None
        assistant = batch is not None and any(
            w["kind"] == "entry" and w["id"] == batch["assistantEntryId"] for w in writes
        )
        intents = [c for c in (batch or {}).get("calls", ()) if c["status"] == "effect_pending"]
        return call_id, assistant, len(intents) >= 1

    script = [
        ScriptedResponse.tool_calls(*[(f"c{t}_{j}", f"t{j}", {}) for j in range(k)])
        for t in range(turns)
    ]
    harness = Harness(
        model=MODEL,
        stream_fn=ScriptedModel([*script, ScriptedResponse.text("done")]),
        session=session,
        tools=_tools([f"t{j}" for j in range(k)], seen, intent_stored),
        tool_execution=execution,
    )
    sizes = _count_writes(session)
    await harness.prompt("go")
    return sizes, seen, session, store, harness


async def test_a_turn_of_a_parallel_batch_costs_three_writes() -> None:
    sizes, seen, session, store, harness = await _run("parallel", turns=3, k=4)
    # The prompt; per turn: the request, the answer with the intents, the save point;
    # the last turn's request and save point; the run's end.
    assert len(sizes) == 1 + 3 * 3 + 2 + 1
    # Every transaction reached storage, each on its own (Pi's transactions).
    assert sum(sizes) == len(store._records[session.id].transactions)
    assert all(assistant and intent for _, assistant, intent in seen)
    assert len(seen) == 12
    assert list(session.build_context().messages) == harness.messages


async def test_a_sequential_batch_writes_each_intent_before_its_tool_runs() -> None:
    sizes, seen, session, _, harness = await _run("sequential", turns=2, k=3)
    # Per turn: the request, one write before each tool, the save point.
    assert len(sizes) == 1 + 2 * (1 + 3 + 1) + 2 + 1
    assert [call for call, _, _ in seen] == ["c0_0", "c0_1", "c0_2", "c1_0", "c1_1", "c1_2"]
    assert all(assistant and intent for _, assistant, intent in seen)
    assert list(session.build_context().messages) == harness.messages


async def test_a_finished_tool_s_outcome_is_stored_while_its_sibling_stalls(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = InMemorySessionStore()
    session = await store.create()

    async def fast(call_id: str, params: Any, signal: Any, on_update: Any) -> ToolResult:
        await trio.sleep(1)
        return text_result("fast result")

    async def stall(call_id: str, params: Any, signal: Any, on_update: Any) -> ToolResult:
        await trio.sleep_forever()
        raise AssertionError  # pragma: no cover

    harness = Harness(
        model=MODEL,
        stream_fn=ScriptedModel(
            [ScriptedResponse.tool_calls(("f1", "fast", {}), ("s1", "stall", {}))]
        ),
        session=session,
        tools=[
            Tool(name=n, description=n, execute=e, parameters={"type": "object"})
            for n, e in (("fast", fast), ("stall", stall))
        ],
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(harness.prompt, "run both")
        await trio.sleep(5)  # fast is done, stall stalls
        pending = [
            w["value"]["payload"]
            for w in _stored(store, session)
            if w.get("namespace") == "pi.pending.entry"
        ]
        assert [(p["toolCallId"], p["content"]) for p in pending] == [
            ("f1", [{"type": "text", "text": "fast result"}])
        ]
        harness.abort()


async def test_a_result_entry_holds_the_message_the_transcript_holds(tmp_path: Path) -> None:
    """The result entry's JSON is made from its outcome's (one unstructuring), with the
    transcript message's own timestamp: reading the file back gives the same messages."""

    async def rich(call_id: str, params: Any, signal: Any, on_update: Any) -> ToolResult:
        return ToolResult(
            content=(TextContent(text="ü 😀"),),
            details={"lines": [1, 2], "nested": {"a": None}},
            usage=Usage(input=3, output=4, total_tokens=7),
        )

    async def failing(call_id: str, params: Any, signal: Any, on_update: Any) -> ToolResult:
        raise RuntimeError("broken")

    store = JsonlSessionStore(tmp_path)
    session = await store.create()
    harness = Harness(
        model=MODEL,
        stream_fn=ScriptedModel(
            [
                ScriptedResponse.tool_calls(("r1", "rich", {}), ("b1", "failing", {})),
                ScriptedResponse.text("done"),
            ]
        ),
        session=session,
        tools=[
            Tool(name=n, description=n, execute=e, parameters={"type": "object"})
            for n, e in (("rich", rich), ("failing", failing))
        ],
    )
    await harness.prompt("go")
    live = [m for m in harness.messages if isinstance(m, ToolResultMessage)]
    assert [m.is_error for m in live] == [False, True]
    path = session.path
    await session.close()
    assert path is not None
    lines = [json.loads(line) for line in (await trio.Path(path).read_text()).splitlines()[1:]]
    stored = [
        w["message"]
        for line in lines
        for w in (line if isinstance(line, list) else [line])
        if w["kind"] == "entry" and w.get("message", {}).get("role") == "toolResult"
    ]
    assert stored == [wire.unstructure(m) for m in live]
    reopened = await store.open(session.id)
    assert list(reopened.build_context().messages) == harness.messages
    await reopened.close()


async def test_a_result_entry_reuses_its_outcome_s_json_only_for_the_same_result() -> None:
    from pitrio.harness._operations import OperationRecorder

    session = await InMemorySessionStore().create()
    ops = OperationRecorder(session, {})
    content = (TextContent(text="out"),)
    outcome = ToolResultMessage(tool_call_id="c", tool_name="t", content=content, timestamp=1)
    form = wire.unstructure(outcome)
    ops._forms["c"] = (outcome, form)
    later = ToolResultMessage(tool_call_id="c", tool_name="t", content=content, timestamp=9)
    assert ops._wire_form(later) == wire.unstructure(later)
    assert ops._wire_form(later) is None  # used once
    other = ToolResultMessage(
        tool_call_id="c", tool_name="t", content=(TextContent(text="out"),), timestamp=9
    )
    ops._forms["c"] = (outcome, form)
    assert ops._wire_form(other) is None  # another content object: unstructured anew
