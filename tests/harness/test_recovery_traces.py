"""Recovery and the queue, event for event with Pi 0.85.0's AgentHarness, both ways.

``node/pi_recovery_trace.mjs`` runs four scripted scenarios on Pi's own harness (a tool
call, a retried error, a queue of steer / follow-up / next-run messages with one
cancelled, a steering message queued while a tool runs) and restores each *cut* of their
sessions: the session with only its first K transactions, what a process killed after
its K-th write left (before the request is sent, mid-stream with K of its frames, after
the answer, with a tool's intent or outcome committed, in the retry back-off, with
messages queued). ``data/recovery/pi_left.json`` holds Pi's sessions and, for each cut,
what Pi's restore did: the operation it found, how the run ended, the tool's runs, its
events (ids renamed in order of appearance), the branch's messages and the transactions
it appended (compared in test_restore_writes.py).

pitrio restores the same cuts (``_recovery_scenarios``) and must do the same, event for
event on the events both have (``_recovery_scenarios.COMPARED``). The other way, Pi
restores every cut of a session pitrio's harness wrote and does what pitrio does (live,
under Node), and appends the same transactions (test_restore_writes.py compares them
on the fixture). Under Node the fixture is recorded again and must not have changed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import trio

from pitrio.harness import JsonlSessionStore, RetrySettings, restore_session

from . import _recovery_scenarios as scenarios

NODE_DIR = Path(__file__).parent / "node"
FIXTURE = Path(__file__).parent / "data" / "recovery" / "pi_left.json"
INTERRUPTED = "Assistant request was interrupted."


def _fixture() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(FIXTURE.read_text())
    return data


def _summary(case: dict[str, Any]) -> dict[str, Any]:
    return {key: case[key] for key in ("open", "result", "ran", "messages")}


async def _pi(node_modules: Path, *args: str) -> Any:
    with trio.fail_after(120):
        done = await trio.run_process(
            ["node", str(NODE_DIR / "pi_recovery_trace.mjs"), *args],
            capture_stdout=True,
            capture_stderr=True,
            env={**os.environ, "PITRIO_PI_NODE_MODULES": str(node_modules)},
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return json.loads(done.stdout)


def _differences(
    scenario: str, got: list[dict[str, Any]], want: list[dict[str, Any]]
) -> dict[str, Any]:
    """The cuts whose pitrio restore is not Pi's: {cut: (pitrio's, Pi's)}."""
    out = {}
    for k, (ours, theirs) in enumerate(zip(got, want, strict=True), 1):
        expected = {**_summary(theirs), "events": scenarios.pi_trace(theirs["events"])}
        if {**_summary(ours), "events": ours["events"]} != expected:
            out[f"{scenario} cut {k}"] = (ours, expected)
    return out


@pytest.mark.parametrize("scenario", scenarios.SCENARIOS)
async def test_pitrio_restores_each_cut_pi_left_as_pi_does(scenario: str, tmp_path: Path) -> None:
    recorded = _fixture()[scenario]
    paths = scenarios.cuts(recorded["lines"], tmp_path)
    assert len(paths) == len(recorded["cuts"]) >= 14
    got = [await scenarios.restore(scenario, path) for path in paths]
    assert _differences(scenario, got, recorded["cuts"]) == {}
    # What the cuts cover: each kind of point, settled as Pi settles it.
    messages = [m for case in got for m in case["messages"]]
    recovered = [row for case in got for row in case["events"] if row[-1]]
    assert all(case["result"] in (None, "completed") for case in got)
    if scenario == "tool":
        # mid-stream: the interrupted request keeps its committed partial (its frames)
        assert ["assistant", "error", "let me look"] in [m[:3] for m in messages]
        assert any(m[3] and m[3].startswith(INTERRUPTED) and m[2] == "" for m in messages)
        # an unsafe call whose intent was committed ends as interrupted, never run again
        assert ["tool_end", "look", True, True] in recovered
        assert [case["ran"] for case in got].count(0) > 5
    if scenario == "retry":
        assert any(row[0] == "retry_start" for case in got for row in case["events"])
    if scenario == "steer":
        # steered while the tool ran, then killed before its outcome: the call ends as
        # interrupted and the steering message is still delivered after it
        rows = [[m[0], m[2][:12]] for m in messages]
        assert ["toolResult", "[Tool execut"] in rows
        assert any(
            [m[0] for m in case["messages"]][2:4] == ["toolResult", "user"]
            and case["messages"][2][2].startswith("[Tool execution was interrupted.")
            for case in got
        )
    if scenario == "queue":
        assert ["user", None, "f1", None] in messages  # cut before the cancel
        assert [m[2] for m in got[-1]["messages"]] == ["s1", "n1", "go", "finished"]


def _cut_at(scenario: str, at: str, root: Path) -> Path:
    """The first cut of Pi's session that stopped at ``at`` (``pi.op.state``)."""
    recorded = _fixture()[scenario]
    for path in scenarios.cuts(recorded["lines"], root):
        states = [json.loads(line) for line in path.read_text().splitlines()[1:]]
        writes = [w for s in states for w in (s if isinstance(s, list) else [s])]
        ops = [
            w["value"]["at"] for w in writes if w.get("namespace") == "pi.op.state" and "value" in w
        ]
        if ops and ops[-1] == at:
            return path
    raise AssertionError(f"no cut of {scenario} stops at {at}")


async def test_an_interrupted_request_with_no_attempt_left_ends_the_run_failed(
    tmp_path: Path,
) -> None:
    """Pi's publishResponse: a recovered request whose attempt was the last allowed fails
    the run (``run_end`` failed) instead of waiting to retry."""
    path = _cut_at("tool", "assistant.effect_pending", tmp_path)
    session = await JsonlSessionStore(path.parent.parent).open(path)
    script = scenarios.Script("tool")
    harness = script.harness(session, RetrySettings(max_retries=0))
    events: list[str] = []
    harness.subscribe(lambda event: events.append(event.type))
    await harness.resume()
    assert scenarios.branch_messages(session)[-1][3].startswith(INTERRUPTED)
    assert "auto_retry_start" not in events
    assert events[-1] == "settled"
    lane = restore_session(session)["main"]
    assert lane.operation is None
    assert session.get_value("pi.result", lane.last_operation_id or "")["status"] == "failed"
    await session.close()


async def test_an_abort_in_the_recovered_back_off_ends_the_run_aborted(tmp_path: Path) -> None:
    path = _cut_at("retry", "assistant.effect_pending", tmp_path)
    session = await JsonlSessionStore(path.parent.parent).open(path)
    script = scenarios.Script("retry")
    harness = script.harness(session, RetrySettings(base_delay=30, jitter=0))

    def listener(event: object) -> None:
        if getattr(event, "type", None) == "auto_retry_start":
            harness.abort()

    harness.subscribe(listener)
    with trio.fail_after(10):
        await harness.resume()
    lane = restore_session(session)["main"]
    assert session.get_value("pi.result", lane.last_operation_id or "")["status"] == "aborted"
    assert [m[0] for m in scenarios.branch_messages(session)] == ["user", "assistant"]
    await session.close()


async def test_the_recorded_traces_are_pis_today(tmp_path: Path, pi_node_modules: Path) -> None:
    """Pi's harness, run again, restores each cut as the fixture says (to record the
    fixture anew: ``pi_recovery_trace.mjs record SCENARIO DIR`` for each scenario)."""
    recorded = _fixture()
    for scenario in scenarios.SCENARIOS:
        fresh = await _pi(pi_node_modules, "record", scenario, str(tmp_path / scenario))
        assert len(fresh["lines"]) == len(recorded[scenario]["lines"])
        for k, (now, then) in enumerate(
            zip(fresh["cuts"], recorded[scenario]["cuts"], strict=True), 1
        ):
            assert (k, now) == (k, then)
        # the writes of each cut's restore (test_restore_writes.py), record for record
        assert fresh["records"] == recorded[scenario]["records"]


@pytest.mark.parametrize("scenario", scenarios.SCENARIOS)
async def test_pi_restores_each_cut_pitrio_left_as_pitrio_does(
    scenario: str, tmp_path: Path, pi_node_modules: Path
) -> None:
    path = await scenarios.run(scenario, tmp_path / "run")
    lines = path.read_text().splitlines()
    if scenario != "queue":
        # pitrio's session holds the frames of its streamed answers, as Pi's does
        assert any('"pi.pending.assistant_frame"' in line for line in lines)
    pi = await _pi(
        pi_node_modules,
        "restore",
        scenario,
        *map(str, scenarios.cuts(lines, tmp_path / "pi")),
    )
    theirs = pi["cuts"]
    ours = [
        await scenarios.restore(scenario, cut) for cut in scenarios.cuts(lines, tmp_path / "py")
    ]
    assert _differences(scenario, ours, theirs) == {}
    # and each restore appends what Pi's appends (test_restore_writes.py, the other way)
    assert scenarios.write_differences(scenario, ours, theirs, pi["records"]) == {}
    assert any(case["open"] for case in theirs)
    if scenario == "tool":
        # Pi settles a request pitrio's process left mid-stream with pitrio's frames
        assert ["assistant", "error", "let me look"] in [
            m[:3] for case in theirs for m in case["messages"]
        ]
