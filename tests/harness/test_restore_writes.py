"""What a restore writes, transaction by transaction, as Pi 0.85.0's AgentHarness writes it.

``data/recovery/pi_left.json`` holds, for each cut of Pi's scripted runs (see
test_recovery_traces.py), the transactions Pi's restore and drive appended to the cut
session (``writes``: indexes into the scenario's ``records``, ids renamed in order of
first appearance in the file, times, usage numbers and the api's name normalised;
``node/pi_recovery_trace.mjs``'s ``appended``). pitrio restores the same cuts and must
append the same transactions, record for record and in order, as
``_recovery_scenarios.compared_writes`` compares them (the documented deviations mapped).
The other way, Pi's restore of each cut of pitrio's sessions is compared in
test_recovery_traces.py (live, under Node), and the live re-record there keeps these
writes Pi's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from . import _recovery_scenarios as scenarios

FIXTURE = Path(__file__).parent / "data" / "recovery" / "pi_left.json"


def _recorded(scenario: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(FIXTURE.read_text())[scenario]
    return data


@pytest.mark.parametrize("scenario", scenarios.SCENARIOS)
async def test_pitrio_restore_appends_the_transactions_pi_restore_appends(
    scenario: str, tmp_path: Path
) -> None:
    recorded = _recorded(scenario)
    paths = scenarios.cuts(recorded["lines"], tmp_path)
    ours = [await scenarios.restore(scenario, path) for path in paths]
    differences = scenarios.write_differences(scenario, ours, recorded["cuts"], recorded["records"])
    assert differences == {}
    # What the comparison covers: each cut that left an operation open (or, for the
    # queue, an idle lane with queued messages) appends, and what Pi appends is there.
    theirs = [scenarios.pi_writes(case, recorded["records"]) for case in recorded["cuts"]]
    appended = [case for case in theirs if case]
    assert len(appended) >= len(theirs) - 2
    records = [r for case in theirs for t in case for r in t]
    kinds = {(r["kind"], r.get("namespace"), r.get("op")) for r in records}
    assert ("entry", None, None) in kinds
    assert ("value", "pi.result", "set") in kinds
    assert ("value", "pi.op.state", "delete") in kinds
    states = [
        r["value"]["at"] for r in records if r.get("namespace") == "pi.op.state" and "value" in r
    ]
    if scenario in ("tool", "steer"):
        assert "tools" in states
        assert ("value", "pi.op.tool_args", "delete") in kinds
        # a recovered interrupted request: settled, then waits and asks again
        assert "assistant.retry_wait" in states
    if scenario == "retry":
        assert states.count("assistant.retry_wait") >= 1
    if scenario in ("queue", "steer"):
        assert ("value", "pi.pending.entry", "delete") in kinds


def _cut(scenario: str, k: int, root: Path) -> tuple[Path, list[list[Any]], int]:
    recorded = _recorded(scenario)
    path = scenarios.cuts(recorded["lines"], root)[k - 1]
    known = scenarios.known_ids(path.read_text())
    want = scenarios.compared_writes(
        scenarios.pi_writes(recorded["cuts"][k - 1], recorded["records"]), known
    )
    return path, want, known


async def test_a_recovered_wait_is_ready_before_the_request_goes_again(tmp_path: Path) -> None:
    """Pi's ``runRetryWait``: after the back-off, ``assistant.ready`` of the next attempt,
    then its ``effect_pending``; and the failed answer is the latest assistant entry."""
    recorded = _recorded("retry")
    for k in range(1, len(recorded["cuts"]) + 1):
        path, want, known = _cut("retry", k, tmp_path / f"k{k}")
        ours = scenarios.compared_writes(
            (await scenarios.restore("retry", path))["writes"], known, pitrio=True
        )
        assert ours == want, f"cut {k}"
        states = [
            r["value"]
            for t in ours
            for r in t
            if r.get("namespace") == "pi.op.state" and "value" in r
        ]
        for i, state in enumerate(states):
            if state["at"] == "assistant.retry_wait":
                assert state["latestAssistantEntryId"] is not None
                assert states[i + 1]["at"] == "assistant.ready"
                assert states[i + 1]["nextAttempt"] == state["nextAttempt"]
                assert states[i + 2]["at"] == "assistant.effect_pending"


def _pitrio_writes(cut: list[list[Any]]) -> list[list[Any]]:
    return [[dict(r) for r in t] for t in cut]


def test_the_comparison_fails_on_a_changed_or_reordered_or_missing_write(tmp_path: Path) -> None:
    """compared_writes keeps what it should compare: a value changed, two records of a
    transaction swapped, a transaction dropped all make a difference."""
    recorded = _recorded("tool")
    k = max(range(len(recorded["cuts"])), key=lambda i: len(recorded["cuts"][i]["writes"]))
    path = scenarios.cuts(recorded["lines"], tmp_path)[k]
    known = scenarios.known_ids(path.read_text())
    pis = scenarios.pi_writes(recorded["cuts"][k], recorded["records"])
    want = scenarios.compared_writes(pis, known)
    assert scenarios.compared_writes(_pitrio_writes(pis), known, pitrio=True) == want
    changed = _pitrio_writes(pis)
    state = next(r for t in changed for r in t if r.get("namespace") == "pi.op.state")
    state["value"] = {**state["value"], "at": "assistant.nowhere"}
    assert scenarios.compared_writes(changed, known, pitrio=True) != want
    swapped = _pitrio_writes(pis)
    longest = max(swapped, key=len)
    longest[-1], longest[-2] = longest[-2], longest[-1]
    assert scenarios.compared_writes(swapped, known, pitrio=True) != want
    dropped = _pitrio_writes(pis)
    del dropped[-1]
    assert scenarios.compared_writes(dropped, known, pitrio=True) != want
    # a usage row and the frames are left out (the documented deviations)
    without = [
        [r for r in t if r["kind"] != "usage"]
        for t in pis
        if not all(r.get("namespace") == scenarios.FRAME for r in t)
    ]
    assert scenarios.compared_writes(without, known, pitrio=True) == want
