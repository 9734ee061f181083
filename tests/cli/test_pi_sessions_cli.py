"""``pi`` and ``python -m pitrio`` continue each other's sessions, both ways.

The real ``pi`` 0.85.0 and pitrio's CLI share one scratch ``PI_CODING_AGENT_DIR`` and one
scripted chat server: a turn in pitrio, ``pi -c`` goes on from it, pitrio ``-c`` goes on
from that, then ``pi`` once more. Each request must carry every earlier turn, and every
file must stay one that both read.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._pi import pi_command, require_oracle
from .conftest import ChatServer, Reply, last_user_text, text_reply


def user_texts(body: dict[str, Any]) -> list[str]:
    out = []
    for message in body["messages"]:
        if message["role"] == "user":
            content = message["content"]
            out.append(
                content if isinstance(content, str) else "".join(p.get("text", "") for p in content)
            )
    return out


def test_pi_and_pitrio_continue_each_others_sessions(
    serve: Callable[..., ChatServer], cli_env: dict[str, str], workdir: Path, tmp_path: Path
) -> None:
    oracle = require_oracle()

    def script(body: dict[str, Any]) -> Reply:
        return text_reply(f"answer to {last_user_text(body)}")

    server = serve(script)
    agent_dir = tmp_path / "agent"
    agent_dir.mkdir()
    (agent_dir / "models.json").write_text(
        json.dumps(
            {
                "providers": {
                    "local": {
                        "baseUrl": server.url,
                        "api": "openai-completions",
                        "apiKey": "dummy",
                        "models": [{"id": "m", "contextWindow": 128000, "maxTokens": 4096}],
                    }
                }
            }
        )
    )
    env = {k: v for k, v in cli_env.items() if k != "PITRIO_SESSIONS_DIR"}
    env |= {"PI_CODING_AGENT_DIR": str(agent_dir), "PI_OFFLINE": "1", "PI_TELEMETRY": "0"}

    def pitrio(*args: str) -> None:
        argv = ["--cwd", str(workdir), "--base-url", server.url, "--model", "m", *args]
        done = subprocess.run(
            [sys.executable, "-m", "pitrio", *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        assert done.returncode == 0, done.stderr

    def pi(*args: str) -> None:
        done = subprocess.run(
            [*pi_command(oracle), "--provider", "local", "--model", "m", *args],
            env=env,
            cwd=workdir,
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
        assert done.returncode == 0, done.stderr + done.stdout

    pitrio("-p", "one")
    (session_file,) = (agent_dir / "sessions").rglob("*.jsonl")
    assert session_file.stat().st_mode & 0o077 == 0  # private to its user
    pi("-c", "-p", "two")
    assert user_texts(server.requests[-1]) == ["one", "two"]
    pitrio("-c", "-p", "three")
    assert user_texts(server.requests[-1]) == ["one", "two", "three"]
    pi("-c", "-p", "four")
    assert user_texts(server.requests[-1]) == ["one", "two", "three", "four"]
    # still one session file, appended by both
    assert list((agent_dir / "sessions").rglob("*.jsonl")) == [session_file]
    lines = [json.loads(x) for x in session_file.read_text().splitlines()]
    assert lines[0]["type"] == "session"
    assert lines[0]["version"] == 3
    answers = [
        x["message"]["content"][0]["text"]
        for x in lines
        if x["type"] == "message" and x["message"]["role"] == "assistant"
    ]
    assert answers == [f"answer to {n}" for n in ("one", "two", "three", "four")]
