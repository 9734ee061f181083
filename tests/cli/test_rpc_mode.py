"""``--mode rpc`` through subprocess pipes against a scripted server: the commands'
responses, Pi's event shapes (``agent_settled``, ``compaction_*``, ``auto_retry_*``),
and consent asked over Pi's extension UI sub-protocol."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .conftest import ChatServer, Reply, last_user_text, text_reply, tool_reply
from .test_modes import pitrio


def rpc_script(body: dict[str, Any]) -> Reply:
    last = body["messages"][-1]
    if last["role"] == "tool":
        return text_reply("after tool")
    text = last_user_text(body)
    if text == "slow":  # runs until the test creates ./go
        command = "until [ -e go ]; do sleep 0.02; done; echo went"
        return tool_reply("Working.", "bash", {"command": command})
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
    """One response per command (ids echoed), events on stdout, steering mid-run.

    The commands after the prompt are sent while its tool call runs (the call waits for
    a file the test creates): sent before the run's first request, a steer is taken at
    the loop's start, as in Pi, and no tool would run at all."""
    server = serve(rpc_script)
    proc, read_until = _talk(server, cli_env, workdir, "--yes")
    with proc:
        _send(proc, {"id": "1", "type": "prompt", "message": "slow"})
        lines = read_until(lambda e: e["type"] == "tool_execution_start")
        _send(proc, {"id": "2", "type": "prompt", "message": "busy?"})
        _send(proc, {"id": "3", "type": "steer", "message": "steered"})
        _send(proc, {"id": "4", "type": "follow_up", "message": "later"})
        _send(proc, {"id": "5", "type": "get_state"})
        lines += read_until(lambda e: e.get("id") == "5")
        (workdir / "go").touch()
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.stdout is not None
        lines += [json.loads(raw) for raw in proc.stdout]  # to the end of the output
        assert proc.wait(timeout=30) == 0
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
    assert types[-2:] == ["agent_end", "agent_settled"]  # RpcClient waits for agent_settled
    assert not {"settled", "save_point"} & set(types)  # the harness's own names never leak
    queues = [line for line in lines if line["type"] == "queue_update"]
    assert queues[0] == {"type": "queue_update", "steering": ["steered"], "followUp": []}
    assert queues[-1] == {"type": "queue_update", "steering": [], "followUp": []}


def test_rpc_asks_before_mutating_tools_and_end_of_input_declines(
    serve: Callable[..., ChatServer], cli_env: dict[str, str], workdir: Path
) -> None:
    """Without --yes the client is asked (an extension UI ``confirm``); nobody can
    answer once the input has ended, so the call is declined."""
    lines, _ = rpc(serve, cli_env, workdir, [{"type": "prompt", "message": "write"}])
    (request,) = [line for line in lines if line["type"] == "extension_ui_request"]
    assert request["method"] == "confirm"
    assert request["title"] == "Allow write?"
    assert '"path": "new.txt"' in request["message"]
    ends = [line for line in lines if line["type"] == "tool_execution_end"]
    assert ends[0]["isError"] is True
    assert ends[0]["result"]["content"][0]["text"] == "The user declined to run this write call."
    assert not (workdir / "new.txt").exists()


def _talk(
    server: ChatServer, env: dict[str, str], cwd: Path, *extra: str
) -> tuple[subprocess.Popen[str], Callable[[Callable[[dict[str, Any]], bool]], list[Any]]]:
    argv = ["--cwd", str(cwd), "--base-url", server.url, "--model", "m", "--mode", "rpc"]
    argv += extra
    proc = subprocess.Popen(
        [sys.executable, "-m", "pitrio", *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )

    def read_until(done: Callable[[dict[str, Any]], bool]) -> list[Any]:
        assert proc.stdout is not None
        got = []
        for raw in proc.stdout:
            got.append(json.loads(raw))
            if done(got[-1]):
                return got
        raise AssertionError("the output ended early")

    return proc, read_until


def _send(proc: subprocess.Popen[str], command: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(command) + "\n")
    proc.stdin.flush()


def test_rpc_consent_is_answered_with_an_extension_ui_response(
    serve: Callable[..., ChatServer], cli_env: dict[str, str], workdir: Path
) -> None:
    server = serve(rpc_script)
    proc, read_until = _talk(server, cli_env, workdir)
    with proc:
        _send(proc, {"id": "1", "type": "prompt", "message": "write"})
        request = read_until(lambda e: e["type"] == "extension_ui_request")[-1]
        _send(proc, {"type": "extension_ui_response", "id": request["id"], "confirmed": True})
        events = read_until(lambda e: e["type"] == "agent_settled")
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
    (end,) = [e for e in events if e["type"] == "tool_execution_end"]
    assert end["isError"] is False
    assert (workdir / "new.txt").read_text() == "x"


def test_rpc_abort_declines_a_pending_consent(
    serve: Callable[..., ChatServer], cli_env: dict[str, str], workdir: Path
) -> None:
    server = serve(rpc_script)
    proc, read_until = _talk(server, cli_env, workdir)
    with proc:
        _send(proc, {"type": "prompt", "message": "write"})
        read_until(lambda e: e["type"] == "extension_ui_request")
        _send(proc, {"id": "a", "type": "abort"})
        events = read_until(lambda e: e.get("id") == "a")
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
    assert "agent_settled" in [e["type"] for e in events]
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


def test_rpc_commands_without_a_known_type_get_pis_responses(
    serve: Callable[..., ChatServer], cli_env: dict[str, str], workdir: Path
) -> None:
    """As ``pi --mode rpc`` 0.85.0 answers them (its lines, recorded): the type shown as
    JavaScript shows it, the command and id left out where Pi has none; a clone before
    anything was written says Pi's text."""
    server = serve(rpc_script)
    stdin = '{"type":null}\n{"type":true,"id":"x"}\n{"id":3}\n[1]\n{"id":"c","type":"clone"}\n'
    proc = pitrio(
        ["--base-url", server.url, "--model", "m", "--mode", "rpc"], cli_env, workdir, stdin
    )
    assert [json.loads(line) for line in proc.stdout.splitlines()] == [
        {"type": "response", "command": None, "success": False, "error": "Unknown command: null"},
        {
            "id": "x",
            "type": "response",
            "command": True,
            "success": False,
            "error": "Unknown command: true",
        },
        {"id": 3, "type": "response", "success": False, "error": "Unknown command: undefined"},
        {"type": "response", "success": False, "error": "Unknown command: undefined"},
        {
            "id": "c",
            "type": "response",
            "command": "clone",
            "success": False,
            "error": "This session has not been saved yet. Wait for the first assistant "
            "response before cloning or forking it.",
        },
    ]


# -- Pi's coding-agent event shapes ----------------------------------------------------

PI_EVENT_KEYS = {
    "auto_retry_start": {"type", "attempt", "maxAttempts", "delayMs", "errorMessage"},
    "auto_retry_end": {"type", "success", "attempt"},
    "compaction_start": {"type", "reason"},
    "compaction_end": {"type", "reason", "result", "aborted", "willRetry"},
}


def harness_lines(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    agent = {"agent_start", "agent_end", "agent_settled", "turn_start", "turn_end", "response"}
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
    assert [e["type"] for e in lines if e["type"].startswith("agent_")] == [
        "agent_start",
        "agent_end",
        "agent_start",
        "agent_end",
        "agent_settled",
    ]
    assert [e["willRetry"] for e in lines if e["type"] == "agent_end"] == [True, False]
    start, end = extra
    assert set(start) == PI_EVENT_KEYS["auto_retry_start"]
    assert (start["attempt"], start["maxAttempts"]) == (1, 3)
    assert isinstance(start["delayMs"], int)
    assert start["delayMs"] > 100  # milliseconds, not the harness's seconds
    assert "overloaded" in start["errorMessage"]
    assert end == {"type": "auto_retry_end", "success": True, "attempt": 1}
    assert requests == 2


def test_rpc_sends_pis_compaction_events(
    serve: Callable[..., ChatServer], cli_env: dict[str, str], workdir: Path
) -> None:
    """An overflow error: ``compaction_start`` (reason overflow) and ``compaction_end``
    with the result and ``willRetry``, then the retried answer; a ``compact`` command
    sends the same events with reason ``manual``. (The second prompt is long: past what
    a compaction keeps, so the first exchange is there to summarise.)"""
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
        for text in ("one", "two " + "x" * 90_000, "three"):  # ~22,500 tokens
            assert send({"type": "prompt", "message": text})["success"]
            wait_idle()
        compacted = send({"type": "compact"})
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
    assert compacting_seen  # get_state said isCompacting while the summary was requested
    extra = [e for e in harness_lines(lines) if e["type"].startswith("compaction_")]
    assert [(e["type"], e["reason"]) for e in extra] == [
        ("compaction_start", "overflow"),
        ("compaction_end", "overflow"),
        ("compaction_start", "manual"),
        ("compaction_end", "manual"),
    ]
    end = extra[1]
    assert set(end) == PI_EVENT_KEYS["compaction_end"]
    assert (end["aborted"], end["willRetry"]) == (False, True)
    assert {"summary", "firstKeptEntryId", "tokensBefore", "estimatedTokensAfter"} <= set(
        end["result"]
    )
    assert end["result"]["summary"] == "answer 4"  # the summary request's answer
    assert requests[4] == "three"  # the overflowed request, retried after compaction
    manual_end = extra[3]
    # The retried turn is the kept tail: nothing older is left to summarise (Pi's text)
    assert compacted["error"] == "Nothing to compact (session too small)"
    assert manual_end["errorMessage"] == f"Compaction failed: {compacted['error']}"


def test_rpc_state_model_is_camel_case(
    serve: Callable[..., ChatServer], cli_env: dict[str, str], workdir: Path
) -> None:
    lines, server = rpc(serve, cli_env, workdir, [{"type": "get_state"}])
    model = responses(lines)[0]["data"]["model"]
    assert model["baseUrl"] == server.url
    assert model["contextWindow"] == 128000
    assert set(model["cost"]) == {"input", "output", "cacheRead", "cacheWrite"}
    assert not [key for key in model if "_" in key]


def test_rpc_state_of_a_session_file_and_small_session_compaction(
    serve: Callable[..., ChatServer], cli_env: dict[str, str], workdir: Path, tmp_path: Path
) -> None:
    """``--session FILE``: ``sessionFile`` is that file; ``set_session_name`` shows in
    ``sessionName``; the thinking level is clamped to the model (no reasoning: off); a
    tiny session has nothing to compact (Pi's text); the prompt is answered before its
    first event."""
    session_file = tmp_path / "chat.jsonl"
    lines, _ = rpc(
        serve,
        cli_env,
        workdir,
        [
            {"id": "p", "type": "prompt", "message": "hello"},
            {"type": "set_session_name", "name": "  my work  "},
            {"type": "set_thinking_level", "level": "high"},
            {"type": "compact"},
            {"type": "get_state"},
        ],
        "--session",
        str(session_file),
    )
    assert lines[0] == {"id": "p", "type": "response", "command": "prompt", "success": True}
    assert lines[1] == {"type": "agent_start"}
    got = {r["command"]: r for r in responses(lines)}
    state = got["get_state"]["data"]
    assert state["sessionFile"] == str(session_file)
    assert state["sessionName"] == "my work"
    assert state["thinkingLevel"] == "off"
    assert got["compact"]["error"] == "Nothing to compact (session too small)"
    (info,) = [line for line in lines if line["type"] == "session_info_changed"]
    assert info == {"type": "session_info_changed", "name": "my work"}
    end = next(line for line in lines if line["type"] == "compaction_end")
    assert end == {
        "type": "compaction_end",
        "reason": "manual",
        "aborted": False,
        "willRetry": False,
        "errorMessage": "Compaction failed: Nothing to compact (session too small)",
    }


def test_rpc_thinking_levels_of_a_reasoning_model(
    serve: Callable[..., ChatServer], cli_env: dict[str, str], workdir: Path
) -> None:
    """``--thinking low`` makes the --base-url model a reasoning one: Pi's levels
    (no ``xhigh``/``max`` without a level map), cycling, and ``thinking_level_changed``
    only when the level changes."""
    lines, _ = rpc(
        serve,
        cli_env,
        workdir,
        [
            {"type": "get_available_thinking_levels"},
            {"type": "set_thinking_level", "level": "xhigh"},
            {"type": "set_thinking_level", "level": "high"},
            {"type": "cycle_thinking_level"},
            {"type": "get_state"},
        ],
        "--thinking",
        "low",
    )
    got = responses(lines)
    assert got[0]["data"] == {"levels": ["off", "minimal", "low", "medium", "high"]}
    assert got[3]["data"] == {"level": "off"}  # high -> the next one round: off
    assert got[4]["data"]["thinkingLevel"] == "off"
    changes = [line["level"] for line in lines if line["type"] == "thinking_level_changed"]
    assert changes == ["high", "off"]  # xhigh clamps to high; high again is no change


def test_rpc_bash_output_reaches_the_next_prompt(
    serve: Callable[..., ChatServer], cli_env: dict[str, str], workdir: Path
) -> None:
    """``bash`` streams ``bash_execution_update`` (with the command's id), answers with
    the result, and the next prompt's context has Pi's ``Ran `...``` message."""
    server = serve(rpc_script)
    proc, read_until = _talk(server, cli_env, workdir)
    with proc:
        _send(proc, {"id": "b", "type": "bash", "command": "echo hi"})
        lines = read_until(lambda e: e.get("id") == "b" and e["type"] == "response")
        _send(proc, {"type": "prompt", "message": "what ran?"})
        read_until(lambda e: e["type"] == "agent_settled")
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
    assert lines[0] == {"type": "bash_execution_update", "id": "b", "delta": "hi\n"}
    assert lines[-1]["data"] == {
        "output": "hi\n",
        "exitCode": 0,
        "cancelled": False,
        "truncated": False,
    }
    texts = [last_user_text({"messages": [m]}) for m in server.requests[0]["messages"]]
    assert any(t.startswith("Ran `echo hi`") for t in texts)  # Pi's bashExecution for the LLM


def test_rpc_a_command_with_bad_fields_is_an_error_response(
    serve: Callable[..., ChatServer], cli_env: dict[str, str], workdir: Path
) -> None:
    lines, _ = rpc(
        serve,
        cli_env,
        workdir,
        [
            {"id": "1", "type": "get_entries", "since": 5},
            {"id": "2", "type": "set_steering_mode", "mode": "sometimes"},
            {"id": "3", "type": "set_session_name", "name": "   "},
            {"id": "4", "type": "fork", "entryId": "nope"},
            {"id": "5", "type": "get_state"},
        ],
    )
    got = {r["id"]: r for r in responses(lines)}
    assert got["1"]["error"] == "Entry not found: 5"
    assert got["2"]["error"] == 'mode must be "all" or "one-at-a-time"; got \'sometimes\''
    assert got["3"]["error"] == "Session name cannot be empty"
    assert got["4"]["error"] == "Invalid entry ID for forking"
    assert got["5"]["success"] is True
    assert "sessionFile" in got["5"]["data"]


def test_rpc_starts_with_the_thinking_level_clamped_to_the_model(
    cli_env: dict[str, str], workdir: Path
) -> None:
    """gpt-4.1 does not reason: ``--thinking high`` starts as ``off`` (no request made)."""
    env = {**cli_env, "OPENAI_API_KEY": "sk-unused"}
    stdin = json.dumps({"type": "get_state"}) + "\n"
    args = ["--model", "openai/gpt-4.1", "--thinking", "high", "--mode", "rpc"]
    proc = pitrio(args, env, workdir, stdin)
    assert proc.returncode == 0, proc.stderr
    (state,) = [json.loads(line) for line in proc.stdout.splitlines()]
    assert state["data"]["thinkingLevel"] == "off"
    assert state["data"]["model"]["id"] == "gpt-4.1"


def test_rpc_a_prompt_sent_on_agent_end_runs_after_the_run_settles(
    serve: Callable[..., ChatServer], cli_env: dict[str, str], workdir: Path
) -> None:
    """A client that sends its next prompt as soon as it reads ``agent_end`` (before
    ``agent_settled``, while the session's last write is finishing) gets a second run,
    as from ``pi``, whose run has settled by the time it reads the line; not "Agent is
    already processing"."""
    server = serve(lambda body: text_reply(f"re: {last_user_text(body)}"))
    proc, read_until = _talk(server, cli_env, workdir)
    with proc:
        _send(proc, {"id": "1", "type": "prompt", "message": "one"})
        first = read_until(lambda e: e["type"] == "agent_end")
        _send(proc, {"id": "2", "type": "prompt", "message": "two"})
        before = read_until(lambda e: e["type"] == "response" and e.get("id") == "2")
        assert before[-1]["success"] is True, before[-1]
        assert [e["type"] for e in before] == ["agent_settled", "response"]  # the first's
        run = read_until(lambda e: e["type"] == "agent_settled")
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
    assert [e["type"] for e in first].count("agent_start") == 1
    assert run[0]["type"] == "agent_start"
    assert [last_user_text(body) for body in server.requests] == ["one", "two"]
