"""The corpora recorded by ``node/google_trace.mjs``: their shape, and re-recording them
with pi-ai itself (Node and the oracle's install).

The conformance tests of the APIs recorded by ``node/google_trace.mjs`` (google, azure,
vertex) end with a test that runs pi-ai 0.85.0 again on every fixture and compares the
live trace with the committed one: :func:`assert_rerecorded`. Without the oracle's
``node_modules`` it skips locally and fails under CI.
"""

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

Trace = list[dict[str, Any]]


def assert_corpus(fixtures: Sequence[Path], data: Path, count: int) -> None:
    """``count`` fixtures, each with pi-ai's expected trace: a request for every scripted
    response, a result record last."""
    assert len(fixtures) == count
    for path in fixtures:
        expected = json.loads(expected_path(path, data).read_text("utf-8"))
        requests = [r for r in expected if r["type"] == "request"]
        assert len(requests) == len(json.loads(path.read_text("utf-8"))["responses"]), path.name
        assert expected[-1]["type"] == "result", path.name


def pi_node_modules() -> Path | None:
    """The ``node_modules`` holding pi-ai 0.85.0, or ``None``."""
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


def assert_rerecorded(
    fixtures: Sequence[Path], data: Path, normalize: Callable[[Trace], Trace]
) -> None:
    """pi-ai prints, for every fixture, the committed trace (both ``normalize``-d)."""
    from _node import node_executable

    node = node_executable()
    node_modules = pi_node_modules()
    if node_modules is None:
        reason = "re-recording needs the oracle's node_modules (@earendil-works/pi-ai 0.85.0)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)

    def run(path: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [node, str(RUNNER), str(path)],
            capture_output=True,
            text=True,
            timeout=120,
            env={"PATH": os.environ.get("PATH", ""), "PITRIO_PI_NODE_MODULES": str(node_modules)},
            check=False,
        )

    # Two Node processes at a time (each mostly waits for its own start-up and timers).
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = list(pool.map(run, fixtures))
    for path, done in zip(fixtures, runs, strict=True):
        assert done.returncode == 0, f"{path.name}: {done.stderr}"
        recorded = json.loads(expected_path(path, data).read_text("utf-8"))
        problem = compare_traces(path, normalize(recorded), normalize(json.loads(done.stdout)))
        assert problem is None, f"{path.name}: {problem}"
