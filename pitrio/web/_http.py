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
code 1009 and a reason). Each connected page is a :class:`Client`: the frames broadcast to it
are written to its socket at once, and what the socket does not take yet waits (up to
:data:`BEHIND_BYTES`) for the page's writer task; what the page sends is handed to the
:class:`Pages` (:class:`pitrio.web._pages.WebApp`), which this module knows nothing
else about.
A connection is closed by lingering: the server stops sending, then reads and discards
what the peer still sends (for up to 2 s), so that a peer mid-send reads the server's
last words (a 1009 close, a 403) instead of a TCP reset.
"""

from __future__ import annotations

import contextlib
import secrets
import socket
import sys
import traceback
import urllib.parse
from importlib import resources
from typing import Any, Final, Protocol, final

import attrs
import trio

__all__ = ["BEHIND_BYTES", "Client", "Gate", "Pages", "handle_connection", "text_frame"]

_MAX_HEAD: Final = 16 * 1024
_MAX_MESSAGE: Final = 1024 * 1024
_LINGER_SECONDS: Final = 2.0
_LINGER_BYTES: Final = 64 * 1024 * 1024
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


BEHIND_BYTES: Final = 8 * 1024 * 1024
"""A page with more than this many bytes of frames waiting for its socket is dropped: its
socket is closed with code 1008 and a reason saying so, and the page reconnects (it gets
a snapshot, as any page connecting does)."""
_BEHIND_CODE: Final = 1008
_BEHIND_REASON: Final = (
    "this page fell too far behind the stream (8 MiB unsent); reconnect for a new snapshot"
)
_DROP_SECONDS: Final = _LINGER_SECONDS


@final
class Client:
    """One connected page: the WebSocket frames (each a JSON text: a message or an array
    of them, framed by :func:`text_frame`) that go to its socket.

    :meth:`write` does no per-page task switch: with nothing waiting, a frame goes out at
    once in one non-blocking send. What the socket does not take waits, and the page's
    writer (:meth:`run`) sends all that waits in one write whenever the socket takes more:
    a page still sending its last frame gets the next ones merged into that write, not a
    write each. A page with more than :data:`BEHIND_BYTES` waiting is dropped (see there).
    """

    __slots__ = (
        "_lock",
        "_partial",
        "_send_scope",
        "_size",
        "_sock",
        "_stream",
        "_torn",
        "_waiting",
        "_wake",
        "close_reason",
        "closed",
        "ws",
    )

    def __init__(self, stream: trio.SocketStream) -> None:
        self._stream = stream
        trio_socket = stream.socket
        # Its own handle of the socket, for writes that do not wait (trio's are async).
        self._sock = socket.fromfd(trio_socket.fileno(), trio_socket.family, trio_socket.type)
        self._sock.setblocking(False)
        self._lock = trio.StrictFIFOLock()  # one writer at a time: one frame is one write
        self._waiting: list[bytes | memoryview] = []
        self._size = 0
        self._partial = False  # the first waiting item is the rest of a begun frame
        self._wake = trio.Event()
        self._send_scope: trio.CancelScope | None = None
        self._torn = False  # a write was cut short: no frame may follow
        self.closed = False
        self.close_reason: tuple[int, str] | None = None
        self.ws: Any = None  # the page's trio-websocket connection, once accepted

    @property
    def waiting(self) -> int:
        """Bytes of frames waiting for the socket."""
        return self._size

    def write(self, frame: bytes) -> None:
        """Send ``frame`` (whole frames: made once, the same bytes can go to every page)
        after what was written before; nothing once the page is closed or closing."""
        if self.closed or (self.ws is not None and self.ws.closed is not None):
            return
        if self._waiting or self._lock.locked():
            self._waiting.append(frame)
            self._size += len(frame)
            if self._size > BEHIND_BYTES:
                self._drop()
            self._wake.set()
            return
        try:
            sent = self._sock.send(frame)
        except BlockingIOError:
            sent = 0
        except OSError:  # the page is gone: its reader sees the end too
            self.closed = True
            self._wake.set()
            return
        if sent < len(frame):
            self._waiting.append(memoryview(frame)[sent:])
            self._size += len(frame) - sent
            self._partial = sent > 0
            self._wake.set()

    def _drop(self) -> None:
        # What waits was not begun (but the rest of a begun frame): it goes; a write under
        # way gets a moment to end, then the close frame says why.
        self._waiting = self._waiting[:1] if self._partial else []
        self._size = sum(map(len, self._waiting))
        self.closed = True
        self.close_reason = (_BEHIND_CODE, _BEHIND_REASON)
        if self._send_scope is not None:
            self._send_scope.deadline = min(
                self._send_scope.deadline, trio.current_time() + _DROP_SECONDS
            )

    async def run(self, scope: trio.CancelScope) -> None:
        """The page's writer: send what :meth:`write` leaves waiting, until the page is
        closed or dropped; then cancel ``scope`` (the page's connection)."""
        try:
            while True:
                async with self._lock:
                    await self._send_waiting()
                if self.closed:
                    break
                await self._wake.wait()
                self._wake = trio.Event()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self.closed = True
        scope.cancel()

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Write ``data`` (trio-websocket's own frames: the handshake, pongs, the close)
        after the frames waiting."""
        async with self._lock:
            await self._send_waiting()
            if self._torn:
                msg = "a frame to this page was cut short"
                raise trio.BrokenResourceError(msg)
            await self._stream.send_all(data)

    async def _send_waiting(self) -> None:
        while self._waiting and not self._torn:
            waiting = self._waiting
            data = waiting[0] if len(waiting) == 1 else b"".join(waiting)
            self._waiting = []
            self._size = 0
            self._partial = False
            scope = self._send_scope = trio.CancelScope()
            if self.closed:  # dropped: what is begun gets a moment to end
                scope.deadline = trio.current_time() + _DROP_SECONDS
            try:
                with scope:
                    await self._stream.send_all(data)
            except BaseException:
                self._torn = True
                raise
            finally:
                self._send_scope = None
            self._torn = scope.cancelled_caught

    def close(self) -> None:
        """Close this page's own handle of the socket (not the connection)."""
        self.closed = True
        self._sock.close()


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
        await _websocket(stream, head, pages)
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


async def _websocket(stream: trio.SocketStream, head: bytes, pages: Pages) -> None:
    import trio_websocket

    client = Client(stream)
    try:
        async with trio.open_nursery() as nursery:
            request = await trio_websocket.wrap_server_stream(
                nursery, _Prefixed(stream, head, client), max_message_size=_MAX_MESSAGE
            )
            client.ws = await request.accept()
            pages.connect(client)
            try:
                async with trio.open_nursery() as inner:
                    inner.start_soon(client.run, inner.cancel_scope)
                    await _read_commands(pages, client, client.ws)
                    inner.cancel_scope.cancel()
            finally:
                pages.disconnect(client)
                client.closed = True
                with trio.CancelScope(shield=True), trio.move_on_after(1):
                    await client.ws.aclose(*(client.close_reason or (1000, None)))
            nursery.cancel_scope.cancel()
    finally:
        client.close()


async def _read_commands(pages: Pages, client: Client, ws: Any) -> None:
    import trio_websocket

    while not client.closed:
        try:
            raw = await ws.get_message()
        except trio_websocket.ConnectionClosed:
            return
        await pages.receive(client, raw)


@final
class _Prefixed(trio.abc.Stream):
    """A stream whose first bytes were already read (the HTTP head); what trio-websocket
    writes goes through the page's :class:`Client`, after the frames waiting there."""

    def __init__(self, stream: trio.SocketStream, prefix: bytes, client: Client) -> None:
        self._stream = stream
        self._prefix = prefix
        self._client = client

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._prefix:
            size = len(self._prefix) if max_bytes is None else max_bytes
            data, self._prefix = self._prefix[:size], self._prefix[size:]
            await trio.lowlevel.checkpoint()
            return data
        return await self._stream.receive_some(max_bytes)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self._client.send_all(data)

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
