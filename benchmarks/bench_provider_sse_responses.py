"""SSE throughput of the ``openai-responses`` provider against a local server.

A Trio TCP server on 127.0.0.1 answers ``POST /v1/responses`` with one streamed response
(chunked transfer encoding, written in 16 KiB pieces): a message item whose text
arrives as N ``response.output_text.delta`` events (the real API's event shape,
``sequence_number``/``item_id``/``logprobs`` included), then ``response.completed``.
The client is :func:`pitrio.providers._openai_responses.stream_openai_responses` on
a real ``httpx.AsyncClient``; the consumer counts the events. Every run checks the
final text.

========== ======================================================== =======================
metric     what                                                     reported
========== ======================================================== =======================
http       N deltas over loopback HTTP, end to end (request to      provider events/s
           ``done``), median of R runs
decode     the same body bytes through the SSE decoder and          events/s
           ``json.loads`` only (no provider)
process    the decoded events through :class:`ResponsesEventProcessor`  events/s
           only (snapshots, no HTTP, no parsing)
========== ======================================================== =======================

Usage::

    python -m benchmarks.bench_provider_sse_responses [--deltas N] [--runs R] [--json]

Timings use the real clock; nothing here belongs in a test assertion.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import trio

from pitrio import AssistantMessageEvent, Model
from pitrio.providers._openai_responses._events import ResponsesEventProcessor
from pitrio.providers._output import PartialMessage

DELTA = "word "
"""Each delta: one short token, like a real stream."""


def build_events(n: int) -> list[dict[str, Any]]:
    """The Responses events of one text answer in ``n`` deltas."""
    item = {
        "id": "msg_b",
        "type": "message",
        "status": "in_progress",
        "role": "assistant",
        "content": [],
    }
    text = DELTA * n
    events: list[dict[str, Any]] = [
        {
            "type": "response.created",
            "sequence_number": 0,
            "response": {"id": "resp_b", "status": "in_progress", "output": []},
        },
        {
            "type": "response.output_item.added",
            "sequence_number": 1,
            "output_index": 0,
            "item": item,
        },
    ]
    for i in range(n):
        events.append(
            {
                "type": "response.output_text.delta",
                "sequence_number": i + 2,
                "item_id": "msg_b",
                "output_index": 0,
                "content_index": 0,
                "delta": DELTA,
                "logprobs": [],
            }
        )
    done = {
        **item,
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
    events.append(
        {
            "type": "response.output_item.done",
            "sequence_number": n + 2,
            "output_index": 0,
            "item": done,
        }
    )
    usage = {"input_tokens": 10, "output_tokens": n, "total_tokens": n + 10}
    events.append(
        {
            "type": "response.completed",
            "sequence_number": n + 3,
            "response": {"id": "resp_b", "status": "completed", "output": [], "usage": usage},
        }
    )
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

    return await bench_provider_sse.measure_http("openai-responses", n, runs, 16384)


def measure_decode(n: int, runs: int) -> float:
    """SSE decoder + JSON parse only (the shared harness of ``bench_provider_sse``)."""
    from benchmarks import bench_provider_sse

    return bench_provider_sse.measure_decode("openai-responses", n, runs, 16384)


def measure_process(n: int, runs: int) -> float:
    events = build_events(n)
    model = Model(id="gpt-bench", api="openai-responses", provider="openai")
    rates = []
    for _ in range(runs):
        count = 0

        def push(event: AssistantMessageEvent) -> None:
            # Like a consumer that handles each event and lets it go (keeping every
            # partial alive would keep every version of the growing text).
            nonlocal count
            count += 1

        processor = ResponsesEventProcessor(PartialMessage(model), push, model)
        start = time.perf_counter()
        for event in events:
            processor.handle(event)
        rates.append(count / (time.perf_counter() - start))
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
