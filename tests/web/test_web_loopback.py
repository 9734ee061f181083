"""The web UI on a real provider path: an OpenAI-compatible server on loopback (--base-url).

The server is the CLI tests' scripted chat-completions server (tests/cli/conftest.py): the
request goes through pitrio's openai-completions provider over HTTP, as with llama.cpp.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import trio
from cli.conftest import ChatServer, Reply, text_reply, tool_reply

from pitrio.web._serve import ServerInfo, serve

from ._cdp import Page
from .test_web import items, send, wait_idle


def chat_script(body: dict[str, Any]) -> Reply:
    last = body["messages"][-1]
    if last["role"] == "tool":
        return text_reply(f"The file holds: {last['content'].strip()}")
    return tool_reply("Let me look.", "read", {"path": "notes.txt"})


async def test_web_ui_on_an_openai_compatible_server(page: Page, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.txt").write_text("hi\n")
    chat = ChatServer(chat_script)
    chat.start()
    try:
        async with trio.open_nursery() as nursery:
            argv = ["--port", "0", "--cwd", str(project)]
            argv += ["--base-url", chat.url, "--model", "tiny-local"]
            env = {"PITRIO_SESSIONS_DIR": str(tmp_path / "sessions"), "HOME": str(tmp_path)}
            info: ServerInfo = await nursery.start(
                lambda task_status: serve(argv, env=env, out=io.StringIO(), task_status=task_status)
            )
            await page.goto(info.url)
            await page.wait_for("document.getElementById('model').value")
            model = await page.evaluate("document.getElementById('model').value")
            assert model == "openai-compatible/tiny-local"
            await send(page, "what is here?")
            done = "document.querySelector('#log .item.tool[data-state=done]') !== null"
            await page.wait_for(done)
            await wait_idle(page)
            seen = await items(page)
            visible = [(i["kind"], i["title"] or i["text"]) for i in seen if i["visible"]]
            assert visible == [
                ("user", "what is here?"),
                ("assistant", "Let me look."),
                ("tool", "read notes.txt"),
                ("assistant", "The file holds: hi"),
            ]
            nursery.cancel_scope.cancel()
    finally:
        chat.stop()
    assert len(chat.requests) == 2
    sent = chat.requests[1]["messages"]
    assert sent[-1]["role"] == "tool"
    assert json.loads(sent[-2]["tool_calls"][0]["function"]["arguments"]) == {"path": "notes.txt"}
