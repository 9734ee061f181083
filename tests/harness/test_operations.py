"""Operation records in Pi's storage shape, both ways with Pi's own harness.

Pi 0.85.0's AgentHarness, killed mid-tool (``node/pi_run_and_hang.mjs``), leaves a
session whose transactions are the reference: the prompt with ``pi.op.meta``,
``pi.op.state: starting`` and the lane state; ``checkpoint``; ``assistant.ready``;
``assistant.effect_pending``; the response with a ``tools`` batch of ``planned`` calls;
the call's arguments with the call ``effect_pending``. A pitrio harness killed at the
same point (the child of test_durability.py) must leave the same transactions (Pi's
streamed frames and usage rows aside, which pitrio does not write), Pi's ``restoreLane``
must find its operation, and pitrio must restore and finish the run Pi left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import trio

from pitrio import Model, TextContent, Tool, ToolResultMessage, text_result
from pitrio.harness import (
    Harness,
    JsonlSessionStore,
    MessageEntry,
    restore_lane,
    restore_session,
)
from pitrio.testing import ScriptedModel, ScriptedResponse

from .test_durability import _kill_mid_tool, _where

NODE_DIR = Path(__file__).parent / "node"
MODEL = Model(id="scripted", api="scripted", provider="local", context_window=200_000)
INTERRUPTED = (
    "[Tool execution was interrupted. The preceding output is the latest durable progress "
    "snapshot; newer live output may be missing, and the external outcome is unknown.]"
)


def _env(node_modules: Path) -> dict[str, str]:
    return {**os.environ, "PITRIO_PI_NODE_MODULES": str(node_modules)}


async def _pi_killed_mid_tool(
    node_modules: Path, root: Path, session_id: str, replay: str = "never", *, memo: bool = False
) -> Path:
    """Pi's harness runs until its tool (with that replay policy) starts (with ``memo``:
    and has set a memo and a checkpoint); then it is SIGKILLed. Its file."""
    started = root / "started"
    _mkdir(root)
    with trio.fail_after(60):
        proc = await trio.lowlevel.open_process(
            [
                "node",
                str(NODE_DIR / "pi_run_and_hang.mjs"),
                *(str(root), session_id, str(started), replay, "memo" if memo else "-"),
            ],
            env=_env(node_modules),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            while not started.exists():
                assert proc.poll() is None, "Pi's harness ended before its tool ran"
                await trio.sleep(0.05)
        finally:
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
    started.unlink()
    return _only_jsonl(root)


def _mkdir(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)


def _only_jsonl(root: Path) -> Path:
    (path,) = root.rglob("*.jsonl")
    return path


async def _pi(node_modules: Path, command: str, *args: str) -> Any:
    """``pi_session.mjs COMMAND ARGS``, or ``pi_resume.mjs ARGS`` for ``resume``,
    ``pi_prompt.mjs ARGS`` for ``prompt``."""
    own = {"resume": "pi_resume.mjs", "prompt": "pi_prompt.mjs"}
    script = [own[command]] if command in own else ["pi_session.mjs", command]
    with trio.fail_after(60):
        result = await trio.run_process(
            ["node", str(NODE_DIR / script[0]), *script[1:], *args],
            capture_stdout=True,
            capture_stderr=True,
            env=_env(node_modules),
            check=False,
        )
    assert result.returncode == 0, result.stderr.decode()
    return json.loads(result.stdout)


def _shape(path: Path) -> list[list[Any]]:
    """Each transaction of a JSONL session as what it writes (ids and times left out):
    entries by role, values by namespace and operation state (with the calls' statuses
    and replay policies). Pi's streamed frames, usage rows and the initial branch tip
    (which pitrio writes with the first entry) are left out."""
    out: list[list[Any]] = []
    for line in path.read_text().splitlines()[1:]:
        data = json.loads(line)
        shaped: list[Any] = []
        for write in data if isinstance(data, list) else [data]:
            kind, namespace = write["kind"], write.get("namespace")
            if kind == "usage" or namespace == "pi.pending.assistant_frame":
                continue
            if kind == "entry":
                shaped.append(("entry", write["message"]["role"]))
                continue
            value = write.get("value")
            if namespace == "pi.branch.tip" and value is None:
                continue
            if namespace == "pi.op.state" and value is not None:
                calls = value.get("batch", {}).get("calls", [])
                statuses = [(c["status"], c.get("replay")) for c in calls]
                shaped.append((namespace, write["op"], value["at"], statuses))
            elif namespace == "pi.lane.config":
                shaped.append((namespace, write["op"], value["model"]))
            elif namespace == "pi.lane.state":
                current = value["currentOperationId"] is not None
                shaped.append((namespace, write["op"], current, value["lastOperationId"]))
            else:
                shaped.append((namespace, write["op"]))
        if shaped:
            out.append(shaped)
    return out


async def test_a_run_killed_mid_tool_leaves_the_transactions_pi_leaves(
    tmp_path: Path, pi_node_modules: Path
) -> None:
    pi_file = await _pi_killed_mid_tool(pi_node_modules, tmp_path / "pi", "pi-run")
    where = _where("jsonl", tmp_path)
    await _kill_mid_tool("jsonl", where, "pitrio-run")
    (info,) = await JsonlSessionStore(where).list()
    assert info.path is not None
    ours, pis = _shape(Path(info.path)), _shape(pi_file)
    # Pi's first transaction states the lane (tip, configuration, idle state) at creation;
    # pitrio's harness states it when its model is set: the same values.
    assert ours[0] == [w for w in pis[0] if w[0] != "pi.branch.tip"]
    assert ours[1:] == pis[1:]
    assert pis[-1][-1] == ("pi.op.state", "set", "tools", [("effect_pending", "never")])


async def test_pi_restores_the_operation_of_a_run_killed_mid_tool(
    tmp_path: Path, pi_node_modules: Path
) -> None:
    where = _where("jsonl", tmp_path)
    await _kill_mid_tool("jsonl", where, "pitrio-run")
    (info,) = await JsonlSessionStore(where).list()
    assert info.path is not None
    pi = await _pi(pi_node_modules, "operation", info.path)
    session = await JsonlSessionStore(where).open("pitrio-run", read_only=True)
    ours = restore_lane(session).operation
    assert ours is not None
    assert pi["operation"] == {"meta": dict(ours.meta), "state": dict(ours.state)}
    assert pi["operation"]["meta"]["intent"]["kind"] == "run"
    batch = pi["operation"]["state"]["batch"]
    reply = session.get_entry(batch["assistantEntryId"])
    assert isinstance(reply, MessageEntry)
    assert reply.message.role == "assistant"
    assert batch["configuration"]["activeToolNames"] == ["slow"]
    assert batch["calls"][0]["status"] == "effect_pending"
    assert session.get_value("pi.op.tool_args", f"{ours.id}:{batch['turnId']}:0") == {}
    await session.close()


async def test_pitrio_finishes_the_run_pi_left_mid_tool(
    tmp_path: Path, pi_node_modules: Path
) -> None:
    root = tmp_path / "pi"
    path = await _pi_killed_mid_tool(pi_node_modules, root, "pi-run")
    ran: list[str] = []

    async def slow(call_id: str, params: Any, sig: Any, on_update: Any) -> Any:
        ran.append(call_id)
        return text_result("slow ran")

    store = JsonlSessionStore(root)
    session = await store.open("pi-run")
    lanes = restore_session(session)
    main = lanes["main"].operation
    assert main is not None
    assert (main.intent, main.at) == ("run", "tools")
    harness = Harness(
        model=MODEL,
        stream_fn=ScriptedModel([ScriptedResponse.text("finished")]),
        session=session,
        tools=[Tool(name="slow", execute=slow)],
    )
    assert harness.interrupted == main
    events: list[str] = []
    harness.subscribe(lambda event: events.append(event.type))
    await harness.resume()
    # Pi's tool has no replay policy ("never"): it is not run again; its call is
    # settled with Pi's interrupted result, and the run goes on to its answer.
    assert ran == []
    messages = list(session.build_context().messages)
    assert [m.role for m in messages] == ["user", "assistant", "toolResult", "assistant"]
    result = messages[2]
    assert isinstance(result, ToolResultMessage)
    assert result.is_error
    assert result.content == (TextContent(text=INTERRUPTED),)
    # Pi's recovered turn: the interrupted call's tool_end, its result, the turn's end.
    assert events[:7] == ["recovery_start", "turn_start", "tool_execution_end", "message_start",
                          "message_end", "turn_end", "recovery_end"]  # fmt: skip
    assert events[-1] == "settled"
    assert restore_lane(session).operation is None
    # The tool result took the id Pi reserved for it.
    call = main.state["batch"]["calls"][0]
    assert (
        session.get_entry(call["resultEntryId"]).parent_id
        == main.state["batch"]["assistantEntryId"]
    )
    await session.close()
    # Pi reads the finished file: the lane idle, the run's result recorded.
    lanes_pi = await _pi(pi_node_modules, "lanes", str(path))
    assert lanes_pi["lanes"]["main"]["operation"] is None
    after = await _pi(pi_node_modules, "operation", str(path))
    assert after == {"operation": None, "lastOperationId": main.id}


async def test_pi_finishes_the_run_pitrio_left_mid_tool(
    tmp_path: Path, pi_node_modules: Path
) -> None:
    where = _where("jsonl", tmp_path)
    await _kill_mid_tool("jsonl", where, "pitrio-run")
    (info,) = await JsonlSessionStore(where).list()
    assert info.path is not None
    # Pi's AgentHarness.create finds the open run; lane.resume() drives it to its end: the
    # call pitrio recorded as started, with replay "never", ends as interrupted, never run.
    pi = await _pi(pi_node_modules, "resume", info.path, "never")
    assert pi["open"] == [{"lane": "main", "kind": "run"}]
    assert pi["result"] == "completed"
    assert pi["ran"] == 0
    assert pi["messages"] == [
        ["user", "run the slow tool"],
        ["assistant", ""],
        ["toolResult", INTERRUPTED],
        ["assistant", "finished"],
    ]
    # pitrio reads what Pi finished: the lane idle, the run's result Pi's.
    session = await JsonlSessionStore(where).open("pitrio-run", read_only=True)
    lane = restore_lane(session)
    assert lane.operation is None
    assert lane.last_operation_id is not None
    result = session.get_value("pi.result", lane.last_operation_id)
    assert isinstance(result, dict)
    assert result["status"] == "completed"
    roles = [m.role for m in session.build_context().messages]
    assert roles == ["user", "assistant", "toolResult", "assistant"]
    await session.close()


async def test_pitrio_runs_its_own_tool_again_for_a_safe_call_pi_left(
    tmp_path: Path, pi_node_modules: Path
) -> None:
    root = tmp_path / "pi"
    await _pi_killed_mid_tool(pi_node_modules, root, "pi-run", replay="safe")
    ran: list[str] = []

    async def slow(call_id: str, params: Any, sig: Any, on_update: Any) -> Any:
        ran.append(call_id)
        return text_result("slow ran")

    session = await JsonlSessionStore(root).open("pi-run")
    harness = Harness(
        model=MODEL,
        stream_fn=ScriptedModel([ScriptedResponse.text("finished")]),
        session=session,
        tools=[Tool(name="slow", execute=slow, replay="safe")],
    )
    interrupted = harness.interrupted
    assert interrupted is not None
    assert interrupted.state["batch"]["calls"][0]["replay"] == "safe"
    await harness.resume()
    # Both Pi's record and pitrio's tool say "safe": the call runs again, with the
    # arguments Pi recorded, and its result is the tool's.
    assert ran == ["call_1"]
    result = list(session.build_context().messages)[2]
    assert isinstance(result, ToolResultMessage)
    assert (result.is_error, result.content) == (False, (TextContent(text="slow ran"),))
    await session.close()
    # The same record with a tool that does not say "safe": interrupted, not run.
    root2 = tmp_path / "pi2"
    await _pi_killed_mid_tool(pi_node_modules, root2, "pi-run", replay="safe")
    session = await JsonlSessionStore(root2).open("pi-run")
    harness = Harness(
        model=MODEL,
        stream_fn=ScriptedModel([ScriptedResponse.text("finished")]),
        session=session,
        tools=[Tool(name="slow", execute=slow)],
    )
    await harness.resume()
    assert ran == ["call_1"]
    result = list(session.build_context().messages)[2]
    assert isinstance(result, ToolResultMessage)
    assert result.content == (TextContent(text=INTERRUPTED),)
    await session.close()
