"""The ``python -m pitrio`` CLI in-process: arguments, the offline replay, -p, json,
consent, sessions, error hints, a loopback OpenAI-compatible server.

The terminal itself (a real pseudo-terminal) is driven in tests/cli/test_terminal.py;
json and rpc modes through pipes in tests/cli/test_modes.py.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from pitrio import TextContent, ToolCall
from pitrio.cli import main
from pitrio.cli._app import event_to_wire
from pitrio.cli._args import build_parser
from pitrio.cli._consent import Consent, Policy, PolicyError, load_policy
from pitrio.cli._offline import DEMO_PROMPT, OfflineStreamFn
from pitrio.harness import ToolCallEvent
from pitrio.testing import ScriptedModel, ScriptedResponse


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """No keys; sessions, config and history under tmp_path."""
    return {
        "PITRIO_SESSIONS_DIR": str(tmp_path / "sessions"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "HOME": str(tmp_path / "home"),
    }


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "notes.txt").write_text("first line\n")
    return root


def run_cli(
    argv: list[str], env: dict[str, str], *, stream_fn: Any = None, stdin: str = ""
) -> tuple[int, str]:
    out = io.StringIO()
    status = main(argv, stream_fn=stream_fn, env=env, stdin=io.StringIO(stdin), stdout=out)
    return status, out.getvalue()


def edit_then_answer() -> ScriptedModel:
    """Edits notes.txt, then answers with what the edit returned."""

    def respond(context: Any) -> ScriptedResponse:
        last = context.messages[-1]
        if last.role == "user":
            call = ToolCall(
                id="c1",
                name="edit",
                arguments={"path": "notes.txt", "oldText": "first", "newText": "second"},
            )
            return ScriptedResponse(content=(TextContent(text="Editing."), call))
        result = "".join(b.text for b in last.content if isinstance(b, TextContent))
        return ScriptedResponse.text(f"tool said: {result}")

    return ScriptedModel(respond, record_requests=False)


# -- arguments ------------------------------------------------------------------------


def test_help_documents_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """--help names every option the parser has, with a help text."""
    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    parser = build_parser()
    for action in parser._actions:
        for flag in action.option_strings:
            assert flag in text
        assert action.help, action.option_strings


def test_options_are_not_abbreviated(
    env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """--mod is not read as --model or --mode (allow_abbrev=False): a usage error."""
    status, _ = run_cli(["--mod", "rpc", "-p", "x"], env)
    assert status == 2
    assert "unrecognized arguments: --mod" in capsys.readouterr().err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("pitrio ")


def test_list_models_survives_a_closed_pipe() -> None:
    """``pitrio --list-models | head -1``: no BrokenPipeError traceback, status 0."""
    proc = subprocess.run(
        f"{sys.executable} -m pitrio --list-models | head -1",
        shell=True,
        capture_output=True,
        text=True,
        check=True,
    )
    assert proc.stdout.count("\n") == 1
    assert proc.stdout.split()[:3] == ["provider", "model", "context"]  # the header
    assert "Traceback" not in proc.stderr
    assert "BrokenPipe" not in proc.stderr


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--base-url", "http://x/v1", "-p", "hi"], "--base-url needs --model MODEL_ID"),
        (["--base-url", "x", "--model", "m", "-p", "hi"], "must be an http:// or https://"),
        (["--model", "nope/x", "-p", "hi"], "unknown provider 'nope'"),
        (["--model", "openai/gpt-4.1", "-p", "hi"], "set OPENAI_API_KEY, or add [keys] openai"),
        (["--demo", "--model", "openai/gpt-4.1"], "--demo replays the recorded demo"),
        (["--compat", "a=b", "-p", "hi"], "add --base-url URL"),
        (["--policy", "/nonexistent/policy.toml", "-p", "hi"], "does not exist"),
        (["--demo", "--thinking", "high"], "--thinking needs a model"),
        (["--continue", "--no-session", "-p", "x"], "not allowed with argument"),
    ],
)
def test_bad_arguments_exit_2_saying_what_to_do(
    env: dict[str, str], capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    status, _ = run_cli(argv, env)
    assert status == 2
    assert message in capsys.readouterr().err


# -- the offline replay ---------------------------------------------------------------


def test_offline_replay_fixes_the_sample_project_with_real_tools(
    env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """No model configured: the recorded session replays on a copy of the sample; the
    check really fails first and passes after the edit; the banner says what it is. Not
    a terminal: the transcript is on stderr, stdout has the last answer (as ``pi -p``)."""
    status, out = run_cli([], env)
    assert status == 0
    err = capsys.readouterr().err
    assert "offline replay" in err
    assert "not a language model" in err
    assert "AssertionError: greet('world') returned 'Hello world'" in err
    assert '+    return f"Hello, {name}!"' in err
    assert err.count("all checks passed") >= 2  # the bash output, then the answer
    assert "tokens in" in err
    assert out.startswith("Fixed. **`greet.py`**")
    assert out.endswith("not a language model.)*\n")
    assert "AssertionError" not in out


def test_offline_flag_wins_over_an_api_key(
    env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """--demo never goes online, whatever keys are set."""
    status, out = run_cli(["--demo"], {**env, "OPENAI_API_KEY": "sk-real"})
    assert status == 0
    assert "all checks passed" in out
    assert "offline replay" in capsys.readouterr().err


def test_offline_replay_never_touches_the_sample_or_cwd(
    env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pitrio.cli._offline import sample_project

    monkeypatch.chdir(tmp_path)
    before = Path(sample_project(), "greet.py").read_text()
    listing = sorted(p.name for p in tmp_path.iterdir())
    status, out = run_cli(["--demo"], env)
    assert status == 0
    assert "all checks passed" in out
    assert Path(sample_project(), "greet.py").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == listing


async def test_offline_stream_answers_after_the_recording_ends() -> None:
    """Past the recording, a request gets a text saying so (not an error)."""
    from pitrio import Context
    from pitrio.cli._offline import OFFLINE_MODEL

    fn = OfflineStreamFn(delay=0)
    while fn.remaining:
        async with fn(OFFLINE_MODEL, Context(messages=[]), _options()) as stream:
            await stream.result()
    message = await fn(OFFLINE_MODEL, Context(messages=[]), _options()).result()
    assert message.stop_reason == "stop"
    assert "offline recording has ended" in message.content[0].text  # type: ignore[union-attr]


def _options() -> Any:
    from pitrio import StreamOptions

    return StreamOptions()


def test_demo_prompt_is_what_the_recording_answers() -> None:
    from pitrio.cli._offline import recording_path

    first = json.loads(Path(recording_path()).read_text().splitlines()[1])
    assert first["request"]["messages"][0]["content"][0]["text"] == DEMO_PROMPT


# -- -p and consent -------------------------------------------------------------------


def test_print_mode_refuses_mutating_tools_without_yes(env: dict[str, str], project: Path) -> None:
    """-p cannot ask: the edit ends as an error result naming --yes, the file is unchanged."""
    status, out = run_cli(
        ["--cwd", str(project), "-p", "edit it"], env, stream_fn=edit_then_answer()
    )
    assert status == 0
    assert "needs consent, which -p cannot ask for" in out
    assert "--yes" in out
    assert (project / "notes.txt").read_text() == "first line\n"


def test_print_mode_with_yes_edits_and_shows_a_diff(
    env: dict[str, str], project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out = run_cli(
        ["--cwd", str(project), "--yes", "-p", "edit it"], env, stream_fn=edit_then_answer()
    )
    assert status == 0
    assert (project / "notes.txt").read_text() == "second line\n"
    err = capsys.readouterr().err
    assert "-1 first line" in err  # Pi's numbered diff (details.diff)
    assert "+1 second line" in err
    assert out == "tool said: Successfully replaced 1 block(s) in notes.txt.\n"


def test_policy_deny_wins_over_yes(env: dict[str, str], project: Path, tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('deny = ["edit:notes.*"]\n')
    status, out = run_cli(
        ["--cwd", str(project), "--yes", "--policy", str(policy), "-p", "edit it"],
        env,
        stream_fn=edit_then_answer(),
    )
    assert status == 0
    assert "matches deny pattern 'edit:notes.*'" in out
    assert (project / "notes.txt").read_text() == "first line\n"


def test_policy_allow_lets_a_call_run_in_print_mode(
    env: dict[str, str], project: Path, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('allow = ["edit:*.txt"]\n')
    run_cli(
        ["--cwd", str(project), "--policy", str(policy), "-p", "edit it"],
        env,
        stream_fn=edit_then_answer(),
    )
    assert (project / "notes.txt").read_text() == "second line\n"


def test_default_policy_file_in_the_config_dir(env: dict[str, str], project: Path) -> None:
    config = Path(env["XDG_CONFIG_HOME"], "pitrio")
    config.mkdir(parents=True)
    (config / "policy.toml").write_text('allow = ["edit:*"]\n')
    run_cli(["--cwd", str(project), "-p", "edit it"], env, stream_fn=edit_then_answer())
    assert (project / "notes.txt").read_text() == "second line\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("allow = 'x'", "must be a list of 'TOOL:GLOB' strings"),
        ("allow = ['no-colon']", "must be a list of 'TOOL:GLOB' strings"),
        ("permit = []", "unknown keys ['permit']"),
        ("allow = [", "cannot be read"),
    ],
)
def test_bad_policy_files_are_named(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "p.toml"
    path.write_text(text)
    with pytest.raises(PolicyError, match=re.escape(message)):
        load_policy(str(path), required=True)


async def test_consent_asks_once_for_always() -> None:
    """ "a" answers for the rest of the session; "n" blocks with a reason; reads pass."""
    answers = iter(["n", "a"])
    asked: list[str] = []

    async def ask(event: ToolCallEvent) -> str:
        asked.append(event.tool_name)
        return next(answers)

    consent = Consent(Policy(), ask=ask)

    def call(name: str) -> ToolCallEvent:
        return ToolCallEvent(tool_call_id="1", tool_name=name, args={"command": "ls"})

    refused = await consent(call("bash"))
    assert refused is not None
    assert refused.block
    assert refused.reason == "The user declined to run this bash call."
    assert await consent(call("bash")) is None  # "a"
    assert await consent(call("bash")) is None  # not asked again
    assert await consent(call("read")) is None  # read-only: never asked
    assert asked == ["bash", "bash"]


# -- json -----------------------------------------------------------------------------


def test_json_mode_prints_every_event_as_one_wire_line(env: dict[str, str], project: Path) -> None:
    model = ScriptedModel([ScriptedResponse.text("hello there", chunk_size=5)])
    status, out = run_cli(
        ["--cwd", str(project), "--mode", "json", "-p", "hi"], env, stream_fn=model
    )
    assert status == 0
    events = [json.loads(line) for line in out.splitlines()]
    types = [e["type"] for e in events]
    header = events[0]  # as Pi's json mode: the session file's header first
    assert set(header) == {"type", "version", "id", "timestamp", "cwd"}
    assert (header["type"], header["version"], header["cwd"]) == ("session", 3, str(project))
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", header["timestamp"])
    sessions = list(Path(env["PITRIO_SESSIONS_DIR"]).rglob("*.jsonl"))
    assert header["id"] in sessions[0].name
    assert types[1] == "agent_start"
    assert types[-2:] == ["agent_end", "agent_settled"]
    deltas = [
        e["assistantMessageEvent"]["delta"]
        for e in events
        if e["type"] == "message_update" and e["assistantMessageEvent"]["type"] == "text_delta"
    ]
    assert "".join(deltas) == "hello there"
    assert not {"save_point", "settled"} & set(types)  # not events Pi's json mode sends


def test_event_to_wire_uses_camel_case() -> None:
    from pitrio import ToolExecutionEnd, ToolResult

    wire = event_to_wire(
        ToolExecutionEnd(
            tool_call_id="c", tool_name="ls", result=ToolResult(content=()), is_error=False
        )
    )
    assert wire["type"] == "tool_execution_end"
    assert wire["toolCallId"] == "c"
    assert wire["isError"] is False


# -- sessions -------------------------------------------------------------------------


def test_sessions_are_saved_and_continued(env: dict[str, str], project: Path) -> None:
    """A -p run is saved; --continue picks it up with its messages; --no-session keeps
    nothing."""
    seen: list[int] = []

    def respond(context: Any) -> ScriptedResponse:
        seen.append(len(context.messages))
        return ScriptedResponse.text("ok")

    model = ScriptedModel(respond, record_requests=False)
    run_cli(["--cwd", str(project), "-p", "one"], env, stream_fn=model)
    run_cli(["--cwd", str(project), "--continue", "-p", "two"], env, stream_fn=model)
    run_cli(["--cwd", str(project), "--no-session", "-p", "three"], env, stream_fn=model)
    assert seen == [1, 3, 1]
    files = list(Path(env["PITRIO_SESSIONS_DIR"]).rglob("*.jsonl"))
    assert len(files) == 1


def test_resume_without_id_lists_sessions(env: dict[str, str], project: Path) -> None:
    model = ScriptedModel([ScriptedResponse.text("ok")])
    run_cli(["--cwd", str(project), "-p", "one"], env, stream_fn=model)
    status, out = run_cli(["--cwd", str(project), "--resume"], env, stream_fn=model)
    assert status == 0
    assert "resume one with pitrio --session ID" in out
    session_id = out.splitlines()[1].split()[0]
    model2 = ScriptedModel([ScriptedResponse.text("again")])
    status, _ = run_cli(
        ["--cwd", str(project), "--session", session_id, "-p", "two"], env, stream_fn=model2
    )
    assert status == 0
    assert len(model2.requests[0].messages) == 3


def test_session_file_is_created_when_missing_and_continued_after(
    env: dict[str, str], project: Path, tmp_path: Path
) -> None:
    path = tmp_path / "chats" / "work.jsonl"
    path.parent.mkdir()
    seen: list[int] = []

    def respond(context: Any) -> ScriptedResponse:
        seen.append(len(context.messages))
        return ScriptedResponse.text("ok")

    model = ScriptedModel(respond, record_requests=False)
    argv = ["--cwd", str(project), "--session", str(path)]
    assert run_cli([*argv, "-p", "one"], env, stream_fn=model)[0] == 0
    assert path.is_file()
    assert run_cli([*argv, "-p", "two"], env, stream_fn=model)[0] == 0
    assert seen == [1, 3]  # the second run continued the file's conversation
    assert sorted(p.name for p in path.parent.iterdir()) == ["work.jsonl"]  # no scratch left
    assert not list(Path(env["PITRIO_SESSIONS_DIR"]).rglob("*.jsonl"))  # not in the store


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("missing/x.jsonl", "the directory {dir}/missing does not exist; create it first"),
        ("notes.jsonl", "is not a session file ("),
        ("plain", "a session file's name ends in .jsonl, e.g. {dir}/plain.jsonl"),
        (".", "is a directory; name a session file in it"),
    ],
)
def test_unusable_session_paths_are_one_clear_line(
    env: dict[str, str],
    project: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    message: str,
) -> None:
    (project / "plain").write_text("")
    (project / "notes.jsonl").write_text("not json\n")
    path = os.path.normpath(project / name)
    status, _ = run_cli(
        ["--cwd", str(project), "--session", path, "-p", "x"], env, stream_fn=ScriptedModel([])
    )
    err = capsys.readouterr().err
    assert status == 2
    assert err.startswith(f"pitrio: --session {path!r}")
    assert message.format(dir=project) in err
    assert err.count("\n") == 1  # one line
    assert (project / "notes.jsonl").read_text() == "not json\n"  # left as it was


def test_cli_errors_are_one_line_without_a_traceback(env: dict[str, str], project: Path) -> None:
    """Through a real process: exit status 2 and one line for a --session in a missing
    directory; --resume of an unknown id the same (the store's error, re-based)."""
    for extra in (["--session", str(project / "no" / "x.jsonl")], ["--session", "nope"]):
        argv = ["--cwd", str(project), "--base-url", "http://127.0.0.1:9/v1", "--model", "m"]
        result = subprocess.run(
            [sys.executable, "-m", "pitrio", *argv, *extra, "-p", "hi"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,  # piped stdin would join the prompt, as in Pi
        )
        assert result.returncode == 2
        assert "Traceback" not in result.stderr
        assert result.stderr.startswith("pitrio: ")
        assert result.stderr.count("\n") == 1
        assert result.stdout == ""


def test_a_failure_while_starting_exits_1(
    env: dict[str, str],
    project: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pitrio.cli import CliError, _run

    async def broken(*args: Any) -> Any:
        raise CliError("the local model server (llama.cpp on 127.0.0.1:1) exited")

    monkeypatch.setattr(_run, "open_stream_fn", broken)
    status, _ = run_cli(["--cwd", str(project), "-p", "x"], env, stream_fn=ScriptedModel([]))
    assert status == 1
    assert capsys.readouterr().err == (
        "pitrio: the local model server (llama.cpp on 127.0.0.1:1) exited\n"
    )


def test_cli_errors_join_pitrios_tree() -> None:
    from pitrio import PitrioError
    from pitrio.cli import CliError, CliUsageError, PolicyError, RpcCommandError, SessionFileError
    from pitrio.harness import SessionError

    assert issubclass(CliError, PitrioError)
    assert (CliError.exit_status, CliUsageError.exit_status) == (1, 2)
    assert issubclass(PolicyError, CliUsageError)
    assert issubclass(PolicyError, ValueError)
    assert issubclass(SessionFileError, CliUsageError)
    assert issubclass(SessionFileError, SessionError)  # caught where store errors are
    assert issubclass(RpcCommandError, CliError)


# -- models, keys and servers ---------------------------------------------------------


def test_model_error_exits_1(
    env: dict[str, str], project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The error on stderr, nothing on stdout (no answer), exit 1: as ``pi -p``."""
    model = ScriptedModel([ScriptedResponse(stop_reason="error", error_message="boom")])
    status, out = run_cli(["--cwd", str(project), "-p", "x"], env, stream_fn=model)
    assert status == 1
    assert out == ""
    assert "error: boom" in capsys.readouterr().err


@pytest.fixture
def chat_server() -> Iterator[tuple[str, list[dict[str, Any]], list[int]]]:
    """A chat-completions server on loopback streaming one short answer (or a 401)."""
    seen: list[dict[str, Any]] = []
    status_codes: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            seen.append({"auth": self.headers.get("Authorization"), "body": json.loads(body)})
            if status_codes:
                self.send_response(status_codes[0])
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"error": {"message": "Invalid API key"}}')
                return
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
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", seen, status_codes
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_base_url_server_with_thinking_and_compat(
    chat_server: tuple[str, list[dict[str, Any]], list[int]],
    env: dict[str, str],
    project: Path,
) -> None:
    """--base-url streams from the server; --thinking reaches the wire (not silently
    dropped); --compat switches apply; the key comes from PITRIO_API_KEY."""
    url, seen, _ = chat_server
    argv = [
        "--cwd", str(project), "--base-url", url, "--model", "local", "--thinking", "high",
        "--compat", "maxTokensField=max_tokens", "-p", "hello",
    ]  # fmt: skip
    status, out = run_cli(argv, {**env, "PITRIO_API_KEY": "secret"})
    assert status == 0
    assert out.startswith("hi from loopback")
    assert seen[0]["auth"] == "Bearer secret"
    body = seen[0]["body"]
    assert body["model"] == "local"
    assert body["reasoning_effort"] == "high"
    assert "max_tokens" in body
    assert "max_completion_tokens" not in body
    assert [t["function"]["name"] for t in body["tools"]] == [
        "read", "bash", "edit", "write",
    ]  # fmt: skip


def test_a_401_says_where_the_key_came_from(
    chat_server: tuple[str, list[dict[str, Any]], list[int]],
    env: dict[str, str],
    project: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, _, status_codes = chat_server
    status_codes.append(401)
    argv = ["--cwd", str(project), "--base-url", url, "--model", "m", "-p", "hello"]
    status, out = run_cli(argv, {**env, "PITRIO_API_KEY": "wrong"})
    assert status == 1
    assert out == ""
    err = capsys.readouterr().err
    assert "401" in err
    assert "the API key came from the environment variable PITRIO_API_KEY" in err


def test_connection_errors_name_the_server(
    env: dict[str, str], project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nothing listens on the port: the error (or its hint) names the URL."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    argv = ["--cwd", str(project), "--base-url", url, "--model", "m", "-p", "hello"]
    status, out = run_cli(argv, env)
    assert status == 1
    assert f"127.0.0.1:{port}" in out + capsys.readouterr().err


def test_config_file_keys(env: dict[str, str]) -> None:
    from pitrio.cli._setup import config_keys, default_model

    config = Path(env["XDG_CONFIG_HOME"], "pitrio")
    config.mkdir(parents=True)
    (config / "config.toml").write_text('[keys]\nopenai = "sk-from-config"\n')
    keys, path = config_keys(env)
    found = default_model(env, keys, path)
    assert found is not None
    model, key, source = found
    assert (model.provider, key) == ("openai", "sk-from-config")
    assert source == f"[keys] openai in {path}"


def test_an_env_key_selects_adefault_model(env: dict[str, str]) -> None:
    from pitrio.cli._setup import default_model

    found = default_model({**env, "ANTHROPIC_API_KEY": "k"}, {}, "cfg")
    assert found is not None
    assert found[0].provider == "anthropic"
    assert found[2] == "the environment variable ANTHROPIC_API_KEY"


def test_cli_does_not_import_the_test_kit() -> None:
    """What ships to users lives outside pitrio.testing."""
    code = (
        "import sys, pitrio.cli, pitrio.cli._interactive, pitrio.cli._rpc; "
        "print('pitrio.testing' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        env={**os.environ},
    )  # fmt: skip
    assert result.stdout.strip() == "False"


def test_last_assistant_is_reported(env: dict[str, str], project: Path) -> None:
    model = ScriptedModel([ScriptedResponse.text("done")])
    status, out = run_cli(["--cwd", str(project), "-p", "x"], env, stream_fn=model)
    assert status == 0
    assert out == "done\n"


# -- the renderer ---------------------------------------------------------------------


def test_streamed_tool_output_is_shown_once_and_diffs_coloured() -> None:
    """Lines streamed while bash runs are not repeated at its end (error or not); an
    edit's diff is coloured; parallel results are headed by their call."""
    from pitrio import ToolExecutionEnd, ToolExecutionStart, ToolExecutionUpdate, ToolResult
    from pitrio.cli._render import Renderer

    out = io.StringIO()
    render = Renderer(out, style="plain")
    render(ToolExecutionStart(tool_call_id="a", tool_name="bash", args={"command": "make"}))
    render(ToolExecutionStart(tool_call_id="b", tool_name="ls", args={"path": "."}))
    partial = ToolResult(content=(TextContent(text="one\ntwo\nthr"),))
    render(ToolExecutionUpdate(tool_call_id="a", tool_name="bash", args={}, partial_result=partial))
    final = ToolResult(content=(TextContent(text="one\ntwo\nthree\n\nCommand exited with code 2"),))
    render(ToolExecutionEnd(tool_call_id="b", tool_name="ls", result=ToolResult(
        content=(TextContent(text="x.py"),)), is_error=False))  # fmt: skip
    render(ToolExecutionEnd(tool_call_id="a", tool_name="bash", result=final, is_error=True))
    text = out.getvalue()
    assert text.count("│ one") == 1
    assert text.count("│ two") == 1
    assert text.count("│ three") == 1
    assert "└ bash make ✗ failed" in text
    assert text.index("● ls .\n  │ x.py") < text.index("● bash make\n  │ three")

    colored = io.StringIO()
    render = Renderer(colored, style="ansi")
    render(ToolExecutionStart(tool_call_id="e", tool_name="edit", args={"path": "f.py"}))
    diff = "--- f.py\n+++ f.py\n@@ -1 +1 @@\n-old\n+new"
    render(ToolExecutionEnd(tool_call_id="e", tool_name="edit", result=ToolResult(
        content=(TextContent(text="ok"),), details={"diff": diff}), is_error=False))  # fmt: skip
    assert "\x1b[31m-old\x1b[0m" in colored.getvalue()
    assert "\x1b[32m+new\x1b[0m" in colored.getvalue()


def test_serve_dispatches_to_the_web_ui_module(capsys: pytest.CaptureFixture[str]) -> None:
    """``pitrio serve ...`` is handed to pitrio.web._serve.main (its own --help)."""
    try:
        status = main(["serve", "--help"])
    except SystemExit as exc:  # argparse inside the serve module
        status = exc.code if isinstance(exc.code, int) else 2
    captured = capsys.readouterr()
    assert status == 0
    assert "usage: pitrio serve" in captured.out


async def test_session_listing_is_newest_first_with_real_dates(tmp_path: Path) -> None:
    import datetime

    from pitrio import user_text
    from pitrio.cli._run import _list_sessions
    from pitrio.harness import JsonlSessionStore

    store = JsonlSessionStore(tmp_path / "sessions")
    ids = []
    for text in ("first", "second"):
        session = await store.create(cwd=str(tmp_path))
        await session.append_message(user_text(text))
        await session.flush()
        await session.close()
        ids.append(session.id)
    out = io.StringIO()
    await _list_sessions(store, str(tmp_path), out)
    lines = out.getvalue().splitlines()
    assert "(newest first)" in lines[0]
    listed = [line.split()[0] for line in lines[1:]]
    assert listed == [info.id for info in await store.list(cwd=str(tmp_path))]
    assert set(listed) == set(ids)
    year = str(datetime.date.today().year)
    assert all(line.split()[1].startswith(year) for line in lines[1:]), lines


def test_a_key_goes_only_to_its_provider(env: dict[str, str], tmp_path: Path) -> None:
    """The configured key answers for its model's provider only: a /model switch to
    another provider gets that provider's key from the config file, else None (the
    environment's), never the first provider's key."""
    from pitrio.cli._setup import api_key_lookup, configure

    config = tmp_path / "config" / "pitrio"
    config.mkdir(parents=True)
    (config / "config.toml").write_text('[keys]\nopenai = "sk-config-openai"\n')
    env = {**env, "ANTHROPIC_API_KEY": "sk-ant-env"}
    parser = build_parser()
    args = parser.parse_args(["--model", "anthropic/claude-sonnet-4-5", "-p", "hi"])
    settings = configure(parser, args, env, None, io.StringIO())
    lookup = api_key_lookup(settings)
    assert settings.model.provider == "anthropic"
    assert lookup("anthropic") == "sk-ant-env"
    assert lookup("openai") == "sk-config-openai"
    assert lookup("google") is None
