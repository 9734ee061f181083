"""The writers' cheaper paths: records' repeated parts encoded once, the thread hop.

A session's lines must stay exactly what ``json.dumps(..., separators=(",", ":"),
ensure_ascii=False)`` makes of the same writes (Pi reads them; the tests of the records
compare their text), and a write through ``_worker.run_sync`` must behave as
``trio.to_thread.run_sync``: done when it returns, its exception raised, not abandoned
when the caller is cancelled.
"""

from __future__ import annotations

import copy
import json
import pickle
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
import trio

from pitrio import Model, Tool, ToolResult, text_result
from pitrio.harness import Harness, JsonlSessionStore, SqliteSessionStore, _worker
from pitrio.harness._encoding import Encoded, Record, dumps, line, restamped
from pitrio.testing import ScriptedModel, ScriptedResponse

MODEL = Model(id="m", api="scripted", provider="scripted", context_window=200_000)


def _plain(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _state() -> Record:
    config = Encoded(model={"provider": "p", "modelId": "é"}, activeToolNames=["a", "b"])
    calls = [Encoded(status="planned", sourceIndex=i, resultEntryId=f"r{i}") for i in range(2)]
    return Record(
        control=Encoded(status="running"),
        settings=Encoded(enabled=True, reserve=16384, ratio=0.5, off=False, none=None),
        latest=None,
        at="tools",
        batch=Record(configuration=config, turnId="t", calls=calls, empty={}, nested=[[1]]),
        text='quote " back \\ nl \n ünïcode ☃',
    )


def test_a_record_s_json_is_the_plain_encoder_s() -> None:
    state = _state()
    write = {"kind": "value", "op": "set", "seq": 3, "namespace": "pi.op.state", "key": "o"}
    write["value"] = state
    assert dumps(write) == _plain(write)
    assert dumps(state) == _plain(state)
    assert dumps(state["batch"]["calls"][0]) == _plain(dict(state["batch"]["calls"][0]))
    entry = {"kind": "entry", "id": "e", "message": {"content": [{"text": "x"}]}}
    assert line([write]) == (_plain(write) + "\n").encode()
    assert line([entry, write]) == (_plain([entry, write]) + "\n").encode()
    assert dumps([1, 2.5, "x"]) == _plain([1, 2.5, "x"])
    # Twice: the second time from the parts' kept JSON, the same text.
    assert dumps(write) == _plain(write)


def test_a_lone_surrogate_is_escaped_as_javascript_escapes_it() -> None:
    write = {"kind": "value", "op": "set", "key": "k", "value": Record(text="a\ud800b")}
    data = line([write])
    assert data == (json.dumps(write, separators=(",", ":")) + "\n").encode()
    assert b"\\ud800" in data
    assert json.loads(data)["value"]["text"] == "a\ud800b"


def test_a_restamped_form_is_the_plain_encoder_s() -> None:
    """A tool result's wire form, encoded for its outcome, is stamped again for its
    entry: the JSON follows, whether the timestamp is its last member or not."""
    form = Encoded(role="toolResult", content=[{"type": "text", "text": "ok ✓"}], timestamp=5)
    dumps(form)
    entry = {"kind": "entry", "id": "e", "type": "message", "seq": 2}
    for base in (form, Encoded(timestamp=5, role="toolResult"), Encoded(role="x")):
        again = restamped(base, 1796186844886)
        assert again == {**base, "timestamp": 1796186844886}
        assert list(again) == list({**base, "timestamp": 1796186844886})
        assert dumps(again) == _plain(dict(again))
        assert dumps({**entry, "message": again}) == _plain({**entry, "message": dict(again)})
    assert dumps(form) == _plain(dict(form))  # the original keeps its own stamp


def test_copies_of_encoded_parts_are_plain_dicts() -> None:
    state = _state()
    dumps(state)  # the parts now keep their JSON
    for copied in (copy.deepcopy(state), pickle.loads(pickle.dumps(state)), dict(state)):
        assert copied == state
        assert type(copied) is dict
    deep = copy.deepcopy(state)
    assert type(deep["settings"]) is dict
    deep["settings"]["enabled"] = False  # a copy may change; the original's JSON stays
    assert dumps(deep) == _plain(deep) != dumps(state) == _plain(state)


def _tools(k: int, seen: list[str] | None = None, db: Path | None = None) -> list[Tool]:
    def stored_states() -> list[str]:
        conn = sqlite3.connect(db or "")
        try:
            query = "SELECT value FROM kv WHERE namespace = 'pi.op.state'"
            return [r[0] for r in conn.execute(query)]
        finally:
            conn.close()

    async def execute(call_id: str, params: Any, signal: Any, on_update: Any) -> ToolResult:
        if seen is not None and db is not None:
            # While the tool runs: the run's state as the database holds it.
            seen.extend(await trio.to_thread.run_sync(stored_states))
        await trio.lowlevel.checkpoint()
        # The first call's result is large: encoded once for its outcome and its entry.
        return text_result(f"done {call_id} ✓" + ("é\n" * 1000 if call_id.endswith("_0") else ""))

    return [
        Tool(name=f"t{j}", description="t", execute=execute, parameters={"type": "object"})
        for j in range(k)
    ]


async def _run(
    session: Any, turns: int = 2, k: int = 3, seen: list[str] | None = None, db: Path | None = None
) -> Harness:
    script = [
        ScriptedResponse.tool_calls(*[(f"c{t}_{j}", f"t{j}", {"i": j}) for j in range(k)])
        for t in range(turns)
    ]
    harness = Harness(
        model=MODEL,
        stream_fn=ScriptedModel([*script, ScriptedResponse.text("done")]),
        session=session,
        tools=_tools(k, seen, db),
    )
    await harness.prompt("go ☃")
    return harness


async def test_a_harness_run_s_lines_are_the_plain_encoder_s(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    session = await store.create()
    await _run(session)
    await session.close()
    lines = (await trio.Path(session.path or "").read_text(encoding="utf-8")).splitlines()
    states = 0
    for text in lines:
        assert text == _plain(json.loads(text))
        states += text.count('"namespace":"pi.op.state"')
    assert states >= 2 * (1 + 3 * 3)  # the records went through the spliced path
    again = await store.open(session.id)
    assert [m.role for m in again.build_context().messages][:2] == ["user", "assistant"]
    await again.close()


async def test_a_harness_run_s_sqlite_values_are_the_plain_encoder_s(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    seen: list[str] = []
    async with SqliteSessionStore(db) as store:
        session = await store.create()
        await _run(session, seen=seen, db=db)
        await session.close()
    conn = sqlite3.connect(db)
    try:
        rows = [r[0] for r in conn.execute("SELECT body FROM entries")]
        values = [r[0] for r in conn.execute("SELECT value FROM kv")]
    finally:
        conn.close()
    assert rows
    assert len(seen) == 2 * 3  # the state each tool saw stored
    assert all('"status":"effect_pending"' in text for text in seen)
    for text in [*rows, *values, *seen]:
        assert text == _plain(json.loads(text))


async def test_the_worker_hop_runs_in_another_thread_and_raises_there() -> None:
    here = threading.get_ident()
    assert await _worker.run_sync(threading.get_ident) != here
    assert await _worker.run_sync(lambda a, b: a + b, 2, 3) == 5

    def fail() -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        await _worker.run_sync(fail)


async def test_a_cancelled_hop_does_not_start_and_a_started_one_is_waited_for() -> None:
    calls: list[str] = []
    with trio.CancelScope() as scope:
        scope.cancel()
        await _worker.run_sync(calls.append, "never")
    assert calls == []

    entered, release = threading.Event(), threading.Event()

    def slow() -> str:
        entered.set()
        release.wait(timeout=60)
        calls.append("written")
        return "done"

    results: list[str] = []

    async def hop(scope: trio.CancelScope) -> None:
        with scope:
            results.append(await _worker.run_sync(slow))
            await trio.lowlevel.checkpoint()  # the cancellation lands here
            results.append("not reached")

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            scope = trio.CancelScope()
            nursery.start_soon(hop, scope)
            await trio.to_thread.run_sync(entered.wait)
            scope.cancel()
            release.set()
    assert calls == ["written"]
    assert results == ["done"]
