"""benchmarks/bench_resume.py does its work: the phases of a JSONL open, the peak memory,
the resumed context (what follows the last compaction)."""

from __future__ import annotations

import itertools

import pytest

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
        assert 0 <= rows["rss_mb"] < 100


def test_bench_resume_prints_its_rows(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--entries", "300", "--backend", "jsonl"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("jsonl (300 entries): read_s ")
    assert "messages 300.00" in out
