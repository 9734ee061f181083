"""The page's model and thinking switches and its slash commands.

In headless chromium (the switches, /help, a template, an unknown command, /resume's
picker) and over a bare WebSocket for the rest of the protocol (cheaper than a browser).
Every request the model gets is recorded, so "no model request" is checked, not assumed.
"""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from pitrio import AssistantMessageEventStream, Context, Model, StreamOptions
from pitrio.testing import ScriptedModel, ScriptedResponse
from pitrio.web._serve import ServerInfo, serve

from ._cdp import Page
from .test_web import Socket, _last_user, items, open_socket, paced, script, send, wait_idle

SMALL = Model(id="small", name="Small", api="scripted", provider="scripted")
THINKER = Model(id="thinker", name="Thinker", api="scripted", provider="scripted", reasoning=True)
DEEP = Model(
    id="deep",
    name="Deep",
    api="scripted",
    provider="scripted",
    reasoning=True,
    thinking_level_map={"minimal": None, "xhigh": "xhigh"},
)
TEMPLATE = "---\ndescription: Review one file\n---\nReview $1 for bugs, then say $@.\n"


BIG = "word " * 25_000  # ~31k tokens by the harness's estimate: enough to compact


def answer(context: Context) -> ScriptedResponse:
    """test_web's script, plus a long answer to "big" (the summary request that
    compacting makes is answered by the script's echo)."""
    if _last_user(context) == "big":
        return ScriptedResponse.text(BIG, chunk_size=len(BIG))
    return script(context)


@attrs.define
class Requests:
    """The model requests the server made: (model id, reasoning level) each."""

    seen: list[tuple[str, str | None]] = attrs.Factory(list)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    """``pitrio serve`` on the scripted model ``scripted/small``, offering three models,
    with a prompt template ``/review`` in the project."""
    project = tmp_path / "project"
    (project / ".pitrio" / "prompts").mkdir(parents=True)
    (project / ".pitrio" / "prompts" / "review.md").write_text(TEMPLATE)
    env = {"PITRIO_SESSIONS_DIR": str(tmp_path / "sessions"), "HOME": str(tmp_path)}
    inner = paced(ScriptedModel(answer))

    async with trio.open_nursery() as nursery:

        async def start(*extra: str) -> tuple[ServerInfo, Requests]:
            requests = Requests()

            def stream_fn(
                model: Model, context: Context, options: StreamOptions
            ) -> AssistantMessageEventStream | Awaitable[AssistantMessageEventStream]:
                requests.seen.append((model.id, options.reasoning))
                return inner(model, context, options)

            argv = ["--port", "0", "--cwd", str(project), "--model", "scripted/small", *extra]
            info: ServerInfo = await nursery.start(
                lambda task_status: serve(
                    argv,
                    stream_fn=stream_fn,
                    models=[SMALL, THINKER, DEEP],
                    env=env,
                    out=io.StringIO(),
                    task_status=task_status,
                )
            )
            return info, requests

        yield start
        nursery.cancel_scope.cancel()


def recorded_changes(tmp_path: Path) -> list[tuple[str, str]]:
    """The model and thinking level after each change the session file recorded.

    The CLI's sessions are Pi's coding-agent files: a change of the lane's configuration
    is a ``model_change`` and/or a ``thinking_level_change`` line, as ``pi`` writes them
    (the first configuration: both).
    """
    files = list((tmp_path / "sessions").rglob("*.jsonl"))
    assert len(files) == 1, files
    model: str | None = None
    thinking: str | None = None
    out: list[tuple[str, str]] = []
    for line in files[0].read_text().splitlines()[1:]:
        record = json.loads(line)
        if record["type"] == "model_change":
            model = f"{record['provider']}/{record['modelId']}"
        elif record["type"] == "thinking_level_change":
            thinking = record["thinkingLevel"]
        else:
            continue
        if model is not None and thinking is not None:
            out.append((model, thinking))
    return out


async def reopened(tmp_path: Path, session_id: str) -> tuple[str | None, str | None]:
    """The session's model and thinking level, as a reader of the file sees them."""
    from pitrio.harness import JsonlSessionStore

    session = await JsonlSessionStore(str(tmp_path / "sessions")).open(session_id, read_only=True)
    try:
        model = session.model
        name = None if model is None else f"{model.provider}/{model.model_id}"
        return name, session.thinking_level
    finally:
        await session.close()


OUTPUTS = """JSON.stringify([...document.querySelectorAll('#log .item.output')].map(e => ({
  command: e.dataset.command, error: e.classList.contains('error'),
  text: e.querySelector('.body').textContent})))"""


async def outputs(page: Page) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = json.loads(await page.evaluate(OUTPUTS))
    return data


async def open_page(page: Page, info: ServerInfo) -> None:
    await page.goto(info.url)
    await page.wait_for("document.getElementById('conn').textContent === ''")
    await page.wait_for("document.getElementById('model').options.length === 3")


async def select(page: Page, selector: str, value: str) -> None:
    """Choose an option as a person would: focus the select, pick, change event."""
    await page.evaluate(
        f"(() => {{ const s = document.querySelector({json.dumps(selector)}); s.focus();"
        f" s.value = {json.dumps(value)};"
        " s.dispatchEvent(new Event('change', {bubbles: true})); })()"
    )


async def test_model_and_thinking_switches_reach_the_session_and_the_next_request(
    page: Page, server: Callable[..., Any], tmp_path: Path
) -> None:
    info, requests = await server()
    await open_page(page, info)
    options = await page.evaluate("[...document.getElementById('model').options].map(o => o.value)")
    assert options == ["scripted/small", "scripted/thinker", "scripted/deep"]
    assert await page.evaluate("document.getElementById('model').value") == "scripted/small"
    # A model without reasoning: only "off", and the switch is disabled.
    assert await page.evaluate(
        "[...document.getElementById('thinking').options].map(o => o.value)"
    ) == ["off"]
    assert await page.evaluate("document.getElementById('thinking').disabled") is True

    await select(page, "#model", "scripted/thinker")
    levels = await page.wait_for(
        "(() => { const o = [...document.getElementById('thinking').options].map(o => o.value);"
        " return o.length > 1 && o; })()"
    )
    assert levels == ["off", "minimal", "low", "medium", "high"]
    assert await page.evaluate("document.getElementById('thinking').disabled") is False
    await select(page, "#thinking", "high")
    await page.wait_for("document.querySelectorAll('#log .item.output').length === 2")
    assert [(o["command"], o["text"], o["error"]) for o in await outputs(page)] == [
        ("/model", "model: scripted/thinker", False),
        ("/thinking", "thinking: high", False),
    ]
    assert await page.evaluate("document.getElementById('model').value") == "scripted/thinker"
    assert await page.evaluate("document.getElementById('thinking').value") == "high"

    # The next request goes to the new model with the new level...
    await send(page, "hello there")
    await page.wait_for(
        "[...document.querySelectorAll('#log .item.assistant .body')]"
        ".some(e => e.textContent === 'You said: hello there')"
    )
    await wait_idle(page)
    assert requests.seen == [("thinker", "high")]
    # ...the session records both changes, as the terminal's /model and /thinking do...
    assert recorded_changes(tmp_path) == [("scripted/thinker", "off"), ("scripted/thinker", "high")]
    session_id = await page.evaluate("location.hash.slice(9)")
    assert await reopened(tmp_path, session_id) == ("scripted/thinker", "high")
    # ...and a reload shows them again.
    await page.reload()
    await page.wait_for("document.getElementById('model').value === 'scripted/thinker'")
    assert await page.evaluate("document.getElementById('thinking').value") == "high"

    # A model without "high"'s neighbour "minimal" keeps "high"; one without reasoning
    # clamps to "off", and says so.
    await select(page, "#model", "scripted/small")
    await page.wait_for("document.getElementById('thinking').value === 'off'")
    last = (await outputs(page))[-1]
    assert last["text"] == "model: scripted/small (it has no thinking level high: now off)"


async def test_switches_are_disabled_while_the_agent_works(
    page: Page, server: Callable[..., Any]
) -> None:
    info, _ = await server()
    await open_page(page, info)
    await send(page, "long question")
    await page.wait_for("document.body.classList.contains('working')")
    assert await page.evaluate("document.getElementById('model').disabled") is True
    # A command that changes the model is refused while it works (the terminal's rule).
    await send(page, "/model scripted/deep")
    await page.wait_for("document.querySelectorAll('#log .item.output').length === 1")
    refused = (await outputs(page))[0]
    assert refused["error"] is True
    assert refused["text"] == "/model waits until the agent is idle (Stop aborts it)"
    await page.click("#stop")
    await wait_idle(page)
    assert await page.evaluate("document.getElementById('model').disabled") is False
    assert await page.evaluate("document.getElementById('model').value") == "scripted/small"


async def test_help_lists_the_commands_without_a_model_request(
    page: Page, server: Callable[..., Any]
) -> None:
    info, requests = await server()
    await open_page(page, info)
    # Typing "/" shows the matching commands under the input.
    await page.type_text("#input", "/c")
    hint = await page.wait_for(
        "!document.getElementById('hint').hidden && document.getElementById('hint').innerText"
    )
    assert [line.split()[0] for line in hint.splitlines()] == ["/compact", "/clear", "/cost"]
    await page.evaluate("document.getElementById('input').value = ''")
    await send(page, "/help")
    await page.wait_for("document.querySelectorAll('#log .item.output').length === 1")
    shown = (await outputs(page))[0]
    assert shown["command"] == "/help"
    assert shown["error"] is False
    names = [line.split()[0] for line in shown["text"].splitlines() if line.startswith("  /")]
    assert names == [
        "/help",
        "/model",
        "/thinking",
        "/tools",
        "/session",
        "/resume",
        "/fork",
        "/compact",
        "/clear",
        "/cost",
        "/review",
    ]
    assert "Review one file" in shown["text"]
    assert await page.evaluate("document.getElementById('input').value") == ""
    await trio.sleep(0.3)
    assert requests.seen == []
    seen = [(i["kind"], i["title"], i["text"], i["visible"]) for i in await items(page)]
    assert seen == [("output", "/help", shown["text"], True)]  # no user bubble, no answer


async def test_a_template_expands_into_the_prompt(page: Page, server: Callable[..., Any]) -> None:
    info, requests = await server()
    await open_page(page, info)
    await send(page, "/review greet.py thanks")
    expanded = "Review greet.py for bugs, then say greet.py thanks."
    await page.wait_for(
        "[...document.querySelectorAll('#log .item.assistant .body')]"
        f".some(e => e.textContent === {json.dumps('You said: ' + expanded)})"
    )
    await wait_idle(page)
    seen = await items(page)
    assert [(i["kind"], i["text"]) for i in seen if i["visible"]] == [
        ("user", expanded),
        ("assistant", f"You said: {expanded}"),
    ]
    assert requests.seen == [("small", None)]


async def test_an_unknown_command_is_refused_in_the_page(
    page: Page, server: Callable[..., Any]
) -> None:
    info, requests = await server()
    await open_page(page, info)
    await send(page, "/deploy now")
    await page.wait_for("document.querySelectorAll('#log .item.output').length === 1")
    shown = (await outputs(page))[0]
    assert shown == {
        "command": "/deploy",
        "error": True,
        "text": "unknown command /deploy: nothing was sent to the model (/help lists the commands)",
    }
    await trio.sleep(0.3)
    assert requests.seen == []
    assert [i["kind"] for i in await items(page)] == ["output"]


async def test_resume_lists_the_sessions_to_pick_one(
    page: Page, server: Callable[..., Any]
) -> None:
    info, _ = await server()
    await open_page(page, info)
    await send(page, "first conversation")
    await page.wait_for("document.querySelectorAll('#log .item.assistant[data-state=done]').length")
    await wait_idle(page)
    first = await page.wait_for("location.hash.includes('session=') && location.hash.slice(9)")
    await select(page, "#model", "scripted/thinker")  # recorded in the first session
    await page.wait_for("document.querySelectorAll('#log .item.output').length === 1")
    await send(page, "/clear")
    await page.wait_for(f"!location.hash.endsWith({json.dumps(first)})")
    await page.wait_for("document.querySelectorAll('#log .item.output').length === 1")
    assert (await outputs(page))[0]["text"].startswith("new session ")
    await select(page, "#model", "scripted/deep")  # recorded in the new one
    await page.wait_for("document.querySelectorAll('#log .item.output').length === 2")
    await send(page, "/resume")
    picker = "#log .item.output ol.picker li"
    await page.wait_for(f"document.querySelectorAll({json.dumps(picker)}).length === 2")
    titles = await page.evaluate(
        f"[...document.querySelectorAll({json.dumps(picker + ' .session-title')})]"
        ".map(e => e.textContent)"
    )
    assert titles == ["(no messages yet)", "first conversation"]
    await page.click(f"{picker}[data-id='{first}']")
    await page.wait_for(f"location.hash.endsWith({json.dumps(first)})")
    await page.wait_for(
        "[...document.querySelectorAll('#log .item.assistant .body')]"
        ".some(e => e.textContent === 'You said: first conversation')"
    )
    # The header shows the first session's model again.
    assert await page.evaluate("document.getElementById('model').value") == "scripted/thinker"


# --------------------------------------------------------------------------------------
# The same handling over a bare WebSocket


async def _connect(info: ServerInfo) -> Any:
    return open_socket(info)


async def _command(socket: Socket, ws: Any, text: str) -> dict[str, Any]:
    """Send a slash command as the page does (a prompt) and return its output."""
    await ws.send_message(json.dumps({"type": "prompt", "text": text}))
    with trio.fail_after(20):
        while True:
            message = await socket.receive()
            if message["type"] in ("output", "error"):
                return message


async def test_commands_over_the_socket(server: Callable[..., Any], tmp_path: Path) -> None:
    info, requests = await server()
    with trio.fail_after(60):
        await _socket_session(info, requests, tmp_path)
    # Only the changes that were made (the refused ones left no trace).
    assert recorded_changes(tmp_path) == [
        ("scripted/deep", "off"),
        ("scripted/deep", "xhigh"),
        ("scripted/small", "xhigh"),
        ("scripted/small", "off"),
    ]


async def _socket_session(info: ServerInfo, requests: Requests, tmp_path: Path) -> None:
    async with await _connect(info) as ws:
        socket = Socket(ws)
        hello = [await socket.receive() for _ in range(3)]
        assert [m["type"] for m in hello] == ["info", "reset", "status"]
        first = hello[0]
        assert first["model"] == "scripted/small"
        assert [m["id"] for m in first["models"]] == [
            "scripted/small",
            "scripted/thinker",
            "scripted/deep",
        ]
        assert first["thinking"] == "off"
        assert first["thinkingLevels"] == ["off"]
        assert ["/help", "this list"] in first["commands"]
        assert ["/review ARGS", "Review one file"] in first["commands"]
        session_id = hello[1]["session"]

        shown = await _command(socket, ws, "/model")
        assert shown["text"].splitlines() == [
            "model: scripted/small (thinking off)",
            "available (/model PROVIDER/ID, or the Model menu):",
            "* scripted/small  Small",
            "  scripted/thinker  Thinker",
            "  scripted/deep  Deep",
        ]
        for text, expected in [
            ("/model nope/none", "unknown model 'nope/none'; /model lists the 3 available"),
            ("/thinking high", "scripted/small has no thinking level 'high' (levels: off)"),
            ("/fork", "nothing to fork yet: this session has no messages"),
            ("/quit", "/quit is for the terminal: close the tab to leave"),
        ]:
            reply = await _command(socket, ws, text)
            assert reply["command"] == text.split()[0]
            assert reply["error"] is True
            assert reply["text"].startswith(expected), reply

        shown = await _command(socket, ws, "/model deep")  # the current provider's
        assert shown == {
            "type": "output",
            "command": "/model",
            "text": "model: scripted/deep",
            "error": False,
        }
        # In the file at once, not only at the next turn's end.
        assert recorded_changes(tmp_path) == [("scripted/deep", "off")]
        info_now = await socket.receive()
        assert info_now["type"] == "info"
        assert info_now["model"] == "scripted/deep"
        assert info_now["thinkingLevels"] == ["off", "low", "medium", "high", "xhigh"]
        shown = await _command(socket, ws, "/thinking xhigh")
        assert shown["text"] == "thinking: xhigh"
        assert (await socket.receive())["thinking"] == "xhigh"  # every page's switch
        await ws.send_message('{"type": "set_thinking", "level": "max"}')
        refused = await socket.receive()
        assert refused["type"] == "output"
        assert refused["error"] is True
        assert refused["text"] == (
            "scripted/deep has no thinking level 'max' (levels: off, low, medium, high, xhigh)"
        )
        restored = await socket.receive()  # the refusing page's switch goes back
        assert (restored["type"], restored["thinking"]) == ("info", "xhigh")
        await ws.send_message('{"type": "set_model", "model": 3}')
        assert (await socket.receive())["text"] == "set_model needs a 'model' string"
        await ws.send_message('{"type": "set_model", "model": "scripted/small"}')
        shown = await socket.receive()
        assert shown["text"] == "model: scripted/small (it has no thinking level xhigh: now off)"

        shown = await _command(socket, ws, "/compact")
        assert shown["text"] == "nothing to compact yet"
        shown = await _command(socket, ws, "/session")
        lines = shown["text"].splitlines()
        assert lines[0] == f"session {session_id}"
        assert lines[1].startswith("  file: ")
        assert lines[1].endswith(".jsonl")
        assert lines[2:] == [
            f"  cwd: {tmp_path / 'project'}",
            "  model: scripted/small, thinking off",
            "  messages: 0, entries: 0",
        ]
        shown = await _command(socket, ws, "/tools")
        tools = [line.split()[0] for line in shown["text"].splitlines()[1:]]
        assert sorted(tools) == ["bash", "edit", "read", "write"]
        assert "bash   asks first" in shown["text"]
        shown = await _command(socket, ws, "/cost")
        assert shown["text"] == (
            "this session: input 0, output 0, cache read 0, cache write 0 tokens; $0.0000"
        )
        assert requests.seen == []

        # Commands that need an idle agent say so while it works; /help does not wait.
        await ws.send_message('{"type": "prompt", "text": "long question"}')
        for text in ("/clear", "/fork", "/resume x", "/compact", "/thinking off"):
            reply = await _command(socket, ws, text)
            name = text.split()[0]
            assert reply["text"] == f"{name} waits until the agent is idle (Stop aborts it)"
        assert (await _command(socket, ws, "/help"))["error"] is False
        # A template typed while it works steers with its expansion, as in the terminal.
        await ws.send_message('{"type": "prompt", "text": "/review a.py now"}')
        with trio.fail_after(20):
            while (queued := await socket.receive())["type"] != "queued":
                pass
        assert queued == {
            "type": "queued",
            "mode": "steer",
            "text": "Review a.py for bugs, then say a.py now.",
        }
        await ws.send_message('{"type": "abort"}')
        # Settled before the session file is read.
        while (await socket.receive()) != {"type": "status", "working": False}:
            pass


@pytest.mark.parametrize("stop", [False, True])
async def test_compact_summarises_in_the_background_and_reports(
    server: Callable[..., Any], stop: bool
) -> None:
    info, requests = await server()
    with trio.fail_after(60):
        async with await _connect(info) as ws:
            socket = Socket(ws)
            for prompt in ("big", "and then?"):
                await ws.send_message(json.dumps({"type": "prompt", "text": prompt}))
                # Working, then idle: the status sent on connecting is not the prompt's end.
                while (await socket.receive()) != {"type": "status", "working": True}:
                    pass
                while (await socket.receive()) != {"type": "status", "working": False}:
                    pass
            assert len(requests.seen) == 2
            await ws.send_message('{"type": "prompt", "text": "/compact keep it short"}')
            seen: list[dict[str, Any]] = []
            while not seen or seen[-1]["type"] != "output":
                seen.append(await socket.receive())
                if stop and seen[-1] == {"type": "status", "working": True}:
                    await ws.send_message('{"type": "abort"}')  # the Stop button
            if stop:
                assert seen[-1]["text"] == "not compacted (aborted)"
                assert seen[-1]["error"] is True
                assert await socket.receive() == {"type": "status", "working": False}
                return
            # A notice and "working" while it runs (Stop would abort it)...
            notices = [m["text"] for m in seen if m["type"] == "append"]
            assert notices[0] == "Compacting the conversation (manual)..."
            assert notices[-1].startswith("Compacted the conversation from ~")
            assert {"type": "status", "working": True} in seen
            assert seen[-1] == {
                "type": "output",
                "command": "/compact",
                "text": "compacted",
                "error": False,
            }
            # ...then idle again, and the summary request was the third model request.
            assert await socket.receive() == {"type": "status", "working": False}
            assert len(requests.seen) == 3


def test_offered_models_follow_the_configuration(tmp_path: Path) -> None:
    from pitrio.providers import Models
    from pitrio.web._commands import thinking_levels
    from pitrio.web._serve import _settings, offered_models

    env = {"ANTHROPIC_API_KEY": "sk-test", "HOME": str(tmp_path)}
    cwd = ["--cwd", str(tmp_path)]
    # A catalog model: its provider's models (the server's key is that provider's).
    settings, _ = _settings(cwd, env, None)
    assert settings.model.provider == "anthropic"
    offered = offered_models(settings)
    assert [m.id for m in offered] == [m.id for m in Models(env={}).list("anthropic")]
    assert settings.model in offered
    assert thinking_levels(settings.model)[0] == "off"
    assert len(thinking_levels(settings.model)) > 1
    # Fixed models: a --base-url server, the offline replay.
    base, _ = _settings([*cwd, "--base-url", "http://127.0.0.1:9/v1", "--model", "tiny"], env, None)
    assert offered_models(base) == (base.model,)
    assert thinking_levels(base.model) == ["off"]
    thinking, _ = _settings(
        [*cwd, "--base-url", "http://127.0.0.1:9/v1", "--model", "tiny", "--thinking", "low"],
        env,
        None,
    )
    assert thinking_levels(thinking.model) == ["off", "minimal", "low", "medium", "high"]
    offline, _ = _settings(["--offline"], {"HOME": str(tmp_path)}, None)
    assert offered_models(offline) == (offline.model,)


async def test_a_resumed_session_brings_back_its_model_and_thinking(
    server: Callable[..., Any],
) -> None:
    info, _ = await server()
    with trio.fail_after(30):
        async with await _connect(info) as ws:
            socket = Socket(ws)
            hello = [await socket.receive() for _ in range(3)]
            first = hello[1]["session"]

            async def state() -> str:
                shown = await _command(socket, ws, "/model")
                first_line: str = shown["text"].splitlines()[0]
                return first_line

            await _command(socket, ws, "/model thinker")
            await _command(socket, ws, "/thinking high")
            await _command(socket, ws, "/clear")  # a new session keeps them...
            assert await state() == "model: scripted/thinker (thinking high)"
            await _command(socket, ws, "/model small")  # ...until changed there
            assert await state() == "model: scripted/small (thinking off)"
            reply = await _command(socket, ws, f"/resume {first}")
            assert reply["text"] == f"resumed session {first} (0 messages)"
            # The first session's model and level, for the header and the next request.
            assert await state() == "model: scripted/thinker (thinking high)"
