"""A fake OAuth server on 127.0.0.1 for the login tests: a small HTTP/1.1 server on
Trio that records each request and answers it with the route's handler."""

from __future__ import annotations

import http
import json
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, final

import attrs
import trio


@final
@attrs.frozen(kw_only=True)
class Request:
    """One request the fake server got."""

    method: str
    path: str
    query: Mapping[str, str]
    headers: Mapping[str, str]
    body: bytes

    def form(self) -> dict[str, str]:
        """The body as a form (``application/x-www-form-urlencoded``)."""
        return {k: v[0] for k, v in urllib.parse.parse_qs(self.body.decode()).items()}

    def json(self) -> Any:
        """The body as JSON."""
        return json.loads(self.body)


Answer = tuple[int, object]
"""``(status, body)``: a body that is not ``bytes`` is sent as JSON."""
Handler = Callable[[Request], Awaitable[Answer] | Answer]


@final
class FakeOAuthServer:
    """Routes ``(method, path)`` to handlers; ``requests`` lists what came, in order."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], Handler] = {}
        self.requests: list[Request] = []
        self.port = 0

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    def route(self, method: str, path: str, handler: Handler) -> None:
        """Answer ``method path`` with ``handler(request)``."""
        self.routes[method, path] = handler

    def paths(self) -> list[str]:
        """``"METHOD path"`` of every request so far."""
        return [f"{r.method} {r.path}" for r in self.requests]

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen on an ephemeral port; ``nursery.start(server.serve)``."""
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._connection, listeners)

    async def _connection(self, stream: trio.SocketStream) -> None:
        buffer = b""
        try:
            while True:
                while b"\r\n\r\n" not in buffer:
                    chunk = await stream.receive_some(65536)
                    if not chunk:
                        return
                    buffer += chunk
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0"))
                while len(buffer) < length:
                    chunk = await stream.receive_some(65536)
                    if not chunk:
                        return
                    buffer += chunk
                body, buffer = buffer[:length], buffer[length:]
                url = urllib.parse.urlsplit(target)
                query = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
                request = Request(
                    method=method, path=url.path, query=query, headers=headers, body=body
                )
                self.requests.append(request)
                handler = self.routes.get((method, url.path))
                payload: object
                if handler is None:
                    status, payload = 404, {"error": f"no route {method} {url.path}"}
                else:
                    answer = handler(request)
                    status, payload = answer if isinstance(answer, tuple) else await answer
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                sse = data.startswith((b"data:", b"event:"))
                kind = "text/event-stream" if sse else "application/json"
                await stream.send_all(
                    f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}\r\n"
                    f"Content-Type: {kind}\r\n"
                    f"Content-Length: {len(data)}\r\n\r\n".encode()
                    + data
                )
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return


async def browser_get(url: str) -> tuple[int, str]:
    """What a browser following a redirect to ``url`` gets: ``(status, page)``."""
    import httpx

    async with httpx.AsyncClient(timeout=None) as client:
        response = await client.get(url)
    return response.status_code, response.text


async def read_line(stream: trio.abc.ReceiveStream) -> str:
    """One line a child process wrote (without the newline; ``""`` at its end)."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = await stream.receive_some(1)
        if not chunk:
            break
        data += chunk
    return data.decode().strip()
