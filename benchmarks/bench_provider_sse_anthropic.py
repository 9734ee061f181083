"""SSE throughput of the ``anthropic-messages`` provider against a local server.

A Trio TCP server on 127.0.0.1 answers ``POST /v1/messages?beta=true`` with one
streamed response (chunked transfer encoding, written in 16 KiB pieces): the Messages
API's event sequence for a text answer in N ``text_delta`` events (``message_start``,
``content_block_start``, N ``content_block_delta``, ``content_block_stop``,
``message_delta``, ``message_stop``; named events as the real API sends them). The
client is :func:`pitrio.providers._anthropic_messages.stream_anthropic_messages` on a
real ``httpx.AsyncClient``; the consumer counts the events. Every run checks the final
text and usage.

========== ======================================================== =======================
metric     what                                                     reported
========== ======================================================== =======================
http       N deltas over loopback HTTP, end to end (request to      provider events/s
           ``done``), median of R runs
decode     the same body bytes through the SSE decoder and          events/s
           pi-ai's JSON parse only (no provider)
process    the parsed events through the provider's event handler   events/s
           only (frozen snapshots, no HTTP, no parsing)
========== ======================================================== =======================

Usage::

    python -m benchmarks.bench_provider_sse_anthropic [--deltas N] [--runs R] [--json]

Timings use the real clock; nothing here belongs in a test assertion.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any, cast

import trio

from pitrio import AssistantMessageEvent, Model
from pitrio._stream import AssistantMessageEventStream
from pitrio.providers._anthropic_messages._events import _EventHandler
from pitrio.providers._output import PartialMessage

DELTA = "word "
"""Each delta: one short token, like a real stream."""


def build_events(n: int) -> list[dict[str, Any]]:
    """The Messages API events of one text answer in ``n`` deltas."""
    usage = {
        "input_tokens": 10,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": 1,
    }
    message: dict[str, Any] = {
        "id": "msg_bench",
        "type": "message",
        "role": "assistant",
        "model": "claude-bench",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": message},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    ]
    delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta"}}
    for _ in range(n):
        events.append({**delta, "delta": {"type": "text_delta", "text": DELTA}})
    events += [
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": n},
        },
        {"type": "message_stop"},
    ]
    return events


def build_body(events: Sequence[dict[str, Any]]) -> bytes:
    parts = [
        f"event: {e['type']}\ndata: {json.dumps(e, separators=(',', ':'))}\n\n".encode()
        for e in events
    ]
    return b"".join(parts)


async def measure_http(n: int, runs: int) -> float:
    """End to end over loopback HTTP (the shared harness of ``bench_provider_sse``)."""
    from benchmarks import bench_provider_sse

    return await bench_provider_sse.measure_http("anthropic-messages", n, runs, 16384)


def measure_decode(n: int, runs: int) -> float:
    """SSE decoder + JSON parse only (the shared harness of ``bench_provider_sse``)."""
    from benchmarks import bench_provider_sse

    return bench_provider_sse.measure_decode("anthropic-messages", n, runs, 16384)


class _CountingStream:
    """Stands in for the event stream: counts events and lets them go (keeping every
    partial alive would keep every version of the growing text)."""

    def __init__(self) -> None:
        self.count = 0
        self.last: AssistantMessageEvent | None = None

    def push(self, event: AssistantMessageEvent) -> None:
        self.count += 1
        self.last = event


def _check(message: Any, n: int) -> None:
    if message.text != DELTA * n or message.stop_reason != "stop" or message.usage.output != n:
        msg = f"wrong result: {message.stop_reason} {message.error_message}"
        raise RuntimeError(msg)


def measure_process(n: int, runs: int) -> float:
    """The provider's event handling alone (snapshots and events), per second."""
    events = build_events(n)
    model = Model(id="claude-bench", api="anthropic-messages", provider="anthropic")
    rates = []
    for _ in range(runs):
        sink = _CountingStream()
        output = PartialMessage(model)
        handler = _EventHandler(
            cast("AssistantMessageEventStream", sink), output, model, is_oauth=False, tools=()
        )
        start = time.perf_counter()
        for event in events:
            handler.handle(event)
        rates.append(max(sink.count, 1) / (time.perf_counter() - start))
        _check(output.snapshot(), n)
    return statistics.median(rates)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--deltas", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results = {
        "http": trio.run(measure_http, args.deltas, args.runs),
        "decode": measure_decode(args.deltas, args.runs),
        "process": measure_process(args.deltas, args.runs),
    }
    for metric, value in results.items():
        if args.json:
            print(
                json.dumps({"metric": metric, "deltas": args.deltas, "events_per_s": round(value)})
            )
        else:
            print(f"{metric:8} {value:12,.0f} events/s  ({args.deltas} deltas)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
