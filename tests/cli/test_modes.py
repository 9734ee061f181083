"""``--mode json`` and ``--mode rpc`` through subprocess pipes, against the offline
replay and a scripted OpenAI-compatible server on loopback."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from .conftest import ChatServer, text_reply


def pitrio(
    args: list[str], env: dict[str, str], cwd: Path, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pitrio", "--cwd", str(cwd), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_json_mode_on_the_offline_replay(cli_env: dict[str, str], tmp_path: Path) -> None:
    """Every stdout line is one JSON event; the replayed tools really ran."""
    proc = subprocess.run(
        [sys.executable, "-m", "pitrio", "--demo", "--mode", "json"],
        input="",
        capture_output=True,
        text=True,
        env=cli_env,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    ends = [e for e in events if e["type"] == "tool_execution_end"]
    assert [e["toolName"] for e in ends] == ["bash", "read", "read", "bash", "edit", "bash"]
    outputs = [e["result"]["content"][0]["text"] for e in ends if e["toolName"] == "bash"]
    assert outputs[0] == "README.md\ncheck_greet.py\ngreet.py\n"
    assert "AssertionError" in outputs[1]
    assert outputs[2] == "all checks passed\n"
    assert [e["type"] for e in events[-2:]] == ["agent_end", "agent_settled"]


def test_print_mode_status_reflects_failure(
    serve: Callable[..., ChatServer], cli_env: dict[str, str], workdir: Path
) -> None:
    server = serve(lambda body: text_reply("fine"))
    ok = pitrio(["--base-url", server.url, "--model", "m", "-p", "hi"], cli_env, workdir)
    assert ok.returncode == 0
    assert ok.stdout == "fine\n"
    server.stop()
    failed = pitrio(["--base-url", server.url, "--model", "m", "-p", "hi"], cli_env, workdir)
    assert failed.returncode == 1
    assert server.url.split("//")[1].split("/")[0] in failed.stdout + failed.stderr
