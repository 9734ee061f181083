"""A long session in headless chromium: the page shows the tail and pages back on scroll.

The sessions are written with the harness's store of Pi's session files, the one
``pitrio serve`` uses (400 messages each), then
``pitrio serve --resume`` opens one. Scrolling to the top of the chat asks for older items
(``history``); they go above the oldest shown, with the scroll position kept. A reply that
comes after a switch of session is dropped. Stop's ``queueCleared`` empties the queue view.
The token never reaches the page's script, address or storage.
"""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from pitrio import AssistantMessage, TextContent, UserMessage
from pitrio.harness import PiSessionStore
from pitrio.testing import ScriptedModel
from pitrio.web._pages import SNAPSHOT_ITEMS
from pitrio.web._serve import ServerInfo, serve

from ._cdp import Page
from .test_web import paced, script, send, server, wait_idle

__all__ = ["server"]  # the fixture, shared with test_web

TURNS = 200  # 400 messages, 400 items: four snapshots' worth


def answer(name: str, i: int) -> str:
    """Answers of different heights (markdown lists of 0 to 4 entries)."""
    return f"{name} answer {i}" + "".join(f"\n- point {k} of {i}" for k in range(i % 5))


async def long_session(sessions: Path, project: Path, name: str) -> str:
    session = await PiSessionStore(sessions).create(cwd=str(project))
    for i in range(TURNS):
        await session.append_message(UserMessage(content=f"{name} prompt {i}"))
        await session.append_message(
            AssistantMessage(content=(TextContent(text=answer(name, i)),), stop_reason="stop")
        )
    await session.close()
    return session.id


@pytest.fixture
async def long_server(tmp_path: Path) -> AsyncIterator[tuple[ServerInfo, str, str]]:
    """``pitrio serve --resume A`` with two long sessions, A and B, in the store."""
    project = tmp_path / "project"
    project.mkdir()
    sessions = tmp_path / "sessions"
    first = await long_session(sessions, project, "A")
    second = await long_session(sessions, project, "B")
    env = {"PITRIO_SESSIONS_DIR": str(sessions), "HOME": str(tmp_path)}
    async with trio.open_nursery() as nursery:
        info: ServerInfo = await nursery.start(
            lambda task_status: serve(
                ["--port", "0", "--cwd", str(project), "--resume", first],
                stream_fn=paced(ScriptedModel(script)),
                env=env,
                out=io.StringIO(),
                task_status=task_status,
            )
        )
        yield info, first, second
        nursery.cancel_scope.cancel()


SHOWN = """JSON.stringify({
  ids: [...document.querySelectorAll('#log .item[data-id]')].map(e => e.dataset.id),
  users: [...document.querySelectorAll('#log .item.user .body')].map(e => e.textContent),
  answers: [...document.querySelectorAll('#log .item.assistant .body')].map(e => e.textContent),
  mark: (document.getElementById('history-mark') || {}).textContent || '',
  markFirst: document.getElementById('log').firstElementChild.id === 'history-mark'})"""


async def shown(page: Page) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(await page.evaluate(SHOWN))
    return data


def words(texts: list[str]) -> list[str]:
    return [" ".join(text.split()) for text in texts]


def expected_answers(name: str, first: int) -> list[str]:
    """The answers' words as the page renders them (the list's markers are markup)."""
    return words([answer(name, i).replace("\n- ", "\n") for i in range(first, TURNS)])


async def open_long(page: Page, info: ServerInfo) -> None:
    await page.goto(info.url)
    await page.wait_for(
        f"document.querySelectorAll('#log .item[data-id]').length === {SNAPSHOT_ITEMS}"
    )
    await page.wait_for("document.getElementById('log').scrollTop > 0")  # at the end


# The oldest shown item, where it is on the screen, with the log scrolled to its top.
TO_TOP = """(() => { const log = document.getElementById('log'); log.scrollTop = 0;
  const oldest = log.querySelector('.item[data-id]');
  return [oldest.dataset.id, oldest.getBoundingClientRect().top]; })()"""


async def test_a_long_session_shows_its_tail_and_pages_back_on_scroll(
    page: Page, long_server: tuple[ServerInfo, str, str]
) -> None:
    info, _, _ = long_server
    await open_long(page, info)
    first = await shown(page)
    start = 2 * TURNS - SNAPSHOT_ITEMS  # the tail: the newest 100 items
    assert first["users"] == [f"A prompt {i}" for i in range(start // 2, TURNS)]
    assert words(first["answers"]) == expected_answers("A", start // 2)
    assert first["mark"] == f"{start} earlier messages"
    assert first["markFirst"] is True
    # Up to the top, again and again: 50 older items each time, the one that was oldest
    # staying where it was on the screen.
    loads = 0
    while (await shown(page))["mark"] != "beginning of the conversation":
        oldest, top = await page.evaluate(TO_TOP)
        await page.wait_for(
            f"document.querySelector('#log .item[data-id]').dataset.id !== {json.dumps(oldest)}"
            " && !document.getElementById('history-mark').textContent.startsWith('loading')"
        )
        after = await page.evaluate(
            f"document.querySelector('#log .item[data-id={json.dumps(oldest)}]')"
            ".getBoundingClientRect().top"
        )
        assert abs(after - top) < 1, (oldest, top, after)
        loads += 1
        assert loads <= start // 50
    assert loads == start // 50
    whole = await shown(page)
    assert whole["users"] == [f"A prompt {i}" for i in range(TURNS)]  # in order, all of them
    assert words(whole["answers"]) == expected_answers("A", 0)
    assert len(whole["ids"]) == len(set(whole["ids"])) == 2 * TURNS  # none twice
    assert whole["markFirst"] is True
    # At the start, scrolling up asks for nothing more.
    sent = await page.evaluate(
        "(() => { window.sentCommands = []; const real = socket.send.bind(socket);"
        " socket.send = (t) => { sentCommands.push(JSON.parse(t)); real(t); };"
        " document.getElementById('log').scrollTop = 1; document.getElementById('log')"
        ".scrollTop = 0; return new Promise(r => setTimeout(() => r(sentCommands), 300)); })()"
    )
    assert sent == []


# A snapshot in frames: a reset and the first items in one, laid out and scrolled (the log
# shorter than the screen, its scroll position at the top), the rest and its status later.
SPLIT_SNAPSHOT = """(async () => {
  window.sentCommands = []; const real = socket.send.bind(socket);
  socket.send = (t) => { sentCommands.push(JSON.parse(t).type); real(t); };
  const frame = () => new Promise(r => requestAnimationFrame(() => setTimeout(r, 50)));
  const item = (i) => ({type: 'append', id: 'split-' + i, kind: 'user', text: 'split ' + i});
  handle({type: 'reset', session: sessionId, earlier: 300});
  for (let i = 0; i < 3; i++) handle(item(i));
  await frame();
  document.getElementById('log').dispatchEvent(new Event('scroll'));
  await frame();
  const during = [...sentCommands];
  for (let i = 3; i < 6; i++) handle(item(i));
  handle({type: 'status', working: false});
  await frame();
  return [during, [...sentCommands]]; })()"""


async def test_a_snapshot_in_several_frames_asks_for_older_items_only_once_it_is_whole(
    page: Page, long_server: tuple[ServerInfo, str, str]
) -> None:
    """Under load a snapshot comes in several frames; between them the log is short and at
    its top, which is no reason to page back: the status that ends the snapshot is."""
    info, _, _ = long_server
    await open_long(page, info)
    during, after = await page.evaluate(SPLIT_SNAPSHOT)
    assert during == []
    assert after == ["history"]  # six items do not fill the log: ask now, once


# Holds the history replies the page gets (instead of showing them) until released: the
# server answers at once, so this is how a reply comes late, after a switch of session.
HOLD = """(() => { window.held = []; const real = handle;
  window.release = (i) => real(held[i]);
  handle = (m) => { if (m.type === 'history') held.push(m); else real(m); }; })()"""


async def test_a_history_reply_from_before_a_switch_is_dropped(
    page: Page, long_server: tuple[ServerInfo, str, str]
) -> None:
    info, first, second = long_server
    await open_long(page, info)
    await page.evaluate(HOLD)
    await page.evaluate(TO_TOP)
    await page.wait_for("held.length === 1")
    # The other session (its item ids are the same as this one's: they start again).
    await page.click("#sessions-toggle")
    await page.wait_for(
        f"document.querySelector('#session-list li[data-id=\"{second}\"]') !== null"
    )
    await page.click(f"#session-list li[data-id='{second}']")
    await page.wait_for("location.hash.endsWith(" + json.dumps(second) + ")")
    await page.wait_for(
        f"document.querySelectorAll('#log .item.user').length === {SNAPSHOT_ITEMS // 2}"
        " && document.querySelector('#log .item.user .body').textContent === 'B prompt 150'"
    )
    await page.wait_for("document.getElementById('log').scrollTop > 0")
    await page.evaluate(TO_TOP)
    await page.wait_for("held.length === 2")
    stale, fresh = await page.evaluate("held")
    assert (stale["session"], fresh["session"]) == (first, second)
    assert stale["before"] == fresh["before"]  # the same id, in another session
    before = await shown(page)
    assert before["mark"] == "loading earlier messages…"
    await page.evaluate("release(0)")  # A's reply, late: dropped
    assert await shown(page) == before
    await page.evaluate("release(1)")  # B's: shown
    now = await shown(page)
    assert now["users"] == [f"B prompt {i}" for i in range(125, TURNS)]
    assert words(now["answers"]) == expected_answers("B", 125)
    assert now["mark"] == "250 earlier messages"
    await page.evaluate("release(0)")  # and once more, A's is still not shown
    assert await shown(page) == now


QUEUE = "document.getElementById('queue').innerText"


async def test_stop_empties_the_queue_view_and_says_what_it_dropped(
    page: Page, server: Callable[..., Any]
) -> None:
    info = await server("--yes")
    await page.goto(info.url)
    await page.wait_for("document.getElementById('conn').textContent === ''")
    await send(page, "slow command please")
    await page.wait_for("document.querySelector('#log .item.tool.working') !== null")
    await send(page, "use tabs")  # steering, queued behind the running tool
    await page.wait_for(f"{QUEUE}.includes('steering: use tabs')")
    await page.click("#stop")
    await wait_idle(page)
    assert await page.wait_for(f"{QUEUE} === 'Stop dropped 1 queued message.' && {QUEUE}")
    assert await page.evaluate("document.querySelectorAll('#queue .steer').length") == 0
    # The next prompt goes alone, and the note goes once the agent works again.
    await send(page, "something else")
    await page.wait_for(
        "[...document.querySelectorAll('#log .item.assistant .body')]"
        ".some(e => e.textContent === 'You said: something else')"
    )
    await wait_idle(page)
    users = await page.evaluate(
        "[...document.querySelectorAll('#log .item.user .body')].map(e => e.textContent)"
    )
    assert users == ["slow command please", "something else"]
    assert await page.evaluate(QUEUE) == ""


STATE = """JSON.stringify({href: location.href, hash: location.hash,
  token: typeof token, local: {...localStorage}, session: {...sessionStorage},
  cookie: document.cookie, socket: socket.url, html: document.documentElement.outerHTML,
  resources: performance.getEntries().map(e => e.name),
  globals: Object.keys(window).filter(k => { try { return typeof window[k] === 'string'; }
    catch { return false; } }).map(k => window[k])})"""


async def test_the_token_is_not_in_the_pages_state_address_or_storage(
    page: Page, server: Callable[..., Any]
) -> None:
    info = await server()
    await page.goto(info.url)
    await page.wait_for("location.hash.includes('session=')")  # the server's reset came
    state = json.loads(await page.evaluate(STATE))
    assert state["token"] == "undefined"  # no such variable any more
    assert state["href"] == f"http://{info.host}:{info.port}/{state['hash']}"
    assert state["socket"] == f"ws://{info.host}:{info.port}/ws"
    assert state["cookie"] == ""  # HttpOnly: the script cannot read it
    assert state["local"] == state["session"] == {}
    assert "{{TOKEN}}" not in state["html"]
    assert "token=" not in state["html"]
    assert info.token not in json.dumps(state)
