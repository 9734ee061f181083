"""benchmarks/bench_telemetry.py runs, and checks the spans it claims to measure."""

from __future__ import annotations

import pytest

from benchmarks import bench_telemetry
from pitrio.testing import ScriptedResponse


async def test_every_subject_records_the_expected_spans() -> None:
    """A tiny sitting: each run's answer and span count are checked by run_once itself."""
    result = await bench_telemetry.measure(reps=1, turns=2, calls=2)
    assert set(result["us_per_turn"]) == {"off", "noop", "listener", "memory", "otel"}
    assert set(result["recording_us_per_turn"]) == {"memory", "otel"}
    assert all(v > 0 for v in result["recording_us_per_turn"].values())


async def test_a_wrong_span_count_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """run_once refuses a run whose spans are not one run, T+1 turns and requests, T*K tools."""
    script = bench_telemetry._script

    def one_call_fewer(turns: int, calls: int) -> list[ScriptedResponse]:
        return script(turns, calls - 1)

    monkeypatch.setattr(bench_telemetry, "_script", one_call_fewer)
    # 1 turn of 1 call gives 1 + 2*2 + 1 = 6 spans; 1 turn of 2 calls should give 7
    with pytest.raises(RuntimeError, match=r"^memory: 6 spans, expected 7$"):
        await bench_telemetry.run_once("memory", 1, 2)


async def test_the_http_workload_runs_against_its_server_process() -> None:
    """The http workload: a server child process, the real provider, a tool reading files;
    each subject's answer and span count checked; the server is gone afterwards."""
    result = await bench_telemetry.measure(reps=1, turns=1, calls=2, workload="http")
    assert result["workload"] == "http"
    assert set(result["us_per_turn"]) == {"off", "noop", "listener", "memory", "otel"}
    assert not bench_telemetry._HTTP


def test_one_subject_runs_in_its_own_process() -> None:
    """``--one SUBJECT --runs N`` (what ``--instructions`` counts under valgrind) runs and
    checks N runs of the subject, the http workload's server included."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_telemetry", "--one", "otel", "--runs", "2",
         "--turns", "1", "--calls", "2", "--workload", "http"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
