"""The coding tools: read, bash, edit, write, grep, find and ls, confined to one directory.

These are the tools of Pi's coding agent 0.85.0 (``pi-coding-agent``,
``dist/core/tools/``), rebuilt on Trio: the same names, parameter schemas and
descriptions, the same output texts, limits, notices and ``details``, so a model
prompted for Pi behaves the same here::

    tools = coding_tools("/path/to/project")                      # all seven
    tools = coding_tools("/path/to/project", DEFAULT_TOOL_NAMES)  # Pi's default four
    agent = Agent(tools=tools, ...)

Every path a tool is given is resolved against the working directory (symlinks
followed) and refused if it lands outside it (Pi does not confine; see
``docs/deviations.md``). ``bash`` runs its command *in* the working directory but is
not a sandbox: a shell command can reach anything the user can.

Failures are exceptions, which the loop turns into error results with the exception's
text (Pi's tools throw the same way); the text is never empty. Blocking file work runs
in worker threads that read in bounded chunks and check a stop flag, so an abort ends
them promptly and a hostile file (a huge sparse file, ``/dev/zero``, a named pipe) can
neither exhaust memory nor block: ``read`` refuses what is not a regular file and
``grep`` skips it. ``bash`` kills the command's whole process group on abort.
"""

from __future__ import annotations

import base64
import codecs
import contextlib
import errno
import json
import os
import re
import secrets
import shutil
import signal as signal_module
import stat
import subprocess
import sys
import tempfile
import threading
import unicodedata
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import nullcontext
from functools import partial
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final, Protocol, TypeVar, final

import trio

from .._events import ToolResult
from .._messages import ImageContent, TextContent
from .._model import Model
from .._tools import Tool, ToolUpdateCallback
from ._diff import (
    apply_edits,
    detect_line_ending,
    diff_string,
    normalize_to_lf,
    restore_line_endings,
    unified_patch,
)
from ._errors import CodingToolError
from ._truncate import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_LINES,
    GREP_MAX_LINE_LENGTH,
    MAX_SAFE_INTEGER,
    Truncation,
    format_size,
    head_of_lines,
    truncate_head,
    truncate_line,
    truncate_tail,
    utf8_length,
)
from ._walk import Stopped, glob_regex, walk

if TYPE_CHECKING:
    from .._signal import AbortSignal

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_LINES",
    "DEFAULT_TOOL_NAMES",
    "TOOL_NAMES",
    "CodingToolError",
    "Workspace",
    "coding_tools",
]

T = TypeVar("T")

TOOL_NAMES: Final = ("read", "bash", "edit", "write", "grep", "find", "ls")
"""Every coding tool, in Pi's order (``allToolNames`` without Windows' ``powershell``)."""
DEFAULT_TOOL_NAMES: Final = ("read", "bash", "edit", "write")
"""The tools Pi's coding agent turns on by default (``createCodingTools``)."""

DEFAULT_GREP_LIMIT = 100
DEFAULT_FIND_LIMIT = 1000
DEFAULT_LS_LIMIT = 500
BASH_UPDATE_INTERVAL = 0.1
"""Seconds between two partial results of a running command (``BASH_UPDATE_THROTTLE_MS``)."""
_MAX_TIMEOUT_SECONDS = 2_147_483_647 / 1000
_IMAGE_MAX_BASE64 = int(4.5 * 1024 * 1024)
"""Pi's inline image limit (``image-resize-core.js``), on the base64 size."""
_CHUNK = 1024 * 1024
"""Bytes a worker reads before it checks whether it was cancelled."""
_LONG_LINE = 16 * _CHUNK
"""grep searches a line only this far (ripgrep has no such limit; memory has)."""
_UNICODE_SPACES = re.compile("[\u00a0\u2000-\u200a\u202f\u205f\u3000]")
_NON_VISION_IMAGE_NOTE: Final = (
    "[Current model does not support images. The image will be omitted from this request.]"
)
"""What read adds under an image it read for a model without image input (Pi's
``getNonVisionImageNote``)."""


def coding_tools(
    cwd: str | os.PathLike[str],
    names: Iterable[str] | None = None,
    *,
    bash_timeout: float | None = None,
    model: Callable[[], Model | None] | None = None,
) -> list[Tool]:
    """The coding tools working in ``cwd``.

    Args:
        cwd: the working directory; every path is resolved against it and must stay
            inside it.
        names: which tools, by Pi's names (:data:`TOOL_NAMES`), in the order given;
            ``None`` gives all of them. Pi's coding agent starts with
            :data:`DEFAULT_TOOL_NAMES`.
        bash_timeout: seconds after which a bash command is killed when the model
            gives no ``timeout`` of its own (``None``: no limit, as in Pi).
        model: returns the model the calls are made for, asked at each call (Pi's
            ``ctx.model``). When that model has no image input, read adds Pi's note
            under an image it read ("[Current model does not support images. The image
            will be omitted from this request.]"); ``None``: no note.

    Raises:
        CodingToolError: a name that is not a coding tool.
    """
    return Workspace(cwd, bash_timeout=bash_timeout, model=model).tools(names)


# --------------------------------------------------------------------------------------
# schemas (Pi's TypeBox schemas, as JSON)


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """TypeBox's ``Type.Object`` as JSON, keys in its order (no ``required`` when empty)."""
    if not required:
        return {"type": "object", "properties": properties}
    return {"type": "object", "required": required, "properties": properties}


def _string(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


def _number(description: str) -> dict[str, Any]:
    return {"type": "number", "description": description}


def _boolean(description: str) -> dict[str, Any]:
    return {"type": "boolean", "description": description}


_READ_SCHEMA = _object(
    {
        "path": _string("Path to the file to read (relative or absolute)"),
        "offset": _number("Line number to start reading from (1-indexed)"),
        "limit": _number("Maximum number of lines to read"),
    },
    ["path"],
)
_BASH_SCHEMA = _object(
    {
        "command": _string("Shell command to execute"),
        "timeout": _number("Timeout in seconds (optional, no default timeout)"),
    },
    ["command"],
)
_EDIT_SCHEMA = _object(
    {
        "path": _string("Path to the file to edit (relative or absolute)"),
        "edits": {
            "type": "array",
            "items": _object(
                {
                    "oldText": _string(
                        "Exact text for one targeted replacement. It must be unique in the "
                        "original file and must not overlap with any other edits[].oldText "
                        "in the same call."
                    ),
                    "newText": _string("Replacement text for this targeted edit."),
                },
                ["oldText", "newText"],
            ),
            "description": (
                "One or more targeted replacements. Each edit is matched against the original "
                "file, not incrementally. Do not include overlapping or nested edits. If two "
                "changes touch the same block or nearby lines, merge them into one edit "
                "instead."
            ),
        },
    },
    ["path", "edits"],
)
_WRITE_SCHEMA = _object(
    {
        "path": _string("Path to the file to write (relative or absolute)"),
        "content": _string("Content to write to the file"),
    },
    ["path", "content"],
)
_GREP_SCHEMA = _object(
    {
        "pattern": _string("Search pattern (regex or literal string)"),
        "path": _string("Directory or file to search (default: current directory)"),
        "glob": _string("Filter files by glob pattern, e.g. '*.ts' or '**/*.spec.ts'"),
        "ignoreCase": _boolean("Case-insensitive search (default: false)"),
        "literal": _boolean("Treat pattern as literal string instead of regex (default: false)"),
        "context": _number("Number of lines to show before and after each match (default: 0)"),
        "limit": _number("Maximum number of matches to return (default: 100)"),
    },
    ["pattern"],
)
_FIND_SCHEMA = _object(
    {
        "pattern": _string(
            "Glob pattern to match files, e.g. '*.ts', '**/*.json', or 'src/**/*.spec.ts'"
        ),
        "path": _string("Directory to search in (default: current directory)"),
        "limit": _number("Maximum number of results (default: 1000)"),
    },
    ["pattern"],
)
_LS_SCHEMA = _object(
    {
        "path": _string("Directory to list (default: current directory)"),
        "limit": _number("Maximum number of entries to return (default: 500)"),
    },
    [],
)

_KB = DEFAULT_MAX_BYTES // 1024
DESCRIPTIONS: Final[Mapping[str, str]] = {
    "read": (
        "Read the contents of a file. Supports text files and images (jpg, png, gif, webp, "
        "bmp). Images are sent as attachments. For text files, output is truncated to "
        f"{DEFAULT_MAX_LINES} lines or {_KB}KB (whichever is hit first). Use offset/limit for "
        "large files. When you need the full file, continue with offset until complete."
    ),
    "bash": (
        "Execute a bash command in the current working directory. Returns stdout and stderr. "
        f"Output is truncated to last {DEFAULT_MAX_LINES} lines or {_KB}KB (whichever is hit "
        "first). If truncated, full output is saved to a temp file. Optionally provide a "
        "timeout in seconds."
    ),
    "edit": (
        "Edit a single file using exact text replacement. Every edits[].oldText must match a "
        "unique, non-overlapping region of the original file. If two changes affect the same "
        "block or nearby lines, merge them into one edit instead of emitting overlapping "
        "edits. Do not include large unchanged regions just to connect distant changes."
    ),
    "write": (
        "Write content to a file. Creates the file if it doesn't exist, overwrites if it "
        "does. Automatically creates parent directories."
    ),
    "grep": (
        "Search file contents for a pattern. Returns matching lines with file paths and line "
        f"numbers. Respects .gitignore. Output is truncated to {DEFAULT_GREP_LIMIT} matches or "
        f"{_KB}KB (whichever is hit first). Long lines are truncated to "
        f"{GREP_MAX_LINE_LENGTH} chars."
    ),
    "find": (
        "Search for files by glob pattern. Returns matching file paths relative to the search "
        f"directory. Respects .gitignore. Output is truncated to {DEFAULT_FIND_LIMIT} results "
        f"or {_KB}KB (whichever is hit first)."
    ),
    "ls": (
        "List directory contents. Returns entries sorted alphabetically, with '/' suffix for "
        f"directories. Includes dotfiles. Output is truncated to {DEFAULT_LS_LIMIT} entries or "
        f"{_KB}KB (whichever is hit first)."
    ),
}
"""Each tool's description, as Pi's coding agent gives it to the model."""


# --------------------------------------------------------------------------------------
# errors as Node words them (Pi's tools pass Node's fs errors through)

_NODE_ERRORS: Final[Mapping[int, str]] = {
    errno.ENOENT: "no such file or directory",
    errno.EACCES: "permission denied",
    errno.EISDIR: "illegal operation on a directory",
    errno.ENOTDIR: "not a directory",
    errno.EEXIST: "file already exists",
    errno.ELOOP: "too many symbolic links encountered",
    errno.ENAMETOOLONG: "name too long",
    errno.EPERM: "operation not permitted",
    errno.ENOSPC: "no space left on device",
    errno.EROFS: "read-only file system",
    errno.EBUSY: "resource busy or locked",
    errno.EINVAL: "invalid argument",
}


def _node_code(exc: OSError) -> str:
    return errno.errorcode.get(exc.errno or 0, "EIO")


def _node_message(exc: OSError, syscall: str, path: str) -> str:
    """Node's text for an fs error: ``ENOENT: no such file or directory, open '/a/b'``."""
    code = _node_code(exc)
    words = _NODE_ERRORS.get(exc.errno or 0) or (exc.strerror or "i/o error").lower()
    return f"{code}: {words}, {syscall} '{path}'"


def _error_text(tool: str, exc: Exception) -> str:
    """A non-empty text for an exception a tool did not expect."""
    if isinstance(exc, MemoryError):
        return f"The {tool} tool ran out of memory."
    text = str(exc)
    return (
        f"{type(exc).__name__}: {text}"
        if text
        else f"The {tool} tool failed ({type(exc).__name__})."
    )


_Execute = Callable[[str, Any, "AbortSignal", ToolUpdateCallback], Awaitable[ToolResult]]


def _guarded(name: str, execute: _Execute) -> _Execute:
    """``execute`` whose unexpected exceptions become a :class:`CodingToolError` with text."""

    async def run(
        tool_call_id: str, params: Any, signal: AbortSignal, on_update: ToolUpdateCallback
    ) -> ToolResult:
        try:
            return await execute(tool_call_id, params, signal, on_update)
        except CodingToolError as exc:
            if not str(exc):  # pragma: no cover  # every CodingToolError here has a text
                msg = f"The {name} tool failed."
                raise CodingToolError(msg) from exc
            raise
        except Exception as exc:
            raise CodingToolError(_error_text(name, exc)) from exc

    return run


# --------------------------------------------------------------------------------------
# worker threads that end when cancelled


async def _in_thread(signal: AbortSignal, fn: Callable[[threading.Event], T]) -> T:
    """Run ``fn(stop)`` in a worker thread; an abort or a cancellation sets ``stop``.

    The worker checks ``stop`` between bounded steps and raises :class:`Stopped`, so it
    ends by itself soon after the caller stops waiting for it (``abandon_on_cancel``).
    """
    stop = threading.Event()
    remove = signal.add_callback(stop.set)
    try:
        return await trio.to_thread.run_sync(fn, stop, abandon_on_cancel=True)
    except Stopped:
        msg = "Operation aborted"
        raise CodingToolError(msg) from None
    finally:
        stop.set()
        remove()


def _check(stop: threading.Event) -> None:
    if stop.is_set():
        raise Stopped


# --------------------------------------------------------------------------------------
# the workspace


@final
class Workspace:
    """A working directory and the tools confined to it."""

    __slots__ = ("_locks", "_real", "bash_timeout", "cwd", "model", "root")

    def __init__(
        self,
        cwd: str | os.PathLike[str],
        *,
        bash_timeout: float | None = None,
        model: Callable[[], Model | None] | None = None,
    ) -> None:
        given = os.path.abspath(os.fspath(cwd))
        root = os.path.realpath(given)
        if not os.path.isdir(root):
            msg = f"working directory {os.fspath(cwd)!r} is not a directory"
            raise NotADirectoryError(msg)
        self.cwd = given
        """The working directory as given, made absolute; Pi's texts name paths under it."""
        self.root = Path(root)
        """Its real path; every path a tool touches must resolve inside it."""
        self._real = root
        self.bash_timeout = bash_timeout
        self.model = model
        """Returns the model the calls are made for (see :func:`coding_tools`)."""
        # Writes to one file are serialized (Pi's withFileMutationQueue).
        self._locks: dict[str, trio.Lock] = {}

    def tools(self, names: Iterable[str] | None = None) -> list[Tool]:
        """The tools named (all of :data:`TOOL_NAMES` by default), in that order."""
        chosen = TOOL_NAMES if names is None else tuple(names)
        unknown = [n for n in chosen if n not in TOOL_NAMES]
        if unknown:
            msg = f"unknown coding tool {unknown[0]!r}; the coding tools are " + ", ".join(
                repr(n) for n in TOOL_NAMES
            )
            raise CodingToolError(msg)
        return [self._tool(n) for n in chosen]

    def _tool(self, name: str) -> Tool:
        execute, schema = {
            "read": (self._read, _READ_SCHEMA),
            "bash": (self._bash, _BASH_SCHEMA),
            "edit": (self._edit, _EDIT_SCHEMA),
            "write": (self._write, _WRITE_SCHEMA),
            "grep": (self._grep, _GREP_SCHEMA),
            "find": (self._find, _FIND_SCHEMA),
            "ls": (self._ls, _LS_SCHEMA),
        }[name]
        return Tool(
            name=name,
            label=name,
            description=DESCRIPTIONS[name],
            parameters=schema,
            execute=_guarded(name, execute),
            prepare_arguments=_prepare_edit_arguments if name == "edit" else None,
        )

    # -- paths ---------------------------------------------------------------------------

    def absolute(self, path: str) -> str:
        """Pi's ``resolveToCwd``: the absolute path (not resolved through links)."""
        text = _UNICODE_SPACES.sub(" ", path)
        if text.startswith("@"):
            text = text[1:]
        if text == "~":
            text = os.path.expanduser("~")
        elif text.startswith("~/"):
            text = os.path.join(os.path.expanduser("~"), text[2:])
        elif text.startswith("file://"):
            from urllib.parse import unquote, urlparse

            text = unquote(urlparse(text).path)
        return os.path.normpath(os.path.join(self.cwd, text))

    def resolve(self, path: str) -> str:
        """The real path of ``path``, which must lie inside the working directory.

        Raises:
            CodingToolError: the path leads outside the working directory.
        """
        return self._confine(path, self.absolute(path))

    def _confine(self, path: str, absolute: str) -> str:
        real = os.path.realpath(absolute)
        if real != self._real and not real.startswith(self._real.rstrip(os.sep) + os.sep):
            msg = (
                f"Path {path!r} is outside the working directory {self.cwd!r}; use a path inside it"
            )
            raise CodingToolError(msg)
        return real

    def _read_path(self, path: str) -> str:
        """Pi's ``resolveReadPath``: macOS screenshot name variants when the path is absent."""
        absolute = self.absolute(path)
        if os.path.lexists(absolute):
            return absolute
        nfd = unicodedata.normalize("NFD", absolute)
        for variant in (
            re.sub(r" (AM|PM)\.", "\u202f\\1.", absolute, flags=re.IGNORECASE),
            nfd,
            absolute.replace("'", "\u2019"),
            nfd.replace("'", "\u2019"),
        ):
            if variant != absolute and os.path.lexists(variant):
                return variant
        return absolute

    def _lock(self, path: str) -> trio.Lock:
        lock = self._locks.get(path)
        if lock is None:
            lock = self._locks[path] = trio.Lock()
        return lock

    # -- read ----------------------------------------------------------------------------

    async def _read(
        self, tool_call_id: str, params: Any, signal: AbortSignal, on_update: ToolUpdateCallback
    ) -> ToolResult:
        path = str(params["path"])
        offset = _whole(params, "offset")
        limit = _whole(params, "limit")
        if limit is not None and limit < 0:
            msg = f"limit must not be negative; got {limit}"
            raise CodingToolError(msg)
        absolute = self._read_path(path)
        full = self._confine(path, absolute)
        if signal.aborted:
            msg_0 = "Operation aborted"
            raise CodingToolError(msg_0)
        current = self.model() if self.model is not None else None
        blind = current is not None and "image" not in current.input
        note = _NON_VISION_IMAGE_NOTE if blind else ""
        read = partial(_read_file, full, absolute, path, offset, limit, image_note=note)
        return await _in_thread(signal, read)

    # -- write / edit ----------------------------------------------------------------------

    async def _write(
        self, tool_call_id: str, params: Any, signal: AbortSignal, on_update: ToolUpdateCallback
    ) -> ToolResult:
        path = str(params["path"])
        content = str(params["content"])
        absolute = self.absolute(path)
        full = self._confine(path, absolute)
        async with self._lock(full):
            if signal.aborted:
                msg = "Operation aborted"
                raise CodingToolError(msg)
            await trio.to_thread.run_sync(_write_file, full, absolute, content)
        return ToolResult(content=(TextContent(text=f"Successfully wrote to {path}"),))

    async def _edit(
        self, tool_call_id: str, params: Any, signal: AbortSignal, on_update: ToolUpdateCallback
    ) -> ToolResult:
        path = str(params.get("path"))
        edits = params.get("edits")
        if not isinstance(edits, list) or not edits:
            msg = "Edit tool input is invalid. edits must contain at least one replacement."
            raise CodingToolError(msg)
        pairs = [(str(e["oldText"]), str(e["newText"])) for e in edits]
        absolute = self.absolute(path)
        full = self._confine(path, absolute)
        async with self._lock(full):
            if signal.aborted:
                msg_0 = "Operation aborted"
                raise CodingToolError(msg_0)
            base, new = await trio.to_thread.run_sync(_edit_file, full, path, pairs)
        diff, first_changed = diff_string(base, new)
        details: dict[str, Any] = {"diff": diff, "patch": unified_patch(path, base, new)}
        if first_changed is not None:
            details["firstChangedLine"] = first_changed
        return ToolResult(
            content=(TextContent(text=f"Successfully replaced {len(pairs)} block(s) in {path}."),),
            details=details,
        )

    # -- grep / find / ls ----------------------------------------------------------------

    async def _grep(
        self, tool_call_id: str, params: Any, signal: AbortSignal, on_update: ToolUpdateCallback
    ) -> ToolResult:
        pattern = str(params["pattern"])
        path = str(params.get("path") or ".")
        literal = bool(params.get("literal"))
        flags = re.IGNORECASE if params.get("ignoreCase") else 0
        try:
            regex = re.compile(re.escape(pattern) if literal else pattern, flags)
        except re.error as exc:
            msg = (
                f"regex parse error: {pattern}: {exc}. Escape special characters, or pass "
                "literal=true to search for the text as it is."
            )
            raise CodingToolError(msg) from None
        context = _whole(params, "context") or 0
        limit = max(1, _whole(params, "limit") or DEFAULT_GREP_LIMIT)
        absolute = self.absolute(path)
        full = self._confine(path, absolute)
        glob = params.get("glob") or None
        search = partial(
            _grep,
            self._real,
            full,
            absolute,
            regex,
            str(glob) if glob is not None else None,
            max(context, 0),
            limit,
        )
        if signal.aborted:
            msg_0 = "Operation aborted"
            raise CodingToolError(msg_0)
        return await _in_thread(signal, search)

    async def _find(
        self, tool_call_id: str, params: Any, signal: AbortSignal, on_update: ToolUpdateCallback
    ) -> ToolResult:
        pattern = str(params["pattern"])
        path = str(params.get("path") or ".")
        limit = _whole(params, "limit")
        absolute = self.absolute(path)
        full = self._confine(path, absolute)
        if signal.aborted:
            msg = "Operation aborted"
            raise CodingToolError(msg)
        search = partial(
            _find, full, absolute, pattern, DEFAULT_FIND_LIMIT if limit is None else limit
        )
        return await _in_thread(signal, search)

    async def _ls(
        self, tool_call_id: str, params: Any, signal: AbortSignal, on_update: ToolUpdateCallback
    ) -> ToolResult:
        path = str(params.get("path") or ".")
        limit = _whole(params, "limit")
        absolute = self.absolute(path)
        full = self._confine(path, absolute)
        if signal.aborted:
            msg = "Operation aborted"
            raise CodingToolError(msg)
        listing = partial(_ls, full, absolute, DEFAULT_LS_LIMIT if limit is None else limit)
        return await _in_thread(signal, listing)

    # -- bash ----------------------------------------------------------------------------

    async def _bash(
        self, tool_call_id: str, params: Any, signal: AbortSignal, on_update: ToolUpdateCallback
    ) -> ToolResult:
        command = str(params["command"])
        timeout = _timeout(params.get("timeout"))
        if timeout is None:
            timeout = self.bash_timeout
        return await _run_bash(command, self.cwd, timeout, signal, on_update)


def _prepare_edit_arguments(arguments: Any) -> Any:
    """Pi's ``prepareEditArguments``: ``edits`` sent as a JSON string or as one object, and
    the older top-level ``oldText``/``newText``, become the ``edits`` array."""
    if not isinstance(arguments, dict):
        return arguments
    args = dict(arguments)
    edits = args.get("edits")
    if isinstance(edits, str):
        with contextlib.suppress(ValueError):
            parsed = json.loads(edits)
            if isinstance(parsed, list):
                args["edits"] = parsed
            elif _is_single_edit(parsed):
                args["edits"] = [parsed]
    elif _is_single_edit(edits):
        args["edits"] = [edits]
    if not isinstance(args.get("oldText"), str) or not isinstance(args.get("newText"), str):
        return args
    merged = list(args["edits"]) if isinstance(args.get("edits"), list) else []
    merged.append({"oldText": args.pop("oldText"), "newText": args.pop("newText")})
    args["edits"] = merged
    return args


def _is_single_edit(value: object) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("oldText"), str)
        and isinstance(value.get("newText"), str)
    )


# --------------------------------------------------------------------------------------
# parameters


def _whole(params: Any, name: str) -> int | None:
    value = params.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        msg = f"{name} must be a whole number; got {value!r}"
        raise CodingToolError(msg)
    return int(value)


def _timeout(value: object) -> float | None:
    """Pi's ``resolveTimeoutMs``, in seconds."""
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or value != value
        or value in (float("inf"), float("-inf"))
        or value <= 0
    ):
        msg = "Invalid timeout: must be a finite number of seconds"
        raise CodingToolError(msg)
    if value > _MAX_TIMEOUT_SECONDS:
        msg = f"Invalid timeout: maximum is {_MAX_TIMEOUT_SECONDS} seconds"
        raise CodingToolError(msg)
    return float(value)


def _js_number(value: float) -> str:
    """How JavaScript prints a number in a template string (``2``, ``0.5``)."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


# --------------------------------------------------------------------------------------
# read (worker thread)

_KINDS: Final[Mapping[int, str]] = {
    stat.S_IFIFO: "a named pipe (FIFO)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def _kind(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def _not_regular(path: str, mode: int) -> CodingToolError:
    return CodingToolError(
        f"Cannot read {path}: it is {_kind(mode)}, not a regular file. read reads regular "
        "files only; use bash for devices and pipes."
    )


def _open_regular(full: str, absolute: str, path: str) -> int:
    """A read-only descriptor of the regular file ``full``; never blocks on a pipe."""
    try:
        info = os.stat(full)
        if not os.access(full, os.R_OK):
            raise PermissionError(errno.EACCES, "permission denied")
    except OSError as exc:
        raise CodingToolError(_node_message(exc, "access", absolute)) from None
    if stat.S_ISDIR(info.st_mode):
        msg = "EISDIR: illegal operation on a directory, read"
        raise CodingToolError(msg)
    if not stat.S_ISREG(info.st_mode):
        raise _not_regular(path, info.st_mode)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(full, flags)
    except OSError as exc:
        raise CodingToolError(_node_message(exc, "open", absolute)) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):  # swapped for something else since the stat
        os.close(fd)
        raise _not_regular(path, mode)
    return fd


def _read_file(
    full: str,
    absolute: str,
    path: str,
    offset: int | None,
    limit: int | None,
    stop: threading.Event,
    *,
    image_note: str = "",
) -> ToolResult:
    fd = _open_regular(full, absolute, path)
    with os.fdopen(fd, "rb", buffering=0) as f:
        head = f.read(4100)
        mime = _image_type(head)
        if mime is not None:
            return _read_image(f, head, mime, image_note, stop)
        f.seek(0)
        start = max(0, offset - 1) if offset else 0
        scan, file_lines = _scan_lines(f, start, limit, stop)
    if scan is None:
        msg = f"Offset {offset} is beyond end of file ({file_lines} lines total)"
        raise CodingToolError(msg)
    selected = 0 if limit == 0 else scan.lines
    truncation = scan.truncation()
    first = start + 1
    details: dict[str, Any] | None = None
    if truncation["firstLineExceedsLimit"]:
        size = format_size(scan.first_line_bytes or 0)
        text = (
            f"[Line {first} is {size}, exceeds {format_size(DEFAULT_MAX_BYTES)} limit. "
            f"Use bash: sed -n '{first}p' {path} | head -c {DEFAULT_MAX_BYTES}]"
        )
        details = {"truncation": truncation}
    elif truncation["truncated"]:
        end = first + truncation["outputLines"] - 1
        text = truncation["content"]
        if truncation["truncatedBy"] == "lines":
            text += (
                f"\n\n[Showing lines {first}-{end} of {file_lines}. "
                f"Use offset={end + 1} to continue.]"
            )
        else:
            text += (
                f"\n\n[Showing lines {first}-{end} of {file_lines} "
                f"({format_size(DEFAULT_MAX_BYTES)} limit). Use offset={end + 1} to continue.]"
            )
        details = {"truncation": truncation}
    elif limit is not None and start + selected < file_lines:
        remaining = file_lines - (start + selected)
        text = (
            f"{truncation['content']}\n\n[{remaining} more lines in file. "
            f"Use offset={start + selected + 1} to continue.]"
        )
    else:
        text = truncation["content"]
    return ToolResult(content=(TextContent(text=text),), details=details)


def _image_type(head: bytes) -> str | None:
    """Pi's ``detectSupportedImageMimeType`` (the file's first bytes, not its name)."""
    if head.startswith(b"\xff\xd8\xff"):
        return None if head[3:4] == b"\xf7" else "image/jpeg"
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        if not (len(head) >= 16 and head[8:12] == b"\x00\x00\x00\x0d" and head[12:16] == b"IHDR"):
            return None
        return None if _animated_png(head) else "image/png"
    if head.startswith(b"GIF"):
        return "image/gif"
    if head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return "image/webp"
    if head.startswith(b"BM") and _bmp(head):
        return "image/bmp"
    return None


def _animated_png(head: bytes) -> bool:
    offset = 8
    while offset + 8 <= len(head):
        length = int.from_bytes(head[offset : offset + 4], "big")
        kind = head[offset + 4 : offset + 8]
        if kind == b"acTL":
            return True
        if kind == b"IDAT":
            return False
        following = offset + 8 + length + 4
        if following <= offset or following > len(head):
            return False
        offset = following
    return False


def _bmp(head: bytes) -> bool:
    if len(head) < 26:
        return False

    def u32(at: int) -> int:
        return int.from_bytes(head[at : at + 4], "little")

    def u16(at: int) -> int:
        return int.from_bytes(head[at : at + 2], "little")

    size, pixels, dib = u32(2), u32(10), u32(14)
    if (size != 0 and size < 26) or pixels < 14 + dib or (size != 0 and pixels >= size):
        return False
    if dib == 12:
        planes, bits = u16(22), u16(24)
    elif 40 <= dib <= 124:
        if len(head) < 30:
            return False
        planes, bits = u16(26), u16(28)
    else:
        return False
    return planes == 1 and bits in (1, 4, 8, 16, 24, 32)


def _read_image(
    f: IO[bytes], head: bytes, mime: str, image_note: str, stop: threading.Event
) -> ToolResult:
    """An image as Pi's read gives it; ``image_note`` (if any) goes under its text."""
    note = f"Read image file [{mime}]"
    tail = f"\n{image_note}" if image_note else ""
    if mime == "image/bmp":  # Pi converts it to PNG with its image library; pitrio has none
        return ToolResult(
            content=(
                TextContent(
                    text=f"{note}\n[Image omitted: could not be converted to a supported "
                    f"inline image format.]{tail}"
                ),
            )
        )
    data = bytearray(head)
    limit = _IMAGE_MAX_BASE64 * 3 // 4
    while len(data) <= limit:
        _check(stop)
        chunk = f.read(_CHUNK)
        if not chunk:
            break
        data += chunk
    if len(data) > limit:  # Pi would scale it down; pitrio sends no image it cannot send
        return ToolResult(
            content=(
                TextContent(
                    text=f"{note}\n[Image omitted: could not be resized below the inline "
                    f"image size limit.]{tail}"
                ),
            )
        )
    encoded = base64.b64encode(bytes(data)).decode("ascii")
    image = ImageContent(data=encoded, mime_type=mime)
    return ToolResult(content=(TextContent(text=note + tail), image))


@final
class _LineScan:
    """What read needs of the selected lines, gathered with bounded memory.

    Pi reads the whole file and splits it on ``\\n``; this is fed the decoded text of
    the selected range (``offset``/``limit``) in pieces and keeps only the lines that
    Pi's limits can show, counting the rest: the range's lines and UTF-8 bytes, and the
    size of its first line.
    """

    __slots__ = (
        "_current",
        "_current_bytes",
        "_cut_by_bytes",
        "_first_open",
        "_keeping",
        "_kept_bytes",
        "ends_with_newline",
        "first_line_bytes",
        "kept",
        "newlines",
        "total_bytes",
    )

    def __init__(self) -> None:
        self.kept: list[str] = []
        self.newlines = 0
        self.total_bytes = 0
        self.ends_with_newline = False
        self.first_line_bytes: int | None = None
        self._first_open = 0
        self._keeping = True
        self._cut_by_bytes = False
        self._kept_bytes = 0
        self._current: list[str] = []
        self._current_bytes = 0

    def feed_bytes(self, data: bytes, decoder: codecs.IncrementalDecoder) -> None:
        """Feed raw bytes; once no line is kept any more, ASCII is counted undecoded."""
        if not self._keeping and data.isascii() and decoder.getstate()[0] == b"":
            size = len(data)
            if not size:
                return
            self.total_bytes += size
            self.newlines += data.count(b"\n")
            self.ends_with_newline = data.endswith(b"\n")
            if self.first_line_bytes is None:
                newline = data.find(b"\n")
                self._first_open += size if newline == -1 else newline
                if newline != -1:
                    self.first_line_bytes = self._first_open
            return
        self.feed(_decode(decoder, data))

    def feed(self, text: str) -> None:
        if not text:
            return
        self.total_bytes += utf8_length(text)
        self.newlines += text.count("\n")
        self.ends_with_newline = text.endswith("\n")
        if self.first_line_bytes is None:
            newline = text.find("\n")
            self._first_open += utf8_length(text if newline == -1 else text[:newline])
            if newline != -1:
                self.first_line_bytes = self._first_open
        pos = 0
        while self._keeping:
            newline = text.find("\n", pos)
            piece = text[pos:] if newline == -1 else text[pos:newline]
            self._current.append(piece)
            self._current_bytes += utf8_length(piece)
            separator = 1 if self.kept else 0
            if self._kept_bytes + separator + self._current_bytes > DEFAULT_MAX_BYTES:
                self._keeping = False  # this line and every later one cannot be shown
                self._cut_by_bytes = True
                self._current = []
                break
            if newline == -1:
                break
            self._close_line()
            pos = newline + 1

    def _close_line(self) -> None:
        self._kept_bytes += self._current_bytes + (1 if self.kept else 0)
        self.kept.append("".join(self._current))
        self._current = []
        self._current_bytes = 0
        if len(self.kept) > DEFAULT_MAX_LINES:
            self._keeping = False  # enough to show, and to see there are more

    def finish(self) -> None:
        if self._keeping:
            self._close_line()
        if self.first_line_bytes is None:
            self.first_line_bytes = self._first_open

    @property
    def lines(self) -> int:
        """Lines of the range as ``split("\\n")`` counts them."""
        return self.newlines + 1

    def truncation(self) -> Truncation:
        """Pi's ``truncateHead`` of the selected range."""
        counting = 0 if self.total_bytes == 0 else self.lines - (1 if self.ends_with_newline else 0)
        limits = {"max_lines": DEFAULT_MAX_LINES, "max_bytes": DEFAULT_MAX_BYTES}
        if counting <= DEFAULT_MAX_LINES and self.total_bytes <= DEFAULT_MAX_BYTES:
            return truncate_head("\n".join(self.kept), **limits)
        return head_of_lines(
            self.kept,
            counting,
            self.total_bytes,
            **limits,
            first_line_bytes=self.first_line_bytes,
            next_line_too_big=self._cut_by_bytes and len(self.kept) < counting,
        )


def _decode(decoder: codecs.IncrementalDecoder, data: bytes, final: bool = False) -> str:
    if not final and data.isascii() and decoder.getstate()[0] == b"":
        return data.decode("ascii")
    return decoder.decode(data, final)


def _scan_lines(
    f: IO[bytes], start: int, limit: int | None, stop: threading.Event
) -> tuple[_LineScan | None, int]:
    """Stream the file once: pass ``start`` lines, feed the next ``limit`` (or all) lines
    to a :class:`_LineScan`, count the rest. Returns the scan (``None`` when the file has
    no line ``start``) and the file's line count."""
    scan = _LineScan()
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    file_newlines = 0
    to_skip = max(start, 0)
    inside = None if limit is None else limit - 1  # newlines the range still holds
    state = "skip" if to_skip else ("select" if limit != 0 else "rest")
    while True:
        _check(stop)
        chunk = f.read(_CHUNK)
        if not chunk:
            break
        count = chunk.count(b"\n")
        file_newlines += count
        part = chunk
        if state == "skip":
            if count < to_skip:
                to_skip -= count
                continue
            part = chunk[_nth_newline(chunk, to_skip) + 1 :]
            to_skip = 0
            state = "select" if limit != 0 else "rest"
        if state == "select":
            if inside is not None:
                newlines = part.count(b"\n")
                if newlines > inside:
                    scan.feed(_decode(decoder, part[: _nth_newline(part, inside + 1)], True))
                    state = "rest"
                    continue
                inside -= newlines
            scan.feed_bytes(part, decoder)
    if state == "skip":
        return None, file_newlines + 1
    if state == "select":
        scan.feed(decoder.decode(b"", True))
    scan.finish()
    return scan, file_newlines + 1


def _nth_newline(data: bytes, n: int) -> int:
    """Index of the ``n``-th (1-based) newline in ``data``; ``n`` must not exceed the count."""
    at = -1
    for _ in range(n):
        at = data.index(b"\n", at + 1)
    return at


# --------------------------------------------------------------------------------------
# write / edit (worker threads)


def _write_file(full: str, absolute: str, content: str) -> None:
    directory = os.path.dirname(full)
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise CodingToolError(_node_message(exc, "mkdir", os.path.dirname(absolute))) from None
    try:
        with open(full, "w", encoding="utf-8", errors="surrogatepass", newline="") as f:
            f.write(content)
    except OSError as exc:
        raise CodingToolError(_node_message(exc, "open", absolute)) from None


def _edit_file(full: str, path: str, edits: Sequence[tuple[str, str]]) -> tuple[str, str]:
    try:
        info = os.stat(full)
        if not os.access(full, os.R_OK | os.W_OK):
            raise PermissionError(errno.EACCES, "permission denied")
    except OSError as exc:
        msg = f"Could not edit file: {path}. Error code: {_node_code(exc)}."
        raise CodingToolError(msg) from None
    if stat.S_ISDIR(info.st_mode):
        msg_0 = "EISDIR: illegal operation on a directory, read"
        raise CodingToolError(msg_0)
    if not stat.S_ISREG(info.st_mode):
        raise _not_regular(path, info.st_mode)
    if info.st_size > 64 * 1024 * 1024:
        msg = (
            f"Cannot edit {path}: it is {format_size(info.st_size)}; the edit tool edits files "
            "up to 64MB. Use bash for larger files."
        )
        raise CodingToolError(msg)
    with open(full, "rb") as f:
        raw = f.read().decode("utf-8", "replace")
    bom = "\ufeff" if raw.startswith("\ufeff") else ""
    content = raw[len(bom) :]
    ending = detect_line_ending(content)
    base = normalize_to_lf(content)
    new = apply_edits(base, edits, path)
    with open(full, "w", encoding="utf-8", errors="surrogatepass", newline="") as f:
        f.write(bom + restore_line_endings(new, ending))
    return base, new


# --------------------------------------------------------------------------------------
# grep / find / ls (worker threads)


def _finish(lines: list[str], notices: list[str], details: dict[str, Any]) -> ToolResult:
    """The joined lines cut at 50KB, with Pi's notices in brackets."""
    truncation = truncate_head("\n".join(lines), max_lines=MAX_SAFE_INTEGER)
    output = truncation["content"]
    if truncation["truncated"]:
        at = len(notices) - (1 if "linesTruncated" in details else 0)
        notices.insert(at, f"{format_size(DEFAULT_MAX_BYTES)} limit reached")
        details = {**details, "truncation": truncation}
    if notices:
        output += f"\n\n[{'. '.join(notices)}]"
    return ToolResult(content=(TextContent(text=output),), details=_ordered(details) or None)


_DETAIL_ORDER = (
    "matchLimitReached",
    "resultLimitReached",
    "entryLimitReached",
    "truncation",
    "linesTruncated",
)


def _ordered(details: dict[str, Any]) -> dict[str, Any]:
    return {k: details[k] for k in _DETAIL_ORDER if k in details}


def _grep(
    root: str,
    full: str,
    absolute: str,
    regex: re.Pattern[str],
    glob: str | None,
    context: int,
    limit: int,
    stop: threading.Event,
) -> ToolResult:
    try:
        info = os.stat(full)
    except OSError:
        msg = f"Path not found: {absolute}"
        raise CodingToolError(msg) from None
    is_dir = stat.S_ISDIR(info.st_mode)
    files: Iterator[tuple[str, str]]
    if is_dir:
        files = (
            (e.path, e.relative)
            for e in walk(full, tool_ignore=".rgignore", git_needed=True, stop=stop)
            if e.is_file and _glob_keeps(glob, e.relative)
        )
    elif stat.S_ISREG(info.st_mode):
        files = iter([(full, os.path.basename(absolute))])
    else:
        files = iter([])  # ripgrep skips what is not a regular file
    matches: list[tuple[str, int, str, str]] = []  # (file, line number, line, shown path)
    limit_reached = False
    for file, shown in files:
        real = os.path.realpath(file)
        if real != root and not real.startswith(root.rstrip(os.sep) + os.sep):
            continue
        for number, line in _matching_lines(real, regex, stop):
            matches.append((real, number, line, shown))
            if len(matches) >= limit:
                limit_reached = True
                break
        if limit_reached:
            break
    if not matches:
        return ToolResult(content=(TextContent(text="No matches found"),))
    output: list[str] = []
    lines_truncated = False
    cache: dict[str, list[str]] = {}
    for file, number, line, shown in matches:
        if context == 0:
            text, cut = truncate_line(line.replace("\r", ""))
            lines_truncated = lines_truncated or cut
            output.append(f"{shown}:{number}: {text}")
            continue
        lines = cache.get(file)
        if lines is None:
            lines = cache[file] = _file_lines(file, stop)
        if not lines:
            output.append(f"{shown}:{number}: (unable to read file)")
            continue
        for current in range(max(1, number - context), min(len(lines), number + context) + 1):
            text, cut = truncate_line(lines[current - 1].replace("\r", ""))
            lines_truncated = lines_truncated or cut
            sep = ":" if current == number else "-"
            output.append(f"{shown}{sep}{current}{sep} {text}")
    notices: list[str] = []
    details: dict[str, Any] = {}
    if limit_reached:
        notices.append(
            f"{limit} matches limit reached. Use limit={limit * 2} for more, or refine pattern"
        )
        details["matchLimitReached"] = limit
    if lines_truncated:
        notices.append(
            f"Some lines truncated to {GREP_MAX_LINE_LENGTH} chars. Use read tool to see full lines"
        )
        details["linesTruncated"] = True
    return _finish(output, notices, details)


def _glob_keeps(glob: str | None, relative: str) -> bool:
    """ripgrep's ``--glob``: a pattern without ``/`` matches the name at any depth; ``!``
    excludes."""
    if glob is None:
        return True
    negate = glob.startswith("!")
    pattern = glob[1:] if negate else glob
    if "/" in pattern:
        pattern = pattern.removeprefix("/")
        target = relative
    else:
        target = relative.rsplit("/", 1)[-1]
    matched = glob_regex(pattern).match(target) is not None
    return not matched if negate else matched


def _matching_lines(
    path: str, regex: re.Pattern[str], stop: threading.Event
) -> Iterable[tuple[int, str]]:
    """(line number, line) of each matching line, reading in chunks; a file with a NUL
    byte is binary and searched no further (ripgrep's default), a leading byte order mark
    is dropped (ripgrep's too)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return
    with os.fdopen(fd, "rb", buffering=0) as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return
        # A UTF-8 byte order mark at the start is not text: ripgrep drops it.
        decoder = codecs.getincrementaldecoder("utf-8-sig")("replace")
        pending = ""
        number = 0
        skipping = False  # in the rest of a line already searched (an endless line)
        while True:
            _check(stop)
            chunk = f.read(_CHUNK)
            if b"\0" in chunk:
                return
            text = decoder.decode(chunk, not chunk)
            if skipping:
                newline = text.find("\n")
                if newline == -1:
                    if not chunk:
                        return
                    continue
                text = text[newline + 1 :]
                skipping = False
            text = pending + text
            if not chunk:
                if text:
                    number += 1
                    if regex.search(text):
                        yield number, text
                return
            lines = text.split("\n")
            pending = lines.pop()
            for line in lines:
                number += 1
                if regex.search(line):
                    yield number, line
            if len(pending) > _LONG_LINE:
                # A line this long is searched as far as it has come; the rest is skipped.
                number += 1
                if regex.search(pending):
                    yield number, pending
                pending = ""
                skipping = True


def _file_lines(path: str, stop: threading.Event) -> list[str]:
    """Pi's ``getFileLines`` for context blocks (``\\r`` splits lines too), bounded."""
    try:
        with open(path, "rb") as f:
            data = bytearray()
            while len(data) <= 64 * _CHUNK:
                _check(stop)
                chunk = f.read(_CHUNK)
                if not chunk:
                    break
                data += chunk
    except OSError:
        return []
    text = data.decode("utf-8", "replace")
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _find(full: str, absolute: str, pattern: str, limit: int, stop: threading.Event) -> ToolResult:
    if not os.path.isdir(full):
        msg = (
            f"[fd error]: Search path '{absolute}' is not a directory.\n"
            "[fd error]: No valid search paths given."
        )
        raise CodingToolError(msg)
    if "/" in pattern:
        effective = pattern
        if not pattern.startswith("/") and not pattern.startswith("**/") and pattern != "**":
            effective = f"**/{pattern}"
        regex = glob_regex(effective.removeprefix("/") if effective.startswith("/") else effective)
        full_path = True
    else:
        regex = glob_regex(pattern)
        full_path = False
    found: list[str] = []
    for entry in walk(full, tool_ignore=".fdignore", git_needed=False, stop=stop):
        if limit <= len(found):
            break
        if full_path:
            target = os.path.join(absolute, entry.relative).lstrip("/")
        else:
            target = entry.relative.rsplit("/", 1)[-1]
        if regex.match(target) is None:
            continue
        found.append(f"{entry.relative}/" if entry.is_dir else entry.relative)
    if not found:
        return ToolResult(content=(TextContent(text="No files found matching pattern"),))
    notices: list[str] = []
    details: dict[str, Any] = {}
    if len(found) >= limit:
        notices.append(
            f"{limit} results limit reached. Use limit={limit * 2} for more, or refine pattern"
        )
        details["resultLimitReached"] = limit
    return _finish(found, notices, details)


def _ls(full: str, absolute: str, limit: int, stop: threading.Event) -> ToolResult:
    if not os.path.lexists(full) or not os.path.exists(full):
        msg = f"Path not found: {absolute}"
        raise CodingToolError(msg)
    if not os.path.isdir(full):
        msg = f"Not a directory: {absolute}"
        raise CodingToolError(msg)
    try:
        names = os.listdir(full)
    except OSError as exc:
        msg = f"Cannot read directory: {_node_message(exc, 'scandir', absolute)}"
        raise CodingToolError(msg) from None
    names.sort(key=_collation_key)
    results: list[str] = []
    limit_reached = False
    for name in names:
        _check(stop)
        if len(results) >= limit:
            limit_reached = True
            break
        try:
            is_dir = stat.S_ISDIR(os.stat(os.path.join(full, name)).st_mode)
        except OSError:
            continue  # Pi skips what it cannot stat (a broken link)
        shown = name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        results.append(f"{shown}/" if is_dir else shown)
    if not results:
        return ToolResult(content=(TextContent(text="(empty directory)"),))
    notices: list[str] = []
    details: dict[str, Any] = {}
    if limit_reached:
        notices.append(f"{limit} entries limit reached. Use limit={limit * 2} for more")
        details["entryLimitReached"] = limit
    return _finish(results, notices, details)


_ICU_ASCII = " _-,;:!?.'\"()[]{}@*/\\&#%`^+<=>|~$0123456789abcdefghijklmnopqrstuvwxyz"
"""Lower-case ASCII in the order of ICU's root collation (Node's ``localeCompare``)."""
_ICU_RANK = {c: i for i, c in enumerate(_ICU_ASCII)}


def _collation_key(name: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Pi's ``a.toLowerCase().localeCompare(b.toLowerCase())``: ICU's order for ASCII
    (punctuation, symbols, digits, letters), accents compared after the letters."""
    primary: list[int] = []
    secondary: list[int] = []
    for c in unicodedata.normalize("NFD", name.lower()):
        rank = _ICU_RANK.get(c)
        if rank is not None:
            primary.append(rank)
            secondary.append(0)
        elif unicodedata.combining(c):
            if secondary:
                secondary[-1] = secondary[-1] * 1024 + ord(c)
        else:
            primary.append(len(_ICU_ASCII) + ord(c))
            secondary.append(0)
    return tuple(primary), tuple(secondary)


# --------------------------------------------------------------------------------------
# bash


def _shell() -> str:
    """Pi's ``getShellConfig`` on Unix: /bin/bash, bash on PATH, else sh."""
    if os.path.exists("/bin/bash"):
        return "/bin/bash"
    return shutil.which("bash") or "sh"


class _AsyncFile(Protocol):
    """The part of ``trio.open_file``'s binary writer that bash's temp file uses."""

    async def write(self, data: bytes, /) -> int: ...

    async def aclose(self) -> None: ...


@final
class _Output:
    """Pi's ``OutputAccumulator``: a decoded tail, line and byte counts, and a temp file
    with the full output once it passes the limits."""

    __slots__ = (
        "_decoder",
        "_file",
        "_has_open_line",
        "_pending",
        "_raw",
        "_tail",
        "_tail_at_line_start",
        "completed_lines",
        "current_line_bytes",
        "temp_path",
        "total_bytes",
        "total_lines",
        "total_raw",
    )

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._raw: list[bytes] = []
        self._tail = ""
        self._tail_at_line_start = True
        self._has_open_line = False
        self.total_raw = 0
        self.total_bytes = 0
        self.completed_lines = 0
        self.total_lines = 0
        self.current_line_bytes = 0
        self.temp_path: str | None = None
        self._pending: list[bytes] = []  # for the temp file, written by flush()
        self._file: _AsyncFile | None = None

    @property
    def _rolling(self) -> int:
        return max(DEFAULT_MAX_BYTES * 2, 1)

    def append(self, data: bytes) -> None:
        self.total_raw += len(data)
        self._add_text(self._decoder.decode(data))
        if self.temp_path is not None or self._needs_temp():
            self._ensure_temp()
            self._pending.append(data)
        elif data:
            self._raw.append(data)

    def finish(self) -> None:
        self._add_text(self._decoder.decode(b"", True))
        if self._needs_temp():
            self._ensure_temp()

    def _add_text(self, text: str) -> None:
        if not text:
            return
        size = utf8_length(text)
        self.total_bytes += size
        self._tail += text
        if utf8_length(self._tail) > self._rolling * 2:
            self._trim()
        newlines = text.count("\n")
        if newlines == 0:
            self.current_line_bytes += size
            self._has_open_line = True
        else:
            self.completed_lines += newlines
            rest = text[text.rindex("\n") + 1 :]
            self.current_line_bytes = utf8_length(rest)
            self._has_open_line = bool(rest)
        self.total_lines = self.completed_lines + (1 if self._has_open_line else 0)

    def _trim(self) -> None:
        data = self._tail.encode("utf-8", "surrogatepass")
        if len(data) <= self._rolling:
            return
        start = len(data) - self._rolling
        while start < len(data) and (data[start] & 0xC0) == 0x80:
            start += 1
        if start:
            self._tail_at_line_start = data[start - 1] == 0x0A
        self._tail = data[start:].decode("utf-8", "replace")

    def _snapshot_text(self) -> str:
        if self._tail_at_line_start:
            return self._tail
        newline = self._tail.find("\n")
        return self._tail if newline == -1 else self._tail[newline + 1 :]

    def _needs_temp(self) -> bool:
        return (
            self.total_raw > DEFAULT_MAX_BYTES
            or self.total_bytes > DEFAULT_MAX_BYTES
            or self.total_lines > DEFAULT_MAX_LINES
        )

    def _ensure_temp(self) -> None:
        if self.temp_path is not None:
            return
        self.temp_path = os.path.join(tempfile.gettempdir(), f"pi-bash-{secrets.token_hex(8)}.log")
        self._pending = self._raw
        self._raw = []

    def snapshot(self) -> Truncation:
        tail = truncate_tail(self._snapshot_text())
        truncated = self.total_lines > DEFAULT_MAX_LINES or self.total_bytes > DEFAULT_MAX_BYTES
        truncated_by = (
            (tail["truncatedBy"] or ("bytes" if self.total_bytes > DEFAULT_MAX_BYTES else "lines"))
            if truncated
            else None
        )
        truncation = {
            **tail,
            "truncated": truncated,
            "truncatedBy": truncated_by,
            "totalLines": self.total_lines,
            "totalBytes": self.total_bytes,
        }
        if truncated:
            self._ensure_temp()
        return truncation

    async def flush(self) -> None:
        """Write what the temp file still lacks (in a worker thread). Checkpoints."""
        if self.temp_path is None or not self._pending:
            await trio.lowlevel.checkpoint()
            return
        if self._file is None:
            self._file = await trio.open_file(self.temp_path, "wb")
        chunks, self._pending = self._pending, []
        await self._file.write(b"".join(chunks))

    async def aclose(self) -> None:
        """Close the temp file, even when cancelled."""
        if self._file is not None:
            with trio.CancelScope(shield=True):
                await self._file.aclose()
            self._file = None

    def format(self, truncation: Truncation, empty: str) -> tuple[str, dict[str, Any] | None]:
        """Pi's ``formatOutput``: the text and the details of a finished command."""
        text = truncation["content"] or empty
        if not truncation["truncated"]:
            return text, None
        details = {"truncation": truncation, "fullOutputPath": self.temp_path}
        start = truncation["totalLines"] - truncation["outputLines"] + 1
        end = truncation["totalLines"]
        if truncation["lastLinePartial"]:
            text += (
                f"\n\n[Showing last {format_size(truncation['outputBytes'])} of line {end} "
                f"(line is {format_size(self.current_line_bytes)}). Full output: {self.temp_path}]"
            )
        elif truncation["truncatedBy"] == "lines":
            text += f"\n\n[Showing lines {start}-{end} of {end}. Full output: {self.temp_path}]"
        else:
            text += (
                f"\n\n[Showing lines {start}-{end} of {end} ({format_size(DEFAULT_MAX_BYTES)} "
                f"limit). Full output: {self.temp_path}]"
            )
        return text, details


def _with_status(text: str, status: str) -> str:
    return f"{text}\n\n{status}" if text else status


async def _run_bash(
    command: str,
    cwd: str,
    seconds: float | None,
    signal: AbortSignal,
    on_update: ToolUpdateCallback,
) -> ToolResult:
    if signal.aborted:
        msg = "Command aborted"
        raise CodingToolError(msg)
    if not await trio.Path(cwd).is_dir():
        msg = f"Working directory does not exist: {cwd}\nCannot execute bash commands."
        raise CodingToolError(msg)
    output = _Output()
    on_update(ToolResult(content=()))
    last_update = -BASH_UPDATE_INTERVAL
    dirty = False

    def update() -> None:
        nonlocal last_update, dirty
        dirty = False
        last_update = trio.current_time()
        snap = output.snapshot()
        on_update(
            ToolResult(
                content=(TextContent(text=snap["content"] or ""),),
                details={
                    **({"truncation": snap} if snap["truncated"] else {}),
                    **({"fullOutputPath": output.temp_path} if output.temp_path else {}),
                },
            )
        )

    wake = trio.Event()  # output arrived that the last update did not show

    async def trailing_updates() -> None:
        """Pi's throttle timer: output held back by the interval is shown when it ends."""
        nonlocal wake
        while True:
            await wake.wait()
            wake = trio.Event()
            await trio.sleep_until(last_update + BASH_UPDATE_INTERVAL)
            if dirty:
                update()

    async def read_output(stream: trio.abc.ReceiveStream) -> None:
        nonlocal dirty
        async with stream, trio.open_nursery() as updates:
            updates.start_soon(trailing_updates)
            async for chunk in stream:
                output.append(bytes(chunk))
                await output.flush()
                dirty = True
                if trio.current_time() - last_update >= BASH_UPDATE_INTERVAL:
                    update()
                else:
                    wake.set()
            updates.cancel_scope.cancel()

    argv = [_shell(), "-c", command]
    timer: trio.CancelScope | nullcontext[None] = (
        trio.move_on_after(seconds) if seconds is not None else nullcontext()
    )
    process: trio.Process | None = None
    try:
        with timer:
            async with trio.open_nursery() as nursery:
                reader_done = trio.Event()
                process = await nursery.start(_run_command, argv, cwd, reader_done)
                assert process.stdout is not None
                try:
                    await read_output(process.stdout)
                finally:
                    reader_done.set()
        output.finish()
        if dirty:
            update()
        truncation = output.snapshot()
        await output.flush()
    finally:
        await output.aclose()
    if isinstance(timer, trio.CancelScope) and timer.cancelled_caught:
        text, _ = output.format(truncation, "")
        raise CodingToolError(
            _with_status(text, f"Command timed out after {_js_number(seconds or 0)} seconds")
        )
    text, details = output.format(truncation, "(no output)")
    assert process is not None
    code = process.returncode
    if code is not None and code > 0:
        raise CodingToolError(_with_status(text, f"Command exited with code {code}"))
    if code is not None and code < 0:
        raise CodingToolError(_with_status(text, f"Command was killed by signal {-code}"))
    return ToolResult(content=(TextContent(text=text),), details=details)


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
    cwd: str,
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
        with trio.move_on_after(0.1):  # Pi's EXIT_STDIO_GRACE_MS for output still coming
            await reader_done.wait()
        if not reader_done.is_set():
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
