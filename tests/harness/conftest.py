"""Shared fixtures of the harness tests."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

NODE_DIR = Path(__file__).parent / "node"
PI_CORE = Path("@earendil-works") / "pi-agent-core"


def _has_pi(node_modules: Path) -> bool:
    package = node_modules / PI_CORE / "package.json"
    return package.is_file() and json.loads(package.read_text()).get("version") == "0.85.0"


@pytest.fixture(scope="session")
def pi_node_modules() -> Path:
    """A node_modules holding Pi 0.85.0 for the Node scripts in tests/harness/node.

    Found through ``$PITRIO_PI_NODE_MODULES``, ``tests/harness/node/node_modules`` or the
    oracle's cache (``$XDG_CACHE_HOME/pitrio-oracle/node_modules``), else installed into
    ``tests/harness/node`` with ``npm ci --ignore-scripts`` from its lock file. Without
    ``node`` the tests using it skip locally and fail under CI (``$CI`` set).
    """
    if shutil.which("node") is None:
        if os.environ.get("CI"):
            pytest.fail("node (>= 20) is needed for the Pi interop tests")
        pytest.skip("node is not installed: the Pi interop tests need Node 20")
    candidates = []
    if os.environ.get("PITRIO_PI_NODE_MODULES"):
        candidates.append(Path(os.environ["PITRIO_PI_NODE_MODULES"]))
    candidates.append(NODE_DIR / "node_modules")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    candidates.append(cache / "pitrio-oracle" / "node_modules")
    for candidate in candidates:
        if _has_pi(candidate):
            return candidate
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail(
            "npm is needed to install Pi for the interop tests (or set PITRIO_PI_NODE_MODULES)"
        )
    subprocess.run(
        [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=NODE_DIR,
        check=True,
    )
    assert _has_pi(NODE_DIR / "node_modules")
    return NODE_DIR / "node_modules"
