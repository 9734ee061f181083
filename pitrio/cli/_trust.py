"""Pi's project trust store (``core/trust-manager.js``): ``trust.json`` in the agent
directory maps a folder's real path to ``true`` or ``false``; the nearest folder with a
decision, from the project up, decides. ``/trust`` saves a decision as Pi's trust selector
does (Trust; Trust the parent folder; Do not trust), under Pi's lock
(``trust.json.lock``, a directory, as ``proper-lockfile`` makes it).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final, TextIO, final

import attrs

from ._sanitize import one_line

__all__ = [
    "TrustOption",
    "ask_project_trust",
    "nearest_decision",
    "save_decisions",
    "saved_decision",
    "trust_options",
]

_LOCK_TRIES: Final = 10
_LOCK_WAIT_S: Final = 0.02
_STALE_LOCK_S: Final = 10.0  # proper-lockfile's default


@final
@attrs.frozen
class TrustOption:
    """One choice of ``/trust``: the word that picks it, Pi's label, and the writes
    (a folder's decision, ``None`` to remove one)."""

    word: str
    label: str
    trusted: bool
    updates: tuple[tuple[str, bool | None], ...]


def trust_options(cwd: str, *, session_only: bool = False) -> list[TrustOption]:
    """Pi's ``getProjectTrustOptions``: for ``/trust`` without the session-only choices,
    with them for the question at start."""
    here = os.path.realpath(cwd)
    options = [TrustOption("yes", "Trust", True, ((here, True),))]
    parent = os.path.dirname(here)
    if parent != here:
        options.append(
            TrustOption(
                "parent",
                f"Trust parent folder ({parent})",
                True,
                ((parent, True), (here, None)),
            )
        )
    if session_only:
        options.append(TrustOption("session", "Trust (this session only)", True, ()))
    options.append(TrustOption("no", "Do not trust", False, ((here, False),)))
    if session_only:
        options.append(TrustOption("session-no", "Do not trust (this session only)", False, ()))
    return options


async def ask_project_trust(cwd: str, agent: str, stdin: TextIO, out: TextIO) -> bool:
    """Pi's question at an interactive start (``selectProjectTrustOption``), as a
    numbered list: the choice applies to this run, and a saving one is written to
    ``trust.json``; an empty line (or the end of input) trusts nothing and saves nothing."""
    import trio

    options = trust_options(cwd, session_only=True)
    out.write(
        f"Trust project folder?\n{one_line(cwd)}\n\nThis allows pitrio to load .pi settings "
        "and resources, install missing project packages, and execute project extensions.\n"
    )
    for number, option in enumerate(options, 1):
        out.write(f"  {number}  {one_line(option.label)}\n")
    chosen: TrustOption | None = None
    while chosen is None:
        out.write("Trust? (number; Enter: do not trust) ")
        out.flush()
        answer = (await trio.to_thread.run_sync(stdin.readline, abandon_on_cancel=True)).strip()
        if not answer:
            return False
        if answer.isdigit() and 1 <= int(answer) <= len(options):
            chosen = options[int(answer) - 1]
        else:
            out.write(f"type a number from 1 to {len(options)}\n")
    if chosen.updates:
        await trio.to_thread.run_sync(save_decisions, agent, chosen.updates)
    return chosen.trusted


def nearest_decision(data: Mapping[str, Any], cwd: str) -> tuple[str, bool] | None:
    """The nearest folder from ``cwd`` up with a decision in ``data``, and the decision."""
    current = os.path.realpath(cwd)
    while True:
        value = data.get(current)
        if value is True or value is False:
            return current, value
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent


def _read(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8-sig") as f:
            data = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        msg = f"cannot read the trust store {path}: {exc}; fix or remove it"
        raise ValueError(msg) from None
    if not isinstance(data, dict):
        msg = f"the trust store {path} must hold a JSON object; fix or remove it"
        raise ValueError(msg)  # a bad file, said as Pi does
    return data


def saved_decision(agent: str, cwd: str) -> tuple[str, bool] | None:
    """The decision ``trust.json`` holds for ``cwd`` (blocking: call in a thread)."""
    return nearest_decision(_read(os.path.join(agent, "trust.json")), cwd)


def save_decisions(agent: str, updates: Sequence[tuple[str, bool | None]]) -> str:
    """Write ``updates`` into ``trust.json`` as Pi does (keys sorted, two-space JSON),
    under its lock; the file is private to the user. Blocking: call in a thread.
    Returns the file's path."""
    os.makedirs(agent, mode=0o700, exist_ok=True)
    path = os.path.join(agent, "trust.json")
    lock = path + ".lock"
    _acquire(lock)
    try:
        data = _read(path)
        for folder, decision in updates:
            key = os.path.realpath(folder)
            if decision is None:
                data.pop(key, None)
            else:
                data[key] = decision
        kept = {k: data[k] for k in sorted(data) if data[k] in (True, False, None)}
        text = json.dumps(kept, indent=2, ensure_ascii=False) + "\n"
        partial = f"{path}.{os.getpid()}.tmp"
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(partial, path)
    finally:
        os.rmdir(lock)
    return path


def _acquire(lock: str) -> None:
    for attempt in range(_LOCK_TRIES):
        try:
            os.mkdir(lock)
            return
        except FileExistsError:
            try:
                stale = time.time() - os.stat(lock).st_mtime > _STALE_LOCK_S
            except FileNotFoundError:
                continue
            if stale:  # a holder that died (proper-lockfile's rule)
                os.rmdir(lock)
                continue
            if attempt == _LOCK_TRIES - 1:
                break
            time.sleep(_LOCK_WAIT_S)
    msg = f"the trust store is locked ({lock}); try again, or remove the lock if no pi runs"
    raise OSError(msg)
