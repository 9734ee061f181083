"""Text from a model, a tool or a file, made harmless for the terminal.

Every string the terminal renderer did not write itself (answers and thinking, tool
arguments and results, error messages, session names, file names) passes through
:func:`visible` where it meets the screen, and the renderer adds its own colours after.
Nothing in such a string is obeyed by the terminal; whatever would be is shown instead:

* C0 controls as their Unicode control pictures (ESC ``␛``, CR ``␍``, BEL ``␇``,
  backspace ``␈``), DEL as ``␡``; an escape sequence is therefore drawn as text
  (``␛[2J``, ``␛]0;title␇``) rather than clearing the screen or setting the title;
* C1 controls (U+0080 to U+009F, some terminals' 8-bit CSI and OSC), format characters
  (bidi overrides and isolates, zero-width spaces and joiners, the tag characters),
  line and paragraph separators, blank fillers and lone surrogates as ``<U+202E>``;
* combining marks stacked on one character beyond two (which a terminal draws over
  the rows above and below) as ``<U+0301>``;
* a newline stays a newline, CR LF becomes a newline, a tab four spaces.

The mapping is one character at a time (stacked marks aside, counted within one
string), so a sequence split between two streamed deltas is made visible the same way
as a whole one, and each delta can be cleaned as it comes. :func:`shown_whitespace` and
:func:`wrap` serve the consent question, which shows a command exactly, every character
of it.
"""

from __future__ import annotations

import functools
import re
from typing import Final

__all__ = ["TAB", "inert", "one_line", "shown_whitespace", "visible", "wrap"]

TAB: Final = "    "
"""What a tab becomes (a fixed width: a delta does not know its column)."""

NEWLINE_MARK: Final = "⏎"
"""Where a newline was, in text shown on one line."""

_C0 = "\x00-\x08\x0b-\x1f"  # every C0 control but tab and newline (handled apart)
_OTHER = (
    "\x7f-\x9f"  # DEL, C1
    "\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e"  # format (Cf)
    "\u115f\u1160\u3164\uffa0"  # Hangul fillers: letters drawn as nothing
    "\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f"  # zero-width, bidi, separators
    "\ufeff\ufff9-\ufffb"
    "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f"  # ... tag characters
    "\ud800-\udfff"  # lone surrogates (they cannot even be encoded)
)
# Combining marks stacked on one character ("Zalgo" text) are drawn over the rows above
# and below; from the third on they are shown as code points.
_MARKS_RUN = "[\u0300-\u036f\u0483-\u0489\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]"
_STACKED: Final = 2


@functools.cache
def _unsafe(newline: bool) -> re.Pattern[str]:
    """What :func:`visible` (``newline``: :func:`one_line`) replaces. Compiled at the
    first text that is not plain ASCII: the character classes cost a start-up more than
    the rest of this module."""
    also = "\n|" if newline else ""
    return re.compile(f"\r\n|{also}\t|[{_C0}{_OTHER}]|{_MARKS_RUN}{{{_STACKED + 1},}}")


def _mark(char: str) -> str:
    code = ord(char)
    if code < 0x20:
        return chr(0x2400 + code)  # the control pictures block: ␀ … ␟
    if code == 0x7F:
        return "␡"
    return f"<U+{code:04X}>"


_MARKS: Final[dict[str, str]] = {
    **{chr(c): _mark(chr(c)) for c in range(0x20) if chr(c) not in "\t\n"},
    **{chr(c): _mark(chr(c)) for c in range(0x7F, 0xA0)},
    "\r\n": "\n",
    "\t": TAB,
}
_MARKS_ONE_LINE: Final[dict[str, str]] = {
    **_MARKS,
    "\r\n": f" {NEWLINE_MARK} ",
    "\n": f" {NEWLINE_MARK} ",
}


def _replace(match: re.Match[str]) -> str:
    found = match.group()
    mark = _MARKS.get(found)
    if mark is not None:
        return mark
    if len(found) > 1:  # stacked combining marks
        return found[:_STACKED] + "".join(map(_mark, found[_STACKED:]))
    return _mark(found)


def _replace_one_line(match: re.Match[str]) -> str:
    found = match.group()
    mark = _MARKS_ONE_LINE.get(found)
    return mark if mark is not None else _replace(match)


_OBEYED: Final = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]|\r(?!\n)")


def inert(text: str) -> str:
    """``text`` with what a terminal would obey shown, and nothing else changed.

    For text that goes to a file or a pipe (``-p``'s answer), where it is data that a
    program reads but may still reach a terminal (``| cat``): C0 controls but tab and
    newline, a CR not before a newline, DEL and C1 become the marks :func:`visible`
    uses; tabs, CR LF and every other character are left as the model wrote them.
    """
    if text.isascii() and text.isprintable():
        return text
    return _OBEYED.sub(lambda match: _mark(match.group()), text)


def visible(text: str) -> str:
    """``text`` with every control character and escape sequence shown, not obeyed.

    Newlines are kept (CR LF becomes one newline), a tab becomes :data:`TAB`; every
    other character the terminal would act on, or draw as nothing, becomes a visible
    mark (see the module's docstring). Text without any is returned as it is.
    """
    if text.isascii() and text.isprintable():
        return text  # the common case, the first test in C: a delta of plain words
    unsafe = _unsafe(False)
    return text if unsafe.search(text) is None else unsafe.sub(_replace, text)


def one_line(text: str) -> str:
    """:func:`visible`, and each newline shown as `` ⏎ `` (the text stays on one line)."""
    if text.isascii() and text.isprintable():
        return text
    unsafe = _unsafe(True)
    return text if unsafe.search(text) is None else unsafe.sub(_replace_one_line, text)


_SPACES: Final = re.compile(" {2,}|^ | $")
SPACE_MARK: Final = "·"
"""A space that would otherwise not be seen (a run of them, or one at a line's end)."""
_COUNTED: Final = 8


def _spaces(match: re.Match[str]) -> str:
    n = len(match.group())
    if n >= _COUNTED:
        return f"{SPACE_MARK}<{n} spaces>{SPACE_MARK}"
    return SPACE_MARK * n


def shown_whitespace(line: str) -> str:
    """One line of :func:`visible` text with its hidden whitespace shown: a run of
    spaces (or a space at either end) as ``·``, from :data:`_COUNTED` on as a count
    (``·<300 spaces>·``); a single space between words stays a space."""
    return _SPACES.sub(_spaces, line)


def wrap(line: str, width: int) -> list[str]:
    """``line`` cut into rows of at most ``width`` characters, every character kept
    (no word wrapping: the rows joined are the line)."""
    width = max(1, width)
    if len(line) <= width:
        return [line]
    return [line[i : i + width] for i in range(0, len(line), width)]
