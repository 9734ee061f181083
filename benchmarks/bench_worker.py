"""Prompts as jobs of N workers: throughput, latency, and what the store and the queue
cost per turn beside the bare harness.

Every prompt is the chaos test's (``tests/worker/_chaos.py``): a scripted model (no
network) calls a replay-safe tool, then an unsafe one, then answers: three model turns,
two tool calls, each tool writing one line to a side file and doing no other work.
PostgreSQL and Redis are Debian's servers started on loopback as the tests start them
(``tests/_services.py``), on the same machine as the workers.

=========== =========================================================================
row         what is timed
=========== =========================================================================
bare        the prompt on a ``Harness`` without a session, in this process
job         the same as one job, in this process (:func:`pitrio.worker.run_prompt_job`:
            the session opened in PostgreSQL with its lease, the job's entries, the run's
            entries, its events published to Redis)
queued      one user's prompts one after the other through Celery and one worker
            (``python -m pitrio worker --pool=solo``): submit to the job's ``done``
            marker on the session's stream
N workers   ``--sessions`` users at once, ``--prompts`` prompts each, on 1, 2 and 4
            workers: prompts per second over the whole run, and the p50/p99 latency
=========== =========================================================================

With ``--chaos``: the same users on 4 workers, one SIGKILLed every 1.5-3 s and started
again, then the chaos test's checks (every prompt exactly once, no unsafe effect twice,
every session loads); the run fails when a check does.

Usage::

    python -m benchmarks.bench_worker [--sessions 200] [--prompts 3] [--workers 1,2,4]
                                      [--chaos] [--json]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

TESTS = Path(__file__).resolve().parent.parent / "tests"


def _modules() -> tuple[Any, Any]:
    for folder in (TESTS, TESTS / "worker"):
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
    return importlib.import_module("_chaos"), importlib.import_module("_services")


async def _bare(chaos: Any, count: int) -> list[float]:
    """Seconds per prompt on a harness without a session."""
    from pitrio.harness import Harness

    times: list[float] = []
    for i in range(count):
        stream_fn, tools = chaos.harness_parts(f"bare{i}")
        harness = Harness(model=chaos.MODEL, stream_fn=stream_fn, tools=tools)
        began = time.perf_counter()
        await harness.prompt("p0")
        times.append(time.perf_counter() - began)
    return times


async def _jobs_in_process(postgres: str, redis: str, schema: str, count: int) -> list[float]:
    from pitrio.harness import PostgresSessionStore
    from pitrio.worker import WorkerConfig, run_prompt_job

    config = WorkerConfig(
        postgres_url=postgres, events_url=redis, factory="_chaos:make_harness", schema=schema
    )
    times: list[float] = []
    async with PostgresSessionStore(postgres, schema=schema) as store:  # as a worker keeps it
        for i in range(count):
            began = time.perf_counter()
            job = f"inproc:{i}"
            await run_prompt_job(config, f"inproc{i % 10}", f"p{i}", job, store=store)
            times.append(time.perf_counter() - began)
    return times


async def _fleet_run(
    chaos: Any,
    postgres: str,
    redis: str,
    workdir: Path,
    *,
    workers: int,
    sessions: int,
    prompts: int,
    kill_every: tuple[float, float] | None,
) -> tuple[Any, list[str]]:
    schema = f"bench_w{workers}_{os.getpid()}_{int(time.time())}"
    effects = workdir / f"effects-{schema}"
    env = chaos.worker_env(redis, postgres, schema, effects, tool_seconds=0.0)
    fleet = chaos.Fleet(workers, env, workdir)
    try:
        await fleet.start_all()
        await _wait_ready(chaos, redis, fleet)
        report = await chaos.drive(
            redis,
            redis,
            fleet=fleet,
            sessions=sessions,
            prompts=prompts,
            kill_every=kill_every,
            seed=7,
            prefix=f"{schema}_",  # streams of their own on the shared Redis
        )
        dead = fleet.dead()
    finally:
        await fleet.stop()
    problems: list[str] = []
    if kill_every is not None:
        problems = await chaos.check(
            postgres, schema, effects, sessions=sessions, prompts=prompts, prefix=f"{schema}_"
        )
    return report, problems + report.failures + dead


async def _wait_ready(chaos: Any, redis: str, fleet: Any) -> None:
    """One warm-up prompt per worker, so that start-up is not in the timings."""
    await chaos.drive(
        redis,
        redis,
        fleet=fleet,
        sessions=fleet.size,
        prompts=1,
        kill_every=None,
        prefix="warm",
    )


def _progress(rows: list[dict[str, Any]]) -> None:
    """The row just measured, on stderr (a long run shows what it has so far)."""
    print(json.dumps(rows[-1]), file=sys.stderr, flush=True)


def _row(name: str, values: list[float], out: list[dict[str, Any]]) -> None:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    out.append(
        {
            "row": name,
            "prompts": len(values),
            "p50_ms": round(statistics.median(values) * 1000, 1),
            "p99_ms": round(p99 * 1000, 1),
            "per_turn_ms": round(statistics.median(values) * 1000 / 3, 1),
        }
    )


async def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    chaos, services = _modules()
    for package, binary in (("postgresql", "initdb"), ("redis-server", "redis-server")):
        problem = services.ensure_package(package, binary)
        if problem is not None:
            raise SystemExit(problem)
    rows: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="pitrio-bench-worker-") as temp,
        services.start_postgres() as postgres,
        services.start_redis() as redis,
    ):
        workdir = Path(temp)
        os.environ["PITRIO_CHAOS_EFFECTS"] = str(workdir / "effects-inproc")
        _row("bare", await _bare(chaos, 200), rows)
        _progress(rows)
        await _jobs_in_process(postgres.url, redis.url, "bench_warm", 5)
        _row("job", await _jobs_in_process(postgres.url, redis.url, "bench_inproc", 100), rows)
        _progress(rows)
        one, _ = await _fleet_run(
            chaos, postgres.url, redis.url, workdir,
            workers=1, sessions=1, prompts=50, kill_every=None,
        )  # fmt: skip
        _row("queued", one.latencies, rows)
        _progress(rows)
        for n in args.workers:
            report, problems = await _fleet_run(
                chaos, postgres.url, redis.url, workdir,
                workers=n, sessions=args.sessions, prompts=args.prompts, kill_every=None,
            )  # fmt: skip
            if problems:
                raise SystemExit("\n".join(problems[:20]))
            _row(f"{n} workers", report.latencies, rows)
            rows[-1]["prompts_per_s"] = round(len(report.latencies) / report.seconds, 1)
            _progress(rows)
        if args.chaos:
            report, problems = await _fleet_run(
                chaos, postgres.url, redis.url, workdir,
                workers=4, sessions=args.sessions, prompts=args.prompts, kill_every=(1.5, 3.0),
            )  # fmt: skip
            _row("4 workers, chaos", report.latencies, rows)
            rows[-1]["prompts_per_s"] = round(len(report.latencies) / report.seconds, 1)
            rows[-1]["kills"] = report.kills
            rows[-1]["problems"] = len(problems)
            _progress(rows)
            if problems:
                raise SystemExit("\n".join(problems[:20]))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_worker")
    parser.add_argument("--sessions", type=int, default=200, help="users at once (default 200)")
    parser.add_argument("--prompts", type=int, default=3, help="prompts per user (default 3)")
    parser.add_argument(
        "--workers",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[1, 2, 4],
        help="worker counts to measure (default 1,2,4)",
    )
    parser.add_argument("--chaos", action="store_true", help="also the chaos run on 4 workers")
    parser.add_argument("--json", action="store_true", help="one JSON object per row")
    args = parser.parse_args(argv)
    rows = trio.run(measure, args)
    for row in rows:
        if args.json:
            print(json.dumps(row))
        else:
            extra = "".join(
                f"  {k}={row[k]}" for k in ("prompts_per_s", "kills", "problems") if k in row
            )
            print(
                f"{row['row']:18} n={row['prompts']:5}  p50 {row['p50_ms']:8.1f} ms  "
                f"p99 {row['p99_ms']:8.1f} ms  per turn {row['per_turn_ms']:6.1f} ms{extra}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
