"""Session writes beside Pi's: appending messages to a new session file (issue 21, item 2).

Pi's coding agent keeps its sessions with ``SessionManager`` (Node, ``appendFileSync`` of
one JSON line per entry, in the caller's thread). pitrio writes the same files with
:class:`~pitrio.harness.PiSessionStore`, and its own (Pi's harness format) with
:class:`~pitrio.harness.JsonlSessionStore`, each change in a worker thread. The same
N messages (``bench_sessions.turn_messages``: a coding turn of 4, about 1.8 KB of JSON)
are appended to a new session of each:

============== ===========================================================================
subject        what
============== ===========================================================================
pi_node        ``SessionManager.create(...)`` + ``appendMessage`` per message
               (``pi_session_append.mjs``, run by Node)
pi_store       ``PiSessionStore``: ``append_message`` per message, then ``close()``
jsonl          ``JsonlSessionStore``: the same
jsonl_turns    ``JsonlSessionStore(fsync="never")`` (Pi's policy) as the harness writes: a
               turn's tool results with ``write=False``, ``flush()`` at the end of each
               turn (the save point), then ``close()``
jsonl_synced   the same with the default policy, ``fsync="flush"``: a sync per turn
jsonl_group    ``JsonlSessionStore(fsync="never")``, a turn's 4 messages appended with
               ``write=False`` then one ``write()`` (a group commit: one worker-thread hop)
sqlite         ``SqliteSessionStore(fsync="never")``: ``append_message`` per message
sqlite_group   the same, a turn's 4 messages in one ``write()`` (one transaction)
postgres       ``PostgresSessionStore`` (``--postgres URL``, default a throwaway server as
               the tests start one): ``append_message`` per message
postgres_group the same, a turn's 4 messages in one ``write()``
============== ===========================================================================

Every ``append_message`` that writes waits for its write (one worker-thread hop, as
STYLE.md wants file and database calls); Pi's ``appendFileSync`` writes in the caller's
thread. The ``_group`` rows are what a caller gets by batching appends into one hop.

Reported: entries/s (wall, ``perf_counter``) and CPU µs per entry (the process's CPU time,
all threads), medians over ``--reps`` (default 5). Usage::

    python -m benchmarks.bench_pi_sessions [--entries 1000] [--reps 5] [--json]
                                           [--subjects a,b] [--postgres URL]

Needs Node and Pi's coding agent (``--pi-dir``, default the oracle's install). Timings use
the real clock; nothing here belongs in a test assertion.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import trio

from benchmarks.bench_sessions import _throwaway_postgres, turn_messages
from pitrio.harness import (
    JsonlSessionStore,
    PiSessionStore,
    PostgresSessionStore,
    SqliteSessionStore,
)

PI_DIR: Final = Path(
    "/root/.cache/pitrio-oracle-coding-agent/node_modules/@earendil-works/pi-coding-agent"
)
SCRIPT: Final = Path(__file__).with_name("pi_session_append.mjs")
SUBJECTS: Final = (
    "pi_node",
    "pi_store",
    "jsonl",
    "jsonl_turns",
    "jsonl_synced",
    "jsonl_group",
    "sqlite",
    "sqlite_group",
    "postgres",
    "postgres_group",
)
POSTGRES_URL: list[str] = []  # the server of the postgres subjects, set by main()


def _messages(n: int) -> list[Any]:
    out: list[Any] = []
    turn = 0
    while len(out) < n:
        out += turn_messages(turn)
        turn += 1
    return out[:n]


def pi_node(n: int, where: Path, pi_dir: Path) -> dict[str, float]:
    module = pi_dir / "dist" / "core" / "session-manager.js"
    proc = subprocess.run(
        ["node", str(SCRIPT), str(module), str(where), str(n)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        msg = f"node failed ({proc.returncode}): {proc.stderr.strip()[-400:]}"
        raise RuntimeError(msg)
    result: dict[str, float] = json.loads(proc.stdout.splitlines()[-1])
    if result["entries"] != n:
        msg = f"Pi wrote {result['entries']} entries, expected {n}"
        raise RuntimeError(msg)
    return {"wall_s": result["wall_s"], "cpu_s": result["cpu_s"]}


def _store(subject: str, where: Path) -> Any:
    backend = subject.removesuffix("_group")
    if subject == "pi_store":
        return PiSessionStore(where)
    if backend == "sqlite":
        return SqliteSessionStore(where / "sessions.db", fsync="never")
    if backend == "postgres":
        return PostgresSessionStore(POSTGRES_URL[0], schema=f"bench_{uuid.uuid4().hex[:12]}")
    synced = subject in ("jsonl", "jsonl_synced")
    return JsonlSessionStore(where, fsync="flush" if synced else "never")


async def pitrio_appends(subject: str, n: int, where: Path) -> dict[str, float]:
    store = _store(subject, where)
    messages = _messages(n)
    cpu, start = time.process_time(), time.perf_counter()
    session = await store.create(cwd="/bench/project")
    for index, message in enumerate(messages):
        if subject in ("jsonl_turns", "jsonl_synced"):
            await session.append_message(message, write=message.role != "toolResult")
            if index % 4 == 3:
                await session.flush()
        elif subject.endswith("_group"):
            await session.append_message(message, write=False)
            if index % 4 == 3:
                await session.write()
        else:
            await session.append_message(message)
    await session.close()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    again = await store.open(session.id, read_only=True)
    if len(again.entries) != n:
        msg = f"{subject}: {len(again.entries)} entries stored, expected {n}"
        raise RuntimeError(msg)
    if isinstance(store, SqliteSessionStore | PostgresSessionStore):
        await store.aclose()
    return {"wall_s": wall, "cpu_s": cpu}


def measure(subject: str, n: int, reps: int, pi_dir: Path) -> dict[str, Any]:
    rounds = []
    for _ in range(reps + 1):  # the first round warms up
        with tempfile.TemporaryDirectory() as tmp:
            if subject == "pi_node":
                rounds.append(pi_node(n, Path(tmp), pi_dir))
            else:
                rounds.append(trio.run(pitrio_appends, subject, n, Path(tmp)))
    rounds = rounds[1:]
    wall = statistics.median(r["wall_s"] for r in rounds)
    cpu = statistics.median(r["cpu_s"] for r in rounds)
    return {
        "subject": subject,
        "entries": n,
        "reps": reps,
        "entries_per_s": n / wall,
        "cpu_us_per_entry": cpu / n * 1e6,
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_pi_sessions", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--entries", type=int, default=1000)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--subjects", default=",".join(SUBJECTS))
    p.add_argument("--pi-dir", type=Path, default=PI_DIR)
    p.add_argument("--json", action="store_true")
    p.add_argument("--postgres", metavar="URL", help="the server of the postgres subjects")
    a = p.parse_args(argv)
    subjects = [s for s in a.subjects.split(",") if s]
    for subject in subjects:
        if subject not in SUBJECTS:
            print(f"unknown subject {subject!r}; pick among {', '.join(SUBJECTS)}")
            return 2
    with contextlib.ExitStack() as stack:
        if any(s.startswith("postgres") for s in subjects):
            POSTGRES_URL[:] = [a.postgres or stack.enter_context(_throwaway_postgres())]
        _report(subjects, a)
    return 0


def _report(subjects: list[str], a: argparse.Namespace) -> None:
    for subject in subjects:
        row = measure(subject, a.entries, a.reps, a.pi_dir)
        if a.json:
            print(json.dumps(row), flush=True)
        else:
            print(
                f"{subject:>12}: {row['entries_per_s']:>9,.0f} entries/s, "
                f"{row['cpu_us_per_entry']:>7,.1f} CPU µs/entry"
            )


if __name__ == "__main__":
    sys.exit(main())
