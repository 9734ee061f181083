"""The crash sweep: a scripted run killed at every one of its wait points, on each store.

``_crash_driver.py`` runs two prompts (a warm-up; then a run whose model asks for the unsafe
``write`` and the safe ``read``, fails once with a retryable error and backs off, compacts at
the threshold, asks for ``write`` again and answers; the last answer streams as a network
answer does, its frames written as it streams: a kill mid-stream leaves a committed partial,
and the frame writes are no points of their own), then a manual compaction and a summarised
tree navigation back to the warm-up's answer (each an operation of its own), and counts its
points: before and after each session write, each streamed update, the back-off, each
compaction's start, each tool before and after its effect, the threshold compaction's summary
request (inside the run: recorded as the run's ``summary.*`` states, as Pi's drive records it),
the manual compaction's summary request and its end (after the entry), the navigation's start,
its summary request and its end (after the leaf move): 133 points (the records between two
effects share one write). For each point a forked child is SIGKILLed there and a fresh one
restores and finishes the session. Every case must: finish (the last operation's ``pi.result``
completed, the lane idle, no operation records left); never repeat an unsafe effect (``write
n`` at most once); leave the transcript of the uninterrupted run, apart from repeated requests
(failed answers) and an unsafe call killed between its intent and its outcome, which ends as
Pi's interrupted result; compact as often as the uninterrupted run; end with the navigation
done (the tip a branch summary under the target, labelled). Pi's ``restoreSession`` reads each
JSONL session as the kill left it and as the restore finished it (``node/pi_session.mjs
lanes-many``).

By default every point of JSONL (sequential tools), every 2nd of SQLite, every 4th of
Pi's coding-agent files and of JSONL with parallel tools: 268 kills (the points of the
compaction and navigation operations, and of the compaction inside the run, among them).
With ``PITRIO_CRASH_SWEEP=full`` every point of each of the four: 532 kills.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

DRIVER = Path(__file__).parent / "_crash_driver.py"
NODE_DIR = Path(__file__).parent / "node"
FULL = os.environ.get("PITRIO_CRASH_SWEEP") == "full"
# (store, tool execution, every how many points)
SWEEPS = [
    ("jsonl", "sequential", 1),
    ("sqlite", "sequential", 1 if FULL else 2),
    ("pi", "sequential", 1 if FULL else 4),
    ("jsonl", "parallel", 1 if FULL else 4),
]
WRITES = ("c1", "c3")  # the unsafe calls


def _transcript(rows: list[Any]) -> list[Any]:
    """The transcript without repeated requests (a failed answer is asked again)."""
    return [row for row in rows if row[0] != "failed assistant"]


def _problems(case: dict[str, Any], whole: dict[str, Any]) -> list[str]:
    if not case["killed"]:
        return ["the child was not killed there"]
    if case["restore_status"] != 0:
        return [f"restoring failed (wait status {case['restore_status']})"]
    out = []
    if case["result"] != "completed" or case["current"] is not None:
        out.append(f"the run did not finish: {case['result']}, lane {case['current']}")
    if case["leftovers"]:
        out.append(f"operation records left: {case['leftovers']}")
    writes = [line for line in case["effects"] if line.startswith("write")]
    if len(writes) != len(set(writes)):
        out.append(f"an unsafe effect repeated: {writes}")
    if case["effects"][: len(case["effects_before"])] != case["effects_before"]:
        out.append("the effects before the kill changed")
    got, want = _transcript(case["rows"]), _transcript(whole["rows"])
    if len(got) != len(want):
        out.append(f"transcript {got} != {want}")
    else:
        for row, expected in zip(got, want, strict=True):
            interrupted = (
                row[0] == "toolResult"
                and row[1] in WRITES
                and "[Tool execution was interrupted." in row[2]
                # after the checkpoint the write took before its effect, if it was in
                and row[2].startswith(("[Tool", "about to write"))
            )
            if row != expected and not interrupted:
                out.append(f"transcript row {row} != {expected}")
    if case["compactions"] != whole["compactions"]:
        out.append(f"{case['compactions']} compactions, not {whole['compactions']}")
    if case["navigation"] != whole["navigation"]:
        out.append(f"navigation {case['navigation']}, not {whole['navigation']}")
    return out


_SWEPT: dict[tuple[str, str, int], Any] = {}


async def _sweep(kind: str, tools: str, step: int, where: Path) -> Any:
    """The driver's output (kept for the Pi check below)."""
    key = (kind, tools, step)
    if key not in _SWEPT:
        with trio.fail_after(600):
            done = await trio.run_process(
                [sys.executable, str(DRIVER), kind, tools, str(where), str(step)],
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
        assert done.returncode == 0, done.stderr.decode()[-3000:]
        _SWEPT[key] = json.loads(done.stdout)
    return _SWEPT[key]


@pytest.mark.parametrize(("kind", "tools", "step"), SWEEPS)
async def test_a_run_killed_at_each_wait_point_finishes_as_if_uninterrupted(
    kind: str, tools: str, step: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    out = await _sweep(kind, tools, step, tmp_path_factory.mktemp(f"sweep-{kind}-{tools}"))
    whole, cases = out["whole"], out["cases"]
    # The uninterrupted run: what the sweep kills.
    assert _transcript(whole["rows"])[-1] == ["assistant", None, "finished"]
    assert whole["compactions"] >= 1
    assert [r for r in whole["rows"] if r[0] == "failed assistant"]  # the retried error
    assert whole["effects"] == ["write 1", "read", "error served", "write 2"]
    assert whole["navigation"] == {
        "status": "completed", "tip": "branch_summary", "parent": True, "label": "warm"
    }  # fmt: skip
    points = set(out["points"])
    for name in (
        "mid-stream",
        "in the back-off",
        "mid-compaction",
        "tool c1 after its effect",
        "mid-compaction summary request",
        "mid-threshold summary request",
        "after the compaction entry",
        "mid-navigation summary",
        "after the leaf move",
    ):
        assert name in points
    assert len(out["points"]) >= 95
    assert len(cases) == len(range(1, len(out["points"]) + 1, step))
    failures = {
        f"{case['k']} ({case['point']})": problems
        for case in cases
        if (problems := _problems(case, whole))
    }
    assert failures == {}
    # Some kills interrupted an unsafe call; most found an operation to resume.
    if step == 1:
        assert any(
            "[Tool execution was interrupted." in row[2] for case in cases for row in case["rows"]
        )
        # A kill mid-stream of the last answer left its frames: the interrupted request
        # was settled with the committed partial (a prefix of "finished"), then retried.
        partials = {
            row[2]
            for case in cases
            for row in case["rows"]
            if row[0] == "failed assistant" and row[2] and "finished".startswith(row[2])
        }
        assert partials
    assert sum(case["interrupted"] is not None for case in cases) > len(cases) // 2
    # Some kills left the manual compaction or the navigation mid-summary.
    if step == 1:
        assert any(case["interrupted"] == "summary.effect_pending" for case in cases)
        # The threshold compaction inside the run is recorded as the run's summary
        # states (Pi's): killed mid-summary, the run is found there, and finishes.
        threshold = [c for c in cases if c["point"] == "mid-threshold summary request"]
        assert threshold
        assert {c["interrupted"] for c in threshold} == {"summary.effect_pending"}


async def test_pi_restores_each_killed_and_each_finished_session(
    tmp_path_factory: pytest.TempPathFactory, pi_node_modules: Path
) -> None:
    """Pi's ``restoreSession`` reads the JSONL session as each kill left it (finding the
    operation pitrio finds) and as the restore finished it (every lane idle, the tip
    pitrio's)."""
    out = await _sweep("jsonl", "sequential", 1, tmp_path_factory.mktemp("sweep-jsonl-pi"))
    cases = [c for c in out["cases"] if c["killed_file"] is not None]
    assert len(cases) > 95
    files = [c["killed_file"] for c in cases] + [c["final_file"] for c in cases]
    with trio.fail_after(120):
        done = await trio.run_process(
            ["node", str(NODE_DIR / "pi_session.mjs"), "lanes-many", *files],
            capture_stdout=True,
            capture_stderr=True,
            env={**os.environ, "PITRIO_PI_NODE_MODULES": str(pi_node_modules)},
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()
    restored = json.loads(done.stdout)["files"]
    killed, final = restored[: len(cases)], restored[len(cases) :]
    problems = {}
    for case, at_kill, at_end in zip(cases, killed, final, strict=True):
        name = f"{case['k']} ({case['point']})"
        if "error" in at_kill:
            problems[name] = f"Pi cannot restore the killed session: {at_kill['error']}"
            continue
        main = at_kill["lanes"].get("main")
        pis = None if main is None or main["operation"] is None else main["operation"]["at"]
        if pis != case["interrupted"]:
            problems[name] = f"Pi finds the run at {pis}, pitrio at {case['interrupted']}"
        if "error" in at_end or any(
            lane["operation"] is not None for lane in at_end["lanes"].values()
        ):
            problems[name] = f"Pi restores the finished session as {at_end}"
    assert problems == {}
