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


# Values a write's own path (_encoding._write) hands to the plain encoder, or refuses:
# each must come out as the plain encoder's text all the same.
_AWKWARD: list[Any] = [
    1e-05,
    -3.5e-07,
    9.157273257692765e-05,
    0.0001,
    1e16,
    1.5e21,
    123456789012345.6,
    -0.0,
    float("nan"),
    float("inf"),
    -float("inf"),
    2**64,
    -(2**70),
    2**63,
    {1: "int key"},
    {"text": "a:1e5, [0.00001] ratio,2e3"},
    '\x00\x1f\x7f\u2028 é ☃ 😀 "q" \\',
    ("a", "tuple"),
    [],
]


@pytest.mark.parametrize("value", _AWKWARD, ids=repr)
def test_an_awkward_value_in_a_write_is_the_plain_encoder_s(value: Any) -> None:
    deep: Any = value
    for _ in range(300):
        deep = [deep]
    for each in (value, {"usage": {"cost": value, "n": None}}, deep, Record(v=value)):
        write = {"kind": "value", "op": "set", "seq": 1, "namespace": "n", "key": "k"}
        write["value"] = each
        assert dumps(each) == _plain(each)
        assert line([write]) == (_plain(write) + "\n").encode()
        assert line([write, write]) == (_plain([write, write]) + "\n").encode()


def test_a_write_the_plain_encoder_refuses_is_refused() -> None:
    import datetime

    for value in (datetime.date(2026, 1, 1), object(), Record(x=object())):
        with pytest.raises(TypeError, match="not JSON serializable"):
            line(
                [
                    {
                        "kind": "value",
                        "op": "set",
                        "seq": 1,
                        "namespace": "n",
                        "key": "k",
                        "value": value,
                    }
                ]
            )


def test_a_write_in_another_shape_is_the_plain_encoder_s() -> None:
    """Only a committed write's own members in its own order take the one-piece path."""
    state = _state()
    writes: list[dict[str, Any]] = [
        {"kind": "value", "op": "set", "seq": True, "namespace": "n", "key": "k", "value": state},
        {"kind": "value", "op": "set", "seq": 1, "namespace": 5, "key": "k", "value": state},
        {"op": "set", "kind": "value", "seq": 1, "namespace": "n", "key": "k", "value": state},
        {"kind": "value", "op": "delete", "seq": 2, "namespace": "n", "key": 'k"\u2028'},
        {"kind": "list", "op": "append", "seq": 3, "namespace": "n", "key": "k", "value": 1.5},
        {"kind": "entry", "id": "e", "seq": 4, "message": Encoded(role="user"), "x": None},
    ]
    for write in writes:
        assert dumps(write) == _plain(write)
    assert line(writes) == (_plain(writes) + "\n").encode()


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
