"""What a ``--mode json`` run imports: httpx without its own command line (click, rich,
pygments), and no ``importlib.metadata`` unless ``--version`` asks for it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.bench_cli import Server

_PROBE = """
import json, runpy, sys
sys.argv = ["pitrio", *json.loads(sys.argv[1])]
try:
    runpy.run_module("pitrio", run_name="__main__")
except SystemExit as exc:
    status = exc.code
names = ("httpx", "httpx._main", "click", "rich", "pygments", "importlib.metadata")
loaded = {name: name in sys.modules and sys.modules[name] is not None for name in names}
print(json.dumps({"status": status, **loaded}), file=sys.stderr)
"""


@pytest.mark.timeout(120)
def test_a_json_run_imports_neither_httpx_cli_nor_package_metadata(tmp_path: Path) -> None:
    """A whole 1-turn run against a local server: httpx is loaded, its CLI is not, and
    neither rich (the json mode renders nothing) nor importlib.metadata."""
    with Server() as server:
        args = ["--provider", "local", "--model", "scripted", "--base-url", server.url]
        args += ["--yes", "--no-session", "--mode", "json", "-p", "hello"]
        env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "config")}
        done = subprocess.run(
            [sys.executable, "-c", _PROBE, json.dumps(args)],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            timeout=100,
            check=False,
        )
    found = json.loads(done.stderr.strip().splitlines()[-1])
    assert "echo: hello" in done.stdout
    assert found == {
        "status": 0,
        "httpx": True,
        "httpx._main": False,
        "click": False,
        "rich": False,
        "pygments": False,
        "importlib.metadata": False,
    }
