"""What the harness costs on top of the agent loop, per turn, as a conversation grows.

The loop workload of ``bench_loop`` (the peers' start+done stream function,
``--model minimal``, T turns of K calls of ``noop`` then a final ``done``) on several
subjects, each run starting fresh:

========== ====================================================================
subject    one run
========== ====================================================================
agent      a bare :class:`pitrio.Agent`
harness    a :class:`pitrio.harness.Harness` without a session
jsonl      a Harness on a new session of a ``JsonlSessionStore`` (default fsync
           policy: synced at each save point), closed after the run
pi         the same on a ``PiSessionStore`` (Pi's coding-agent files)
sqlite     the same on a ``SqliteSessionStore``
memory     the same on an ``InMemorySessionStore``
========== ====================================================================

The model's context window is 128,000 tokens, so the compaction threshold is checked
every turn (and never reached). The cost of a turn must not grow with the conversation:
the figure at T=160 should be the one at T=10.

Measurement (issue 21): instructions counted by valgrind's cachegrind
(``--cache-sim=no``, user space only: a system call's kernel time is not counted) for a
process doing 11 runs minus one doing 1 run, divided by 10 and by T+1: the cost of one
turn without the process's start-up, imports and first-run warm-ups. It repeats within
0.1%.

Usage::

    python -m benchmarks.bench_harness [--subjects agent,harness,jsonl,...]
        [--turns 10,40,160] [--k 4] [--json] [--timeout S]   # cachegrind, the table
    python -m benchmarks.bench_harness run SUBJECT [--turns T] [--k K] [--runs N]
                                                       # one process: N runs, CPU time

Nothing here belongs in a test assertion (``tests/test_benchmarks_smoke.py`` checks
that the runs do their work).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import trio

from benchmarks.bench_loop import MODEL, BenchmarkError, Workload
from pitrio import AgentMessage, Model
from pitrio.harness import (
    Harness,
    InMemorySessionStore,
    JsonlSessionStore,
    PiSessionStore,
    SqliteSessionStore,
)

__all__ = ["SUBJECTS", "count_instructions", "main", "run_subject"]

SUBJECTS: Final = ("agent", "harness", "jsonl", "pi", "sqlite", "memory")
WINDOW_MODEL: Final = Model(
    id=MODEL.id, api=MODEL.api, provider=MODEL.provider, context_window=128_000
)


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise BenchmarkError(message)


def _check_run(w: Workload, messages: Sequence[AgentMessage], calls_before: int) -> None:
    last = messages[-1] if messages else None
    text = last.content[0].text if last is not None and last.role == "assistant" else None
    _check(text == "done", f"bad final message: {last!r:.300}")
    _check(
        w.calls - calls_before == w.turns * w.k,
        f"executed {w.calls - calls_before} tool calls, expected {w.turns * w.k}",
    )
    _check(len(messages) == 2 + w.turns * (1 + w.k), f"{len(messages)} messages in the run")


def _store(subject: str, where: Path) -> Any:
    if subject == "jsonl":
        return JsonlSessionStore(where / "sessions")
    if subject == "pi":
        return PiSessionStore(where / "pi-sessions")
    if subject == "sqlite":
        return SqliteSessionStore(where / "sessions.db")
    return InMemorySessionStore()


async def run_subject(subject: str, *, turns: int, k: int, runs: int, where: Path) -> int:
    """``runs`` runs of ``subject`` one after the other; returns the entries written."""
    if subject not in SUBJECTS:
        msg = f"unknown subject {subject!r}; pick one of {', '.join(SUBJECTS)}"
        raise BenchmarkError(msg)
    w = Workload(turns=turns, k=k, model="minimal")
    store = _store(subject, where) if subject not in ("agent", "harness") else None
    entries = 0
    for _ in range(runs):
        before = w.calls
        if subject == "agent":
            agent = w.agent()
            await agent.prompt("go")
            _check_run(w, agent.state.messages, before)
            continue
        session = await store.create(cwd="/bench/project") if store is not None else None
        harness = Harness(
            model=WINDOW_MODEL,
            stream_fn=w.minimal_stream,
            session=session,
            tools=[w.tool],
            system_prompt="bench",
        )
        await harness.prompt("go")
        _check_run(w, harness.messages, before)
        if session is not None:
            context = session.build_context()
            _check(len(context.messages) == len(harness.messages), "the session lost messages")
            entries += len(session.entries)
            await session.close()
    if isinstance(store, SqliteSessionStore):
        await store.aclose()
    return entries


# --------------------------------------------------------------------------------------
# cachegrind

_IREFS: Final = re.compile(r"I\s+refs:\s+([\d,]+)")


def count_instructions(cmd: Sequence[str], timeout: float = 900) -> int:
    """Instructions (cachegrind's ``I refs``) of one process, threads included."""
    vg = [
        "valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
    ]  # fmt: skip
    # A fixed hash seed: string hashes decide dict and set layouts, and so a few
    # instructions per lookup; with a random seed two counts differ by up to ~1%.
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    proc = subprocess.run([*vg, *cmd], capture_output=True, text=True, timeout=timeout, env=env)
    counts = [int(m.replace(",", "")) for m in _IREFS.findall(proc.stderr)]
    if proc.returncode != 0 or not counts:
        msg = f"valgrind run failed ({proc.returncode}): {proc.stderr.strip()[-400:]}"
        raise BenchmarkError(msg)
    return sum(counts)


def per_turn(subject: str, turns: int, k: int, timeout: float = 900) -> dict[str, Any]:
    """Instructions per turn: (11 runs - 1 run) / 10 / (T+1); ``timeout``: seconds for
    each valgrind process (a JSONL run at T=160 takes longer than 15 minutes on a busy
    machine)."""

    def cmd(runs: int) -> list[str]:
        return [
            sys.executable, "-m", "benchmarks.bench_harness", "run", subject,
            "--turns", str(turns), "--k", str(k), "--runs", str(runs),
        ]  # fmt: skip

    one = count_instructions(cmd(1), timeout)
    eleven = count_instructions(cmd(11), timeout)
    run = (eleven - one) / 10
    return {
        "subject": subject,
        "turns": turns,
        "k": k,
        "instructions_1": one,
        "instructions_11": eleven,
        "per_run": run,
        "per_turn": run / (turns + 1),
    }


# --------------------------------------------------------------------------------------
# CLI


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_harness", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("command", nargs="?", default="table", choices=["table", "run"])
    p.add_argument("subject", nargs="?", default="jsonl", choices=SUBJECTS)
    p.add_argument("--subjects", default="agent,harness,jsonl")
    p.add_argument("--turns", default="10,40,160", help="T, comma-separated for the table")
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--json", action="store_true")
    p.add_argument("--timeout", type=float, default=900, help="seconds per valgrind process")
    a = p.parse_args(argv)
    if a.command == "run":
        (turns,) = _ints(a.turns)[:1]
        with tempfile.TemporaryDirectory() as tmp:
            start = time.process_time()
            entries = trio.run(
                lambda: run_subject(a.subject, turns=turns, k=a.k, runs=a.runs, where=Path(tmp))
            )
            cpu = time.process_time() - start
        res = {
            "subject": a.subject,
            "turns": turns,
            "k": a.k,
            "runs": a.runs,
            "entries": entries,
            "cpu_us_per_turn": cpu / a.runs / (turns + 1) * 1e6,
        }
        print(json.dumps(res))
        return 0
    subjects = [s for s in a.subjects.split(",") if s]
    rows = []
    base: dict[int, float] = {}
    for turns in _ints(a.turns):
        for subject in subjects:
            print(f"  cachegrind: {subject} T={turns}", file=sys.stderr, flush=True)
            row = per_turn(subject, turns, a.k, a.timeout)
            if subject == "agent":
                base[turns] = row["per_turn"]
            if turns in base:
                row["vs_agent"] = row["per_turn"] / base[turns]
            rows.append(row)
            if a.json:
                print(json.dumps(row), flush=True)
            else:
                ratio = f"  {row['vs_agent']:.2f}x agent" if "vs_agent" in row else ""
                print(f"T={turns:>4} {subject:>8}: {row['per_turn']:>12,.0f} instr/turn{ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
