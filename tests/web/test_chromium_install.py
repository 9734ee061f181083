"""The browser fixture's install step: apt-get as root, or a skip that says what to install."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from . import _cdp


@pytest.fixture
def missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    browser = tmp_path / "chromium"
    monkeypatch.setattr(_cdp, "CHROMIUM", str(browser))
    return browser


def test_without_apt_or_root_the_reason_names_the_package(
    missing: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    reason = _cdp.ensure_chromium()
    assert reason is not None
    assert str(missing) in reason
    assert "apt-get install -y chromium" in reason
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/apt-get")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    reason = _cdp.ensure_chromium()
    assert reason is not None
    assert "needs root" in reason


def _fake_apt(tmp_path: Path, script: str) -> str:
    apt = tmp_path / "apt-get"
    apt.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "calls"}\n{script}\n')
    apt.chmod(0o755)
    return str(apt)


def test_a_failed_install_updates_the_lists_retries_and_reports(
    missing: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    apt = _fake_apt(tmp_path, 'echo "E: Unable to locate package chromium" >&2; exit 100')
    monkeypatch.setattr(shutil, "which", lambda name: apt)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    reason = _cdp.ensure_chromium()
    assert reason is not None
    assert "`apt-get install -y chromium` failed (100)" in reason
    assert "Unable to locate package chromium" in reason
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls == ["install -y chromium", "update", "install -y chromium"]


def test_an_install_that_provides_the_binary_succeeds(
    missing: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    apt = _fake_apt(tmp_path, f"touch {missing}")
    monkeypatch.setattr(shutil, "which", lambda name: apt)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert _cdp.ensure_chromium() is None
    assert os.path.exists(missing)
    assert (tmp_path / "calls").read_text().splitlines() == ["install -y chromium"]
