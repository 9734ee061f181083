"""``pitrio serve``'s gate: Host, Origin, the token's cookie, the headers, big frames.

Raw HTTP over a socket for what a browser would not send (a foreign ``Host``, a foreign
``Origin``), a real trio-websocket client for the WebSocket, and headless chromium for
what a browser does with the cookie and the redirect.
"""

from __future__ import annotations

import io
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from pitrio.testing import ScriptedModel
from pitrio.web._serve import ServerInfo, serve

from ._cdp import Page
from .test_web import Socket, open_socket, script, server, wait_idle

__all__ = ["server"]  # the fixture, shared with test_web

UPGRADE = (
    "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
)


async def request(
    info: ServerInfo, target: str, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, list[str]], bytes]:
    """One raw HTTP request (``Host`` the server's unless given); the status, the
    headers (lower-cased names) and the body."""
    sent = {"Host": f"{info.host}:{info.port}", **(headers or {})}
    head = f"GET {target} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in sent.items())
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream(info.host, info.port)
        async with stream:
            await stream.send_all(head.encode() + b"\r\n")
            data = b""
            while chunk := await stream.receive_some(65536):
                data += chunk
                if b"\r\n\r\n" in data and b" 101 " in data.split(b"\r\n", 1)[0]:
                    break  # an accepted upgrade: the WebSocket stays open
    raw_head, _, body = data.partition(b"\r\n\r\n")
    lines = raw_head.decode("latin-1").split("\r\n")
    found: dict[str, list[str]] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        found.setdefault(name.strip().lower(), []).append(value.strip())
    return int(lines[0].split(" ", 2)[1]), found, body


def upgrade(info: ServerInfo, **extra: str) -> dict[str, str]:
    headers = dict(line.split(": ", 1) for line in UPGRADE.strip().split("\r\n"))
    return {**headers, **extra}


async def test_a_foreign_host_is_refused_even_with_the_token(server: Callable[..., Any]) -> None:
    info = await server()
    own = f"http://{info.host}:{info.port}"
    for host in (f"evil.example:{info.port}", "127.0.0.1", f"localhost:{info.port + 1}", ""):
        for target, headers in [
            (f"/app.js?token={info.token}", {}),
            (f"/ws?token={info.token}", upgrade(info, Origin=own)),
        ]:
            status, _, body = await request(info, target, {**headers, "Host": host})
            assert (host, target, status) == (host, target, 403)
            assert b"Host" in body
    # The server's other names are its own.
    for host in (f"localhost:{info.port}", f"[::1]:{info.port}", f"LOCALHOST:{info.port}"):
        status, _, _ = await request(info, f"/app.js?token={info.token}", {"Host": host})
        assert (host, status) == (host, 200)


async def test_a_foreign_origin_is_refused_even_with_the_token(server: Callable[..., Any]) -> None:
    info = await server()
    token = info.token
    for origin in ("http://evil.example", "null", f"https://127.0.0.1:{info.port}", ""):
        for target, headers in [
            (f"/app.js?token={token}", {"Origin": origin}),
            (f"/ws?token={token}", upgrade(info, Origin=origin)),
        ]:
            status, _, body = await request(info, target, headers)
            assert (origin, target, status) == (origin, target, 403)
            assert b"Origin" in body or b"refused" in body
    # A WebSocket upgrade without any Origin is refused too (browsers always send one).
    status, _, body = await request(info, f"/ws?token={token}", upgrade(info))
    assert status == 403
    assert b"Origin" in body
    # The page's own origin, by any of the server's names, is accepted.
    for host in (info.host, "localhost"):
        origin = f"http://{host}:{info.port}"
        status, _, _ = await request(info, f"/ws?token={token}", upgrade(info, Origin=origin))
        assert (origin, status) == (origin, 101)


async def test_the_token_moves_into_an_http_only_cookie(server: Callable[..., Any]) -> None:
    info = await server()
    status, headers, body = await request(info, f"/?token={info.token}")
    assert status == 200
    assert b'<script src="/move-on.js"></script>' in body
    assert info.token.encode() not in body
    status, _, script = await request(info, "/move-on.js")  # public: it holds nothing
    assert status == 200
    assert script == b'location.replace("/" + location.hash);\n'
    [cookie] = headers["set-cookie"]
    name_value, *attributes = [part.strip() for part in cookie.split(";")]
    name, _, value = name_value.partition("=")
    assert value == info.token
    assert set(attributes) == {"HttpOnly", "SameSite=Strict", "Path=/"}
    # The cookie alone opens the page, whose HTML does not hold the token...
    status, _, body = await request(info, "/", {"Cookie": f"other=1; {name}={value}"})
    assert status == 200
    assert info.token.encode() not in body
    assert b"<script" in body
    # ...and its WebSocket; a wrong cookie (or another port's) is refused.
    own = f"http://{info.host}:{info.port}"
    status, _, _ = await request(info, "/ws", upgrade(info, Origin=own, Cookie=name_value))
    assert status == 101
    for bad in (f"{name}={value[:-1]}", f"pitrio_serve_{info.port + 1}={value}", ""):
        status, _, _ = await request(info, "/", {"Cookie": bad})
        assert (bad, status) == (bad, 403)
        status, _, _ = await request(info, "/ws", upgrade(info, Origin=own, Cookie=bad))
        assert (bad, status) == (bad, 403)


async def test_every_response_forbids_framing_sniffing_and_referrers(
    server: Callable[..., Any],
) -> None:
    info = await server()
    for target, expected in [
        (f"/?token={info.token}", 200),
        (f"/app.js?token={info.token}", 200),
        ("/app.css", 403),
        (f"/nothing?token={info.token}", 404),
    ]:
        status, headers, _ = await request(info, target)
        assert (target, status) == (target, expected)
        [csp] = headers["content-security-policy"]
        policies = {p.strip().split(" ", 1)[0]: p.strip() for p in csp.split(";")}
        assert policies["frame-ancestors"] == "frame-ancestors 'none'"
        assert policies["default-src"] == "default-src 'self'"
        assert headers["x-frame-options"] == ["DENY"]
        assert headers["x-content-type-options"] == ["nosniff"]
        assert headers["referrer-policy"] == ["no-referrer"]
        assert headers["cache-control"] == ["no-store"]


async def test_a_10_mb_message_is_closed_with_1009_not_reset(server: Callable[..., Any]) -> None:
    import trio_websocket

    info = await server()
    closed: Any = None
    async with open_socket(info) as ws:
        socket = Socket(ws)
        with trio.fail_after(20):
            while (await socket.receive())["type"] != "status":  # the snapshot's end
                pass
            try:  # the close may come while the client still sends, or after
                await ws.send_message(json.dumps({"type": "prompt", "text": "x" * 10_000_000}))
                while True:
                    await ws.get_message()
            except trio_websocket.ConnectionClosed as exc:
                closed = exc
        # trio-websocket's client waits for the server's TCP close and then keeps its
        # socket open (its aclose returns early once closed): close it here.
        await ws._stream.aclose()
    reason = closed.reason
    assert reason.code == 1009
    assert reason.reason is not None
    assert "maximum message size" in reason.reason
    # The server goes on serving.
    async with open_socket(info) as ws:
        assert (await Socket(ws).receive())["type"] == "info"


async def test_a_10_mb_message_from_the_page_is_closed_with_1009(
    page: Page, server: Callable[..., Any]
) -> None:
    info = await server()
    await page.goto(info.url)
    await page.wait_for("document.getElementById('conn').textContent === ''")
    closed = await page.evaluate(
        f"new Promise(r => {{ const s = new WebSocket('ws://{info.host}:{info.port}/ws');"
        " s.onopen = () => s.send('x'.repeat(10000000));"
        " s.onclose = e => r([e.code, e.reason]); })"
    )
    assert closed[0] == 1009
    assert "maximum message size" in closed[1]


async def test_the_browser_keeps_the_token_in_a_cookie_not_the_address(
    page: Page, server: Callable[..., Any]
) -> None:
    info = await server()
    await page.goto(info.url)
    await page.wait_for("document.getElementById('conn').textContent === ''")
    await wait_idle(page)
    location = await page.evaluate("location.origin + location.pathname + location.search")
    assert info.token not in location
    assert await page.evaluate("document.cookie") == ""  # HttpOnly: no script reads it
    assert info.token not in await page.evaluate("document.documentElement.outerHTML")
    # A reload keeps working on the cookie.
    await page.reload()
    await page.wait_for("document.getElementById('conn').textContent === ''")
    # Another page that knows the token still cannot open the WebSocket: its Origin.
    await page.goto("data:text/html,<title>elsewhere</title>")
    opened = await page.evaluate(
        f"new Promise(r => {{ const s = new WebSocket("
        f"'ws://{info.host}:{info.port}/ws?token={info.token}');"
        " s.onopen = () => r('open'); s.onerror = () => r('refused'); })"
    )
    assert opened == "refused"


async def test_a_link_from_another_site_opens_the_page(
    page: Page, server: Callable[..., Any]
) -> None:
    info = await server()
    await page.goto(f"data:text/html,<a id=go href='{info.url}'>pitrio</a>")
    await page.click("#go")
    await page.wait_for("document.getElementById('conn') !== null")
    await page.wait_for("document.getElementById('conn').textContent === ''")
    assert info.token not in await page.evaluate("location.href")


async def test_the_web_server_saves_sessions_privately(tmp_path: Path) -> None:
    old = os.umask(0o022)  # where a default-mode file would be 0644
    try:
        project = tmp_path / "project"
        project.mkdir()
        sessions = tmp_path / "data" / "sessions"
        env = {"PITRIO_SESSIONS_DIR": str(sessions), "HOME": str(tmp_path)}
        async with trio.open_nursery() as nursery:
            argv = ["--port", "0", "--cwd", str(project)]
            await nursery.start(
                lambda task_status: serve(
                    argv,
                    stream_fn=ScriptedModel(script),
                    env=env,
                    out=io.StringIO(),
                    task_status=task_status,
                )
            )
            files = [p for p in sessions.rglob("*") if p.is_file()]
            directories = [tmp_path / "data", sessions, *(p.parent for p in files)]
            nursery.cancel_scope.cancel()
    finally:
        os.umask(old)
    assert len(files) == 1  # the session the server started on
    assert [stat.S_IMODE(p.stat().st_mode) for p in files] == [0o600]
    assert {stat.S_IMODE(p.stat().st_mode) for p in directories} == {0o700}
