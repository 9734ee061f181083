"""Walking a directory as ripgrep and fd do for Pi's grep and find tools.

Pi's grep runs ``rg --hidden`` and its find runs ``fd --glob --hidden``; both skip what
ignore files exclude (``.gitignore`` and ``.git/info/exclude`` inside a git repository,
``.ignore`` everywhere, and ``.rgignore`` or ``.fdignore``), descend into hidden
directories (``.git`` included, as ``--hidden`` does) and never follow a symbolic link.
:func:`walk` does the same in Python, in sorted order (ripgrep and fd search in
parallel, so their order is not fixed), checking ``stop`` between entries so a
cancelled search ends by itself. Ignore files are read with ``pathspec``'s gitignore
rules.
"""

from __future__ import annotations

import os
import re
import stat
import threading
from collections.abc import Iterator
from functools import lru_cache
from typing import TYPE_CHECKING, final

import attrs

if TYPE_CHECKING:
    import pathspec

__all__ = ["Entry", "Stopped", "glob_regex", "in_git_repository", "walk"]

_MAX_IGNORE_FILE = 1024 * 1024
"""An ignore file larger than this is not read (nothing real comes close)."""


class Stopped(Exception):  # a signal between threads, not an error
    """The search was cancelled; the worker thread unwinds with this."""


@final
@attrs.frozen
class Entry:
    """One directory entry found by :func:`walk`."""

    path: str
    """Absolute path (below the walk's top)."""
    relative: str
    """Path relative to the walk's top, ``/``-separated."""
    mode: int
    """``lstat`` mode: a symbolic link is a link here, never what it points to."""

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.mode)

    @property
    def is_file(self) -> bool:
        return stat.S_ISREG(self.mode)


def in_git_repository(path: str) -> bool:
    """Whether ``path`` or one of its parents holds ``.git`` (ripgrep's test)."""
    return _git_root(path) is not None


def _git_root(path: str) -> str | None:
    current = path
    while True:
        if os.path.lexists(os.path.join(current, ".git")):
            return current
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent


def _read_spec(path: str) -> pathspec.GitIgnoreSpec | None:
    try:
        with open(path, "rb") as f:
            data = f.read(_MAX_IGNORE_FILE)
    except OSError:
        return None
    lines = data.decode("utf-8", "replace").splitlines()
    if not lines:
        return None
    import pathspec  # at the first ignore file: the coding tools load without it

    return pathspec.GitIgnoreSpec.from_lines(lines)


@final
@attrs.frozen
class _Rules:
    """The ignore files of one directory, lowest precedence first."""

    base: str
    specs: tuple[pathspec.GitIgnoreSpec, ...]

    def decide(self, path: str, is_dir: bool) -> bool | None:
        """True: ignored; False: re-included by a ``!`` rule; None: no rule matched."""
        relative = os.path.relpath(path, self.base).replace(os.sep, "/")
        if is_dir:
            relative += "/"
        for spec in reversed(self.specs):
            result = spec.check_file(relative)
            if result.include is not None:
                return result.include
        return None


def _rules_for(directory: str, names: tuple[str, ...]) -> _Rules | None:
    specs = []
    for name in names:
        spec = _read_spec(os.path.join(directory, name))
        if spec is not None:
            specs.append(spec)
    return _Rules(directory, tuple(specs)) if specs else None


def walk(top: str, *, tool_ignore: str, git_needed: bool, stop: threading.Event) -> Iterator[Entry]:
    """Every entry below ``top`` that the ignore files keep, directories before their
    contents, names sorted; symbolic links are listed, not followed.

    Args:
        top: an existing directory (absolute).
        tool_ignore: ``.rgignore`` or ``.fdignore``.
        git_needed: apply ``.gitignore`` only inside a git repository (ripgrep); fd is
            told ``--no-require-git`` outside one, so find applies it everywhere.
        stop: set when the search is cancelled; the walk then raises :class:`Stopped`.
    """
    git_root = _git_root(top)
    use_git = git_root is not None or not git_needed
    names = (".gitignore", ".ignore", tool_ignore) if use_git else (".ignore", tool_ignore)
    inherited: list[_Rules] = []
    if git_root is not None:
        exclude = _rules_for(os.path.join(git_root, ".git", "info"), ("exclude",))
        if exclude is not None:
            inherited.append(_Rules(git_root, exclude.specs))
        # The ignore files of the directories between the repository's root and ``top``.
        parents = []
        current = os.path.dirname(top)
        while len(current) >= len(git_root) and current != top:
            parents.append(current)
            parent = os.path.dirname(current)
            if parent == current:
                break
            current = parent
        for directory in reversed(parents):
            rules = _rules_for(directory, names)
            if rules is not None:
                inherited.append(rules)
    yield from _walk_dir(top, "", inherited, names, stop)


def _ignored(rules: list[_Rules], path: str, is_dir: bool) -> bool:
    for r in reversed(rules):
        decision = r.decide(path, is_dir)
        if decision is not None:
            return decision
    return False


def _walk_dir(
    directory: str,
    relative: str,
    rules: list[_Rules],
    names: tuple[str, ...],
    stop: threading.Event,
) -> Iterator[Entry]:
    if stop.is_set():
        raise Stopped
    own = _rules_for(directory, names)
    active = [*rules, own] if own is not None else rules
    try:
        with os.scandir(directory) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        if stop.is_set():
            raise Stopped
        try:
            mode = entry.stat(follow_symlinks=False).st_mode
        except OSError:
            continue
        is_dir = stat.S_ISDIR(mode)
        if _ignored(active, entry.path, is_dir):
            continue
        name = _display(entry.name)
        child = f"{relative}{name}"
        yield Entry(entry.path, child, mode)
        if is_dir:
            yield from _walk_dir(entry.path, f"{child}/", active, names, stop)


def _display(name: str) -> str:
    """A file name as text (undecodable bytes become U+FFFD, as in Node)."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


@lru_cache(maxsize=64)
def glob_regex(pattern: str) -> re.Pattern[str]:
    """A glob as fd and ripgrep read it (``globset``): ``*`` and ``?`` stop at ``/``,
    ``**`` crosses directories, ``[...]`` classes (``[!...]`` negated), ``{a,b}``
    alternatives, ``\\`` escapes."""
    return re.compile(_translate(pattern) + r"\Z", re.DOTALL)


def _translate(pattern: str) -> str:
    out: list[str] = []
    i = 0
    n = len(pattern)
    depth = 0
    while i < n:
        c = pattern[i]
        if c == "*":
            if pattern.startswith("**", i):
                before_ok = i == 0 or pattern[i - 1] == "/"
                after = i + 2
                if before_ok and after < n and pattern[after] == "/":
                    out.append("(?:.*/)?")
                    i = after + 1
                    continue
                if before_ok and after == n:
                    out.append(".*")
                    i = after
                    continue
                out.append("[^/]*")
                i = after
                continue
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = pattern.find("]", i + 2 if pattern.startswith(("[!", "[^"), i) else i + 1)
            if end == -1:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1 : end]
                negate = body[:1] in ("!", "^")
                if negate:
                    body = body[1:]
                body = body.replace("\\", "\\\\").replace("^", "\\^")
                out.append(f"[{'^' if negate else ''}{body}]")
                i = end
        elif c == "{":
            depth += 1
            out.append("(?:")
        elif c == "}" and depth:
            depth -= 1
            out.append(")")
        elif c == "," and depth:
            out.append("|")
        elif c == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(pattern[i]))
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)
