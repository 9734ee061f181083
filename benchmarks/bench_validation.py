"""Validation cost for huge model-produced arguments (issue 6), and validation import time.

========== ======================================================================= ==========
metric     workload                                                                reported
========== ======================================================================= ==========
huge       ``{"items": [0..N-1]}`` against ``items: integer[]`` with one bad item  s, chars
           in the middle: ``validate_async`` on the event loop while a task ticks
           every 5 ms
abort      the same call with an abort signal fired 0.2 s in                       s
small      ``{"i": 1}`` against ``{"i": integer}`` (the fast path), 20,000 calls   µs/call
import     ``python -X importtime -c "import pitrio"``: ``pitrio._validation``     ms
           cumulative, the minimum of ``--reps`` fresh processes
========== ======================================================================= ==========

``huge`` reports the wall time, the longest gap between two ticks of the 5 ms ticker
(how long the event loop was held) and the length of the error message. Before the
fixes the whole validation ran on the event loop (gap = total) and the message echoed
every argument (11.9 MB for N = 1,000,000).

Usage::

    python -m benchmarks.bench_validation [huge|abort|small|import|all] [--n N] [--reps R]
                                          [--json]

Nothing here belongs in a test assertion.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

import trio

from pitrio import AbortSignal
from pitrio._validation import ToolArgumentsError, ValidationAborted, compile_validator

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"items": {"type": "array", "items": {"type": "integer"}}},
    "required": ["items"],
}


def _arguments(n: int) -> dict[str, Any]:
    items: list[Any] = list(range(n))
    items[n // 2] = "x"
    return {"items": items}


async def _ticked(work: Any) -> tuple[float, float, Any]:
    """Run ``work()`` beside a 5 ms ticker: (wall s, longest tick gap s, result)."""
    gaps: list[float] = []
    done = trio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await trio.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    result: Any = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        await trio.sleep(0.02)
        start = time.perf_counter()
        try:
            result = await work()
        except Exception as exc:
            result = exc
        wall = time.perf_counter() - start
        done.set()
    return wall, max(gaps, default=0.0), result


def bench_huge(n: int) -> dict[str, Any]:
    validator = compile_validator(SCHEMA)
    arguments = _arguments(n)

    async def work() -> Any:
        return await validator.validate_async("t", arguments)

    wall, gap, result = trio.run(_ticked, work)
    assert isinstance(result, ToolArgumentsError), result
    return {
        "metric": "huge",
        "n": n,
        "seconds": round(wall, 3),
        "longest_loop_gap_ms": round(gap * 1000, 1),
        "message_chars": len(str(result)),
    }


def bench_abort(n: int) -> dict[str, Any]:
    validator = compile_validator(SCHEMA)
    arguments = _arguments(n)

    async def main() -> tuple[float, Any]:
        signal = AbortSignal()
        outcome: list[Any] = []

        async def validate() -> None:
            try:
                outcome.append(await validator.validate_async("t", arguments, signal=signal))
            except (ToolArgumentsError, ValidationAborted) as exc:
                outcome.append(exc)

        async with trio.open_nursery() as nursery:
            start = time.perf_counter()
            nursery.start_soon(validate)
            await trio.sleep(0.2)
            signal.abort()
        return time.perf_counter() - start, outcome[0]

    wall, result = trio.run(main)
    return {
        "metric": "abort",
        "n": n,
        "abort_at_s": 0.2,
        "settled_s": round(wall, 3),
        "outcome": str(result)[:40],
    }


def bench_small(calls: int = 20_000) -> dict[str, Any]:
    validator = compile_validator(
        {"type": "object", "properties": {"i": {"type": "integer"}}, "required": ["i"]}
    )

    async def main() -> float:
        start = time.perf_counter()
        for i in range(calls):
            await validator.validate_async("t", {"i": i})
        return time.perf_counter() - start

    sync_start = time.perf_counter()
    for i in range(calls):
        validator.validate("t", {"i": i})
    sync = time.perf_counter() - sync_start
    return {
        "metric": "small",
        "us_per_call_async": round(trio.run(main) / calls * 1e6, 2),
        "us_per_call_sync": round(sync / calls * 1e6, 2),
    }


def bench_import(reps: int) -> dict[str, Any]:
    totals: dict[str, list[int]] = {}
    for _ in range(reps):
        err = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", "import pitrio"],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": ""},
            check=True,
        ).stderr
        for line in err.splitlines():
            parts = line.split("|")
            if len(parts) == 3 and parts[2].strip() in ("pitrio", "pitrio._validation"):
                totals.setdefault(parts[2].strip(), []).append(int(parts[1]))
    return {
        "metric": "import",
        "pitrio_ms": min(totals["pitrio"]) / 1000,
        "pitrio._validation_ms": min(totals["pitrio._validation"]) / 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("metric", nargs="?", default="all")
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    runs: dict[str, Any] = {
        "huge": lambda: bench_huge(args.n),
        "abort": lambda: bench_abort(args.n),
        "small": bench_small,
        "import": lambda: bench_import(args.reps),
    }
    for name, run in runs.items():
        if args.metric in (name, "all"):
            result = run()
            print(json.dumps(result) if args.json else result)


if __name__ == "__main__":
    main()
