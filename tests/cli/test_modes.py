"""``--mode json`` and ``--mode rpc`` through subprocess pipes, against the offline
replay and a scripted OpenAI-compatible server on loopback."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .conftest import ChatServer, Reply, last_user_text, text_reply, tool_reply


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
    assert [e["toolName"] for e in ends] == ["ls", "read", "read", "bash", "edit", "bash"]
    outputs = [e["result"]["content"][0]["text"] for e in ends if e["toolName"] == "bash"]
    assert "AssertionError" in outputs[0]
    assert outputs[1] == "all checks passed"
    assert events[-1]["type"] == "agent_end"


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


def rpc_script(body: dict[str, Any]) -> Reply:
    last = body["messages"][-1]
    if last["role"] == "tool":
        return text_reply("after tool")
    text = last_user_text(body)
    if text == "slow":
        return tool_reply("Working.", "bash", {"command": "sleep 1 && echo slept"})
    if text == "write":
        return tool_reply("Writing.", "write", {"path": "new.txt", "content": "x"})
    return text_reply(f"echo: {text}")


def rpc(
    serve: Callable[..., ChatServer],
    env: dict[str, str],
    cwd: Path,
    commands: list[dict[str, Any]],
    *extra: str,
) -> tuple[list[dict[str, Any]], ChatServer]:
    server = serve(rpc_script)
    stdin = "".join(json.dumps(c) + "\n" for c in commands)
    proc = pitrio(
        ["--base-url", server.url, "--model", "m", "--mode", "rpc", *extra], env, cwd, stdin
    )
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()], server


def responses(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line for line in lines if line["type"] == "response"]


def test_rpc_prompt_steer_follow_up_and_state(
    serve: Callable[..., ChatServer], cli_env: dict[str, str], workdir: Path
) -> None:
    """One response per command (ids echoed), events on stdout, steering mid-run."""
    lines, server = rpc(
        serve,
        cli_env,
        workdir,
        [
            {"id": "1", "type": "prompt", "message": "slow"},
            {"id": "2", "type": "prompt", "message": "busy?"},
            {"id": "3", "type": "steer", "message": "steered"},
            {"id": "4", "type": "follow_up", "message": "later"},
            {"id": "5", "type": "get_state"},
        ],
        "--yes",
    )
    got = responses(lines)
    assert [(r.get("id"), r["command"], r["success"]) for r in got] == [
        ("1", "prompt", True),
        ("2", "prompt", False),
        ("3", "steer", True),
        ("4", "follow_up", True),
        ("5", "get_state", True),
    ]
    assert "streamingBehavior" in got[1]["error"]
    state = got[4]["data"]
    assert state["isStreaming"] is True
    assert state["pendingMessageCount"] == 2
    assert state["sessionFile"].endswith(".jsonl")
    users = [
        last_user_text({"messages": [m]})
        for m in server.requests[-1]["messages"]
        if m["role"] == "user"
    ]
    assert users == ["slow", "steered", "later"]
    types = [line["type"] for line in lines]
    assert "tool_execution_end" in types
    assert types[-1] == "agent_end"  # Pi sends no harness-only events (settled, save_point)
    assert not {"settled", "save_point"} & set(types)


def test_rpc_refuses_mutating_tools_without_yes(
    serve: Callable[..., ChatServer], cli_env: dict[str, str], workdir: Path
) -> None:
    lines, _ = rpc(serve, cli_env, workdir, [{"type": "prompt", "message": "write"}])
    ends = [line for line in lines if line["type"] == "tool_execution_end"]
    assert ends[0]["isError"] is True
    assert "--mode rpc cannot ask for" in ends[0]["result"]["content"][0]["text"]
    assert not (workdir / "new.txt").exists()


def test_rpc_errors_and_other_commands(
    serve: Callable[..., ChatServer], cli_env: dict[str, str], workdir: Path
) -> None:
    lines, _ = rpc(
        serve,
        cli_env,
        workdir,
        [
            {"type": "set_model", "provider": "openai", "modelId": "gpt-4.1"},
            {"type": "set_thinking_level", "level": "bogus"},
            {"type": "set_thinking_level", "level": "low"},
            {"type": "frobnicate"},
            {"type": "abort"},
            {"type": "get_messages"},
            {"type": "new_session"},
        ],
    )
    got = responses(lines)
    assert [(r["command"], r["success"]) for r in got] == [
        ("set_model", False),
        ("set_thinking_level", False),
        ("set_thinking_level", True),
        ("frobnicate", False),
        ("abort", True),
        ("get_messages", True),
        ("new_session", True),
    ]
    assert got[0]["error"].startswith("Model not found: openai/gpt-4.1")
    assert got[3]["error"] == "Unknown command: frobnicate"
    assert got[5]["data"] == {"messages": []}


def test_rpc_parse_errors_are_responses(
    serve: Callable[..., ChatServer], cli_env: dict[str, str], workdir: Path
) -> None:
    server = serve(rpc_script)
    proc = pitrio(
        ["--base-url", server.url, "--model", "m", "--mode", "rpc"],
        cli_env,
        workdir,
        'not json\n{"type": "prompt", "message": "a\u2028b"}\r\n',
    )
    # LF is the only record separator (U+2028 inside a JSON string is not one)
    lines = [json.loads(line) for line in proc.stdout.split("\n") if line]
    got = responses(lines)
    assert got[0]["command"] == "parse"
    assert got[0]["success"] is False
    assert got[0]["error"].startswith("Failed to parse command:")
    assert got[1] == {"type": "response", "command": "prompt", "success": True}
    assert last_user_text(server.requests[0]) == "a\u2028b"  # U+2028 is not a line break


# -- Pi's coding-agent event shapes ----------------------------------------------------

PI_EVENT_KEYS = {
    "auto_retry_start": {"type", "attempt", "maxAttempts", "delayMs", "errorMessage"},
    "auto_retry_end": {"type", "success", "attempt"},
    "auto_compaction_start": {"type", "reason"},
    "auto_compaction_end": {"type", "result", "aborted", "willRetry"},
}


def harness_lines(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    agent = {"agent_start", "agent_end", "turn_start", "turn_end", "response"}
    return [
        line
        for line in lines
        if line["type"] not in agent
        and not line["type"].startswith(("message_", "tool_execution_"))
    ]


def test_rpc_sends_pis_auto_retry_events(
    serve: Callable[..., ChatServer], cli_env: dict[str, str], workdir: Path
) -> None:
    requests = 0

    def script(body: dict[str, Any]) -> Reply:
        nonlocal requests
        requests += 1
        if requests == 1:
            return [{"status": 503, "body": {"error": {"message": "overloaded"}}}]
        return text_reply("recovered")

    server = serve(script)
    stdin = json.dumps({"type": "prompt", "message": "hi"}) + "\n"
    proc = pitrio(
        ["--base-url", server.url, "--model", "m", "--mode", "rpc"], cli_env, workdir, stdin
    )
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    extra = harness_lines(lines)
    assert [e["type"] for e in extra] == ["auto_retry_start", "auto_retry_end"]
    start, end = extra
    assert set(start) == PI_EVENT_KEYS["auto_retry_start"]
    assert (start["attempt"], start["maxAttempts"]) == (1, 3)
    assert isinstance(start["delayMs"], int)
    assert start["delayMs"] > 100  # milliseconds, not the harness's seconds
    assert "overloaded" in start["errorMessage"]
    assert end == {"type": "auto_retry_end", "success": True, "attempt": 1}
    assert requests == 2


def test_rpc_sends_pis_auto_compaction_events_and_a_manual_compact_none(
    serve: Callable[..., ChatServer], cli_env: dict[str, str], workdir: Path
) -> None:
    """An overflow error: ``auto_compaction_start`` (reason overflow) and
    ``auto_compaction_end`` with the result and ``willRetry``, then the retried answer;
    the ``compact`` command answers in its response only, as Pi's does."""
    requests: list[str] = []
    summarising = threading.Event()  # the summary request is held until get_state saw it

    def script(body: dict[str, Any]) -> Reply:
        requests.append(last_user_text(body))
        if len(requests) == 3:
            message = "This model's maximum context length is 8192 tokens. However, your "
            message += "messages resulted in 9000 tokens."
            return [{"status": 400, "body": {"error": {"message": message}}}]
        if len(requests) == 4:
            return [{"wait": summarising}, *text_reply("answer 4")]
        return text_reply(f"answer {len(requests)}")

    server = serve(script)
    argv = ["--cwd", str(workdir), "--base-url", server.url, "--model", "m", "--mode", "rpc"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "pitrio", *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=cli_env,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    lines: list[dict[str, Any]] = []

    def send(command: dict[str, Any]) -> dict[str, Any]:
        assert proc.stdin is not None
        assert proc.stdout is not None
        proc.stdin.write(json.dumps(command) + "\n")
        proc.stdin.flush()
        for raw in proc.stdout:
            lines.append(json.loads(raw))
            if lines[-1]["type"] == "response":
                return lines[-1]
        raise AssertionError(proc.stderr)

    compacting_seen = False

    def wait_idle() -> None:
        nonlocal compacting_seen
        while True:
            state = send({"type": "get_state"})["data"]
            if state["isCompacting"]:
                compacting_seen = True
                summarising.set()
            if not state["isStreaming"]:
                return

    with proc, proc.stdin, proc.stdout:
        for text in ("one", "two", "three"):
            assert send({"type": "prompt", "message": text})["success"]
            wait_idle()
        compacted = send({"type": "compact"})
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
    assert compacting_seen  # get_state said isCompacting while the summary was requested
    extra = harness_lines(lines)
    assert [e["type"] for e in extra] == ["auto_compaction_start", "auto_compaction_end"]
    start, end = extra
    assert start == {"type": "auto_compaction_start", "reason": "overflow"}
    assert set(end) == PI_EVENT_KEYS["auto_compaction_end"]
    assert (end["aborted"], end["willRetry"]) == (False, True)
    assert set(end["result"]) == {"summary", "firstKeptEntryId", "tokensBefore", "details"}
    assert end["result"]["summary"] == "answer 4"  # the summary request's answer
    assert requests[4] == "three"  # the overflowed request, retried after compaction
    assert compacted["success"] is True
    assert set(compacted["data"]) == {"summary", "firstKeptEntryId", "tokensBefore", "details"}


def test_rpc_state_model_is_camel_case(
    serve: Callable[..., ChatServer], cli_env: dict[str, str], workdir: Path
) -> None:
    lines, server = rpc(serve, cli_env, workdir, [{"type": "get_state"}])
    model = responses(lines)[0]["data"]["model"]
    assert model["baseUrl"] == server.url
    assert model["contextWindow"] == 128000
    assert set(model["cost"]) == {"input", "output", "cacheRead", "cacheWrite"}
    assert not [key for key in model if "_" in key]
