"""openai-codex-responses over its WebSocket transport, and what the fixtures miss.

pi-ai's own WebSocket traces are compared in ``test_openai_codex_responses_conformance``;
here a local ``trio-websocket`` server drives what the oracle's fixture format cannot
script: the SSE fixtures' events as WebSocket messages (the event processing is
shared, so pi-ai's SSE traces), closes with a code, the idle and connect limits, an
abort while connecting, a second request of a session that fell back to SSE, no
``trio-websocket`` at all; and the parts of the SSE path no fixture reaches (retry
delays, the account id's base64url, error texts, the URL forms).
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio
import trio_websocket

from pitrio import Context, StreamOptions, UserMessage
from pitrio._signal import AbortSignal
from pitrio.providers import get_api
from pitrio.providers._openai_codex_responses import parse_error_response
from pitrio.providers._openai_codex_responses._payload import (
    codex_url,
    extract_account_id,
    websocket_url,
)
from pitrio.providers._openai_codex_responses._websocket import reset_sse_fallback, uuid7
from pitrio.testing._provider_fixture import build_context, build_model, build_options
from pitrio.testing._provider_trace import canon, normalize_event, normalize_message
from pitrio.testing.provider_conformance import compare_traces

from .conftest import Recorder, collect, sse, stream_response

DATA = Path(__file__).parent / "data" / "codex"
STREAM = get_api("openai-codex-responses")


@pytest.fixture(autouse=True)
def _fresh_sessions() -> Iterator[None]:
    """Every test starts with no session on the SSE fallback (a process-wide set)."""
    reset_sse_fallback()
    yield
    reset_sse_fallback()


def _load(name: str) -> dict[str, Any]:
    fixture: dict[str, Any] = json.loads((DATA / "fixtures" / f"{name}.json").read_text("utf-8"))
    return fixture


def _expected(name: str) -> list[dict[str, Any]]:
    trace: list[dict[str, Any]] = json.loads(
        (DATA / "expected" / f"{name}.json").read_text("utf-8")
    )
    return trace


def _messages(fixture: dict[str, Any], index: int = 0) -> list[str]:
    return [json.dumps(part["data"]) for part in fixture["responses"][index]["body"]]


@attrs.define
class WsServer:
    """A WebSocket server playing one script per connection: ``("send", text)``,
    ``("close", code, reason)``, ``("hang",)``, or ``("reject", status)`` first."""

    scripts: list[list[tuple[Any, ...]]]
    seen: list[tuple[str, dict[str, str], Any]] = attrs.field(factory=list)
    port: int = 0

    async def handle(self, request: trio_websocket.WebSocketRequest) -> None:
        index = len(self.seen)
        script = self.scripts[index] if index < len(self.scripts) else [("close", 1011, "")]
        headers = {k.decode().lower(): v.decode() for k, v in request.headers}
        if script and script[0][0] == "reject":
            self.seen.append((request.path, headers, None))
            await request.reject(script[0][1])
            return
        ws = await request.accept()
        try:
            first = await ws.get_message()
            self.seen.append((request.path, headers, json.loads(first)))
            for action in script:
                if action[0] == "send":
                    await ws.send_message(action[1])
                elif action[0] == "close":
                    await ws.aclose(action[1], action[2])
                    return
                else:
                    await trio.sleep_forever()
            await ws.get_message()  # until the client closes
        except trio_websocket.ConnectionClosed:
            pass


async def _serve(nursery: trio.Nursery, *scripts: list[tuple[Any, ...]]) -> WsServer:
    server = WsServer(list(scripts))
    listener = await nursery.start(
        partial(trio_websocket.serve_websocket, server.handle, "127.0.0.1", 0, None)
    )
    server.port = listener.port
    return server


def _setup(
    name: str, port: int, transport: str = "websocket", **extra: Any
) -> tuple[Any, Context, StreamOptions, AbortSignal]:
    fixture = _load(name)
    signal = AbortSignal()
    model = build_model(fixture, port)
    options = build_options(fixture, signal)
    options.extra = {"transport": transport, **extra}
    return model, build_context(fixture, model), options, signal


async def _trace(
    client: httpx.AsyncClient, model: Any, context: Context, options: StreamOptions
) -> list[dict[str, Any]]:
    stream = STREAM(client, model, context, options)
    records = [normalize_event(e) for e in await collect(stream)]
    records.append({"type": "result", "message": normalize_message(await stream.result())})
    return [canon(r) for r in records]


def _pop_diagnostics(trace: list[dict[str, Any]]) -> list[Any]:
    """Take the diagnostics out of every record (they ride on every partial after a
    fallback); the result's."""
    found: list[Any] = []
    for record in trace:
        for key in ("partial", "message", "error"):
            if isinstance(record.get(key), dict):
                found = record[key].pop("diagnostics", found)
    return found


WS_FIXTURES = [
    "codex-01-plain-text",
    "codex-02-reasoning-final-answer",
    "codex-03-tool-call",
    "codex-10-error-event",
    "codex-11-response-failed",
    "codex-12-incomplete-and-unknown-status",
    "codex-20-cache-none-thinking-off",
]


@pytest.mark.parametrize("name", WS_FIXTURES)
async def test_websocket_events_are_pis_sse_events(name: str, nursery: trio.Nursery) -> None:
    """The fixture's events as WebSocket messages: pi-ai's trace, and one
    ``response.create`` with the SSE request's body."""
    fixture = _load(name)
    server = await _serve(nursery, [("send", m) for m in _messages(fixture)])
    model, context, options, _ = _setup(name, server.port)
    with trio.fail_after(10):
        async with httpx.AsyncClient() as client:
            trace = await _trace(client, model, context, options)
    expected = _expected(name)
    problem = compare_traces(fixture, expected[1:], trace)
    assert problem is None, problem
    path, headers, sent = server.seen[0]
    assert path == "/backend-api/codex/responses"
    assert sent == {"type": "response.create", **expected[0]["body"]}
    assert headers["openai-beta"] == "responses_websockets=2026-02-06"
    assert headers["chatgpt-account-id"] == "acct-test-123"
    assert headers["authorization"] == expected[0]["headers"]["authorization"]
    assert "accept" not in headers
    assert headers["session-id"] == headers["x-client-request-id"]
    if "prompt_cache_key" in sent:
        assert headers["session-id"] == sent["prompt_cache_key"]
    else:
        assert len(headers["session-id"]) == 36  # a UUID v7


async def test_a_refused_websocket_falls_back_to_sse_for_the_session(
    nursery: trio.Nursery,
) -> None:
    """A rejected handshake: the request goes over SSE, the message says why, and the
    session's next request skips the WebSocket."""
    name = "codex-01-plain-text"
    server = await _serve(nursery, [("reject", 403)])
    body = [f"data: {m}\n\n".encode() for m in _messages(_load(name))]
    recorder = Recorder(stream_response(body), stream_response(body))
    model, context, options, _ = _setup(name, server.port, "auto")
    options.session_id = "fallback-session-1"
    async with recorder.client() as client:
        first = await _trace(client, model, context, options)
        second = await _trace(client, model, context, options)
    assert len(server.seen) == 1
    assert len(recorder.requests) == 2
    assert recorder.requests[0].headers["openai-beta"] == "responses=experimental"
    diagnostics = _pop_diagnostics(first)
    assert diagnostics == [
        {
            "type": "provider_transport_failure",
            "error": {"name": "Error", "message": "WebSocket handshake rejected: HTTP 403"},
            "details": {
                "configuredTransport": "auto",
                "fallbackTransport": "sse",
                "eventsEmitted": False,
                "phase": "before_message_stream_start",
                "requestBytes": len(json.dumps(recorder.bodies[0], separators=(",", ":"))),
            },
        }
    ]
    assert "diagnostics" not in second[-1]["message"]
    assert first[-1] == second[-1]
    assert compare_traces(_load(name), _expected(name)[1:], second) is None


async def test_without_trio_websocket_the_request_goes_over_sse(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No ``trio-websocket`` installed: pi-ai's "not available in this runtime", then SSE."""
    monkeypatch.setitem(sys.modules, "trio_websocket", None)
    name = "codex-20-cache-none-thinking-off"
    recorder = Recorder(
        stream_response([f"data: {m}\n\n".encode() for m in _messages(_load(name))])
    )
    model, context, options, _ = _setup(name, 1, "websocket")
    async with recorder.client() as client:
        trace = await _trace(client, model, context, options)
    (diagnostic,) = _pop_diagnostics(trace)
    assert diagnostic["error"]["message"] == "WebSocket transport is not available in this runtime"
    assert diagnostic["details"]["configuredTransport"] == "websocket"
    assert compare_traces(_load(name), _expected(name)[1:], trace) is None


async def test_a_close_after_the_first_event_ends_the_request(nursery: trio.Nursery) -> None:
    """Closed mid-response: ``WebSocket closed <code> <reason>``, no SSE retry."""
    messages = _messages(_load("codex-01-plain-text"))
    server = await _serve(
        nursery, [("send", messages[0]), ("send", messages[1]), ("close", 1011, "overloaded")]
    )
    model, context, options, _ = _setup("codex-01-plain-text", server.port, "auto")
    recorder = Recorder()
    async with recorder.client() as client:
        trace = await _trace(client, model, context, options)
    assert [r["type"] for r in trace] == ["start", "text_start", "error", "result"]
    message = trace[-1]["message"]
    assert message["stopReason"] == "error"
    assert message["errorMessage"] == "WebSocket closed 1011 overloaded"
    (diagnostic,) = message["diagnostics"]
    assert diagnostic["error"] == {
        "name": "WebSocketCloseError",
        "message": "WebSocket closed 1011 overloaded",
        "code": 1011,
    }
    assert diagnostic["details"]["phase"] == "after_message_stream_start"
    assert "fallbackTransport" not in diagnostic["details"]
    assert recorder.requests == []


async def test_the_connection_limit_is_tried_once_more(nursery: trio.Nursery) -> None:
    """``websocket_connection_limit_reached`` before the first event: a new connection."""
    limit = json.dumps(
        {
            "type": "error",
            "error": {"code": "websocket_connection_limit_reached", "message": "Too many"},
        }
    )
    name = "codex-03-tool-call"
    fixture = _load(name)
    server = await _serve(nursery, [("send", limit)], [("send", m) for m in _messages(fixture)])
    model, context, options, _ = _setup(name, server.port)
    async with httpx.AsyncClient() as client:
        trace = await _trace(client, model, context, options)
    assert len(server.seen) == 2
    assert compare_traces(fixture, _expected(name)[1:], trace) is None


async def test_a_codex_error_before_the_first_event_is_not_a_transport_failure(
    nursery: trio.Nursery,
) -> None:
    """An error event or a message that is not JSON ends the request: no SSE, no
    diagnostic, no start event."""
    server = await _serve(
        nursery,
        [("send", json.dumps({"type": "error", "code": "bad_request"}))],
        [("send", "{oops")],
    )
    model, context, options, _ = _setup("codex-01-plain-text", server.port)
    recorder = Recorder()
    async with recorder.client() as client:
        first = await _trace(client, model, context, options)
        second = await _trace(client, model, context, options)
    assert [r["type"] for r in first] == ["error", "result"]
    assert first[-1]["message"]["errorMessage"] == "Codex error: bad_request"
    assert second[-1]["message"]["errorMessage"].startswith("Invalid Codex WebSocket JSON: ")
    assert "diagnostics" not in first[-1]["message"]
    assert recorder.requests == []


async def test_the_idle_limit_ends_a_stalled_response(nursery: trio.Nursery) -> None:
    """``timeout`` bounds each wait for a message: ``WebSocket idle timeout after <ms>ms``."""
    messages = _messages(_load("codex-01-plain-text"))
    server = await _serve(nursery, [("send", messages[0]), ("hang",)])
    model, context, options, _ = _setup("codex-01-plain-text", server.port)
    options.timeout = 0.05
    async with httpx.AsyncClient() as client:
        with trio.fail_after(10):
            trace = await _trace(client, model, context, options)
    assert trace[-1]["message"]["errorMessage"] == "WebSocket idle timeout after 50ms"


async def test_an_abort_closes_the_websocket(nursery: trio.Nursery) -> None:
    """An abort while the server hangs: ``aborted``, ``Request was aborted``."""
    messages = _messages(_load("codex-01-plain-text"))
    server = await _serve(nursery, [*(("send", m) for m in messages[:3]), ("hang",)])
    model, context, options, signal = _setup("codex-01-plain-text", server.port)
    events = []
    async with httpx.AsyncClient() as client:
        stream = STREAM(client, model, context, options)
        remove = signal.add_callback(stream.cancel)
        with trio.fail_after(10):
            async with stream:
                async for event in stream:
                    events.append(event.type)
                    if event.type == "text_delta":
                        signal.abort()
        remove()
    result = await stream.result()
    assert events == ["start", "text_start", "text_delta", "error"]
    assert result.stop_reason == "aborted"
    assert result.error_message == "Request was aborted"


async def test_a_connect_timeout_falls_back(nursery: trio.Nursery) -> None:
    """A server that accepts TCP but never answers the handshake: after
    ``websocket_connect_timeout``, SSE."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]

    async def silent(stream: trio.SocketStream) -> None:
        await trio.sleep_forever()

    nursery.start_soon(trio.serve_listeners, silent, listeners)
    name = "codex-20-cache-none-thinking-off"
    model, context, options, _ = _setup(name, port, "websocket", websocket_connect_timeout=0.05)
    recorder = Recorder(
        stream_response([f"data: {m}\n\n".encode() for m in _messages(_load(name))])
    )
    async with recorder.client() as client:
        with trio.fail_after(10):
            trace = await _trace(client, model, context, options)
    (diagnostic,) = _pop_diagnostics(trace)
    assert diagnostic["error"]["message"] == "WebSocket connect timeout after 50ms"
    assert trace[-1]["message"]["stopReason"] == "stop"


# -- the parts the fixtures do not reach -------------------------------------------------


def _jwt(payload: bytes) -> str:
    return "e30." + base64.urlsafe_b64encode(payload).decode().rstrip("=") + ".sig"


def test_the_account_id_comes_from_the_token() -> None:
    """The claim is read from base64url (pi-ai's ``atob`` refuses ``-`` and ``_``)."""
    payload = b'{"https://api.openai.com/auth":{"chatgpt_account_id":"acct>>>"},"x":"???~"}'
    token = _jwt(payload)
    assert "-" in token or "_" in token
    assert extract_account_id(token) == "acct>>>"
    for bad in (
        "a.b",
        _jwt(b"{}"),
        _jwt(b"[1]"),
        "x.!!!.y",
        _jwt(b'{"https://api.openai.com/auth":{"chatgpt_account_id":""}}'),
    ):
        with pytest.raises(ValueError, match=r"^Failed to extract accountId from token$"):
            extract_account_id(bad)


@pytest.mark.parametrize(
    ("base", "url"),
    [
        ("", "https://chatgpt.com/backend-api/codex/responses"),
        ("https://h/x/", "https://h/x/codex/responses"),
        ("https://h/codex", "https://h/codex/responses"),
        ("http://h/codex/responses//", "http://h/codex/responses"),
    ],
)
def test_the_url(base: str, url: str) -> None:
    """``resolveCodexUrl`` and its WebSocket form."""
    assert codex_url(base) == url
    assert websocket_url(base) == url.replace("https:", "wss:").replace("http:", "ws:")


@pytest.mark.parametrize(
    ("status", "body", "text"),
    [
        (404, '{"error":{"code":"usage_not_included"}}', "You have hit your ChatGPT usage limit."),
        (400, '{"error":"flat"}', '{"error":"flat"}'),
        (400, "[1]", "[1]"),
        (502, "", "Bad Gateway"),
        (400, '{"error":{"type":"x"}}', '{"error":{"type":"x"}}'),
    ],
)
def test_http_error_texts(status: int, body: str, text: str) -> None:
    """pi-ai's ``parseErrorResponse``: the usage limit, the message, the body, the reason."""
    assert parse_error_response(status, "Bad Gateway" if status == 502 else "", body) == text


async def test_retries_follow_the_server_and_its_limit(autojump_clock: trio.abc.Clock) -> None:
    """A retryable status waits ``retry-after`` (seconds or a date), then 1 s, 2 s...;
    a delay over ``max_retry_delay`` fails at once."""
    ok = stream_response(
        sse(*[json.loads(m) for m in _messages(_load("codex-20-cache-none-thinking-off"))])
    )
    busy = httpx.Response(503, text="overloaded", headers={"retry-after": "3"})
    dated = httpx.Response(500, json={}, headers={"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"})
    plain = httpx.Response(502, text="")
    recorder = Recorder(busy, dated, plain, ok)
    model, context, options, _ = _setup("codex-20-cache-none-thinking-off", 1, "sse")
    options.max_retries = 3
    start = trio.current_time()
    async with recorder.client() as client:
        trace = await _trace(client, model, context, options)
    assert trace[-1]["message"]["stopReason"] == "stop"
    assert trio.current_time() - start == pytest.approx(3 + 0 + 4)
    too_long = httpx.Response(429, text="slow down", headers={"retry-after-ms": "120000"})
    recorder = Recorder(too_long)
    async with recorder.client() as client:
        trace = await _trace(client, model, context, options)
    assert trace[-1]["message"]["errorMessage"] == "Server requested 120s retry delay (max: 60s)"


async def test_a_bad_transport_is_named() -> None:
    """``extra["transport"]`` must be one of pi-ai's four."""
    model, context, options, _ = _setup("codex-01-plain-text", 1, "carrier-pigeon")
    async with httpx.AsyncClient() as client:
        trace = await _trace(client, model, context, options)
    assert "'carrier-pigeon'" in trace[-1]["message"]["errorMessage"]
    assert "'websocket-cached'" in trace[-1]["message"]["errorMessage"]


def test_uuid7() -> None:
    """Version 7, variant 10, time-ordered."""
    first, second = uuid7(), uuid7()
    assert first[14] == "7"
    assert first[19] in "89ab"
    assert first[:8] <= second[:8]


async def test_the_registry_streams_codex() -> None:
    """A minimal request through ``get_api`` with a user message."""
    name = "codex-20-cache-none-thinking-off"
    recorder = Recorder(
        stream_response([f"data: {m}\n\n".encode() for m in _messages(_load(name))])
    )
    model = build_model(_load(name), 1)
    context = Context(messages=[UserMessage(content="hi")])
    token = _load(name)["apiKey"]
    async with recorder.client() as client:
        trace = await _trace(
            client, model, context, StreamOptions(api_key=token, extra={"transport": "sse"})
        )
    assert trace[-1]["message"]["content"] == [
        {"type": "text", "text": "No.", "textSignature": '{"v":1,"id":"msg_1"}'}
    ]
    assert recorder.bodies[0]["instructions"] == "You are a helpful assistant."


async def test_hooks_and_a_failed_connection(autojump_clock: trio.abc.Clock) -> None:
    """``on_payload`` replaces the body of both transports; ``on_response`` sees every
    status; a connection failure is retried after 1 s."""
    name = "codex-20-cache-none-thinking-off"
    ok = stream_response([f"data: {m}\n\n".encode() for m in _messages(_load(name))])

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    limited = httpx.Response(
        429, json={"error": {"message": "slow"}}, headers={"retry-after-ms": "0"}
    )
    recorder = Recorder(refuse, limited, ok)
    model, context, options, _ = _setup(name, 1, "sse")
    seen: list[int] = []
    options.max_retries = 2
    options.on_payload = lambda body, _model: {**body, "x": 1} if isinstance(body, dict) else None
    options.on_response = lambda status, _headers, _model: seen.append(status)
    start = trio.current_time()
    async with recorder.client() as client:
        trace = await _trace(client, model, context, options)
    assert trace[-1]["message"]["stopReason"] == "stop"
    assert trio.current_time() - start == pytest.approx(1)
    assert seen == [429, 200]
    assert [body["x"] for body in recorder.bodies] == [1, 1, 1]


async def test_the_header_timeout_is_codexs(autojump_clock: trio.abc.Clock) -> None:
    """``timeout`` over SSE: ``Codex SSE response headers timed out after <ms>ms``."""

    async def hang(request: httpx.Request) -> httpx.Response:
        await trio.sleep_forever()
        raise AssertionError

    recorder = Recorder(hang)
    model, context, options, _ = _setup("codex-01-plain-text", 1, "sse")
    options.timeout = 0.5
    async with recorder.client() as client:
        trace = await _trace(client, model, context, options)
    assert (
        trace[-1]["message"]["errorMessage"] == "Codex SSE response headers timed out after 500ms"
    )


async def test_crlf_framed_events_are_read() -> None:
    """Events framed with CRLF (valid SSE; pi-ai's parser splits on ``\\n\\n`` only and
    fails) give the same trace."""
    name = "codex-01-plain-text"
    body = [f"data: {m}\r\n\r\n".encode() for m in _messages(_load(name))]
    recorder = Recorder(stream_response(body))
    model, context, options, _ = _setup(name, 1, "sse")
    async with recorder.client() as client:
        trace = await _trace(client, model, context, options)
    assert compare_traces(_load(name), _expected(name)[1:], trace) is None


async def test_an_incomplete_response_is_not_a_transport_failure(nursery: trio.Nursery) -> None:
    """A response that ended in an error over the WebSocket is the backend's answer: no
    diagnostic, and the session keeps its WebSocket (pi-ai moves it to SSE)."""
    incomplete = json.dumps(
        {
            "type": "response.incomplete",
            "response": {
                "id": "r",
                "status": "incomplete",
                "incomplete_details": {"reason": "content_filter"},
            },
        }
    )
    server = await _serve(nursery, [("send", incomplete)], [("send", incomplete)])
    model, context, options, _ = _setup("codex-01-plain-text", server.port, "auto")
    async with httpx.AsyncClient() as client:
        first = await _trace(client, model, context, options)
        await _trace(client, model, context, options)
    message = first[-1]["message"]
    assert message["errorMessage"] == "Response incomplete: content_filter"
    assert "diagnostics" not in message
    assert len(server.seen) == 2


async def test_an_abort_while_connecting(nursery: trio.Nursery) -> None:
    """An abort before the handshake answers: ``aborted``, no start event, no SSE."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    accepted = trio.Event()

    async def silent(stream: trio.SocketStream) -> None:
        accepted.set()
        await trio.sleep_forever()

    nursery.start_soon(trio.serve_listeners, silent, listeners)
    model, context, options, signal = _setup("codex-01-plain-text", port)
    recorder = Recorder()
    async with recorder.client() as client:
        stream = STREAM(client, model, context, options)
        remove = signal.add_callback(stream.cancel)

        async def abort_once_connected() -> None:
            await accepted.wait()
            signal.abort()

        with trio.fail_after(10):
            async with trio.open_nursery() as inner:
                inner.start_soon(abort_once_connected)
                events = await collect(stream)
        remove()
    assert [e.type for e in events] == ["error"]
    result = await stream.result()
    assert (result.stop_reason, result.error_message) == ("aborted", "Request was aborted")
    assert recorder.requests == []


async def test_a_default_tier_answer_is_priced_as_requested() -> None:
    """``service_tier`` is sent; a ``default`` answer to a ``priority`` request costs the
    priority price (pi-ai's ``resolveCodexServiceTier``), a ``flex`` answer its own."""
    name = "codex-01-plain-text"
    messages = [json.loads(m) for m in _messages(_load(name))]

    def answer(tier: str) -> httpx.Response:
        last = {**messages[-1], "response": {**messages[-1]["response"], "service_tier": tier}}
        return stream_response(sse(*messages[:-1], last))

    recorder = Recorder(answer("default"), answer("flex"))
    model, context, options, _ = _setup(name, 1, "sse", service_tier="priority")
    async with recorder.client() as client:
        priority = await _trace(client, model, context, options)
        flex = await _trace(client, model, context, options)
    assert recorder.bodies[0]["service_tier"] == "priority"
    base = _expected(name)[-1]["message"]["usage"]["cost"]
    assert priority[-1]["message"]["usage"]["cost"]["total"] == pytest.approx(2 * base["total"])
    assert flex[-1]["message"]["usage"]["cost"]["total"] == pytest.approx(base["total"] / 2)
