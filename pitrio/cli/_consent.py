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

Each pattern is ``TOOL:GLOB``; the glob (``fnmatch``) is matched against the bash
command or the file path. The default file is ``policy.toml`` in pitrio's config
directory (``$XDG_CONFIG_HOME/pitrio``, default ``~/.config/pitrio``).
"""

from __future__ import annotations

import fnmatch
import os
import tomllib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, final

import attrs
import trio

from pitrio.harness import ToolCallEvent, ToolCallResult

from ._errors import PolicyError

__all__ = ["MUTATING_TOOLS", "Consent", "Policy", "PolicyError", "load_policy"]

MUTATING_TOOLS: Final = frozenset({"bash", "write", "edit"})


@final
@attrs.frozen(kw_only=True)
class Policy:
    """Allow and deny patterns (``TOOL:GLOB``) and the file they came from."""

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    source: str | None = None

    def match(self, tool: str, args: Any) -> tuple[str, str] | None:
        """``("deny" | "allow", pattern)`` for the first matching pattern, deny first."""
        subject = _subject(tool, args)
        for verdict, patterns in (("deny", self.deny), ("allow", self.allow)):
            for pattern in patterns:
                name, _, glob = pattern.partition(":")
                if fnmatch.fnmatchcase(tool, name) and fnmatch.fnmatchcase(subject, glob):
                    return verdict, pattern
        return None


def _subject(tool: str, args: Any) -> str:
    if not isinstance(args, dict):
        return ""
    if tool == "bash":
        return str(args.get("command", ""))
    return str(args.get("path", ""))


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
    """

    __slots__ = ("_lock", "always", "ask", "mode_hint", "policy", "yes")

    def __init__(
        self,
        policy: Policy,
        *,
        yes: bool = False,
        ask: Asker | None = None,
        mode_hint: str = "-p",
    ) -> None:
        self.policy = policy
        self.yes = yes
        self.ask = ask
        self.mode_hint = mode_hint
        self.always: set[str] = set()
        self._lock = trio.Lock()

    async def __call__(self, event: ToolCallEvent) -> ToolCallResult | None:
        tool = event.tool_name
        if tool not in MUTATING_TOOLS:
            return None
        verdict = self.policy.match(tool, event.args)
        if verdict is not None and verdict[0] == "deny":
            return ToolCallResult(
                block=True,
                reason=(
                    f"Refused by the policy file {self.policy.source}: "
                    f"{tool} matches deny pattern {verdict[1]!r}."
                ),
            )
        if verdict is not None or self.yes or tool in self.always:
            return None
        if self.ask is None:
            return ToolCallResult(
                block=True,
                reason=(
                    f"Refused: {tool} changes files or runs commands and needs consent, "
                    f"which {self.mode_hint} cannot ask for. The user can rerun with --yes, "
                    f'or allow it in a policy file (--policy FILE, allow = ["{tool}:*"]).'
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
