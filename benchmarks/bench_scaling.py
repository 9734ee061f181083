"""Scaling of long outputs: time per delta as answers and tool arguments grow.

A long answer or a big ``write`` tool call must cost the same per delta at its end as
at its start. Each workload streams one response through the real provider code of
an API (SSE bytes -> decoder -> JSON -> provider -> events) on an
``httpx.AsyncClient`` whose ``httpx.MockTransport`` serves the body in 16 KiB pieces;
the consumer iterates the events (as the agent loop does, it keeps the latest partial
and reads nothing more), then checks the final message.

========== ============================================================ ==============
workload   what                                                         reported
========== ============================================================ ==============
text       one text answer of N deltas (``"word "`` each)               us per delta
toolargs   one tool call whose arguments (``{"path": ..., "content":    us per delta
           ...}``, code with quotes and newlines) are S bytes of JSON,
           streamed in 20-character deltas
sse        one ``data:`` line of M MB through the SSE decoder alone     MB/s
========== ============================================================ ==============

Times are the process's CPU time (``time.process_time``), not wall time, so that other
work on a shared machine inflates them less. Flat means the largest size costs at most
2x the smallest per delta. A workload that
does not finish within ``--timeout`` seconds is reported as such (the quadratic code
this replaced did not finish 100 KB of arguments in minutes).

Usage::

    python -m benchmarks.bench_scaling [--text 1000,10000,100000]
        [--toolargs 10000,100000,1000000] [--sse-mb 50] [--apis API,...]
        [--timeout SECONDS] [--json]

Timings use the real clock; nothing here belongs in a test assertion.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Final

import httpx
import trio

from benchmarks.bench_provider_sse import (
    BASE_PATHS,
    EVENT_BUILDERS,
    bench_options,
    event_stream_body,
)
from pitrio import Context, Model, StreamOptions, UserMessage
from pitrio.providers import stream_simple
from pitrio.providers._sse import SSEDecoder

APIS: Final = (
    "openai-completions",
    "anthropic-messages",
    "openai-responses",
    "google-generative-ai",
    "mistral-conversations",
    "pi-messages",
    "bedrock-converse-stream",
    "openai-codex-responses",
    "azure-openai-responses",
    "google-vertex",
)
DELTA: Final = "word "
ARG_DELTA: Final = 20  # characters of argument JSON per delta
WRITE_SIZE: Final = 16384
LINE: Final = '    print("hello, world")  # a line of code\n'


class BenchmarkError(RuntimeError):
    """A workload produced the wrong answer."""


# -- bodies -------------------------------------------------------------------------


def tool_arguments(size: int) -> dict[str, str]:
    """Arguments of a ``write`` call whose JSON text is about ``size`` characters."""
    content = (LINE * (size // len(LINE) + 1))[: max(size - 40, 0)]
    return {"path": "src/generated.py", "content": content}


def _pieces(text: str) -> list[str]:
    return [text[i : i + ARG_DELTA] for i in range(0, len(text), ARG_DELTA)]


def completions_tool_events(arguments: str) -> list[tuple[str | None, dict[str, Any]]]:
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "bench-model"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[None, dict[str, Any]]:
        return (None, {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    start = {"index": 0, "id": "call_1", "type": "function"}
    out: list[tuple[str | None, dict[str, Any]]] = [
        chunk({"role": "assistant"}),
        chunk({"tool_calls": [{**start, "function": {"name": "write", "arguments": ""}}]}),
    ]
    out.extend(
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
        for piece in _pieces(arguments)
    )
    out.append(chunk({}, "tool_calls"))
    return out


def anthropic_tool_events(arguments: str) -> list[tuple[str | None, dict[str, Any]]]:
    usage = {"input_tokens": 10, "output_tokens": 1}
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "bench-model"}
    block = {"type": "tool_use", "id": "toolu_1", "name": "write", "input": {}}
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {**message, "content": [], "usage": usage}},
        {"type": "content_block_start", "index": 0, "content_block": block},
    ]
    events.extend(
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": piece},
        }
        for piece in _pieces(arguments)
    )
    events += [
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": usage},
        {"type": "message_stop"},
    ]
    return [(e["type"], e) for e in events]


def responses_tool_events(arguments: str) -> list[tuple[str | None, dict[str, Any]]]:
    item = {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "write"}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**item, "arguments": "", "status": "in_progress"},
        },
    ]
    events.extend(
        {
            "type": "response.function_call_arguments.delta",
            "item_id": "fc_1",
            "output_index": 0,
            "delta": piece,
        }
        for piece in _pieces(arguments)
    )
    done = {**item, "arguments": arguments, "status": "completed"}
    usage = {"input_tokens": 10, "output_tokens": 1, "total_tokens": 11}
    events += [
        {
            "type": "response.function_call_arguments.done",
            "item_id": "fc_1",
            "output_index": 0,
            "arguments": arguments,
        },
        {"type": "response.output_item.done", "output_index": 0, "item": done},
        {
            "type": "response.completed",
            "response": {"id": "resp_1", "status": "completed", "output": [], "usage": usage},
        },
    ]
    return [(e["type"], e) for e in events]


def google_tool_events(arguments: str) -> list[tuple[str | None, dict[str, Any]]]:
    """Gemini sends a function call whole: one chunk holds all ``arguments``."""
    call = {"id": "call_1", "name": "write", "args": json.loads(arguments)}
    candidate = {"content": {"role": "model", "parts": [{"functionCall": call}]}}
    usage = {"promptTokenCount": 10, "candidatesTokenCount": 1, "totalTokenCount": 11}
    chunk = {"candidates": [{**candidate, "finishReason": "STOP"}], "usageMetadata": usage}
    return [(None, chunk)]


def pi_messages_tool_events(arguments: str) -> list[tuple[str | None, dict[str, Any]]]:
    """A pi-messages backend streams the arguments' JSON, then the whole call."""
    usage = {"input": 10, "output": 1, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 11}
    call = {"type": "toolCall", "id": "call_1", "name": "write", "arguments": json.loads(arguments)}
    out: list[tuple[str | None, dict[str, Any]]] = [
        (None, {"type": "start"}),
        (None, {"type": "toolcall_start", "contentIndex": 0, "id": "call_1", "toolName": "write"}),
    ]
    out.extend(
        (None, {"type": "toolcall_delta", "contentIndex": 0, "delta": piece})
        for piece in _pieces(arguments)
    )
    out.append((None, {"type": "toolcall_end", "contentIndex": 0, "toolCall": call}))
    out.append((None, {"type": "done", "reason": "toolUse", "usage": usage}))
    return out
def bedrock_tool_events(arguments: str) -> list[tuple[str | None, dict[str, Any]]]:
    start = {"toolUse": {"toolUseId": "tooluse_1", "name": "write"}}
    return [
        ("messageStart", {"role": "assistant"}),
        ("contentBlockStart", {"contentBlockIndex": 0, "start": start}),
        *(
            ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"toolUse": {"input": piece}}})
            for piece in _pieces(arguments)
        ),
        ("contentBlockStop", {"contentBlockIndex": 0}),
        ("messageStop", {"stopReason": "tool_use"}),
    ]


TOOL_EVENT_BUILDERS: Final[dict[str, Callable[[str], list[tuple[str | None, dict[str, Any]]]]]] = {
    "openai-completions": completions_tool_events,
    "anthropic-messages": anthropic_tool_events,
    "openai-responses": responses_tool_events,
    "google-generative-ai": google_tool_events,
    "mistral-conversations": completions_tool_events,  # the same chunk shape
    "pi-messages": pi_messages_tool_events,
    "bedrock-converse-stream": bedrock_tool_events,
    "openai-codex-responses": responses_tool_events,
    "azure-openai-responses": responses_tool_events,
    "google-vertex": google_tool_events,
}


def sse_body(api: str, events: list[tuple[str | None, dict[str, Any]]]) -> bytes:
    if api == "bedrock-converse-stream":
        return event_stream_body(events)
    parts = []
    for name, data in events:
        head = f"event: {name}\n" if name else ""
        parts.append(f"{head}data: {json.dumps(data, separators=(',', ':'))}\n\n")
    if api == "openai-completions":
        parts.append("data: [DONE]\n\n")
    return "".join(parts).encode()


# -- running one response -------------------------------------------------------------


class _Body(httpx.AsyncByteStream):
    def __init__(self, body: bytes) -> None:
        self._body = body

    async def __aiter__(self) -> AsyncIterator[bytes]:
        body = self._body
        for start in range(0, len(body), WRITE_SIZE):
            # A socket read checkpoints: the consumer takes the events of each piece
            # before the next one is read (without it the whole response would queue).
            await trio.lowlevel.checkpoint()
            yield body[start : start + WRITE_SIZE]


async def stream_once(
    api: str, body: bytes, keep: list[Any] | None = None, options: StreamOptions | None = None
) -> tuple[Any, int, float]:
    """Stream ``body`` through ``api``'s provider; (message, events, seconds). The
    events are appended to ``keep`` when it is given."""

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, stream=_Body(body)
        )

    model = Model(
        id="bench-model", api=api, provider="bench", base_url=f"http://bench{BASE_PATHS[api]}"
    )
    context = Context(messages=[UserMessage(content="go")])
    transport = httpx.MockTransport(answer)
    async with httpx.AsyncClient(transport=transport) as client:
        count = 0
        latest = None
        start = time.process_time()
        defaults = bench_options(api)
        if options is None:
            options = defaults
        else:  # the caller's options, with the benchmark's key (and Codex's transport)
            options.api_key = defaults.api_key
            options.extra = {**defaults.extra, **options.extra}
        stream = stream_simple(client, model, context, options)
        async with stream:
            async for event in stream:
                count += 1
                latest = event
                if keep is not None:
                    keep.append(event)
            message = await stream.result()
        elapsed = time.process_time() - start
    del latest
    return message, count, elapsed


async def measure_text(api: str, deltas: int, runs: int = 1) -> float:
    """Microseconds per delta of a text answer of ``deltas`` deltas (median of runs)."""
    body = sse_body(api, EVENT_BUILDERS[api](deltas))
    times = []
    for _ in range(runs):
        message, _, elapsed = await stream_once(api, body)
        if message.stop_reason != "stop" or message.text != DELTA * deltas:
            msg = f"{api}: bad text answer: {message.stop_reason} {message.error_message}"
            raise BenchmarkError(msg)
        times.append(elapsed)
    return statistics.median(times) / deltas * 1e6


async def measure_toolargs(api: str, size: int, runs: int = 1) -> tuple[float, int]:
    """(microseconds per delta, deltas) of one tool call with ``size`` bytes of
    arguments (median of runs)."""
    arguments = tool_arguments(size)
    text = json.dumps(arguments)
    body = sse_body(api, TOOL_EVENT_BUILDERS[api](text))
    times = []
    for _ in range(runs):
        message, _, elapsed = await stream_once(api, body)
        calls = message.tool_calls
        if message.stop_reason != "toolUse" or len(calls) != 1 or calls[0].arguments != arguments:
            msg = f"{api}: bad tool call: {message.stop_reason} {message.error_message}"
            raise BenchmarkError(msg)
        times.append(elapsed)
    deltas = len(_pieces(text))
    return statistics.median(times) / deltas * 1e6, deltas


def measure_sse(megabytes: float, runs: int = 1) -> float:
    """MB/s of one ``data:`` line of ``megabytes`` MB through the SSE decoder (median)."""
    size = int(megabytes * 1_000_000)
    body = b"data: " + b"x" * size + b"\n\n"
    rates = []
    for _ in range(runs):
        decoder = SSEDecoder(max_event_size=size + 1024)
        start = time.process_time()
        events = []
        for offset in range(0, len(body), WRITE_SIZE):
            events.extend(decoder.feed(body[offset : offset + WRITE_SIZE]))
        events.extend(decoder.flush())
        elapsed = time.process_time() - start
        if len(events) != 1 or len(events[0].data) != size:
            msg = "sse: the line did not come out whole"
            raise BenchmarkError(msg)
        rates.append(megabytes / elapsed)
    return statistics.median(rates)


# -- the command line ---------------------------------------------------------------


def _sizes(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part]


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []

    def report(row: dict[str, Any]) -> None:
        results.append(row)
        if args.json:
            print(json.dumps(row), flush=True)
        else:
            value = "did not finish" if row["value"] is None else f"{row['value']:.1f}"
            size = f"{row['size']:,} {row['size_unit']}"
            print(f"{row['workload']:9} {row['api']:19} {size:>18}: {value} {row['unit']}")
            sys.stdout.flush()

    for api in args.apis:
        await measure_text(api, 200)  # warm up: imports, first-call costs
        await measure_toolargs(api, 2000)
        for deltas in _sizes(args.text):
            value: float | None = None
            with trio.move_on_after(args.timeout):
                value = await measure_text(api, deltas, args.runs)
            row = {"workload": "text", "api": api, "size": deltas, "size_unit": "deltas"}
            report({**row, "value": value, "unit": "us/delta"})
        for size in _sizes(args.toolargs):
            value = None
            with trio.move_on_after(args.timeout):
                value, _ = await measure_toolargs(api, size, args.runs)
            row = {"workload": "toolargs", "api": api, "size": size, "size_unit": "bytes"}
            report({**row, "value": value, "unit": "us/delta"})
    if args.sse_mb:
        report(
            {
                "workload": "sse",
                "api": "-",
                "size": args.sse_mb,
                "size_unit": "MB line",
                "value": measure_sse(args.sse_mb, args.runs),
                "unit": "MB/s",
            }
        )
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--text", default="1000,10000,100000", help="deltas per text answer")
    parser.add_argument(
        "--toolargs", default="10000,100000,1000000", help="bytes of tool-argument JSON"
    )
    parser.add_argument("--sse-mb", type=float, default=50, help="MB in one SSE line (0: skip)")
    parser.add_argument("--apis", type=lambda s: s.split(","), default=list(APIS))
    parser.add_argument("--runs", type=int, default=3, help="median of this many runs")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per workload")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    for api in args.apis:
        if api not in APIS:
            parser.error(f"unknown API {api!r}; expected one of {', '.join(APIS)}")
    trio.run(run, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
