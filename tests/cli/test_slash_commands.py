"""The slash commands and line prefixes pitrio's terminal takes from Pi's interactive
mode, in a real pseudo-terminal against the scripted server: ``!cmd`` / ``!!cmd``,
``/name``, ``/clone``, ``/tree``, ``/export``, ``/copy``, ``/reload``, ``/hotkeys``,
``/skill:NAME``, and the commands pitrio does not have saying so."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pitrio import AssistantMessage, TextContent, ToolCall, ToolResultMessage, UserMessage
from pitrio.cli._slash import history_lines
from pitrio.harness import BashExecutionMessage

from .conftest import ChatServer, Reply, last_user_text, local_models_env, text_reply

pexpect = pytest.importorskip(
    "pexpect", reason="pexpect is in the test extra: pip install -e .[test]"
)

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")

CTRL_D = "\x04"
Spawn = Callable[..., Any]


@pytest.fixture
def spawn(cli_env: dict[str, str], workdir: Path) -> Iterator[Spawn]:
    children: list[Any] = []

    def start(*args: str, env: dict[str, str] | None = None) -> Any:
        child = pexpect.spawn(
            sys.executable,
            ["-m", "pitrio", "--cwd", str(workdir), *args],
            env=env or cli_env,
            encoding="utf-8",
            timeout=20,
            dimensions=(50, 160),
        )
        children.append(child)
        return child

    yield start
    for child in children:
        if child.isalive():
            child.terminate(force=True)


def ready(child: Any) -> None:
    child.expect_exact("> ")


def quit(child: Any) -> None:
    child.send(CTRL_D)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def echo_script(body: dict[str, Any]) -> Reply:
    return text_reply(f"you said: {last_user_text(body)}")


def user_texts(body: dict[str, Any]) -> list[str]:
    out = []
    for message in body["messages"]:
        if message["role"] == "user":
            content = message["content"]
            out.append(
                content if isinstance(content, str) else "".join(p.get("text", "") for p in content)
            )
    return out


def session_files(cli_env: dict[str, str]) -> list[Path]:
    return sorted(Path(cli_env["PITRIO_SESSIONS_DIR"]).rglob("*.jsonl"))


def test_bang_runs_a_command_whose_output_joins_the_context_and_bang_bang_does_not(
    serve: Callable[..., ChatServer], spawn: Spawn, workdir: Path
) -> None:
    server = serve(echo_script)
    child = spawn("--base-url", server.url, "--model", "m")
    ready(child)
    child.send("!cat notes.txt\r")
    child.expect_exact("$ cat notes.txt")
    child.expect_exact("first line")
    ready(child)
    child.send("!!echo secret-$((40+2))\r")
    child.expect_exact("(not in the context)")
    child.expect_exact("secret-42")
    ready(child)
    child.send("!exit 3\r")
    child.expect_exact("exit status 3")
    ready(child)
    child.send("what now?\r")
    child.expect_exact("you said: what now?")
    ready(child)
    quit(child)
    sent = user_texts(server.requests[-1])
    assert sent == [
        "Ran `cat notes.txt`\n```\nfirst line\n```",
        "Ran `exit 3`\n(no output)\n\nCommand exited with code 3",
        "what now?",
    ]
    assert "secret" not in json.dumps(server.requests[-1])


def test_name_clone_and_export(
    serve: Callable[..., ChatServer], spawn: Spawn, workdir: Path, cli_env: dict[str, str]
) -> None:
    server = serve(echo_script)
    child = spawn("--base-url", server.url, "--model", "m")
    ready(child)
    child.send("/name\r")
    child.expect_exact("session name: (none)")
    ready(child)
    child.send("/name Auth refactor\r")
    child.expect_exact("session name: Auth refactor")
    ready(child)
    child.send("hello <b>\r")
    child.expect_exact("you said: hello <b>")
    ready(child)
    child.send("/export page.html\r")
    child.expect_exact(f"Session exported to: {workdir / 'page.html'}")
    ready(child)
    child.send("/clone\r")
    child.expect(r"cloned into session (\S+) \(2 messages\)")
    ready(child)
    quit(child)
    page = (workdir / "page.html").read_text()
    assert "<title>Auth refactor</title>" in page
    assert "hello &lt;b&gt;" in page
    files = session_files(cli_env)
    assert len(files) == 2
    for file in files:
        lines = [json.loads(x) for x in file.read_text().splitlines()]
        names = [x.get("name") for x in lines if x.get("type") == "session_info"]
        assert names[-1:] == ["Auth refactor"]  # the clone keeps the name


def test_tree_lists_the_entries_and_goes_back_to_one(
    serve: Callable[..., ChatServer], spawn: Spawn, cli_env: dict[str, str]
) -> None:
    server = serve(echo_script)
    child = spawn("--base-url", server.url, "--model", "m")
    ready(child)
    for text in ("one", "two"):
        child.send(f"{text}\r")
        child.expect_exact(f"you said: {text}")
        ready(child)
    lines = [json.loads(x) for x in session_files(cli_env)[0].read_text().splitlines()]
    first_answer = next(
        x["id"] for x in lines if x.get("type") == "message" and x["message"]["role"] == "assistant"
    )
    child.send("/tree\r")
    child.expect_exact("session tree")
    child.expect_exact(f"* {first_answer}  assistant: you said: one")
    child.expect_exact("<- here")
    ready(child)
    child.send(f"/tree {first_answer}\r")
    child.expect_exact(f"now at {first_answer} (2 messages)")
    ready(child)
    child.send("three\r")
    child.expect_exact("you said: three")
    ready(child)
    child.send("/tree\r")
    child.expect_exact("user: two")  # the old branch is kept, beside the new one
    ready(child)
    quit(child)
    assert user_texts(server.requests[-1]) == ["one", "three"]


def test_copy_uses_a_clipboard_tool_or_says_there_is_none(
    serve: Callable[..., ChatServer], spawn: Spawn, cli_env: dict[str, str], tmp_path: Path
) -> None:
    server = serve(echo_script)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    copied = tmp_path / "clipboard.txt"
    tool = bin_dir / "wl-copy"
    tool.write_text(f"#!/bin/sh\ncat > {copied}\n")
    tool.chmod(0o755)
    env = {**cli_env, "PATH": f"{bin_dir}{os.pathsep}{cli_env['PATH']}"}
    child = spawn("--base-url", server.url, "--model", "m", env=env)
    ready(child)
    child.send("/copy\r")
    child.expect_exact("/copy: no answer to copy yet")
    ready(child)
    child.send("copy me\r")
    child.expect_exact("you said: copy me")
    ready(child)
    child.send("/copy\r")
    child.expect_exact("copied the last answer (17 characters) with wl-copy")
    ready(child)
    quit(child)
    assert copied.read_text() == "you said: copy me"

    empty = tmp_path / "empty-bin"
    empty.mkdir()
    os.symlink(sys.executable, empty / "python3")
    child = spawn("--base-url", server.url, "--model", "m", env={**cli_env, "PATH": str(empty)})
    ready(child)
    child.send("again\r")
    child.expect_exact("you said: again")
    ready(child)
    child.send("/copy\r")
    child.expect_exact("/copy: no clipboard tool found (install one of wl-copy, xclip")
    ready(child)
    quit(child)


def test_reload_skills_hotkeys_and_unsupported_commands(
    serve: Callable[..., ChatServer], spawn: Spawn, cli_env: dict[str, str], workdir: Path
) -> None:
    server = serve(echo_script)
    skill = Path(cli_env["HOME"]) / ".pi" / "agent" / "skills" / "greeter"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: greeter\ndescription: Greets.\n---\nSay hi.\n")
    child = spawn("--base-url", server.url, "--model", "m")
    ready(child)
    child.send("/hotkeys\r")
    child.expect_exact("!!CMD")
    child.expect_exact("Ctrl-D")
    ready(child)
    for command in ("/import", "/share", "/settings"):
        child.send(f"{command}\r")
        child.expect_exact(f"{command} is not supported yet in pitrio")
        ready(child)
    child.send("/skill:greeter the team\r")
    child.expect_exact("you said: ")
    ready(child)
    assert 'name="greeter"' in user_texts(server.requests[-1])[-1]
    assert "the team" in user_texts(server.requests[-1])[-1]
    (workdir / "AGENTS.md").write_text("RELOADED-MARKER\n")
    child.send("/reload\r")
    child.expect_exact("reloaded: 1 context file(s), 1 skill(s)")
    ready(child)
    child.send("hi\r")
    child.expect_exact("you said: hi")
    ready(child)
    quit(child)
    assert "RELOADED-MARKER" in server.requests[-1]["messages"][0]["content"]
    assert "RELOADED-MARKER" not in server.requests[0]["messages"][0]["content"]


def test_history_lines_show_the_conversation_compactly() -> None:
    messages = [
        UserMessage(content="fix \x1b[31mit"),
        AssistantMessage(
            content=(TextContent(text="Looking."), ToolCall(id="c", name="read", arguments={})),
            stop_reason="toolUse",
        ),
        ToolResultMessage(
            tool_call_id="c", tool_name="read", content=(TextContent(text="a\nb\nc"),)
        ),
        BashExecutionMessage(command="ls", output="x"),
        AssistantMessage(stop_reason="error", error_message="boom"),
    ]
    assert history_lines(messages) == [
        "> fix \u241b[31mit",  # the escape shown, not sent to the terminal
        "Looking.",
        "● read {}",
        "  ⎿ a (+2 lines)",
        "$ ls",
        "[error: boom]",
    ]


def test_command_line_messages_are_sent_first_in_the_terminal(
    serve: Callable[..., ChatServer], spawn: Spawn, workdir: Path
) -> None:
    """``pi "Read package.json" "What dependencies?"``: interactive, the messages in turn,
    the first with the ``@file``'s text."""
    server = serve(echo_script)
    child = spawn("--base-url", server.url, "--model", "m", "@" + str(workdir / "notes.txt"),
                  "first", "second")  # fmt: skip
    child.expect_exact("you said: second")
    ready(child)
    quit(child)
    assert len(server.requests) == 2
    assert user_texts(server.requests[1]) == [
        f'<file name="{workdir}/notes.txt">\nfirst line\n\n</file>\nfirst',
        "second",
    ]


def test_resume_in_a_terminal_picks_a_session(
    serve: Callable[..., ChatServer], spawn: Spawn
) -> None:
    """``pi -r`` opens a picker: here a numbered list, the line typed picks one (Enter:
    none), and the picked session's history is shown again."""
    server = serve(echo_script)
    child = spawn("--base-url", server.url, "--model", "m")
    ready(child)
    child.send("remember 7\r")
    child.expect_exact("you said: remember 7")
    ready(child)
    quit(child)

    child = spawn("--base-url", server.url, "--model", "m", "-r")
    child.expect_exact("Resume which?")
    child.send("\r")
    child.expect_exact("No session selected")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0

    child = spawn("--base-url", server.url, "--model", "m", "--resume")
    child.expect_exact("    1  ")
    child.expect_exact("Resume which?")
    child.send("9\r")
    child.expect_exact("type a number from the list")
    child.send("1\r")
    child.expect_exact("> remember 7")
    ready(child)
    child.send("which number?\r")
    child.expect_exact("you said: which number?")
    ready(child)
    child.send("/session\r")
    child.expect(r"session (\S+)\r?\n")
    session_id = child.match.group(1)
    ready(child)
    child.send("/clear\r")
    child.expect_exact("new session")
    ready(child)
    child.send(f"/resume {session_id[:-4]}\r")  # the start of an id, as pi's --session
    child.expect_exact(f"resumed session {session_id} (4 messages)")
    ready(child)
    quit(child)
    assert user_texts(server.requests[-1]) == ["remember 7", "which number?"]


def test_resume_brings_back_the_sessions_model_and_clear_the_runs(
    spawn: Spawn, serve: Callable[..., ChatServer], cli_env: dict[str, str], tmp_path: Path
) -> None:
    """As Pi's runtime replacing its session: ``/resume`` of a session holding messages
    goes on with that session's model and thinking level; ``/clear`` starts the new
    session with the run's own (``/model`` and ``/thinking`` typed in between are not
    saved as defaults)."""
    server = serve(echo_script)
    env, _ = local_models_env(server, cli_env, tmp_path)

    child = spawn("--model", "local/r", "--thinking", "high", env=env)
    ready(child)
    child.send("one\r")
    child.expect_exact("you said: one")
    ready(child)
    child.send("/session\r")
    child.expect(r"session (\S+)\r?\n")
    first = child.match.group(1)
    ready(child)
    quit(child)

    def sent() -> tuple[str, str | None]:
        body = server.requests[-1]
        return body["model"], body.get("reasoning_effort")

    child = spawn(env=env)  # the first models.json model with a key: local/plain
    ready(child)
    child.send("/model\r")
    child.expect_exact("local/plain, local/r")  # models.json's, with the catalog's
    ready(child)
    child.send("two\r")
    child.expect_exact("you said: two")
    ready(child)
    assert sent() == ("plain", None)
    child.send(f"/resume {first}\r")
    child.expect_exact(f"resumed session {first}")
    ready(child)
    child.send("three\r")
    child.expect_exact("you said: three")
    ready(child)
    assert sent() == ("r", "high")
    child.send("/thinking low\r")
    ready(child)
    child.send("/clear\r")
    child.expect_exact("new session")
    ready(child)
    child.send("four\r")
    child.expect_exact("you said: four")
    ready(child)
    assert sent() == ("plain", None)
    child.send("/model local/r\r")
    ready(child)
    child.send("five\r")
    child.expect_exact("you said: five")
    ready(child)
    assert sent() == ("r", None)  # the level goes on ("off"), as Pi's setModel
    quit(child)


Untrusted = tuple[ChatServer, dict[str, str], Path]


@pytest.fixture
def untrusted(
    serve: Callable[..., ChatServer], cli_env: dict[str, str], workdir: Path, tmp_path: Path
) -> Untrusted:
    """An echoing server, an environment whose models.json uses it, and the agent
    directory; the project's ``.pi/SYSTEM.md`` needs trust and none is saved."""
    server = serve(echo_script)
    env, agent_dir = local_models_env(server, cli_env, tmp_path)
    (workdir / ".pi").mkdir()
    (workdir / ".pi" / "SYSTEM.md").write_text("PROJECT-SYSTEM marker")
    return server, env, agent_dir


def test_trust_saves_pis_trust_decision_for_the_next_start(
    spawn: Spawn, untrusted: Untrusted, workdir: Path
) -> None:
    """``/trust`` shows the project's decision and Pi's three choices; ``/trust yes``
    writes ``trust.json`` as Pi's trust store does (the real path, keys sorted, two-space
    JSON; private to the user), and the next start loads the project's ``.pi/SYSTEM.md``;
    ``/trust parent`` trusts the parent folder and drops the project's own entry."""
    server, env, agent_dir = untrusted
    here = os.path.realpath(workdir)

    child = spawn(env=env)
    child.expect_exact("Trust? (number; Enter: do not trust)")  # asked at the start
    child.send("\r")
    ready(child)
    child.send("/trust\r")
    child.expect_exact("untrusted this session; no decision saved")
    child.expect_exact("/trust parent   Trust parent folder")
    child.expect_exact("/trust no       Do not trust")
    ready(child)
    child.send("/trust maybe\r")
    child.expect_exact("/trust takes one of yes, parent, no; got 'maybe'")
    ready(child)
    child.send("one\r")
    child.expect_exact("you said: one")
    ready(child)
    assert "PROJECT-SYSTEM marker" not in server.requests[-1]["messages"][0]["content"]
    child.send("/trust yes\r")
    child.expect_exact("Saved trust decision: trusted. Restart pitrio for this to take effect.")
    ready(child)
    quit(child)
    store = agent_dir / "trust.json"
    assert store.read_text() == json.dumps({here: True}, indent=2) + "\n"
    assert store.stat().st_mode & 0o777 == 0o600
    assert not (agent_dir / "trust.json.lock").exists()

    child = spawn(env=env)
    ready(child)
    child.send("two\r")
    child.expect_exact("you said: two")
    ready(child)
    assert "PROJECT-SYSTEM marker" in server.requests[-1]["messages"][0]["content"]
    child.send("/trust\r")
    child.expect_exact(f"trusted this session; saved: trusted ({here})")
    ready(child)
    child.send("/trust parent\r")
    child.expect_exact("Saved trust decision: trusted.")
    ready(child)
    quit(child)
    assert json.loads(store.read_text()) == {os.path.dirname(here): True}


def test_an_undecided_project_is_asked_about_at_an_interactive_start(
    spawn: Spawn, untrusted: Untrusted, workdir: Path
) -> None:
    """As Pi's interactive start (``selectProjectTrustOption``): a project whose ``.pi/``
    needs trust, with no decision saved, is asked about with Pi's five choices. Enter
    trusts nothing and says so (Pi's notice); "this session only" trusts the run and saves
    nothing; "Trust" saves the decision, after which nothing is asked."""
    server, env, agent_dir = untrusted

    def start(answer: str) -> Any:
        child = spawn(env=env)
        child.expect_exact("Trust project folder?")
        for label in ("Trust", "Trust parent folder", "Trust (this session only)"):
            child.expect_exact(label)
        child.expect_exact("5  Do not trust (this session only)")
        child.expect_exact("Trust? (number; Enter: do not trust)")
        child.send(answer + "\r")
        return child

    def system_prompt() -> str:
        content = server.requests[-1]["messages"][0]["content"]
        return content if isinstance(content, str) else content[0]["text"]

    child = start("")
    child.expect_exact("This project is not trusted. Project .pi resources and packages")
    ready(child)
    child.send("one\r")
    child.expect_exact("you said: one")
    ready(child)
    quit(child)
    assert "PROJECT-SYSTEM marker" not in system_prompt()

    child = start("3")  # this session only
    ready(child)
    child.send("two\r")
    child.expect_exact("you said: two")
    ready(child)
    quit(child)
    assert "PROJECT-SYSTEM marker" in system_prompt()
    assert not (agent_dir / "trust.json").exists()

    child = start("1")
    ready(child)
    quit(child)
    stored = json.loads((agent_dir / "trust.json").read_text())
    assert stored == {os.path.realpath(workdir): True}

    child = spawn(env=env)  # decided: no question
    ready(child)
    child.send("three\r")
    child.expect_exact("you said: three")
    ready(child)
    quit(child)
    assert "Trust project folder?" not in (child.before or "")
    assert "PROJECT-SYSTEM marker" in system_prompt()
