"""The coding tools on hostile files: huge sparse files, devices, named pipes, aborts.

A model can point ``read`` or ``grep`` at anything in the working directory. Reading
must stay within bounded memory whatever the file's size, must not block on a pipe or a
device, and an abort must stop the worker thread doing the reading: no thread may be left
running pitrio's code after the call returns.
"""

from __future__ import annotations

import os
import sys
import threading
import tracemalloc
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
import trio

from pitrio._events import ToolResult
from pitrio._messages import TextContent
from pitrio._signal import AbortSignal
from pitrio.coding import CodingToolError, Workspace, _tools as tools_module

GIB = 1024 * 1024 * 1024
CODING_DIR = str(Path(tools_module.__file__).parent)


async def call(
    ws: Workspace, name: str, signal: AbortSignal | None = None, **params: Any
) -> ToolResult:
    tool = ws.tools([name])[0]
    return await tool.execute("c1", params, signal or AbortSignal(), lambda _u: None)


def text_of(result: ToolResult) -> str:
    return "".join(b.text for b in result.content if isinstance(b, TextContent))


def workers_in_coding_code() -> list[str]:
    """Names of the threads (other than this one) now running code of pitrio.coding."""
    busy = []
    frames = sys._current_frames()
    for thread in threading.enumerate():
        if thread.ident == threading.get_ident() or thread.ident not in frames:
            continue
        frame: FrameType | None = frames[thread.ident]
        while frame is not None:
            if frame.f_code.co_filename.startswith(CODING_DIR):
                busy.append(thread.name)
                break
            frame = frame.f_back
    return busy


async def wait_for_workers(*, busy: bool) -> None:
    """Until some worker runs pitrio.coding code (``busy``) or none does."""
    # Another thread's state cannot be awaited: poll it.
    for _ in range(100_000):
        if bool(workers_in_coding_code()) == busy:
            return
        await trio.sleep(0.005)


@pytest.fixture
def sparse(tmp_path: Path) -> Path:
    """A 2 GiB sparse file of zero bytes (no line breaks): no disk space used."""
    path = tmp_path / "sparse.bin"
    with open(path, "wb") as f:
        f.truncate(2 * GIB)
    return path


async def test_reading_a_2gb_sparse_file_uses_bounded_memory(sparse: Path) -> None:
    """The whole 2 GiB is read (its size is in the text) with a few MB of memory."""
    ws = Workspace(sparse.parent)
    tracemalloc.start()
    try:
        with trio.fail_after(120):
            result = await call(ws, "read", path="sparse.bin")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert text_of(result) == (
        "[Line 1 is 2048.0MB, exceeds 50.0KB limit. Use bash: sed -n '1p' sparse.bin | "
        "head -c 51200]"
    )
    assert isinstance(result.details, dict)
    assert result.details["truncation"]["totalBytes"] == 2 * GIB
    assert peak < 16 * 1024 * 1024, peak


@pytest.mark.parametrize("how", ["abort signal", "cancel scope"])
async def test_an_abort_stops_the_read_and_its_thread(
    sparse: Path, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Aborted mid-read (by the signal, or by cancelling the caller), the call ends and
    the worker thread stops by itself within a chunk, long before the file's end, and no
    thread is left running pitrio's code."""
    checks = 0
    real_check = tools_module._check

    def counting_check(stop: threading.Event) -> None:
        nonlocal checks
        checks += 1  # one per 1 MiB chunk read
        real_check(stop)

    monkeypatch.setattr(tools_module, "_check", counting_check)
    ws = Workspace(sparse.parent)
    signal = AbortSignal()
    outcome: list[object] = []

    async def reader(task_status: trio.TaskStatus[trio.CancelScope]) -> None:
        with trio.CancelScope() as scope:
            task_status.started(scope)
            try:
                outcome.append(await call(ws, "read", signal, path="sparse.bin"))
            except CodingToolError as exc:
                outcome.append(exc)

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            scope = await nursery.start(reader)
            await wait_for_workers(busy=True)
            if how == "abort signal":
                signal.abort()
            else:
                scope.cancel()
        at_abort = checks
        await wait_for_workers(busy=False)
    assert checks - at_abort <= 2  # the worker saw the flag at its next chunk
    assert checks < 2 * GIB // tools_module._CHUNK  # it never read the whole file
    if how == "abort signal":
        assert len(outcome) == 1
        assert isinstance(outcome[0], CodingToolError)
        assert str(outcome[0]) == "Operation aborted"
    else:
        assert outcome == []
    assert workers_in_coding_code() == []


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
async def test_read_refuses_a_character_device() -> None:
    """/dev/zero never ends; read refuses it at once, with a text that says why."""
    ws = Workspace("/dev")
    with trio.fail_after(10), pytest.raises(CodingToolError) as info:
        await call(ws, "read", path="zero")
    assert str(info.value) == (
        "Cannot read zero: it is a character device, not a regular file. read reads regular "
        "files only; use bash for devices and pipes."
    )


async def test_read_refuses_a_named_pipe_without_blocking(tmp_path: Path) -> None:
    """Opening a FIFO with no writer would block forever; read refuses it instead."""
    os.mkfifo(tmp_path / "pipe")
    ws = Workspace(tmp_path)
    with trio.fail_after(10), pytest.raises(CodingToolError) as info:
        await call(ws, "read", path="pipe")
    assert str(info.value).startswith("Cannot read pipe: it is a named pipe (FIFO)")
    assert workers_in_coding_code() == []


async def test_edit_refuses_a_named_pipe(tmp_path: Path) -> None:
    """edit reads the file first, so it refuses a FIFO too."""
    os.mkfifo(tmp_path / "pipe")
    ws = Workspace(tmp_path)
    with trio.fail_after(10), pytest.raises(CodingToolError, match=r"named pipe"):
        await call(ws, "edit", path="pipe", edits=[{"oldText": "a", "newText": "b"}])


async def test_grep_skips_pipes_and_huge_binary_files(tmp_path: Path, sparse: Path) -> None:
    """grep over a folder holding a FIFO and a 2 GiB sparse file finds the real match,
    without blocking and without reading the sparse file past its first chunk."""
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "notes.txt").write_text("a needle here\n")
    ws = Workspace(tmp_path)
    with trio.fail_after(30):
        assert await call(ws, "grep", pattern="needle") == ToolResult(
            content=(TextContent(text="notes.txt:1: a needle here"),)
        )
        assert text_of(await call(ws, "grep", pattern="needle", path="pipe")) == (
            "No matches found"
        )
    assert workers_in_coding_code() == []


async def test_find_and_ls_list_a_pipe_without_opening_it(tmp_path: Path) -> None:
    """find and ls only name what is there; a FIFO is listed and never opened."""
    os.mkfifo(tmp_path / "pipe")
    ws = Workspace(tmp_path)
    with trio.fail_after(10):
        assert text_of(await call(ws, "find", pattern="p*")) == "pipe"
        assert text_of(await call(ws, "ls")) == "pipe"


async def test_an_unexpected_failure_still_has_a_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exception without a message (MemoryError()) becomes an error with a text."""

    def out_of_memory(*args: object, **kwargs: object) -> ToolResult:
        raise MemoryError

    monkeypatch.setattr(tools_module, "_read_file", out_of_memory)
    (tmp_path / "a.txt").write_text("a")
    with pytest.raises(CodingToolError) as info:
        await call(Workspace(tmp_path), "read", path="a.txt")
    assert str(info.value) == "The read tool ran out of memory."


async def test_an_unexpected_error_without_a_message_names_its_type(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any other silent exception is named by its type."""

    def broken(*args: object) -> ToolResult:
        raise RuntimeError

    monkeypatch.setattr(tools_module, "_ls", broken)
    with pytest.raises(CodingToolError) as info:
        await call(Workspace(tmp_path), "ls")
    assert str(info.value) == "The ls tool failed (RuntimeError)."


async def test_grep_through_an_endless_line_keeps_line_numbers(tmp_path: Path) -> None:
    """A 20 MiB line is searched as far as grep buffers it (16 MiB) and the lines after it
    keep their numbers."""
    (tmp_path / "big.txt").write_bytes(b"needle " + b"x" * (20 * 1024 * 1024) + b"\nneedle two\n")
    ws = Workspace(tmp_path)
    with trio.fail_after(60):
        result = await call(ws, "grep", pattern="needle", path="big.txt")
    lines = text_of(result).split("\n")
    assert lines[0] == "big.txt:1: needle " + "x" * 493 + "... [truncated]"
    assert lines[1] == "big.txt:2: needle two"
    assert result.details == {"linesTruncated": True}
