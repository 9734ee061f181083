"""benchmarks/bench_resume.py does its work: the phases of a JSONL open, the peak memory,
the resumed context (what follows the last compaction)."""

from __future__ import annotations

import itertools
import unittest.mock

import pytest

from benchmarks import bench_sessions
from benchmarks.bench_resume import main, measure


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
async def test_bench_resume_measures_a_resume(backend: str) -> None:
    ticks = itertools.count()
    rows = await measure(backend, 1_500, clock=lambda: float(next(ticks)), rss=backend == "jsonl")
    # The summary of the compaction at entry 1,000, then the 500 entries after it.
    assert rows["messages"] == 501
    assert rows["open_s"] == 1  # one tick of the fake clock per timed phase
    assert rows["peak_mb"] > 0
    if backend == "jsonl":
        assert (rows["read_s"], rows["parse_s"], rows["scan_s"]) == (1, 1, 1)
        assert rows["file_mb"] > 0.5
        assert 0 < rows["scan_peak_mb"] < 50
        assert 0 <= rows["rss_mb"] < 100


def test_bench_resume_prints_its_rows(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--entries", "300", "--backend", "jsonl"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("jsonl (300 entries): read_s ")
    assert "messages 300.00" in out


async def test_bench_resume_measures_a_postgres_resume(postgres_url: str) -> None:
    ticks = itertools.count()
    with unittest.mock.patch.object(bench_sessions, "POSTGRES_URL", [postgres_url]):
        rows = await measure("postgres", 1_200, clock=lambda: float(next(ticks)))
    assert rows["messages"] == 201
    assert rows["open_s"] == 1
    assert "rss_mb" not in rows  # (a child process would not find the bench's schema)


def test_bench_resume_times_by_cpu_on_request(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--entries", "300", "--backend", "sqlite", "--clock", "cpu"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("sqlite (300 entries, CPU time): open_s ")
