"""Node packages for the tests that run JavaScript (Pi's own code, or a Node client).

A folder of tests that drives Node holds a ``package.json`` and its committed
``package-lock.json``; :func:`ensure_node_packages` installs them there with ``npm ci``
(once per lock: the lock's hash is stamped into ``node_modules``), so a clean clone runs
those tests instead of skipping them. Call it from a session-scoped fixture::

    @pytest.fixture(scope="session")
    def my_node_modules() -> Path:
        return ensure_node_packages(Path(__file__).parent / "node")

Without Node or npm, or when ``npm ci`` fails (no registry, no network), the test is
skipped with the reason, and under CI (``$CI`` set) it fails instead: a gap in CI is
said out loud. One install runs at a time (a file lock), so parallel sessions share it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Final, NoReturn

import pytest

__all__ = ["NPM_CI", "ensure_node_packages", "node_executable"]

NPM_CI: Final = ("ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error")
"""The install: exactly the lock's packages, no install scripts run."""

_STAMP: Final = ".pitrio-lock-sha256"
_INSTALL_TIMEOUT: Final = 600.0  # seconds; a cold npm cache downloads ~100 packages


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (under CI the Node-driven tests must run, not skip)")
    pytest.skip(reason)


def node_executable() -> str:
    """The ``node`` on PATH; skips the test (fails it under CI) when there is none."""
    node = shutil.which("node")
    if node is None:
        _unavailable("node is not installed: the Node-driven tests need Node 20 or later")
    return node


def ensure_node_packages(folder: Path) -> Path:
    """``folder/node_modules``, installed by ``npm ci`` from ``folder``'s committed
    ``package-lock.json`` unless an install of that same lock is already there.

    Skips the calling test with the reason when Node, npm or the registry is out of
    reach; fails it instead under CI (``$CI`` set).
    """
    lock_file = folder / "package-lock.json"
    if not lock_file.is_file():
        msg = f"{folder} has no package-lock.json: run npm install there and commit the lock"
        raise FileNotFoundError(msg)
    node_executable()
    wanted = hashlib.sha256(lock_file.read_bytes()).hexdigest()
    node_modules = folder / "node_modules"
    stamp = node_modules / _STAMP
    if _stamped(stamp, wanted):
        return node_modules
    npm = shutil.which("npm")
    if npm is None:
        _unavailable(f"npm is not installed: cannot install the Node packages of {folder}")
    with open(folder / ".npm-ci.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another session may be installing the same lock
        if _stamped(stamp, wanted):
            return node_modules
        try:
            result = subprocess.run(
                [npm, *NPM_CI],
                cwd=folder,
                capture_output=True,
                text=True,
                timeout=_INSTALL_TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired:
            _unavailable(
                f"npm ci in {folder} took over {_INSTALL_TIMEOUT:.0f} s "
                "(is the npm registry reachable?)"
            )
        if result.returncode != 0:
            output = (result.stderr or result.stdout).strip().splitlines()
            _unavailable(
                f"npm ci in {folder} failed with status {result.returncode} (is the npm "
                f"registry reachable?): {output[-1] if output else 'no output'}"
            )
        stamp.write_text(wanted + "\n")
    return node_modules


def _stamped(stamp: Path, wanted: str) -> bool:
    try:
        return stamp.read_text().strip() == wanted
    except OSError:
        return False
