"""tests/_node.py: Node packages installed from a committed lock, once; a missing npm or
registry is a clear skip locally and a failure under CI."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from _node import ensure_node_packages

FAKE_NPM = """#!/bin/sh
echo "$@" >> "{log}"
{body}
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    folder = tmp_path / "node"
    folder.mkdir()
    (folder / "package.json").write_text('{"name": "t", "private": true}\n')
    (folder / "package-lock.json").write_text('{"name": "t", "lockfileVersion": 3}\n')
    return folder


def fake_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, npm_body: str | None) -> Path:
    """PATH holding only ``node`` (a stand-in) and, unless ``npm_body`` is None, an ``npm``
    that logs its arguments to the returned file and runs ``npm_body``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "npm.log"
    node = bin_dir / "node"
    node.write_text("#!/bin/sh\nexit 0\n")
    node.chmod(0o755)
    if npm_body is not None:
        npm = bin_dir / "npm"
        npm.write_text(FAKE_NPM.format(log=log, body=npm_body))
        npm.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    return log


def test_the_lock_is_installed_once(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """npm ci runs for a new lock, not again for the same one, and again when it changes."""
    log = fake_path(tmp_path, monkeypatch, f"{shutil.which('mkdir')} -p node_modules")
    assert ensure_node_packages(folder) == folder / "node_modules"
    assert ensure_node_packages(folder) == folder / "node_modules"
    assert log.read_text().splitlines() == [
        "ci --ignore-scripts --no-audit --no-fund --loglevel=error"
    ]
    (folder / "package-lock.json").write_text('{"name": "t", "lockfileVersion": 3, "x": 1}\n')
    ensure_node_packages(folder)
    assert len(log.read_text().splitlines()) == 2


@pytest.mark.parametrize("ci", [False, True])
def test_an_unreachable_registry_skips_locally_and_fails_under_ci(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ci: bool
) -> None:
    unreachable = 'echo "npm error code ENOTFOUND registry.npmjs.org" >&2\nexit 1'
    fake_path(tmp_path, monkeypatch, unreachable)
    if ci:
        monkeypatch.setenv("CI", "true")
    else:
        monkeypatch.delenv("CI", raising=False)
    outcome = pytest.fail.Exception if ci else pytest.skip.Exception
    with pytest.raises(outcome) as caught:
        ensure_node_packages(folder)
    message = str(caught.value)
    assert f"npm ci in {folder} failed with status 1 (is the npm registry reachable?)" in message
    assert message.count("ENOTFOUND registry.npmjs.org") == 1
    assert ("under CI" in message) == ci
    assert not (folder / "node_modules").exists()


def test_without_npm_the_reason_says_so(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_path(tmp_path, monkeypatch, None)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="npm is not installed"):
        ensure_node_packages(folder)


def test_without_node_the_reason_says_so(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("CI", "1")
    assert shutil.which("node") is None
    with pytest.raises(pytest.fail.Exception, match="node is not installed"):
        ensure_node_packages(folder)


def test_a_folder_without_a_lock_is_a_mistake_of_the_test(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"has no package-lock\.json"):
        ensure_node_packages(tmp_path)
    assert os.listdir(tmp_path) == []
