"""The per-delta workload of ``benchmarks.bench_web`` does its work: every page reads the
whole answer, in fewer frames than deltas (the outbox's batches)."""

from __future__ import annotations

import pytest
import trio

pytest.importorskip("trio_websocket", reason="the web UI tests need pip install 'pitrio[web]'")

from benchmarks.bench_web import one_answer


@pytest.mark.timeout(120)
async def test_one_answer_reaches_every_page_in_batches() -> None:
    """Three pages, a 400-delta answer: each page gets the answer's end (one_answer raises
    otherwise), in at least one frame and fewer frames than deltas."""
    with trio.fail_after(100):
        found = await one_answer(pages=3, deltas=400)
    assert found["frames_per_page"]
    assert 1 <= found["frames_per_page"][0] < 400
    assert found["wall_s"] > 0
