"""read streams a file in chunks; the result must be what Pi's whole-file read gives.

``pi_read`` below is Pi's ``read.js`` text path transcribed as it is (the whole file
decoded, split on ``\\n``, cut by ``truncateHead``). Hypothesis draws files (multi-byte
characters, invalid bytes, CRLF, long lines), offsets and limits, and pitrio's streaming
read runs with tiny chunks and tiny limits, so that every chunk boundary (inside a
character, at a newline, inside the skipped lines, at the end of the range) and every
truncation path is crossed, and must agree with the transcription.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from pitrio._messages import TextContent
from pitrio.coding import CodingToolError, _tools as tools_module
from pitrio.coding._truncate import format_size, truncate_head, utf8_length


def pi_read(
    data: bytes, path: str, offset: int | None, limit: int | None, max_lines: int, max_bytes: int
) -> tuple[str, Any]:
    """Pi's read of a text file (read.js), with its limits as parameters."""
    all_lines = data.decode("utf-8", "replace").split("\n")
    start = max(0, offset - 1) if offset else 0
    if start >= len(all_lines):
        msg = f"Offset {offset} is beyond end of file ({len(all_lines)} lines total)"
        raise CodingToolError(msg)
    shown_start = start + 1
    user_limited = None
    if limit is not None:
        end = min(start + limit, len(all_lines))
        selected = "\n".join(all_lines[start:end])
        user_limited = end - start
    else:
        selected = "\n".join(all_lines[start:])
    truncation = truncate_head(selected, max_lines=max_lines, max_bytes=max_bytes)
    if truncation["firstLineExceedsLimit"]:
        size = format_size(utf8_length(all_lines[start]))
        return (
            f"[Line {shown_start} is {size}, exceeds {format_size(max_bytes)} limit. "
            f"Use bash: sed -n '{shown_start}p' {path} | head -c {max_bytes}]"
        ), {"truncation": truncation}
    if truncation["truncated"]:
        last = shown_start + truncation["outputLines"] - 1
        text = truncation["content"]
        if truncation["truncatedBy"] == "lines":
            text += (
                f"\n\n[Showing lines {shown_start}-{last} of {len(all_lines)}. "
                f"Use offset={last + 1} to continue.]"
            )
        else:
            text += (
                f"\n\n[Showing lines {shown_start}-{last} of {len(all_lines)} "
                f"({format_size(max_bytes)} limit). Use offset={last + 1} to continue.]"
            )
        return text, {"truncation": truncation}
    if user_limited is not None and start + user_limited < len(all_lines):
        remaining = len(all_lines) - (start + user_limited)
        return (
            f"{truncation['content']}\n\n[{remaining} more lines in file. "
            f"Use offset={start + user_limited + 1} to continue.]"
        ), None
    return truncation["content"], None


@contextmanager
def small(chunk: int, max_lines: int, max_bytes: int) -> Iterator[None]:
    """pitrio's read with tiny chunks and limits (module constants swapped meanwhile)."""
    saved = (tools_module._CHUNK, tools_module.DEFAULT_MAX_LINES, tools_module.DEFAULT_MAX_BYTES)
    tools_module._CHUNK, tools_module.DEFAULT_MAX_LINES, tools_module.DEFAULT_MAX_BYTES = (
        chunk,
        max_lines,
        max_bytes,
    )
    try:
        yield
    finally:
        tools_module._CHUNK, tools_module.DEFAULT_MAX_LINES, tools_module.DEFAULT_MAX_BYTES = saved


PIECES = st.sampled_from(
    [b"a", b"bc", b" ", b"\n", b"\n", b"\r\n", "é".encode(), "日本".encode(), "🎉".encode(),
     b"\xff", b"\xe2\x82", b"x" * 30]
)  # fmt: skip


@settings(
    deadline=None,
    max_examples=400,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    data=st.lists(PIECES, max_size=40).map(b"".join),
    offset=st.none() | st.integers(-1, 12),
    limit=st.none() | st.integers(0, 8),
    chunk=st.integers(1, 9),
    max_lines=st.integers(1, 6),
    max_bytes=st.integers(1, 40),
)
def test_streaming_read_is_pis_read(
    tmp_path: Path,
    data: bytes,
    offset: int | None,
    limit: int | None,
    chunk: int,
    max_lines: int,
    max_bytes: int,
) -> None:
    """Same text, same details, same errors as Pi's whole-file read."""
    if data[:3] in (b"GIF", b"BM"):  # an image header would make it an image read
        data = b"." + data
    file = tmp_path / "f.txt"
    file.write_bytes(data)
    try:
        expected: Any = pi_read(data, "f.txt", offset, limit, max_lines, max_bytes)
    except CodingToolError as exc:
        expected = str(exc)
    with small(chunk, max_lines, max_bytes):
        try:
            result = tools_module._read_file(
                str(file), str(file), "f.txt", offset, limit, threading.Event()
            )
        except CodingToolError as exc:
            actual: Any = str(exc)
        else:
            assert len(result.content) == 1
            block = result.content[0]
            assert isinstance(block, TextContent)
            actual = (block.text, result.details)
    assert actual == expected


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 1024])
def test_a_long_file_in_small_chunks(tmp_path: Path, chunk: int) -> None:
    """A 3000-line file read whole, with an offset and with a limit, in tiny chunks."""
    data = "".join(f"línea {i}\n" for i in range(1, 3001)).encode()
    file = tmp_path / "f.txt"
    file.write_bytes(data)
    for offset, limit in [(None, None), (1500, None), (2999, 5), (10, 3000)]:
        expected = pi_read(data, "f.txt", offset, limit, 2000, 50 * 1024)
        with small(chunk, 2000, 50 * 1024):
            result = tools_module._read_file(
                str(file), str(file), "f.txt", offset, limit, threading.Event()
            )
        block = result.content[0]
        assert isinstance(block, TextContent)
        assert (block.text, result.details) == expected
