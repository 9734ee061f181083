"""The session benchmark's workloads, tiny, checked for what they do (no timings)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from benchmarks.bench_sessions import UNITS, main, measure


@pytest.mark.parametrize("backend", ["jsonl", "sqlite", "memory"])
async def test_every_workload_runs_and_reports_a_figure(backend: str) -> None:
    figures = await measure(backend, reps=1, entries=9, sessions=3)
    assert set(figures) == set(UNITS)
    assert all(value > 0 for value in figures.values())


def test_main_prints_json_lines(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    import benchmarks.bench_sessions as bench

    original = bench.measure

    async def small(backend: str, reps: int, *args: Any) -> dict[str, float]:
        clock = args[-1]
        assert clock is time.process_time
        return await original(backend, reps, 5, 2, clock)

    bench.measure = small  # type: ignore[assignment]
    try:
        assert main(["--backend", "memory", "--reps", "1", "--json", "--clock", "cpu"]) == 0
    finally:
        bench.measure = original
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {line["metric"] for line in lines} == set(UNITS)
    assert {line["backend"] for line in lines} == {"memory"}
    assert {line["clock"] for line in lines} == {"cpu"}


@pytest.mark.parametrize("backend", ["jsonl", "sqlite", "memory"])
async def test_the_big_resume_workload_resumes_after_the_last_compaction(backend: str) -> None:
    from benchmarks.bench_sessions import BIG_UNITS, measure_big

    figures = await measure_big(backend, 25, compact_every=10)  # checks the context size
    assert set(figures) == set(BIG_UNITS)
    assert all(value > 0 for value in figures.values())
