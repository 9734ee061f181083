"""A standalone compaction as an operation, stored as Pi 0.85.0's AgentHarness stores it.

The reference is Pi's own harness (``node/pi_structural.mjs``: two prompts, then
``lane.compact()``), recorded in ``data/structural/``: the whole run (``pi-compact.jsonl``),
a run SIGKILLed while its summary request was out (``pi-hang-compact.killed.jsonl``) and
that file once Pi's ``lane.resume()`` finished it (``.resumed.jsonl``, with its events in
``.resumed.json``). pitrio's harness on the same script (``_structural_child.py``) must
write the same transactions (ids, times, usage and Pi's token estimate aside); restore
and finish the compaction Pi left as Pi does; and leave, killed at the same point, a
session Pi's harness restores and finishes. The Node-driven tests check the fixtures
against Pi live (they skip without Node and fail under CI).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from pitrio import Model
from pitrio.harness import (
    CompactionEntry,
    CompactionSettings,
    Harness,
    JsonlSessionStore,
    RetrySettings,
    restore_lane,
)
from pitrio.testing import ScriptedModel, ScriptedResponse

from ._structural_child import main as run_child
from ._structural_helpers import Hanging, last_result, while_out

HERE = Path(__file__).parent
NODE_DIR = HERE / "node"
DATA = HERE / "data" / "structural"
CHILD = HERE / "_structural_child.py"
MODEL = Model(id="scripted", api="scripted", provider="local", context_window=200_000)
_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
# Times, Pi's usage numbers and faux api name, and the token estimate (from the provider's
# usage, which differs between the faux provider and pitrio's scripted model) left out.
_OPAQUE = ("seq", "timestamp", "startedAt", "endedAt", "notBefore", "api", "usage")
_ESTIMATED = "tokensBefore"


STRUCTURAL_EVENTS = ("compaction_start", "compaction_end", "navigation_start", "navigation_end")


def pi_events(name: str) -> list[dict[str, Any]]:
    """Pi's events of a recorded run (``data/structural/NAME.json``) that pitrio's harness
    has too (the operation's start and end, with their reason and status)."""
    recorded = json.loads((DATA / f"{name}.json").read_text())["events"]
    return [e for e in recorded if e["type"] in STRUCTURAL_EVENTS]


def our_events(events: list[Any]) -> list[dict[str, Any]]:
    """pitrio's harness events in the form of :func:`pi_events`."""
    out = []
    for event in events:
        if event.type not in STRUCTURAL_EVENTS:
            continue
        shaped: dict[str, Any] = {"type": event.type}
        for name in ("reason", "status"):
            if getattr(event, name, None) is not None:
                shaped[name] = getattr(event, name)
        out.append(shaped)
    return out


def transactions(path: Path) -> list[list[dict[str, Any]]]:
    """A JSONL session's transactions (its header left out)."""
    out = []
    for line in path.read_text().splitlines()[1:]:
        data = json.loads(line)
        out.append(data if isinstance(data, list) else [data])
    return out


def structural(txs: list[list[dict[str, Any]]]) -> list[list[dict[str, Any]]]:
    """The transactions from the first one that opens a compaction or navigation."""
    for n, tx in enumerate(txs):
        for write in tx:
            if write.get("namespace") != "pi.op.meta" or write.get("op") != "set":
                continue
            if write["value"]["intent"]["kind"] != "run":
                return txs[n:]
    return []


def shape(txs: list[list[dict[str, Any]]]) -> list[Any]:
    """``txs`` with each id replaced by its order of appearance ("id1", ...), and times,
    usage and the token estimate blanked."""
    ids: dict[str, str] = {}

    def name(value: str) -> str:
        return ids.setdefault(value, f"id{len(ids) + 1}")

    def walk(x: Any) -> Any:
        if isinstance(x, dict):
            out = {}
            for k, v in x.items():
                if k in _OPAQUE or k == _ESTIMATED:
                    out[k] = "-"
                elif k == "key" and isinstance(v, str) and ":" in v:
                    out[k] = ":".join(name(p) for p in v.split(":"))
                else:
                    out[k] = walk(v)
            return out
        if isinstance(x, list):
            return [walk(v) for v in x]
        if isinstance(x, str) and _ID.match(x):
            return name(x)
        return x

    return walk(txs)  # type: ignore[no-any-return]


def only_jsonl(root: Path) -> Path:
    (path,) = root.rglob("*.jsonl")
    return path


def copy_fixture(name: str, root: Path) -> Path:
    """A fixture copied where a store finds it (ROOT/<cwd folder>/<stamp>_<id>.jsonl, the
    id ``pi-hang-compact`` for ``pi-hang-compact.killed``)."""
    folder = root / "--fixture--"
    folder.mkdir(parents=True)
    path = folder / f"2026-12-02T00-00-00-000Z_{name.split('.')[0]}.jsonl"
    shutil.copy(DATA / f"{name}.jsonl", path)
    return path


async def kill_mid_summary(root: Path, session_id: str, mode: str) -> Path:
    """The pitrio child runs until its summary request is out, then is SIGKILLed."""
    await trio.Path(root).mkdir(parents=True, exist_ok=True)
    with trio.fail_after(60):
        proc = await trio.lowlevel.open_process(
            [sys.executable, str(CHILD), str(root), session_id, mode],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            assert proc.stdout is not None
            seen = b""
            while b"summary started\n" not in seen:
                chunk = await proc.stdout.receive_some()
                if not chunk:
                    assert proc.stderr is not None
                    err = await proc.stderr.receive_some()
                    pytest.fail(f"the child ended before its summary request: {err.decode()}")
                seen += chunk
        finally:
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
    return only_jsonl(root)


async def pi(node_modules: Path, *args: str) -> Any:
    """``node pi_structural.mjs ARGS``: its JSON output."""
    with trio.fail_after(60):
        done = await trio.run_process(
            ["node", str(NODE_DIR / "pi_structural.mjs"), *args],
            capture_stdout=True,
            capture_stderr=True,
            env={**os.environ, "PITRIO_PI_NODE_MODULES": str(node_modules)},
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()
    return json.loads(done.stdout)


async def pi_killed(node_modules: Path, root: Path, mode: str) -> Path:
    """Pi's harness runs MODE (a hang-* one) until its summary request is out; SIGKILL."""
    started = root / "started"
    await trio.Path(root).mkdir(parents=True, exist_ok=True)
    with trio.fail_after(60):
        proc = await trio.lowlevel.open_process(
            [
                "node",
                str(NODE_DIR / "pi_structural.mjs"),
                "run",
                *(str(root), "pi", mode, str(started)),
            ],
            env={**os.environ, "PITRIO_PI_NODE_MODULES": str(node_modules)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            while not started.exists():
                assert proc.poll() is None, "Pi's harness ended before its summary request"
                await trio.sleep(0.05)
        finally:
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
    started.unlink()
    return only_jsonl(root)


def harness_on(session: Any, answer: str = "SUMMARY AGAIN") -> Harness:
    return Harness(
        model=MODEL,
        stream_fn=ScriptedModel(lambda _: ScriptedResponse.text(answer)),
        session=session,
        compaction=CompactionSettings(keep_recent_tokens=1),
        retry=RetrySettings(base_delay=0.001),
    )


def leftovers(session: Any) -> list[str]:
    values = session._state.values
    return sorted({ns for (ns, _) in values if ns.startswith(("pi.op.", "pi.pending."))})


# -- writes ----------------------------------------------------------------------------


async def test_a_compaction_writes_the_transactions_pi_writes(tmp_path: Path) -> None:
    events: list[Any] = []
    await run_child(tmp_path, "pitrio", "compact", events)
    assert our_events(events) == pi_events("pi-compact")
    ours = structural(transactions(only_jsonl(tmp_path)))
    pis = structural(transactions(DATA / "pi-compact.jsonl"))
    # accept (preparation, meta, summary.deciding, lane); ready; effect_pending; two
    # requests (a split turn), each its intent then its usage row; the entry and the end.
    assert len(pis) == 8
    assert shape(ours) == shape(pis)
    at = [w["value"]["at"] for tx in pis for w in tx if w.get("namespace") == "pi.op.state"
          and w["op"] == "set"]  # fmt: skip
    assert at[:3] == ["summary.deciding", "summary.ready", "summary.effect_pending"]
    last = pis[-1]
    assert [w.get("type") or w["namespace"] for w in last][:2] == ["compaction", "pi.branch.tip"]
    result = next(w["value"] for w in last if w.get("namespace") == "pi.result")
    assert (result["kind"], result["status"]) == ("compaction", "completed")


async def test_pi_writes_the_recorded_compaction(tmp_path: Path, pi_node_modules: Path) -> None:
    out = await pi(pi_node_modules, "run", str(tmp_path), "pi", "compact")
    assert [e["type"] for e in out["events"]] == [
        "compaction_start", "usage", "usage", "entry_added", "compaction_end"
    ]  # fmt: skip
    assert out["events"] == json.loads((DATA / "pi-compact.json").read_text())["events"]
    live = structural(transactions(Path(out["file"])))
    assert shape(live) == shape(structural(transactions(DATA / "pi-compact.jsonl")))


# -- killed mid-summary ----------------------------------------------------------------


async def killed_as_pi_is(tmp_path: Path, mode: str) -> tuple[Any, Any]:
    """pitrio SIGKILLed mid-summary in MODE (``hang-compact``, ``hang-navigate``) leaves
    Pi's transactions (``pi-MODE.killed.jsonl``); its session (read-only) and the
    operation it restores."""
    path = await kill_mid_summary(tmp_path, "pitrio", mode)
    ours = structural(transactions(path))
    pis = structural(transactions(DATA / f"pi-{mode}.killed.jsonl"))
    assert shape(ours) == shape(pis)
    session = await JsonlSessionStore(tmp_path).open("pitrio", read_only=True)
    operation = restore_lane(session).operation
    assert operation is not None
    assert operation.at == "summary.effect_pending"
    return session, operation


async def test_a_compaction_killed_mid_summary_leaves_what_pi_leaves(tmp_path: Path) -> None:
    session, operation = await killed_as_pi_is(tmp_path, "hang-compact")
    assert operation.intent == "compaction"
    assert operation.state["request"]["index"] == 0
    await session.close()


async def test_pitrio_finishes_the_compaction_pi_left_as_pi_does(tmp_path: Path) -> None:
    path = copy_fixture("pi-hang-compact.killed", tmp_path)
    killed = len(transactions(path))
    session = await JsonlSessionStore(tmp_path).open("pi-hang-compact")
    harness = harness_on(session)
    assert harness.interrupted is not None
    assert (harness.interrupted.intent, harness.interrupted.at) == (
        "compaction",
        "summary.effect_pending",
    )
    events: list[Any] = []
    harness.subscribe(events.append)
    await harness.resume()
    assert [e.type for e in events] == [
        "recovery_start", "compaction_start", "compaction_end", "recovery_end"
    ]  # fmt: skip
    end = events[2]
    assert end.status == "completed"
    assert end.summary.startswith("SUMMARY AGAIN")
    branch = session.get_branch()
    assert isinstance(branch[-1], CompactionEntry)
    assert branch[-1].id == end.entry_id
    assert restore_lane(session).operation is None
    assert leftovers(session) == []
    await session.close()
    # What pitrio wrote after the kill is what Pi's resume wrote after it: the attempt
    # counted as interrupted (retry_wait), attempt 2 (ready, effect_pending, the requests),
    # the entry under the id reserved before the kill, the end.
    ours = transactions(path)[killed:]
    pis = transactions(DATA / "pi-hang-compact.resumed.jsonl")[killed:]
    assert shape(ours) == shape(pis)
    assert ours[-1][0]["id"] == pis[-1][0]["id"]
    pi_events = json.loads((DATA / "pi-hang-compact.resumed.json").read_text())
    assert pi_events["events"][0] == {
        "type": "retry_scheduled", "recovery": True, "attempt": 2, "step": "task"
    }  # fmt: skip
    assert pi_events["events"][-1]["status"] == end.status


async def test_pi_finishes_the_compaction_pitrio_left(
    tmp_path: Path, pi_node_modules: Path
) -> None:
    path = await kill_mid_summary(tmp_path, "pitrio", "hang-compact")
    out = await pi(pi_node_modules, "resume", str(path))
    assert out["open"] == [{"lane": "main", "kind": "compaction"}]
    assert out["result"] == "completed"
    assert out["events"][0]["type"] == "retry_scheduled"
    assert out["events"][0]["recovery"] is True
    assert out["branch"][-1] == ["compaction", "SUMMARY AGAIN"]
    assert out["lane"] == {"current": None, "result": {"kind": "compaction", "status": "completed"}}
    # pitrio reads what Pi finished.
    session = await JsonlSessionStore(tmp_path).open("pitrio", read_only=True)
    assert restore_lane(session).operation is None
    assert isinstance(session.get_branch()[-1], CompactionEntry)
    await session.close()


async def test_pi_killed_mid_summary_is_the_recorded_fixture(
    tmp_path: Path, pi_node_modules: Path
) -> None:
    path = await pi_killed(pi_node_modules, tmp_path, "hang-compact")
    fixture = DATA / "pi-hang-compact.killed.jsonl"
    assert shape(structural(transactions(path))) == shape(structural(transactions(fixture)))


async def test_pitrio_finishes_its_own_compaction_killed_mid_summary(tmp_path: Path) -> None:
    path = await kill_mid_summary(tmp_path, "pitrio", "hang-compact")
    session = await JsonlSessionStore(tmp_path).open("pitrio")
    harness = harness_on(session)
    end = await harness.compact()  # finishes the interrupted one first, then has nothing to do
    assert end.status == "declined"
    branch = session.get_branch()
    assert isinstance(branch[-1], CompactionEntry)
    lane = restore_lane(session)
    assert lane.operation is None
    result = session.get_value("pi.result", str(lane.last_operation_id))
    assert isinstance(result, dict)
    assert (result["kind"], result["status"]) == ("compaction", "completed")
    assert leftovers(session) == []
    await session.close()
    assert path.exists()


# -- failures and aborts ---------------------------------------------------------------


async def _compacting(tmp_path: Path, stream_fn: Any, retry: RetrySettings | None = None) -> Any:
    store = JsonlSessionStore(tmp_path)
    session = await store.create(cwd=str(tmp_path), session_id="s")
    harness = Harness(
        model=MODEL,
        stream_fn=stream_fn,
        session=session,
        compaction=CompactionSettings(keep_recent_tokens=1),
        retry=retry,
    )
    await harness.set_model(MODEL)
    for text in ("first", "second"):
        await session.append_message(_user(text))
    return session, harness


def _user(text: str) -> Any:
    from pitrio import TextContent, UserMessage

    return UserMessage(content=(TextContent(text=text),), timestamp=1)


async def test_a_failed_summary_ends_the_operation_as_failed(tmp_path: Path) -> None:
    failing = ScriptedModel(
        lambda _: ScriptedResponse(stop_reason="error", error_message="invalid request")
    )
    session, harness = await _compacting(tmp_path, failing)
    end = await harness.compact()
    assert end.status == "failed"
    assert "invalid request" in (end.error_message or "")
    result = last_result(session)
    assert result["status"] == "failed"
    assert result["error"]["code"] == "summarization_failed"
    assert result["tipId"] == session.leaf_id
    assert leftovers(session) == []
    await session.close()


async def test_abort_ends_the_compaction_as_aborted(tmp_path: Path) -> None:
    hanging = Hanging()
    session, harness = await _compacting(tmp_path, hanging)
    end = await while_out(harness.compact, hanging.started, harness.abort)
    assert end.status == "aborted"
    assert last_result(session)["status"] == "aborted"
    assert not isinstance(session.get_branch()[-1], CompactionEntry)
    await session.close()


async def test_an_outer_cancel_records_the_compaction_as_aborted(tmp_path: Path) -> None:
    hanging = Hanging()
    session, harness = await _compacting(tmp_path, hanging)
    events: list[str] = []
    harness.subscribe(lambda e: events.append(e.type))
    assert await while_out(harness.compact, hanging.started) is None  # cancelled
    assert events == ["compaction_start", "compaction_end"]
    assert last_result(session)["status"] == "aborted"
    assert not harness.is_busy
    await session.close()


async def test_an_interrupted_last_attempt_fails_as_pi_fails_it(tmp_path: Path) -> None:
    path = copy_fixture("pi-hang-compact.killed", tmp_path)
    session = await JsonlSessionStore(tmp_path).open("pi-hang-compact")
    # No retries: the attempt that was out was the last one allowed.
    harness = Harness(
        model=MODEL,
        stream_fn=ScriptedModel([]),
        session=session,
        retry=RetrySettings(enabled=False),
    )
    operation = harness.interrupted
    assert operation is not None
    # The retry policy is the one the operation recorded (Pi's: 4 attempts); make it 1.
    state = dict(operation.state)
    policy = {"maxAttempts": 1, "baseDelayMs": 0}
    state["summaryContext"] = {**state["summaryContext"], "retryPolicy": policy}
    await session._record([[{"kind": "value", "op": "set", "namespace": "pi.op.state",
                             "key": operation.id, "value": state}]])  # fmt: skip
    harness = Harness(model=MODEL, stream_fn=ScriptedModel([]), session=session)
    events: list[Any] = []
    harness.subscribe(events.append)
    await harness.resume()
    assert events[2].status == "failed"
    result = last_result(session)
    assert result["status"] == "failed"
    assert result["error"]["code"] == "structural_interrupted"
    await session.close()
    assert path.exists()


@pytest.mark.parametrize("stop", ["summary.deciding", "summary.ready", "summary.retry_wait"])
async def test_a_compaction_stopped_before_its_request_goes_on(tmp_path: Path, stop: str) -> None:
    """Killed after accepting it, after reserving its entry, or in its back-off: the next
    harness makes the request (no attempt was out, so none is counted as interrupted)."""
    session, harness = await _compacting(tmp_path, ScriptedModel([]))
    from pitrio.harness._compaction import prepare_compaction

    preparation = prepare_compaction(session.get_branch(), CompactionSettings(keep_recent_tokens=1))
    assert preparation is not None
    op = await harness._begin_compaction(preparation, "focus on files")
    if stop != "summary.deciding":
        await op.ready(harness._lane_configuration(), {"maxAttempts": 4, "baseDelayMs": 0})
    if stop == "summary.retry_wait":
        await op.effect_pending()
        await op.retry_wait("overloaded")
    seen: list[str] = []

    def answer(context: Any) -> ScriptedResponse:
        seen.append(context.messages[0].content[0].text)
        return ScriptedResponse.text("AFTER")

    again = Harness(model=MODEL, stream_fn=ScriptedModel(answer), session=session)
    assert again.interrupted is not None
    assert again.interrupted.at == stop
    await again.resume()
    entry = session.get_branch()[-1]
    assert isinstance(entry, CompactionEntry)
    assert entry.summary.startswith("AFTER")
    assert all("Additional focus: focus on files" in text for text in seen[:1])
    states = [
        w["value"]
        for tx in transactions(only_jsonl(tmp_path))
        for w in tx
        if w.get("namespace") == "pi.op.state" and w["op"] == "set"
    ]
    attempts = [s["attempt"] for s in states if s["at"] == "summary.effect_pending"]
    assert attempts[-1] == (2 if stop == "summary.retry_wait" else 1)
    assert last_result(session)["status"] == "completed"
    await session.close()


async def test_a_retryable_summary_failure_waits_for_the_next_attempt(tmp_path: Path) -> None:
    served: list[str] = []

    def answer(context: Any) -> ScriptedResponse:
        if not served:
            served.append("error")
            return ScriptedResponse(stop_reason="error", error_message="overloaded_error")
        served.append("summary")
        return ScriptedResponse.text("SECOND TRY")

    session, harness = await _compacting(
        tmp_path, ScriptedModel(answer), RetrySettings(base_delay=0.001)
    )
    end = await harness.compact()
    assert end.status == "completed"
    assert (end.summary or "").startswith("SECOND TRY")
    states = [
        (w["value"]["at"], w["value"].get("attempt") or w["value"].get("nextAttempt"))
        for tx in transactions(only_jsonl(tmp_path))
        for w in tx
        if w.get("namespace") == "pi.op.state" and w["op"] == "set"
        and w["value"]["at"].startswith("summary.")
    ]  # fmt: skip
    assert ("summary.retry_wait", 2) in states
    assert states[-1][0] == "summary.effect_pending"
    assert states[-1][1] == 2
    rows = [w for tx in transactions(only_jsonl(tmp_path)) for w in tx if w["kind"] == "usage"]
    assert len(rows) >= 2  # the failed request's usage and the good one's (at least)
    assert last_result(session)["status"] == "completed"
    await session.close()


async def test_a_broken_stream_function_fails_the_compaction_as_data(tmp_path: Path) -> None:
    def broken(model: Any, context: Any, options: Any) -> Any:
        msg = "no connection"
        raise RuntimeError(msg)

    session, harness = await _compacting(tmp_path, broken)
    end = await harness.compact()
    assert end.status == "failed"
    assert end.error_message == "no connection"
    result = last_result(session)
    assert result["error"] == {"code": "harness_fault", "message": "no connection"}
    assert not harness.is_busy
    await session.close()
