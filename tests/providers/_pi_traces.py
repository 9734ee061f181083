"""The checks every recorded provider corpus shares: the corpus is whole, and pi-ai prints
the recorded traces still (``tests/providers/node/google_trace.mjs`` runs its own
``streamSimple`` on each fixture; Node and the oracle's install are needed)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from pitrio.testing.provider_conformance import compare_traces, expected_path

RUNNER = Path(__file__).parent / "node" / "google_trace.mjs"

Normalize = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]


def load(path: Path) -> Any:
    """A fixture or trace file, decoded."""
    return json.loads(path.read_text("utf-8"))


def check_corpus(
    fixtures: Sequence[Path], data: Path, count: int, request_types: Sequence[str] = ("request",)
) -> None:
    """``count`` fixtures, each with its expected trace: a request (of
    ``request_types``) for every scripted response, a result record last."""
    assert len(fixtures) == count
    for path in fixtures:
        expected = load(expected_path(path, data))
        requests = [r for r in expected if r["type"] in request_types]
        assert len(requests) == len(load(path)["responses"]), path.name
        assert expected[-1]["type"] == "result", path.name


def pi_node_modules() -> Path | None:
    """The ``node_modules`` holding pi-ai 0.85.0 (``$PITRIO_PI_NODE_MODULES``, the
    oracle's install beside the repository, or where its script installs)."""
    given = os.environ.get("PITRIO_PI_NODE_MODULES")
    candidates = [Path(given)] if given else []
    from cli._pi import oracle_path

    found = oracle_path()  # ../shared/oracle/coding-agent/pi beside the repository
    if found:
        candidates.append(Path(found) / "node_modules")
    # Where that script installs (a worktree is not beside ../shared).
    candidates.append(Path.home() / ".cache" / "pitrio-oracle-coding-agent" / "node_modules")
    for candidate in candidates:
        if (candidate / "@earendil-works" / "pi-ai" / "dist" / "api").is_dir():
            return candidate
    return None


def check_pi_prints_them(
    fixtures: Sequence[Path],
    data: Path,
    normalize: Normalize = lambda trace: trace,
    *,
    node_options: str = "",
) -> None:
    """Re-run pi-ai on every fixture and compare with the committed traces (skipped
    without Node or the install, failed under ``CI``); ``node_options`` go to Node
    (``NODE_OPTIONS``)."""
    from _node import node_executable

    node = node_executable()
    node_modules = pi_node_modules()
    if node_modules is None:
        reason = "re-recording needs the oracle's node_modules (@earendil-works/pi-ai 0.85.0)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PITRIO_PI_NODE_MODULES": str(node_modules),
        "NODE_OPTIONS": node_options,
    }

    def run(path: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [node, str(RUNNER), str(path)],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            check=False,
        )

    # Two at a time: each run is mostly Node starting up.
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = list(pool.map(run, fixtures))
    for path, done in zip(fixtures, runs, strict=True):
        assert done.returncode == 0, f"{path.name}: {done.stderr}"
        live = json.loads(done.stdout)
        recorded = load(expected_path(path, data))
        problem = compare_traces(path, normalize(recorded), normalize(live))
        assert problem is None, f"{path.name}: {problem}"
