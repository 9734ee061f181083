"""Session writes are durable as they happen: a harness killed mid-tool loses nothing it
recorded.

A child process runs a harness on a JSONL, SQLite or Pi coding-agent (v3) session with a
scripted model (one tool call, then text) and a tool that reports on stdout and then
blocks; the test kills it with SIGKILL while the tool runs. The session must then hold
the prompt and the assistant's tool call (Pi's harness appends each transaction as it
commits; killed the same way it keeps them too), and pitrio (and, for JSONL, Pi) must
load it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from pitrio import AssistantMessage, Model, ToolCall, UserMessage
from pitrio.harness import (
    Harness,
    JsonlSessionStore,
    MessageEntry,
    PiSessionStore,
    SessionStore,
    SqliteSessionStore,
)
from pitrio.testing import ScriptedModel

NODE_DIR = Path(__file__).parent / "node"

CHILD = r"""
import sys

import trio

from pitrio import Model, Tool, text_result
from pitrio.harness import Harness, JsonlSessionStore, PiSessionStore, SqliteSessionStore
from pitrio.testing import ScriptedModel, ScriptedResponse

kind, where, session_id = sys.argv[1:4]
STORES = {"jsonl": JsonlSessionStore, "sqlite": SqliteSessionStore, "pi": PiSessionStore}


async def blocking(call_id, params, signal, on_update):
    sys.stdout.write("tool started\n")
    sys.stdout.flush()
    await trio.sleep_forever()
    return text_result("never")


async def main():
    store = STORES[kind](where)
    session = await store.create(cwd="/work/project", session_id=session_id)
    model = Model(id="scripted", api="scripted", provider="local", context_window=200_000)
    stream = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("call_1", "slow", {})),
            ScriptedResponse.text("finished"),
        ]
    )
    tool = Tool(name="slow", description="slow", execute=blocking, parameters={"type": "object"})
    harness = Harness(model=model, stream_fn=stream, session=session, tools=[tool])
    await harness.set_model(model)
    await harness.prompt("run the slow tool")


trio.run(main)
"""

MODEL = Model(id="scripted", api="scripted", provider="local", context_window=200_000)


def _store(kind: str, where: Path) -> SessionStore:
    if kind == "pi":
        return PiSessionStore(where)
    return JsonlSessionStore(where) if kind == "jsonl" else SqliteSessionStore(where)


def _where(kind: str, tmp_path: Path) -> Path:
    return tmp_path / "sessions.db" if kind == "sqlite" else tmp_path / "sessions"


async def _kill_mid_tool(kind: str, where: Path, session_id: str) -> None:
    """Run the child until its tool runs, then SIGKILL it."""
    with trio.fail_after(60):
        proc = await trio.lowlevel.open_process(
            [sys.executable, "-c", CHILD, kind, str(where), session_id],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            assert proc.stdout is not None
            seen = b""
            while b"tool started\n" not in seen:
                chunk = await proc.stdout.receive_some()
                if not chunk:
                    assert proc.stderr is not None
                    err = await proc.stderr.receive_some()
                    pytest.fail(f"the child ended before its tool ran: {err.decode()}")
                seen += chunk
        finally:
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
        assert proc.returncode == -signal.SIGKILL


@pytest.mark.parametrize("kind", ["jsonl", "sqlite", "pi"])
async def test_a_harness_killed_mid_tool_leaves_the_prompt_and_the_tool_call(
    kind: str, tmp_path: Path
) -> None:
    where = _where(kind, tmp_path)
    await _kill_mid_tool(kind, where, "killed-mid-tool")

    store = _store(kind, where)
    session = await store.open("killed-mid-tool")
    messages = [e.message for e in session.entries if isinstance(e, MessageEntry)]
    assert [m.role for m in messages] == ["user", "assistant"]
    prompt, reply = messages
    assert isinstance(prompt, UserMessage)
    assert prompt.content[0].text == "run the slow tool"  # type: ignore[union-attr]
    assert isinstance(reply, AssistantMessage)
    assert reply.stop_reason == "toolUse"
    assert [b.id for b in reply.content if isinstance(b, ToolCall)] == ["call_1"]
    assert session.leaf_id == session.entries[-1].id
    assert session.model is not None
    assert (session.model.provider, session.model.model_id) == ("local", "scripted")
    # A new harness on the session starts from that context.
    harness = Harness(model=MODEL, stream_fn=ScriptedModel([]), session=session)
    assert harness.messages == messages
    await session.close()
    if isinstance(store, SqliteSessionStore):
        await store.aclose()


async def test_pi_restores_the_session_of_a_harness_killed_mid_tool(
    tmp_path: Path, pi_node_modules: Path
) -> None:
    where = _where("jsonl", tmp_path)
    await _kill_mid_tool("jsonl", where, "killed-for-pi")
    (info,) = await JsonlSessionStore(where).list()
    pi = await _pi_lanes(pi_node_modules, info.path)
    session = await JsonlSessionStore(where).open("killed-for-pi", read_only=True)
    # The operation records say where the run was (tests/harness/test_operations.py).
    operation = {"intent": "run", "at": "tools"}
    assert pi == {"lanes": {"main": {"tipId": session.leaf_id, "operation": operation, "inbox": 0}}}
    await session.close()


async def _pi_lanes(node_modules: Path, path: str | None) -> Any:
    assert path is not None
    env = {**os.environ, "PITRIO_PI_NODE_MODULES": str(node_modules)}
    with trio.fail_after(60):
        result = await trio.run_process(
            ["node", str(NODE_DIR / "pi_session.mjs"), "lanes", path],
            capture_stdout=True,
            capture_stderr=True,
            env=env,
            check=False,
        )
    assert result.returncode == 0, result.stderr.decode()
    return json.loads(result.stdout)


def _user(text: str) -> UserMessage:
    return UserMessage(content=text, timestamp=1)


@pytest.mark.parametrize(
    ("policy", "expected"),
    [("never", [0, 0, 0]), (False, [0, 0, 0]), ("flush", [0, 1, 1]), ("always", [2, 2, 2])],
)
async def test_the_fsync_policy_says_when_a_jsonl_file_reaches_the_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: Any, expected: list[int]
) -> None:
    synced: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        synced.append(fd)
        real(fd)

    store = JsonlSessionStore(tmp_path, fsync=policy)
    session = await store.create()
    monkeypatch.setattr(os, "fsync", counting)
    await session.append_message(_user("a"))
    await session.append_message(_user("b"))
    counts = [len(synced)]
    await session.flush()
    counts.append(len(synced))
    await session.flush()  # nothing written since: nothing to sync
    counts.append(len(synced))
    assert counts == expected
    await session.close()


@pytest.mark.parametrize(("policy", "expected"), [("never", 0), ("flush", 1), ("always", 0)])
async def test_the_fsync_policy_says_when_sqlite_checkpoints_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: Any, expected: int
) -> None:
    store = SqliteSessionStore(tmp_path / "s.db", fsync=policy)
    session = await store.create()
    checkpoints: list[None] = []
    real = store._checkpoint_sync
    monkeypatch.setattr(store, "_checkpoint_sync", lambda: checkpoints.append(real()))
    await session.append_message(_user("a"))
    await session.append_message(_user("b"))
    assert checkpoints == []
    await session.flush()
    await session.flush()
    assert len(checkpoints) == expected
    await session.close()
    await store.aclose()


@pytest.mark.parametrize("store_type", [JsonlSessionStore, SqliteSessionStore])
def test_an_unknown_fsync_policy_is_refused(store_type: Any, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^fsync must be one of 'never', 'flush', 'always'"):
        store_type(tmp_path / "x", fsync="sometimes")


async def test_the_harness_syncs_its_session_once_per_turn_before_each_save_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pitrio import Tool, text_result
    from pitrio.testing import ScriptedResponse

    synced: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        synced.append(fd)
        real(fd)

    async def fast(call_id: str, params: Any, signal: Any, on_update: Any) -> Any:
        return text_result("ok")

    session = await JsonlSessionStore(tmp_path).create()
    stream = ScriptedModel(
        [ScriptedResponse.tool_calls(("c1", "fast", {})), ScriptedResponse.text("done")]
    )
    tool = Tool(name="fast", description="fast", execute=fast, parameters={"type": "object"})
    harness = Harness(model=MODEL, stream_fn=stream, session=session, tools=[tool])
    at_save_points: list[int] = []
    harness.subscribe(
        lambda event: at_save_points.append(len(synced)) if event.type == "save_point" else None
    )
    monkeypatch.setattr(os, "fsync", counting)
    await harness.prompt("go")
    assert at_save_points == [1, 2]  # each turn synced once, before its save point
    # Settling writes the run's end (pi.result, the lane idle again): one more sync.
    assert len(synced) == 3
    await session.close()
