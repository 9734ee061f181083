"""The transport of ``pitrio serve``: HTTP and WebSocket on one Trio socket stream.

Every request is checked by a :class:`Gate` before anything is served (any refusal is a
``403`` with a line saying why):

* its ``Host`` must be this server (``127.0.0.1:PORT``, ``localhost:PORT`` or
  ``[::1]:PORT``): a page of another site that a DNS rebinding points at 127.0.0.1
  sends its own name and is refused;
* an ``Origin``, when sent, must be the page's own (``http://`` and one of those hosts);
  the WebSocket upgrade must send one (browsers always do);
* it must carry the token: ``?token=...`` (the printed URL), or the cookie that the first
  load of that URL sets (``HttpOnly``, ``SameSite=Strict``, ``Path=/``; named after the
  port, so two servers do not share one). A ``GET /?token=...`` is answered with the
  cookie and a page whose script (``/move-on.js``, the one file served without the
  token) moves on to ``/`` at once, ``#session=...`` kept, so the token leaves the
  address bar and the tab's history.
  Comparisons take constant time.

A ``GET`` of ``/``, ``/app.js``, ``/app.css`` or a vendored library (``_STATIC``) returns
the page's static files (shipped in ``pitrio/ui/_static``); ``/ws`` upgrades to the page's
WebSocket, whose messages from the page are limited to 1 MiB (a larger one is closed with
code 1009 and a reason). Each connected page is a :class:`Client` (a bounded queue of JSON
texts, sent in batches by :func:`_writer`); what the page sends is handed to the
:class:`Pages` (:class:`pitrio.web._pages.WebApp`), which this module knows nothing
else about.
A connection is closed by lingering: the server stops sending, then reads and discards
what the peer still sends (for up to 2 s), so that a peer mid-send reads the server's
last words (a 1009 close, a 403) instead of a TCP reset.
"""

from __future__ import annotations

import contextlib
import secrets
import sys
import traceback
import urllib.parse
from importlib import resources
from typing import Any, Final, Protocol, final

import attrs
import trio

__all__ = ["Client", "Gate", "Pages", "handle_connection", "text_frame"]

_MAX_HEAD: Final = 16 * 1024
_MAX_MESSAGE: Final = 1024 * 1024
_LINGER_SECONDS: Final = 2.0
_LINGER_BYTES: Final = 64 * 1024 * 1024
_CLIENT_QUEUE: Final = 100_000
_BATCH: Final = 2_000
_MOVE_ON: Final = (
    b'<!doctype html>\n<meta charset="utf-8">\n<title>pitrio</title>\n'
    b'<script src="/move-on.js"></script>\n<p>Opening pitrio... (<a href="/">continue</a>)</p>\n'
)
# Public (no token needed, nothing secret): from the page that set the cookie to the page
# itself, keeping the #session=... part.
_MOVE_ON_JS: Final = b'location.replace("/" + location.hash);\n'
_STATIC: Final = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/app.css": ("app.css", "text/css; charset=utf-8"),
    # Vendored, pinned (see pitrio/ui/_static/VENDORED.md): markdown and code highlighting.
    "/markdown-it.min.js": ("markdown-it.min.js", "text/javascript; charset=utf-8"),
    "/highlight.min.js": ("highlight.min.js", "text/javascript; charset=utf-8"),
    "/hljs.css": ("hljs.css", "text/css; charset=utf-8"),
}


@final
class Client:
    """One connected page: the queue of WebSocket frames its writer sends (each a JSON
    text: a message or an array of them, framed by :func:`text_frame`)."""

    __slots__ = ("closed", "send")

    def __init__(self, send: trio.MemorySendChannel[bytes]) -> None:
        self.send = send
        self.closed = False


def text_frame(text: str) -> bytes:
    """``text`` as one WebSocket text frame from a server (RFC 6455 5.2: final, not
    masked): made once, the same bytes can go to every page."""
    payload = text.encode()
    size = len(payload)
    if size < 126:
        head = bytes((0x81, size))
    elif size < 65536:
        head = bytes((0x81, 126)) + size.to_bytes(2, "big")
    else:
        head = bytes((0x81, 127)) + size.to_bytes(8, "big")
    return head + payload


class Pages(Protocol):
    """What the transport hands the pages' traffic to."""

    def connect(self, client: Client) -> None:
        """A page connected: queue its snapshot and start sending it live messages."""

    def disconnect(self, client: Client) -> None:
        """A page left (or was dropped): send it nothing more."""

    async def receive(self, client: Client, raw: str | bytes) -> None:
        """One WebSocket message from a page (a JSON command)."""


@final
@attrs.frozen
class Gate:
    """Who may talk to a server listening on ``port`` with ``token``: the checks of
    every request (see the module's docstring)."""

    token: str
    port: int

    @property
    def hosts(self) -> frozenset[str]:
        """The ``Host`` values of this server."""
        return frozenset(f"{name}:{self.port}" for name in ("127.0.0.1", "localhost", "[::1]"))

    @property
    def cookie(self) -> str:
        """The name of the cookie holding the token (one per port)."""
        return f"pitrio_serve_{self.port}"

    def refusal(
        self,
        query: dict[str, list[str]],
        headers: dict[str, str],
        *,
        websocket: bool,
        public: bool = False,
    ) -> str | None:
        """Why a request with this query and these headers is refused, or ``None``
        (a ``public`` one needs no token)."""
        host = headers.get("host", "").lower()
        if host not in self.hosts:
            return (
                f"Forbidden: this server answers only to Host 127.0.0.1:{self.port} or "
                f"localhost:{self.port} (got {host or 'none'!r}); open the URL pitrio serve "
                "printed."
            )
        origin = headers.get("origin")
        if origin is None and websocket:
            return "Forbidden: a WebSocket upgrade must send the page's Origin."
        if origin is not None and origin.lower() not in {f"http://{h}" for h in self.hosts}:
            return (
                f"Forbidden: requests from {origin!r} are refused; only pitrio serve's own "
                "page may talk to it."
            )
        if public:
            return None
        supplied = query.get("token", [""])[0] or _cookies(headers).get(self.cookie, "")
        if not secrets.compare_digest(supplied.encode(), self.token.encode()):
            return "Forbidden: open the URL pitrio serve printed (it holds the server's token)."
        return None


def _cookies(headers: dict[str, str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for part in headers.get("cookie", "").split(";"):
        name, equals, value = part.strip().partition("=")
        if equals:
            found.setdefault(name, value)
    return found


async def handle_connection(stream: trio.SocketStream, *, gate: Gate, pages: Pages) -> None:
    """Serve one TCP connection: an HTTP request, or a page's WebSocket until it closes."""
    try:
        async with stream:
            await _handle(stream, gate, pages)
            await _linger(stream)
    except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
        pass
    except Exception:  # one broken connection must not stop the server
        traceback.print_exc(file=sys.stderr)


async def _linger(stream: trio.SocketStream) -> None:
    """Send EOF, then read and discard what the peer still sends (bounded), so that
    closing does not reset a connection with unread data (the peer would lose the
    last response, such as a WebSocket's 1009 close)."""
    with trio.move_on_after(_LINGER_SECONDS):
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            await stream.send_eof()
            drained = 0
            while drained < _LINGER_BYTES:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    break
                drained += len(chunk)


async def _handle(stream: trio.SocketStream, gate: Gate, pages: Pages) -> None:
    head = b""
    with trio.move_on_after(30):
        while b"\r\n\r\n" not in head and len(head) <= _MAX_HEAD:
            chunk = await stream.receive_some(4096)
            if not chunk:
                return
            head += chunk
    if b"\r\n\r\n" not in head:
        await _respond(stream, 431, "text/plain", b"Request header too large or too slow.\n")
        return
    request = _parse_head(head.split(b"\r\n\r\n", 1)[0])
    if request is None:
        await _respond(stream, 400, "text/plain", b"Bad request.\n")
        return
    method, path, query, headers = request
    websocket = path == "/ws" and headers.get("upgrade", "").lower() == "websocket"
    public = method == "GET" and path == "/move-on.js"
    refusal = gate.refusal(query, headers, websocket=websocket, public=public)
    if refusal is not None:
        await _respond(stream, 403, "text/plain", refusal.encode() + b"\n")
        return
    if public:
        await _respond(stream, 200, "text/javascript; charset=utf-8", _MOVE_ON_JS)
        return
    if websocket:
        await _websocket(_Prefixed(stream, head), pages)
        return
    if method != "GET" or path not in _STATIC:
        await _respond(stream, 404 if method == "GET" else 405, "text/plain", b"Not found.\n")
        return
    if path == "/" and query.get("token", [""])[0]:
        # The printed URL: the token goes into a cookie and out of the address bar. The
        # page itself moves on to / (a 303 would not do: after a link on another site,
        # a browser sends no SameSite=Strict cookie along that site's redirect).
        cookie = f"{gate.cookie}={gate.token}; HttpOnly; SameSite=Strict; Path=/"
        await _respond(stream, 200, "text/html; charset=utf-8", _MOVE_ON, {"Set-Cookie": cookie})
        return
    name, content_type = _STATIC[path]
    body = _static(name)
    if name == "index.html":
        body = body.replace(b"{{TOKEN}}", b"")  # the cookie carries it
    await _respond(stream, 200, content_type, body)


async def _websocket(stream: _Prefixed, pages: Pages) -> None:
    import trio_websocket

    async with trio.open_nursery() as nursery:
        request = await trio_websocket.wrap_server_stream(
            nursery, stream, max_message_size=_MAX_MESSAGE
        )
        ws = await request.accept()
        send, receive = trio.open_memory_channel[bytes](_CLIENT_QUEUE)
        client = Client(send)
        pages.connect(client)
        try:
            async with trio.open_nursery() as inner:
                inner.start_soon(_writer, ws, stream, receive, inner.cancel_scope)
                await _read_commands(pages, client, ws)
                inner.cancel_scope.cancel()
        finally:
            pages.disconnect(client)
            send.close()
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await ws.aclose()
        nursery.cancel_scope.cancel()


async def _read_commands(pages: Pages, client: Client, ws: Any) -> None:
    import trio_websocket

    while not client.closed:
        try:
            raw = await ws.get_message()
        except trio_websocket.ConnectionClosed:
            return
        await pages.receive(client, raw)


async def _writer(
    ws: Any, stream: _Prefixed, receive: trio.MemoryReceiveChannel[bytes], scope: trio.CancelScope
) -> None:
    # The frames are written to the socket directly (trio-websocket frames only its own
    # messages: the handshake, pongs, the close), so that one broadcast's bytes are made
    # once for every page. Whatever queued up while the last frames were sent goes in
    # one write: a fast stream costs a write per batch, not per delta.
    try:
        async for frame in receive:
            batch = [frame]
            with contextlib.suppress(trio.WouldBlock):
                while len(batch) < _BATCH:
                    batch.append(receive.receive_nowait())
            if not await stream.send_frames(ws, frame if len(batch) == 1 else b"".join(batch)):
                break
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    scope.cancel()  # the page is gone, or was dropped for not reading


@final
class _Prefixed(trio.abc.Stream):
    """A stream whose first bytes were already read (the HTTP head)."""

    def __init__(self, stream: trio.SocketStream, prefix: bytes) -> None:
        self._stream = stream
        self._prefix = prefix
        # trio-websocket's frames and the writer's take turns: one frame is one write.
        self._send_lock = trio.StrictFIFOLock()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._prefix:
            size = len(self._prefix) if max_bytes is None else max_bytes
            data, self._prefix = self._prefix[:size], self._prefix[size:]
            await trio.lowlevel.checkpoint()
            return data
        return await self._stream.receive_some(max_bytes)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        async with self._send_lock:
            await self._stream.send_all(data)

    async def send_frames(self, ws: Any, frames: bytes) -> bool:
        """Write whole frames for the WebSocket ``ws``, unless it is closed or closing
        (then nothing may follow its close frame): whether they were written."""
        async with self._send_lock:
            if ws.closed is not None:
                return False
            await self._stream.send_all(frames)
            return True

    async def wait_send_all_might_not_block(self) -> None:
        await self._stream.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self._stream.aclose()


def _parse_head(
    head: bytes,
) -> tuple[str, str, dict[str, list[str]], dict[str, str]] | None:
    try:
        lines = head.decode("latin-1").split("\r\n")
        method, target, _version = lines[0].split(" ", 2)
    except ValueError:
        return None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if colon:
            headers[name.strip().lower()] = value.strip()
    parts = urllib.parse.urlsplit(target)
    return method, parts.path, urllib.parse.parse_qs(parts.query), headers


_REASONS: Final = {
    200: "OK",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    431: "Request Header Fields Too Large",
}


_CSP: Final = (
    "default-src 'self'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; "
    "base-uri 'none'; form-action 'none'"
)


async def _respond(
    stream: trio.abc.Stream,
    status: int,
    content_type: str,
    body: bytes,
    extra: dict[str, str] | None = None,
) -> None:
    lines = [
        f"HTTP/1.1 {status} {_REASONS[status]}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
        *(f"{name}: {value}" for name, value in (extra or {}).items()),
        "Cache-Control: no-store",
        "X-Content-Type-Options: nosniff",
        "X-Frame-Options: DENY",
        "Referrer-Policy: no-referrer",
        "Cross-Origin-Resource-Policy: same-origin",
        "Cross-Origin-Opener-Policy: same-origin",
        f"Content-Security-Policy: {_CSP}",
        "Connection: close",
    ]
    await stream.send_all(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)


def _static(name: str) -> bytes:
    return resources.files("pitrio.ui").joinpath("_static", name).read_bytes()
