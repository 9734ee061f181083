"""The terminal transcript: streamed text, thinking, tool blocks, diffs, usage.

:class:`Renderer` is a harness listener. It writes plain text when the output is not a
terminal (or with ``--no-color``), ANSI colours in a terminal, and, when the optional
``rich`` package is installed (``pip install 'pitrio[cli]'``), renders each finished
answer as markdown. Text is always streamed as it arrives, so a slow model shows
progress whatever the style.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from typing import Any, Final, Literal, TextIO, final

from pitrio import (
    AgentEnd,
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

__all__ = ["Renderer", "Style", "format_usage", "session_cost", "use_color"]

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
            if extra and set(extra) - {"oldText", "newText"}:
                text += " " + json.dumps(
                    {k: v for k, v in extra.items() if k not in {"oldText", "newText"}}
                )
        elif "pattern" in args:
            text = repr(args["pattern"])
        else:
            text = json.dumps(args, ensure_ascii=False)
    else:
        text = json.dumps(args, ensure_ascii=False)
    text = text.replace("\n", " ⏎ ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _result_text(content: Any) -> str:
    return "\n".join(
        b.text if isinstance(b, TextContent) else f"[image {getattr(b, 'mime_type', '')}]"
        for b in content
    ).rstrip()


@final
class Renderer:
    """A harness listener printing a readable transcript to ``out``.

    Args:
        out: where the transcript goes.
        style: ``plain`` (no escape codes), ``ansi`` (colours) or ``rich`` (colours,
            and finished answers rendered as markdown; needs ``rich``).
        model: returns the current model (for the context window in the usage line).
        show_usage: print usage, context fill and cost after each prompt.
    """

    MAX_RESULT_LINES: Final = 10
    MAX_LINE_CHARS: Final = 200

    def __init__(
        self,
        out: TextIO,
        *,
        style: Style = "plain",
        model: Any = None,
        messages: Any = None,
        show_usage: bool = True,
        notes: TextIO | None = None,
    ) -> None:
        if style == "rich" and not _rich_available():
            style = "ansi"
        self.out = out
        self.style: Style = style
        self._model = model
        self._messages = messages
        self.show_usage = show_usage
        self.notes = notes if notes is not None else out
        self._at_line_start = True
        self._waiting = False
        self._text_buffer = io.StringIO()
        self._text_clean = False
        self._tool_args: dict[str, str] = {}
        self._last_block: str | None = None
        self._tool_lines: dict[str, int] = {}
        self._status_shown = False

    # -- the listener ------------------------------------------------------------------

    def __call__(self, event: HarnessEvent) -> None:
        if isinstance(event, MessageStart) and isinstance(event.message, AssistantMessage):
            self._line_break()
            self._text_buffer = io.StringIO()
            self._wait_indicator()
        elif isinstance(event, MessageUpdate):
            self._update(event)
        elif isinstance(event, MessageEnd) and isinstance(event.message, AssistantMessage):
            self._clear_wait()
            self._assistant_end(event.message)
        elif isinstance(event, ToolExecutionStart):
            self._clear_wait()
            self._line_break()
            self._write(
                self._paint(f"● {event.tool_name}", _CYAN + ";" + _BOLD)
                + " "
                + self._paint(_args_text(event.args), _CYAN)
                + self._paint("  (running…)", _DIM)
                + "\n"
            )
            self._tool_lines[event.tool_call_id] = 0
            self._tool_args[event.tool_call_id] = _args_text(event.args)
            self._last_block = event.tool_call_id
        elif isinstance(event, ToolExecutionUpdate):
            self._tool_update(event)
        elif isinstance(event, ToolExecutionEnd):
            self._tool_end(event)
        elif isinstance(event, AutoRetryStart):
            self._line_break()
            self._write(
                self._paint(
                    f"[retry {event.attempt}/{event.max_attempts} in {event.delay:.1f}s: "
                    f"{event.error_message}]",
                    _YELLOW,
                )
                + "\n"
            )
        elif isinstance(event, AutoRetryEnd) and not event.success:
            self._write(self._paint(f"[retry gave up: {event.final_error}]", _RED) + "\n")
        elif isinstance(event, CompactionStart):
            self._line_break()
            self._write(self._paint(f"[compacting the context ({event.reason})…]", _DIM) + "\n")
        elif isinstance(event, CompactionEnd):
            self._compaction_end(event)
        elif isinstance(event, AgentEnd):
            self._clear_wait()
            self._line_break()
        elif isinstance(event, Settled):
            self._settled(event)
        self.out.flush()

    # -- pieces -------------------------------------------------------------------------

    def note(self, text: str, *, color: str = _DIM) -> None:
        """A line of the CLI's own (not from the model), dimmed; to ``notes``."""
        if self.notes is not self.out:
            self.notes.write(text + "\n")
            self.notes.flush()
            return
        self._line_break()
        self._write(self._paint(text, color) + "\n")
        self.out.flush()

    def error(self, text: str) -> None:
        """A line in red."""
        self.note(text, color=_RED)

    def _update(self, event: MessageUpdate) -> None:
        update = event.assistant_message_event
        if isinstance(update, TextDeltaEvent):
            self._clear_wait()
            if not self._text_buffer.tell():
                self._line_break()
                self._text_clean = True
            self._text_buffer.write(update.delta)
            self._write(update.delta)
        elif isinstance(update, ThinkingStartEvent):
            self._clear_wait()
            self._line_break()
            self._write(self._paint("thinking: ", _DIM))
        elif isinstance(update, ThinkingDeltaEvent):
            self._clear_wait()
            self._text_clean = False
            self._write(self._paint(update.delta, _DIM + ";3"))
        elif isinstance(update, ThinkingEndEvent):
            self._line_break()

    def _assistant_end(self, message: AssistantMessage) -> None:
        if message.stop_reason == "error":
            self._line_break()
            self._write(self._paint(f"error: {message.error_message or 'unknown error'}", _RED))
            self._write("\n")
        elif message.stop_reason == "aborted":
            self._line_break()
            self._write(self._paint("(aborted)", _YELLOW) + "\n")
        elif self.style == "rich":
            self._rich_markdown(self._text_buffer.getvalue())

    def _rich_markdown(self, text: str) -> None:
        """Replace the answer streamed as raw text with the same answer rendered as
        markdown, when it has markdown worth rendering and still fits on the screen
        (rows that scrolled away cannot be rewritten: the raw text then stays)."""
        if not self._text_clean or not any(
            mark in text for mark in ("```", "**", "\n#", "\n- ", "\n* ", "`")
        ):
            return
        import math
        import shutil

        from rich.console import Console
        from rich.markdown import Markdown

        size = shutil.get_terminal_size()
        width = max(20, size.columns)
        lines = text.split("\n")
        rows = sum(max(1, math.ceil(len(line) / width)) for line in lines)
        if rows >= size.lines - 1:
            return
        up = rows if self._at_line_start else rows - 1
        self.out.write((f"\x1b[{up}A" if up else "") + "\r\x1b[J")
        console = Console(file=self.out, force_terminal=True, width=width)
        console.print(Markdown(text))
        self._at_line_start = True

    def _tool_update(self, event: ToolExecutionUpdate) -> None:
        shown = self._tool_lines.get(event.tool_call_id)
        if shown is None:
            return
        text = _result_text(event.partial_result.content)
        lines = text.split("\n") if text else []
        fresh = lines[shown:]
        if not fresh:
            return
        # Only whole lines (the last may still grow); the end shows the rest.
        complete = fresh[:-1] if not text.endswith("\n") else fresh
        if complete:
            self._block_header(event.tool_call_id, event.tool_name)
        for line in complete[: max(0, self.MAX_RESULT_LINES - shown)]:
            self._write(self._paint(f"  │ {self._clip(line)}", _DIM) + "\n")
        self._tool_lines[event.tool_call_id] = shown + len(complete)

    def _tool_end(self, event: ToolExecutionEnd) -> None:
        self._line_break()
        self._block_header(event.tool_call_id, event.tool_name)
        shown = self._tool_lines.pop(event.tool_call_id, 0)
        args = self._tool_args.pop(event.tool_call_id, "")
        details = event.result.details
        diff = details.get("diff") if isinstance(details, Mapping) else None
        if isinstance(diff, str) and diff and not event.is_error:
            self._diff(diff)
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
        self._write(f"  └ {event.tool_name} {args} {mark}\n")
        self._last_block = None

    def _block_header(self, call_id: str, name: str) -> None:
        """Parallel tools: output of a call other than the last one shown gets its name."""
        if self._last_block != call_id:
            self._last_block = call_id
            args = self._tool_args.get(call_id, "")
            self._write(self._paint(f"● {name}", _CYAN + ";" + _BOLD))
            self._write(" " + self._paint(args, _CYAN) + "\n")

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
        if self.style == "plain":
            return
        self._write(self._paint("… waiting for the model", _DIM))
        self._waiting = True

    def _clear_wait(self) -> None:
        if self._waiting:
            self._waiting = False
            self.out.write("\r\x1b[K")
            self._at_line_start = True

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
        self.out.write(text)
        self._at_line_start = text.endswith("\n")

    def _line_break(self) -> None:
        self._clear_wait()
        if not self._at_line_start:
            self._write("\n")
