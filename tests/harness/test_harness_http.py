"""The provider hooks and auto-retry against a real provider over HTTP (127.0.0.1).

A scripted model does not call ``on_payload``/``on_response``; pitrio's providers do.
These tests run in real time (sockets and httpx timeouts do not mix with a jumping
clock) and assert nothing about timing.
"""

from __future__ import annotations

import json
from typing import Any

import attrs
import trio

from pitrio import Model, StreamOptions
from pitrio.harness import (
    Harness,
    HarnessEvent,
    ProviderPayloadEvent,
    ProviderRequestEvent,
    ProviderRequestPatch,
    ProviderResponseEvent,
    RetrySettings,
)
from pitrio.providers import Models

_CHUNKS = [
    {"id": "c1", "choices": [{"index": 0, "delta": {"content": "hello"}, "finish_reason": None}]},
    {"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
]


def _sse() -> bytes:
    lines = [f"data: {json.dumps(chunk)}\n\n" for chunk in _CHUNKS]
    return ("".join(lines) + "data: [DONE]\n\n").encode()


@attrs.define
class _Server:
    """One canned answer per request: ``(status, body)``; 200 answers stream SSE."""

    answers: list[tuple[int, bytes]]
    requests: list[tuple[dict[str, str], Any]] = attrs.field(factory=list)
    extra_headers: dict[int, bytes] = attrs.field(factory=dict)
    """Header lines (``b"name: value\r\n"``) added to the answer of request ``n``."""
    port: int = 0

    async def serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, stream: trio.SocketStream) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = await stream.receive_some()
            if not chunk:
                return
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        while len(body) < int(headers.get("content-length", "0")):
            body += await stream.receive_some()
        self.requests.append((headers, json.loads(body)))
        status, payload = self.answers[len(self.requests) - 1]
        kind = b"text/event-stream" if status == 200 else b"application/json"
        reason = b"OK" if status == 200 else b"Service Unavailable"
        extra = self.extra_headers.get(len(self.requests) - 1, b"")
        await stream.send_all(
            b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\nx-server: yes\r\n%s"
            b"content-length: %d\r\nconnection: close\r\n\r\n%s"
            % (status, reason, kind, extra, len(payload), payload)
        )
        await stream.aclose()


def _model(port: int) -> Model:
    return Model(
        id="gpt-test",
        api="openai-completions",
        provider="test",
        base_url=f"http://127.0.0.1:{port}/v1",
        context_window=100_000,
    )


async def test_provider_hooks_over_http() -> None:
    server = _Server(answers=[(200, _sse())])
    requests: list[ProviderRequestEvent] = []
    responses: list[ProviderResponseEvent] = []

    def patch(event: ProviderRequestEvent) -> ProviderRequestPatch:
        requests.append(event)
        return ProviderRequestPatch(headers={"x-trace": "t-1"}, timeout=30.0)

    def payload(event: ProviderPayloadEvent) -> Any:
        return {**event.payload, "user": "hook"}

    async with trio.open_nursery() as nursery, Models(builtin=False) as models:
        await nursery.start(server.serve)
        harness = Harness(
            model=_model(server.port),
            stream_fn=models.stream_fn,
            get_api_key=lambda provider: "sk-test",
            stream_options=StreamOptions(headers={"x-app": "pitrio"}),
        )
        harness.hooks.on("before_provider_request", patch)
        harness.hooks.on("before_provider_payload", payload)
        harness.hooks.on("after_provider_response", responses.append)
        with trio.fail_after(10):
            await harness.prompt("hi")
        nursery.cancel_scope.cancel()
    assert harness.messages[-1].text == "hello"
    assert requests[0].headers == {"x-app": "pitrio"}
    headers, body = server.requests[0]
    assert headers["x-trace"] == "t-1"
    assert headers["x-app"] == "pitrio"
    assert body["user"] == "hook"
    assert body["model"] == "gpt-test"
    assert [(r.status, r.headers.get("x-server")) for r in responses] == [(200, "yes")]


async def test_a_503_is_retried_over_http() -> None:
    error = json.dumps({"error": {"message": "The server is overloaded", "type": "server"}})
    server = _Server(answers=[(503, error.encode()), (200, _sse())])
    events: list[HarnessEvent] = []
    async with trio.open_nursery() as nursery, Models(builtin=False) as models:
        await nursery.start(server.serve)
        harness = Harness(
            model=_model(server.port),
            stream_fn=models.stream_fn,
            get_api_key=lambda provider: "sk-test",
            retry=RetrySettings(base_delay=0.01),
        )
        harness.subscribe(events.append)
        with trio.fail_after(10):
            await harness.prompt("hi")
        nursery.cancel_scope.cancel()
    assert len(server.requests) == 2
    starts = [e for e in events if e.type == "auto_retry_start"]
    assert len(starts) == 1
    assert "503" in starts[0].error_message
    assert harness.messages[-1].text == "hello"
    assert [m.role for m in harness.messages] == ["user", "assistant"]


async def test_a_429_with_retry_after_ms_is_retried_after_that_delay_over_http() -> None:
    error = json.dumps({"error": {"message": "Rate limit reached", "type": "requests"}})
    server = _Server(
        answers=[(429, error.encode()), (200, _sse())],
        extra_headers={0: b"retry-after-ms: 50\r\n"},
    )
    events: list[HarnessEvent] = []
    async with trio.open_nursery() as nursery, Models(builtin=False) as models:
        await nursery.start(server.serve)
        harness = Harness(
            model=_model(server.port),
            stream_fn=models.stream_fn,
            get_api_key=lambda provider: "sk-test",
            retry=RetrySettings(base_delay=30.0),  # the header's delay, not this one
        )
        harness.subscribe(events.append)
        with trio.fail_after(10):
            await harness.prompt("hi")
        nursery.cancel_scope.cancel()
    assert len(server.requests) == 2
    starts = [e for e in events if e.type == "auto_retry_start"]
    assert [(s.delay, s.error_message[:3]) for s in starts] == [(0.05, "429")]
    assert harness.messages[-1].text == "hello"
