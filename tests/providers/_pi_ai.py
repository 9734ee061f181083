"""Running pi-ai 0.85.0's own code under Node for the provider tests.

The oracle's install (``../shared/oracle/coding-agent/pi --oracle-path``/node_modules, or
``~/.cache/pitrio-oracle-coding-agent/node_modules`` where that script installs, or
``$PITRIO_PI_NODE_MODULES``) holds ``@earendil-works/pi-ai`` and the SDKs under it; the
scripts in ``tests/providers/node`` import it from ``$PITRIO_PI_NODE_MODULES``. Without
Node or the install a test skips locally and fails under CI.
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

__all__ = ["check_corpus", "check_pi_prints_now", "load", "pi_node_modules", "run_pi_scripts"]


def pi_node_modules() -> Path | None:
    """The oracle's ``node_modules`` holding pi-ai's ``dist/api``, if there is one."""
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


def run_pi_scripts(
    script: Path,
    arguments: Sequence[Path],
    *,
    workers: int = 4,
    timeout: float = 120,
    node_options: str = "",
) -> list[subprocess.CompletedProcess[str]]:
    """``node script argument`` for each argument (``workers`` at a time), with only
    ``PATH``, ``PITRIO_PI_NODE_MODULES`` and ``NODE_OPTIONS`` (``node_options``) in the
    environment; skips (fails under CI) without Node or the oracle's install."""
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

    def run(argument: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [node, str(script), str(argument)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
        )

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(run, arguments))


def _load(path: Path) -> Any:
    return json.loads(path.read_text("utf-8"))


def load(path: Path) -> Any:
    """A fixture or trace file, decoded."""
    return json.loads(path.read_text("utf-8"))


def check_corpus(
    fixtures: Sequence[Path],
    data: Path,
    count: int | None = None,
    request_types: Sequence[str] = ("request",),
) -> None:
    """``count`` fixtures (if given), each with its expected trace: a request record (of
    ``request_types``) for every scripted response, a result record last."""
    if count is not None:
        assert len(fixtures) == count
    for path in fixtures:
        expected = _load(expected_path(path, data))
        requests = [r for r in expected if r["type"] in request_types]
        assert len(requests) == len(_load(path)["responses"]), path.name
        assert expected[-1]["type"] == "result", path.name


def check_pi_prints_now(
    runner: Path,
    fixtures: Sequence[Path],
    data: Path,
    normalize: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] = lambda trace: trace,
    *,
    node_options: str = "",
) -> None:
    """Re-run pi-ai on every fixture with ``runner`` and compare (after ``normalize``)
    with the committed traces; ``node_options`` go to Node (``NODE_OPTIONS``)."""
    runs = run_pi_scripts(runner, fixtures, node_options=node_options)
    for path, done in zip(fixtures, runs, strict=True):
        assert done.returncode == 0, f"{path.name}: {done.stderr}"
        live = json.loads(done.stdout)
        recorded = _load(expected_path(path, data))
        problem = compare_traces(path, normalize(recorded), normalize(live))
        assert problem is None, f"{path.name}: {problem}"
