"""The coding tools: read, write, edit, ls, grep and bash, confined to one directory.

These are the tools of Pi's coding agent (``pi-coding-agent``), rebuilt on Trio and
kept to the same parameter names and, where Pi has one, the same message text, so a
model prompted for Pi behaves the same here::

    tools = coding_tools("/path/to/project")
    agent = Agent(tools=tools, ...)

Every path a tool is given is resolved against the working directory (symlinks
followed) and refused if it lands outside it. ``bash`` runs its command *in* the
working directory but is not a sandbox: a shell command can reach anything the user
can.

Failures are exceptions, which the loop turns into error results with the exception's
text (Pi's tools throw the same way). An abort cancels a running tool; ``bash`` then
kills the command's whole process group before the cancellation goes on.
"""

from __future__ import annotations

import base64
import contextlib
import difflib
import fnmatch
import os
import re
import shutil
import signal as signal_module
import subprocess
import sys
from collections.abc import Mapping
from contextlib import nullcontext
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, final

import trio

from .._errors import PitrioError
from .._events import ToolResult
from .._messages import ImageContent, TextContent
from .._tools import Tool, ToolUpdateCallback, text_result

if TYPE_CHECKING:
    from .._signal import AbortSignal

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_LINES",
    "CodingToolError",
    "Workspace",
    "coding_tools",
]

DEFAULT_MAX_LINES = 2000
"""Output of read and bash is cut to this many lines (Pi's ``DEFAULT_MAX_LINES``)."""
DEFAULT_MAX_BYTES = 50 * 1024
"""... and to this many bytes (Pi's ``DEFAULT_MAX_BYTES``)."""
GREP_MAX_LINE_CHARS = 500
DEFAULT_GREP_LIMIT = 100
DEFAULT_LS_LIMIT = 500
_UPDATE_INTERVAL = 0.25
"""Seconds between two partial results of a running bash command."""
_IMAGE_TYPES: Mapping[str, str] = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
}
_SKIPPED_DIRS = frozenset({"node_modules", "__pycache__"})


class CodingToolError(PitrioError):
    """A coding tool refused or failed; the text is what the model sees."""


def coding_tools(cwd: str | os.PathLike[str], *, bash_timeout: float | None = None) -> list[Tool]:
    """The six coding tools working in ``cwd``: read, write, edit, ls, grep, bash.

    Args:
        cwd: the working directory; every path is resolved against it and must stay
            inside it.
        bash_timeout: seconds after which a bash command is killed when the model
            gives no ``timeout`` of its own (``None``: no limit, as in Pi).
    """
    return Workspace(cwd, bash_timeout=bash_timeout).tools()


@final
class Workspace:
    """A working directory and the tools confined to it."""

    __slots__ = ("_locks", "bash_timeout", "root")

    def __init__(self, cwd: str | os.PathLike[str], *, bash_timeout: float | None = None) -> None:
        root = Path(os.path.realpath(cwd))
        if not root.is_dir():
            msg = f"working directory {str(cwd)!r} is not a directory"
            raise NotADirectoryError(msg)
        self.root = root
        self.bash_timeout = bash_timeout
        # Writes to one file are serialized: a parallel batch may hold two edits of it.
        self._locks: dict[Path, trio.Lock] = {}

    def tools(self) -> list[Tool]:
        """read, write, edit, ls, grep and bash, in that order."""
        return [
            Tool(
                name="read",
                label="read",
                description=(
                    "Read the contents of a file. Images (jpg, png, gif, webp) are returned "
                    f"as attachments. Text output is cut to {DEFAULT_MAX_LINES} lines or "
                    f"{DEFAULT_MAX_BYTES // 1024}KB, whichever comes first; use offset and "
                    "limit to page through large files."
                ),
                parameters=_schema(
                    {
                        "path": _string("Path to the file to read (relative or absolute)"),
                        "offset": _number("Line number to start reading from (1-indexed)"),
                        "limit": _number("Maximum number of lines to read"),
                    },
                    required=["path"],
                ),
                execute=self._read,
            ),
            Tool(
                name="write",
                label="write",
                description=(
                    "Write content to a file. Creates the file if it doesn't exist, "
                    "overwrites it if it does. Creates parent directories as needed."
                ),
                parameters=_schema(
                    {
                        "path": _string("Path to the file to write (relative or absolute)"),
                        "content": _string("Content to write to the file"),
                    },
                    required=["path", "content"],
                ),
                execute=self._write,
            ),
            Tool(
                name="edit",
                label="edit",
                description=(
                    "Edit a file by replacing exact text. The oldText must match exactly "
                    "(including whitespace) and occur exactly once. Use this for precise, "
                    "surgical edits."
                ),
                parameters=_schema(
                    {
                        "path": _string("Path to the file to edit (relative or absolute)"),
                        "oldText": _string("Exact text to find and replace (must match exactly)"),
                        "newText": _string("New text to replace the old text with"),
                    },
                    required=["path", "oldText", "newText"],
                ),
                execute=self._edit,
            ),
            Tool(
                name="ls",
                label="ls",
                description=(
                    "List directory contents, sorted alphabetically, with '/' after "
                    f"directories. Includes dotfiles. Output is cut to {DEFAULT_LS_LIMIT} "
                    "entries unless a limit is given."
                ),
                parameters=_schema(
                    {
                        "path": _string("Directory to list (default: current directory)"),
                        "limit": _number(
                            f"Maximum number of entries to return (default: {DEFAULT_LS_LIMIT})"
                        ),
                    },
                    required=[],
                ),
                execute=self._ls,
            ),
            Tool(
                name="grep",
                label="grep",
                description=(
                    "Search file contents for a regular expression (Python syntax). Returns "
                    "matching lines as path:line: text. Skips hidden files and directories, "
                    f"node_modules and binary files. Output is cut to {DEFAULT_GREP_LIMIT} "
                    "matches unless a limit is given."
                ),
                parameters=_schema(
                    {
                        "pattern": _string("Search pattern (regex, or plain text with literal)"),
                        "path": _string("Directory or file to search (default: current directory)"),
                        "glob": _string("Only search files matching this glob, e.g. '*.py'"),
                        "ignoreCase": {"type": "boolean", "description": "Case-insensitive search"},
                        "literal": {
                            "type": "boolean",
                            "description": "Treat the pattern as plain text, not a regex",
                        },
                        "context": _number("Lines to show before and after each match"),
                        "limit": _number(
                            f"Maximum number of matches to return (default: {DEFAULT_GREP_LIMIT})"
                        ),
                    },
                    required=["pattern"],
                ),
                execute=self._grep,
            ),
            Tool(
                name="bash",
                label="bash",
                description=(
                    "Execute a bash command in the current working directory. Returns stdout "
                    f"and stderr together. Output is cut to the last {DEFAULT_MAX_LINES} lines "
                    f"or {DEFAULT_MAX_BYTES // 1024}KB. Optionally give a timeout in seconds."
                ),
                parameters=_schema(
                    {
                        "command": _string("Bash command to execute"),
                        "timeout": _number("Timeout in seconds (optional, no default timeout)"),
                    },
                    required=["command"],
                ),
                execute=self._bash,
            ),
        ]

    # -- paths ---------------------------------------------------------------------------

    def resolve(self, path: str) -> Path:
        """The real path of ``path`` (relative to the root), which must lie inside the root.

        Raises:
            CodingToolError: the path leads outside the working directory.
        """
        raw = path.strip()
        if raw.startswith("@"):  # Pi strips the @ of an @file mention
            raw = raw[1:]
        candidate = Path(os.path.expanduser(raw)) if raw.startswith("~") else Path(raw)
        full = Path(os.path.realpath(self.root / candidate))
        if full != self.root and not full.is_relative_to(self.root):
            msg = (
                f"Path {path!r} is outside the working directory {str(self.root)!r}; "
                "use a path inside it"
            )
            raise CodingToolError(msg)
        return full

    def _lock(self, path: Path) -> trio.Lock:
        lock = self._locks.get(path)
        if lock is None:
            lock = self._locks[path] = trio.Lock()
        return lock

    # -- read / write / edit -----------------------------------------------------------

    async def _read(
        self, tool_call_id: str, params: Any, signal: AbortSignal, on_update: ToolUpdateCallback
    ) -> ToolResult:
        path = str(params["path"])
        full = self.resolve(path)
        offset = _optional_int(params, "offset", minimum=1)
        limit = _optional_int(params, "limit", minimum=1)
        data = await trio.to_thread.run_sync(
            partial(_read_bytes, full, path), abandon_on_cancel=True
        )
        mime = _IMAGE_TYPES.get(full.suffix.lower())
        if mime is not None:
            return ToolResult(
                content=(
                    TextContent(text=f"Read image file [{mime}]"),
                    ImageContent(data=base64.b64encode(data).decode("ascii"), mime_type=mime),
                )
            )
        return text_result(_page(data.decode("utf-8", errors="replace"), path, offset, limit))

    async def _write(
        self, tool_call_id: str, params: Any, signal: AbortSignal, on_update: ToolUpdateCallback
    ) -> ToolResult:
        path = str(params["path"])
        content = str(params["content"])
        full = self.resolve(path)
        async with self._lock(full):
            await trio.to_thread.run_sync(_write_text, full, content)
        size = len(content.encode("utf-8"))
        return text_result(f"Successfully wrote {size} bytes to {path}")

    async def _edit(
        self, tool_call_id: str, params: Any, signal: AbortSignal, on_update: ToolUpdateCallback
    ) -> ToolResult:
        path = str(params["path"])
        old_text = str(params["oldText"])
        new_text = str(params["newText"])
        full = self.resolve(path)
        if not old_text:
            msg = f"oldText must not be empty in {path}."
            raise CodingToolError(msg)
        async with self._lock(full):
            raw = await trio.to_thread.run_sync(_read_bytes, full, path)
            try:
                original = raw.decode("utf-8")
            except UnicodeDecodeError:
                msg = f"Cannot edit {path}: it is not UTF-8 text."
                raise CodingToolError(msg) from None
            bom = "\ufeff" if original.startswith("\ufeff") else ""
            text = original[len(bom) :]
            crlf = "\r\n" in text
            # Match on LF text, as Pi does, so a model need not reproduce CRLF endings.
            content = text.replace("\r\n", "\n")
            old = old_text.replace("\r\n", "\n")
            new = new_text.replace("\r\n", "\n")
            occurrences = content.count(old)
            if occurrences == 0:
                msg = (
                    f"Could not find the exact text in {path}. The old text must match "
                    "exactly including all whitespace and newlines."
                )
                raise CodingToolError(msg)
            if occurrences > 1:
                msg = (
                    f"Found {occurrences} occurrences of the text in {path}. The text must be "
                    "unique. Please provide more context to make it unique."
                )
                raise CodingToolError(msg)
            updated = content.replace(old, new, 1)
            if updated == content:
                msg = (
                    f"No changes made to {path}. The replacement produced identical content. "
                    "This might indicate an issue with special characters or the text not "
                    "existing as expected."
                )
                raise CodingToolError(msg)
            final = bom + (updated.replace("\n", "\r\n") if crlf else updated)
            await trio.to_thread.run_sync(_write_text, full, final)
        diff, first_changed = _diff(content, updated, path)
        return text_result(
            f"Successfully replaced text in {path}.",
            details={"diff": diff, "firstChangedLine": first_changed},
        )

    # -- ls / grep ---------------------------------------------------------------------

    async def _ls(
        self, tool_call_id: str, params: Any, signal: AbortSignal, on_update: ToolUpdateCallback
    ) -> ToolResult:
        path = str(params.get("path") or ".")
        limit = _optional_int(params, "limit", minimum=1) or DEFAULT_LS_LIMIT
        full = self.resolve(path)
        text = await trio.to_thread.run_sync(
            partial(_list_dir, full, path, limit), abandon_on_cancel=True
        )
        return text_result(text)

    async def _grep(
        self, tool_call_id: str, params: Any, signal: AbortSignal, on_update: ToolUpdateCallback
    ) -> ToolResult:
        pattern = str(params["pattern"])
        path = str(params.get("path") or ".")
        full = self.resolve(path)
        literal = bool(params.get("literal", False))
        flags = re.IGNORECASE if params.get("ignoreCase") else 0
        try:
            regex = re.compile(re.escape(pattern) if literal else pattern, flags)
        except re.error as exc:
            msg = (
                f"Invalid regular expression {pattern!r}: {exc}. Escape special characters, "
                "or pass literal=true to search for the text as it is."
            )
            raise CodingToolError(msg) from None
        search = partial(
            _grep_files,
            self.root,
            full,
            path,
            regex,
            glob=params.get("glob") or None,
            context=_optional_int(params, "context", minimum=0) or 0,
            limit=_optional_int(params, "limit", minimum=1) or DEFAULT_GREP_LIMIT,
        )
        return text_result(await trio.to_thread.run_sync(search, abandon_on_cancel=True))

    # -- bash --------------------------------------------------------------------------

    async def _bash(
        self, tool_call_id: str, params: Any, signal: AbortSignal, on_update: ToolUpdateCallback
    ) -> ToolResult:
        command = str(params["command"])
        timeout = _optional_float(params, "timeout")
        if timeout is None:
            timeout = self.bash_timeout
        output = _OutputTail()
        last_update = trio.current_time() - _UPDATE_INTERVAL  # the first output at once

        async def read_output(stream: trio.abc.ReceiveStream, done: trio.Event) -> None:
            nonlocal last_update
            try:
                async with stream:
                    async for chunk in stream:
                        output.add(chunk)
                        now = trio.current_time()
                        if now - last_update >= _UPDATE_INTERVAL:
                            last_update = now
                            on_update(text_result(output.format()))
            finally:
                done.set()

        argv = [_shell(), "-c", command]
        timer: trio.CancelScope | nullcontext[None] = (
            trio.move_on_after(timeout) if timeout is not None else nullcontext()
        )
        process: trio.Process | None = None
        with timer:
            async with trio.open_nursery() as nursery:
                reader_done = trio.Event()
                process = await nursery.start(_run_command, argv, self.root, reader_done)
                assert process.stdout is not None
                await read_output(process.stdout, reader_done)
        text = output.format()
        if isinstance(timer, trio.CancelScope) and timer.cancelled_caught:
            msg = _with_status(text, f"Command timed out after {_seconds(timeout)} seconds")
            raise CodingToolError(msg)
        assert process is not None
        code = process.returncode
        if code:
            status = (
                f"Command was killed by signal {-code}"
                if code < 0
                else f"Command exited with code {code}"
            )
            raise CodingToolError(_with_status(text, status))
        return text_result(text or "(no output)")


# --------------------------------------------------------------------------------------
# bash: the process and its output


def _shell() -> str:
    return shutil.which("bash") or "/bin/sh"


class _RecordingStatus:
    """Forwards ``started(process)`` and remembers the process."""

    __slots__ = ("_inner", "process")

    def __init__(self, inner: trio.TaskStatus[trio.Process]) -> None:
        self._inner = inner
        self.process: trio.Process | None = None

    def started(self, value: trio.Process | None = None) -> None:
        assert value is not None
        self.process = value
        self._inner.started(value)


async def _run_command(
    argv: list[str],
    cwd: Path,
    reader_done: trio.Event,
    *,
    task_status: trio.TaskStatus[trio.Process] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run ``argv`` in its own process group; started() with the process.

    When the shell exits while something it started still holds the output pipe
    (``sleep 100 &``), the rest of its process group is killed so the output ends.
    """
    status = _RecordingStatus(task_status)
    await trio.run_process(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        check=False,
        cwd=cwd,
        start_new_session=True,
        deliver_cancel=_kill_process_group,
        task_status=status,
    )
    if not reader_done.is_set() and status.process is not None:
        _kill_group(status.process.pid)


async def _kill_process_group(process: trio.Process) -> None:
    """``deliver_cancel`` for run_process: kill the command and everything it started."""
    _kill_group(process.pid)
    await trio.lowlevel.checkpoint()


def _kill_group(pid: int) -> None:
    if sys.platform == "win32":  # pragma: no cover  # no process groups there
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone
        os.killpg(pid, signal_module.SIGKILL)


@final
class _OutputTail:
    """The last bytes of a command's output, and how many lines were dropped before them."""

    __slots__ = ("_buffer", "_keep", "dropped_lines")

    def __init__(self, keep: int = 2 * DEFAULT_MAX_BYTES) -> None:
        self._buffer = bytearray()
        self._keep = keep
        self.dropped_lines = 0

    def add(self, data: bytes | bytearray) -> None:
        self._buffer += data
        excess = len(self._buffer) - self._keep
        if excess > 0:
            # Cut after the newline that ends the line holding byte ``excess - 1``.
            newline = self._buffer.find(b"\n", excess - 1)
            cut = newline + 1 if newline != -1 else excess
            self.dropped_lines += self._buffer.count(b"\n", 0, cut)
            del self._buffer[:cut]

    def format(self) -> str:
        """The output as the model sees it: its tail, with a note when cut."""
        text = self._buffer.decode("utf-8", errors="replace")
        if text.endswith("\n"):
            text = text[:-1]
        if not text and not self.dropped_lines:
            return ""
        return _truncate_tail(text, self.dropped_lines)


def _truncate_tail(text: str, dropped_lines: int) -> str:
    lines = text.split("\n")
    total = dropped_lines + len(lines)
    kept: list[str] = []
    size = 0
    by_bytes = False
    for line in reversed(lines):
        line_size = len(line.encode("utf-8")) + (1 if kept else 0)
        if len(kept) >= DEFAULT_MAX_LINES:
            break
        if size + line_size > DEFAULT_MAX_BYTES:
            by_bytes = True
            if not kept:  # one huge last line: keep its tail
                tail = line.encode("utf-8")[-DEFAULT_MAX_BYTES:].decode("utf-8", errors="ignore")
                return (
                    f"{tail}\n\n[Showing last {_format_size(len(tail.encode()))} of line {total}.]"
                )
            break
        kept.append(line)
        size += line_size
    kept.reverse()
    content = "\n".join(kept)
    if len(kept) == total:
        return content
    start = total - len(kept) + 1
    limit = f" ({_format_size(DEFAULT_MAX_BYTES)} limit)" if by_bytes else ""
    return f"{content}\n\n[Showing lines {start}-{total} of {total}{limit}.]"


def _with_status(output: str, status: str) -> str:
    return f"{output}\n\n{status}" if output else status


def _seconds(value: float | None) -> str:
    if value is None:  # pragma: no cover  # only called after a timeout
        return "?"
    return str(int(value)) if float(value).is_integer() else str(value)


# --------------------------------------------------------------------------------------
# read / write / edit helpers (run in worker threads)


def _read_bytes(full: Path, path: str) -> bytes:
    if full.is_dir():
        msg = f"Path is a directory: {path}. Use ls to list it."
        raise CodingToolError(msg)
    try:
        return full.read_bytes()
    except FileNotFoundError:
        msg = f"File not found: {path}"
        raise CodingToolError(msg) from None


def _write_text(full: Path, content: str) -> None:
    if full.is_dir():
        msg = f"Path is a directory: {full}"
        raise CodingToolError(msg)
    full.parent.mkdir(parents=True, exist_ok=True)
    with open(full, "w", encoding="utf-8", newline="") as f:
        f.write(content)


def _page(text: str, path: str, offset: int | None, limit: int | None) -> str:
    """Pi's read paging: lines from ``offset`` (1-indexed), at most ``limit``, then cut."""
    lines = text.split("\n")
    total = len(lines)
    start = (offset or 1) - 1
    if start >= total:
        msg = f"Offset {offset} is beyond end of file ({total} lines total)"
        raise CodingToolError(msg)
    selected = lines[start : start + limit] if limit is not None else lines[start:]
    first = start + 1
    kept: list[str] = []
    size = 0
    by_bytes = False
    for line in selected:
        line_size = len(line.encode("utf-8")) + (1 if kept else 0)
        if len(kept) >= DEFAULT_MAX_LINES:
            break
        if size + line_size > DEFAULT_MAX_BYTES:
            by_bytes = True
            break
        kept.append(line)
        size += line_size
    if not kept and selected:
        first_size = _format_size(len(selected[0].encode("utf-8")))
        return (
            f"[Line {first} is {first_size}, exceeds {_format_size(DEFAULT_MAX_BYTES)} limit. "
            f"Use bash: sed -n '{first}p' {path} | head -c {DEFAULT_MAX_BYTES}]"
        )
    content = "\n".join(kept)
    if len(kept) < len(selected):
        end = first + len(kept) - 1
        limit_note = f" ({_format_size(DEFAULT_MAX_BYTES)} limit)" if by_bytes else ""
        return (
            f"{content}\n\n[Showing lines {first}-{end} of {total}{limit_note}. "
            f"Use offset={end + 1} to continue.]"
        )
    if limit is not None and start + limit < total:
        remaining = total - (start + limit)
        return (
            f"{content}\n\n[{remaining} more lines in file. "
            f"Use offset={start + limit + 1} to continue.]"
        )
    return content


def _diff(before: str, after: str, path: str) -> tuple[str, int]:
    before_lines = before.split("\n")
    after_lines = after.split("\n")
    first = next(
        (i for i, (a, b) in enumerate(zip(before_lines, after_lines, strict=False)) if a != b),
        min(len(before_lines), len(after_lines)),
    )
    diff = "\n".join(difflib.unified_diff(before_lines, after_lines, path, path, n=3, lineterm=""))
    return diff, first + 1


def _format_size(size: int) -> str:
    """Pi's ``formatSize``."""
    if size < 1024:
        return f"{size}B"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f}KB"
    return f"{size / (1024 * 1024):.1f}MB"


# --------------------------------------------------------------------------------------
# ls / grep helpers (run in worker threads)


def _list_dir(full: Path, path: str, limit: int) -> str:
    if not full.exists():
        msg = f"Path not found: {path}"
        raise CodingToolError(msg)
    if not full.is_dir():
        msg = f"Not a directory: {path}"
        raise CodingToolError(msg)
    names = sorted(os.listdir(full), key=lambda n: (n.lower(), n))
    if not names:
        return "(empty directory)"
    shown = [f"{n}/" if (full / n).is_dir() else n for n in names[:limit]]
    text = "\n".join(shown)
    if len(names) > limit:
        text += f"\n\n[{limit} entries limit reached. Use limit={limit * 2} for more]"
    return text


def _grep_files(
    root: Path,
    full: Path,
    path: str,
    regex: re.Pattern[str],
    *,
    glob: str | None,
    context: int,
    limit: int,
) -> str:
    if not full.exists():
        msg = f"Path not found: {path}"
        raise CodingToolError(msg)
    if full.is_file():
        files: list[tuple[Path, str]] = [(full, full.name)]
    else:
        files = list(_walk(full, glob))
    out: list[str] = []
    size = 0
    matches = 0
    for file, shown in files:
        trio.from_thread.check_cancelled()
        # A symlinked file inside the directory may point outside it: resolve each file
        # before reading, and skip what lands outside the root.
        real = Path(os.path.realpath(file))
        if real != root and not real.is_relative_to(root):
            continue
        try:
            data = real.read_bytes()
        except OSError:
            continue
        if b"\0" in data[:8192]:
            continue  # binary
        lines = data.decode("utf-8", errors="replace").splitlines()
        last_printed = -1
        for index, line in enumerate(lines):
            if not regex.search(line):
                continue
            matches += 1
            for j in range(
                max(index - context, last_printed + 1), min(index + context, len(lines) - 1) + 1
            ):
                sep = ":" if j == index else "-"
                entry = f"{shown}{sep}{j + 1}{sep} {_clip(lines[j])}"
                size += len(entry.encode("utf-8")) + 1
                if size > DEFAULT_MAX_BYTES:
                    out.append(f"\n[{_format_size(DEFAULT_MAX_BYTES)} limit reached]")
                    return "\n".join(out)
                out.append(entry)
                last_printed = j
            if matches >= limit:
                out.append(
                    f"\n[{limit} matches limit reached. Use limit={limit * 2} for more, "
                    "or refine pattern]"
                )
                return "\n".join(out)
    return "\n".join(out) if out else "No matches found"


def _walk(top: Path, glob: str | None) -> list[tuple[Path, str]]:
    found: list[tuple[Path, str]] = []
    for dirpath, dirnames, filenames in os.walk(top):
        trio.from_thread.check_cancelled()
        dirnames[:] = sorted(
            d for d in dirnames if not d.startswith(".") and d not in _SKIPPED_DIRS
        )
        base = Path(dirpath)
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            relative = (base / name).relative_to(top).as_posix()
            if glob is not None and not fnmatch.fnmatch(relative if "/" in glob else name, glob):
                continue
            found.append((base / name, relative))
    return found


def _clip(line: str) -> str:
    if len(line) <= GREP_MAX_LINE_CHARS:
        return line
    return line[:GREP_MAX_LINE_CHARS] + "... [truncated]"


# --------------------------------------------------------------------------------------
# parameters


def _schema(properties: dict[str, Any], *, required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required}


def _string(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


def _number(description: str) -> dict[str, Any]:
    return {"type": "number", "description": description}


def _optional_int(params: Any, name: str, *, minimum: int) -> int | None:
    value = params.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        msg = f"{name} must be a whole number; got {value!r}"
        raise CodingToolError(msg)
    if value < minimum:
        msg = f"{name} must be at least {minimum}; got {value!r}"
        raise CodingToolError(msg)
    return int(value)


def _optional_float(params: Any, name: str) -> float | None:
    value = params.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        msg = f"{name} must be a positive number of seconds; got {value!r}"
        raise CodingToolError(msg)
    return float(value)
