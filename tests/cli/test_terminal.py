"""``python -m pitrio`` in a real pseudo-terminal (pexpect), as a person uses it: typing
and editing with the arrow keys, history, the consent prompt, steering and follow-ups
mid-run, Ctrl-C mid-tool, resuming after a restart, slash commands, and the offline
replay. The model is a scripted OpenAI-compatible server on loopback (``--base-url``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import ChatServer, Reply, last_user_text, text_reply, tool_reply

pexpect = pytest.importorskip(
    "pexpect", reason="pexpect is in the test extra: pip install -e .[test]"
)

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")

LEFT = "\x1b[D"
UP = "\x1b[A"
CTRL_C = "\x03"
CTRL_D = "\x04"


Spawn = Callable[..., Any]


@pytest.fixture
def spawn(cli_env: dict[str, str], workdir: Path) -> Iterator[Spawn]:
    children: list[Any] = []

    def start(*args: str) -> Any:
        child = pexpect.spawn(
            sys.executable,
            ["-m", "pitrio", "--cwd", str(workdir), *args],
            env=cli_env,
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


def quit_with_ctrl_d(child: Any) -> int:
    child.send(CTRL_D)
    child.expect(pexpect.EOF)
    child.close()
    status: int = child.exitstatus
    return status


def echo_script(body: dict[str, Any]) -> Reply:
    return text_reply(f"you said: {last_user_text(body)}")


def test_typing_with_arrow_keys_and_history(
    serve: Callable[..., ChatServer], spawn: Spawn, cli_env: dict[str, str]
) -> None:
    """Left arrows move the cursor (no ``^[[D`` in the text), Up recalls the last line,
    and the history is saved per user for the next start."""
    server = serve(echo_script)
    child = spawn("--base-url", server.url, "--model", "m")
    ready(child)
    child.send("wrld" + LEFT * 3 + "o\r")
    child.expect_exact("you said: world")
    ready(child)
    child.send(UP + "\r")
    child.expect_exact("you said: world")
    ready(child)
    assert quit_with_ctrl_d(child) == 0
    assert [last_user_text(r) for r in server.requests] == ["world", "world"]
    history = Path(cli_env["XDG_STATE_HOME"], "pitrio", "history").read_text()
    assert "world" in history


def test_multi_line_input_with_a_trailing_backslash(
    serve: Callable[..., ChatServer], spawn: Spawn
) -> None:
    server = serve(echo_script)
    child = spawn("--base-url", server.url, "--model", "m")
    ready(child)
    child.send("first \\\r")
    child.expect_exact("… ")
    child.send("second\r")
    child.expect_exact("you said: first")
    ready(child)
    quit_with_ctrl_d(child)
    assert last_user_text(server.requests[0]) == "first \nsecond"


def edit_script(body: dict[str, Any]) -> Reply:
    last = body["messages"][-1]
    if last["role"] == "tool":
        content = last["content"]
        text = content if isinstance(content, str) else "".join(p["text"] for p in content)
        return text_reply(f"tool said: {text}")
    return tool_reply(
        "Editing.", "edit", {"path": "notes.txt", "oldText": "line", "newText": "line!"}
    )


def test_consent_prompt_no_then_always(
    serve: Callable[..., ChatServer], spawn: Spawn, workdir: Path
) -> None:
    """``n`` refuses (the model is told, the file unchanged); ``a`` allows and is not
    asked again in this session."""
    server = serve(edit_script)
    child = spawn("--base-url", server.url, "--model", "m")
    ready(child)
    child.send("edit it\r")
    child.expect_exact("Allow this edit call?")
    child.send("n\r")
    child.expect_exact("tool said: The user declined to run this edit call.")
    ready(child)
    assert (workdir / "notes.txt").read_text() == "first line\n"
    child.send("edit it\r")
    child.expect_exact("Allow this edit call?")
    child.send("a\r")
    child.expect_exact("+1 first line!")  # Pi's numbered diff
    child.expect_exact("tool said: Successfully replaced 1 block(s) in notes.txt.")
    ready(child)
    child.send("edit it\r")
    child.expect_exact("tool said: Successfully replaced 1 block(s)")
    ready(child)
    assert "Allow this edit" not in child.before
    assert (workdir / "notes.txt").read_text() == "first line!!\n"
    quit_with_ctrl_d(child)


def test_ctrl_c_at_the_consent_prompt_declines_and_aborts(
    serve: Callable[..., ChatServer], spawn: Spawn, workdir: Path
) -> None:
    server = serve(edit_script)
    child = spawn("--base-url", server.url, "--model", "m")
    ready(child)
    child.send("edit it\r")
    child.expect_exact("Allow this edit call?")
    child.send(CTRL_C)
    child.expect_exact("[aborted")
    ready(child)
    child.send("edit it\r")
    child.expect_exact("Allow this edit call?")  # a new question, not a stale one
    child.send("n\r")
    child.expect_exact("tool said: The user declined")
    ready(child)
    quit_with_ctrl_d(child)
    assert (workdir / "notes.txt").read_text() == "first line\n"


def sleep_script(seconds: float, marker: str) -> Callable[[dict[str, Any]], Reply]:
    """The first prompt runs ``sleep``; then the answer lists the user messages."""

    def script(body: dict[str, Any]) -> Reply:
        users = [last_user_text({"messages": [m]}) for m in body["messages"] if m["role"] == "user"]
        if body["messages"][-1]["role"] == "user" and len(users) == 1:
            command = f"sleep {seconds} && echo {marker}"
            return tool_reply("Working.", "bash", {"command": command})
        return text_reply("users so far: " + " | ".join(users))

    return script


def test_a_line_typed_mid_run_steers(serve: Callable[..., ChatServer], spawn: Spawn) -> None:
    """While bash runs, a typed line is shown as steering and reaches the model after
    the tool, never mixed into the answer."""
    server = serve(sleep_script(1.5, "slept"))
    child = spawn("--base-url", server.url, "--model", "m", "--yes")
    ready(child)
    child.send("start\r")
    child.expect_exact("running…")
    child.send("change of plan\r")
    child.expect_exact("[steering: change of plan]")
    child.expect_exact("users so far: start | change of plan")
    ready(child)
    quit_with_ctrl_d(child)


def test_a_follow_up_prefix_queues_for_the_end(
    serve: Callable[..., ChatServer], spawn: Spawn
) -> None:
    server = serve(sleep_script(1.5, "slept"))
    child = spawn("--base-url", server.url, "--model", "m", "--yes")
    ready(child)
    child.send("start\r")
    child.expect_exact("running…")
    child.send(">> and then this\r")
    child.expect_exact("[follow-up queued: and then this]")
    child.expect_exact("users so far: start | and then this")
    ready(child)
    quit_with_ctrl_d(child)


def test_ctrl_c_mid_tool_aborts_and_kills_the_command(
    serve: Callable[..., ChatServer], spawn: Spawn, workdir: Path
) -> None:
    """Ctrl-C while bash runs aborts the run (the prompt comes back at once) and kills
    the command's process group; Ctrl-C when idle exits with 130."""
    server = serve(sleep_script(37.25, "never"))
    child = spawn("--base-url", server.url, "--model", "m", "--yes")
    ready(child)
    child.send("start\r")
    child.expect_exact("running…")
    child.send(CTRL_C)
    child.expect_exact("[aborted")
    ready(child)
    processes = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert "sleep 37.25" not in processes
    assert len(server.requests) == 1  # the aborted run asked nothing more
    child.send(CTRL_C)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130


def test_resume_after_restart(serve: Callable[..., ChatServer], spawn: Spawn) -> None:
    """Quit, start again with --continue: the conversation is shown again (as Pi redraws
    it) and reaches the model."""
    server = serve(echo_script)
    child = spawn("--base-url", server.url, "--model", "m")
    ready(child)
    child.send("remember 42\r")
    child.expect_exact("you said: remember 42")
    ready(child)
    assert quit_with_ctrl_d(child) == 0

    child = spawn("--base-url", server.url, "--model", "m", "--continue")
    child.expect_exact("> remember 42")
    child.expect_exact("you said: remember 42")
    ready(child)
    child.send("what number?\r")
    child.expect_exact("you said: what number?")
    ready(child)
    quit_with_ctrl_d(child)
    contents = [m["content"] for m in server.requests[-1]["messages"] if m["role"] == "user"]
    assert "remember 42" in str(contents)


def test_slash_commands(serve: Callable[..., ChatServer], spawn: Spawn) -> None:
    server = serve(echo_script)
    child = spawn("--base-url", server.url, "--model", "m")
    ready(child)
    child.send("/help\r")
    child.expect_exact("/compact [INSTRUCTIONS]")
    ready(child)
    child.send("/tools\r")
    child.expect(r"bash\s+asks first")
    ready(child)
    child.send("hello\r")
    child.expect_exact("you said: hello")
    ready(child)
    child.send("/session\r")
    child.expect_exact("messages: 2")
    ready(child)
    child.send("/cost\r")
    child.expect_exact("this session: input")
    ready(child)
    child.send("/nonsense\r")
    child.expect_exact("unknown command /nonsense")
    ready(child)
    child.send("/clear\r")
    child.expect_exact("new session")
    ready(child)
    child.send("/session\r")
    child.expect_exact("messages: 0")
    ready(child)
    child.send("/quit\r")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert len(server.requests) == 1  # no slash command went to the model


def test_session_commands(serve: Callable[..., ChatServer], spawn: Spawn) -> None:
    """/compact, /session, /fork, /resume and /thinking in a live session."""
    server = serve(echo_script)
    child = spawn("--base-url", server.url, "--model", "m", "--no-color")
    ready(child)
    for text in ("one", "two"):
        child.send(text + "\r")
        child.expect_exact(f"you said: {text}")
        ready(child)
    child.send("/compact\r")
    child.expect_exact("[compacted from ~")
    ready(child)
    child.send("/session\r")
    child.expect(r"session (\S+)\r\n  file: (\S+\.jsonl)")
    first_id = child.match.group(1)
    assert Path(child.match.group(2)).exists()
    ready(child)
    child.send("/fork\r")
    child.expect(r"forked into session (\S+) \(\d+ messages\)")
    forked_id = child.match.group(1)
    assert forked_id != first_id
    ready(child)
    child.send("/resume\r")
    child.expect_exact(f"{forked_id} (current)")
    ready(child)
    child.send(f"/resume {first_id}\r")
    child.expect_exact(f"resumed session {first_id}")
    ready(child)
    child.send("/thinking high\r")
    child.expect_exact("is not a reasoning model, so nothing is sent")
    ready(child)
    child.send("three\r")
    child.expect_exact("you said: three")
    ready(child)
    quit_with_ctrl_d(child)
    assert len(server.requests) == 4  # one, two, the compaction's summary request, three
    summary_request = json.dumps(server.requests[2]["messages"])
    assert "context summarization assistant" in summary_request
    users = [last_user_text({"messages": [m]}) for m in server.requests[-1]["messages"]
             if m["role"] == "user"]  # fmt: skip
    assert users[-1] == "three"


def test_prompt_templates_expand(
    serve: Callable[..., ChatServer], spawn: Spawn, cli_env: dict[str, str]
) -> None:
    prompts = Path(cli_env["XDG_CONFIG_HOME"], "pitrio", "prompts")
    prompts.mkdir(parents=True)
    (prompts / "review.md").write_text(
        "---\ndescription: review a file\n---\nReview $1 carefully.\n"
    )
    server = serve(echo_script)
    child = spawn("--base-url", server.url, "--model", "m")
    ready(child)
    child.send("/review app.py\r")
    child.expect_exact("you said: Review app.py carefully.")
    ready(child)
    quit_with_ctrl_d(child)


def test_offline_replay_in_a_terminal(spawn: Spawn) -> None:
    """No model: the banner says it is a replay; after it, a prompt gets an honest answer."""
    child = spawn()
    child.expect_exact("offline replay")
    child.expect_exact("not a language model")
    child.expect_exact("all checks passed")
    child.expect_exact("tokens in")  # the usage line: the replayed run has settled
    ready(child)
    child.send("now add a docstring\r")
    child.expect_exact("The offline recording has ended")
    ready(child)
    assert quit_with_ctrl_d(child) == 0


def test_plain_text_with_no_color(serve: Callable[..., ChatServer], spawn: Spawn) -> None:
    server = serve(echo_script)
    child = spawn("--base-url", server.url, "--model", "m", "--no-color")
    ready(child)
    child.send("hi\r")
    child.expect_exact("you said: hi")
    ready(child)
    assert "\x1b[" not in child.before
    quit_with_ctrl_d(child)
