"""The web server under load: pages churning (connecting, reading their snapshot, leaving),
and the cost of one streamed delta on its way to many pages.

**Churn** (the default). A ``pitrio serve`` child process resumes a long session
(``--turns`` turns of a coding session, 4 messages each, as ``bench_sessions`` writes
them). Then ``--rounds`` rounds run: in each, ``--clients`` WebSockets connect at once,
each reads its snapshot (up to the ``status`` message that ends it) and closes.
Reported: the child's RSS before the first round and after the last
(``/proc/PID/status`` ``VmRSS``), its peak (``VmHWM``), the snapshot latency (connect
to the snapshot's end) p50 and p95 over every client, and the bytes of one snapshot.

**Per delta** (``--per-delta``). A ``pitrio serve`` child on a new session answers one
prompt with a scripted model that streams text deltas of 4 characters (a checkpoint
before each, as a network provider yields), while some pages are connected (each reads
its snapshot first; every page reads every message, up to the ``status`` that ends the
answer). Reported per page count:

* instructions per delta of the server process (valgrind's cachegrind,
  ``--cache-sim=no``): a process answering with ``--instruction-deltas`` deltas minus one
  answering with 1 delta, divided by the difference, which cancels start-up, imports,
  connecting and the snapshot (``--instructions``: the page counts), and a ``bare`` row
  (no page, and the pages' listener ignoring every event: the harness and the scripted
  model alone), so the rows above it are what the page path adds. The batches are timed
  (``FRAME_SECONDS``), and cachegrind runs the server some 50x slower: a batch then holds
  fewer deltas than without it (the frames per page are reported with each row;
  ``--frame-seconds 0`` sends a frame per message, the same count under cachegrind or not);
* for a ``--deltas`` answer to ``--pages`` pages: wall time per delta (from the prompt to
  every page having the answer's end; the pages run in this process, so it includes
  their reading), the server's CPU time per delta (``/proc/PID/stat``), and the WebSocket
  frames one page received.

Usage::

    python -m benchmarks.bench_web [--clients 200] [--rounds 3] [--turns 500] [--json]
    python -m benchmarks.bench_web --per-delta [--pages 0,1,10,100] [--deltas 10000]
        [--instructions 0,1,10] [--instruction-deltas 2001] [--json]

Bounded: the churn defaults take about 5-45 s on a 2-core machine, the per-delta defaults
about 1-2 minutes (cachegrind runs the server some 50x slower). Linux only (``/proc``).
Nothing here belongs in a test assertion.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
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


async def _serve_child(sessions: str, cwd: str, session_id: str) -> None:  # churn
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


# --------------------------------------------------------------------------------------
# Per delta: one streamed answer to N pages

DELTAS = 10_000
PAGES = (0, 1, 10, 100)
INSTRUCTION_PAGES = (0, 1, 10)
INSTRUCTION_DELTAS = 2_001
_IREFS = re.compile(r"I\s+refs:\s+([\d,]+)")


async def _delta_child(sessions: str, cwd: str, deltas: str, mode: str, frame: str) -> None:
    """The server of the per-delta workload: answers the prompt ``go`` (started when
    the parent writes ``go`` to stdin) with ``deltas`` deltas, prints ``done`` when the
    run settled, and stops at EOF on stdin. In ``bare`` mode the pages' listener ignores
    every event (the harness and the scripted model alone). ``frame``: the pages'
    ``FRAME_SECONDS`` (``-`` keeps it)."""
    import pitrio.web._serve as serve_module
    from pitrio.testing import ScriptedModel, ScriptedResponse
    from pitrio.web._pages import WebApp

    found: list[WebApp] = []
    original = WebApp
    if frame != "-":
        import pitrio.web._pages as pages_module

        vars(pages_module)["FRAME_SECONDS"] = float(frame)
    if mode == "bare":
        listener = "_on_event"  # a name: the benchmark reaches in
        setattr(WebApp, listener, lambda self, event: None)

    def capture(*args: Any, **kwargs: Any) -> WebApp:
        web = original(*args, **kwargs)
        found.append(web)
        return web

    vars(serve_module)["WebApp"] = capture  # the benchmark reaches in: which WebApp serves
    answer = ScriptedResponse.text("word" * int(deltas), chunk_size=4, checkpoint_each_event=True)
    env = {"PITRIO_SESSIONS_DIR": sessions, "HOME": os.path.dirname(sessions)}
    settled = trio.Event()
    stdin = trio.lowlevel.FdStream(os.dup(0))
    async with trio.open_nursery() as nursery:
        info: serve_module.ServerInfo = await nursery.start(
            lambda task_status: serve_module.serve(
                ["--port", "0", "--cwd", cwd, "--yes"],
                stream_fn=ScriptedModel(lambda context: answer),
                env=env,
                out=io.StringIO(),
                task_status=task_status,
            )
        )
        web = found[0]
        web.app.subscribe(
            lambda event: settled.set() if getattr(event, "type", None) == "settled" else None
        )
        print(json.dumps({"port": info.port, "token": info.token}), flush=True)
        lines = b""
        while not lines.endswith(b"go\n"):
            chunk = await stdin.receive_some()
            if not chunk:
                nursery.cancel_scope.cancel()
                return
            lines += chunk
        web._start_prompt("go")
        await settled.wait()
        print("done", flush=True)
        while await stdin.receive_some():
            pass
        nursery.cancel_scope.cancel()


async def _page(port: int, token: str, ready: trio.Event, go: trio.Event, out: list[int]) -> None:
    """One page: reads its snapshot, then every message up to the answer's end; the
    frames it received after ``go`` go to ``out``."""
    import trio_websocket

    async with trio_websocket.open_websocket_url(
        f"ws://127.0.0.1:{port}/ws?token={token}",
        extra_headers=[(b"Origin", f"http://127.0.0.1:{port}".encode())],
        max_message_size=256 * 1024 * 1024,
    ) as ws:
        while True:
            frame = await ws.get_message()
            if isinstance(frame, str) and frame.rstrip("]").endswith(_END):
                break
        ready.set()
        await go.wait()
        frames = 0
        while True:
            frame = await ws.get_message()
            frames += 1
            if isinstance(frame, str) and frame.rstrip("]").endswith(_END):
                break
        out.append(frames)


def _cpu_seconds(pid: int) -> float:
    """The process's user + system CPU time so far."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _lines(stream: trio.abc.ReceiveStream, buffer: bytearray) -> bytes:
    """The next line of ``stream`` (``buffer`` keeps what came after it)."""
    while b"\n" not in buffer:
        chunk = await stream.receive_some()
        if not chunk:
            msg = "the server child exited early"
            raise BenchmarkError(msg)
        buffer += chunk
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return line


async def one_answer(
    *,
    pages: int,
    deltas: int,
    valgrind: bool = False,
    bare: bool = False,
    frame_seconds: float | None = None,
) -> dict[str, Any]:
    """Serve one ``deltas``-delta answer to ``pages`` pages in a child process (``bare``:
    with the page path cut off)."""
    with tempfile.TemporaryDirectory(prefix="pitrio-bench-web-") as temp:
        cwd = os.path.join(temp, "project")
        os.mkdir(cwd)
        sessions = os.path.join(temp, "sessions")
        os.mkdir(sessions)
        command = [sys.executable, "-m", "benchmarks.bench_web", "--delta-serve", sessions]
        command += [cwd, str(deltas), "bare" if bare else "web"]
        command.append("-" if frame_seconds is None else str(frame_seconds))
        if valgrind:
            vg = ["valgrind", "--tool=cachegrind", "--cache-sim=no"]
            command = [*vg, "--cachegrind-out-file=/dev/null", *command]
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        child = await trio.lowlevel.open_process(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=_ROOT,
            env=env,
        )
        assert child.stdin is not None
        assert child.stdout is not None
        assert child.stderr is not None
        errors = bytearray()

        async def drain(stream: trio.abc.ReceiveStream) -> None:
            while chunk := await stream.receive_some():
                errors.extend(chunk)

        frames: list[int] = []
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(drain, child.stderr)
                buffer = bytearray()
                with trio.fail_after(600):
                    where = json.loads(await _lines(child.stdout, buffer))
                    go = trio.Event()
                    readies = [trio.Event() for _ in range(pages)]
                    async with trio.open_nursery() as clients:
                        for ready in readies:
                            clients.start_soon(
                                _page, where["port"], where["token"], ready, go, frames
                            )
                        for ready in readies:
                            await ready.wait()
                        cpu = _cpu_seconds(child.pid)
                        started = time.perf_counter()
                        go.set()
                        await child.stdin.send_all(b"go\n")
                        if await _lines(child.stdout, buffer) != b"done":
                            msg = "the server child did not report its answer's end"
                            raise BenchmarkError(msg)
                    wall = time.perf_counter() - started
                    cpu = _cpu_seconds(child.pid) - cpu
                    await child.stdin.aclose()
                    await child.wait()
        finally:
            if child.returncode is None:
                child.kill()
                with trio.CancelScope(shield=True):
                    await child.wait()
    if child.returncode != 0 or len(frames) != pages:
        msg = f"the server child failed ({child.returncode}): {errors.decode()[-400:]}"
        raise BenchmarkError(msg)
    result: dict[str, Any] = {"wall_s": wall, "cpu_s": cpu, "frames_per_page": frames[:1]}
    if valgrind:
        counts = [int(m.replace(",", "")) for m in _IREFS.findall(errors.decode())]
        if not counts:
            msg = f"no instruction count from valgrind: {errors.decode()[-400:]}"
            raise BenchmarkError(msg)
        result["instructions"] = sum(counts)
    return result


async def per_delta(
    *,
    pages: Sequence[int],
    deltas: int,
    instruction_pages: Sequence[int],
    instruction_deltas: int,
    frame_seconds: float | None = None,
) -> dict[str, Any]:
    """The per-delta rows: instructions (N deltas minus 1) and wall/CPU per page count
    (``frame_seconds``: the pages' batch interval instead of ``FRAME_SECONDS``)."""
    rows: list[dict[str, Any]] = []
    if instruction_pages:
        many = await one_answer(pages=0, deltas=instruction_deltas, valgrind=True, bare=True)
        one = await one_answer(pages=0, deltas=1, valgrind=True, bare=True)
        extra = (many["instructions"] - one["instructions"]) / (instruction_deltas - 1)
        rows.append({"pages": "bare", "instructions_per_delta": extra, "frames_per_page": 0})
    for count in instruction_pages:
        many = await one_answer(
            pages=count, deltas=instruction_deltas, valgrind=True, frame_seconds=frame_seconds
        )
        one = await one_answer(pages=count, deltas=1, valgrind=True, frame_seconds=frame_seconds)
        extra = (many["instructions"] - one["instructions"]) / (instruction_deltas - 1)
        frames = many["frames_per_page"][0] if many["frames_per_page"] else 0
        rows.append({"pages": count, "instructions_per_delta": extra, "frames_per_page": frames})
    timed: list[dict[str, Any]] = []
    for count in pages:
        run = await one_answer(pages=count, deltas=deltas, frame_seconds=frame_seconds)
        timed.append(
            {
                "pages": count,
                "wall_us_per_delta": run["wall_s"] / deltas * 1e6,
                "server_cpu_us_per_delta": run["cpu_s"] / deltas * 1e6,
                "frames_per_page": run["frames_per_page"][0] if run["frames_per_page"] else 0,
            }
        )
    return {
        "metric": "web_per_delta",
        "deltas": deltas,
        "instruction_deltas": instruction_deltas,
        "frame_seconds": frame_seconds,
        "instructions": rows,
        "timed": timed,
    }


def _counts(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(",") if part.strip())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=CLIENTS)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--turns", type=int, default=TURNS)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--per-delta", action="store_true", help="the per-delta workload")
    parser.add_argument("--pages", type=_counts, default=PAGES, help="page counts, timed")
    parser.add_argument("--deltas", type=int, default=DELTAS, help="deltas of a timed answer")
    parser.add_argument(
        "--instructions", type=_counts, default=INSTRUCTION_PAGES, help="page counts, counted"
    )
    parser.add_argument("--instruction-deltas", type=int, default=INSTRUCTION_DELTAS)
    parser.add_argument(
        "--frame-seconds", type=float, help="the batch interval (0: a frame per message)"
    )
    parser.add_argument(
        "--serve", nargs=3, metavar=("SESSIONS", "CWD", "ID"), help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--delta-serve",
        nargs=5,
        metavar=("SESSIONS", "CWD", "N", "MODE", "FRAME"),
        help=argparse.SUPPRESS,
    )
    args = parser.parse_args(argv)
    if args.serve:
        trio.run(_serve_child, *args.serve)
        return 0
    if args.delta_serve:
        trio.run(_delta_child, *args.delta_serve)
        return 0
    if args.per_delta:
        found = trio.run(
            lambda: per_delta(
                pages=args.pages,
                deltas=args.deltas,
                instruction_pages=args.instructions,
                instruction_deltas=args.instruction_deltas,
                frame_seconds=args.frame_seconds,
            )
        )
        if args.json:
            print(json.dumps(found))
            return 0
        for row in found["instructions"]:
            print(
                f"{row['pages']:>4} pages: {row['instructions_per_delta']:,.0f} instructions/delta"
                f" ({row['frames_per_page']} frames/page under cachegrind)"
            )
        for row in found["timed"]:
            print(
                f"{row['pages']:>4} pages: wall {row['wall_us_per_delta']:.1f} µs/delta, "
                f"server CPU {row['server_cpu_us_per_delta']:.1f} µs/delta, "
                f"{row['frames_per_page']} frames/page"
            )
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
