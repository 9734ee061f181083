"""Consent for the tools that change things: ``bash``, ``write`` and ``edit``.

Before one of them runs, :class:`Consent` (a harness ``tool_call`` hook) decides:

1. a ``deny`` pattern of the policy file matching the call refuses it (even with
   ``--yes``);
2. an ``allow`` pattern matching it, ``--yes``, or an earlier "always" answer lets it
   run;
3. otherwise the interactive terminal asks ``y`` / ``n`` / ``a`` (always, for this
   session); without a terminal to ask (``-p``, json and rpc modes) the call is refused
   with an error result saying how to allow it.

A policy file is TOML::

    allow = ["bash:git status*", "bash:python3 -m pytest*", "edit:src/*", "write:*"]
    deny = ["bash:*rm -rf*", "bash:sudo *"]

Each pattern is ``TOOL:PATTERN`` (the tool part a glob on the tool's name). For
``write`` and ``edit`` the pattern is a glob on the file's path, resolved as the file
tools resolve it (relative to the working directory, ``..`` and symlinks followed): a
relative pattern matches a path inside the working directory, relative to it; an
absolute one the absolute path. For ``bash`` the pattern is words, split like a shell
line, matched against the argument vectors of the command's simple commands
(:mod:`pitrio.cli._shell` reads them): each word a glob on one word of the command
(quotes removed, ``/usr/bin/rm`` read as ``rm``), ``*`` alone any number of words, and a
``*`` at the start or end of a word also any number of words before or after it, so
``git status*`` is ``git``, a word starting ``status``, then anything, and ``*rm -rf*``
covers ``sudo rm -rf x``.

An allow pattern covers only a command line that is one plain simple command and runs no
other code (:func:`pitrio.cli._shell.plain_argv`, :func:`~pitrio.cli._shell.runs_other_code`);
a deny pattern is checked against every simple command the line may run
(:func:`~pitrio.cli._shell.simple_commands`), and a line whose commands cannot all be
known (``eval "$x"``, ``sh`` reading stdin, an unparseable line) matches every bash deny
pattern. The default file is ``policy.toml`` in pitrio's config directory
(``$XDG_CONFIG_HOME/pitrio``, default ``~/.config/pitrio``).
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
import shlex
import tomllib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, Literal, final

import attrs
import trio

from pitrio.harness import ToolCallEvent, ToolCallResult

from . import _shell
from ._errors import PolicyError

__all__ = ["MUTATING_TOOLS", "Consent", "Policy", "PolicyError", "Verdict", "load_policy"]

MUTATING_TOOLS: Final = frozenset({"bash", "write", "edit"})


@final
@attrs.frozen(kw_only=True)
class Verdict:
    """What the policy says about a call: the pattern that decided, and why."""

    kind: Literal["allow", "deny"]
    pattern: str
    why: str


@final
@attrs.frozen(kw_only=True)
class Policy:
    """Allow and deny patterns (``TOOL:PATTERN``) and the file they came from."""

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    source: str | None = None

    def match(self, tool: str, args: Any, *, cwd: str | None = None) -> tuple[str, str] | None:
        """``("deny" | "allow", pattern)`` for the first matching pattern, deny first."""
        verdict = self.decide(tool, args, cwd=cwd)
        return None if verdict is None else (verdict.kind, verdict.pattern)

    def decide(self, tool: str, args: Any, *, cwd: str | None = None) -> Verdict | None:
        """The verdict of the first deny pattern matching the call, else of the first
        allow pattern, else ``None``; paths are resolved against ``cwd`` (default the
        current directory)."""
        deny = [p for p in self.deny if fnmatch.fnmatchcase(tool, _tool_part(p))]
        allow = [p for p in self.allow if fnmatch.fnmatchcase(tool, _tool_part(p))]
        if not deny and not allow:
            return None
        if not isinstance(args, dict):
            args = {}
        if tool == "bash":
            return _decide_bash(str(args.get("command", "")), deny, allow)
        return _decide_path(str(args.get("path", "")), cwd or os.getcwd(), deny, allow)

    def notice(self) -> str | None:
        """A line to show when the policy cannot do all it says (bash allow rules
        without the shell parser), else ``None``."""
        if not any(fnmatch.fnmatchcase("bash", _tool_part(p)) for p in self.allow):
            return None  # (and tree-sitter is not imported for nothing)
        if _shell.parser_available():
            return None
        return f"policy: bash allow patterns are off (every command asks): {_shell.INSTALL_HINT}"


def _tool_part(pattern: str) -> str:
    return pattern.partition(":")[0]


# -- bash -------------------------------------------------------------------------------


class _Star:
    """A pattern word standing for any number of words."""


@final
@attrs.frozen
class _Flags:
    """A deny pattern's short options (``-rf``): one option word of the command, and
    these letters among all its options, in any order or grouping (``-r -f``, ``-fr``)."""

    letters: frozenset[str]


_STAR: Final = _Star()
_PatternWord = str | _Star | _Flags
_CLUSTER: Final = re.compile(r"-[A-Za-z]+")
_LETTER_ALIASES: Final = {"rm": {"R": "r", "--recursive": "r", "--force": "f"}}
"""Options that are another option's other name, per program."""


@functools.cache
def _pattern_words(pattern: str, *, deny: bool = False) -> tuple[_PatternWord, ...]:
    """``git status*`` -> ``("git", "status*", STAR)`` (raises ``ValueError``); in a deny
    pattern, ``-rf`` is ``_Flags({"r", "f"})``."""
    out: list[_PatternWord] = []
    for word in shlex.split(pattern.partition(":")[2]):
        if word.startswith("*"):
            out.append(_STAR)
        bare = word.removesuffix("*")
        if deny and _CLUSTER.fullmatch(bare):
            out.append(_Flags(frozenset(bare[1:])))
        elif word != "*":
            out.append(word)
        if word.endswith("*") and word != "*":
            out.append(_STAR)
    return tuple(w for i, w in enumerate(out) if not (w is _STAR and i and out[i - 1] is _STAR))


def _option_letters(argv: _shell.Argv) -> frozenset[str] | None:
    """The short options of ``argv`` (``None``: any, a word is dynamic)."""
    aliases = _LETTER_ALIASES.get(
        _shell.program_name(argv[0]) if argv and isinstance(argv[0], str) else "", {}
    )
    letters: set[str] = set()
    for word in argv[1:]:
        if not isinstance(word, str):
            return None
        if word == "--":
            break
        if word in aliases:
            letters.add(aliases[word])
        elif _CLUSTER.fullmatch(word):
            letters.update(aliases.get(c, c) for c in word[1:])
    return frozenset(letters)


def _words_match(pattern: tuple[_PatternWord, ...], argv: _shell.Argv) -> bool:
    """Whether some value of ``argv`` (its dynamic words any words) matches ``pattern``.

    A dynamic word after the program's name (``echo $HOME``) stands for arguments, not
    for the program a pattern names: it does not match the pattern's first word when that
    is a program name (``rm`` in ``*rm -rf*``; an option such as ``*--force*`` it does).
    """
    letters = _option_letters(argv) if any(isinstance(p, _Flags) for p in pattern) else None
    first = next((j for j, p in enumerate(pattern) if not isinstance(p, _Star)), -1)
    program = (
        first >= 0
        and isinstance(pattern[first], str)
        and not str(pattern[first]).lstrip("*").startswith("-")
    )

    @functools.cache
    def go(i: int, j: int) -> bool:
        if j == len(pattern):
            return all(a is _shell.MANY for a in argv[i:])
        p = pattern[j]
        if isinstance(p, _Star):
            return go(i, j + 1) or (i < len(argv) and go(i + 1, j))
        if i == len(argv):
            return False
        a = argv[i]
        if isinstance(a, _shell.Dynamic) and i > 0 and j == first and program:
            return a is _shell.MANY and go(i + 1, j)  # an argument, not the program
        if a is _shell.MANY:
            return go(i + 1, j) or go(i, j + 1)
        if a is _shell.ONE:
            return go(i + 1, j + 1)
        if isinstance(p, _Flags):
            option = a.startswith("-") and (letters is None or p.letters <= letters)
            return option and go(i + 1, j + 1)
        return fnmatch.fnmatchcase(a, p) and go(i + 1, j + 1)

    return go(0, 0)


def _decide_bash(command: str, deny: list[str], allow: list[str]) -> Verdict | None:
    if deny:
        commands = _shell.simple_commands(command)
        if commands.opaque is not None:
            return Verdict(
                kind="deny",
                pattern=deny[0],
                why=f"{commands.opaque}, so the deny patterns cannot be checked and deny wins",
            )
        for pattern in deny:
            words = _pattern_words(pattern, deny=True)
            for argv in commands.argvs:
                if _words_match(words, argv):
                    shown = " ".join(a if isinstance(a, str) else "..." for a in argv)
                    return Verdict(kind="deny", pattern=pattern, why=f"it runs {shown!r}")
    if not allow:
        return None
    plain = _shell.plain_argv(command)
    if plain is None or _shell.runs_other_code(plain) is not None:
        return None
    candidates: list[_shell.Argv] = [plain]
    head, tail = os.path.split(plain[0])
    if head in _shell.SYSTEM_BIN_DIRS:
        candidates.append((tail, *plain[1:]))
    for pattern in allow:
        words = _pattern_words(pattern)
        if any(_words_match(words, c) for c in candidates):
            return Verdict(kind="allow", pattern=pattern, why="a plain simple command")
    return None


# -- write / edit -----------------------------------------------------------------------


def _decide_path(path: str, cwd: str, deny: list[str], allow: list[str]) -> Verdict | None:
    root = os.path.realpath(cwd)
    raw = path.strip()
    if raw.startswith("@"):  # as the file tools resolve it (CodingTools.resolve)
        raw = raw[1:]
    if raw.startswith("~"):
        raw = os.path.expanduser(raw)
    joined = os.path.join(root, raw)
    lexical = os.path.normpath(joined)  # .. removed, symlinks not followed
    real = os.path.realpath(joined)
    real_inside = _relative_inside(real, root)
    resolved = [] if real_inside is None else [real_inside]
    every = {real, lexical, os.path.normpath(raw), *resolved}
    if (lexical_inside := _relative_inside(lexical, root)) is not None:
        every.add(lexical_inside)
    for pattern in deny:
        glob = _path_glob(pattern)
        if any(fnmatch.fnmatchcase(s, glob) for s in every):
            return Verdict(kind="deny", pattern=pattern, why=f"the path is {real!r}")
    for pattern in allow:
        glob = _path_glob(pattern)
        subjects = [real] if glob.startswith("/") else resolved
        if any(fnmatch.fnmatchcase(s, glob) for s in subjects):
            return Verdict(kind="allow", pattern=pattern, why=f"the path is {real!r}")
    return None


def _relative_inside(path: str, root: str) -> str | None:
    """``path`` relative to ``root``, or ``None`` when it lies outside."""
    rel = os.path.relpath(path, root)
    return None if rel == ".." or rel.startswith("../") else rel


def _path_glob(pattern: str) -> str:
    """The glob of a path pattern, ``./`` and ``..`` normalised (``edit:./src/*``)."""
    glob = pattern.partition(":")[2]
    return os.path.normpath(glob) if glob else ""


def load_policy(path: str | None, *, required: bool) -> Policy:
    """Read a policy file; a missing default file is an empty policy.

    Raises:
        PolicyError: the file is missing (when ``required``), not TOML, or malformed.
    """
    if path is None or (not required and not os.path.exists(path)):
        return Policy()
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        msg = f"policy file {path!r} does not exist; create it or drop --policy"
        raise PolicyError(msg) from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        msg = f"policy file {path!r} cannot be read: {exc}"
        raise PolicyError(msg) from None
    unknown = set(data) - {"allow", "deny"}
    if unknown:
        msg = (
            f"policy file {path!r}: unknown keys {sorted(unknown)}; "
            "only 'allow' and 'deny' (lists of 'TOOL:GLOB' patterns) are read"
        )
        raise PolicyError(msg)
    lists: dict[str, tuple[str, ...]] = {}
    for key in ("allow", "deny"):
        value = data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(p, str) and ":" in p for p in value):
            msg = (
                f"policy file {path!r}: {key!r} must be a list of 'TOOL:GLOB' strings, "
                f'e.g. {key} = ["bash:git status*"]; got {value!r}'
            )
            raise PolicyError(msg)
        for pattern in value:
            if fnmatch.fnmatchcase("bash", _tool_part(pattern)):
                try:
                    _pattern_words(pattern)
                except ValueError as exc:
                    msg = (
                        f"policy file {path!r}: {key} pattern {pattern!r} cannot be split "
                        f"into words ({exc}); close its quotes or escape them with \\"
                    )
                    raise PolicyError(msg) from None
        lists[key] = tuple(value)
    return Policy(allow=lists["allow"], deny=lists["deny"], source=path)


Asker = Callable[[ToolCallEvent], Awaitable[str]]
"""Asks the person about a call; returns ``"y"``, ``"n"`` or ``"a"``."""


@final
class Consent:
    """The ``tool_call`` hook deciding whether a mutating tool may run.

    Args:
        policy: allow/deny patterns.
        yes: ``--yes``: run every tool the policy does not deny.
        ask: how to ask the person; ``None`` when nobody can be asked (``-p``, json,
            rpc): then calls that need consent are refused.
        mode_hint: how to allow them, for the refusal's text.
        cwd: the working directory the file tools resolve paths against (default the
            current directory), for the policy's path patterns.
    """

    __slots__ = ("_lock", "always", "ask", "cwd", "mode_hint", "policy", "yes")

    def __init__(
        self,
        policy: Policy,
        *,
        yes: bool = False,
        ask: Asker | None = None,
        mode_hint: str = "-p",
        cwd: str | None = None,
    ) -> None:
        self.policy = policy
        self.cwd = cwd
        self.yes = yes
        self.ask = ask
        self.mode_hint = mode_hint
        self.always: set[str] = set()
        self._lock = trio.Lock()

    async def __call__(self, event: ToolCallEvent) -> ToolCallResult | None:
        tool = event.tool_name
        if tool not in MUTATING_TOOLS:
            return None
        verdict = self.policy.decide(tool, event.args, cwd=self.cwd)
        if verdict is not None and verdict.kind == "deny":
            return ToolCallResult(
                block=True,
                reason=(
                    f"Refused by the policy file {self.policy.source}: "
                    f"{tool} matches deny pattern {verdict.pattern!r} ({verdict.why})."
                ),
            )
        if verdict is not None or self.yes or tool in self.always:
            return None
        if self.ask is None:
            notice = self.policy.notice() if tool == "bash" else None
            return ToolCallResult(
                block=True,
                reason=(
                    f"Refused: {tool} changes files or runs commands and needs consent, "
                    f"which {self.mode_hint} cannot ask for. The user can rerun with --yes, "
                    f'or allow it in a policy file (--policy FILE, allow = ["{tool}:*"]'
                    + (
                        "; bash allow patterns cover only one plain simple command"
                        if tool == "bash"
                        else ""
                    )
                    + ")."
                    + (f" ({notice})" if notice else "")
                ),
            )
        async with self._lock:  # parallel calls are asked about one at a time
            if tool in self.always:
                return None
            answer = await self.ask(event)
        if answer == "a":
            self.always.add(tool)
            return None
        if answer == "y":
            return None
        return ToolCallResult(block=True, reason=f"The user declined to run this {tool} call.")


def parse_answer(line: str) -> str | None:
    """``y``, ``n`` or ``a`` for a typed answer, ``None`` when it is none of them."""
    word = line.strip().lower()
    if word in {"y", "yes"}:
        return "y"
    if word in {"n", "no"}:
        return "n"
    if word in {"a", "always"}:
        return "a"
    return None


def patterns_text(patterns: Sequence[str]) -> str:
    """Patterns for display."""
    return ", ".join(patterns) if patterns else "(none)"
