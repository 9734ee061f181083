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
from .conftest import ChatServer, Reply, last_user_text, local_models_env, text_reply, tool_reply


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


def test_a_continued_session_keeps_its_model_and_thinking_level(
    serve: Callable[..., ChatServer], cli_env: dict[str, str], workdir: Path, tmp_path: Path
) -> None:
    """As Pi's ``createAgentSession``: ``-c`` without ``--model`` goes on with the
    session's model, and without ``--thinking`` with its thinking level (clamped to the
    model: none for one without reasoning, the session's again for one with it); a
    reasoning model with nothing said gets Pi's default, ``medium``. The expected
    ``(model, reasoning_effort)`` of each request is what ``pi`` 0.85.0 sent for the same
    five command lines (recorded)."""
    server = serve(lambda body: text_reply("ok"))
    env, agent_dir = local_models_env(server, cli_env, tmp_path)

    def sent(*args: str) -> tuple[str, str | None]:
        done = subprocess.run(
            [sys.executable, "-m", "pitrio", "--cwd", str(workdir), *args, "-p", "hi"],
            env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        body = server.requests[-1]
        return body["model"], body.get("reasoning_effort")

    assert [
        sent("--model", "local/r", "--thinking", "high"),
        sent("-c", "--model", "local/r"),
        sent("-c"),
        sent("-c", "--model", "local/plain"),
        sent("-c", "--model", "local/r"),
    ] == [("r", "high"), ("r", "high"), ("r", "high"), ("plain", None), ("r", "high")]
    assert sent("--model", "local/r") == ("r", "medium")  # a new session: Pi's default
    (first, *_) = sorted((agent_dir / "sessions").rglob("*.jsonl"))
    levels = [
        json.loads(line).get("thinkingLevel")
        for line in first.read_text().splitlines()
        if '"thinking_level_change"' in line
    ]
    assert levels[0] == "high"  # recorded as the run used it (was "off")


def test_rpc_session_switches_take_the_model_and_level_as_pi(
    serve: Callable[..., ChatServer], cli_env: dict[str, str], workdir: Path, tmp_path: Path
) -> None:
    """Pi's RPC replaces its whole runtime at ``switch_session`` and ``new_session``: a
    session holding messages brings back its model and thinking level, a new one starts
    with the run's own (``set_model`` and ``set_thinking_level`` are not persisted); a
    models.json model can be chosen with ``set_model``. Every ``(model, thinking level)``
    below is what ``pi`` 0.85.0 answered to the same commands (recorded)."""
    server = serve(lambda body: text_reply("ok"))
    env, agent_dir = local_models_env(server, cli_env, tmp_path)
    pitrio = [sys.executable, "-m", "pitrio", "--cwd", str(workdir)]
    done = subprocess.run(
        [*pitrio, "--model", "local/r", "--thinking", "high", "-p", "one"],
        env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (first,) = sorted((agent_dir / "sessions").rglob("*.jsonl"))

    commands: list[dict[str, Any]] = [
        {"type": "get_state"},
        {"type": "set_model", "provider": "local", "modelId": "r"},
        {"type": "set_thinking_level", "level": "low"},
        {"type": "get_state"},
        {"type": "switch_session", "sessionPath": str(first)},
        {"type": "get_state"},
        {"type": "prompt", "message": "two"},
        {"type": "new_session"},
        {"type": "get_state"},
        {"type": "set_model", "provider": "local", "modelId": "r"},
        {"type": "prompt", "message": "three"},
        {"type": "get_state"},
        {"type": "new_session"},
        {"type": "get_state"},
    ]
    states: list[tuple[str, str, int]] = []
    sent: list[tuple[str, str | None]] = []
    with subprocess.Popen(
        [*pitrio, "--mode", "rpc"], env=env, text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    ) as rpc:  # fmt: skip
        assert rpc.stdin is not None
        assert rpc.stdout is not None
        for number, command in enumerate(commands):
            command["id"] = f"c{number}"
            rpc.stdin.write(json.dumps(command) + "\n")
            rpc.stdin.flush()
            settled = command["type"] != "prompt"
            answered = False
            while not (answered and settled):
                line = rpc.stdout.readline()
                assert line, "pitrio's rpc mode ended early"
                message = json.loads(line)
                if message.get("type") == "agent_end":
                    settled = True
                if message.get("type") == "response" and message.get("id") == command["id"]:
                    assert message["success"], message
                    answered = True
                    if command["type"] == "get_state":
                        data = message["data"]
                        states.append(
                            (data["model"]["id"], data["thinkingLevel"], data["messageCount"])
                        )
            if command["type"] == "prompt":
                body = server.requests[-1]
                sent.append((body["model"], body.get("reasoning_effort")))
        rpc.stdin.close()
        assert rpc.wait(30) == 0
    assert states == [
        ("plain", "off", 0),  # the first models.json model with a key
        ("r", "low", 0),
        ("r", "high", 2),  # the session's model and level
        ("plain", "off", 0),  # a new session: the run's
        ("r", "off", 2),
        ("plain", "off", 0),
    ]
    assert sent == [("r", "high"), ("r", None)]


def test_a_new_session_file_states_its_model_and_level_before_the_first_prompt(
    serve: Callable[..., ChatServer], cli_env: dict[str, str], workdir: Path, tmp_path: Path
) -> None:
    """``pi`` writes a session's ``model_change`` and ``thinking_level_change`` when they
    are made, so a new file has them on the path above its first prompt; pitrio's file
    has the same lines in the same order (the types of ``pi`` 0.85.0's lines for the same
    two runs, recorded), pitrio's own state lines aside."""
    server = serve(
        lambda body: (
            text_reply("done")
            if body["messages"][-1]["role"] == "tool"
            else tool_reply("reading", "read", {"path": "notes.txt"})
        )
    )
    env, agent_dir = local_models_env(server, cli_env, tmp_path)
    for args in (["--model", "local/r", "-p", "read it"], ["-c", "-p", "again"]):
        done = subprocess.run(
            [sys.executable, "-m", "pitrio", "--cwd", str(workdir), *args],
            env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    (path,) = (agent_dir / "sessions").rglob("*.jsonl")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    shown = [line for line in lines if line["type"] != "custom"]
    assert [
        (
            line["type"],
            line.get("modelId") or line.get("thinkingLevel") or line.get("message", {}).get("role"),
        )
        for line in shown
    ] == [
        ("session", None),
        ("model_change", "r"),
        ("thinking_level_change", "medium"),
        *[("message", role) for role in ("user", "assistant", "toolResult", "assistant")] * 2,
    ]
    by_id = {line["id"]: line for line in lines if "id" in line}
    first_prompt = shown[3]
    above = [first_prompt["parentId"]]
    while above[-1] is not None:
        above.append(by_id[above[-1]]["parentId"])
    kinds = [by_id[i]["type"] for i in above[:-1]]
    assert {"model_change", "thinking_level_change"} <= set(kinds)  # on its path
