"""Session storage benchmarks: how fast sessions are written, read and resumed.

Each backend (``jsonl``, ``sqlite``, ``memory``, ``postgres``) runs the same workloads on a
scratch directory (PostgreSQL: a fresh schema of the server ``--postgres URL`` names, or, without
one, of a throwaway server started from Debian's ``postgresql`` as the tests start it,
``tests/_services.py``; ``all`` leaves it out). Messages are shaped like a coding session: a
user prompt, an assistant reply with a tool call, a tool result of about 1 KB, a final
answer; the harness flushes once per turn (4 entries), as it does at each ``turn_end``.

========== ==================================================================== ============
metric     workload                                                             reported
========== ==================================================================== ============
append     one session, 1,000 entries appended, flushed every 4, then closed   entries/s
append1    the same, flushed after every entry (worst case)                     entries/s
load       open a 1,000-entry session (read, parse, rebuild the tree), close   entries/s
resume     open a 1,000-entry session + build_context() (what a restart costs)  ms
sessions_w 200 sessions of 10 entries: create, append, close                    sessions/s
sessions_r the same 200 sessions: open, build_context(), close                  sessions/s
list       list() over those 200 sessions                                       ms
========== ==================================================================== ============

With ``--big N`` (off by default: building the session takes a while) one more pair:

========== ==================================================================== ============
metric     workload                                                             reported
========== ==================================================================== ============
big_s      open an N-entry session (a compaction every 1,000 entries, the shape
           of a long session) + build_context(), close                          s
big_mb     the peak of Python's allocations during that (``tracemalloc``)       MB
========== ==================================================================== ============

The target for a 100,000-entry session is 0.5 s and 50 MB (issue 17): resuming should
read only what the active branch needs.

Usage::

    python -m benchmarks.bench_sessions [--backend jsonl|sqlite|memory|postgres|all]
                                        [--reps N] [--clock wall|cpu] [--json] [--big N]
                                        [--postgres URL]

Timings are medians over ``--reps`` repetitions (default 5) with the real clock
(``time.perf_counter``), including the worker-thread hops of the file I/O; with
``--clock cpu`` the process's CPU time instead (all threads), which a busy machine
disturbs less. Nothing here belongs in a test assertion.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import statistics
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import trio

from pitrio import (
    AssistantMessage,
    TextContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
    wire,
)
from pitrio.harness import (
    InMemorySessionStore,
    JsonlSessionStore,
    PostgresSessionStore,
    Session,
    SessionStore,
    SqliteSessionStore,
)

ENTRIES = 1000
SESSIONS = 200
SMALL = 10


def turn_messages(i: int) -> list[Any]:
    """One turn of a coding session (4 messages, about 1.8 KB of JSON)."""
    return [
        UserMessage(
            content=f"Please look at file_{i}.py and fix the failing test. " * 3, timestamp=i
        ),
        AssistantMessage(
            content=(
                TextContent(text="I'll read the file first to see what the test expects. " * 2),
                ToolCall(
                    id=f"call_{i}",
                    name="read",
                    arguments={"path": f"src/file_{i}.py", "limit": 200},
                ),
            ),
            api="anthropic-messages",
            provider="anthropic",
            model="claude-sonnet-4-5",
            usage=Usage(input=1200 + i, output=80, total_tokens=1280 + i),
            stop_reason="toolUse",
            timestamp=i,
        ),
        ToolResultMessage(
            tool_call_id=f"call_{i}",
            tool_name="read",
            content=(TextContent(text="def f(x):\n    return x + 1\n" * 36),),
            timestamp=i,
        ),
        AssistantMessage(
            content=(TextContent(text="The function is off by one; here is the fix. " * 4),),
            api="anthropic-messages",
            provider="anthropic",
            model="claude-sonnet-4-5",
            usage=Usage(input=2300 + i, output=150, total_tokens=2450 + i),
            stop_reason="stop",
            timestamp=i,
        ),
    ]


POSTGRES_URL: list[str] = []  # the server of the postgres backend, set by main()


def make_store(backend: str, where: Path) -> Any:
    if backend == "postgres":
        return PostgresSessionStore(POSTGRES_URL[0], schema=f"bench_{uuid.uuid4().hex[:12]}")
    if backend == "jsonl":
        return JsonlSessionStore(where / "sessions")
    if backend == "sqlite":
        return SqliteSessionStore(where / "sessions.db")
    return InMemorySessionStore()


async def write_session(store: SessionStore, n: int, *, flush_every: int) -> Session:
    session = await store.create(cwd="/bench/project")
    await session.append_model_change("anthropic", "claude-sonnet-4-5")
    written = 0
    turn = 0
    while written < n:
        for message in turn_messages(turn):
            if written == n:
                break
            await session.append_message(message)
            written += 1
            if written % flush_every == 0:
                await session.flush()
        turn += 1
    await session.close()
    return session


async def one_round(
    backend: str, where: Path, entries: int, sessions: int, clock: Any = time.perf_counter
) -> dict[str, float]:
    """Every metric once, on a fresh store under ``where``, timed by ``clock``."""
    store = make_store(backend, where)
    out: dict[str, float] = {}

    start = clock()
    big = await write_session(store, entries, flush_every=4)
    out["append"] = entries / (clock() - start)
    start = clock()
    await write_session(store, entries, flush_every=1)
    out["append1"] = entries / (clock() - start)

    start = clock()
    session = await store.open(big.id)
    await session.close()
    out["load"] = entries / (clock() - start)
    if len(session.entries) != entries:
        raise AssertionError(f"loaded {len(session.entries)} entries, wrote {entries}")

    start = clock()
    session = await store.open(big.id)
    context = session.build_context()
    await session.close()
    out["resume"] = 1000 * (clock() - start)
    if len(context.messages) != entries:
        raise AssertionError(f"resumed {len(context.messages)} messages, wrote {entries}")

    start = clock()
    ids = [(await write_session(store, SMALL, flush_every=4)).id for _ in range(sessions)]
    out["sessions_w"] = sessions / (clock() - start)

    start = clock()
    for sid in ids:
        session = await store.open(sid)
        context = session.build_context()
        await session.close()
        if len(context.messages) != SMALL:
            raise AssertionError(f"session {sid}: {len(context.messages)} messages, wrote {SMALL}")
    out["sessions_r"] = sessions / (clock() - start)

    start = clock()
    listed = await store.list(cwd="/bench/project")
    out["list"] = 1000 * (clock() - start)
    if len(listed) != sessions + 2:
        raise AssertionError(f"listed {len(listed)} sessions, wrote {sessions + 2}")
    if isinstance(store, SqliteSessionStore | PostgresSessionStore):
        await store.aclose()
    return out


async def measure(
    backend: str,
    reps: int,
    entries: int = ENTRIES,
    sessions: int = SESSIONS,
    clock: Any = time.perf_counter,
) -> dict[str, float]:
    """The median of each metric over ``reps`` rounds."""
    rounds = []
    for _ in range(reps):
        with tempfile.TemporaryDirectory() as tmp:
            rounds.append(await one_round(backend, Path(tmp), entries, sessions, clock))
    return {k: statistics.median(r[k] for r in rounds) for k in UNITS}


COMPACT_EVERY = 1000


async def write_big_session(store: Any, n: int, compact_every: int = COMPACT_EVERY) -> str:
    """An ``n``-entry session of coding turns with a compaction every ``compact_every``
    entries, written in one go (as a fork writes its copy); returns its id."""
    writes: list[dict[str, Any]] = []
    parent: str | None = None
    turn = 0
    while len(writes) < n:
        for message in turn_messages(turn):
            if len(writes) == n:
                break
            entry_id = f"e{len(writes):09d}"
            if len(writes) % compact_every == compact_every - 1:
                fields: dict[str, Any] = {
                    "type": "compaction",
                    "summary": f"Summary of the first {len(writes)} entries.",
                    "retainedTail": [],
                    "tokensBefore": 150_000,
                    "fromHook": False,
                }
            else:
                fields = {"type": "message", "message": wire.unstructure(message)}
            seq = len(writes) + 1
            writes.append(
                {
                    "kind": "entry",
                    "id": entry_id,
                    "parentId": parent,
                    **fields,
                    "seq": seq,
                    "timestamp": 1,
                }
            )
            parent = entry_id
        turn += 1
    writes.append(
        {
            "kind": "value",
            "op": "set",
            "seq": len(writes) + 1,
            "namespace": "pi.branch.tip",
            "key": "main",
            "value": parent,
        }
    )
    session = await store._create_session(
        cwd="/bench/project", session_id=None, parent_session_id=None, initial=writes
    )
    await session.close()
    return str(session.id)


async def measure_big(
    backend: str, entries: int, compact_every: int = COMPACT_EVERY, clock: Any = time.perf_counter
) -> dict[str, float]:
    """``big_s`` and ``big_mb`` once, on a fresh store (see the module docstring)."""
    with tempfile.TemporaryDirectory() as tmp:
        store = make_store(backend, Path(tmp))
        sid = await write_big_session(store, entries, compact_every)
        start = clock()
        session = await store.open(sid)
        context = session.build_context()
        await session.close()
        seconds = clock() - start
        tracemalloc.start()
        try:
            session = await store.open(sid)
            context = session.build_context()
            await session.close()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        # The summary of the last compaction, then what follows it.
        expected = entries % compact_every + 1 if entries >= compact_every else entries
        if len(context.messages) != expected:
            raise AssertionError(f"resumed {len(context.messages)} messages, expected {expected}")
        if isinstance(store, SqliteSessionStore | PostgresSessionStore):
            await store.aclose()
    return {"big_s": seconds, "big_mb": peak / 1e6}


BIG_UNITS = {"big_s": "s", "big_mb": "MB"}

UNITS = {
    "append": "entries/s",
    "append1": "entries/s",
    "load": "entries/s",
    "resume": "ms",
    "sessions_w": "sessions/s",
    "sessions_r": "sessions/s",
    "list": "ms",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--backend", choices=["jsonl", "sqlite", "memory", "postgres", "all"], default="all"
    )
    parser.add_argument(
        "--postgres",
        metavar="URL",
        help="the PostgreSQL server of the postgres backend (default: start a throwaway one)",
    )
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="wall: time.perf_counter; cpu: time.process_time (the process's CPU time, all "
        "threads; steadier on a busy machine, blind to waiting for the disk)",
    )
    parser.add_argument(
        "--big",
        type=int,
        default=0,
        metavar="N",
        help="also resume an N-entry session (big_s, big_mb; 0: skip)",
    )
    args = parser.parse_args(argv)
    backends = ["jsonl", "sqlite", "memory"] if args.backend == "all" else [args.backend]
    with contextlib.ExitStack() as stack:
        if "postgres" in backends:
            POSTGRES_URL[:] = [args.postgres or stack.enter_context(_throwaway_postgres())]
        _report(backends, args)
    return 0


@contextlib.contextmanager
def _throwaway_postgres() -> Iterator[str]:
    """A PostgreSQL server for this run, started as the tests start theirs."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    _services: Any = importlib.import_module("_services")

    problem = _services.ensure_package("postgresql", "initdb")
    if problem is not None:
        raise SystemExit(problem)
    with _services.start_postgres() as server:
        yield str(server.url)


def _report(backends: list[str], args: argparse.Namespace) -> None:
    units = {**UNITS, **BIG_UNITS}
    for backend in backends:
        clock = time.process_time if args.clock == "cpu" else time.perf_counter
        figures = trio.run(measure, backend, args.reps, ENTRIES, SESSIONS, clock)
        if args.big:
            figures.update(trio.run(measure_big, backend, args.big, COMPACT_EVERY, clock))
        for metric, value in figures.items():
            if args.json:
                print(
                    json.dumps(
                        {
                            "metric": metric,
                            "backend": backend,
                            "value": round(value, 2),
                            "unit": units[metric],
                            "clock": args.clock,
                        }
                    )
                )
            else:
                print(f"{backend:8} {metric:11} {value:12,.1f} {units[metric]}")


if __name__ == "__main__":
    sys.exit(main())
