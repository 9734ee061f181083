"""Telemetry overhead: a harness's turn with no telemetry, Pi's contract, the OTel SDK.

One workload, three ways, interleaved so that a noisy machine slows each alike:

========== ==================================================================== ============
subject    what records the spans                                                reported
========== ==================================================================== ============
off        nothing (the harness alone)                                          µs per turn
listener   a listener that does nothing (what any subscriber costs)             µs per turn
memory     ``instrument(harness, InMemoryTelemetryContext())``                  µs per turn
otel       ``instrument(harness, OpenTelemetryContext(...))`` on the SDK:        µs per turn
           ``SimpleSpanProcessor`` into ``InMemorySpanExporter``, the two
           histograms into an ``InMemoryMetricReader``
========== ==================================================================== ============

The run: ``Harness`` on a ``ScriptedModel``, T=20 turns of K=4 parallel calls of a trivial
tool, then a final text turn (the loop benchmark's shape, through the harness); per turn
that is one run, one turn, one request and four tool spans. Reported: the median wall time
over ``--reps`` runs divided by T+1, and each subject's overhead over ``off``; then the
recording alone: one run's events replayed into ``instrument``'s listener, CPU µs per turn
(steadier on a busy machine). The targets (issue 20): at most 5 % for Pi's contract, 15 %
with the SDK.

Usage::

    python -m benchmarks.bench_telemetry [--reps N] [--turns T] [--calls K]
                                         [--clock wall|cpu] [--json]

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
from pitrio.telemetry import InMemoryTelemetryContext, TelemetryContext, instrument
from pitrio.testing import ScriptedModel, ScriptedResponse

SUBJECTS: Final = ("off", "listener", "memory", "otel")
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


async def run_once(
    subject: str, turns: int, calls: int, clock: Callable[[], float] = time.perf_counter
) -> float:
    """One run; returns its wall time in seconds (checks the answer and the span count)."""
    harness = Harness(model=MODEL, stream_fn=ScriptedModel(_script(turns, calls)), tools=[NOOP])
    count: Callable[[], int] = lambda: 0  # noqa: E731
    if subject == "listener":
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
    if harness.messages[-1].text != "done":
        msg = f"the run did not finish with 'done': {harness.messages[-1]!r}"
        raise RuntimeError(msg)
    expected = 0 if subject in ("off", "listener") else 1 + (turns + 1) * 2 + turns * calls
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
    for subject in SUBJECTS[2:]:
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
    *, reps: int, turns: int, calls: int, clock: str = "wall"
) -> dict[str, Any]:
    """Interleaved reps of every subject; µs per turn and overhead over ``off``."""
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
        "turns": turns,
        "calls": calls,
        "reps": reps,
        "clock": clock,
        "us_per_turn": {s: round(v, 1) for s, v in per_turn.items()},
        "overhead_pct": {s: round((per_turn[s] / base - 1) * 100, 1) for s in SUBJECTS[1:]},
        "recording_us_per_turn": await measure_recording(reps=reps, turns=turns, calls=calls),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Measure and print (a table, or one JSON line with ``--json``)."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_telemetry")
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--turns", type=int, default=20)
    p.add_argument("--calls", type=int, default=4)
    p.add_argument("--clock", choices=sorted(CLOCKS), default="wall")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    result = trio.run(
        lambda: measure(reps=a.reps, turns=a.turns, calls=a.calls, clock=a.clock)
    )
    if a.json:
        print(json.dumps(result), flush=True)
        return 0
    print(f"T={a.turns} turns of K={a.calls} tool calls, median of {a.reps} runs ({a.clock})")
    for subject in SUBJECTS:
        overhead = result["overhead_pct"].get(subject)
        extra = f"  (+{overhead} %)" if overhead is not None else ""
        print(f"  {subject:<8} {result['us_per_turn'][subject]:>9.1f} µs/turn{extra}")
    for subject, cost in result["recording_us_per_turn"].items():
        print(f"  {subject:<8} recording alone (events replayed): {cost:.1f} µs/turn of CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
