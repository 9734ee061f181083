"""The workloads the peers' scripts do not have, each printing one JSON line.

Run by the harness (``python -m benchmarks``) in a fresh subprocess per measurement::

    python -m benchmarks._workloads abort [--reps N]
    python -m benchmarks._workloads transcript [--reps N] [--lengths 10,100,1000]
    python -m benchmarks._workloads import [--reps N]
    python -m benchmarks._workloads sse --client pitrio|openai [--deltas N] [--reps N]

========== ================================================================ ==================
metric     workload                                                         reported
========== ================================================================ ==================
abort      ``agent.abort()`` to the run settled (``wait_for_idle`` returns), settle p50/p99, ms
           for a tool that watches its signal, a tool that ignores it (Trio
           preempts it), and a provider stream mid-response
transcript one text turn after 10 / 100 / 1,000 prior messages                µs per turn
import     ``from pitrio import Agent`` (timed inside a fresh interpreter;   ms
           ``import pitrio`` alone loads nothing) and the whole
           ``python -m pitrio --help`` process
sse        N text deltas of a chat-completions stream over loopback HTTP,     deltas/s
           parsed by pitrio's provider or by the official ``openai`` SDK
========== ================================================================ ==================

Timings use the real clock; nothing here belongs in a test assertion.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

import trio

from benchmarks.bench_loop import MODEL, BenchmarkError, Workload
from benchmarks.bench_provider_sse import DELTA, _pieces, _serve, build_body

METRICS: Final = ("abort", "transcript", "import", "sse")


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


# --------------------------------------------------------------------------------------
# abort settle


async def _settle_once(case: str) -> float:
    """One run aborted mid-flight; returns seconds from ``abort()`` to the run settled."""
    from pitrio import (
        AbortSignal,
        Agent,
        AgentEvent,
        MessageUpdate,
        Tool,
        ToolResult,
        text_result,
    )
    from pitrio.testing import ScriptedModel, ScriptedResponse

    ready = trio.Event()

    async def cooperative(
        tool_call_id: str, params: Any, signal: AbortSignal, on_update: Callable[[ToolResult], None]
    ) -> ToolResult:
        ready.set()
        stop = trio.Event()
        signal.add_callback(stop.set)
        await stop.wait()
        return text_result("stopped")

    async def ignoring(
        tool_call_id: str, params: Any, signal: AbortSignal, on_update: Callable[[ToolResult], None]
    ) -> ToolResult:
        ready.set()
        await trio.sleep_forever()  # never looks at the signal
        raise AssertionError("unreachable")

    if case == "provider":
        model = ScriptedModel(
            lambda context: ScriptedResponse.text("x" * 20, chunk_size=1, delay=60),
            record_requests=False,
        )
        tools: list[Tool] = []
    else:
        model = ScriptedModel(
            lambda context: ScriptedResponse.tool_calls(("c0", "wait", {"i": 0})),
            record_requests=False,
        )
        execute = cooperative if case == "tool_cooperative" else ignoring
        tools = [
            Tool(
                name="wait",
                description="Waits.",
                parameters={"type": "object", "properties": {"i": {"type": "integer"}}},
                execute=execute,
            )
        ]
    agent = Agent(system_prompt="bench", model=MODEL, tools=tools, stream_fn=model)

    def listener(event: AgentEvent, signal: AbortSignal) -> None:
        if isinstance(event, MessageUpdate) and event.assistant_message_event.type == "text_delta":
            ready.set()

    agent.subscribe(listener)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(agent.prompt, "go")
        with trio.fail_after(10):
            await ready.wait()
        start = time.perf_counter()
        agent.abort()
        await agent.wait_for_idle()
        settled = time.perf_counter() - start
    last = agent.state.messages[-1]
    if case == "provider":
        ok = last.role == "assistant" and last.stop_reason == "aborted"
    else:
        ok = any(m.role == "toolResult" for m in agent.state.messages)
    if not ok:
        raise BenchmarkError(f"{case}: the aborted run did not end as expected: {last!r:.300}")
    return settled


async def measure_abort(*, reps: int = 200) -> dict[str, Any]:
    """Abort settle time, p50 and p99 in ms, per case."""
    res: dict[str, Any] = {"reps": reps}
    for case in ("tool_cooperative", "tool_ignores_signal", "provider"):
        await _settle_once(case)  # warm-up
        walls = [await _settle_once(case) for _ in range(reps)]
        res[f"{case}_p50_ms"] = _percentile(walls, 0.5) * 1e3
        res[f"{case}_p99_ms"] = _percentile(walls, 0.99) * 1e3
    res["p99_ms_max"] = max(res[k] for k in list(res) if k.endswith("_p99_ms"))
    return res


# --------------------------------------------------------------------------------------
# transcript length


async def measure_transcript(
    *, lengths: Sequence[int] = (10, 100, 1000), reps: int = 30
) -> dict[str, Any]:
    """One text turn on top of N prior messages: median µs per turn, per N."""
    from pitrio import AgentMessage, AssistantMessage, TextContent, UserMessage

    res: dict[str, Any] = {"reps": reps, "lengths": list(lengths)}
    w = Workload(turns=0, k=0, model="minimal")
    for n in lengths:
        prior: list[AgentMessage] = []
        for i in range(n):
            if i % 2 == 0:
                prior.append(UserMessage(content=f"question {i}"))
            else:
                prior.append(
                    AssistantMessage(
                        content=(TextContent(text=f"answer {i}"),),
                        api=MODEL.api,
                        provider=MODEL.provider,
                        model=MODEL.id,
                        stop_reason="stop",
                    )
                )
        agent = w.agent()
        walls: list[float] = []
        for rep in range(reps + 3):
            agent.state.messages = list(prior)
            start = time.perf_counter()
            await agent.prompt("go")
            wall = time.perf_counter() - start
            if len(agent.state.messages) != n + 2 or agent.state.messages[-1].text != "done":
                raise BenchmarkError(f"transcript {n}: bad run: {agent.state.messages[-1]!r:.300}")
            if rep >= 3:  # three warm-ups
                walls.append(wall)
        res[f"us_per_turn_{n}"] = statistics.median(walls) * 1e6
    return res


# --------------------------------------------------------------------------------------
# import time

_IMPORT_CODE: Final = (
    "import time; t = time.perf_counter(); from pitrio import Agent; print(time.perf_counter() - t)"
)


def measure_import(*, reps: int = 10) -> dict[str, Any]:
    """``from pitrio import Agent`` (the kernel: a bare ``import pitrio`` loads nothing)
    inside fresh interpreters, and whole ``--help`` processes (ms)."""
    imports: list[float] = []
    helps: list[float] = []
    bare: list[float] = []
    for _ in range(reps + 1):  # the first of each warms the disk cache and .pyc files
        out = subprocess.run(
            [sys.executable, "-c", _IMPORT_CODE], capture_output=True, text=True, check=True
        )
        imports.append(float(out.stdout.strip()))
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "pitrio", "--help"], capture_output=True, text=True
        )
        helps.append(time.perf_counter() - start)
        if done.returncode != 0 or "usage" not in done.stdout.lower():
            raise BenchmarkError(f"python -m pitrio --help failed: {done.stderr[-500:]}")
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        bare.append(time.perf_counter() - start)
    return {
        "reps": reps,
        "import_ms": statistics.median(imports[1:]) * 1e3,
        "help_process_ms": statistics.median(helps[1:]) * 1e3,
        "bare_python_process_ms": statistics.median(bare[1:]) * 1e3,
    }


# --------------------------------------------------------------------------------------
# provider SSE: pitrio's openai-completions provider against the official openai SDK


async def _sse_pitrio(deltas: int, reps: int, write_size: int) -> list[float]:
    import httpx

    from pitrio import Context, Model, StreamOptions, UserMessage
    from pitrio.providers import stream_simple

    pieces = _pieces(build_body("openai-completions", deltas), write_size)
    walls: list[float] = []
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(
                trio.serve_tcp, functools.partial(_serve, pieces=pieces), 0, host="127.0.0.1"
            )
        )
        port = listeners[0].socket.getsockname()[1]
        model = Model(
            id="bench-model",
            api="openai-completions",
            provider="bench",
            base_url=f"http://127.0.0.1:{port}/v1",
        )
        context = Context(messages=[UserMessage(content="go")])
        async with httpx.AsyncClient(timeout=None, trust_env=False) as client:
            for _ in range(reps + 1):  # the first run warms up
                start = time.perf_counter()
                stream = stream_simple(client, model, context, StreamOptions(api_key="k"))
                async with stream:
                    async for _event in stream:
                        pass
                    message = await stream.result()
                walls.append(time.perf_counter() - start)
                if message.stop_reason != "stop" or message.text != DELTA * deltas:
                    raise BenchmarkError(f"pitrio sse: bad answer {message.error_message}")
        nursery.cancel_scope.cancel()
    return walls[1:]


async def _sse_openai(deltas: int, reps: int, write_size: int) -> list[float]:
    import asyncio

    import openai

    pieces = _pieces(build_body("openai-completions", deltas), write_size)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        await reader.readexactly(length)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
        )
        for piece in pieces:
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    walls: list[float] = []
    async with openai.AsyncOpenAI(
        api_key="k", base_url=f"http://127.0.0.1:{port}/v1", max_retries=0
    ) as client:
        for _ in range(reps + 1):
            start = time.perf_counter()
            stream = await client.chat.completions.create(
                model="bench-model", messages=[{"role": "user", "content": "go"}], stream=True
            )
            text: list[str] = []
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    text.append(chunk.choices[0].delta.content)
            walls.append(time.perf_counter() - start)
            if "".join(text) != DELTA * deltas:
                raise BenchmarkError("openai sse: bad answer")
    server.close()
    await server.wait_closed()
    return walls[1:]


def measure_sse(
    *, client: str = "pitrio", deltas: int = 5000, reps: int = 5, write_size: int = 16384
) -> dict[str, Any]:
    """Deltas per second of one streamed answer over loopback, end to end (median)."""
    if client == "pitrio":
        walls = trio.run(_sse_pitrio, deltas, reps, write_size)
    else:
        import asyncio

        walls = asyncio.run(_sse_openai(deltas, reps, write_size))
    med = statistics.median(walls)
    return {
        "client": client,
        "deltas": deltas,
        "reps": reps,
        "write_size": write_size,
        "response_ms_median": med * 1e3,
        "deltas_per_s": deltas / med,
    }


# --------------------------------------------------------------------------------------
# CLI


def main(argv: Sequence[str] | None = None) -> int:
    """Run one metric and print its JSON line."""
    p = argparse.ArgumentParser(prog="python -m benchmarks._workloads")
    p.add_argument("metric", choices=METRICS)
    p.add_argument("--reps", type=int, default=0, help="0 = the metric's default")
    p.add_argument("--lengths", default="10,100,1000")
    p.add_argument("--client", choices=["pitrio", "openai"], default="pitrio")
    p.add_argument("--deltas", type=int, default=5000)
    a = p.parse_args(argv)
    res: dict[str, Any] = {"metric": a.metric}
    if a.metric == "abort":
        res.update(trio.run(functools.partial(measure_abort, reps=a.reps or 200)))
    elif a.metric == "transcript":
        lengths = [int(x) for x in a.lengths.split(",")]
        res.update(
            trio.run(functools.partial(measure_transcript, lengths=lengths, reps=a.reps or 30))
        )
    elif a.metric == "import":
        res.update(measure_import(reps=a.reps or 10))
    else:
        res.update(measure_sse(client=a.client, deltas=a.deltas, reps=a.reps or 5))
    print(json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
