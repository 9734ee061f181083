"""Debian packages a test needs, installed on first use with apt-get (CI and the
developers' machines run as root on Debian), under a file lock so parallel runs install
once. :func:`ensure_debian_packages` returns ``None`` when the programs are there, else
why not (the caller skips locally and fails under CI)."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from collections.abc import Mapping

_LOCK = "/tmp/pitrio-apt-install.lock"


def _missing(programs: Mapping[str, tuple[str, ...]]) -> list[str]:
    return [package for package, names in programs.items() if not any(map(shutil.which, names))]


def ensure_debian_packages(programs: Mapping[str, tuple[str, ...]]) -> str | None:
    """Install each package whose programs (any of the names) are not on PATH:
    ``{"ripgrep": ("rg",), "fd-find": ("fd", "fdfind")}``."""
    if not _missing(programs):
        return None
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        names = " ".join(_missing(programs))
        return f"needs Debian's {names} (not installed; apt-get install -y {names} as root)"
    with open(_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        packages = _missing(programs)
        if not packages:
            return None
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        command = [apt, "install", "-y", *packages]
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, check=False, timeout=900
        )
        if done.returncode != 0:  # a fresh machine may have no package lists yet
            subprocess.run([apt, "update"], env=env, capture_output=True, check=False, timeout=900)
            done = subprocess.run(
                command, env=env, capture_output=True, text=True, check=False, timeout=900
            )
        still = _missing(programs)
        if still:
            return (
                f"`apt-get install -y {' '.join(packages)}` failed ({done.returncode}): "
                f"{done.stderr[-1500:]}"
            )
    return None
