"""Resuming a long session: where the time and the memory go (issue 17's item 6).

``python -m benchmarks.bench_resume [--entries N] [--backend jsonl|sqlite|postgres]
[--clock wall|cpu] [--postgres URL]`` writes an ``N``-entry session of coding turns with a
compaction every 1,000 entries (the session of ``bench_sessions --big``), closes it, then
opens it as a restarted harness does: ``store.open()`` and ``build_context()`` of the
active branch. Times are the real clock's, or with ``--clock cpu`` the process's CPU time
(all threads: what a quiet machine's clock would show when other work shares this one).
``postgres`` (not in the default run) starts a throwaway server as the tests do, unless
``--postgres`` names one; it has no ``rss_mb`` row.

Rows: ``open_s``, the open and context build (JSONL: with the sidecar index the close
wrote); ``peak_mb``, the peak traced by ``tracemalloc`` during one; ``rss_mb``, how much
one raises the peak resident set of a fresh process (``VmHWM``, after its imports);
``messages``, the resumed context's length. For JSONL also ``scan_s`` and its peak
``scan_peak_mb``: the same open without the index (the first open of a file Pi wrote: the
fast scan reads each entry line's index from its first and last members, no entry
structured); ``read_s`` and ``parse_s`` (reading the file; ``json.loads`` of every line,
what a scan without the fast path costs); and ``file_mb``. ``pi_scan_s`` and
``harness_scan_s``: the same first open of the file rewritten in the layouts Pi writes,
``--layouts`` (off by default): each entry in one line with the branch tip it moves (Pi's
``appendMessage``), and with its tip and the operation and lane records Pi's harness commits
with it (its runs: a run of ten entries shares one operation id).

What the rows say (see benchmarks/results.md): an open structures only the entries of the
active branch after its last compaction; the rest of the file is an index of places,
parents and types (the JSONL sidecar index, an SQLite covering index).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from benchmarks.bench_sessions import (
    POSTGRES_URL,
    _throwaway_postgres,
    make_store,
    write_big_session,
)
from pitrio.harness import JsonlSessionStore, PostgresSessionStore, SqliteSessionStore
from pitrio.harness._jsonl import index_path

__all__ = ["main", "measure"]


def _timed(fn: Callable[[], Any], clock: Callable[[], float]) -> tuple[float, Any]:
    start = clock()
    out = fn()
    return clock() - start, out


async def measure(
    backend: str,
    entries: int,
    *,
    clock: Callable[[], float] = time.perf_counter,
    rss: bool = True,
    layouts: bool = False,
) -> dict[str, float]:
    """The rows of one backend (see the module docstring); ``rss=False`` leaves out the
    child process that measures ``rss_mb``."""
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        store = make_store(backend, Path(tmp))
        sid = await write_big_session(store, entries)
        if isinstance(store, JsonlSessionStore):
            path = store._find(sid)
            read_s, data = _timed(lambda: Path(path).read_bytes(), clock)
            lines = data.splitlines()
            parse_s, _ = _timed(lambda: [json.loads(line) for line in lines], clock)
            out |= {"read_s": read_s, "parse_s": parse_s, "file_mb": len(data) / 1e6}
            del data, lines
            saved = _take_index(path)
            start = clock()
            session = await store.open(sid, read_only=True)
            session.build_context()
            out["scan_s"] = clock() - start
            tracemalloc.start()
            try:
                session = await store.open(sid, read_only=True)
                session.build_context()
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            out["scan_peak_mb"] = peak / 1e6
            _put_index(path, saved)
            if layouts:
                for layout in ("pi", "harness"):
                    out[f"{layout}_scan_s"] = await _scan_rewritten(store, path, layout, clock)
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
        if isinstance(store, SqliteSessionStore | PostgresSessionStore):
            await store.aclose()
        if rss and backend != "postgres":
            out["rss_mb"] = _rss_in_child(backend, tmp, sid)
    return out


_OP_STATE = {
    "at": "checkpoint",
    "control": {"status": "running"},
    "settings": {
        "compaction": {"enabled": True, "reserveTokens": 16384, "keepRecentTokens": 20000},
        "steeringMode": "all",
        "followUpMode": "all",
        "toolExecution": "parallel",
    },
    "continuation": {"kind": "need_assistant", "overflowRecoveryUsed": False},
}


def _rewritten(line: bytes, layout: str, shift: int) -> tuple[bytes, int]:
    """An entry line of the benchmark's file in ``layout`` (``"pi"``: ``[entry, tip]``;
    ``"harness"``: ``[entry, tip, operation state, lane state]``), its sequence numbers
    moved by ``shift``; and the shift for the next line."""
    value = json.loads(line)
    entry = value[0] if isinstance(value, list) else value
    if entry.get("kind") != "entry":
        return line, shift
    seq = entry["seq"] = entry["seq"] + shift
    writes = [entry, _set(seq + 1, "pi.branch.tip", "main", entry["id"])]
    if layout == "harness":
        operation = f"op-{int(entry['id'][1:]) // 10:09d}"
        state = _OP_STATE | {"latestAssistantEntryId": entry["id"], "triggerEntryId": entry["id"]}
        lane: dict[str, Any] = {
            "currentOperationId": operation,
            "lastOperationId": None,
            "inbox": [],
        }
        writes += [_set(seq + 2, "pi.op.state", operation, state)]
        writes += [_set(seq + 3, "pi.lane.state", "main", lane)]
    encoded = json.dumps(writes, separators=(",", ":"), ensure_ascii=False).encode()
    return encoded, shift + len(writes) - 1


def _set(seq: int, namespace: str, key: str, value: Any) -> dict[str, Any]:
    return {"kind": "value", "op": "set", "seq": seq, "namespace": namespace, "key": key,
            "value": value}  # fmt: skip


async def _scan_rewritten(
    store: JsonlSessionStore, path: str, layout: str, clock: Callable[[], float]
) -> float:
    """The first open (no index) of the session at ``path`` rewritten in ``layout``."""
    copy = _rewrite(path, layout)
    try:
        start = clock()
        session = await store.open(str(copy), read_only=True)
        session.build_context()
        return clock() - start
    finally:
        copy.unlink()


def _rewrite(path: str, layout: str) -> Path:
    """A copy of the session file at ``path`` beside it, in ``layout``."""
    lines = Path(path).read_bytes().split(b"\n")
    out, shift = [lines[0]], 0
    for line in lines[1:-1]:
        if line.startswith((b'{"kind":"entry"', b'[{"kind":"entry"')):
            line, shift = _rewritten(line, layout, shift)
        elif line.startswith((b'{"kind":"value"', b'[{"kind":"value"')):
            continue  # the final tip: each entry's line moves it now
        out.append(line)
    copy = Path(path).with_name(f"{layout}-{Path(path).name}")
    copy.write_bytes(b"\n".join(out) + b"\n")
    return copy


def _take_index(path: str) -> bytes | None:
    """Remove the sidecar index of ``path``, returning it (a short session has none)."""
    index = Path(index_path(path))
    saved = index.read_bytes() if index.exists() else None
    index.unlink(missing_ok=True)
    return saved


def _put_index(path: str, saved: bytes | None) -> None:
    if saved is not None:
        Path(index_path(path)).write_bytes(saved)


def _rss_in_child(backend: str, where: str, sid: str) -> float:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_resume", "--rss-of", backend, where, sid],
        capture_output=True, text=True, timeout=600, check=True,
        cwd=Path(__file__).resolve().parent.parent,
    )  # fmt: skip
    return float(proc.stdout.split()[-1])


def _peak_rss_kib() -> int:
    """This process's peak resident set in KiB: Linux's ``VmHWM`` (``ru_maxrss`` keeps
    the peak of the process that ran ``exec``), elsewhere ``ru_maxrss``."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # pragma: no cover


async def _open_once(backend: str, where: str, sid: str) -> float:
    store = make_store(backend, Path(where))
    before = _peak_rss_kib()
    session = await store.open(sid)
    session.build_context()
    after = _peak_rss_kib()
    await session.close()
    if isinstance(store, SqliteSessionStore):
        await store.aclose()
    return (after - before) / 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--backend", choices=["jsonl", "sqlite", "postgres"], action="append")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall")
    parser.add_argument("--postgres", metavar="URL", help="a server for the postgres rows")
    parser.add_argument("--layouts", action="store_true", help="the JSONL rows of Pi's layouts")
    parser.add_argument(
        "--rss-of", nargs=3, metavar=("BACKEND", "DIR", "ID"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.rss_of:
        print(f"rss_mb {trio.run(_open_once, *args.rss_of):.2f}")
        return 0
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    backends = args.backend or ["jsonl", "sqlite"]
    with contextlib.ExitStack() as stack:
        if "postgres" in backends:
            POSTGRES_URL[:] = [args.postgres or stack.enter_context(_throwaway_postgres())]
        for backend in backends:
            rows = trio.run(
                functools.partial(measure, backend, args.entries, clock=clock, layouts=args.layouts)
            )
            shown = ", ".join(f"{k} {v:,.2f}" for k, v in rows.items())
            on = ", CPU time" if args.clock == "cpu" else ""
            print(f"{backend} ({args.entries:,} entries{on}): {shown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
