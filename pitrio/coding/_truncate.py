"""Pi's output limits (``dist/core/tools/truncate.js`` of the coding agent), line for line.

Two limits, whichever is hit first: :data:`DEFAULT_MAX_LINES` lines and
:data:`DEFAULT_MAX_BYTES` bytes of UTF-8. ``truncate_head`` keeps the start (read, grep,
find, ls), ``truncate_tail`` the end (bash). The result is Pi's ``TruncationResult`` as a
dict with Pi's camelCase keys, since it goes into a tool result's ``details`` as is.

Lengths that Pi measures in JavaScript string units (UTF-16 code units: ``line.length``,
``line.slice``) are measured the same way here (:func:`js_length`, :func:`js_slice`), so a
line of emoji is cut where Pi cuts it.
"""

from __future__ import annotations

from typing import Any, Literal

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_LINES",
    "GREP_MAX_LINE_LENGTH",
    "MAX_SAFE_INTEGER",
    "format_size",
    "js_length",
    "js_slice",
    "truncate_head",
    "truncate_line",
    "truncate_tail",
    "utf8_length",
]

DEFAULT_MAX_LINES = 2000
"""Output of read and bash is cut to this many lines (Pi's ``DEFAULT_MAX_LINES``)."""
DEFAULT_MAX_BYTES = 50 * 1024
"""... and to this many bytes (Pi's ``DEFAULT_MAX_BYTES``)."""
GREP_MAX_LINE_LENGTH = 500
"""A grep line longer than this (in JavaScript string units) is cut (Pi's value)."""
MAX_SAFE_INTEGER = 2**53 - 1
"""JavaScript's ``Number.MAX_SAFE_INTEGER``: the line limit of grep, find and ls."""

Truncation = dict[str, Any]
"""Pi's ``TruncationResult``: ``content``, ``truncated``, ``truncatedBy``, ``totalLines``,
``totalBytes``, ``outputLines``, ``outputBytes``, ``lastLinePartial``,
``firstLineExceedsLimit``, ``maxLines``, ``maxBytes``."""


def utf8_length(text: str) -> int:
    """Pi's ``Buffer.byteLength(text, "utf-8")``."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def js_length(text: str) -> int:
    """JavaScript's ``text.length``: UTF-16 code units."""
    if text.isascii():
        return len(text)
    return len(text) + sum(1 for c in text if ord(c) > 0xFFFF)


def js_slice(text: str, end: int) -> str:
    """JavaScript's ``text.slice(0, end)`` in UTF-16 code units.

    A surrogate pair cut in half leaves U+FFFD, which is what Pi's lone surrogate
    becomes once it is encoded as UTF-8.
    """
    if text.isascii():
        return text[:end]
    units = text.encode("utf-16-le", "surrogatepass")[: 2 * end]
    return units.decode("utf-16-le", "replace")


def format_size(size: int) -> str:
    """Pi's ``formatSize``: ``512B``, ``1.5KB``, ``2.0MB``."""
    if size < 1024:
        return f"{size}B"
    if size < 1024 * 1024:
        return f"{_to_fixed(size / 1024)}KB"
    return f"{_to_fixed(size / (1024 * 1024))}MB"


def _to_fixed(value: float) -> str:
    """JavaScript's ``toFixed(1)`` (half away from zero on the decimal digits shown)."""
    text = f"{value:.1f}"
    # Python rounds the binary value half-even; toFixed rounds the exact decimal value
    # half up. They differ only on an exact tie, which a quotient by 1024 gives.
    scaled = value * 10
    if scaled == int(scaled) + 0.5:
        text = f"{(int(scaled) + 1) / 10:.1f}"
    return text


def _split_lines_for_counting(content: str) -> list[str]:
    if not content:
        return []
    lines = content.split("\n")
    if content.endswith("\n"):
        lines.pop()
    return lines


def _result(
    content: str,
    *,
    truncated: bool,
    truncated_by: Literal["lines", "bytes"] | None,
    total_lines: int,
    total_bytes: int,
    output_lines: int,
    output_bytes: int,
    last_line_partial: bool = False,
    first_line_exceeds_limit: bool = False,
    max_lines: int,
    max_bytes: int,
) -> Truncation:
    return {
        "content": content,
        "truncated": truncated,
        "truncatedBy": truncated_by,
        "totalLines": total_lines,
        "totalBytes": total_bytes,
        "outputLines": output_lines,
        "outputBytes": output_bytes,
        "lastLinePartial": last_line_partial,
        "firstLineExceedsLimit": first_line_exceeds_limit,
        "maxLines": max_lines,
        "maxBytes": max_bytes,
    }


def truncate_head(
    content: str, *, max_lines: int = DEFAULT_MAX_LINES, max_bytes: int = DEFAULT_MAX_BYTES
) -> Truncation:
    """Pi's ``truncateHead``: whole lines from the start; never a partial line."""
    total_bytes = utf8_length(content)
    lines = _split_lines_for_counting(content)
    total_lines = len(lines)
    if total_lines <= max_lines and total_bytes <= max_bytes:
        return _result(
            content,
            truncated=False,
            truncated_by=None,
            total_lines=total_lines,
            total_bytes=total_bytes,
            output_lines=total_lines,
            output_bytes=total_bytes,
            max_lines=max_lines,
            max_bytes=max_bytes,
        )
    return head_of_lines(lines, total_lines, total_bytes, max_lines=max_lines, max_bytes=max_bytes)


def head_of_lines(
    lines: list[str],
    total_lines: int,
    total_bytes: int,
    *,
    max_lines: int = DEFAULT_MAX_LINES,
    max_bytes: int = DEFAULT_MAX_BYTES,
    first_line_bytes: int | None = None,
    next_line_too_big: bool = False,
) -> Truncation:
    """The truncated branch of ``truncateHead`` over the first lines of a longer text.

    ``lines`` needs to hold only the lines the limits can keep (read streams a file and
    keeps no more); ``first_line_bytes`` is the size of the first line when ``lines``
    does not hold all of it; ``next_line_too_big`` says that the line after ``lines``
    exists and does not fit (``lines`` stops where the byte limit stops).
    """
    first = first_line_bytes if first_line_bytes is not None else utf8_length(lines[0])
    if first > max_bytes:
        return _result(
            "",
            truncated=True,
            truncated_by="bytes",
            total_lines=total_lines,
            total_bytes=total_bytes,
            output_lines=0,
            output_bytes=0,
            first_line_exceeds_limit=True,
            max_lines=max_lines,
            max_bytes=max_bytes,
        )
    kept: list[str] = []
    size = 0
    truncated_by: Literal["lines", "bytes"] = "lines"
    for i, line in enumerate(lines):
        if i >= max_lines:
            break
        line_bytes = utf8_length(line) + (1 if i > 0 else 0)
        if size + line_bytes > max_bytes:
            truncated_by = "bytes"
            break
        kept.append(line)
        size += line_bytes
    else:
        if next_line_too_big and len(kept) < max_lines:
            truncated_by = "bytes"
    if len(kept) >= max_lines and size <= max_bytes:
        truncated_by = "lines"
    output = "\n".join(kept)
    return _result(
        output,
        truncated=True,
        truncated_by=truncated_by,
        total_lines=total_lines,
        total_bytes=total_bytes,
        output_lines=len(kept),
        output_bytes=utf8_length(output),
        max_lines=max_lines,
        max_bytes=max_bytes,
    )


def truncate_tail(
    content: str, *, max_lines: int = DEFAULT_MAX_LINES, max_bytes: int = DEFAULT_MAX_BYTES
) -> Truncation:
    """Pi's ``truncateTail``: whole lines from the end; a huge last line keeps its end."""
    total_bytes = utf8_length(content)
    lines = _split_lines_for_counting(content)
    total_lines = len(lines)
    if total_lines <= max_lines and total_bytes <= max_bytes:
        return _result(
            content,
            truncated=False,
            truncated_by=None,
            total_lines=total_lines,
            total_bytes=total_bytes,
            output_lines=total_lines,
            output_bytes=total_bytes,
            max_lines=max_lines,
            max_bytes=max_bytes,
        )
    kept: list[str] = []
    size = 0
    truncated_by: Literal["lines", "bytes"] = "lines"
    last_line_partial = False
    for line in reversed(lines):
        if len(kept) >= max_lines:
            break
        line_bytes = utf8_length(line) + (1 if kept else 0)
        if size + line_bytes > max_bytes:
            truncated_by = "bytes"
            if not kept:
                partial = _tail_bytes(line, max_bytes)
                kept.append(partial)
                size = utf8_length(partial)
                last_line_partial = True
            break
        kept.append(line)
        size += line_bytes
    if len(kept) >= max_lines and size <= max_bytes:
        truncated_by = "lines"
    kept.reverse()
    output = "\n".join(kept)
    return _result(
        output,
        truncated=True,
        truncated_by=truncated_by,
        total_lines=total_lines,
        total_bytes=total_bytes,
        output_lines=len(kept),
        output_bytes=utf8_length(output),
        last_line_partial=last_line_partial,
        max_lines=max_lines,
        max_bytes=max_bytes,
    )


def _tail_bytes(text: str, max_bytes: int) -> str:
    """Pi's ``truncateStringToBytesFromEnd``: the last bytes, from a character start."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= max_bytes:
        return text
    start = len(data) - max_bytes
    while start < len(data) and (data[start] & 0xC0) == 0x80:
        start += 1
    return data[start:].decode("utf-8", "replace")


def truncate_line(line: str, max_chars: int = GREP_MAX_LINE_LENGTH) -> tuple[str, bool]:
    """Pi's ``truncateLine``: the line, cut to ``max_chars`` with ``... [truncated]``."""
    if js_length(line) <= max_chars:
        return line, False
    return f"{js_slice(line, max_chars)}... [truncated]", True
