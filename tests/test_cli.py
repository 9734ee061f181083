"""The ``python -m pitrio`` CLI: the offline demo, one-shot runs, JSON lines, the REPL."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import trio
from trio.testing import wait_all_tasks_blocked

from pitrio._agent import Agent
from pitrio._events import MessageUpdate, TextDeltaEvent, ToolCallEndEvent
from pitrio._messages import (
    AssistantMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    UserMessage,
)
from pitrio.cli._main import (
    DEMO_PROMPT,
    _default_model,
    event_to_wire,
    main,
    offline_model,
    repl,
    run_once,
)
from pitrio.testing import ScriptedModel, ScriptedResponse

NO_KEYS: dict[str, str] = {}


def user_texts(agent: Agent) -> list[str]:
    return [
        "".join(b.text for b in m.content if isinstance(b, TextContent))
        for m in agent.state.messages
        if isinstance(m, UserMessage) and not isinstance(m.content, str)
    ]


# -- the offline demo -----------------------------------------------------------------


def test_no_arguments_run_the_offline_demo(capsys: pytest.CaptureFixture[str]) -> None:
    """With no model configured, the demo drives every tool and answers with the output."""
    assert main([], env=NO_KEYS) == 0
    out, err = capsys.readouterr()
    for call in ("-> write(", "-> read(", "-> edit(", "-> ls(", "-> grep(", "-> bash("):
        assert call in out
    assert '-> read(path="greet.py")' in out
    assert "   Successfully wrote 113 bytes to greet.py" in out
    assert "   greet.py:1: def greet(name: str) -> str:\n" in out
    assert "<- ls\n" in out or "<- grep\n" in out  # the parallel batch's later result
    assert "   Hello, Trio! Nice to meet you." in out
    assert out.rstrip().endswith(
        "Hello, world! Nice to meet you.\nHello, Trio! Nice to meet you.\n\n"
        "(This answer came from pitrio's offline demo script, not a language model.)"
    )
    assert "pitrio offline demo: no model configured" in err
    assert "That was the offline demo." in err


def test_offline_flag_wins_over_an_api_key(capsys: pytest.CaptureFixture[str]) -> None:
    """--offline runs the demo even when a provider key is set, and says what it ignored."""
    status = main(["--offline", "-p", "fix the bug"], env={"OPENAI_API_KEY": "sk-test"})
    assert status == 0
    out, _ = capsys.readouterr()
    assert "-> bash(" in out
    assert "so it did not act on 'fix the bug'" in out


def test_offline_demo_never_writes_into_cwd(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo works in a temporary directory even when --cwd is given."""
    assert main(["--offline", "--cwd", str(tmp_path)], env=NO_KEYS) == 0
    assert list(tmp_path.iterdir()) == []
    assert "(--cwd is not used by the demo)" in capsys.readouterr().err


async def test_offline_model_follows_its_script_in_an_agent(tmp_path: Path) -> None:
    """The embedded model works with any Agent: six tool calls, then a final answer."""
    from pitrio.coding._tools import Workspace

    agent = Agent(stream_fn=offline_model(), tools=Workspace(tmp_path).tools())
    await agent.prompt(DEMO_PROMPT)
    calls = [
        c.name
        for m in agent.state.messages
        if isinstance(m, AssistantMessage)
        for c in m.tool_calls
    ]
    assert calls == ["write", "read", "edit", "ls", "grep", "bash"]
    assert "Nice to meet you" in (tmp_path / "greet.py").read_text()
    final = agent.state.messages[-1]
    assert isinstance(final, AssistantMessage)
    assert final.text.startswith("Done. I wrote `greet.py`")


# -- one-shot runs with an injected model ---------------------------------------------


def test_prompt_runs_once_with_an_injected_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """-p runs one prompt through the tools in --cwd and streams the answer."""
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("c1", "write", {"path": "out.txt", "content": "42"})),
            ScriptedResponse.text("Wrote the answer.", chunk_size=3),
        ]
    )
    status = main(["-p", "write 42", "--cwd", str(tmp_path)], stream_fn=model, env=NO_KEYS)
    assert status == 0
    assert (tmp_path / "out.txt").read_text() == "42"
    out, _ = capsys.readouterr()
    assert out == (
        '-> write(path="out.txt", content="42")\n'
        "   Successfully wrote 2 bytes to out.txt\n"
        "Wrote the answer.\n"
    )
    request = model.requests[0]
    assert f"Current working directory: {tmp_path}" in request.system_prompt
    assert [t.name for t in request.tools] == ["read", "write", "edit", "ls", "grep", "bash"]


def test_system_and_thinking_reach_the_agent(capsys: pytest.CaptureFixture[str]) -> None:
    """--system replaces the system prompt."""
    model = ScriptedModel([ScriptedResponse.text("ok")])
    assert main(["-p", "hi", "--system", "Be brief."], stream_fn=model, env=NO_KEYS) == 0
    assert model.requests[0].system_prompt == "Be brief."
    assert capsys.readouterr().out == "ok\n"


def test_thinking_is_shown_before_the_answer(capsys: pytest.CaptureFixture[str]) -> None:
    """Thinking is streamed on its own line, prefixed, before the answer text."""
    model = ScriptedModel(
        [
            ScriptedResponse(
                content=(ThinkingContent(thinking="user wants hi"), TextContent(text="hi")),
                chunk_size=4,
            )
        ]
    )
    assert main(["-p", "hi", "--thinking", "high"], stream_fn=model, env=NO_KEYS) == 0
    assert capsys.readouterr().out == "thinking: user wants hi\nhi\n"


def test_model_error_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    """A response that ends in error is shown and makes the exit status 1."""
    model = ScriptedModel([ScriptedResponse(stop_reason="error", error_message="rate limited")])
    assert main(["-p", "hi"], stream_fn=model, env=NO_KEYS) == 1
    assert capsys.readouterr().out == "error: rate limited\n"


def test_tool_errors_are_shown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A failing tool call prints its error text under the call."""
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("c1", "read", {"path": "missing.txt"})),
            ScriptedResponse.text("It is missing."),
        ]
    )
    assert main(["-p", "read it", "--cwd", str(tmp_path)], stream_fn=model, env=NO_KEYS) == 0
    out = capsys.readouterr().out
    assert '-> read(path="missing.txt")\n   error: File not found: missing.txt\n' in out


def test_prompt_from_stdin_when_not_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    """Without -p and without a terminal, stdin is the prompt."""
    model = ScriptedModel([ScriptedResponse.text("piped")])
    status = main([], stream_fn=model, env=NO_KEYS, stdin=io.StringIO("explain this\n"))
    assert status == 0
    assert "explain this" in json.dumps(
        [getattr(m, "content", "") for m in model.requests[0].messages], default=str
    )
    assert capsys.readouterr().out == "piped\n"


# -- JSON lines -----------------------------------------------------------------------


def test_json_prints_pi_wire_events(capsys: pytest.CaptureFixture[str]) -> None:
    """--json prints one parseable event per line, in Pi's camelCase wire form."""
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("c1", "ls", {})),
            ScriptedResponse.text("done"),
        ]
    )
    assert main(["-p", "list", "--json"], stream_fn=model, env=NO_KEYS) == 0
    out, err = capsys.readouterr()
    events = [json.loads(line) for line in out.splitlines()]
    types = [e["type"] for e in events]
    assert types[0] == "agent_start"
    assert types[-1] == "agent_end"
    start = next(e for e in events if e["type"] == "tool_execution_start")
    assert start == {
        "type": "tool_execution_start",
        "toolCallId": "c1",
        "toolName": "ls",
        "args": {},
    }
    end = next(e for e in events if e["type"] == "tool_execution_end")
    assert set(end) == {"type", "toolCallId", "toolName", "result", "isError"}
    assert end["result"]["content"][0]["type"] == "text"
    turn_end = next(e for e in events if e["type"] == "turn_end")
    assert turn_end["toolResults"][0]["role"] == "toolResult"
    assert err == ""


def test_event_to_wire_nests_stream_events() -> None:
    """A message_update carries its stream event tagged; a tool call block stays a block."""
    call = ToolCall(id="t1", name="ls", arguments={"path": "."})
    message = AssistantMessage(content=(call,), stop_reason="pending")
    wire = event_to_wire(
        MessageUpdate(
            message=message,
            assistant_message_event=ToolCallEndEvent(
                content_index=0, tool_call=call, partial=message
            ),
        )
    )
    update = wire["assistantMessageEvent"]
    assert update["type"] == "toolcall_end"
    assert update["contentIndex"] == 0
    assert update["toolCall"] == {
        "type": "toolCall",
        "id": "t1",
        "name": "ls",
        "arguments": {"path": "."},
    }
    assert wire["message"]["stopReason"] == "pending"
    delta = event_to_wire(
        MessageUpdate(
            message=message,
            assistant_message_event=TextDeltaEvent(content_index=0, delta="x", partial=message),
        )
    )
    assert delta["assistantMessageEvent"]["delta"] == "x"


# -- arguments ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--model", "gpt-4.1"], {}, r"--model 'gpt-4\.1' needs the form PROVIDER/MODEL_ID"),
        (
            ["--model", "nope/x"],
            {},
            r"unknown provider 'nope' in --model 'nope/x'; known providers",
        ),
        (
            ["--model", "openai/gpt-4.9"],
            {},
            r"unknown model 'gpt-4\.9' for provider 'openai'; did you mean 'openai/gpt-4",
        ),
        (
            ["--model", "openai/gpt-4.1"],
            {},
            r"no API key for provider 'openai': set OPENAI_API_KEY$",
        ),
        (["--base-url", "http://127.0.0.1:8080/v1"], {}, r"--base-url needs --model MODEL_ID"),
        (
            ["--base-url", "127.0.0.1:8080", "--model", "m"],
            {},
            r"--base-url must be an http:// or https:// URL .*; got '127\.0\.0\.1:8080'$",
        ),
        (
            ["--offline", "--model", "openai/gpt-4.1"],
            {},
            r"--offline runs the embedded demo model; drop --model/--base-url",
        ),
        (["--cwd", "/no/such/dir"], {}, r"--cwd '/no/such/dir' is not a directory"),
        (["-p", "   "], {}, r"-p needs a non-empty prompt"),
        (["--thinking", "huge"], {}, r"argument --thinking: invalid choice: 'huge'"),
        (["--bogus"], {}, r"unrecognized arguments: --bogus"),
    ],
)
def test_bad_arguments_exit_2_with_a_fix(
    argv: list[str], env: dict[str, str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each bad argument names the problem and how to fix it, with exit status 2."""
    assert main(argv, env=env) == 2
    out, err = capsys.readouterr()
    assert out == ""
    last = err.strip().splitlines()[-1]
    assert last.startswith("pitrio: error: ")
    assert __import__("re").search(message, last), last


def test_empty_stdin_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """No -p, no terminal and nothing on stdin: exit 2 with what to do."""
    model = ScriptedModel([])
    assert main([], stream_fn=model, env=NO_KEYS, stdin=io.StringIO("")) == 2
    assert "no prompt: pass -p PROMPT, pipe a prompt on stdin" in capsys.readouterr().err
    assert model.calls == 0


def test_help_and_list_models(capsys: pytest.CaptureFixture[str]) -> None:
    """--help exits 0; --list-models prints provider/id lines."""
    assert main(["--help"]) == 0
    assert "--base-url URL" in capsys.readouterr().out
    assert main(["--list-models"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "openai/gpt-4.1" in lines
    assert "anthropic/claude-sonnet-4-5" in lines


def test_an_api_key_selects_a_default_model() -> None:
    """A provider key in the environment picks that provider's default model."""
    assert _default_model({}) is None
    openai = _default_model({"OPENAI_API_KEY": "sk"})
    assert openai is not None
    assert (openai.provider, openai.id) == ("openai", "gpt-4.1")
    both = _default_model({"OPENAI_API_KEY": "sk", "ANTHROPIC_API_KEY": "sk-ant"})
    assert both is not None
    assert (both.provider, both.id) == ("anthropic", "claude-sonnet-4-5")


# -- a real OpenAI-compatible server on loopback --------------------------------------


@pytest.fixture
def chat_server() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A minimal chat-completions server that streams one short answer."""
    seen: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            seen.append(
                {
                    "path": self.path,
                    "auth": self.headers.get("Authorization"),
                    "body": json.loads(body),
                }
            )
            chunks = [
                {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "hi "}}]},
                {"choices": [{"index": 0, "delta": {"content": "from loopback"}}]},
                {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            ]
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for chunk in chunks:
                payload = {"id": "c", "object": "chat.completion.chunk", "model": "m", **chunk}
                self.wfile.write(f"data: {json.dumps(payload)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_base_url_talks_to_an_openai_compatible_server(
    chat_server: tuple[str, list[dict[str, Any]]], capsys: pytest.CaptureFixture[str]
) -> None:
    """--base-url --model streams from a local server, with PITRIO_API_KEY as the key."""
    url, seen = chat_server
    argv = ["--base-url", url, "--model", "local-model", "-p", "hello"]
    assert main(argv, env={"PITRIO_API_KEY": "secret"}) == 0
    assert capsys.readouterr().out == "hi from loopback\n"
    assert seen[0]["path"] == "/v1/chat/completions"
    assert seen[0]["auth"] == "Bearer secret"
    body = seen[0]["body"]
    assert body["model"] == "local-model"
    assert body["stream"] is True
    assert [t["function"]["name"] for t in body["tools"]] == [
        "read",
        "write",
        "edit",
        "ls",
        "grep",
        "bash",
    ]


# -- the REPL and interrupts (virtual time) -------------------------------------------


async def test_repl_runs_prompts_and_steers_lines_typed_during_a_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A line typed while a run is active is queued with steer() and delivered."""
    model = ScriptedModel(
        [ScriptedResponse.text("first answer", delay=10), ScriptedResponse.text("second answer")]
    )
    agent = Agent(stream_fn=model)
    send_line, lines = trio.open_memory_channel[str](10)
    _send_interrupt, interrupts = trio.open_memory_channel[object](10)
    ui = io.StringIO()
    results: list[int] = []

    async def run_repl() -> None:
        results.append(await repl(agent, lines, interrupts, ui))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_repl)
        await send_line.send("first\n")
        await wait_all_tasks_blocked()
        assert agent.is_running
        await send_line.send("second\n")
        await wait_all_tasks_blocked()
        assert len(agent.queued_steering) == 1
        await send_line.aclose()
    assert results == [0]
    assert model.calls == 2
    assert user_texts(agent) == ["first", "second"]
    assert "[queued: delivered after the current step]" in ui.getvalue()


async def test_repl_interrupt_aborts_then_exits(autojump_clock: trio.testing.MockClock) -> None:
    """Ctrl-C aborts the active run and drops queued lines; Ctrl-C when idle exits 130."""
    model = ScriptedModel([ScriptedResponse.text("slow", delay=100)])
    agent = Agent(stream_fn=model)
    send_line, lines = trio.open_memory_channel[str](10)
    send_interrupt, interrupts = trio.open_memory_channel[object](10)
    ui = io.StringIO()
    results: list[int] = []

    async def run_repl() -> None:
        results.append(await repl(agent, lines, interrupts, ui, first="go"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_repl)
        await wait_all_tasks_blocked()
        agent.steer("later")
        await send_interrupt.send(None)
        await wait_all_tasks_blocked()
        assert not agent.is_running
        assert "[aborted (1 queued line(s) dropped); Ctrl-C again or Ctrl-D exits]" in ui.getvalue()
        assert not results
        await send_interrupt.send(None)
    assert results == [130]
    last = agent.state.messages[-1]
    assert isinstance(last, AssistantMessage)
    assert last.stop_reason == "aborted"
    assert trio.current_time() < 100  # the slow answer was cut short
    send_line.close()


async def test_run_once_interrupt_aborts_with_status_130(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """In a one-shot run the first Ctrl-C aborts; the run settles and the status is 130."""
    agent = Agent(stream_fn=ScriptedModel([ScriptedResponse.text("slow", delay=100)]))
    send_interrupt, interrupts = trio.open_memory_channel[object](10)
    results: list[int] = []

    async def go() -> None:
        results.append(await run_once(agent, "go", interrupts))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(go)
        await wait_all_tasks_blocked()
        await send_interrupt.send(None)
    assert results == [130]
    assert agent.state.messages[-1].stop_reason == "aborted"


def test_interactive_flag_reads_prompts_from_stdin(capsys: pytest.CaptureFixture[str]) -> None:
    """-i reads prompts line by line until end of input, then exits 0."""
    model = ScriptedModel([ScriptedResponse.text("one"), ScriptedResponse.text("two")])
    status = main(["-i"], stream_fn=model, env=NO_KEYS, stdin=io.StringIO("a\n"))
    assert status == 0
    out = capsys.readouterr().out
    assert "scripted/scripted in" in out
    assert "one" in out
    assert model.calls == 1


# -- the module entry point -----------------------------------------------------------


def test_python_dash_m_pitrio_runs_the_demo(tmp_path: Path) -> None:
    """``python -m pitrio`` in a fresh process prints the demo transcript and exits 0."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "pitrio"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "-> bash(" in done.stdout
    assert "Hello, Trio! Nice to meet you." in done.stdout
    assert list(tmp_path.iterdir()) == []
