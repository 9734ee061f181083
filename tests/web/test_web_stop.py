"""Over a bare WebSocket: Stop drops what was queued; a consent request carries the call
exactly."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from pitrio import Context
from pitrio.testing import ScriptedModel, ScriptedResponse
from pitrio.web._serve import ServerInfo, serve

from .test_web import Socket, _last_user, open_socket, paced, script

LONG = (
    "printf '%s\\n'   'two  spaces'   \\\n"
    "  && echo " + "x" * 200 + "\n\tcat  <<'EOF'\n  indented\u202eevil\nEOF"
)


def answer(context: Context) -> ScriptedResponse:
    if _last_user(context) == "long command":
        return ScriptedResponse.tool_calls(("c1", "bash", {"command": LONG, "timeout": 5}))
    return script(context)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    project = tmp_path / "project"
    project.mkdir()
    env = {"PITRIO_SESSIONS_DIR": str(tmp_path / "sessions"), "HOME": str(tmp_path)}
    async with trio.open_nursery() as nursery:

        async def start(*extra: str) -> ServerInfo:
            info: ServerInfo = await nursery.start(
                lambda task_status: serve(
                    ["--port", "0", "--cwd", str(project), *extra],
                    stream_fn=paced(ScriptedModel(answer)),
                    env=env,
                    out=io.StringIO(),
                    task_status=task_status,
                )
            )
            return info

        yield start
        nursery.cancel_scope.cancel()


async def until(socket: Socket, done: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    with trio.fail_after(20):
        while not got or not done(got[-1]):
            got.append(await socket.receive())
    return got


async def test_stop_drops_the_queued_steering_and_follow_up(server: Callable[..., Any]) -> None:
    info = await server("--yes")
    async with open_socket(info) as ws:
        socket = Socket(ws)
        await until(socket, lambda m: m["type"] == "status")
        await ws.send_message('{"type": "prompt", "text": "slow command please"}')
        await until(socket, lambda m: m["type"] == "append" and m["kind"] == "tool")
        await ws.send_message('{"type": "prompt", "text": "use tabs"}')
        await ws.send_message('{"type": "follow_up", "text": "and later this"}')
        await until(socket, lambda m: m["type"] == "queued" and m["mode"] == "follow_up")
        await ws.send_message('{"type": "abort"}')
        stopped = await until(socket, lambda m: m == {"type": "status", "working": False})
        assert {"type": "queueCleared", "dropped": 2} in stopped
        await ws.send_message('{"type": "prompt", "text": "something else"}')
        after = await until(
            socket, lambda m: m["type"] == "replace" and m["text"].startswith("You said")
        )
        await until(socket, lambda m: m == {"type": "status", "working": False})
    users = [m["text"] for m in stopped + after if m["type"] == "append" and m["kind"] == "user"]
    assert users == ["something else"]  # neither queued message went with it
    assert after[-1]["text"] == "You said: something else"


async def test_a_consent_request_carries_the_exact_call(server: Callable[..., Any]) -> None:
    info = await server()
    async with open_socket(info) as ws:
        socket = Socket(ws)
        await until(socket, lambda m: m["type"] == "status")
        await ws.send_message('{"type": "prompt", "text": "long command"}')
        [*_, request] = await until(socket, lambda m: m["type"] == "consent")
        arguments = {"command": LONG, "timeout": 5}
        assert request["arguments"] == arguments
        # The text to show: all of it, whitespace kept, the bidi override made visible.
        full = request["full"]
        assert json.loads(full.replace("\\u202e", "\u202e")) == arguments
        assert "\u202e" not in full
        assert "indented\\u202eevil" in full
        assert "'two  spaces'   " in full
        assert "x" * 200 in full
        # The short label stays short.
        assert request["title"].startswith("bash printf '%s\\n' 'two spaces' \\ && echo xx")
        assert len(request["title"]) <= 120
        await ws.send_message(json.dumps({"type": "consent", "id": request["id"], "answer": "n"}))
        done = await until(socket, lambda m: m["type"] == "consentDone")
        assert done[-1]["id"] == request["id"]
