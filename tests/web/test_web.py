"""``pitrio serve`` in a real headless chromium, driven over the DevTools protocol.

The model is a :class:`pitrio.testing.ScriptedModel` whose events are paced (so text
streams visibly); the tools are the real coding tools in a temporary directory.
"""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from pitrio import (
    AssistantMessageEventStream,
    Context,
    Model,
    StreamFn,
    StreamOptions,
    TextContent,
    ToolResultMessage,
    UserMessage,
)
from pitrio.testing import ScriptedModel, ScriptedResponse
from pitrio.web._serve import ServerInfo, serve

from ._cdp import Page

EVENT_DELAY = 0.03


def paced(stream_fn: ScriptedModel, delay: float = EVENT_DELAY) -> StreamFn:
    """``stream_fn`` with ``delay`` seconds before each event, as a network would pace it."""

    def call(model: Model, context: Context, options: StreamOptions) -> AssistantMessageEventStream:
        inner = stream_fn(model, context, options)

        async def relay(stream: AssistantMessageEventStream) -> None:
            async for event in inner:
                await trio.sleep(delay)
                stream.push(event)

        async def produce(stream: AssistantMessageEventStream) -> None:
            if inner.has_producer:
                async with inner:
                    await relay(stream)
            else:
                await relay(stream)

        template = inner.template
        return AssistantMessageEventStream(produce, template=template)

    return call


def _last_user(context: Context) -> str:
    for message in reversed(context.messages):
        if isinstance(message, UserMessage):
            content = message.content
            if isinstance(content, str):
                return content
            return "".join(b.text for b in content if isinstance(b, TextContent))
    return ""


MARKDOWN = (
    "Edit `greet.py` like this:\n```python\ndef greet(name):\n    return f'Hello, {name}!'\n```\n"
    "Not markup: <img src=x onerror=\"document.title='pwned'\"> <b>bold?</b>"
)


def script(context: Context) -> ScriptedResponse:
    """The scripted agent: what it answers depends on the conversation so far."""
    last = context.messages[-1]
    prompt = _last_user(context)
    if isinstance(last, ToolResultMessage):
        output = "".join(b.text for b in last.content if isinstance(b, TextContent)).strip()
        return ScriptedResponse.text(f"The command printed: {output}", chunk_size=4)
    if prompt.startswith("run"):
        return ScriptedResponse(
            content=(
                TextContent(text="Let me run it in the shell and see what it prints."),
                *ScriptedResponse.tool_calls(
                    ("c1", "bash", {"command": "sleep 0.5; echo hello from bash"})
                ).content,
            ),
            chunk_size=2,
        )
    if prompt.startswith("slow"):
        return ScriptedResponse.tool_calls(("c1", "bash", {"command": "sleep 2; echo slept"}))
    if prompt.startswith("use tabs"):
        return ScriptedResponse.text("Steered: I will use tabs.", chunk_size=4)
    if prompt.startswith("markdown"):
        return ScriptedResponse.text(MARKDOWN, chunk_size=7)
    if prompt.startswith("long"):
        return ScriptedResponse.text("Thinking about this for a long time", chunk_size=3, delay=60)
    return ScriptedResponse.text(f"You said: {prompt}", chunk_size=4)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    """Start ``pitrio serve`` (scripted model, --cwd tmp) in the test's nursery."""
    project = tmp_path / "project"
    project.mkdir()
    env = {"PITRIO_SESSIONS_DIR": str(tmp_path / "sessions"), "HOME": str(tmp_path)}

    async with trio.open_nursery() as nursery:

        async def start(*extra: str) -> ServerInfo:
            argv = ["--port", "0", "--cwd", str(project), *extra]
            info: ServerInfo = await nursery.start(
                lambda task_status: serve(
                    argv,
                    stream_fn=paced(ScriptedModel(script)),
                    env=env,
                    out=io.StringIO(),
                    task_status=task_status,
                )
            )
            return info

        yield start
        nursery.cancel_scope.cancel()


ITEMS = """JSON.stringify([...document.querySelectorAll('#log .item')].map(e => ({
  kind: e.dataset.kind, state: e.dataset.state,
  text: (e.querySelector('.body, .output') || {}).textContent || '',
  title: (e.querySelector('.title') || {}).textContent || null,
  meta: (e.querySelector('.meta, .summary') || {}).textContent || '',
  visible: e.offsetParent !== null})))"""


async def items(page: Page) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = json.loads(await page.evaluate(ITEMS))
    return data


async def send(page: Page, text: str) -> None:
    await page.type_text("#input", text)
    await page.press_enter()


async def wait_idle(page: Page) -> None:
    await page.wait_for("!document.body.classList.contains('working')")


async def test_prompt_streams_text_runs_a_tool_block_and_completes(
    page: Page, server: Callable[..., Any]
) -> None:
    info = await server("--yes")
    await page.goto(info.url)
    await page.wait_for("document.getElementById('conn').textContent === ''")
    await send(page, "run the script")

    # The user's bubble, then the assistant's text while it is still streaming.
    final = "Let me run it in the shell and see what it prints."
    partial = await page.wait_for(
        "(() => { const e = document.querySelector('#log .item.assistant.working .body');"
        " const t = e ? e.textContent : '';"
        f" return t && t !== {json.dumps(final)} ? t : null; }})()"
    )
    assert final.startswith(partial)
    assert await page.evaluate("document.getElementById('stop').hidden") is False
    assert await page.evaluate("document.getElementById('send').textContent") == "Steer"

    # The tool block appears running, then completes with its output and summary.
    await page.wait_for("document.querySelector('#log .item.tool.working') !== null")
    await page.wait_for("document.querySelector('#log .item.tool[data-state=done]') !== null")
    await wait_idle(page)
    seen = await items(page)
    assert [(i["kind"], i["state"]) for i in seen] == [
        ("user", "done"),
        ("assistant", "done"),
        ("tool", "done"),
        ("assistant", "done"),
    ]
    assert seen[0]["text"] == "run the script"
    assert seen[1]["text"] == final
    assert seen[2]["title"] == "bash sleep 0.5; echo hello from bash"
    assert seen[2]["text"] == "hello from bash\n" or seen[2]["text"] == "hello from bash"
    assert seen[2]["meta"] == "ok · 1 line"
    assert seen[3]["text"] == "The command printed: hello from bash"
    assert await page.evaluate("document.getElementById('stop').hidden") is True
    assert await page.evaluate("document.getElementById('input').value") == ""


async def test_typing_while_it_works_steers(page: Page, server: Callable[..., Any]) -> None:
    info = await server("--yes")
    await page.goto(info.url)
    await page.wait_for("document.getElementById('conn').textContent === ''")
    await send(page, "slow command please")
    await page.wait_for("document.querySelector('#log .item.tool.working') !== null")
    await send(page, "use tabs")
    # Shown as queued while the tool runs, then as the user's message before the answer.
    queued = await page.wait_for("document.getElementById('queue').innerText")
    assert "steering: use tabs" in queued
    await page.wait_for("document.querySelector('#log .item.tool[data-state=done]') !== null")
    await wait_idle(page)
    seen = await items(page)
    assert [(i["kind"], i["text"]) for i in seen if i["kind"] != "tool" and i["visible"]] == [
        ("user", "slow command please"),
        ("user", "use tabs"),
        ("assistant", "Steered: I will use tabs."),
    ]
    assert await page.evaluate("document.getElementById('queue').innerText") == ""


async def test_stop_button_aborts_the_answer(page: Page, server: Callable[..., Any]) -> None:
    info = await server()
    await page.goto(info.url)
    await page.wait_for("document.getElementById('conn').textContent === ''")
    await send(page, "long question")
    await page.wait_for(
        "(document.querySelector('#log .item.assistant.working .body') || {}).textContent"
        " === 'Thinking about this for a long time'"
    )
    await page.click("#stop")
    await wait_idle(page)
    seen = await items(page)
    assert seen[-1]["state"] == "aborted", seen
    assert seen[-1]["kind"] == "assistant"
    assert seen[-1]["text"] == "Thinking about this for a long time"
    assert seen[-1]["meta"]  # the abort's reason is shown
    assert await page.evaluate("document.getElementById('stop').hidden") is True
    # The agent takes the next prompt.
    await send(page, "hello again")
    await page.wait_for(
        "[...document.querySelectorAll('#log .item.assistant .body')]"
        ".some(e => e.textContent === 'You said: hello again')"
    )


async def test_reload_resumes_and_sessions_are_listed_and_resumable(
    page: Page, server: Callable[..., Any]
) -> None:
    info = await server()
    await page.goto(info.url)
    await page.wait_for("document.getElementById('conn').textContent === ''")
    await send(page, "first conversation")
    await page.wait_for("document.querySelectorAll('#log .item.assistant[data-state=done]').length")
    await wait_idle(page)
    before = await items(page)
    first_url = await page.wait_for("location.hash.includes('session=') && location.href")

    await page.reload()
    await page.wait_for("document.querySelectorAll('#log .item').length === 2")
    assert await items(page) == before

    # A new session starts empty; the list holds both; opening the first shows it again.
    await page.click("#new-session")
    await page.wait_for(f"location.href !== {json.dumps(first_url)}")
    await page.wait_for("document.querySelectorAll('#log .item').length === 0")
    await send(page, "second conversation")
    await page.wait_for(
        "[...document.querySelectorAll('#log .item.assistant .body')]"
        ".some(e => e.textContent === 'You said: second conversation')"
    )
    await wait_idle(page)
    await page.click("#sessions-toggle")
    # Newest first, by their first prompt (the list opened now replaces the one sent when
    # the new session was still empty).
    titles = "[...document.querySelectorAll('#session-list .session-title')]"
    titles += ".map(e => e.textContent)"
    await page.wait_for(f"{titles}.join('|') === 'second conversation|first conversation'")
    first_id = first_url.split("session=")[1]
    await page.click(f"#session-list li[data-id='{first_id}']")
    await page.wait_for(f"location.href === {json.dumps(first_url)}")
    await page.wait_for("document.querySelectorAll('#log .item').length === 2")
    assert await items(page) == before

    # A page reloaded on a session the server has left switches back to it.
    second = await page.evaluate(
        "document.querySelector('#session-list li[data-id]:not(.current)').dataset.id"
    )
    await page.goto("about:blank")
    await page.goto(f"{info.url}#session={second}")
    await page.wait_for(
        "[...document.querySelectorAll('#log .item.assistant .body')]"
        ".some(e => e.textContent === 'You said: second conversation')"
    )


async def test_bash_asks_for_consent_in_the_page(page: Page, server: Callable[..., Any]) -> None:
    info = await server()  # no --yes: the page asks
    await page.goto(info.url)
    await page.wait_for("document.getElementById('conn').textContent === ''")
    await send(page, "run the script")
    title = await page.wait_for(
        "!document.getElementById('consent').hidden &&"
        " document.getElementById('consent-title').textContent"
    )
    assert title == "bash sleep 0.5; echo hello from bash"
    await page.click("#consent button[data-answer=y]")
    await page.wait_for("document.querySelector('#log .item.tool[data-state=done]') !== null")
    await wait_idle(page)
    seen = await items(page)
    assert seen[-1]["text"] == "The command printed: hello from bash"


async def _raw_get(info: ServerInfo, target: str, headers: str = "") -> tuple[int, bytes]:
    stream = await trio.open_tcp_stream(info.host, info.port)
    async with stream:
        await stream.send_all(
            f"GET {target} HTTP/1.1\r\nHost: {info.host}:{info.port}\r\n{headers}\r\n".encode()
        )
        data = b""
        while chunk := await stream.receive_some(65536):
            data += chunk
    status = int(data.split(b" ", 2)[1])
    return status, data.split(b"\r\n\r\n", 1)[1]


async def test_requests_without_the_token_are_refused(
    page: Page, server: Callable[..., Any]
) -> None:
    info = await server()
    upgrade = (
        "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
        f"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nOrigin: http://{info.host}:{info.port}\r\n"
    )
    for target, headers in [
        ("/", ""),
        ("/app.js", ""),
        ("/app.css?token=wrong", ""),
        (f"/?token={info.token[:-1]}", ""),
        ("/ws", upgrade),
        ("/ws?token=nope", upgrade),
    ]:
        status, body = await _raw_get(info, target, headers)
        assert (target, status) == (target, 403)
        assert b"token" in body
    status, body = await _raw_get(info, f"/app.js?token={info.token}")
    assert status == 200
    assert b"appendDelta" in body
    # The browser gets the refusal too, and no WebSocket without the token.
    await page.goto(f"http://{info.host}:{info.port}/")
    assert "Forbidden" in await page.evaluate("document.body.innerText")
    closed = await page.evaluate(
        f"new Promise(r => {{ const s = new WebSocket('ws://{info.host}:{info.port}/ws');"
        " s.onopen = () => r('open'); s.onerror = () => r('refused'); })"
    )
    assert closed == "refused"


async def offline_demo(page: Page, nursery: trio.Nursery) -> ServerInfo:
    """Serve the offline replay (the default with no model configured), run its demo
    prompt in the page and wait until it has settled."""
    from pitrio.cli._offline import DEMO_PROMPT

    info: ServerInfo = await nursery.start(
        lambda task_status: serve(
            ["--port", "0", "--offline"], env={}, out=io.StringIO(), task_status=task_status
        )
    )
    await page.goto(info.url)
    await page.wait_for("document.getElementById('conn').textContent === ''")
    await send(page, DEMO_PROMPT)
    await page.wait_for("document.body.classList.contains('working')")
    await page.wait_for("!document.body.classList.contains('working')", seconds=120)
    return info


async def test_offline_replay_runs_the_demo_in_the_page(page: Page) -> None:
    async with trio.open_nursery() as nursery:
        await offline_demo(page, nursery)
        banner = await page.evaluate("document.getElementById('banner').innerText")
        assert banner.startswith("Offline replay: no model is configured")
        assert "not a language model" in banner
        seen = await items(page)
        tools = [i for i in seen if i["kind"] == "tool"]
        assert [(i["title"], i["state"], i["meta"]) for i in tools] == [
            ("bash ls", "done", "ok · 3 lines"),
            ("read check_greet.py", "done", "ok · 13 lines"),
            ("read greet.py", "done", "ok · 6 lines"),
            (
                "bash python3 check_greet.py",
                "error",
                "error: AssertionError: greet('world') returned 'Hello world' (exit code 1)",
            ),
            ("edit greet.py", "done", "edited · +1 -1 lines"),  # the page counts its diff
            ("bash python3 check_greet.py", "done", "ok · 1 line"),
        ]
        assert seen[-1]["kind"] == "assistant"
        assert seen[-1]["state"] == "done"
        assert seen[-1]["text"]
        nursery.cancel_scope.cancel()


async def test_reload_mid_run_shows_the_run_and_follows_it(
    page: Page, server: Callable[..., Any]
) -> None:
    info = await server("--yes")
    await page.goto(info.url)
    await page.wait_for("document.getElementById('conn').textContent === ''")
    await send(page, "slow command please")
    await page.wait_for("document.querySelector('#log .item.tool.working') !== null")
    await page.reload()
    # The snapshot: the prompt and the running tool, the agent still working...
    await page.wait_for("document.querySelector('#log .item.tool.working') !== null")
    assert await page.evaluate("document.getElementById('stop').hidden") is False
    # ...then the live messages: the tool completes and the answer arrives.
    await page.wait_for("document.querySelector('#log .item.tool[data-state=done]') !== null")
    await wait_idle(page)
    seen = await items(page)
    assert [(i["kind"], i["state"]) for i in seen if i["visible"]] == [
        ("user", "done"),
        ("tool", "done"),
        ("assistant", "done"),
    ]
    assert seen[-1]["text"] == "The command printed: slept"


def open_socket(info: ServerInfo, **options: Any) -> Any:
    """A WebSocket to the server as its page opens one (the page's Origin; the token in
    the URL instead of the page's cookie)."""
    import trio_websocket

    return trio_websocket.open_websocket_url(
        f"ws://{info.host}:{info.port}/ws?token={info.token}",
        extra_headers=[(b"Origin", f"http://{info.host}:{info.port}".encode())],
        **options,
    )


class Socket:
    """A WebSocket client of the server, reading one message at a time."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.pending: list[dict[str, Any]] = []

    async def receive(self) -> dict[str, Any]:
        # A frame holds one message or a JSON array of them (a batch).
        while not self.pending:
            data = json.loads(await self.ws.get_message())
            self.pending.extend(data if isinstance(data, list) else [data])
        return self.pending.pop(0)

    async def until(self, kind: str, text: str) -> None:
        with trio.fail_after(20):
            while True:
                message = await self.receive()
                if message["type"] == kind and message.get("text") == text:
                    return


async def test_continue_starts_on_the_latest_session(tmp_path: Path) -> None:

    from pitrio.harness import SessionLockedError

    project = tmp_path / "project"
    project.mkdir()
    env = {"PITRIO_SESSIONS_DIR": str(tmp_path / "sessions"), "HOME": str(tmp_path)}

    async def start(nursery: trio.Nursery, *extra: str) -> ServerInfo:
        argv = ["--port", "0", "--cwd", str(project), *extra]
        info: ServerInfo = await nursery.start(
            lambda task_status: serve(
                argv,
                stream_fn=paced(ScriptedModel(script)),
                env=env,
                out=io.StringIO(),
                task_status=task_status,
            )
        )
        return info

    async with trio.open_nursery() as nursery:
        first = await start(nursery)
        async with open_socket(first) as ws:
            socket = Socket(ws)
            await ws.send_message('{"type": "prompt", "text": "remember me"}')
            await socket.until("replace", "You said: remember me")
        # While the first server holds the session, another cannot continue it.
        with pytest.raises(SessionLockedError, match="is open for writing elsewhere"):
            await start(nursery, "--continue")
        nursery.cancel_scope.cancel()
    async with trio.open_nursery() as nursery:
        again = await start(nursery, "--continue")
        async with open_socket(again) as ws:
            socket = Socket(ws)
            snapshot = [await socket.receive() for _ in range(2 + 2 * 2 + 1)]
        nursery.cancel_scope.cancel()
    assert [m["type"] for m in snapshot[:2]] == ["info", "reset"]
    texts = [m["text"] for m in snapshot if m["type"] == "replace"]
    assert texts == ["remember me", "You said: remember me"]
    assert snapshot[-1] == {"type": "status", "working": False}


async def test_bad_commands_get_errors_and_the_socket_stays(server: Callable[..., Any]) -> None:
    info = await server()
    async with open_socket(info) as ws:
        receive = Socket(ws).receive

        first = [await receive() for _ in range(3)]
        assert [m["type"] for m in first] == ["info", "reset", "status"]
        assert first[0]["model"] == "scripted/scripted"
        for command, expected in [
            ("not json", "a command must be JSON"),
            ("[1]", "a command is a JSON object with a string 'type'"),
            ('{"type": "bogus"}', "unknown command type 'bogus'"),
            ('{"type": "prompt", "text": "  "}', "prompt needs a non-empty 'text'"),
            ('{"type": "open", "id": "no-such-session"}', "cannot open session no-such-session"),
        ]:
            await ws.send_message(command)
            reply = await receive()
            assert reply["type"] == "error"
            assert reply["text"].startswith(expected)
        await ws.send_message('{"type": "prompt", "text": "still here?"}')
        texts: list[str] = []
        with trio.fail_after(20):
            while not texts or texts[-1] != "You said: still here?":
                message = await receive()
                if message["type"] == "replace":
                    texts.append(message["text"])


async def test_a_finished_answer_shows_code_and_never_markup(
    page: Page, server: Callable[..., Any]
) -> None:
    info = await server()
    await page.goto(info.url)
    await page.wait_for("document.getElementById('conn').textContent === ''")
    await send(page, "markdown please")
    await page.wait_for("document.querySelector('#log .item.assistant[data-state=done]') !== null")
    shown = await page.evaluate(
        "(() => { const b = document.querySelector('#log .item.assistant .body');"
        " return {inline: [...b.querySelectorAll('p > code')].map(e => e.textContent),"
        " block: [...b.querySelectorAll('pre.code')].map(e => e.textContent),"
        " tags: [...b.querySelectorAll('*')].map(e => e.tagName.toLowerCase()),"
        " text: b.innerText, title: document.title}; })()"
    )
    assert shown["inline"] == ["greet.py"]
    assert shown["block"] == ["def greet(name):\n    return f'Hello, {name}!'\n"]
    assert sorted(set(shown["tags"])) == ["code", "p", "pre", "span"]  # span: highlighting
    assert "<img src=x onerror=" in shown["text"]
    assert "<b>bold?</b>" in shown["text"]
    assert shown["title"] == "pitrio"


async def test_alt_enter_while_it_works_queues_a_follow_up(
    page: Page, server: Callable[..., Any]
) -> None:
    info = await server("--yes")
    await page.goto(info.url)
    await page.wait_for("document.getElementById('conn').textContent === ''")
    await send(page, "slow command please")
    await page.wait_for("document.querySelector('#log .item.tool.working') !== null")
    await page.type_text("#input", "later please")
    await page.press_enter(alt=True)
    queued = await page.wait_for("document.getElementById('queue').innerText")
    assert "follow-up: later please" in queued
    await page.wait_for(
        "[...document.querySelectorAll('#log .item.assistant .body')]"
        ".some(e => e.textContent === 'You said: later please')"
    )
    await wait_idle(page)
    seen = await items(page)
    # The follow-up waits for the run's answer, unlike a steering message.
    assert [(i["kind"], i["text"]) for i in seen if i["kind"] != "tool" and i["visible"]] == [
        ("user", "slow command please"),
        ("assistant", "The command printed: slept"),
        ("user", "later please"),
        ("assistant", "You said: later please"),
    ]
