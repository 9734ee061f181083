"""pitrio's loop benchmarks: the peer workloads, on pitrio's public API.

The same synthetic workloads as the peer benchmarks ("peers-bench"), so
the numbers can be set side by side: a scripted model (:class:`pitrio.testing.ScriptedModel`,
no network, no work) and a trivial async tool ``noop(i: int) -> "ok"``. Every run
checks its final answer and that exactly ``T x K`` tool calls ran.

========== ============================================================ ==========================
metric     workload                                                     reported
========== ============================================================ ==========================
turn       one run: T=20 turns of K=4 tool calls + a final text turn;  median wall / (T+1), µs
           3 warm-ups, 15 reps
tool       T=20 with K=1 and K=8 alternated (``--tool-style decorated``: (median(K=8) - median(K=1))
           the same tool from ``@pitrio.tool``)                         / (T*7), µs
concurrent R=1000 runs started at once (T=5, K=4)                       runs/s (peak RSS: run it
                                                                        under ``/usr/bin/time -v``)
batch      one turn of K=8 tools that each sleep 100 ms, then text      median wall, ms (ideal 100)
stream     one response streaming 10,000 one-character text deltas      text-delta events seen by
                                                                        a subscriber per second
memory     N=1000 idle agents, each after one run (T=1, K=1: a          tracemalloc bytes per agent
           4-message transcript)
========== ============================================================ ==========================

Usage::

    python -m benchmarks.bench_loop [turn|tool|concurrent|batch|stream|memory|all] [--json]
                                    [--model scripted|minimal] [--tool-style pi|decorated]

With ``--json`` each metric prints one ``{"metric": ...}`` line, as the peer scripts do.

``--model scripted`` (the default) plays the script through
:class:`pitrio.testing.ScriptedModel`, which streams every content block as a provider
would (``toolcall_start``/``toolcall_end`` per call, so ``2K`` more ``message_update``
events per turn than the peers see). ``--model minimal`` is the peers' own stream
function on pitrio's public API: a stream holding just ``start`` and ``done``, filled
before it is returned (for ``stream``: the deltas, each carrying the final message, as
the peers' live object does by the time their prefilled stream is read).
Timings use the real clock (``time.perf_counter``); nothing here belongs in a test
assertion (``tests/test_benchmarks_smoke.py`` checks correctness only).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import sys
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

import attrs
import trio

import pitrio
from pitrio import (
    AbortSignal,
    Agent,
    AgentEvent,
    AssistantMessage,
    AssistantMessageEventStream,
    Context,
    DoneEvent,
    MessageUpdate,
    Model,
    StartEvent,
    StreamOptions,
    TextContent,
    TextDeltaEvent,
    TextEndEvent,
    TextStartEvent,
    Tool,
    ToolCall,
    ToolResult,
    text_result,
)
from pitrio.testing import ScriptedModel, ScriptedResponse

__all__ = [
    "DEFAULTS",
    "METRICS",
    "BenchmarkError",
    "Workload",
    "main",
    "measure",
    "measure_batch",
    "measure_concurrent",
    "measure_memory",
    "measure_stream",
    "measure_tool",
    "measure_turn",
    "run_many",
    "run_once",
    "stream_once",
]

METRICS: Final = ("turn", "tool", "concurrent", "batch", "stream", "memory")
DEFAULTS: Final = {
    "turns": 20,
    "k": 4,
    "runs": 1000,
    "conc_turns": 5,
    "deltas": 10_000,
    "sleep": 0.1,
    "batch_k": 8,
    "agents": 1000,
}

MODEL: Final = Model(id="scripted", api="scripted", provider="scripted")
NOOP_PARAMETERS: Final = {
    "type": "object",
    "properties": {"i": {"type": "integer"}},
    "required": ["i"],
}


class BenchmarkError(Exception):
    """A benchmark run did not do what it should (wrong answer, wrong tool-call count)."""


def _check(condition: bool, message: str | Callable[[], str]) -> None:
    """Raise :class:`BenchmarkError` unless ``condition``; ``message`` may be a function, so
    that a run's check does not format anything (a message's repr) when it passes."""
    if not condition:
        raise BenchmarkError(message if isinstance(message, str) else message())


# --------------------------------------------------------------------------------------
# The workload: a scripted model and the noop tool


@attrs.define(eq=False)
class Workload:
    """One benchmark configuration: the script, the tool, and a count of tool calls.

    The script is the peers': the turn index is the number of assistant messages
    already in the request's context; turns ``0..turns-1`` ask for ``k`` calls of
    ``noop`` (ids ``c{turn}_{j}``, arguments ``{"i": j}``), the next one answers
    ``done``. ``deltas > 0`` makes the model stream that many one-character text
    deltas instead.
    """

    turns: int = 1
    k: int = 1
    sleep: float = 0.0
    deltas: int = 0
    model: str = "scripted"
    tool_style: str = "pi"
    calls: int = 0
    tool: Tool = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        if self.tool_style == "decorated":
            self.tool = self._decorated()
            return
        self.tool = Tool(
            name="noop",
            description="No-op tool.",
            parameters=NOOP_PARAMETERS,
            execute=self.noop,
        )

    def _decorated(self) -> Tool:
        """The same tool written as a typed function for ``pitrio.tool``."""

        async def noop(i: int) -> str:
            """No-op tool."""
            self.calls += 1
            if self.sleep:
                await trio.sleep(self.sleep)
            return "ok"

        return pitrio.tool(noop)

    async def noop(
        self,
        tool_call_id: str,
        params: Any,
        signal: AbortSignal,
        on_update: Callable[[ToolResult], None],
    ) -> ToolResult:
        """The tool: ``noop(i: int) -> "ok"`` (sleeps ``sleep`` seconds first, if set)."""
        self.calls += 1
        if self.sleep:
            await trio.sleep(self.sleep)
        return text_result("ok")

    def script(self, context: Context) -> ScriptedResponse:
        """The model's response to one request."""
        if self.deltas:
            return ScriptedResponse.text("x" * self.deltas, chunk_size=1)
        turn = sum(1 for m in context.messages if m.role == "assistant")
        if turn < self.turns:
            return ScriptedResponse.tool_calls(
                *[(f"c{turn}_{j}", "noop", {"i": j}) for j in range(self.k)]
            )
        return ScriptedResponse.text("done")

    def minimal_stream(
        self, model: Model, context: Context, options: StreamOptions
    ) -> AssistantMessageEventStream:
        """The peers' stream function: the whole response as ``start`` + ``done``.

        With ``deltas`` it streams that many one-character text deltas, every event
        carrying the one final message: the peers push their live message object with
        each delta into a stream filled before it is returned, so by the time anyone
        reads the events each of them shows the whole text too.
        """
        if self.deltas:
            return self._minimal_deltas(model)
        turn = sum(1 for m in context.messages if m.role == "assistant")
        if turn < self.turns:
            message = AssistantMessage(
                content=tuple(
                    ToolCall(id=f"c{turn}_{j}", name="noop", arguments={"i": j})
                    for j in range(self.k)
                ),
                api=model.api,
                provider=model.provider,
                model=model.id,
                stop_reason="toolUse",
            )
        else:
            message = AssistantMessage(
                content=(TextContent(text="done"),),
                api=model.api,
                provider=model.provider,
                model=model.id,
                stop_reason="stop",
            )
        stream = AssistantMessageEventStream(template=message)
        stream.push(StartEvent(partial=message))
        stream.push(DoneEvent(reason="toolUse" if turn < self.turns else "stop", message=message))
        return stream

    def _minimal_deltas(self, model: Model) -> AssistantMessageEventStream:
        text = "x" * self.deltas
        message = AssistantMessage(
            content=(TextContent(text=text),),
            api=model.api,
            provider=model.provider,
            model=model.id,
            stop_reason="stop",
        )
        stream = AssistantMessageEventStream(template=message)
        push = stream.push
        push(StartEvent(partial=message))
        push(TextStartEvent(content_index=0, partial=message))
        for _ in range(self.deltas):
            push(TextDeltaEvent(content_index=0, delta="x", partial=message))
        push(TextEndEvent(content_index=0, content=text, partial=message))
        push(DoneEvent(reason="stop", message=message))
        return stream

    def agent(self) -> Agent:
        """A fresh agent on this workload."""
        return Agent(
            system_prompt="bench",
            model=MODEL,
            tools=[self.tool],
            stream_fn=(
                self.minimal_stream
                if self.model == "minimal"
                else ScriptedModel(self.script, record_requests=False)
            ),
        )


def _check_final(agent: Agent) -> None:
    messages = agent.state.messages
    _check(bool(messages), "the run left an empty transcript")
    last = messages[-1]
    text = last.content[0].text if last.role == "assistant" and last.content else None
    _check(text == "done", lambda: f"bad final message: {last!r:.300}")


async def run_once(w: Workload) -> Agent:
    """One run: a new agent, ``prompt("go")``, then the checks. Returns the agent."""
    w.calls = 0
    agent = w.agent()
    await agent.prompt("go")
    _check_final(agent)
    _check(
        w.calls == w.turns * w.k,
        lambda: f"executed {w.calls} tool calls, expected {w.turns * w.k}",
    )
    return agent


async def run_many(w: Workload, runs: int) -> int:
    """``runs`` runs started at once in one nursery; returns how many succeeded.

    Also checks that exactly ``runs x turns x k`` tool calls ran in all.
    """
    w.calls = 0
    ok = 0

    async def one() -> None:
        nonlocal ok
        agent = w.agent()
        try:
            await agent.prompt("go")
            _check_final(agent)
        except Exception:
            return
        ok += 1

    async with trio.open_nursery() as nursery:
        for _ in range(runs):
            nursery.start_soon(one)
    _check(
        w.calls == runs * w.turns * w.k,
        lambda: f"executed {w.calls} tool calls, expected {runs * w.turns * w.k}",
    )
    return ok


async def stream_once(deltas: int, model: str = "scripted") -> int:
    """One run streaming ``deltas`` text deltas; returns the text deltas a subscriber saw."""
    w = Workload(turns=0, k=0, deltas=deltas, model=model)
    agent = w.agent()
    seen = 0

    def listener(event: AgentEvent, signal: AbortSignal) -> None:
        nonlocal seen
        if isinstance(event, MessageUpdate) and event.assistant_message_event.type == "text_delta":
            seen += 1

    agent.subscribe(listener)
    await agent.prompt("go")
    last = agent.state.messages[-1]
    _check(
        last.role == "assistant" and last.text == "x" * deltas,
        lambda: f"bad final message: {last!r:.300}",
    )
    return seen


# --------------------------------------------------------------------------------------
# Measuring


async def _timed(fn: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = await fn()
    return time.perf_counter() - t0, out


async def measure_turn(
    *,
    turns: int = 20,
    k: int = 4,
    reps: int = 15,
    warmups: int = 3,
    model: str = "scripted",
    tool_style: str = "pi",
) -> dict[str, Any]:
    """Per-turn cost: median wall of one T-turn run, divided by T+1."""
    w = Workload(turns=turns, k=k, model=model, tool_style=tool_style)
    for _ in range(warmups):
        await run_once(w)
    walls = [(await _timed(lambda: run_once(w)))[0] for _ in range(reps)]
    med = statistics.median(walls)
    return {
        "turns": turns,
        "k": k,
        "reps": reps,
        "tool_calls_per_run": w.calls,
        "run_ms_median": med * 1e3,
        "us_per_turn": med / (turns + 1) * 1e6,
        "us_per_turn_min": min(walls) / (turns + 1) * 1e6,
    }


async def measure_tool(
    *,
    turns: int = 20,
    reps: int = 15,
    warmups: int = 3,
    model: str = "scripted",
    tool_style: str = "pi",
) -> dict[str, Any]:
    """Per-tool-call cost: (median(K=8) - median(K=1)) / (T*7). ``tool_style="decorated"``
    measures the same tool built by ``pitrio.tool`` from ``async def noop(i: int) -> str``."""
    w1 = Workload(turns=turns, k=1, model=model, tool_style=tool_style)
    w8 = Workload(turns=turns, k=8, model=model, tool_style=tool_style)
    for _ in range(warmups):
        await run_once(w1)
        await run_once(w8)
    walls1: list[float] = []
    walls8: list[float] = []
    for _ in range(reps):
        walls1.append((await _timed(lambda: run_once(w1)))[0])
        walls8.append((await _timed(lambda: run_once(w8)))[0])
    m1, m8 = statistics.median(walls1), statistics.median(walls8)
    per_tool = (m8 - m1) / (turns * 7)
    return {
        "turns": turns,
        "reps": reps,
        "tool_style": tool_style,
        "k1_ms": m1 * 1e3,
        "k8_ms": m8 * 1e3,
        "us_per_tool_call": per_tool * 1e6,
        "us_per_turn_k0_extrapolated": (m1 - per_tool * turns) / (turns + 1) * 1e6,
    }


async def measure_concurrent(
    *, runs: int = 1000, turns: int = 5, k: int = 4, reps: int = 3, model: str = "scripted"
) -> dict[str, Any]:
    """Throughput: ``runs`` runs started at once; runs per second (median of ``reps``)."""
    w = Workload(turns=turns, k=k, model=model)
    await run_many(w, min(20, runs))  # warm-up
    walls: list[float] = []
    res: dict[str, Any] = {}
    for _ in range(reps):
        wall, ok = await _timed(lambda: run_many(w, runs))
        if ok != runs:
            res["error"] = f"only {ok}/{runs} runs completed"
        walls.append(wall)
    med = statistics.median(walls)
    res.update(
        runs=runs,
        turns=turns,
        k=k,
        reps=reps,
        wall_s_median=med,
        runs_per_s=runs / med,
        tool_calls_per_s=runs * turns * k / med,
    )
    return res


async def measure_batch(
    *, k: int = 8, sleep: float = 0.1, reps: int = 5, model: str = "scripted"
) -> dict[str, Any]:
    """Parallel tools: one turn of ``k`` tools sleeping ``sleep`` s each; median wall."""
    w = Workload(turns=1, k=k, sleep=sleep, model=model)
    await run_once(w)  # warm-up
    walls = [(await _timed(lambda: run_once(w)))[0] for _ in range(reps)]
    return {
        "k": k,
        "sleep_ms": sleep * 1e3,
        "reps": reps,
        "batch_wall_ms_median": statistics.median(walls) * 1e3,
    }


async def measure_stream(
    *, deltas: int = 10_000, reps: int = 5, model: str = "scripted"
) -> dict[str, Any]:
    """Streaming: text-delta events a subscriber sees per second."""
    await stream_once(min(1000, deltas), model)  # warm-up
    walls: list[float] = []
    seen = 0
    for _ in range(reps):
        wall, seen = await _timed(lambda: stream_once(deltas, model))
        walls.append(wall)
    med = statistics.median(walls)
    res: dict[str, Any] = {
        "deltas": deltas,
        "reps": reps,
        "delta_events_seen": seen,
        "wall_ms_median": med * 1e3,
        "events_per_s": seen / med,
    }
    if seen != deltas:
        res["error"] = f"subscriber saw {seen} text-delta events for {deltas} deltas"
    return res


async def measure_memory(*, agents: int = 1000, model: str = "scripted") -> dict[str, Any]:
    """Memory per idle agent (tracemalloc), after one small run, and freshly built.

    Each agent keeps a 4-message transcript (user, assistant with one tool call, tool
    result, final assistant). The model, tool and stream function's script are shared,
    as in an application that serves many sessions.
    """
    w = Workload(turns=1, k=1, model=model)
    await run_once(w)  # warm-up: lazy imports and caches are not per-agent costs
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    try:
        kept: list[Agent] = []
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(agents):
            kept.append(await run_once(w))
        gc.collect()
        idle = tracemalloc.get_traced_memory()[0] - before
        _check(
            all(len(a.state.messages) == 4 for a in kept),
            "an idle agent's transcript is not the expected 4 messages",
        )
        del kept
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        fresh = [w.agent() for _ in range(agents)]
        gc.collect()
        empty = tracemalloc.get_traced_memory()[0] - before
        del fresh
    finally:
        if started:
            tracemalloc.stop()
    return {
        "agents": agents,
        "transcript_messages": 4,
        "bytes_per_idle_agent": idle / agents,
        "bytes_per_empty_agent": empty / agents,
    }


def _maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


async def measure(metric: str, a: argparse.Namespace) -> dict[str, Any]:
    """Run one metric with the CLI's settings; returns its result record."""
    reps: int = a.reps
    model: str = a.model
    res: dict[str, Any] = {
        "peer": f"pitrio {pitrio.__version__}",
        "metric": metric,
        "model": model,
    }
    if metric == "turn":
        res.update(
            await measure_turn(
                turns=a.turns, k=a.k, reps=reps or 15, model=model, tool_style=a.tool_style
            )
        )
    elif metric == "tool":
        res.update(
            await measure_tool(
                turns=a.turns, reps=reps or 15, model=model, tool_style=a.tool_style
            )
        )
    elif metric == "concurrent":
        res.update(
            await measure_concurrent(
                runs=a.runs, turns=a.conc_turns, k=a.k, reps=reps or 3, model=model
            )
        )
    elif metric == "batch":
        res.update(await measure_batch(k=a.batch_k, sleep=a.sleep, reps=reps or 5, model=model))
    elif metric == "stream":
        res.update(await measure_stream(deltas=a.deltas, reps=reps or 5, model=model))
    elif metric == "memory":
        res.update(await measure_memory(agents=a.agents, model=model))
    else:  # pragma: no cover  # argparse checks the choices
        raise ValueError(metric)
    res["maxrss_mb_self"] = round(_maxrss_mb(), 1)
    res["python"] = sys.version.split()[0]
    res["trio"] = trio.__version__
    res["pid"] = os.getpid()
    return res


# --------------------------------------------------------------------------------------
# CLI

_HEADLINES: Final = {
    "turn": ("us_per_turn", "µs/turn"),
    "tool": ("us_per_tool_call", "µs/tool call"),
    "concurrent": ("runs_per_s", "runs/s"),
    "batch": ("batch_wall_ms_median", "ms for the batch"),
    "stream": ("events_per_s", "text-delta events/s"),
    "memory": ("bytes_per_idle_agent", "bytes/idle agent"),
}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_loop",
        description="pitrio's agent-loop benchmarks (the peers-bench workloads).",
    )
    p.add_argument("metric", nargs="?", default="all", choices=[*METRICS, "all"])
    p.add_argument("--json", action="store_true", help="one JSON line per metric")
    p.add_argument(
        "--model",
        choices=["scripted", "minimal"],
        default="scripted",
        help="ScriptedModel (default) or the peers' start+done stream function",
    )
    p.add_argument(
        "--tool-style",
        choices=["pi", "decorated"],
        default="pi",
        help="turn, tool: a hand-written Tool (default) or the same one from @pitrio.tool",
    )
    p.add_argument("--turns", type=int, default=DEFAULTS["turns"])
    p.add_argument("--k", type=int, default=DEFAULTS["k"])
    p.add_argument("--runs", type=int, default=DEFAULTS["runs"])
    p.add_argument("--conc-turns", type=int, default=DEFAULTS["conc_turns"])
    p.add_argument("--deltas", type=int, default=DEFAULTS["deltas"])
    p.add_argument("--sleep", type=float, default=DEFAULTS["sleep"])
    p.add_argument("--batch-k", type=int, default=DEFAULTS["batch_k"])
    p.add_argument("--agents", type=int, default=DEFAULTS["agents"])
    p.add_argument("--reps", type=int, default=0, help="0 = the metric's default")
    return p


def _human(res: dict[str, Any]) -> str:
    key, unit = _HEADLINES[res["metric"]]
    value = res[key]
    shown = f"{value:,.1f}" if isinstance(value, float) else str(value)
    details = ", ".join(
        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
        for k, v in res.items()
        if k not in ("peer", "metric", key, "pid")
    )
    return f"{res['metric']:>10}: {shown} {unit}  ({details})"


def main(argv: Sequence[str] | None = None) -> int:
    """The CLI; returns the exit status (1 if any metric reported an error)."""
    a = _parser().parse_args(argv)
    metrics = METRICS if a.metric == "all" else (a.metric,)
    status = 0
    for metric in metrics:
        res = trio.run(measure, metric, a)
        if "error" in res:
            status = 1
        print(json.dumps(res) if a.json else _human(res), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
