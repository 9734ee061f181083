"""End to end over real HTTP: an Agent with tools against a local server on 127.0.0.1.

The server speaks the three wire formats (OpenAI chat completions, Anthropic messages,
OpenAI Responses) by replaying response bodies recorded in the provider corpus: the
first request gets a tool call, the second (which must carry the tool result) a text
answer. A second test aborts the agent in the middle of a stream that the server keeps
open, and checks that the agent settles and the server sees the connection closed.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from pitrio import (
    AbortSignal,
    Agent,
    AgentEvent,
    Model,
    StreamOptions,
    Tool,
    ToolResult,
    UserMessage,
    text_result,
)
from pitrio._model import Context
from pitrio.providers import Models

FIXTURES = Path(__file__).parent / "data" / "providers" / "fixtures"

WRITE_FILE = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "content": {"type": "string"},
        "mode": {"type": "integer"},
    },
    "required": ["path", "content"],
}

# api -> (fixture with a write_file tool call, fixture with a text answer, request path)
APIS = {
    "openai-completions": (
        "chat-04-tool-call-fragments",
        "chat-01-plain-text",
        "/v1/chat/completions",
    ),
    "anthropic-messages": (
        "anth-04-tool-call-fragments",
        "anth-01-plain-text",
        "/v1/messages",
    ),
    "openai-responses": ("resp-04-function-call-fragments", "resp-01-plain-text", "/v1/responses"),
}


def _body(name: str) -> list[Any]:
    fixture = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    return fixture["responses"][0]["body"]  # type: ignore[no-any-return]


def _part_bytes(part: Any) -> bytes:
    if isinstance(part, str):
        return part.encode()
    if "data" in part:
        head = f"event: {part['event']}\n" if "event" in part else ""
        return (head + "data: " + json.dumps(part["data"], separators=(",", ":")) + "\n\n").encode()
    if "text" in part:
        return str(part["text"]).encode()
    return bytes.fromhex(part["hex"])


@attrs.define
class _Server:
    """A tiny HTTP/1.1 server: one scripted SSE response per request, chunked."""

    bodies: list[list[Any]]
    hang_after: int | None = None
    requests: list[tuple[str, dict[str, Any]]] = attrs.field(factory=list)
    client_closed: trio.Event = attrs.field(factory=trio.Event)
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
        path = lines[0].split(" ")[1]
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(headers.get("content-length", "0"))
        while len(body) < length:
            body += await stream.receive_some()
        self.requests.append((path, json.loads(body)))
        parts = self.bodies[len(self.requests) - 1]
        await stream.send_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
        )
        try:
            for i, part in enumerate(parts):
                if self.hang_after is not None and i == self.hang_after:
                    # Keep the connection open until the client goes away.
                    while await stream.receive_some():
                        pass
                    break
                raw = _part_bytes(part)
                await stream.send_all(b"%x\r\n%s\r\n" % (len(raw), raw))
            else:
                if self.hang_after == len(parts):
                    # Every event sent, but the body never ends.
                    while await stream.receive_some():
                        pass
                    self.client_closed.set()
                    return
                await stream.send_all(b"0\r\n\r\n")
                await stream.aclose()
                return
        except trio.BrokenResourceError:
            pass  # the client closed the connection while we were writing
        self.client_closed.set()


def _model(api: str, fixture: str, port: int) -> Model:
    spec = json.loads((FIXTURES / f"{fixture}.json").read_text(encoding="utf-8"))["model"]
    path = "" if api == "anthropic-messages" else "/v1"
    return Model(
        id=spec["id"],
        api=api,
        provider=spec.get("provider", "test"),
        base_url=f"http://127.0.0.1:{port}{path}",
    )


@pytest.mark.parametrize("api", sorted(APIS))
async def test_agent_conversation_with_a_tool_call_over_http(api: str) -> None:
    """The agent calls the tool the server asked for, sends its result back, gets the answer."""
    tool_fixture, text_fixture, path = APIS[api]
    server = _Server(bodies=[_body(tool_fixture), _body(text_fixture)])
    written: list[Any] = []

    async def write_file(
        call_id: str, params: Any, signal: AbortSignal, on_update: Any
    ) -> ToolResult:
        written.append(params)
        return text_result("wrote 5 bytes")

    async with trio.open_nursery() as nursery, Models(builtin=False) as models:
        await nursery.start(server.serve)
        agent = Agent(
            system_prompt="You can use tools.",
            model=_model(api, tool_fixture, server.port),
            tools=[
                Tool(
                    name="write_file",
                    description="Write text to a file",
                    parameters=WRITE_FILE,
                    execute=write_file,
                )
            ],
            stream_fn=models.stream_fn,
            get_api_key=lambda provider: "sk-test",
        )
        kinds: list[str] = []
        agent.subscribe(lambda event, signal: kinds.append(event.type))
        await agent.prompt("Write hello to /tmp/x.txt")
        nursery.cancel_scope.cancel()

    assert [p.partition("?")[0] for p, _ in server.requests] == [path, path]
    assert len(written) == 1
    assert written[0]["path"] == "/tmp/x.txt"
    roles = [m.role for m in agent.state.messages]
    assert roles == ["user", "assistant", "toolResult", "assistant"]
    assert agent.state.messages[1].stop_reason == "toolUse"
    assert agent.state.messages[-1].stop_reason == "stop"
    assert agent.state.messages[-1].text
    assert agent.state.error_message is None
    # The second request carries the tool call and its result in the API's own form.
    second = json.dumps(server.requests[1][1])
    assert "wrote 5 bytes" in second
    assert kinds.count("tool_execution_end") == 1


@pytest.mark.parametrize("api", sorted(APIS))
async def test_abort_mid_stream_settles_and_closes_the_connection(api: str) -> None:
    """Abort at the first text delta: the agent ends aborted and the server sees EOF."""
    _, text_fixture, _ = APIS[api]
    body = _body(text_fixture)
    server = _Server(bodies=[body], hang_after=len(body) - 2)

    def on_event(event: AgentEvent, signal: AbortSignal) -> None:
        if event.type == "message_update" and event.assistant_message_event.type == "text_delta":
            agent.abort()

    async with trio.open_nursery() as nursery, Models(builtin=False) as models:
        await nursery.start(server.serve)
        agent = Agent(
            model=_model(api, text_fixture, server.port),
            stream_fn=models.stream_fn,
            get_api_key=lambda p: "sk-test",
        )
        agent.subscribe(on_event)
        with trio.fail_after(10):
            await agent.prompt("Say hello")
            await server.client_closed.wait()
        nursery.cancel_scope.cancel()

    last = agent.state.messages[-1]
    assert last.role == "assistant"
    assert last.stop_reason == "aborted"
    assert last.error_message
    assert not agent.is_running
    assert agent.state.pending_tool_calls == frozenset()
    assert server.client_closed.is_set()


@pytest.mark.parametrize("api", sorted(APIS))
async def test_the_message_ends_at_the_terminal_event_over_http(api: str) -> None:
    """The server sends the whole answer, terminal event included, and then never ends
    the body: the run finishes at the terminal event and the client closes the
    connection (it used to hang)."""
    _, text_fixture, _ = APIS[api]
    body = _body(text_fixture)
    server = _Server(bodies=[body], hang_after=len(body))

    async with trio.open_nursery() as nursery, Models(builtin=False) as models:
        await nursery.start(server.serve)
        agent = Agent(
            model=_model(api, text_fixture, server.port),
            stream_fn=models.stream_fn,
            get_api_key=lambda p: "sk-test",
        )
        with trio.fail_after(10):  # a guard against the old hang, not a timing assertion
            await agent.prompt("Say hello")
            await server.client_closed.wait()
        nursery.cancel_scope.cancel()

    last = agent.state.messages[-1]
    assert last.role == "assistant"
    assert last.stop_reason == "stop", last.error_message
    assert last.text


@attrs.define
class _DroppingServer:
    """Keeps the first connection alive after a complete streamed reply (no
    ``Connection: close``), then drops it when the next request arrives on it without
    answering: a dead pooled connection. Later connections are served normally."""

    body: list[Any]
    connections: int = 0
    requests: int = 0
    port: int = 0

    async def serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._handle, listeners)

    async def _read_request(self, stream: trio.SocketStream, buffer: bytes) -> bytes | None:
        while b"\r\n\r\n" not in buffer:
            chunk = await stream.receive_some()
            if not chunk:
                return None
            buffer += chunk
        head, _, rest = buffer.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        while len(rest) < length:
            rest += await stream.receive_some()
        self.requests += 1
        return rest[length:]

    async def _handle(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        # BrokenResourceError: the client closed its pooled connection when it was done.
        with contextlib.suppress(trio.BrokenResourceError):
            await self._converse(stream, first_connection=self.connections == 1)

    async def _converse(self, stream: trio.SocketStream, *, first_connection: bool) -> None:
        buffer = await self._read_request(stream, b"")
        if buffer is None:
            return
        await stream.send_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        for part in self.body:
            raw = _part_bytes(part)
            await stream.send_all(b"%x\r\n%s\r\n" % (len(raw), raw))
        await stream.send_all(b"0\r\n\r\n")
        if first_connection and await self._read_request(stream, buffer) is not None:
            await stream.aclose()  # the next request on this connection: dropped
            return
        await stream.aclose()


@pytest.mark.parametrize("api", sorted(APIS))
async def test_a_dead_pooled_connection_is_retried_on_a_fresh_one(api: str) -> None:
    """The second request goes out on the pooled connection, which the server drops
    before answering: it is sent again on a new connection (max_retries is 0)."""
    _, text_fixture, _ = APIS[api]
    server = _DroppingServer(body=_body(text_fixture))
    messages = []
    async with trio.open_nursery() as nursery, Models(builtin=False) as models:
        await nursery.start(server.serve)
        model = _model(api, text_fixture, server.port)
        context = Context(messages=[UserMessage(content="hi")])
        with trio.fail_after(10):  # a guard against a hang, not a timing assertion
            for _ in range(2):
                stream = models.stream_simple(model, context, StreamOptions(api_key="k"))
                async with stream:
                    async for _event in stream:
                        pass
                messages.append(await stream.result())
        nursery.cancel_scope.cancel()

    assert [m.stop_reason for m in messages] == ["stop", "stop"], messages[-1].error_message
    assert server.requests == 3  # the dropped one, then its second sending
    assert server.connections == 2
