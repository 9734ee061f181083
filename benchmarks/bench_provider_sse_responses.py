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
import functools
import json
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import httpx
import trio

from pitrio import AssistantMessageEvent, Context, Model, StreamOptions, UserMessage
from pitrio.providers._common import PartialMessage
from pitrio.providers._openai_responses import ResponsesEventProcessor, stream_openai_responses
from pitrio.providers._sse import SSEDecoder

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


def _chunked(body: bytes, size: int = 16384) -> list[bytes]:
    out = []
    for i in range(0, len(body), size):
        piece = body[i : i + size]
        out.append(b"%x\r\n%s\r\n" % (len(piece), piece))
    out.append(b"0\r\n\r\n")
    return out


async def _serve(stream: trio.SocketStream, body_chunks: list[bytes]) -> None:
    buffer = b""
    try:
        while True:
            while b"\r\n\r\n" not in buffer:
                data = await stream.receive_some(65536)
                if not data:
                    return
                buffer += data
            head, _, buffer = buffer.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            while len(buffer) < length:
                buffer += await stream.receive_some(65536)
            buffer = buffer[length:]
            await stream.send_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"transfer-encoding: chunked\r\n\r\n"
            )
            for chunk in body_chunks:
                await stream.send_all(chunk)
    except trio.BrokenResourceError:
        return


async def measure_http(n: int, runs: int) -> float:
    """Median provider events per second, request to ``done``, over loopback."""
    body_chunks = _chunked(build_body(build_events(n)))
    rates = []
    async with trio.open_nursery() as nursery:

        async def handler(stream: trio.SocketStream) -> None:
            await _serve(stream, body_chunks)

        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, handler, 0, host="127.0.0.1")
        )
        port = listeners[0].socket.getsockname()[1]
        model = Model(
            id="gpt-bench",
            api="openai-responses",
            provider="openai",
            base_url=f"http://127.0.0.1:{port}/v1",
        )
        context = Context(messages=[UserMessage(content="go")])
        async with httpx.AsyncClient(timeout=None) as client:
            for _ in range(runs + 1):  # the first run warms up the connection
                start = time.perf_counter()
                count = 0
                stream = stream_openai_responses(client, model, context, StreamOptions(api_key="k"))
                async with stream:
                    async for _event in stream:
                        count += 1
                    message = await stream.result()
                elapsed = time.perf_counter() - start
                if message.text != DELTA * n or message.stop_reason != "stop":
                    msg = f"wrong result: {message.stop_reason} {message.error_message}"
                    raise RuntimeError(msg)
                rates.append(count / elapsed)
        nursery.cancel_scope.cancel()
    return statistics.median(rates[1:])


def measure_decode(n: int, runs: int) -> float:
    body = build_body(build_events(n))
    chunks = [body[i : i + 16384] for i in range(0, len(body), 16384)]
    rates = []
    parse = json.JSONDecoder().decode
    for _ in range(runs):
        start = time.perf_counter()
        decoder = SSEDecoder()
        count = 0
        for chunk in chunks:
            for sse in decoder.feed(chunk):
                parse(sse.data)
                count += 1
        rates.append(count / (time.perf_counter() - start))
    return statistics.median(rates)


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
