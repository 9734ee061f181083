"""What a person sees, when text from a model is hostile: the renderer's output goes into
a real pseudo-terminal and is read back by a terminal emulator (pyte). Text with escape
sequences never changes the screen outside the transcript, never sets the window title,
and the consent question shows the exact command, every character, before pitrio's own
question line; the CLI itself, against a scripted OpenAI-compatible server whose replies
are attacks, does the same end to end."""

from __future__ import annotations

import fcntl
import io
import json
import os
import re
import struct
import sys
import termios
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given, settings, strategies as st

from pitrio import (
    AgentStart,
    AssistantMessage,
    MessageEnd,
    MessageStart,
    TextContent,
    ToolExecutionStart as Start,
)
from pitrio.cli._render import Renderer
from pitrio.cli._sanitize import visible

from .conftest import ChatServer, Reply, text_reply, tool_reply
from .test_sanitize import PARTIAL, delta, escapes, every_path

pyte = pytest.importorskip("pyte", reason="pyte is in the test extra: pip install -e .[test]")
pexpect = pytest.importorskip(
    "pexpect", reason="pexpect is in the test extra: pip install -e .[test]"
)

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")

SENTINEL = "◆ drawn before pitrio: must stay ◆"
QUESTION = "Allow this bash call?  [y]es / [n]o / [a]lways for this session"
ASKING = "waiting for your answer (y / n / a)"


class Pty:
    """A real pseudo-terminal of ``columns`` x ``rows``: the renderer writes to its
    terminal side (a tty: ``isatty()``, its size, the line discipline's CR LF), a
    thread reads the other side; :meth:`screen` replays it all on pyte."""

    def __init__(self, columns: int, rows: int) -> None:
        self.columns, self.rows = columns, rows
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        self._master = master
        self.out = open(slave, "w", encoding="utf-8", closefd=True)  # noqa: SIM115
        self._read: list[bytes] = []
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self._master, 65536)
            except OSError:  # EIO: the terminal side is closed
                return
            if not data:
                return
            self._read.append(data)

    def screen(self) -> Any:
        """Close the terminal side and return the emulator's screen after it all."""
        self.out.close()
        self._reader.join(10)
        assert not self._reader.is_alive()
        os.close(self._master)
        screen = pyte.Screen(self.columns, self.rows)
        pyte.Stream(screen).feed(b"".join(self._read).decode("utf-8"))
        return screen


def printable() -> st.SearchStrategy[str]:
    """ASCII, but not the marks a consent block shows (so that one can be read back)."""
    return st.text(
        st.characters(min_codepoint=0x20, max_codepoint=0x7E, exclude_characters="<>"),
        max_size=12,
    )


def commands() -> st.SearchStrategy[str]:
    """Commands a model could send: words, runs of spaces, tabs, newlines, escapes."""
    pieces = st.one_of(
        printable(),
        escapes(),
        st.integers(1, 20).map(lambda n: " " * n),
        st.sampled_from(["\n", "\n\n\n\n", "\t", "\r\n"]),
    )
    return st.lists(pieces, max_size=10).map("".join)


def unshow(rows: list[str], room: int) -> str:
    """The text a consent block shows, read back from its rows on the screen (the
    inverse of the block's marks), to compare with the command."""
    lines: list[str] = []
    for row in rows:
        gutter, body = row[:4], row[4:]
        assert gutter in {"  │ ", "  ┆ "}, row
        if gutter == "  ┆ ":  # a wrapped row: the one before it was full
            lines[-1] = lines[-1][:room] + body.rstrip(" ")
            continue
        lines.append(body.rstrip(" "))
    text: list[str] = []
    for line in lines:
        empty = re.fullmatch(r"<(\d+) empty lines>⏎", line)
        if empty:
            text.append("\n" * int(empty.group(1)))
            continue
        line = re.sub(r"·<(\d+) spaces>·", lambda m: " " * int(m.group(1)), line)
        line = line.replace("·", " ")
        text.append(line.removesuffix("⏎") + "\n" * line.endswith("⏎"))
    return "".join(text)


def ask_on_a_pty(style: Any, answer: str, command: str, columns: int = 100) -> Any:
    pty = Pty(columns, 300)
    pty.out.write(SENTINEL + "\n\n")
    renderer = Renderer(pty.out, style=style, live=True)
    renderer(AgentStart())
    renderer(MessageStart(message=PARTIAL))
    renderer(delta(answer))
    renderer(MessageEnd(message=AssistantMessage(content=(TextContent(text=answer),))))
    renderer(Start(tool_call_id="c", tool_name="bash", args={"command": command}))
    renderer.ask_consent("c", "bash", {"command": command})
    return pty.screen()


def assert_untouched(screen: Any) -> None:
    assert screen.display[0].rstrip() == SENTINEL
    assert screen.title == ""
    assert screen.icon_name == ""


def test_the_emulator_obeys_what_pitrio_must_not_pass() -> None:
    """The check has teeth: raw, the attacks clear the sentinel and set the title."""
    pty = Pty(80, 24)
    pty.out.write(SENTINEL + "\n" + "\x1b]0;owned\x07\x1b[2J\x1b[H")
    screen = pty.screen()
    assert screen.display[0].rstrip() != SENTINEL
    assert screen.title == "owned"


@settings(max_examples=40, deadline=None)
@given(
    style=st.sampled_from(["ansi", "rich"]),
    answer=st.lists(st.one_of(printable(), escapes()), max_size=8).map("".join),
    command=commands(),
)
def test_the_consent_question_shows_the_exact_command(
    style: str, answer: str, command: str
) -> None:
    screen = ask_on_a_pty(style, answer, command)
    assert_untouched(screen)
    rows = list(screen.display)
    question = max(i for i, row in enumerate(rows) if row.startswith("Allow this bash"))
    assert rows[question].rstrip() == QUESTION  # pitrio's own words only, on its own row
    header = max(i for i in range(question) if rows[i].startswith("bash asks to run"))
    room = 100 - 1 - 5  # the renderer's width (a column short), less gutter and mark
    assert unshow(rows[header + 1 : question], room) == visible(command.replace("\t", "⇥"))
    # While it waits the call does not pretend to run.
    below = "\n".join(rows[question + 1 :])
    assert ASKING in below
    assert "running…" not in below


@settings(max_examples=30, deadline=None)
@given(style=st.sampled_from(["plain", "ansi", "rich"]), text=commands())
def test_no_render_path_changes_the_screen_outside_the_transcript(style: Any, text: str) -> None:
    pty = Pty(120, 300)
    pty.out.write(SENTINEL + "\n\n")
    renderer = Renderer(pty.out, style=style, live=style != "plain")
    for event in every_path(text):
        renderer(event)
    renderer.note(text)
    renderer.say(text)
    screen = pty.screen()
    assert_untouched(screen)
    if style != "rich":  # rich reflows markdown; elsewhere each line is on screen, in order
        # Rows joined as they are (a line wider than the screen wraps onto the next row).
        shown = "".join(screen.display)
        for line in visible(text).split("\n"):
            assert line.rstrip() in shown


def test_the_reviewers_attacks_on_a_pty() -> None:
    """``Allow bash: ls -la?`` is not what the screen says, and ``ls`` + 300 spaces +
    40 newlines shows the real command right above the question."""
    screen = ask_on_a_pty("ansi", "ok", "echo pwned > FILE #\r\x1b[2K\x1b[1Als -la")
    text = "\n".join(row.rstrip() for row in screen.display)
    assert "  │ echo pwned > FILE #␍␛[2K␛[1Als -la\n" + QUESTION in text
    assert "Allow bash: ls -la?" not in text

    screen = ask_on_a_pty("rich", "ok", "ls" + " " * 300 + "\n" * 40 + "echo pwned > FILE")
    text = "\n".join(row.rstrip() for row in screen.display)
    assert (
        "bash asks to run this command (41 lines, 359 characters):\n"
        "  │ ls·<300 spaces>·⏎\n  │ <39 empty lines>⏎\n  │ echo pwned > FILE\n" + QUESTION
    ) in text


# -- the CLI, end to end -----------------------------------------------------------------

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
            dimensions=(60, 120),
        )
        child.logfile_read = io.StringIO()
        children.append(child)
        return child

    yield start
    for child in children:
        if child.isalive():
            child.terminate(force=True)


def screen_of(child: Any) -> Any:
    screen = pyte.Screen(120, 60)
    pyte.Stream(screen).feed(child.logfile_read.getvalue())
    return screen


def attack_script(command: str) -> Callable[[dict[str, Any]], Reply]:
    def script(body: dict[str, Any]) -> Reply:
        last = body["messages"][-1]
        if last["role"] == "tool":
            return text_reply(f"tool said: {json.dumps(last['content'])}")
        return tool_reply("Listing.\x1b]0;owned\x07", "bash", {"command": command})

    return script


def test_a_disguised_bash_call_is_shown_whole_and_n_refuses_it(
    serve: Callable[..., ChatServer], spawn: Spawn, workdir: Path
) -> None:
    server = serve(attack_script("echo pwned > FILE #\r\x1b[2K\x1b[1Als -la"))
    child = spawn("--base-url", server.url, "--model", "m")
    child.expect_exact("> ")
    child.send("list the files\r")
    child.expect_exact("Allow this bash call?")
    child.expect_exact(ASKING)  # the live region waits too: no "bash running… 5s"
    screen = screen_of(child)
    rows = [row.rstrip() for row in screen.display]
    question = rows.index(QUESTION)
    assert rows[question - 2 : question] == [
        "bash asks to run this command (1 line, 34 characters):",
        "  │ echo pwned > FILE #␍␛[2K␛[1Als -la",
    ]
    assert "Allow bash: ls -la?" not in "\n".join(rows)
    assert (screen.title, screen.icon_name) == ("", "")
    child.send("n\r")
    child.expect_exact("tool said:")
    child.expect_exact("The user declined to run this bash call.")
    child.expect_exact("> ")
    rows = [row.rstrip() for row in screen_of(child).display]
    assert rows[rows.index(QUESTION) + 1] == "  ✗ declined"
    assert not (workdir / "FILE").exists()
    child.send("\x04")
    child.expect(pexpect.EOF)


def test_a_command_hidden_after_spaces_and_newlines_is_shown_above_the_question(
    serve: Callable[..., ChatServer], spawn: Spawn, workdir: Path
) -> None:
    """The terminal used to cut the question at 300 characters: ``Allow bash: ls …``."""
    server = serve(attack_script("ls" + " " * 300 + "\n" * 40 + "echo pwned > FILE"))
    child = spawn("--base-url", server.url, "--model", "m")
    child.expect_exact("> ")
    child.send("list the files\r")
    child.expect_exact("Allow this bash call?")
    child.expect_exact(ASKING)
    rows = [row.rstrip() for row in screen_of(child).display]
    question = rows.index(QUESTION)
    assert rows[question - 4 : question] == [
        "bash asks to run this command (41 lines, 359 characters):",
        "  │ ls·<300 spaces>·⏎",
        "  │ <39 empty lines>⏎",
        "  │ echo pwned > FILE",
    ]
    assert not [row for row in rows[question:] if "running…" in row]
    child.send("n\r")
    child.expect_exact("The user declined to run this bash call.")
    child.expect_exact("> ")
    assert not (workdir / "FILE").exists()
    child.send("\x04")
    child.expect(pexpect.EOF)


def test_an_answer_that_clears_the_screen_clears_nothing(
    serve: Callable[..., ChatServer], spawn: Spawn
) -> None:
    hostile = "Done.\x1b[2J\x1b[H\x1b]0;owned\x07\x1b]52;c;cm0gLXJm\x07 \x9b2J\u202eend"
    server = serve(lambda body: text_reply(hostile))
    child = spawn("--base-url", server.url, "--model", "m")
    child.expect_exact("> ")
    child.send("hi\r")
    child.expect_exact("end")
    child.expect_exact("> ")
    screen = screen_of(child)
    rows = [row.rstrip() for row in screen.display]
    assert rows[0].startswith("pitrio: openai-compatible/m in ")  # still the banner
    assert "Done.␛[2J␛[H␛]0;owned␇␛]52;c;cm0gLXJm␇ <U+009B>2J<U+202E>end" in rows
    assert (screen.title, screen.icon_name) == ("", "")
    child.send("\x04")
    child.expect(pexpect.EOF)


def test_print_mode_in_a_pipe_shows_escapes_as_text(
    serve: Callable[..., ChatServer], cli_env: dict[str, str], workdir: Path
) -> None:
    """``-p`` into a pipe: the answer, the tool's header and its output carry no escape
    (``--yes`` runs the call; what it printed is shown, not obeyed), neither in the
    transcript on stderr nor in the answer on stdout."""
    import subprocess

    command = "printf 'out\\033[2Jput\\n'"
    server = serve(attack_script(command))
    argv = ["--cwd", str(workdir), "--base-url", server.url, "--model", "m", "--yes", "-p", "go"]
    result = subprocess.run(
        [sys.executable, "-m", "pitrio", *argv],
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout + result.stderr
    assert "Listing.␛]0;owned␇" in result.stderr
    assert "│ out␛[2Jput" in result.stderr
    assert result.stdout == 'tool said: "out\\u001b[2Jput\\n"\n'  # the last answer only


async def test_a_call_waiting_for_consent_has_no_running_spinner(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """While the question waits the live region says so (no frames, no seconds); once
    answered, the call's spinner counts from the answer, when the tool starts."""
    out = io.StringIO()  # no size: 80x24
    renderer = Renderer(out, style="ansi", live=True)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(renderer.animate)
        renderer(AgentStart())
        renderer(Start(tool_call_id="c", tool_name="bash", args={"command": "make"}))
        renderer.ask_consent("c", "bash", {"command": "make"})
        start = len(out.getvalue())
        await trio.sleep(5.05)
        waiting = out.getvalue()[start:]
        assert f"? bash: {ASKING}" in waiting
        assert "running…" not in waiting
        start = len(out.getvalue())
        renderer.answered("c", "y")
        await trio.sleep(1.05)
        running = out.getvalue()[start:]
        assert "\x1b[32m  ✓ allowed\x1b[0m\n" in running  # what was decided stays on screen
        assert "bash running… 1s" in running
        assert "bash running… 5s" not in running
        assert ASKING not in running
        nursery.cancel_scope.cancel()
