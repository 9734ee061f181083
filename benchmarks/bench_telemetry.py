"""Telemetry overhead: a harness's turn with no telemetry, Pi's contract, the OTel SDK.

One workload, several ways, interleaved so that a noisy machine slows each alike:

========== ==================================================================== ============
subject    what records the spans                                                reported
========== ==================================================================== ============
off        nothing (the harness alone)                                          µs per turn
noop       ``instrument(harness, NOOP_TELEMETRY_CONTEXT)``: telemetry switched  µs per turn
           off where an application wires it in
listener   a listener that does nothing (what any subscriber costs)             µs per turn
memory     ``instrument(harness, InMemoryTelemetryContext())``                  µs per turn
otel       ``instrument(harness, OpenTelemetryContext(...))`` on the SDK:        µs per turn
           ``SimpleSpanProcessor`` into ``InMemorySpanExporter``, the two
           histograms into an ``InMemoryMetricReader``
========== ==================================================================== ============

Two workloads. ``scripted`` (the default): ``Harness`` on a ``ScriptedModel``, T=20 turns
of K=4 parallel calls of a trivial tool, then a final text turn (the loop benchmark's
shape, through the harness); per turn that is one run, one turn, one request and four tool
spans, and a turn costs a few hundred µs, so this is the worst case. ``http``: the same
harness on pitrio's openai-completions provider against a chat-completions server in a
child process on 127.0.0.1 (each answer streams 20 text deltas and then K tool calls; each
tool reads a small file), so a turn does what a real agent's turn does short of waiting for
a model. Reported: the median wall time
over ``--reps`` runs divided by T+1, and each subject's overhead over ``off``; then the
recording alone: one run's events replayed into ``instrument``'s listener, CPU µs per turn
(steadier on a busy machine). The targets (issue 20): at most 5 % for Pi's contract, 15 %
with the SDK.

Usage::

    python -m benchmarks.bench_telemetry [--reps N] [--turns T] [--calls K]
                                         [--clock wall|cpu] [--workload scripted|http]
                                         [--json]

Timings use the real clock (``time.perf_counter``), or with ``--clock cpu`` the process's
CPU time, which a busy machine disturbs less; nothing here belongs in a test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, Final, cast

import trio

from pitrio import Model, Tool, ToolResult, text_result
from pitrio.harness import Harness
from pitrio.providers import Models
from pitrio.telemetry import (
    NOOP_TELEMETRY_CONTEXT,
    InMemoryTelemetryContext,
    TelemetryContext,
    instrument,
)
from pitrio.testing import ScriptedModel, ScriptedResponse

SUBJECTS: Final = ("off", "noop", "listener", "memory", "otel")
WORKLOADS: Final = ("scripted", "http")
MODEL: Final = Model(id="m", api="scripted", provider="scripted", context_window=10_000_000)


async def _noop(call_id: str, params: Any, signal: Any, on_update: Any) -> ToolResult:
    return text_result("ok")


NOOP: Final = Tool(
    name="noop",
    description="does nothing",
    parameters={"type": "object", "properties": {"i": {"type": "integer"}}},
    execute=_noop,
)


def _script(turns: int, calls: int) -> list[ScriptedResponse]:
    responses = [
        ScriptedResponse.tool_calls(*((f"c{t}-{k}", "noop", {"i": k}) for k in range(calls)))
        for t in range(turns)
    ]
    return [*responses, ScriptedResponse.text("done")]


def _otel_context() -> tuple[TelemetryContext, Callable[[], int]]:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from pitrio.telemetry import OpenTelemetryContext

    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    context = OpenTelemetryContext(
        tracer_provider=tracer_provider, meter_provider=meter_provider, latest_conventions=True
    )
    return context, lambda: len(exporter.get_finished_spans())


CLOCKS: Final = {"wall": time.perf_counter, "cpu": time.process_time}

# -- the http workload: a chat-completions server in a child process ------------------

HTTP_DELTAS: Final = 20


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    data = {"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [choice]}
    return b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"


def _answer(body: dict[str, Any], turns: int, calls: int) -> bytes:
    """Text deltas, then ``calls`` tool calls, unless ``turns`` answers were given."""
    done = sum(1 for m in body.get("messages", ()) if m.get("role") == "assistant")
    parts = [_chunk({"role": "assistant", "content": ""})]
    parts.extend(_chunk({"content": "word "}) for _ in range(HTTP_DELTAS))
    if done >= turns:
        parts.append(_chunk({}, "stop"))
    else:
        for k in range(calls):
            function = {"name": "read_note", "arguments": json.dumps({"i": k})}
            call = {"index": k, "id": f"c{done}-{k}", "type": "function", "function": function}
            parts.append(_chunk({"tool_calls": [call]}))
        parts.append(_chunk({}, "tool_calls"))
    counts = {"prompt_tokens": 100, "completion_tokens": 30, "total_tokens": 130}
    usage = {"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [],
             "usage": counts}  # fmt: skip
    parts.append(b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n")
    return b"".join(parts)


async def _serve_one(stream: trio.SocketStream, turns: int, calls: int) -> None:
    data = b""
    while b"\r\n\r\n" not in data:
        received = await stream.receive_some(65536)
        if not received:
            return
        data += received
    head, _, rest = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(rest) < length:
        rest += await stream.receive_some(65536)
    body = _answer(json.loads(rest), turns, calls)
    await stream.send_all(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body)
    )
    await stream.aclose()


async def serve(turns: int, calls: int) -> None:
    """The http workload's server: prints its port, serves until killed."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    print(listeners[0].socket.getsockname()[1], flush=True)

    async def handle(stream: trio.SocketStream) -> None:
        await _serve_one(stream, turns, calls)

    await trio.serve_listeners(handle, listeners)


def _note_tool(directory: str) -> Tool:
    async def read_note(call_id: str, params: Any, signal: Any, on_update: Any) -> ToolResult:
        text = await trio.Path(directory, f"note{params['i'] % 4}.txt").read_text()
        return text_result(text)

    return Tool(
        name="read_note",
        description="Read note i.",
        parameters={"type": "object", "properties": {"i": {"type": "integer"}}},
        execute=read_note,
    )


class _HttpWorkload:
    """A server child process and what a harness needs to use it."""

    def __init__(self, turns: int, calls: int) -> None:
        import subprocess
        import tempfile

        self.process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.bench_telemetry", "--serve",
             "--turns", str(turns), "--calls", str(calls)],
            stdout=subprocess.PIPE,
        )  # fmt: skip
        assert self.process.stdout is not None
        port = int(self.process.stdout.readline())
        self.model = Model(
            id="m", api="openai-completions", provider="bench",
            base_url=f"http://127.0.0.1:{port}/v1", context_window=10_000_000,
        )  # fmt: skip
        self.directory = tempfile.mkdtemp(prefix="pitrio-bench-telemetry-")
        for i in range(4):
            with open(f"{self.directory}/note{i}.txt", "w") as f:
                f.write(f"note {i}: " + "the quick brown fox " * 20)
        self.tool = _note_tool(self.directory)

        self.models = Models(get_api_key=lambda provider: "k", builtin=False)

    def harness(self) -> Harness:
        return Harness(model=self.model, stream_fn=self.models.stream_fn, tools=[self.tool])

    def close(self) -> None:
        import shutil

        self.process.kill()
        self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        shutil.rmtree(self.directory, ignore_errors=True)


_HTTP: list[_HttpWorkload] = []


async def run_once(
    subject: str, turns: int, calls: int, clock: Callable[[], float] = time.perf_counter
) -> float:
    """One run; returns its wall time in seconds (checks the answer and the span count).

    On the http workload when :data:`_HTTP` holds its server."""
    if _HTTP:
        harness = _HTTP[0].harness()
        answer = "word " * HTTP_DELTAS
    else:
        harness = Harness(model=MODEL, stream_fn=ScriptedModel(_script(turns, calls)), tools=[NOOP])
        answer = "done"
    count: Callable[[], int] = lambda: 0  # noqa: E731
    if subject == "noop":
        instrument(harness, NOOP_TELEMETRY_CONTEXT)
    elif subject == "listener":
        harness.subscribe(lambda event: None)
    elif subject == "memory":
        memory = InMemoryTelemetryContext()
        instrument(harness, memory)
        count = lambda: len(memory.get_spans())  # noqa: E731
    elif subject == "otel":
        context, count = _otel_context()
        instrument(harness, context)
    start = clock()
    await harness.prompt("go")
    elapsed = clock() - start
    if harness.messages[-1].text != answer:
        msg = f"the run did not finish with {answer!r}: {harness.messages[-1]!r}"
        raise RuntimeError(msg)
    recorded = subject in ("memory", "otel")
    # A run, its requests and tool calls, and (Pi's contract) a span per turn; the
    # OpenTelemetry adapter gives turns no span of their own.
    turn_spans = turns + 1 if subject == "memory" else 0
    expected = 1 + (turns + 1) + turn_spans + turns * calls if recorded else 0
    if count() != expected:
        msg = f"{subject}: {count()} spans, expected {expected}"
        raise RuntimeError(msg)
    return elapsed


class _Replay:
    """What instrument() uses of a harness, for replaying a run's recorded events."""

    def __init__(self) -> None:
        self.model = MODEL
        self.messages: list[Any] = []
        self.session = None
        self.listener: Callable[[Any], object] | None = None

    def subscribe(self, listener: Callable[[Any], object]) -> Callable[[], None]:
        self.listener = listener
        return lambda: None


async def measure_recording(*, reps: int, turns: int, calls: int) -> dict[str, float]:
    """The listener's own CPU time per turn: one run's events replayed into ``instrument``.

    Free of the run's scheduling, so a busy machine moves it less than the whole-run rows.
    """
    events: list[Any] = []
    harness = Harness(model=MODEL, stream_fn=ScriptedModel(_script(turns, calls)), tools=[NOOP])
    harness.subscribe(events.append)
    await harness.prompt("go")
    result: dict[str, float] = {}
    for subject in ("memory", "otel"):
        samples = []
        for _ in range(reps):
            contexts = [
                InMemoryTelemetryContext() if subject == "memory" else _otel_context()[0]
                for _ in range(10)
            ]
            start = time.process_time()
            for context in contexts:
                replay = _Replay()
                instrument(cast("Harness", replay), context)
                assert replay.listener is not None
                for event in events:
                    replay.listener(event)
            samples.append((time.process_time() - start) / len(contexts) / (turns + 1))
        result[subject] = round(statistics.median(samples) * 1e6, 1)
    return result


async def measure(
    *, reps: int, turns: int, calls: int, clock: str = "wall", workload: str = "scripted"
) -> dict[str, Any]:
    """Interleaved reps of every subject; µs per turn and overhead over ``off``."""
    if workload == "http":
        _HTTP.append(_HttpWorkload(turns, calls))
        try:
            async with _HTTP[0].models:
                return await _measure(reps=reps, turns=turns, calls=calls, clock=clock,
                                      workload=workload)  # fmt: skip
        finally:
            _HTTP.pop().close()
    return await _measure(reps=reps, turns=turns, calls=calls, clock=clock, workload=workload)


async def _measure(
    *, reps: int, turns: int, calls: int, clock: str, workload: str
) -> dict[str, Any]:
    times: dict[str, list[float]] = {s: [] for s in SUBJECTS}
    for _ in range(3):  # warm-up
        for subject in SUBJECTS:
            await run_once(subject, turns, calls)
    for _ in range(reps):
        for subject in SUBJECTS:
            times[subject].append(await run_once(subject, turns, calls, CLOCKS[clock]))
    per_turn = {s: statistics.median(v) / (turns + 1) * 1e6 for s, v in times.items()}
    base = per_turn["off"]
    return {
        "metric": "telemetry",
        "workload": workload,
        "turns": turns,
        "calls": calls,
        "reps": reps,
        "clock": clock,
        "us_per_turn": {s: round(v, 1) for s, v in per_turn.items()},
        "overhead_pct": {s: round((per_turn[s] / base - 1) * 100, 1) for s in SUBJECTS[1:]},
        "recording_us_per_turn": await measure_recording(reps=reps, turns=turns, calls=calls),
    }


async def _runs(subject: str, runs: int, turns: int, calls: int, workload: str) -> None:
    """``runs`` runs of ``subject`` in this process (what ``--instructions`` counts)."""
    if workload == "http":
        _HTTP.append(_HttpWorkload(turns, calls))
        try:
            async with _HTTP[0].models:
                for _ in range(runs):
                    await run_once(subject, turns, calls)
        finally:
            _HTTP.pop().close()
        return
    for _ in range(runs):
        await run_once(subject, turns, calls)


def instructions(*, turns: int, calls: int, workload: str) -> dict[str, Any]:
    """Instructions per turn of each subject (cachegrind: an 11-run process minus a 1-run
    process, divided by 10 and by T+1; the http workload's server is another process,
    not counted), and each subject's overhead over ``off``. Needs valgrind."""
    from benchmarks.bench_harness import count_instructions

    def cmd(subject: str, runs: int) -> list[str]:
        return [
            sys.executable, "-m", "benchmarks.bench_telemetry", "--one", subject,
            "--runs", str(runs), "--turns", str(turns), "--calls", str(calls),
            "--workload", workload,
        ]  # fmt: skip

    per_turn: dict[str, float] = {}
    for subject in SUBJECTS:
        one = count_instructions(cmd(subject, 1))
        eleven = count_instructions(cmd(subject, 11))
        per_turn[subject] = (eleven - one) / 10 / (turns + 1)
    base = per_turn["off"]
    return {
        "metric": "telemetry-instructions",
        "workload": workload,
        "turns": turns,
        "calls": calls,
        "instructions_per_turn": {s: round(v) for s, v in per_turn.items()},
        "overhead_pct": {s: round((per_turn[s] / base - 1) * 100, 1) for s in SUBJECTS[1:]},
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Measure and print (a table, or one JSON line with ``--json``)."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_telemetry")
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--turns", type=int, default=20)
    p.add_argument("--calls", type=int, default=4)
    p.add_argument("--clock", choices=sorted(CLOCKS), default="wall")
    p.add_argument("--workload", choices=WORKLOADS, default="scripted")
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--one", choices=SUBJECTS, help=argparse.SUPPRESS)
    p.add_argument("--runs", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument(
        "--instructions", action="store_true", help="count instructions (valgrind) instead"
    )
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if a.serve:
        trio.run(serve, a.turns, a.calls)
        return 0
    if a.one is not None:
        trio.run(_runs, a.one, a.runs, a.turns, a.calls, a.workload)
        return 0
    if a.instructions:
        counted = instructions(turns=a.turns, calls=a.calls, workload=a.workload)
        if a.json:
            print(json.dumps(counted), flush=True)
            return 0
        print(f"{a.workload}: T={a.turns} turns of K={a.calls} calls, instructions per turn")
        for subject in SUBJECTS:
            overhead = counted["overhead_pct"].get(subject)
            extra = f"  ({overhead:+} %)" if overhead is not None else ""
            print(f"  {subject:<8} {counted['instructions_per_turn'][subject]:>12,}{extra}")
        return 0
    result = trio.run(
        lambda: measure(
            reps=a.reps, turns=a.turns, calls=a.calls, clock=a.clock, workload=a.workload
        )
    )
    if a.json:
        print(json.dumps(result), flush=True)
        return 0
    print(
        f"{a.workload}: T={a.turns} turns of K={a.calls} tool calls, "
        f"median of {a.reps} runs ({a.clock})"
    )
    for subject in SUBJECTS:
        overhead = result["overhead_pct"].get(subject)
        extra = f"  (+{overhead} %)" if overhead is not None else ""
        print(f"  {subject:<8} {result['us_per_turn'][subject]:>9.1f} µs/turn{extra}")
    for subject, cost in result["recording_us_per_turn"].items():
        print(f"  {subject:<8} recording alone (events replayed): {cost:.1f} µs/turn of CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
