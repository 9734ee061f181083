"""The terminal's one sanitizer (``pitrio.cli._sanitize``): every control character and
escape sequence in text from a model, a tool or a file is shown, never obeyed, and the
renderer's every path (answers, thinking, markdown, tool arguments and output, errors,
notes) goes through it; the consent question shows a call in full."""

from __future__ import annotations

import io
import re
import unicodedata
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from pitrio import (
    AgentEnd,
    AgentStart,
    AssistantMessage,
    MessageEnd,
    MessageStart,
    MessageUpdate,
    TextContent,
    TextDeltaEvent,
    ThinkingDeltaEvent,
    ThinkingEndEvent,
    ThinkingStartEvent,
    ToolExecutionEnd,
    ToolExecutionStart,
    ToolExecutionUpdate,
    ToolResult,
)
from pitrio.cli._render import Renderer, consent_rows
from pitrio.cli._sanitize import TAB, inert, one_line, shown_whitespace, visible, wrap
from pitrio.harness import AutoRetryEnd, AutoRetryStart, CompactionEnd, CompactionStart

PARTIAL = AssistantMessage(stop_reason="pending")

ATTACKS = {
    "clear screen": "\x1b[2J\x1b[H",
    "cursor up, erase line": "echo pwned > FILE #\r\x1b[2K\x1b[1Als -la",
    "window title (OSC 0)": "\x1b]0;owned\x07",
    "hyperlink (OSC 8)": "\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\",
    "clipboard (OSC 52)": "\x1b]52;c;cm0gLXJmIH4=\x07",
    "device control (DCS)": "\x1bP+q544e\x1b\\",
    "8-bit CSI": "\x9b2J",
    "bidi override": "safe\u202etxt.exe",
    "zero width": "r\u200bm -rf",
    "backspace": "rm -rf /\x08\x08\x08\x08\x08\x08\x08\x08ls     ",
    "tag characters": "hi\U000e0069\U000e0067",
}

# What only the renderer itself may write: colours (SGR), and the live region's own
# moves (carriage return, cursor up, erase below, erase line).
OWN_ESCAPES = re.compile(r"\x1b\[[0-9;]*m|\x1b\[\d+A|\x1b\[J|\x1b\[K")


def foreign(output: str) -> list[str]:
    """Escape sequences and controls in ``output`` that the renderer did not mean."""
    rest = OWN_ESCAPES.sub("", output)
    return [c for c in rest if c != "\n" and c != "\r" and unicodedata.category(c)[0] == "C"]


def hidden(char: str) -> bool:
    """A character the terminal obeys or draws as nothing."""
    return unicodedata.category(char) in {"Cc", "Cf", "Cs", "Zl", "Zp"}


@pytest.mark.parametrize("attack", ATTACKS.values(), ids=ATTACKS.keys())
def test_attacks_are_shown_not_obeyed(attack: str) -> None:
    shown = visible(attack)
    assert not [c for c in shown if hidden(c) and c != "\n"]
    assert "\x1b" not in shown
    # Each character is kept or replaced by a mark; the printable ones are all there.
    printable = [c for c in attack if not hidden(c)]
    assert "".join(c for c in shown if c in printable) == "".join(printable)


def test_the_marks() -> None:
    assert visible("\x1b[2J\x1b[H") == "␛[2J␛[H"
    assert visible("a\rb") == "a␍b"
    assert visible("\x00\x07\x08\x7f") == "␀␇␈␡"
    assert visible("\x9b\u202e\u2066\u200b\ufeff") == "<U+009B><U+202E><U+2066><U+200B><U+FEFF>"
    assert visible("\ud800") == "<U+D800>"  # a lone surrogate could not even be written
    assert visible("one\r\ntwo\n\tx") == f"one\ntwo\n{TAB}x"
    assert one_line("one\ntwo\r\nthree") == "one ⏎ two ⏎ three"
    plain = "plain text, ünïcödé, 中文, emoji 🎉"
    assert visible(plain) is plain


def test_stacked_combining_marks_beyond_two_are_shown_as_code_points() -> None:
    """Zalgo text would be drawn over the rows around it; accents stay accents."""
    assert visible("e\u0301 a\u0300\u0323") == "e\u0301 a\u0300\u0323"  # é, ạ̀
    zalgo = "Z" + "\u0301\u0302\u0303\u0304" + "a"
    assert visible(zalgo) == "Z\u0301\u0302<U+0303><U+0304>a"
    assert one_line(zalgo + "\n") == "Z\u0301\u0302<U+0303><U+0304>a ⏎ "


def test_every_hidden_character_is_made_visible() -> None:
    """Every control, format and separator character this Python's Unicode knows
    (bidi overrides and isolates, zero-width characters, C0, C1, DEL) gets a mark."""
    chars = "".join(chr(c) for c in range(0x110000) if hidden(chr(c)) and c != 0x0A)
    shown = visible(chars)
    assert not [c for c in shown if hidden(c) and c != "\n"]
    for char in "\u00ad\u061c\u180e\u200b\u200c\u200d\u200e\u200f\u2060\ufeff":
        assert visible(char) == f"<U+{ord(char):04X}>"
    for code in [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]:  # bidi
        assert visible(chr(code)) == f"<U+{code:04X}>"


def escapes() -> st.SearchStrategy[str]:
    """Pieces of terminal trouble: controls, CSI / OSC / DCS sequences, C1, bidi."""
    params = st.text("0123456789;?", max_size=6)
    return st.one_of(
        st.sampled_from(list(ATTACKS.values())),
        st.characters(min_codepoint=0, max_codepoint=0x1F).map(str),
        st.characters(min_codepoint=0x7F, max_codepoint=0x9F).map(str),
        st.sampled_from(["\u202a", "\u202e", "\u2066", "\u2069", "\u200b", "\u200d", "\ufeff"]),
        st.builds(lambda p, f: f"\x1b[{p}{f}", params, st.sampled_from("ABCDHJKmsuhl")),
        st.builds(lambda n, t: f"\x1b]{n};{t}\x07", st.sampled_from(["0", "2", "8", "52"]), params),
        st.just("\x1b"),
    )


def hostile_text(max_size: int = 12) -> st.SearchStrategy[str]:
    """Printable text mixed with :func:`escapes`."""
    printable = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=10)
    return st.lists(st.one_of(printable, escapes(), st.just("\n")), max_size=max_size).map("".join)


@given(hostile_text())
def test_visible_leaves_nothing_to_obey(text: str) -> None:
    shown = visible(text)
    assert not [c for c in shown if hidden(c) and c != "\n"]
    assert visible(shown) == shown  # idempotent: cleaning twice changes nothing
    assert shown.count("\n") == text.count("\n")  # the lines stay the lines
    assert "\n" not in one_line(text)


@given(hostile_text())
def test_inert_leaves_no_control_a_terminal_obeys(text: str) -> None:
    """``-p``'s answer into a pipe: no control but tab and newline (and CR before a
    newline) is left, and nothing else changes (tabs, CR LF, format characters)."""
    shown = inert(text)
    obeyed = [c for c in shown if unicodedata.category(c) == "Cc" and c not in "\t\n\r"]
    assert obeyed == []
    assert [i for i, c in enumerate(shown) if c == "\r" and shown[i + 1 : i + 2] != "\n"] == []
    assert inert(shown) == shown
    assert shown.count("\n") == text.count("\n")


def test_inert_keeps_what_a_program_reads() -> None:
    text = "a\tb\r\nc\x1b]0;owned\x07 d\re\x9b2J \u202e é"
    assert inert(text) == "a\tb\r\nc␛]0;owned␇ d␍e<U+009B>2J \u202e é"
    assert inert("plain words\n") == "plain words\n"


@given(hostile_text(), hostile_text())
def test_a_sequence_split_between_deltas_is_shown_the_same(a: str, b: str) -> None:
    """Character by character: cleaning each delta equals cleaning the whole answer
    (but for a CR LF pair split across two deltas)."""
    if a.endswith("\r") and b.startswith("\n"):
        b = " " + b
    assert visible(a) + visible(b) == visible(a + b)


def test_hidden_whitespace_is_shown_and_wrapping_keeps_every_character() -> None:
    assert shown_whitespace("ls -la") == "ls -la"
    assert shown_whitespace(" ls  -la ") == "·ls··-la·"
    assert shown_whitespace("ls" + " " * 300 + "x") == "ls·<300 spaces>·x"
    line = "x" * 250
    rows = wrap(line, 80)
    assert [len(r) for r in rows] == [80, 80, 80, 10]
    assert "".join(rows) == line


def test_the_consent_question_shows_a_disguised_command_whole() -> None:
    """The reviewer's attack: the terminal would have drawn ``Allow bash: ls -la?``."""
    command = "echo pwned > FILE #\r\x1b[2K\x1b[1Als -la"
    rows = consent_rows("bash", {"command": command}, 79)
    assert rows == [
        "bash asks to run this command (1 line, 34 characters):",
        "  │ echo pwned > FILE #␍␛[2K␛[1Als -la",
        "Allow this bash call?  [y]es / [n]o / [a]lways for this session",
    ]


def test_the_consent_question_shows_a_command_hidden_after_spaces_and_newlines() -> None:
    """``ls`` + 300 spaces + 40 newlines + the real command: nothing cut, the
    whitespace counted, the real command on screen right above the question."""
    command = "ls" + " " * 300 + "\n" * 40 + "echo pwned > FILE"
    rows = consent_rows("bash", {"command": command}, 79)
    assert rows[0] == "bash asks to run this command (41 lines, 359 characters):"
    assert rows[1:-1] == ["  │ ls·<300 spaces>·⏎", "  │ <39 empty lines>⏎", "  │ echo pwned > FILE"]
    assert rows[-1].startswith("Allow this bash call?")


@given(st.text(max_size=400), st.integers(20, 120))
def test_consent_rows_keep_every_character(command: str, width: int) -> None:
    rows = consent_rows("bash", {"command": command}, width)
    block = rows[1:-1]
    assert all(len(row) <= width for row in block)
    assert all(row.startswith(("  │ ", "  ┆ ")) for row in block)
    assert rows[-1] == "Allow this bash call?  [y]es / [n]o / [a]lways for this session"
    assert not [c for row in rows for c in row if hidden(c)]


def test_write_and_edit_questions_show_the_path_and_the_texts() -> None:
    rows = consent_rows("write", {"path": "a\u202etxt.py", "content": "x\ny\n"}, 79)
    assert rows == [
        "write asks to write 3 lines, 4 characters to this file:",
        "  │ a<U+202E>txt.py",
        "Allow this write call?  [y]es / [n]o / [a]lways for this session",
    ]
    rows = consent_rows("edit", {"path": "f.py", "oldText": "a\tb", "newText": "c "}, 79)
    assert rows[1:-1] == [
        "  │ f.py",
        "replacing (1 line, 3 characters):",
        "  │ a⇥b",
        "with (1 line, 2 characters):",
        "  │ c·",
    ]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def delta(text: str) -> MessageUpdate:
    event = TextDeltaEvent(content_index=0, delta=text, partial=PARTIAL)
    return MessageUpdate(message=PARTIAL, assistant_message_event=event)


def update(event: Any) -> MessageUpdate:
    return MessageUpdate(message=PARTIAL, assistant_message_event=event)


def every_path(text: str) -> list[Any]:
    """``text`` in every place a run puts a model's or a tool's text."""
    result = ToolResult(content=(TextContent(text=text),), details={"diff": f"+{text}"})
    failed = AssistantMessage(
        content=(TextContent(text=text),), stop_reason="error", error_message=text
    )
    return [
        AgentStart(),
        MessageStart(message=PARTIAL),
        update(ThinkingStartEvent(content_index=0, partial=PARTIAL)),
        update(ThinkingDeltaEvent(content_index=0, delta=text, partial=PARTIAL)),
        update(ThinkingEndEvent(content_index=0, content=text, partial=PARTIAL)),
        delta(text),
        delta("\n\n" + text),
        MessageEnd(message=AssistantMessage(content=(TextContent(text=text),))),
        ToolExecutionStart(tool_call_id="a", tool_name=text or "t", args={"command": text}),
        ToolExecutionUpdate(
            tool_call_id="a",
            tool_name=text or "t",
            args={},
            partial_result=ToolResult(content=(TextContent(text=text + "\n"),)),
        ),
        ToolExecutionEnd(tool_call_id="a", tool_name=text or "t", result=result, is_error=False),
        ToolExecutionStart(tool_call_id="b", tool_name="read", args={"path": text}),
        ToolExecutionEnd(tool_call_id="b", tool_name="read", result=result, is_error=True),
        AutoRetryStart(attempt=1, max_attempts=3, delay=0.5, error_message=text),
        AutoRetryEnd(success=False, attempt=3, final_error=text),
        CompactionStart(reason="overflow"),
        CompactionEnd(reason="overflow", status="failed", error_message=text),
        MessageStart(message=PARTIAL),
        MessageEnd(message=failed),
        AgentEnd(messages=(failed,)),
    ]


@pytest.mark.parametrize(
    ("style", "live"), [("plain", False), ("ansi", False), ("ansi", True), ("rich", True)]
)
@pytest.mark.parametrize("attack", ATTACKS.values(), ids=ATTACKS.keys())
def test_every_render_path_shows_attacks_as_text(style: Any, live: bool, attack: str) -> None:
    out = Terminal()
    renderer = Renderer(out, style=style, live=live)
    for event in every_path(attack):
        renderer(event)
    renderer.note(f"note {attack}")
    renderer.error(f"error {attack}")
    renderer.say(f"say {attack}")
    renderer.ask_consent("c", "bash", {"command": attack})
    output = out.getvalue()
    assert foreign(output) == []
    assert "␛" in output or "<U+" in output or "␍" in output or "␈" in output


@settings(max_examples=50, deadline=None)
@given(hostile_text())
def test_every_render_path_writes_only_its_own_escapes(text: str) -> None:
    for style in ("plain", "ansi", "rich"):
        out = Terminal()
        renderer = Renderer(out, style=style, live=style != "plain")
        for event in every_path(text):
            renderer(event)
        renderer.ask_consent("c", "bash", {"command": text})
        assert foreign(out.getvalue()) == []


def test_rich_never_reads_markup_or_links_in_an_answer() -> None:
    """``[bold red]`` in an answer is text; a markdown link shows where it goes (no
    OSC 8 hyperlink hiding the target behind its text)."""
    out = Terminal()
    renderer = Renderer(out, style="rich", live=True)
    text = "[bold red]not markup[/bold red] and [click here](https://evil.example/x)\n\nend"
    renderer(AgentStart())
    renderer(MessageStart(message=PARTIAL))
    renderer(delta(text))
    final = AssistantMessage(content=(TextContent(text=text),))
    renderer(MessageEnd(message=final))
    renderer(AgentEnd(messages=(final,)))
    output = out.getvalue()
    assert "[bold red]not markup[/bold red]" in output
    assert "https://evil.example/x" in output
    assert "\x1b]" not in output


def test_rich_shows_html_in_an_answer_as_text() -> None:
    """rich draws no HTML but drops it: an HTML block or comment would hide its text."""
    out = Terminal()
    renderer = Renderer(out, style="rich", live=True)
    text = "a <span>inline</span> b\n\n<div>\nhidden block\n</div>\n\n<!-- hidden comment -->"
    renderer(AgentStart())
    renderer(MessageStart(message=PARTIAL))
    renderer(delta(text))
    final = AssistantMessage(content=(TextContent(text=text),))
    renderer(MessageEnd(message=final))
    renderer(AgentEnd(messages=(final,)))
    output = out.getvalue()
    for shown in ("<span>inline</span>", "<div>", "hidden block", "<!-- hidden comment -->"):
        assert shown in output
