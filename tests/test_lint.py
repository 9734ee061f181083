"""The tree passes the pinned linters: ``ruff check`` and ``mypy --strict`` (versions
pinned in the ``test`` extra, configuration in pyproject.toml), so the README's test
command fails when either does.

Both run over what ``[tool.mypy] files`` lists: the package, the tests, the benchmarks,
the documentation's examples (code people copy) and ``noxfile.py``. mypy keeps its
cache in ``.mypy_cache``, so a rerun checks only what changed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Final

ROOT = Path(__file__).resolve().parent.parent
CHECKED: Final = ("pitrio", "tests", "benchmarks", "docs/examples", "tools", "noxfile.py")
TIMEOUT: Final = 600  # seconds: a cold mypy cache over the whole tree on a slow machine


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *command],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        timeout=TIMEOUT,
    )


def test_the_tree_passes_ruff() -> None:
    """``ruff check`` finds nothing in the package, tests, benchmarks, examples, noxfile."""
    result = run("ruff", "check", *CHECKED)
    assert result.returncode == 0, f"ruff check:\n{result.stdout}{result.stderr}"


def test_the_tree_passes_mypy_strict() -> None:
    """``mypy --strict`` finds nothing in the files pyproject.toml lists (the same as
    :data:`CHECKED`: the examples type-check against pitrio's public API too)."""
    result = run("mypy", "--strict", "--cache-dir", str(ROOT / ".mypy_cache"))
    assert result.returncode == 0, f"mypy --strict:\n{result.stdout}{result.stderr}"


def test_mypy_checks_what_ruff_checks() -> None:
    """The two lists cannot drift apart: mypy's ``files`` are :data:`CHECKED`."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert tuple(config["tool"]["mypy"]["files"]) == CHECKED
