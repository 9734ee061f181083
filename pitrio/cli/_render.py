"""The terminal transcript: streamed text, thinking, tool blocks, diffs, usage.

:class:`Renderer` is a harness listener. It writes plain text when the output is not a
terminal (or with ``--no-color``), and ANSI colours in a terminal, where a live
region at the bottom shows a spinner while the model is awaited and while each tool
runs (its streamed output printed above it as it comes), and the answer as it streams:
with the optional ``rich`` package (``pip install 'pitrio[cli]'``) as markdown, each
top-level block rendered once when it is complete and only the open block redrawn, at
most every :attr:`Renderer.REFRESH_SECONDS` (so streaming stays linear in the answer's
length).

Every string a model, a tool or a file wrote passes :func:`~pitrio.cli._sanitize.visible`
(or :func:`~pitrio.cli._sanitize.one_line`) on its way in, so that the terminal is never
told to do anything by it; the renderer's own colours and cursor moves are added after.
A consent question (:meth:`Renderer.ask_consent`) shows the whole call.
"""

from __future__ import annotations

import io
import json
import os
import time
from collections.abc import Mapping
from typing import Any, Final, Literal, Protocol, TextIO, final

import trio

from pitrio import (
    AgentEnd,
    AgentStart,
    AssistantMessage,
    MessageEnd,
    MessageStart,
    MessageUpdate,
    Model,
    TextContent,
    TextDeltaEvent,
    ThinkingDeltaEvent,
    ThinkingEndEvent,
    ThinkingStartEvent,
    ToolCall,
    ToolExecutionEnd,
    ToolExecutionStart,
    ToolExecutionUpdate,
    Usage,
)
from pitrio.harness import (
    AutoRetryEnd,
    AutoRetryStart,
    CompactionEnd,
    CompactionStart,
    HarnessEvent,
    Settled,
)

from ._sanitize import NEWLINE_MARK, one_line, shown_whitespace, visible, wrap

__all__ = [
    "InputEcho",
    "Renderer",
    "Style",
    "consent_rows",
    "format_usage",
    "session_cost",
    "use_color",
]

Style = Literal["plain", "ansi", "rich"]

_DIM: Final = "2"
_RED: Final = "31"
_GREEN: Final = "32"
_YELLOW: Final = "33"
_CYAN: Final = "36"
_BOLD: Final = "1"


def use_color(stream: TextIO, env: Mapping[str, str], *, no_color: bool) -> bool:
    """Colours only for a terminal, without ``--no-color``, ``NO_COLOR`` or ``TERM=dumb``."""
    if no_color or "NO_COLOR" in env or env.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _rich_available() -> bool:
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return True


def session_cost(messages: list[Any]) -> tuple[Usage, float]:
    """Summed usage and cost (dollars) of every assistant message in ``messages``."""
    cost = 0.0
    fields = {"input": 0, "output": 0, "cache_read": 0, "cache_write": 0, "total_tokens": 0}
    for message in messages:
        if isinstance(message, AssistantMessage):
            usage = message.usage
            for name in fields:
                fields[name] += getattr(usage, name)
            cost += usage.cost.total
    total = Usage(
        input=fields["input"],
        output=fields["output"],
        cache_read=fields["cache_read"],
        cache_write=fields["cache_write"],
        total_tokens=fields["total_tokens"],
    )
    return total, cost


def _k(n: int) -> str:
    return f"{n / 1000:.1f}k" if n >= 1000 else str(n)


def format_usage(last: AssistantMessage | None, model: Model, session_dollars: float) -> str:
    """One line: the last response's tokens, how full the context is, and the cost."""
    if last is None:
        return ""
    usage = last.usage
    context = usage.input + usage.output + usage.cache_read + usage.cache_write
    parts = [f"tokens in {_k(usage.input)} out {_k(usage.output)}"]
    if usage.cache_read or usage.cache_write:
        parts[0] += f" (cache read {_k(usage.cache_read)} write {_k(usage.cache_write)})"
    window = model.context_window
    if window:
        parts.append(f"context {_k(context)}/{_k(window)} ({100 * context / window:.1f}%)")
    else:
        parts.append(f"context {_k(context)}")
    parts.append(f"cost ${usage.cost.total:.4f} (session ${session_dollars:.4f})")
    return " · ".join(parts)


_EDIT_TEXTS = frozenset({"oldText", "newText", "edits"})
"""An edit's texts: its diff shows them, the call's one-line summary leaves them out."""


def _args_text(args: Any, limit: int = 120) -> str:
    if isinstance(args, dict):
        if set(args) == {"command"} or "command" in args:
            text = str(args.get("command"))
        elif "path" in args:
            text = str(args["path"])
            extra = {k: v for k, v in args.items() if k not in {"path", "content"}}
            if "pattern" in args:
                text = f"{args['pattern']!r} in {args.get('path') or '.'}"
                extra = {k: v for k, v in extra.items() if k != "pattern"}
            if extra and set(extra) - _EDIT_TEXTS:
                text += " " + json.dumps({k: v for k, v in extra.items() if k not in _EDIT_TEXTS})
        elif "pattern" in args:
            text = repr(args["pattern"])
        else:
            text = json.dumps(args, ensure_ascii=False)
    else:
        text = json.dumps(args, ensure_ascii=False)
    text = one_line(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _result_text(content: Any) -> str:
    return visible(
        "\n".join(
            b.text if isinstance(b, TextContent) else f"[image {getattr(b, 'mime_type', '')}]"
            for b in content
        )
    ).rstrip()


CONSENT_ANSWERS: Final = "[y]es / [n]o / [a]lways for this session"
TAB_MARK: Final = "⇥"
"""A tab, in the consent question's blocks (elsewhere a tab is spaces)."""
_EMPTY_RUN: Final = 3  # from this many empty lines on, a block shows their count


def _lines_of(value: str) -> str:
    lines, chars = value.count("\n") + 1, len(value)
    return f"{lines} line{'s' * (lines != 1)}, {chars} character{'s' * (chars != 1)}"


def _block(value: str, width: int) -> list[str]:
    """``value`` as rows that show every character: each line after ``  │ `` (wrapped
    rows after ``  ┆ ``), a newline as ``⏎`` at the end of its line, hidden spaces as
    ``·``, tabs as ``⇥``, a run of empty lines as their count."""
    lines = visible(value.replace("\t", TAB_MARK)).split("\n")
    room = max(8, width - 5)  # the gutter, and the newline mark
    rows: list[str] = []
    i = 0
    while i < len(lines):
        run = 0
        while i + run < len(lines) - 1 and not lines[i + run]:
            run += 1
        if run >= _EMPTY_RUN:
            rows.append(f"  │ <{run} empty lines>{NEWLINE_MARK}")
            i += run
            continue
        last = i == len(lines) - 1
        pieces = wrap(shown_whitespace(lines[i]), room)
        for n, piece in enumerate(pieces):
            end = NEWLINE_MARK if not last and n == len(pieces) - 1 else ""
            rows.append(("  │ " if n == 0 else "  ┆ ") + piece + end)
        i += 1
    return rows


def consent_rows(tool: str, args: Any, width: int) -> list[str]:
    """The consent question for a call, as unpainted rows: what the call would do, its
    command, path and texts in full, as blocks of rows of at most ``width`` characters
    (no character cut or hidden, see :func:`_block`), and last the question, which
    has no text of the call's in it."""
    name = one_line(tool)
    fields: dict[str, Any] = args if isinstance(args, dict) else {}
    rows: list[str]
    if tool == "bash" and isinstance(fields.get("command"), str):
        command = fields["command"]
        rows = [f"{name} asks to run this command ({_lines_of(command)}):"]
        rows += _block(command, width)
        if fields.get("timeout") is not None:
            rows.append(f"with a timeout of {one_line(str(fields['timeout']))} seconds")
    elif tool in {"write", "edit"} and isinstance(fields.get("path"), str):
        if tool == "write":
            content = str(fields.get("content", ""))
            rows = [f"{name} asks to write {_lines_of(content)} to this file:"]
            rows += _block(fields["path"], width)
        else:
            rows = [f"{name} asks to change this file:"]
            rows += _block(fields["path"], width)
            for label, key in (("replacing", "oldText"), ("with", "newText")):
                text = str(fields.get(key, ""))
                rows.append(f"{label} ({_lines_of(text)}):")
                rows += _block(text, width)
    else:
        text = json.dumps(args, ensure_ascii=False, indent=2)
        rows = [f"{name} asks to run with these arguments:", *_block(text, width)]
    rows.append(f"Allow this {name} call?  {CONSENT_ANSWERS}")
    return rows


_FRAMES: Final = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
_ASKING: Final = "waiting for your answer (y / n / a)"
_DECISIONS: Final = {
    "y": ("  ✓ allowed", _GREEN),
    "a": ("  ✓ allowed, and from now on in this session", _GREEN),
    "n": ("  ✗ declined", _RED),
}
_COMPACTION: Final = "\0compaction"  # the spinner key of a compaction (no tool call id)


class InputEcho(Protocol):
    """A line reader working beside the live region (the interactive prompt): the line
    being typed is redrawn under the region, and a submitted line is accounted for."""

    @property
    def submitted(self) -> int:
        """How many lines were submitted so far (each moved the cursor down a row)."""

    def typed(self) -> str | None:
        """The text typed so far on a line read during a run; ``None`` when not reading."""


class _Lines:
    """Text cut into complete lines as it streams; the open line kept as chunks, so a
    long line costs linear time."""

    def __init__(self) -> None:
        self._chunks: list[str] = []

    def feed(self, delta: str) -> list[str]:
        if "\n" not in delta:
            if delta:
                self._chunks.append(delta)
            return []
        pieces = delta.split("\n")
        first = "".join(self._chunks) + pieces[0]
        self._chunks = [pieces[-1]] if pieces[-1] else []
        return [first, *pieces[1:-1]]

    def starts_line(self) -> bool:
        """The open line has begun, with something other than a space."""
        return bool(self._chunks) and not self._chunks[0][0].isspace()

    def partial(self) -> str:
        if len(self._chunks) > 1:
            self._chunks = ["".join(self._chunks)]
        return self._chunks[0] if self._chunks else ""

    def flush(self) -> str:
        rest = self.partial()
        self._chunks = []
        return rest


@final
class _Blocks:
    """Markdown cut into its top-level blocks as it streams.

    A block is complete when an unindented line follows a blank line outside a code
    fence; complete blocks are rendered once, only the open one is redrawn.
    """

    def __init__(self) -> None:
        self._lines = _Lines()
        self.open: list[str] = []
        self._fence: str | None = None
        self._fence_line = ""
        self._blank = False
        self._has_text = False

    def feed(self, delta: str) -> list[str]:
        """The blocks ``delta`` completed."""
        done: list[str] = []
        for line in self._lines.feed(delta):
            block = self._line(line)
            if block is not None:
                done.append(block)
        if self._fence is None and self._blank and self._has_text and self._lines.starts_line():
            # An unindented line has begun after a blank one: the open block is complete.
            done.append("\n".join(self.open).strip("\n"))
            self.open = []
            self._has_text = False
        return done

    def _line(self, line: str) -> str | None:
        stripped = line.lstrip(" ")
        indent = len(line) - len(stripped)
        if self._fence is not None:
            self.open.append(line)
            end = stripped.rstrip()
            if indent < 4 and end.startswith(self._fence) and not end.strip(self._fence[0]):
                self._fence = None
            self._blank = False
            return None
        block = None
        if stripped.strip() and self._blank and indent == 0 and self._has_text:
            block = "\n".join(self.open).strip("\n")
            self.open = []
            self._has_text = False
        if indent < 4 and stripped.startswith(("```", "~~~")):
            marker = stripped[0]
            self._fence = marker * (len(stripped) - len(stripped.lstrip(marker)))
            self._fence_line = line
        self.open.append(line)
        self._blank = not stripped.strip()
        self._has_text = self._has_text or not self._blank
        return block

    def view(self, max_lines: int, max_chars: int) -> str:
        """The open block for the live region: its last ``max_lines`` lines and at most
        its last ``max_chars`` characters (a code fence re-opened), so that drawing it
        costs no more than a screenful however long the block grows."""
        lines = [*self.open[-max_lines:], self._lines.partial()]
        room = max_chars
        for keep in range(len(lines) - 1, -1, -1):
            if len(lines[keep]) >= room:
                lines = [lines[keep][len(lines[keep]) - room :], *lines[keep + 1 :]]
                break
            room -= len(lines[keep]) + 1
        if self._fence is not None and len(lines) < len(self.open) + 1:
            lines = [self._fence_line, *lines[1:]]
        return "\n".join(lines).strip("\n")

    def close(self) -> str:
        """The rest of the text, as the last block."""
        rest = "\n".join([*self.open, self._lines.flush()]).strip("\n")
        self.open = []
        self._fence = None
        self._blank = self._has_text = False
        return rest


def _now() -> float:
    try:
        return trio.current_time()
    except RuntimeError:  # outside Trio (a listener driven by hand)
        return time.monotonic()


@final
class Renderer:
    """A harness listener printing a readable transcript to ``out``.

    Args:
        out: where the transcript goes.
        style: ``plain`` (no escape codes), ``ansi`` (colours) or ``rich`` (colours,
            and answers rendered as markdown; needs ``rich``).
        live: keep a live region at the bottom of the terminal (a spinner while the
            model is awaited and while each tool runs, the line being streamed, with
            ``rich`` the open markdown block), redrawn by :meth:`animate`; only for a
            terminal.
        model: returns the current model (for the context window in the usage line).
        show_usage: print usage, context fill and cost after each prompt.
    """

    MAX_RESULT_LINES: Final = 10
    MAX_LINE_CHARS: Final = 200
    REFRESH_SECONDS: Final = 0.1
    """How often :meth:`animate` redraws the live region (not once per delta)."""

    def __init__(
        self,
        out: TextIO,
        *,
        style: Style = "plain",
        live: bool = False,
        model: Any = None,
        messages: Any = None,
        show_usage: bool = True,
        notes: TextIO | None = None,
    ) -> None:
        if style == "rich" and not _rich_available():
            style = "ansi"
        self.out = out
        self.style: Style = style
        self.live = live and style != "plain"
        self._model = model
        self._messages = messages
        self.show_usage = show_usage
        self.notes = notes if notes is not None else out
        self._at_line_start = True
        self._waiting = False
        self._tool_args: dict[str, str] = {}
        self._last_block: str | None = None
        self._tool_lines: dict[str, int] = {}
        # The live region.
        self.input: InputEcho | None = None
        self._input_seen = 0
        self._running = False
        self._wake = trio.Event()
        self._region_rows = 0
        self._frame = 0
        self._stale = False
        self._pending: list[str] = []
        self._spinners: dict[str, tuple[str, float]] = {}  # id -> what runs, since when
        self._asking: set[str] = set()  # calls whose consent question waits for an answer
        self._live_for_compaction = False
        self._tool_partial: dict[str, str] = {}  # a running tool's last, open output line
        self._waiting_since = 0.0
        self._text: _Lines | None = None  # the answer's open line (no markdown)
        self._blocks: _Blocks | None = None  # the answer's open block (markdown)
        self._blocks_shown = 0
        self._open_render: list[str] = []
        self._open_dirty = False
        self._thinking: _Lines | None = None
        self._thinking_first = False
        self._console: Any = None
        self._parser: Any = None

    # -- the listener ------------------------------------------------------------------

    def __call__(self, event: HarnessEvent) -> None:
        if isinstance(event, AgentStart):
            self._start_live()
        elif isinstance(event, MessageStart) and isinstance(event.message, AssistantMessage):
            self._line_break()
            self._blocks_shown = 0
            self._wait_indicator()
        elif isinstance(event, MessageUpdate):
            self._update(event)
        elif isinstance(event, MessageEnd) and isinstance(event.message, AssistantMessage):
            self._clear_wait()
            self._close_text()
            self._assistant_end(event.message)
        elif isinstance(event, ToolExecutionStart):
            self._clear_wait()
            self._line_break()
            running = "" if self.live else self._paint("  (running…)", _DIM)
            name = one_line(event.tool_name)
            self._write(
                self._paint(f"● {name}", _CYAN + ";" + _BOLD)
                + " "
                + self._paint(_args_text(event.args), _CYAN)
                + running
                + "\n"
            )
            self._tool_lines[event.tool_call_id] = 0
            self._tool_args[event.tool_call_id] = _args_text(event.args)
            self._last_block = event.tool_call_id
            self._spinners[event.tool_call_id] = (f"{name} running…", _now())
        elif isinstance(event, ToolExecutionUpdate):
            self._tool_update(event)
        elif isinstance(event, ToolExecutionEnd):
            self._spinners.pop(event.tool_call_id, None)
            self._asking.discard(event.tool_call_id)
            self._tool_partial.pop(event.tool_call_id, None)
            self._tool_end(event)
            if not self._spinners:
                self._wait_indicator()  # the next request
        elif isinstance(event, AutoRetryStart):
            self._line_break()
            self._write(
                self._paint(
                    f"[retry {event.attempt}/{event.max_attempts} in {event.delay:.1f}s: "
                    f"{visible(event.error_message)}]",
                    _YELLOW,
                )
                + "\n"
            )
        elif isinstance(event, AutoRetryEnd) and not event.success:
            gave_up = visible(str(event.final_error))
            self._write(self._paint(f"[retry gave up: {gave_up}]", _RED) + "\n")
        elif isinstance(event, CompactionStart):
            self._line_break()
            reason = one_line(event.reason)
            self._write(self._paint(f"[compacting the context ({reason})…]", _DIM) + "\n")
            if self.live and not self._running:  # /compact, or after a run: a region of its own
                self._start_live()
                self._live_for_compaction = True
            self._spinners[_COMPACTION] = ("compacting the context…", _now())
        elif isinstance(event, CompactionEnd):
            self._spinners.pop(_COMPACTION, None)
            if self._live_for_compaction:
                self._live_for_compaction = False
                self._stop_live()
            self._compaction_end(event)
        elif isinstance(event, AgentEnd):
            self._clear_wait()
            self._close_text()
            self._line_break()
            self._stop_live()
        elif isinstance(event, Settled):
            self._settled(event)
        if self._stale and self._running:
            self._draw()
        self.out.flush()

    async def animate(self) -> None:
        """Redraw the live region every :attr:`REFRESH_SECONDS` while a run is active
        (spinner frames, the open markdown block); sleeps between runs. Start it in the
        nursery that runs the conversation; without ``live`` it returns at once."""
        if not self.live:
            return
        while True:
            if not self._running:
                self._wake = trio.Event()
                await self._wake.wait()
            self.refresh()
            await trio.sleep(self.REFRESH_SECONDS)

    def refresh(self) -> None:
        """Redraw the live region now (rendering the open markdown block if it grew)."""
        if not self._running:
            return
        self._frame += 1
        if self._open_dirty and self._blocks is not None:
            self._open_dirty = False
            rows = max(1, self._rows() - 4)
            text = self._blocks.view(rows, max_chars=rows * (self._columns() + 1))
            self._open_render = self._markdown(text) if text else []
        self._draw()
        self.out.flush()

    # -- pieces -------------------------------------------------------------------------

    def note(self, text: str, *, color: str = _DIM) -> None:
        """A line of the CLI's own, dimmed; to ``notes``. What ``text`` quotes (a
        path, a session id, an error's message) is shown, never obeyed: the whole line
        is made :func:`visible`."""
        text = visible(text)
        if self.notes is not self.out:
            if self._running:
                self._erase()
                self._stale = True
            self.notes.write(text + "\n")
            self.notes.flush()
            if self._stale and self._running:
                self._draw()
            return
        self._line_break()
        self._write(self._paint(text, color) + "\n")
        if self._stale and self._running:
            self._draw()
        self.out.flush()

    def error(self, text: str) -> None:
        """A line in red."""
        self.note(text, color=_RED)

    def say(self, text: str) -> None:
        """Lines of the CLI's own output (a slash command's answer), above the live
        region while a run is on; made :func:`visible`, as :meth:`note`."""
        self._line_break()
        self._write(visible(text).rstrip("\n") + "\n")
        if self._stale and self._running:
            self._draw()
        self.out.flush()

    def ask_consent(self, call_id: str, tool: str, args: Any) -> None:
        """Show the consent question for a call (:func:`consent_rows`, the question
        last) above the live region; until :meth:`answered`, the call's spinner says
        that it waits for the person's answer (it does not run yet)."""
        rows = consent_rows(tool, args, self._columns())
        self._line_break()
        *block, question = rows
        painted = [  # the gutter dimmed, the call's text as it is, pitrio's lines bold
            self._paint(r[:4], _DIM) + r[4:] if r.startswith("  ") else self._paint(r, _BOLD)
            for r in block
        ]
        self._write("\n".join([*painted, self._paint(question, "1;33")]) + "\n")
        if call_id in self._spinners:
            self._asking.add(call_id)
        if self._stale and self._running:
            self._draw()
        self.out.flush()

    def answered(self, call_id: str, answer: str | None = None) -> None:
        """The consent question for ``call_id`` has its answer (``y``, ``n``, ``a``;
        ``None`` when the question was abandoned): a line says what was decided (the
        typed answer is not kept on screen), and the call's spinner counts from now,
        when the tool starts."""
        decided = _DECISIONS.get(answer or "")
        if decided is not None:
            text, color = decided
            self._write(self._paint(text, color) + "\n")
        if call_id in self._asking:
            self._asking.discard(call_id)
            label, _ = self._spinners.get(call_id, ("", 0.0))
            if label:
                self._spinners[call_id] = (label, _now())
            self._stale = True
        if self._stale and self._running:
            self._draw()
        self.out.flush()

    def _update(self, event: MessageUpdate) -> None:
        update = event.assistant_message_event
        if isinstance(update, TextDeltaEvent):
            self._clear_wait()
            text = visible(update.delta)
            if self.live:
                self._live_text(text)
                return
            if self._text is None:
                self._line_break()
                self._text = _Lines()
            self._write(text)
        elif isinstance(update, ThinkingStartEvent):
            self._clear_wait()
            self._line_break()
            if self.live:
                self._thinking, self._thinking_first = _Lines(), True
                return
            self._write(self._paint("thinking: ", _DIM))
        elif isinstance(update, ThinkingDeltaEvent):
            self._clear_wait()
            text = visible(update.delta)
            if self._thinking is not None:
                for line in self._thinking.feed(text):
                    self._write(self._paint(self._thinking_prefix() + line, _DIM + ";3") + "\n")
                return
            self._write(self._paint(text, _DIM + ";3"))
        elif isinstance(update, ThinkingEndEvent):
            self._close_thinking()
            self._line_break()

    def _thinking_prefix(self) -> str:
        first, self._thinking_first = self._thinking_first, False
        return "thinking: " if first else ""

    def _close_thinking(self) -> None:
        if self._thinking is not None:
            rest = self._thinking.flush()
            if rest or self._thinking_first:
                self._write(self._paint(self._thinking_prefix() + rest, _DIM + ";3") + "\n")
            self._thinking = None

    def _live_text(self, delta: str) -> None:
        if self.style == "rich":
            if self._blocks is None:
                self._line_break()
                self._blocks = _Blocks()
            for block in self._blocks.feed(delta):
                self._show_block(block)
            self._open_dirty = True
            return
        if self._text is None:
            self._line_break()
            self._text = _Lines()
        for line in self._text.feed(delta):
            self._write(line + "\n")

    def _show_block(self, block: str) -> None:
        lines = self._markdown(block)
        if self._blocks_shown:
            lines.insert(0, "")
        self._blocks_shown += 1
        self._open_render = []
        self._write("\n".join(lines) + "\n")

    def _close_text(self) -> None:
        self._close_thinking()
        if self._blocks is not None:
            rest = self._blocks.close()
            self._blocks = None
            self._open_render = []
            if rest:
                self._show_block(rest)
        if self._text is not None:
            rest = self._text.flush()
            self._text = None
            if rest:
                self._write(rest)
            self._line_break()

    def _assistant_end(self, message: AssistantMessage) -> None:
        if message.stop_reason == "error":
            self._line_break()
            error = visible(message.error_message or "unknown error")
            self._write(self._paint(f"error: {error}", _RED))
            self._write("\n")
        elif message.stop_reason == "aborted":
            self._line_break()
            self._write(self._paint("(aborted)", _YELLOW) + "\n")

    def _markdown(self, text: str) -> list[str]:
        from rich.console import Console
        from rich.markdown import Markdown

        width = self._columns()
        console = self._console
        if console is None or console.width != width:
            console = self._console = Console(
                file=io.StringIO(), force_terminal=True, width=width, highlight=False
            )
        if self._parser is None:
            from markdown_it import MarkdownIt  # rich's own markdown parser

            # HTML is text: rich draws no HTML, it drops it (a hidden <div> would be gone).
            options = {"html": False}
            self._parser = MarkdownIt("commonmark", options).enable(["strikethrough", "table"])
        # Shown, not obeyed (the answer was made visible as it came: again here, at the
        # edge); no hyperlinks (a link's text would hide where it goes).
        text = visible(text)
        markdown = Markdown("", hyperlinks=False)
        markdown.markup, markdown.parsed = text, self._parser.parse(text)
        with console.capture() as capture:
            console.print(markdown)
        rendered: str = capture.get()
        # Trailing padding is plain spaces (a styled background ends in an escape).
        return [line.rstrip(" ") for line in rendered.strip("\n").split("\n")]

    def _tool_update(self, event: ToolExecutionUpdate) -> None:
        shown = self._tool_lines.get(event.tool_call_id)
        if shown is None:
            return
        text = _result_text(event.partial_result.content)
        lines = text.split("\n") if text else []
        fresh = lines[shown:]
        if not fresh:
            return
        # Only whole lines (the last may still grow: the live region shows it); the end
        # shows the rest.
        complete = fresh[:-1] if not text.endswith("\n") else fresh
        if event.tool_call_id in self._spinners:
            self._tool_partial[event.tool_call_id] = "" if text.endswith("\n") else fresh[-1]
        if complete:
            self._block_header(event.tool_call_id, one_line(event.tool_name))
        for line in complete[: max(0, self.MAX_RESULT_LINES - shown)]:
            self._write(self._paint(f"  │ {self._clip(line)}", _DIM) + "\n")
        self._tool_lines[event.tool_call_id] = shown + len(complete)

    def _tool_end(self, event: ToolExecutionEnd) -> None:
        self._line_break()
        name = one_line(event.tool_name)
        self._block_header(event.tool_call_id, name)
        shown = self._tool_lines.pop(event.tool_call_id, 0)
        args = self._tool_args.pop(event.tool_call_id, None)
        if args is None:
            args = self._transcript_args(event.tool_call_id)
        details = event.result.details
        diff = details.get("diff") if isinstance(details, Mapping) else None
        if isinstance(diff, str) and diff and not event.is_error:
            self._diff(visible(diff))
        else:
            text = _result_text(event.result.content)
            lines = text.split("\n") if text else ["(empty)"]
            rest = lines[shown:]
            room = max(0, self.MAX_RESULT_LINES - shown)
            for line in rest[:room]:
                color = _RED if event.is_error else _DIM
                self._write(self._paint(f"  │ {self._clip(line)}", color) + "\n")
            if len(rest) > room:
                self._write(self._paint(f"  │ … ({len(rest) - room} more lines)", _DIM) + "\n")
        mark = self._paint("✗ failed", _RED) if event.is_error else self._paint("✓ done", _GREEN)
        self._write(f"  └ {name} {args} {mark}\n")
        self._last_block = None

    def _block_header(self, call_id: str, name: str) -> None:
        """Parallel tools: output of a call other than the last one shown gets its name."""
        if self._last_block != call_id:
            self._last_block = call_id
            args = self._tool_args.get(call_id)
            if args is None:
                args = self._tool_args[call_id] = self._transcript_args(call_id)
            self._write(self._paint(f"● {name}", _CYAN + ";" + _BOLD))
            self._write(" " + self._paint(args, _CYAN) + "\n")

    def _transcript_args(self, call_id: str) -> str:
        """The arguments of a call this renderer did not see start (one resumed after a
        killed run ends with no start), from the transcript's tool call."""
        messages = self._messages() if self._messages is not None else []
        for message in reversed(messages):
            if isinstance(message, AssistantMessage):
                for block in message.content:
                    if isinstance(block, ToolCall) and block.id == call_id:
                        return _args_text(block.arguments)
        return ""

    def _diff(self, diff: str) -> None:
        for line in diff.split("\n"):
            if line.startswith(("+++", "---")):
                color = _BOLD
            elif line.startswith("+"):
                color = _GREEN
            elif line.startswith("-"):
                color = _RED
            elif line.startswith("@@"):
                color = _CYAN
            else:
                color = _DIM
            self._write("  │ " + self._paint(self._clip(line), color) + "\n")

    def _compaction_end(self, event: CompactionEnd) -> None:
        if event.status == "completed":
            before = f" from ~{_k(event.tokens_before)} tokens" if event.tokens_before else ""
            self.note(f"[compacted{before}: older messages summarised]")
        elif event.status == "failed":
            self.error(f"[compaction failed: {event.error_message}]")
        else:
            self.note(f"[compaction {event.status}]")

    def _settled(self, event: Settled) -> None:
        if not self.show_usage or event.message is None or self._model is None:
            return
        messages = self._messages() if self._messages is not None else []
        _, dollars = session_cost(messages)
        line = format_usage(event.message, self._model(), dollars)
        if line:
            self.note(line)

    def _wait_indicator(self) -> None:
        if self.style == "plain" or self._waiting:
            return
        self._waiting = True
        self._waiting_since = _now()
        self._stale = True
        if not self.live:
            self._write(self._paint("… waiting for the model", _DIM))

    def _clear_wait(self) -> None:
        if self._waiting:
            self._waiting = False
            if not self.live:
                self.out.write("\r\x1b[K")
                self._at_line_start = True

    # -- the live region ---------------------------------------------------------------

    def _start_live(self) -> None:
        if not self.live:
            return
        self._running = True
        self._region_rows = 0
        self._input_seen = self.input.submitted if self.input is not None else 0
        self._stale = True
        self._wake.set()

    def _stop_live(self) -> None:
        if not self._running:
            return
        self._flush_pending()
        self._erase()
        self._running = False
        self._stale = False
        self._spinners.clear()
        self._asking.clear()
        self._tool_partial.clear()

    def _region(self) -> list[tuple[str, int]]:
        """The region's lines (each with the rows it takes), top to bottom."""
        width = self._columns()
        now = _now()
        frame = _FRAMES[self._frame % len(_FRAMES)]
        lines: list[tuple[str, int]] = []
        if self._thinking is not None:
            partial = self._thinking_prefix_peek() + self._thinking.partial()
            if partial:
                lines.append((self._paint(self._tail(partial, width), _DIM + ";3"), 1))
        if self._blocks is not None and self._open_render:
            if self._blocks_shown:
                lines.append(("", 1))
            lines += [(line, 1) for line in self._open_render]
        if self._text is not None:
            partial = self._text.partial()
            if partial:
                lines.append((self._tail(partial, width), 1))
        for call_id, (label, started) in self._spinners.items():
            open_line = self._tool_partial.get(call_id)
            if open_line and self._tool_lines.get(call_id, 0) < self.MAX_RESULT_LINES:
                lines.append((self._paint(self._tail(f"  │ {open_line}", width), _DIM), 1))
            if call_id in self._asking:  # not running: no frames, no seconds
                text = self._tail(f"? {label.removesuffix(' running…')}: {_ASKING}", width)
                lines.append((self._paint(text, "1;33"), 1))
                continue
            text = f"{frame} {label} {now - started:.0f}s"
            lines.append((self._paint(self._tail(text, width), _CYAN), 1))
        if self._waiting and not self._spinners:
            text = f"{frame} waiting for the model… {now - self._waiting_since:.0f}s"
            lines.append((self._paint(self._tail(text, width), _DIM), 1))
        room = max(1, self._rows() - 1)
        if self.input is not None:
            typed = self.input.typed()
            if typed is not None:
                typed = one_line(typed)
                room -= 1 + len(typed) // (width + 1)
                lines = lines[-room:] if room > 0 else []
                # Not painted: the reader's own echo goes on after it.
                lines.append((typed, 1 + len(typed) // (width + 1)))
                return lines
        return lines[-room:]

    def _thinking_prefix_peek(self) -> str:
        return "thinking: " if self._thinking_first else ""

    def _draw(self) -> None:
        self._erase()
        lines = self._region()
        if lines:
            self.out.write("\n".join(text for text, _ in lines))
        self._region_rows = sum(rows for _, rows in lines)
        self._stale = False

    def _erase(self) -> None:
        """Remove the region; the cursor goes where it started."""
        moved = 0
        if self.input is not None:
            moved = self.input.submitted - self._input_seen
            self._input_seen = self.input.submitted
        up = max(0, self._region_rows - 1 + moved)
        if self._region_rows or moved:
            self.out.write("\r" + (f"\x1b[{up}A" if up else "") + "\x1b[J")
        self._region_rows = 0

    def _columns(self) -> int:
        return max(20, self._size().columns - 1)

    def _rows(self) -> int:
        return max(4, self._size().lines)

    def _size(self) -> os.terminal_size:
        try:
            return os.get_terminal_size(self.out.fileno())
        except (AttributeError, ValueError, OSError, io.UnsupportedOperation):
            return os.terminal_size((80, 24))

    @staticmethod
    def _tail(text: str, width: int) -> str:
        text = text.replace("\t", "    ")
        return text if len(text) <= width else "…" + text[-(width - 1) :]

    # -- output -------------------------------------------------------------------------

    def _clip(self, line: str) -> str:
        if len(line) <= self.MAX_LINE_CHARS:
            return line
        return line[: self.MAX_LINE_CHARS] + "…"

    def _paint(self, text: str, code: str) -> str:
        if self.style == "plain" or not text:
            return text
        return f"\x1b[{code}m{text}\x1b[0m"

    def _write(self, text: str) -> None:
        if not text:
            return
        self._at_line_start = text.endswith("\n")
        if not self._running:
            self.out.write(text)
            return
        # Above the live region: whole lines only (the region is drawn under them).
        cut = text.rfind("\n")
        if cut < 0:
            self._pending.append(text)
            return
        self._erase()
        self.out.write("".join(self._pending) + text[: cut + 1])
        self._pending = [text[cut + 1 :]] if cut + 1 < len(text) else []
        self._stale = True

    def _flush_pending(self) -> None:
        if self._pending:
            self._write("\n")

    def _line_break(self) -> None:
        self._clear_wait()
        if not self._at_line_start:
            self._write("\n")
