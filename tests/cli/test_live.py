"""The live region of the terminal transcript, as a person sees it: a spinner while the
model is awaited and while a tool runs (with its streamed output above it), markdown
rendered while the answer still streams; none of it in a pipe.

The model is a scripted OpenAI-compatible server on loopback whose stream the test holds
open (a ``wait`` part) while it looks at the screen.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import ChatServer, Reply, text_reply, tool_reply

pexpect = pytest.importorskip(
    "pexpect", reason="pexpect is in the test extra: pip install -e .[test]"
)

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")

FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
SPINNER = re.compile(f"([{FRAMES}]) bash running… (\\d+)s")
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
            dimensions=(40, 120),
        )
        children.append(child)
        return child

    yield start
    for child in children:
        if child.isalive():
            child.terminate(force=True)


def bash_then_text(command: str) -> Callable[[dict[str, Any]], Reply]:
    def script(body: dict[str, Any]) -> Reply:
        if body["messages"][-1]["role"] == "tool":
            return text_reply("finished")
        return tool_reply("Running it.", "bash", {"command": command})

    return script


def test_a_spinner_turns_while_a_tool_runs_with_its_output_above(
    serve: Callable[..., ChatServer], spawn: Spawn
) -> None:
    server = serve(bash_then_text("echo started; sleep 3; echo ended"))
    child = spawn("--base-url", server.url, "--model", "m", "--yes")
    child.expect_exact("> ")
    child.send("go\r")
    child.expect("● bash(\x1b\\[0m)? (\x1b\\[36m)?echo started; sleep 3; echo ended")
    child.expect_exact("│ started")  # streamed output, while the command still runs
    frames: set[str] = set()
    while len(frames) < 3:  # the spinner is animated, not one static frame
        child.expect(SPINNER)
        frames.add(child.match.group(1))
    # A line typed meanwhile stays visible: redrawn under the spinner at each frame.
    child.send("chan")
    child.expect(SPINNER)
    child.expect_exact("\r\nchan")
    child.expect(SPINNER)
    child.expect_exact("\r\nchan")
    child.send("ge\r")
    child.expect_exact("[steering: change]")
    child.expect_exact("│ ended")
    child.expect_exact("└ bash echo started; sleep 3; echo ended")
    child.expect_exact("✓ done")
    child.expect_exact("finished")
    child.expect_exact("> ")
    child.send(CTRL_D)
    child.expect(pexpect.EOF)


def test_a_waiting_indicator_before_the_first_token(
    serve: Callable[..., ChatServer], spawn: Spawn
) -> None:
    release = threading.Event()
    server = serve(lambda body: [{"wait": release}, *text_reply("here it is")])
    child = spawn("--base-url", server.url, "--model", "m")
    child.expect_exact("> ")
    child.send("hi\r")
    child.expect(f"[{FRAMES}] waiting for the model… \\d+s")
    release.set()
    child.expect_exact("here it is")
    child.expect_exact("> ")
    child.send(CTRL_D)
    child.expect(pexpect.EOF)


def test_markdown_is_rendered_while_the_answer_streams(
    serve: Callable[..., ChatServer], spawn: Spawn
) -> None:
    """Headings and bold are drawn as such (no ``##`` or ``**`` on screen) before the
    stream has ended; the open block is drawn live, completed blocks once."""
    release = threading.Event()

    def script(body: dict[str, Any]) -> Reply:
        return [
            {"delta": {"role": "assistant", "content": "## Plan of attack\n\nFirst a "}},
            {"delta": {"content": "**bold** move, then `code`.\n\nStill"}},
            {"wait": release},
            {"delta": {"content": " streaming."}},
            {"finish": "stop"},
        ]

    server = serve(script)
    child = spawn("--base-url", server.url, "--model", "m")
    log = io.StringIO()
    child.logfile_read = log
    child.expect_exact("> ")
    child.send("plan\r")
    # Rendered (an escape sequence right before the heading's text) while held open.
    child.expect("\x1b\\[[0-9;]*mPlan of attack")
    child.expect("\x1b\\[[0-9;]*mbold\x1b\\[")
    child.expect_exact("Still")  # the open block, drawn live
    seen = child.before + child.after
    assert "## Plan" not in seen
    assert "**bold**" not in seen
    assert "`code`" not in seen
    assert not release.is_set()  # all of it before the answer's end was sent
    release.set()
    child.expect_exact("Still streaming.")
    child.expect_exact("> ")
    # On screen at the end: each block once (the live drawing of the open block is gone).
    pyte = pytest.importorskip("pyte", reason="pyte is in the test extra: pip install -e .[test]")
    screen = pyte.Screen(120, 40)
    pyte.Stream(screen).feed(log.getvalue())
    lines = [line.strip() for line in screen.display if line.strip()]
    answer = lines[lines.index("> plan") + 1 : -2]  # up to the usage line and the prompt
    assert answer == ["Plan of attack", "First a bold move, then code.", "Still streaming."]
    child.send(CTRL_D)
    child.expect(pexpect.EOF)


def test_no_spinner_frames_or_escapes_in_a_pipe(
    serve: Callable[..., ChatServer], cli_env: dict[str, str], workdir: Path
) -> None:
    server = serve(bash_then_text("sleep 0.5; echo done"))
    argv = ["--cwd", str(workdir), "--base-url", server.url, "--model", "m", "--yes", "-p", "go"]
    result = subprocess.run(
        [sys.executable, "-m", "pitrio", *argv],
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,  # piped stdin would join the prompt, as in Pi
    )
    assert result.returncode == 0, result.stderr
    assert "● bash sleep 0.5; echo done  (running…)" in result.stderr
    assert "│ done" in result.stderr
    assert result.stdout == "finished\n"  # the last answer, as pi -p writes it
    assert not set(FRAMES) & set(result.stdout + result.stderr)
    assert "\x1b[" not in result.stdout + result.stderr
    assert "waiting for the model" not in result.stdout + result.stderr


def test_the_screen_after_a_run_keeps_no_trace_of_the_live_region(
    serve: Callable[..., ChatServer], spawn: Spawn
) -> None:
    """The whole byte stream replayed on a terminal emulator (pyte): after a run with a
    spinner, streamed tool output, a slash command and a steering line typed mid-run,
    the screen holds each line once, no spinner frame, no stray typed text."""
    pyte = pytest.importorskip("pyte", reason="pyte is in the test extra: pip install -e .[test]")

    def script(body: dict[str, Any]) -> Reply:
        if len(body["messages"]) > 2:  # after the tool (and the steering line)
            return text_reply("finished")
        return tool_reply("Running it.", "bash", {"command": "echo started; sleep 2; echo ended"})

    server = serve(script)
    child = spawn("--base-url", server.url, "--model", "m", "--yes")
    log = io.StringIO()
    child.logfile_read = log
    child.expect_exact("> ")
    child.send("go\r")
    child.expect_exact("│ started")
    child.expect(SPINNER)
    child.send("/cost\r")
    child.expect_exact("this session: input")
    child.expect(SPINNER)
    child.send("go on\r")
    child.expect_exact("[steering: go on]")
    child.expect_exact("finished")
    child.expect_exact("> ")
    screen = pyte.Screen(120, 40)
    pyte.Stream(screen).feed(log.getvalue())
    lines = [line.rstrip() for line in screen.display if line.strip()]
    text = "\n".join(lines)
    assert not set(FRAMES) & set(text), text
    assert "waiting for the model" not in text
    for once in ("● bash", "│ started", "│ ended", "└ bash", "this session: input",
                 "[steering: go on]", "finished"):  # fmt: skip
        assert sum(once in line for line in lines) == 1, (once, text)
    assert sum("go on" in line for line in lines) == 1, text  # only in the steering note
    assert lines[-1] == ">"
    child.send(CTRL_D)
    child.expect(pexpect.EOF)


def test_a_line_typed_but_not_sent_during_a_run_is_shown_at_the_next_prompt(
    serve: Callable[..., ChatServer], spawn: Spawn
) -> None:
    pyte = pytest.importorskip("pyte", reason="pyte is in the test extra: pip install -e .[test]")
    server = serve(bash_then_text("sleep 1"))
    child = spawn("--base-url", server.url, "--model", "m", "--yes")
    log = io.StringIO()
    child.logfile_read = log
    child.expect_exact("> ")
    child.send("go\r")
    child.expect(SPINNER)
    child.send("half a tho")
    child.expect_exact("finished")
    child.expect_exact("> half a tho")
    screen = pyte.Screen(120, 40)
    pyte.Stream(screen).feed(log.getvalue())
    lines = [line.rstrip() for line in screen.display if line.strip()]
    assert lines[-1] == "> half a tho"
    assert sum("half a tho" in line for line in lines) == 1
    child.send("ught\r")  # the reader had it all along: the line is sent whole
    child.expect_exact("> ")
    assert "half a thought" in json.dumps(server.requests[-1]["messages"])
    child.send(CTRL_D)
    child.expect(pexpect.EOF)
