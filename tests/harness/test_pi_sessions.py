"""Pi's coding-agent session files (v3) shared with ``pi`` both ways, in place.

Evidence of three kinds:

- a file Pi's own ``SessionManager`` wrote with every entry type (``data/pi-coding/``),
  with the context Pi builds at each of its entries: pitrio reads the same contexts, and
  appends to the file without changing a byte of what was there (no Node needed);
- live runs of Pi's ``SessionManager`` (``node/pi_coding_session.mjs``, from the coding
  agent oracle's install) on files pitrio wrote: Pi sees pitrio's context at every
  entry, then appends, and pitrio reads Pi's turn;
- the format itself: every line is one ``pi`` writes (type, ids, ISO times).

The oracle is found by ``tests/cli/_pi.py``; without it the live tests skip locally and
fail under CI (``$CI`` set).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trio
from cli._pi import require_oracle

from pitrio import AssistantMessage, TextContent, ToolCall, ToolResultMessage, UserMessage
from pitrio.harness import (
    AppMessage,
    BranchSummaryMessage,
    CompactionSummaryMessage,
    PiSessionStore,
    Session,
    default_pi_sessions_root,
)

HERE = Path(__file__).parent
SCRIPT = HERE / "node" / "pi_coding_session.mjs"
DATA = HERE / "data" / "pi-coding"
V3_TYPES = {
    "message",
    "custom",
    "custom_message",
    "branch_summary",
    "compaction",
    "model_change",
    "thinking_level_change",
    "session_info",
    "label",
}


@pytest.fixture(scope="module")
def oracle() -> str:
    return require_oracle()


def pi(oracle: str, *args: str) -> Any:
    done = subprocess.run(
        ["node", str(SCRIPT), oracle, *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def summary(message: Any) -> dict[str, Any]:
    """pi_coding_session.mjs's summary of a message."""
    if isinstance(message, (BranchSummaryMessage, CompactionSummaryMessage)):
        text = message.summary
    elif isinstance(message.content, str):
        text = message.content
    else:
        text = "".join(b.text for b in message.content if isinstance(b, TextContent))
    out: dict[str, Any] = {"role": message.role, "text": text}
    if isinstance(message, AssistantMessage):
        out["stopReason"] = message.stop_reason
    return out


def contexts(session: Session) -> dict[str, list[dict[str, Any]]]:
    """The context pitrio builds at each of its entries."""
    return {
        e.id: [summary(m) for m in session.build_context(e.id).messages] for e in session.entries
    }


def reply(text: str, stop: Any = "stop", t: int = 0) -> AssistantMessage:
    return AssistantMessage(
        content=(TextContent(text=text),),
        api="openai-completions",
        provider="local",
        model="scripted",
        stop_reason=stop,
        timestamp=t,
    )


async def write_session(root: Path) -> Session:
    """A session with what the CLI writes: changes, tools, an abort, a custom message,
    a name, a label, a compaction, a branch moved back and continued."""
    store = PiSessionStore(root)
    session = await store.create(cwd="/work/app")
    await session.append_model_change("local", "scripted")
    await session.append_thinking_level_change("high")
    first = await session.append_message(UserMessage(content="list files", timestamp=1))
    await session.append_message(
        AssistantMessage(
            content=(ToolCall(id="c1", name="bash", arguments={"command": "ls"}),),
            api="openai-completions",
            provider="local",
            model="scripted",
            stop_reason="toolUse",
            timestamp=2,
        )
    )
    await session.append_message(
        ToolResultMessage(
            tool_call_id="c1",
            tool_name="bash",
            content=(TextContent(text="a.py\n"),),
            is_error=False,
            timestamp=3,
        )
    )
    answered = await session.append_message(reply("One file.", t=4))
    await session.set_name("a\ntour")
    await session.append_label(first, "start")
    await session.append_message(UserMessage(content="explain", timestamp=5))
    await session.append_message(reply("It", "aborted", 6))
    await session.append_message(
        AppMessage(custom_type="note", content="be brief", display=True, timestamp=7)
    )
    await session.append_custom("ext-state", {"n": 1})
    kept = await session.append_message(UserMessage(content="again", timestamp=8))
    await session.append_message(reply("Again.", t=9))
    await session.append_compaction("Listed files.", first_kept_entry_id=kept, tokens_before=900)
    await session.append_message(UserMessage(content="thanks", timestamp=10))
    await session.append_thinking_level_change("low")
    await session.set_leaf(answered)
    await session.append_message(UserMessage(content="other branch", timestamp=11))
    await session.append_message(reply("On it.", t=12))
    await session.flush()
    return session


async def test_every_line_pitrio_writes_is_one_pi_writes(tmp_path: Path) -> None:
    session = await write_session(tmp_path)
    await session.close()
    assert session.path is not None
    lines = [json.loads(x) for x in (await trio.Path(session.path).read_text()).splitlines()]
    header, entries = lines[0], lines[1:]
    assert header["type"] == "session"
    assert header["version"] == 3
    assert header["cwd"] == "/work/app"
    assert header["timestamp"].endswith("Z")
    ids = set()
    for line in entries:
        assert line["type"] in V3_TYPES, line
        assert list(line)[:4] == ["type", "id", "parentId", "timestamp"], line
        assert line["parentId"] is None or line["parentId"] in ids, line
        assert line["timestamp"].endswith("Z")
        ids.add(line["id"])
    assert {line["type"] for line in entries} >= {
        "message", "model_change", "thinking_level_change", "session_info", "label",
        "compaction", "custom", "custom_message",
    }  # fmt: skip
    compaction = next(x for x in entries if x["type"] == "compaction")
    # pi reads firstKeptEntryId: the kept user message
    kept = next(x for x in entries if x.get("message", {}).get("content") == "again")
    assert compaction["firstKeptEntryId"] == kept["id"]
    assert Path(session.path).parent.name == "--work-app--"
    assert Path(session.path).name.endswith(f"_{session.id}.jsonl")


async def test_a_reopened_session_is_the_written_one(tmp_path: Path) -> None:
    session = await write_session(tmp_path)
    await session.close()
    again = await PiSessionStore(tmp_path).open(session.id)
    assert contexts(again) == contexts(session)
    assert again.leaf_id == session.leaf_id
    assert again.name == "a tour"  # pi keeps a name on one line
    assert again.labels == session.labels
    assert again.model == session.model
    assert again.thinking_level == "low"
    # the aborted answer stays in the transcript, as pi shows it on resume
    assert {"role": "assistant", "text": "It", "stopReason": "aborted"} in [
        summary(m) for m in again.build_context(again.entries[-7].id).messages
    ]
    await again.close()


async def test_pi_sees_pitrios_context_at_every_entry(tmp_path: Path, oracle: str) -> None:
    session = await write_session(tmp_path)
    await session.close()
    assert session.path is not None
    seen = await trio.to_thread.run_sync(pi, oracle, "contexts", session.path)
    mine = contexts(session)
    assert set(mine) <= set(seen)
    for entry_id, messages in mine.items():
        assert seen[entry_id] == messages, entry_id
    view = await trio.to_thread.run_sync(pi, oracle, "read", session.path)
    assert view["leafId"] not in mine or view["leafId"] == session.leaf_id
    assert view["messages"] == mine[session.leaf_id or ""]
    assert view["name"] == "a tour"
    assert view["model"] == {"provider": "local", "modelId": "scripted"}
    assert view["thinkingLevel"] == "low"
    assert view["labels"] == session.labels


async def test_pi_and_pitrio_take_turns_in_one_file(tmp_path: Path, oracle: str) -> None:
    session = await write_session(tmp_path)
    await session.close()
    assert session.path is not None
    path = trio.Path(session.path)
    before = await path.read_bytes()
    appended = await trio.to_thread.run_sync(pi, oracle, "append", str(path))
    assert (await path.read_bytes()).startswith(before)
    again = await PiSessionStore(tmp_path).open(session.id)
    assert again.leaf_id == appended["assistant"]
    assert [summary(m) for m in again.build_context().messages] == appended["view"]["messages"]
    assert again.model is not None
    assert (again.model.provider, again.model.model_id) == ("pi-side", "pi-model")
    middle = await path.read_bytes()
    await again.append_message(UserMessage(content="pitrio again", timestamp=20))
    await again.append_message(reply("Back.", t=21))
    await again.close()
    assert (await path.read_bytes()).startswith(middle)
    view = await trio.to_thread.run_sync(pi, oracle, "read", str(path))
    assert view["messages"][-4:] == [
        {"role": "user", "text": "from pi"},
        {"role": "assistant", "text": "pi answers", "stopReason": "stop"},
        {"role": "user", "text": "pitrio again"},
        {"role": "assistant", "text": "Back.", "stopReason": "stop"},
    ]


async def test_a_file_pi_wrote_reads_as_pi_reads_it_and_is_appended_in_place(
    tmp_path: Path,
) -> None:
    (source,) = DATA.glob("*.jsonl")
    expected = json.loads((DATA / "contexts.json").read_text())
    work = tmp_path / "--work-app--"
    work.mkdir()
    path = work / source.name
    shutil.copy(source, path)
    session = await PiSessionStore(tmp_path).open(str(path))
    mine = contexts(session)
    assert mine
    for entry_id, messages in mine.items():
        assert expected[entry_id] == messages, entry_id
    assert session.name == "files tour"
    assert session.thinking_level == "medium"
    await session.append_message(UserMessage(content="one more", timestamp=30))
    await session.close()
    assert path.read_bytes().startswith(source.read_bytes())
    assert json.loads(path.read_text().splitlines()[-1])["message"]["content"] == "one more"


async def test_the_recorded_pi_file_is_what_pi_writes_today(tmp_path: Path, oracle: str) -> None:
    """The fixture's contexts are Pi's (re-derived live from the committed file)."""
    (source,) = DATA.glob("*.jsonl")
    seen = await trio.to_thread.run_sync(pi, oracle, "contexts", str(source))
    assert seen == json.loads((DATA / "contexts.json").read_text())


def test_the_default_root_is_pis(tmp_path: Path) -> None:
    assert default_pi_sessions_root({}) == os.path.expanduser("~/.pi/agent/sessions")
    env = {"PI_CODING_AGENT_DIR": str(tmp_path / "agent")}
    assert default_pi_sessions_root(env) == str(tmp_path / "agent" / "sessions")


async def test_a_v4_file_is_refused_with_the_store_to_use(tmp_path: Path) -> None:
    from pitrio.harness import JsonlSessionStore, SessionFormatError

    v4 = await JsonlSessionStore(tmp_path / "v4").create(cwd="/work/app")
    await v4.close()
    assert v4.path is not None
    with pytest.raises(SessionFormatError, match="JsonlSessionStore"):
        await PiSessionStore(tmp_path).open(v4.path)
