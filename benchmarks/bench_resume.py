"""Resuming a long session: where the time and the memory go (issue 17's item 6).

``python -m benchmarks.bench_resume [--entries N] [--backend jsonl|sqlite]`` writes an
``N``-entry session of coding turns with a compaction every 1,000 entries (the session of
``bench_sessions --big``), then opens it as a restarted harness does: ``store.open()`` and
``build_context()`` of the active branch. For JSONL it splits the open into its phases,
each timed on its own: reading the file, parsing every line as JSON, and the whole load
(parsing, structuring each entry's message, applying the writes to the session's state).
The memory row is the peak traced by ``tracemalloc`` during one open and context build.

What the split says (see benchmarks/results.md): the open reads, parses and structures
every entry of every branch, although the context needs only the active branch after its
last compaction; the structuring alone is most of the time. Meeting the issue's targets
(0.5 s, 50 MB for 100,000 entries) needs an index of the entries' places and parents
(reading only the branch's lines), not just a faster parse.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from benchmarks.bench_sessions import make_store, write_big_session
from pitrio.harness import SqliteSessionStore
from pitrio.harness._jsonl import load_file

__all__ = ["main", "measure"]


def _timed(fn: Callable[[], Any], clock: Callable[[], float]) -> tuple[float, Any]:
    start = clock()
    out = fn()
    return clock() - start, out


async def measure(
    backend: str, entries: int, *, clock: Callable[[], float] = time.perf_counter
) -> dict[str, float]:
    """The rows of one backend: seconds for each phase, the peak MB, the file's MB and the
    number of messages the resumed context has."""
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        store = make_store(backend, Path(tmp))
        sid = await write_big_session(store, entries)
        if backend == "jsonl":
            path = store._find(sid)
            read_s, data = _timed(lambda: Path(path).read_bytes(), clock)
            lines = data.splitlines()
            parse_s, _ = _timed(lambda: [json.loads(line) for line in lines], clock)
            load_s, _ = _timed(lambda: load_file(path, data), clock)
            out |= {"read_s": read_s, "parse_s": parse_s, "load_s": load_s}
            out["file_mb"] = len(data) / 1e6
            del data, lines
        start = clock()
        session = await store.open(sid)
        context = session.build_context()
        out["open_s"] = clock() - start
        await session.close()
        tracemalloc.start()
        try:
            session = await store.open(sid)
            context = session.build_context()
            await session.close()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        out["peak_mb"] = peak / 1e6
        out["messages"] = float(len(context.messages))
        if isinstance(store, SqliteSessionStore):
            await store.aclose()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--backend", choices=["jsonl", "sqlite"], action="append")
    args = parser.parse_args(argv)
    for backend in args.backend or ["jsonl", "sqlite"]:
        rows = trio.run(measure, backend, args.entries)
        shown = ", ".join(f"{k} {v:,.2f}" for k, v in rows.items())
        print(f"{backend} ({args.entries:,} entries): {shown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
