"""A consent request from a real ``pitrio serve``, shown in headless chromium.

The scripted model makes a ``bash`` call whose command hides things a terminal would not
show: carriage returns, ESC sequences, a run of 300 spaces and 40 newlines. The card must
show every character, the invisible ones marked, none cut; and No must refuse the call.
"""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from pitrio import Context, ToolResultMessage
from pitrio.testing import ScriptedModel, ScriptedResponse
from pitrio.web._serve import ServerInfo, serve

from ._cdp import Page
from .test_page_markdown import visible
from .test_web import _last_user, items, paced, script, send, wait_idle

COMMAND = (
    "touch ran.txt; echo 'all good'\r\x1b[2K\x1b[1A# looks harmless"
    + " " * 300
    + "rm -rf ~/notes\n"
    + "\n" * 39
    + "echo done\x1b[0m"
)


def answer(context: Context) -> ScriptedResponse:
    if _last_user(context) == "tidy up" and not isinstance(context.messages[-1], ToolResultMessage):
        return ScriptedResponse.tool_calls(("c1", "bash", {"command": COMMAND}))
    return script(context)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    project = tmp_path / "project"
    project.mkdir()
    env = {"PITRIO_SESSIONS_DIR": str(tmp_path / "sessions"), "HOME": str(tmp_path)}
    async with trio.open_nursery() as nursery:

        async def start() -> tuple[ServerInfo, Path]:
            info: ServerInfo = await nursery.start(
                lambda task_status: serve(
                    ["--port", "0", "--cwd", str(project)],  # no --yes: the page asks
                    stream_fn=paced(ScriptedModel(answer)),
                    env=env,
                    out=io.StringIO(),
                    task_status=task_status,
                )
            )
            return info, project

        yield start
        nursery.cancel_scope.cancel()


CARD = """(() => { const box = document.getElementById('consent');
  const args = document.getElementById('consent-args');
  const pre = args.querySelector('.arg pre');
  const text = pre.firstChild;  // up to the first mark
  const spaces = document.createRange();
  const run = pre.textContent.indexOf(' '.repeat(300));
  let node = pre.firstChild, at = run;  // the text node holding the run of spaces
  for (; node; node = node.nextSibling) {
    const size = node.textContent.length;
    if (at < size) break;
    at -= size;
  }
  spaces.setStart(node, at);
  spaces.setEnd(node, at + 300);
  const one = document.createRange();
  one.setStart(text, 0);
  one.setEnd(text, 1);
  args.scrollTop = args.scrollHeight;
  const end = document.createRange();  // the last character
  end.setStart(pre.lastChild, pre.lastChild.length - 1);
  end.setEnd(pre.lastChild, pre.lastChild.length);
  const last = end.getBoundingClientRect(), shownBox = args.getBoundingClientRect();
  return {hidden: box.hidden,
    names: [...args.querySelectorAll('.arg .name')].map(e => e.textContent),
    value: pre.textContent, marks: [...pre.querySelectorAll('.ctl')].map(e => e.textContent),
    legend: (args.querySelector('.legend') || {}).textContent,
    lines: pre.getBoundingClientRect().height / parseFloat(getComputedStyle(pre).lineHeight),
    spaceWidth: [...spaces.getClientRects()].reduce((sum, r) => sum + r.width, 0),
    charWidth: one.getBoundingClientRect().width,
    sideways: pre.scrollWidth - pre.clientWidth,
    lastShown: last.bottom <= shownBox.bottom + 1 && last.top >= shownBox.top - 1,
    scrolled: args.scrollTop > 0}; })()"""


async def test_the_consent_card_shows_the_whole_call_and_no_refuses_it(
    page: Page, server: Callable[..., Any]
) -> None:
    info, project = await server()
    await page.goto(info.url)
    await page.wait_for("document.getElementById('conn').textContent === ''")
    await send(page, "tidy up")
    await page.wait_for("!document.getElementById('consent').hidden")
    card = await page.evaluate(CARD)
    assert card["names"] == ["command"]
    assert card["value"] == visible(COMMAND)  # every character, the invisible ones marked
    assert card["marks"] == ["\\r", "\\x1b", "\\x1b", "\\x1b"]
    assert card["legend"].startswith("4 invisible or control characters are shown as")
    assert card["value"].count("\n") == 40
    assert card["lines"] >= 41  # each newline a line of its own, none collapsed
    # The 300 spaces take the room of 300 characters (wrapping), not one line's end.
    assert card["spaceWidth"] >= 299 * card["charWidth"], card
    assert card["sideways"] <= 0  # nothing hidden to the right
    assert card["scrolled"] is True  # the card scrolls, and its end can be reached
    assert card["lastShown"] is True
    # No: the call is refused, and the model is told so.
    await page.click("#consent button[data-answer=n]")
    await page.wait_for("document.querySelector('#log .item.tool[data-state=error]') !== null")
    await wait_idle(page)
    assert await page.evaluate("document.getElementById('consent').hidden") is True
    tool = next(item for item in await items(page) if item["kind"] == "tool")
    assert "ran.txt" not in [p.name for p in project.iterdir()]  # it never ran
    assert tool["state"] == "error"
    assert tool["text"] == "The user declined to run this bash call."
    assert tool["meta"] == "error: The user declined to run this bash call."
    answers = [item["text"] for item in await items(page) if item["kind"] == "assistant"]
    assert answers[-1] == "The command printed: The user declined to run this bash call."


async def test_a_request_with_only_the_full_text_shows_it_whole(
    page: Page, server: Callable[..., Any]
) -> None:
    """A server that sends ``full`` without ``arguments`` gets its text shown as it is
    (its invisible characters are already ``\\uXXXX`` escapes; any left are marked)."""
    info, _ = await server()
    await page.goto(info.url)
    await page.wait_for("document.getElementById('conn').textContent === ''")
    full = json.dumps({"command": "echo a\r\u202eb"}, indent=2).replace("\\r", "\r")
    message = {"type": "consent", "id": "c7", "tool": "bash", "title": "bash echo a", "full": full}
    await page.evaluate(f"handle({json.dumps(message)})")
    shown = await page.evaluate(
        "[...document.querySelectorAll('#consent-args pre')].map(e => e.textContent)"
    )
    assert shown == [visible(full)]
    assert "\\r" in shown[0]
    assert "\\u202e" in shown[0]  # json.dumps wrote it as an escape already


async def test_a_server_stopping_with_a_consent_waiting_refuses_it_and_exits(
    tmp_path: Path,
) -> None:
    """Ctrl-C (a cancellation) while a card waits: the shielded run aborts, the call is
    refused and never runs, and the server exits (it used to wait for the answer)."""
    from .test_web import Socket, open_socket

    project = tmp_path / "project"
    project.mkdir()
    env = {"PITRIO_SESSIONS_DIR": str(tmp_path / "sessions"), "HOME": str(tmp_path)}
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            info: ServerInfo = await nursery.start(
                lambda task_status: serve(
                    ["--port", "0", "--cwd", str(project)],
                    stream_fn=paced(ScriptedModel(answer)),
                    env=env,
                    out=io.StringIO(),
                    task_status=task_status,
                )
            )
            async with open_socket(info) as ws:
                socket = Socket(ws)
                await ws.send_message('{"type": "prompt", "text": "tidy up"}')
                while (await socket.receive())["type"] != "consent":
                    pass
                nursery.cancel_scope.cancel()
    assert not (project / "ran.txt").exists()
