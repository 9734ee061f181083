"""A small Chrome DevTools Protocol client on trio-websocket: headless chromium, one page."""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

import trio
import trio_websocket

CHROMIUM: Final = "/usr/bin/chromium"
FLAGS: Final = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--window-size=1100,760",
    "--remote-debugging-port=0",
)
_LOCK: Final = "/tmp/pitrio-chromium-install.lock"


def ensure_chromium() -> str | None:
    """The chromium binary, installed with apt-get if missing (as root); or why not."""
    if os.path.exists(CHROMIUM):
        return None
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        return (
            f"the web UI tests need Debian's chromium at {CHROMIUM}, which is missing, and "
            "cannot install it here (needs root and apt-get): run `apt-get install -y chromium`"
        )
    with open(_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one installer at a time (xdist, parallel runs)
        if os.path.exists(CHROMIUM):
            return None
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        command = [apt, "install", "-y", "chromium"]
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:  # a fresh machine may have no package lists yet
            subprocess.run([apt, "update"], env=env, capture_output=True, check=False)
            done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not os.path.exists(CHROMIUM):
            return (
                f"`apt-get install -y chromium` failed ({done.returncode}); install Debian's "
                f"chromium to run the web UI tests:\n{done.stderr[-2000:]}"
            )
    return None


class CdpError(Exception):
    """A DevTools command failed."""


class Page:
    """One browser tab, driven over the DevTools protocol."""

    def __init__(self, ws: trio_websocket.WebSocketConnection, session_id: str) -> None:
        self._ws = ws
        self._session = session_id
        self._next = 0
        self._waiting: dict[int, tuple[trio.Event, list[dict[str, Any]]]] = {}
        self.console: list[str] = []

    async def _reader(self) -> None:
        with contextlib.suppress(trio_websocket.ConnectionClosed):
            while True:
                data = json.loads(await self._ws.get_message())
                waiting = self._waiting.pop(data.get("id", -1), None)
                if waiting is not None:
                    waiting[1].append(data)
                    waiting[0].set()
                elif data.get("method") == "Runtime.exceptionThrown":
                    details = data["params"]["exceptionDetails"]
                    self.console.append(f"exception: {json.dumps(details)[:500]}")

    async def send(self, method: str, *, browser: bool = False, **params: Any) -> dict[str, Any]:
        """Send one command; returns its result."""
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params}
        if not browser:
            message["sessionId"] = self._session
        done = trio.Event()
        box: list[dict[str, Any]] = []
        self._waiting[self._next] = (done, box)
        await self._ws.send_message(json.dumps(message))
        with trio.fail_after(30):
            await done.wait()
        reply = box[0]
        if "error" in reply:
            msg = f"{method}: {reply['error']}"
            raise CdpError(msg)
        result: dict[str, Any] = reply.get("result", {})
        return result

    async def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        result = await self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            msg = f"{expression!r} threw: {result['exceptionDetails']}"
            raise CdpError(msg)
        return result["result"].get("value")

    async def wait_for(self, expression: str, *, seconds: float = 20) -> Any:
        """Poll until the expression is truthy; returns its value (fails with the page's
        text after ``seconds``). While it throws, it is not true yet: the page may still
        be on its way (the printed URL's page moves on to ``/`` at once)."""
        thrown: CdpError | None = None
        with trio.move_on_after(seconds):
            while True:
                try:
                    value = await self.evaluate(expression)
                except CdpError as exc:
                    thrown, value = exc, None
                if value:
                    return value
                await trio.sleep(0.02)
        page_text = await self.evaluate("document.body ? document.body.innerText : ''")
        msg = (
            f"timed out after {seconds} s waiting for {expression}\n--- page ---\n{page_text}"
            f"\n--- console ---\n{self.console}"
        )
        if thrown is not None:
            msg += f"\n--- last error ---\n{thrown}"
        raise AssertionError(msg)

    async def goto(self, url: str) -> None:
        """Load a URL and wait for the document to be complete."""
        await self.send("Page.navigate", url=url)
        await trio.sleep(0.1)
        await self.wait_for("document.readyState === 'complete'")

    async def reload(self) -> None:
        await self.send("Page.reload")
        await trio.sleep(0.1)
        await self.wait_for("document.readyState === 'complete'")

    async def type_text(self, selector: str, text: str) -> None:
        """Focus an element and type ``text`` into it, as a keyboard would."""
        await self.evaluate(f"document.querySelector({json.dumps(selector)}).focus()")
        await self.send("Input.insertText", text=text)

    async def press_enter(self, *, alt: bool = False) -> None:
        params: dict[str, Any] = {
            "modifiers": 1 if alt else 0,
            "key": "Enter",
            "code": "Enter",
            "windowsVirtualKeyCode": 13,
            "nativeVirtualKeyCode": 13,
        }
        await self.send("Input.dispatchKeyEvent", type="keyDown", text="\r", **params)
        await self.send("Input.dispatchKeyEvent", type="keyUp", **params)

    async def click(self, selector: str) -> None:
        """Click the middle of an element with the mouse."""
        box = await self.evaluate(
            f"(() => {{ const r = document.querySelector({json.dumps(selector)})"
            ".getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()"
        )
        x, y = box
        for kind in ("mousePressed", "mouseReleased"):
            await self.send(
                "Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1
            )

    async def screenshot(self, path: str | os.PathLike[str]) -> None:
        data = await self.send("Page.captureScreenshot", format="png")
        await trio.Path(path).write_bytes(base64.b64decode(data["data"]))


@contextlib.asynccontextmanager
async def open_browser() -> AsyncIterator[Page]:
    """Headless chromium with a fresh profile and one blank page."""
    profile = tempfile.mkdtemp(prefix="pitrio-chromium-")
    process = await trio.lowlevel.open_process(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        port_file = Path(profile) / "DevToolsActivePort"
        with trio.fail_after(30):
            while not port_file.exists() or len(port_file.read_text().splitlines()) < 2:
                if process.poll() is not None:
                    msg = f"chromium exited with status {process.returncode} at start"
                    raise RuntimeError(msg)
                await trio.sleep(0.05)
        port, path = port_file.read_text().splitlines()[:2]
        async with (
            trio_websocket.open_websocket_url(
                f"ws://127.0.0.1:{port}{path}", max_message_size=64 * 1024 * 1024
            ) as ws,
            trio.open_nursery() as nursery,
        ):
            browser = Page(ws, "")
            nursery.start_soon(browser._reader)
            target = await browser.send("Target.createTarget", browser=True, url="about:blank")
            attached = await browser.send(
                "Target.attachToTarget", browser=True, targetId=target["targetId"], flatten=True
            )
            page = Page(ws, attached["sessionId"])
            page._waiting = browser._waiting  # one reader answers both
            page._next = 1000
            page.console = browser.console
            await page.send("Page.enable")
            await page.send("Runtime.enable")
            yield page
            nursery.cancel_scope.cancel()
    finally:
        process.kill()
        with trio.CancelScope(shield=True):
            await process.wait()
        shutil.rmtree(profile, ignore_errors=True)
