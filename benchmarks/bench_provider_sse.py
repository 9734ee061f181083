"""SSE throughput of a provider API against a local server (events per second).

A Trio TCP server on 127.0.0.1 answers the provider's request with one streamed text
answer of N deltas in the API's own event format (chunked transfer encoding, written
in ``--write-size`` pieces: 16 KiB by default, 0 for one write per SSE event, as a
server flushing every token does). The client is the API's stream function from the
provider registry on a real ``httpx.AsyncClient``; the consumer counts the events.
Every run checks the final text.

========== ======================================================== =======================
metric     what                                                     reported
========== ======================================================== =======================
http       N deltas over loopback HTTP, end to end (request to the  provider events/s
           terminal event), median of R runs
decode     the same body bytes through the SSE decoder and the      SSE events/s
           JSON parse only (no provider, no HTTP)
websocket  openai-codex-responses only: the same events as          provider events/s
           WebSocket messages from a local ``trio-websocket``
           server, end to end, median of R runs
========== ======================================================== =======================

Usage::

    python -m benchmarks.bench_provider_sse openai-completions [--deltas N] [--runs R]
        [--write-size BYTES] [--json]

The API is one of ``EVENT_BUILDERS`` (``openai-completions``, ``anthropic-messages``,
``openai-responses``, ``google-generative-ai``, ``azure-openai-responses``, ``google-vertex``,
``mistral-conversations``, ``pi-messages``, ``openai-codex-responses`` or
``bedrock-converse-stream``: its body is binary AWS event-stream messages, decoded by
botocore's parser; ``--write-size 0`` is not for it).
Timings use the real clock; nothing here belongs in a test assertion.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

import httpx
import trio

from pitrio import Context, Model, StreamOptions, UserMessage
from pitrio.providers import stream_simple
from pitrio.providers._json import json_parse
from pitrio.providers._sse import SSEDecoder

DELTA: Final = "word "
"""Each delta: one short token, like a real stream."""

BASE_PATHS: Final = {
    "openai-completions": "/v1",
    "anthropic-messages": "",
    "openai-responses": "/v1",
    "google-generative-ai": "/v1beta",
    "mistral-conversations": "",
    "pi-messages": "/v1",
    "bedrock-converse-stream": "",
    "openai-codex-responses": "/backend-api",
    "azure-openai-responses": "/openai/v1",
    "google-vertex": "/v1",
}

# A ChatGPT access token for openai-codex-responses (a JWT with an account id).
_CODEX_TOKEN: Final = (
    "e30.eyJodHRwczovL2FwaS5vcGVuYWkuY29tL2F1dGgiOnsiY2hhdGdwdF9hY2NvdW50X2lkIjoiYWNjdCJ9fQ.sig"
)


def bench_options(api: str) -> StreamOptions:
    """The options of a benchmark request: a key the API accepts (over SSE for Codex,
    whose default transport tries a WebSocket first)."""
    if api == "openai-codex-responses":
        return StreamOptions(api_key=_CODEX_TOKEN, extra={"transport": "sse"})
    return StreamOptions(api_key="k")


def completions_events(n: int) -> list[tuple[str | None, dict[str, Any]]]:
    """Chat-completions chunks of one text answer in ``n`` deltas (llama.cpp-style)."""
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "bench-model"}
    out: list[tuple[str | None, dict[str, Any]]] = [
        (None, {**base, "choices": [{"index": 0, "delta": {"role": "assistant"}}]})
    ]
    delta = {**base, "choices": [{"index": 0, "delta": {"content": DELTA}, "finish_reason": None}]}
    out.extend((None, delta) for _ in range(n))
    out.append((None, {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    usage = {"prompt_tokens": 10, "completion_tokens": n, "total_tokens": 10 + n}
    out.append((None, {**base, "choices": [], "usage": usage}))
    return out


def _anthropic_events(n: int) -> list[tuple[str | None, dict[str, Any]]]:
    from benchmarks.bench_provider_sse_anthropic import build_events

    return [(e["type"], e) for e in build_events(n)]


def _responses_events(n: int) -> list[tuple[str | None, dict[str, Any]]]:
    from benchmarks.bench_provider_sse_responses import build_events

    return [(None, e) for e in build_events(n)]


def google_events(n: int) -> list[tuple[str | None, dict[str, Any]]]:
    """``streamGenerateContent`` chunks of one text answer in ``n`` deltas."""

    def chunk(text: str) -> dict[str, Any]:
        content = {"role": "model", "parts": [{"text": text}]}
        return {"candidates": [{"content": content, "index": 0}], "responseId": "r1"}

    out: list[tuple[str | None, dict[str, Any]]] = [(None, chunk(DELTA)) for _ in range(n - 1)]
    usage = {"promptTokenCount": 10, "candidatesTokenCount": n, "totalTokenCount": 10 + n}
    last = chunk(DELTA)
    last["candidates"][0]["finishReason"] = "STOP"
    out.append((None, {**last, "usageMetadata": usage}))
    return out


def pi_messages_events(n: int) -> list[tuple[str | None, dict[str, Any]]]:
    """Pi's own events (a pi-messages backend) of one text answer in ``n`` deltas."""
    usage = {"input": 10, "output": n, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 10 + n}
    out: list[tuple[str | None, dict[str, Any]]] = [
        (None, {"type": "start"}),
        (None, {"type": "text_start", "contentIndex": 0}),
    ]
    out.extend((None, {"type": "text_delta", "contentIndex": 0, "delta": DELTA}) for _ in range(n))
    out.append((None, {"type": "text_end", "contentIndex": 0, "content": DELTA * n}))
    out.append((None, {"type": "done", "reason": "stop", "usage": usage}))
    return out
def bedrock_events(n: int) -> list[tuple[str | None, dict[str, Any]]]:
    """``ConverseStream`` messages (event type, payload) of one text answer in ``n`` deltas."""
    delta = {"contentBlockIndex": 0, "delta": {"text": DELTA}}
    usage = {"inputTokens": 10, "outputTokens": n, "totalTokens": 10 + n}
    return [
        ("messageStart", {"role": "assistant"}),
        *(("contentBlockDelta", delta) for _ in range(n)),
        ("contentBlockStop", {"contentBlockIndex": 0}),
        ("messageStop", {"stopReason": "end_turn"}),
        ("metadata", {"usage": usage, "metrics": {"latencyMs": 1}}),
    ]


def event_stream_body(events: list[tuple[str | None, dict[str, Any]]]) -> bytes:
    """The events as binary AWS event-stream messages (Bedrock's framing)."""
    from pitrio.testing._provider_server import _event_stream_message

    return b"".join(
        _event_stream_message(
            {
                ":event-type": name or "",
                ":content-type": "application/json",
                ":message-type": "event",
            },
            json.dumps(data, separators=(",", ":")).encode(),
        )
        for name, data in events
    )


EVENT_BUILDERS: Final[dict[str, Callable[[int], list[tuple[str | None, dict[str, Any]]]]]] = {
    "openai-completions": completions_events,
    "anthropic-messages": _anthropic_events,
    "openai-responses": _responses_events,
    "google-generative-ai": google_events,
    "mistral-conversations": completions_events,  # Mistral's chunks have the same shape
    "pi-messages": pi_messages_events,
    "bedrock-converse-stream": bedrock_events,
    "openai-codex-responses": _responses_events,
    # the same wire formats as openai-responses and google-generative-ai
    "azure-openai-responses": _responses_events,
    "google-vertex": google_events,
}


def build_body(api: str, n: int) -> bytes:
    """The whole SSE body of one answer (Bedrock: its event stream)."""
    if api == "bedrock-converse-stream":
        return event_stream_body(EVENT_BUILDERS[api](n))
    parts = []
    for name, data in EVENT_BUILDERS[api](n):
        head = f"event: {name}\n" if name else ""
        parts.append(f"{head}data: {json.dumps(data, separators=(',', ':'))}\n\n")
    if api == "openai-completions":
        parts.append("data: [DONE]\n\n")
    return "".join(parts).encode()


def _pieces(body: bytes, write_size: int) -> list[bytes]:
    if write_size <= 0:
        events = body.split(b"\n\n")
        return [e + b"\n\n" for e in events[:-1]]
    return [body[i : i + write_size] for i in range(0, len(body), write_size)]


async def _serve(stream: trio.SocketStream, pieces: list[bytes]) -> None:
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
    await stream.send_all(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
    )
    for piece in pieces:
        await stream.send_all(b"%x\r\n%s\r\n" % (len(piece), piece))
    await stream.send_all(b"0\r\n\r\n")
    await stream.aclose()


async def measure_http(api: str, n: int, runs: int, write_size: int) -> float:
    """Median provider events per second, end to end over loopback HTTP."""
    pieces = _pieces(build_body(api, n), write_size)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(
                trio.serve_tcp, functools.partial(_serve, pieces=pieces), 0, host="127.0.0.1"
            )
        )
        port = listeners[0].socket.getsockname()[1]
        model = Model(
            id="bench-model",
            api=api,
            provider="bench",
            base_url=f"http://127.0.0.1:{port}{BASE_PATHS[api]}",
        )
        rates = await _rates(model, n, runs, bench_options(api))
        nursery.cancel_scope.cancel()
    return rates


async def _rates(model: Model, n: int, runs: int, options: StreamOptions) -> float:
    """Median provider events per second of ``runs`` streams (after one warm-up)."""
    context = Context(messages=[UserMessage(content="go")])
    rates = []
    async with httpx.AsyncClient(timeout=None, trust_env=False, verify=False) as client:
        for _ in range(runs + 1):  # the first run warms up
            count = 0
            start = time.perf_counter()
            stream = stream_simple(client, model, context, options)
            async with stream:
                async for _event in stream:
                    count += 1
                message = await stream.result()
            elapsed = time.perf_counter() - start
            if message.stop_reason != "stop" or message.text != DELTA * n:
                msg = f"bad answer: {message.stop_reason} {message.error_message}"
                raise RuntimeError(msg)
            rates.append(count / elapsed)
    return statistics.median(rates[1:])


async def measure_websocket(n: int, runs: int) -> float:
    """openai-codex-responses over its WebSocket transport: the same events, one message
    each, from a local ``trio-websocket`` server; provider events per second."""
    import trio_websocket

    messages = [json.dumps(d, separators=(",", ":")) for _, d in _responses_events(n)]

    async def answer(request: trio_websocket.WebSocketRequest) -> None:
        ws = await request.accept()
        try:
            await ws.get_message()
            for message in messages:
                await ws.send_message(message)
            await ws.get_message()
        except trio_websocket.ConnectionClosed:
            pass

    async with trio.open_nursery() as nursery:
        server = await nursery.start(
            functools.partial(trio_websocket.serve_websocket, answer, "127.0.0.1", 0, None)
        )
        model = Model(
            id="bench-model",
            api="openai-codex-responses",
            provider="bench",
            base_url=f"http://127.0.0.1:{server.port}/backend-api",
        )
        options = bench_options("openai-codex-responses")
        options.extra = {"transport": "websocket"}
        rates = await _rates(model, n, runs, options)
        nursery.cancel_scope.cancel()
    return rates


def measure_decode(api: str, n: int, runs: int, write_size: int) -> float:
    """SSE events per second through the decoder and the JSON parse alone."""
    pieces = _pieces(build_body(api, n), write_size)
    rates = []
    for _ in range(runs):
        start = time.perf_counter()
        decoder: Any = SSEDecoder()
        if api == "bedrock-converse-stream":
            from pitrio.providers._bedrock_converse_stream._events import EventStreamDecoder

            decoder = EventStreamDecoder()
        count = 0
        for piece in pieces:
            for event in decoder.feed(piece):
                if not event.data.startswith("[DONE]"):
                    json_parse(event.data)
                count += 1
        decoder.flush()
        rates.append(count / (time.perf_counter() - start))
    return statistics.median(rates)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("api", choices=sorted(EVENT_BUILDERS))
    parser.add_argument("--deltas", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--write-size", type=int, default=16384)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    http = trio.run(measure_http, args.api, args.deltas, args.runs, args.write_size)
    decode = measure_decode(args.api, args.deltas, args.runs, args.write_size)
    results = [("http", http, "provider events/s"), ("decode", decode, "SSE events/s")]
    if args.api == "openai-codex-responses":
        websocket = trio.run(measure_websocket, args.deltas, args.runs)
        results.append(("websocket", websocket, "provider events/s"))
    for metric, value, unit in results:
        if args.json:
            print(
                json.dumps(
                    {
                        "metric": metric,
                        "api": args.api,
                        "value": round(value),
                        "unit": unit,
                        "deltas": args.deltas,
                        "write_size": args.write_size,
                    }
                )
            )
        else:
            print(f"{args.api} {metric}: {value:,.0f} {unit} (N={args.deltas})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
