"""Sessions written by Pi load in pitrio, and sessions pitrio writes load in Pi.

Two kinds of evidence:

- fixture files, each with what Pi's own code rebuilt from it (``*.expected.json``, made
  by ``node/pi_session.mjs``; see ``data/sessions/README.md``): these pin the format
  without Node;
- live runs of Pi's session code through ``node/pi_session.mjs``, in both directions.

Node needs ``@earendil-works/pi-agent-core`` 0.85.0: found through
``$PITRIO_PI_NODE_MODULES``, ``tests/harness/node/node_modules`` or the oracle's cache
(``$XDG_CACHE_HOME/pitrio-oracle/node_modules``), else installed into
``tests/harness/node`` with ``npm ci --ignore-scripts`` from the lock file there. Without
``node`` the live tests skip locally and fail under CI (``$CI`` set).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import trio

from pitrio import (
    AssistantMessage,
    TextContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
    wire,
)
from pitrio.harness import AppMessage, BashExecutionMessage, JsonlSessionStore, Session

HERE = Path(__file__).parent
NODE_DIR = HERE / "node"
DATA = HERE / "data" / "sessions"


def pitrio_view(session: Session) -> dict[str, Any]:
    """What pi_session.mjs prints for a session, computed by pitrio."""
    return {
        "id": session.id,
        "cwd": session.cwd,
        "parentSessionId": session.parent_session_id,
        "tip": session.leaf_id,
        "name": session.name,
        "config": session.get_value("pi.lane.config", "main"),
        "labels": session.labels,
        "entries": [
            {"id": e.id, "parentId": e.parent_id, "type": e.type, "seq": e.seq}
            for e in session.entries
        ],
        "branch": [e.id for e in session.get_branch()],
        "messages": wire.messages_to_wire(session.build_context().messages),
    }


def comparable(view: dict[str, Any], *, renumber: bool = False) -> dict[str, Any]:
    """Drop Pi's usage statistics; with ``renumber``, name entries by position (Pi
    mints new ids when it reads a v3 file; pitrio keeps the old ones)."""
    view = {k: v for k, v in view.items() if k not in ("stats", "path")}
    if not renumber:
        return view
    names = {e["id"]: f"E{i}" for i, e in enumerate(view["entries"])}
    text = json.dumps(view)
    for old, new in names.items():
        text = text.replace(json.dumps(old), json.dumps(new))
    out: dict[str, Any] = json.loads(text)
    return out


async def run_pi(node_modules: Path, *args: str) -> dict[str, Any]:
    env = {**os.environ, "PITRIO_PI_NODE_MODULES": str(node_modules)}
    result = await trio.run_process(
        ["node", str(NODE_DIR / "pi_session.mjs"), *args],
        capture_stdout=True,
        capture_stderr=True,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    out: dict[str, Any] = json.loads(result.stdout)
    return out


def _install_fixture(root: Path, name: str, file_name: str) -> Path:
    directory = root / "--home-user-project--"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / file_name
    shutil.copy(DATA / name, path)
    return path


# --- fixtures written by Pi ---------------------------------------------------------


async def test_pi_v4_fixture_loads_as_pi_read_it(tmp_path: Path) -> None:
    expected = json.loads((DATA / "pi-v4.expected.json").read_text())
    path = _install_fixture(tmp_path, "pi-v4.jsonl", "2026-01-01T00-00-01-000Z_fixture.jsonl")
    session = await JsonlSessionStore(tmp_path).open(path)
    assert comparable(pitrio_view(session)) == comparable(expected)
    roles = [m.role for m in session.build_context().messages]
    assert roles == [
        "compactionSummary",
        "assistant",
        "user",
        "bashExecution",
        "branchSummary",
        "custom",
        "user",
    ]
    assert isinstance(session.build_context().messages[3], BashExecutionMessage)
    assert isinstance(session.build_context().messages[5], AppMessage)
    await session.close()


async def test_legacy_v3_fixture_loads_as_pi_read_it(tmp_path: Path) -> None:
    expected = json.loads((DATA / "legacy-v3.expected.json").read_text())
    path = _install_fixture(tmp_path, "legacy-v3.jsonl", "2025-12-01T10-00-00-000Z_legacy.jsonl")
    session = await JsonlSessionStore(tmp_path).open(path)
    mine = pitrio_view(session)
    # Pi numbers the imported writes; pitrio does too, and both keep the record order.
    assert comparable(mine, renumber=True) == comparable(expected, renumber=True)
    assert session.thinking_level == "high"
    await session.close()


# --- live: Pi writes, pitrio reads; pitrio writes, Pi reads --------------------------


async def test_a_session_pi_writes_loads_in_pitrio(tmp_path: Path, pi_node_modules: Path) -> None:
    pi = await run_pi(pi_node_modules, "write", str(tmp_path / "root"), "/home/user/project")
    store = JsonlSessionStore(tmp_path / "root")
    (info,) = await store.list()
    assert info.id == pi["id"]
    assert info.path == pi["path"]
    session = await store.open(info.id)
    assert comparable(pitrio_view(session)) == comparable(pi)
    # pitrio appends to Pi's file; Pi reads the result.
    new = await session.append_message(UserMessage(content="from pitrio", timestamp=7))
    await session.close()
    pi_again = await run_pi(pi_node_modules, "read", pi["path"])
    assert pi_again["tip"] == new
    assert pi_again["messages"][-1] == {"role": "user", "content": "from pitrio", "timestamp": 7}


def _usage() -> Usage:
    return Usage(input=10, output=5, total_tokens=15)


async def _write_rich_session(store: JsonlSessionStore) -> Session:
    session = await store.create(cwd="/home/user/project")
    await session.append_model_change("anthropic", "claude-sonnet-4-5")
    await session.append_thinking_level_change("medium")
    q = await session.append_message(UserMessage(content="List files ✓", timestamp=1))
    await session.append_message(
        AssistantMessage(
            content=(ToolCall(id="t1", name="bash", arguments={"command": "ls"}),),
            api="anthropic-messages",
            provider="anthropic",
            model="claude-sonnet-4-5",
            usage=_usage(),
            stop_reason="toolUse",
            timestamp=2,
        )
    )
    await session.append_message(
        ToolResultMessage(
            tool_call_id="t1", tool_name="bash", content=(TextContent(text="a\nb"),), timestamp=3
        )
    )
    answer = await session.append_message(
        AssistantMessage(
            content=(TextContent(text="a and b"),),
            api="anthropic-messages",
            provider="anthropic",
            model="claude-sonnet-4-5",
            usage=_usage(),
            stop_reason="stop",
            timestamp=4,
        )
    )
    await session.append_custom("note", {"pinned": True})
    await session.append_label(q, "start")
    await session.set_name("pitrio demo")
    await session.append_compaction(
        "Listed files.", tokens_before=321, first_kept_entry_id=answer, usage=_usage()
    )
    await session.append_message(
        BashExecutionMessage(command="pwd", output="/", exit_code=0, timestamp=5)
    )
    aborted = await session.append_message(
        AssistantMessage(
            content=(),
            api="anthropic-messages",
            provider="anthropic",
            model="claude-sonnet-4-5",
            stop_reason="aborted",
            error_message="Request was aborted",
            timestamp=6,
        )
    )
    gone = await session.append_message(UserMessage(content="never mind", timestamp=7))
    await session.set_leaf(aborted)
    await session.append_branch_summary("Said never mind.", from_id=gone)
    await session.append_message(
        AppMessage(custom_type="reminder", content="Be brief.", details={"n": 1}, timestamp=8)
    )
    await session.append_message(UserMessage(content="Which is newer?", timestamp=9))
    return session


async def test_a_session_pitrio_writes_loads_in_pi(tmp_path: Path, pi_node_modules: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    session = await _write_rich_session(store)
    await session.close()
    mine = pitrio_view(session)
    (info,) = await store.list()
    assert info.path is not None
    pi = await run_pi(pi_node_modules, "read", info.path)
    assert comparable(pi) == comparable(mine)
    assert pi["stats"]["messageCount"] == sum(e["type"] == "message" for e in mine["entries"])
    # Pi appends to pitrio's file; pitrio reads the result.
    pi_after = await run_pi(pi_node_modules, "read", info.path, "from Pi")
    again = await store.open(session.id)
    assert again.leaf_id == pi_after["tip"]
    assert again.build_context().messages[-1] == UserMessage(
        content="from Pi", timestamp=1767225699999
    )
    assert comparable(pitrio_view(again)) == comparable(pi_after)
    await again.close()


async def test_a_fork_pitrio_writes_loads_in_pi(tmp_path: Path, pi_node_modules: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    session = await _write_rich_session(store)
    branch = session.get_branch()
    fork = await session.fork(branch[3].id)
    await fork.append_message(UserMessage(content="in the fork", timestamp=10))
    await fork.close()
    await session.close()
    info = next(i for i in await store.list() if i.id == fork.id)
    assert info.path is not None
    pi = await run_pi(pi_node_modules, "read", info.path)
    assert pi["parentSessionId"] == session.id
    assert comparable(pi) == comparable(pitrio_view(fork))


async def test_a_v3_file_pitrio_upgraded_loads_in_pi(tmp_path: Path, pi_node_modules: Path) -> None:
    path = _install_fixture(tmp_path, "legacy-v3.jsonl", "2025-12-01T10-00-00-000Z_legacy.jsonl")
    store = JsonlSessionStore(tmp_path)
    session = await store.open(path)
    await session.append_message(UserMessage(content="after the upgrade", timestamp=11))
    await session.close()
    pi = await run_pi(pi_node_modules, "read", str(path))
    again = await store.open(path)
    assert comparable(pi) == comparable(pitrio_view(again))  # v4 now: ids are kept by both
    assert pi["stats"]["usage"]["totalTokens"] == 64
    await again.close()


async def test_a_leaf_moved_before_the_first_entry_is_a_null_tip_pi_restores(
    tmp_path: Path, pi_node_modules: Path
) -> None:
    store = JsonlSessionStore(tmp_path)
    session = await store.create(cwd="/home/user/project")
    await session.append_model_change("anthropic", "claude-sonnet-4-5")
    await session.append_message(UserMessage(content="first", timestamp=1))
    await session.set_leaf(None)
    assert session.leaf_id is None
    await session.close()
    assert session.path is not None
    # Pi keeps the branch with a null tip (a set, not a delete of the value).
    last = json.loads((await trio.Path(session.path).read_text()).splitlines()[-1])
    assert {k: last[k] for k in ("kind", "op", "namespace", "key", "value")} == {
        "kind": "value",
        "op": "set",
        "namespace": "pi.branch.tip",
        "key": "main",
        "value": None,
    }
    result = await trio.run_process(
        ["node", str(NODE_DIR / "pi_session.mjs"), "lanes", session.path],
        capture_stdout=True,
        capture_stderr=True,
        env={**os.environ, "PITRIO_PI_NODE_MODULES": str(pi_node_modules)},
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    assert json.loads(result.stdout) == {
        "lanes": {"main": {"tipId": None, "operation": None, "inbox": 0}}
    }
    pi = await run_pi(pi_node_modules, "read", session.path)
    assert pi["tip"] is None
    again = await store.open(session.id)
    assert again.leaf_id is None
    assert again.build_context().messages == ()
    await again.close()
