"""Web server churn: pages connecting, reading their snapshot and leaving, many at once.

A ``pitrio serve`` child process resumes a long session (``--turns`` turns of a coding
session, 4 messages each, as ``bench_sessions`` writes them). Then ``--rounds`` rounds
run: in each, ``--clients`` WebSockets connect at once, each reads its snapshot (up to
the ``status`` message that ends it) and closes. Reported: the child's RSS before the
first round and after the last (``/proc/PID/status`` ``VmRSS``), its peak (``VmHWM``),
the snapshot latency (connect to the snapshot's end) p50 and p95 over every client, and
the bytes of one snapshot.

Usage::

    python -m benchmarks.bench_web [--clients 200] [--rounds 3] [--turns 500] [--json]

Bounded: the defaults take about 5-45 s on a 2-core machine. Linux only (``/proc``).
Nothing here belongs in a test assertion.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from benchmarks.bench_sessions import turn_messages

TURNS = 250
CLIENTS = 200
ROUNDS = 3
_ROOT = Path(__file__).resolve().parent.parent  # where `-m benchmarks` resolves
_END = '"type": "status", "working": false}'


class BenchmarkError(Exception):
    """A round that did not do its work (a client got no snapshot)."""


async def write_session(sessions: Path, cwd: str, turns: int) -> str:
    """A session of ``turns`` turns for ``cwd`` under ``sessions``; its id."""
    from pitrio.harness import JsonlSessionStore

    store = JsonlSessionStore(sessions)
    session = await store.create(cwd=cwd)
    for turn in range(turns):
        for message in turn_messages(turn):
            await session.append_message(message)
        await session.flush()
    await session.close()
    return session.id


async def _serve_child(sessions: str, cwd: str, session_id: str) -> None:
    from pitrio.testing import ScriptedModel, ScriptedResponse
    from pitrio.web._serve import ServerInfo, serve

    env = {"PITRIO_SESSIONS_DIR": sessions, "HOME": os.path.dirname(sessions)}
    async with trio.open_nursery() as nursery:
        info: ServerInfo = await nursery.start(
            lambda task_status: serve(
                ["--port", "0", "--cwd", cwd, "--resume", session_id, "--yes"],
                stream_fn=ScriptedModel(lambda context: ScriptedResponse.text("ok")),
                env=env,
                out=io.StringIO(),
                task_status=task_status,
            )
        )
        print(json.dumps({"port": info.port, "token": info.token}), flush=True)


def _memory(pid: int) -> dict[str, float]:
    """The process's ``VmRSS`` and ``VmHWM`` in MB."""
    found: dict[str, float] = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                found[name] = int(value.split()[0]) / 1024
    return found


async def _client(port: int, token: str, latencies: list[float], sizes: list[int]) -> None:
    import trio_websocket

    started = time.perf_counter()
    received = 0
    async with trio_websocket.open_websocket_url(
        f"ws://127.0.0.1:{port}/ws?token={token}",
        extra_headers=[(b"Origin", f"http://127.0.0.1:{port}".encode())],
        max_message_size=256 * 1024 * 1024,
    ) as ws:
        while True:
            frame = await ws.get_message()
            received += len(frame)
            # The snapshot ends with the status message (a batch ends with its last).
            if isinstance(frame, str) and frame.rstrip("]").endswith(_END):
                break
    latencies.append(time.perf_counter() - started)
    sizes.append(received)


async def churn(port: int, token: str, *, clients: int, rounds: int) -> dict[str, Any]:
    latencies: list[float] = []
    sizes: list[int] = []
    for _ in range(rounds):
        with trio.fail_after(300):
            async with trio.open_nursery() as nursery:
                for _ in range(clients):
                    nursery.start_soon(_client, port, token, latencies, sizes)
    if len(latencies) != clients * rounds:
        msg = f"{clients * rounds - len(latencies)} clients got no snapshot"
        raise BenchmarkError(msg)
    ordered = sorted(latencies)
    return {
        "snapshot_p50_ms": statistics.median(ordered) * 1000,
        "snapshot_p95_ms": ordered[max(0, int(len(ordered) * 0.95) - 1)] * 1000,
        "snapshot_bytes": statistics.median(sizes),
    }


async def measure(*, clients: int, rounds: int, turns: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="pitrio-bench-web-") as temp:
        cwd = os.path.join(temp, "project")
        os.mkdir(cwd)
        sessions = os.path.join(temp, "sessions")
        session_id = await write_session(Path(sessions), cwd, turns)
        command = [sys.executable, "-m", "benchmarks.bench_web", "--serve", sessions, cwd]
        child = await trio.lowlevel.open_process(
            [*command, session_id], stdout=subprocess.PIPE, cwd=_ROOT
        )
        try:
            assert child.stdout is not None
            ready = b""
            with trio.fail_after(60):
                while not ready.endswith(b"\n"):
                    chunk = await child.stdout.receive_some()
                    if not chunk:
                        msg = "the server child exited before it listened"
                        raise BenchmarkError(msg)
                    ready += chunk
            where = json.loads(ready)
            await trio.sleep(0.5)
            before = _memory(child.pid)
            started = time.perf_counter()
            result = await churn(where["port"], where["token"], clients=clients, rounds=rounds)
            wall = time.perf_counter() - started
            await trio.sleep(1.0)  # the last connections' cleanup
            after = _memory(child.pid)
        finally:
            child.kill()
            with trio.CancelScope(shield=True):
                await child.wait()
    return {
        "metric": "web_churn",
        "clients": clients,
        "rounds": rounds,
        "turns": turns,
        "messages": turns * 4,
        "rss_before_mb": before["VmRSS"],
        "rss_after_mb": after["VmRSS"],
        "peak_rss_mb": after["VmHWM"],
        "wall_s": wall,
        **result,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=CLIENTS)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--turns", type=int, default=TURNS)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--serve", nargs=3, metavar=("SESSIONS", "CWD", "ID"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.serve:
        trio.run(_serve_child, *args.serve)
        return 0
    result = trio.run(lambda: measure(clients=args.clients, rounds=args.rounds, turns=args.turns))
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{result['clients']} clients x {result['rounds']} rounds on a "
            f"{result['messages']}-message session: RSS {result['rss_before_mb']:.1f} -> "
            f"{result['rss_after_mb']:.1f} MB (peak {result['peak_rss_mb']:.1f}); snapshot "
            f"p50 {result['snapshot_p50_ms']:.0f} ms, p95 {result['snapshot_p95_ms']:.0f} ms, "
            f"{result['snapshot_bytes'] / 1024:.0f} KiB; {result['wall_s']:.1f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
