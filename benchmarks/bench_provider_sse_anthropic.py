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
import functools
import json
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any, cast

import httpx
import trio

from pitrio import AssistantMessageEvent, Context, Model, StreamOptions, UserMessage
from pitrio._stream import AssistantMessageEventStream
from pitrio.providers._anthropic_messages import (
    _EventHandler,
    stream_anthropic_messages,
)
from pitrio.providers._common import PartialMessage, parse_json_with_repair
from pitrio.providers._sse import SSEDecoder

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


def _check(message: Any, n: int) -> None:
    if message.text != DELTA * n or message.stop_reason != "stop" or message.usage.output != n:
        msg = f"wrong result: {message.stop_reason} {message.error_message}"
        raise RuntimeError(msg)


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
            id="claude-bench",
            api="anthropic-messages",
            provider="anthropic",
            base_url=f"http://127.0.0.1:{port}",
        )
        context = Context(messages=[UserMessage(content="go")])
        async with httpx.AsyncClient(timeout=None) as client:
            for _ in range(runs + 1):  # the first run warms up the connection
                start = time.perf_counter()
                count = 0
                stream = stream_anthropic_messages(
                    client, model, context, StreamOptions(api_key="k")
                )
                async with stream:
                    async for _event in stream:
                        count += 1
                    message = await stream.result()
                elapsed = time.perf_counter() - start
                _check(message, n)
                rates.append(count / elapsed)
        nursery.cancel_scope.cancel()
    return statistics.median(rates[1:])


def measure_decode(n: int, runs: int) -> float:
    """SSE decoding plus pi-ai's JSON parse of every event, per second."""
    body = build_body(build_events(n))
    chunks = [body[i : i + 16384] for i in range(0, len(body), 16384)]
    rates = []
    for _ in range(runs):
        start = time.perf_counter()
        decoder = SSEDecoder(dispatch_at_eof=True)
        count = 0
        for chunk in chunks:
            for sse in decoder.feed(chunk):
                parse_json_with_repair(sse.data)
                count += 1
        rates.append(count / (time.perf_counter() - start))
    return statistics.median(rates)


class _CountingStream:
    """Stands in for the event stream: counts events and lets them go (keeping every
    partial alive would keep every version of the growing text)."""

    def __init__(self) -> None:
        self.count = 0
        self.last: AssistantMessageEvent | None = None

    def push(self, event: AssistantMessageEvent) -> None:
        self.count += 1
        self.last = event


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
