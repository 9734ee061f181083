"""A harness run killed anywhere is resumed by a fresh process and finishes as it would have.

A child process runs one scripted run (the model asks for ``write`` and ``read``, then
``write`` again, then answers "finished") on a JSONL or SQLite session and kills itself
with SIGKILL at a chosen point: before or after the prompt is written, as a request is
sent, mid-stream, inside a tool before or after its effect, once an outcome is recorded,
once a result is in the transcript, between turns, after the last answer. A second
process restores the session (``Harness.interrupted``, ``resume()``) and must finish the
run: the last answer is "finished", the operation is over (``pi.result`` completed, the
lane idle), the unsafe ``write`` tool never had an effect twice (each effect appends a line
to a file the test counts), and the context equals an uninterrupted run's, except that
a ``write`` killed after its effect, before its outcome was written (the outcomes of a
batch no tool still runs in are written with the turn's save point), ends as interrupted
(Pi's result) rather than run again.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

CHILD = r"""
import json, os, signal, sys

import trio

from pitrio import Model, Tool, text_result
from pitrio.harness import Harness, JsonlSessionStore, PiSessionStore, SqliteSessionStore
from pitrio.testing import ScriptedModel, ScriptedResponse

kind, where, mode, point, effects = sys.argv[1:6]
STORES = {"jsonl": JsonlSessionStore, "sqlite": SqliteSessionStore, "pi": PiSessionStore}
MODEL = Model(id="scripted", api="scripted", provider="local", context_window=200_000)
RESPONSES = [
    ScriptedResponse.tool_calls(("c1", "write", {"n": 1}), ("c2", "read", {}), chunk_size=2),
    ScriptedResponse.tool_calls(("c3", "write", {"n": 2}), chunk_size=2),
    ScriptedResponse.text("finished", chunk_size=2),
]
requests = 0


def at(name):
    if mode == "run" and point == name:
        os.kill(os.getpid(), signal.SIGKILL)


def stream(model, context, options):
    global requests
    requests += 1
    at(f"request-{requests}")
    done = sum(1 for m in context.messages if m.role == "toolResult")
    return ScriptedModel([RESPONSES[{0: 0, 2: 1, 3: 2}[done]]])(model, context, options)


def effect(line):
    with open(effects, "a") as f:
        f.write(line + "\n")


async def write(call_id, params, sig, on_update):
    at(f"before-effect-{call_id}")
    effect(f"write {params['n']}")
    at(f"after-effect-{call_id}")
    return text_result(f"wrote {params['n']}")


async def read(call_id, params, sig, on_update):
    at(f"before-effect-{call_id}")
    effect("read")
    at(f"after-effect-{call_id}")
    return text_result("read it")


def listener(event):
    kind = event.type
    if kind == "message_end":
        role = event.message.role
        at(f"end-{role}" if role != "toolResult" else f"end-{event.message.tool_call_id}")
    elif kind == "message_update":
        at(f"update-{requests}")
    elif kind == "tool_execution_end":
        at(f"outcome-{event.tool_call_id}")
    elif kind == "save_point":
        at(f"save-point-{requests}")
    elif kind == "agent_end":
        at("agent-end")


async def main():
    store = STORES[kind](where)
    tools = [
        Tool(name="write", description="w", execute=write, parameters={"type": "object"}),
        Tool(name="read", description="r", execute=read, parameters={"type": "object"},
             replay="safe"),
    ]
    if mode == "run":
        session = await store.create(cwd="/work/project", session_id="crash")
        harness = Harness(model=MODEL, stream_fn=stream, session=session, tools=tools)
        await harness.set_model(MODEL)
        at("before-prompt")
        harness.subscribe(listener)
        await harness.prompt("go")
    else:
        session = await store.open("crash")
        harness = Harness(model=MODEL, stream_fn=stream, session=session, tools=tools)
        events = []
        harness.subscribe(lambda e: events.append(e.type))
        interrupted = harness.interrupted
        if interrupted is not None:
            await harness.resume()
        elif not any(getattr(e, "message", None) is not None
                     and getattr(e.message, "role", "") == "assistant"
                     for e in session.entries):
            await harness.prompt("go")  # killed before the prompt was written
        context = [
            [m.role, getattr(m, "tool_call_id", None),
             " ".join(getattr(b, "text", getattr(b, "id", "")) for b in
                      (m.content if not isinstance(m.content, str) else []))]
            for m in session.build_context().messages
        ]
        lane = session.get_value("pi.lane.state", "main")
        last = lane["lastOperationId"] if lane else None
        result = session.get_value("pi.result", last) if last else None
        print(json.dumps({
            "interrupted": None if interrupted is None else interrupted.at,
            "context": context,
            "lane": lane,
            "result": None if result is None else result["status"],
            "events": events,
        }))
    await session.close()
    if kind == "sqlite":
        await store.aclose()


trio.run(main)
"""

POINTS = [
    "before-prompt",
    "end-user",
    "request-1",
    "update-1",
    "end-assistant",
    "before-effect-c1",
    "after-effect-c1",
    "outcome-c1",
    "after-effect-c2",
    "end-c2",
    "save-point-1",
    "request-2",
    "before-effect-c3",
    "after-effect-c3",
    "end-c3",
    "update-3",
    "agent-end",
]
# SQLite is killed at fewer points (each point costs two processes).
SQLITE_POINTS = ["end-user", "update-1", "after-effect-c1", "outcome-c1", "end-c2",
                 "after-effect-c3", "update-3", "agent-end"]  # fmt: skip
# Pi's coding-agent files (the CLI's store), where the records ride in pitrio.state lines.
PI_POINTS = ["update-1", "after-effect-c1", "end-c2", "update-3"]
CASES = [
    *[("jsonl", p) for p in POINTS],
    *[("sqlite", p) for p in SQLITE_POINTS],
    *[("pi", p) for p in PI_POINTS],
]

# The unsafe calls that end as interrupted: started (their intent recorded) but killed
# before their outcome was written. In the parallel first batch, ``write`` c1 has run
# when ``read`` c2 runs, but its outcome is recorded after both; once no tool runs, the
# outcomes and result entries wait for the turn's save point (no effect comes between
# them), so a kill at a tool's end or its result's ``message_end`` finds them unwritten.
INTERRUPTED = {
    "before-effect-c1": {"c1"},
    "after-effect-c1": {"c1"},
    "outcome-c1": {"c1"},
    "after-effect-c2": {"c1"},
    "end-c2": {"c1"},
    "before-effect-c3": {"c3"},
    "after-effect-c3": {"c3"},
    "end-c3": {"c3"},
}
NO_EFFECT = {"before-effect-c1": "write 1", "before-effect-c3": "write 2"}


async def _child(kind: str, where: Path, mode: str, point: str, effects: Path) -> Any:
    with trio.fail_after(60):
        result = await trio.run_process(
            [sys.executable, "-c", CHILD, kind, str(where), mode, point, str(effects)],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    return result


def _effects(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _where(kind: str, tmp_path: Path) -> Path:
    return tmp_path / "sessions.db" if kind == "sqlite" else tmp_path / "sessions"


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The context of a run nobody killed (restored by the same reader)."""
    tmp = tmp_path_factory.mktemp("whole")
    where, effects = _where("jsonl", tmp), tmp / "effects"
    done = trio.run(_child, "jsonl", where, "run", "never", effects)
    assert done.returncode == 0, done.stderr.decode()
    assert _effects(effects) == ["write 1", "read", "write 2"]
    read = trio.run(_child, "jsonl", where, "restore", "-", effects)
    assert read.returncode == 0, read.stderr.decode()
    out = json.loads(read.stdout)
    assert out["interrupted"] is None
    return out["context"]


@pytest.mark.parametrize(("kind", "point"), CASES)
async def test_a_run_killed_at_any_point_is_resumed_and_finishes(
    kind: str, point: str, tmp_path: Path, uninterrupted: Any
) -> None:
    where, effects = _where(kind, tmp_path), tmp_path / "effects"
    killed = await _child(kind, where, "run", point, effects)
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()
    before = _effects(effects)
    restored = await _child(kind, where, "restore", point, effects)
    assert restored.returncode == 0, restored.stderr.decode()
    out = json.loads(restored.stdout)
    after = _effects(effects)

    # The run finished: the answer, the operation over, the lane idle.
    assert out["context"][-1] == ["assistant", None, "finished"]
    assert out["result"] == "completed"
    assert out["lane"]["currentOperationId"] is None
    # No unsafe effect twice (an interrupted write killed before its effect has none);
    # the safe tool may have run again.
    writes = [line for line in after if line.startswith("write")]
    assert sorted(writes) == sorted({"write 1", "write 2"} - {NO_EFFECT.get(point, "")})
    assert after[: len(before)] == before
    # The safe read ran again only where it had started without a recorded outcome (at
    # c1's outcome it may have started: the parallel calls' order depends on the store's
    # writes, which take real time with SQLite).
    reads = after.count("read")
    assert (
        reads == 2
        if point in ("after-effect-c2", "end-c2")
        else reads in ((1, 2) if point == "outcome-c1" else (1,))
    )
    # The context is an uninterrupted run's, but for the interrupted writes.
    interrupted = INTERRUPTED.get(point, set())
    # Apart from repeated requests: a Pi coding-agent context keeps the interrupted
    # request (an error with no content), as it keeps failed answers.
    context = [row for row in out["context"] if row != ["assistant", None, ""]]
    assert (len(context) < len(out["context"])) == (kind == "pi" and "update" in point)
    assert len(context) == len(uninterrupted)
    for got, want in zip(context, uninterrupted, strict=True):
        if got[0] == "toolResult" and got[1] in interrupted:
            assert got[:2] == want[:2]
            assert got[2].startswith("[Tool execution was interrupted.")
        else:
            assert got == want
    if out["interrupted"] is not None:
        assert out["events"][0] == "recovery_start"
        assert "recovery_end" in out["events"]
        assert out["events"][-1] == "settled"
    else:
        assert point == "before-prompt"
