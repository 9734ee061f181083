"""Shared fixtures of the harness tests."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from _node import ensure_node_packages

NODE_DIR = Path(__file__).parent / "node"
PI_CORE = Path("@earendil-works") / "pi-agent-core"


def _has_pi(node_modules: Path) -> bool:
    package = node_modules / PI_CORE / "package.json"
    return package.is_file() and json.loads(package.read_text()).get("version") == "0.85.0"


@pytest.fixture(scope="session")
def pi_node_modules() -> Path:
    """A node_modules holding Pi 0.85.0 for the Node scripts in tests/harness/node.

    ``$PITRIO_PI_NODE_MODULES`` when it is set, else ``tests/harness/node/node_modules``,
    installed there from the committed lock by :func:`_node.ensure_node_packages` (which
    skips without Node or npm, and fails under CI). The scripts read it from
    ``$PI_NODE_MODULES``.
    """
    override = os.environ.get("PITRIO_PI_NODE_MODULES")
    if override:
        if not _has_pi(Path(override)):
            pytest.fail(f"PITRIO_PI_NODE_MODULES={override} holds no Pi 0.85.0 ({PI_CORE})")
        return Path(override)
    node_modules = ensure_node_packages(NODE_DIR)
    assert _has_pi(node_modules), f"npm ci in {NODE_DIR} did not install Pi 0.85.0"
    return node_modules
