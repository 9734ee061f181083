"""Tree navigation (``Harness.navigate_tree``) as an operation, stored as Pi 0.85.0's
AgentHarness stores it (``lane.navigateTree``), both ways with Pi's own harness.

The reference files are in ``data/structural/`` (see test_compaction_ops.py): a navigation
back to the first answer with a branch summary and a label (``pi-navigate.jsonl``), one
without a summary (``pi-navigate-plain.jsonl``), one SIGKILLed while its summary request
was out (``pi-hang-navigate.killed.jsonl``) and that file finished by Pi's resume.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pitrio import AgentBusyError, AssistantMessage, TextContent, UsageError, UserMessage
from pitrio.harness import (
    BranchSummaryEntry,
    BranchSummaryMessage,
    Harness,
    JsonlSessionStore,
    MessageEntry,
    NavigationEnd,
    SessionNotFoundError,
    restore_lane,
)
from pitrio.testing import ScriptedModel, ScriptedResponse

from ._structural_child import main as run_child
from ._structural_helpers import Hanging, last_result, while_out
from .test_compaction_ops import (
    DATA,
    MODEL,
    copy_fixture,
    harness_on,
    kill_mid_summary,
    killed_as_pi_is,
    leftovers,
    only_jsonl,
    our_events,
    pi,
    pi_events,
    pi_killed,
    shape,
    structural,
    transactions,
)

# -- writes ----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["navigate", "navigate-plain"])
async def test_a_navigation_writes_the_transactions_pi_writes(tmp_path: Path, mode: str) -> None:
    events: list[Any] = []
    await run_child(tmp_path, "pitrio", mode, events)
    assert our_events(events) == pi_events(f"pi-{mode}")
    ours = structural(transactions(only_jsonl(tmp_path)))
    pis = structural(transactions(DATA / f"pi-{mode}.jsonl"))
    assert shape(ours) == shape(pis)
    last = pis[-1]
    result = next(w["value"] for w in last if w.get("namespace") == "pi.result")
    assert (result["kind"], result["status"]) == ("navigation", "completed")
    if mode == "navigate":
        # accept; ready; effect_pending; the request; its usage; the move.
        assert len(pis) == 6
        kinds = [w.get("type") or w["namespace"] for w in last][:4]
        assert kinds == ["pi.branch.tip", "branch_summary", "pi.branch.tip", "pi.entry.label"]
    else:
        assert len(pis) == 2
        assert pis[0][1]["value"]["at"] == "navigation.ready_to_commit"


@pytest.mark.parametrize("mode", ["navigate", "navigate-plain"])
async def test_pi_writes_the_recorded_navigation(
    tmp_path: Path, pi_node_modules: Path, mode: str
) -> None:
    out = await pi(pi_node_modules, "run", str(tmp_path), "pi", mode)
    types = [e["type"] for e in out["events"]]
    assert types[0] == "navigation_start"
    assert out["events"][-1] == {"type": "navigation_end", "status": "completed"}
    assert out["events"] == json.loads((DATA / f"pi-{mode}.json").read_text())["events"]
    live = structural(transactions(Path(out["file"])))
    assert shape(live) == shape(structural(transactions(DATA / f"pi-{mode}.jsonl")))


async def test_a_navigation_moves_the_context_and_the_next_prompt(tmp_path: Path) -> None:
    await run_child(tmp_path, "pitrio", "navigate")
    session = await JsonlSessionStore(tmp_path).open("pitrio")
    branch = session.get_branch()
    summary = branch[-1]
    assert isinstance(summary, BranchSummaryEntry)
    assert summary.summary.endswith("BRANCH SUMMARY")
    assert summary.parent_id == branch[1].id
    assert session.labels == {branch[1].id: "back"}
    harness = Harness(
        model=MODEL, stream_fn=ScriptedModel([ScriptedResponse.text("three")]), session=session
    )
    messages = harness.messages
    assert [m.role for m in messages] == ["user", "assistant", "branchSummary"]
    assert isinstance(messages[-1], BranchSummaryMessage)
    await harness.prompt("third")
    after = session.get_branch()
    assert after[-3].id == summary.id
    assert [e.message.role for e in after[-2:] if isinstance(e, MessageEntry)] == [
        "user", "assistant"
    ]  # fmt: skip
    await session.close()


# -- killed mid-summary, both ways -----------------------------------------------------


async def test_a_navigation_killed_mid_summary_leaves_what_pi_leaves(tmp_path: Path) -> None:
    session, operation = await killed_as_pi_is(tmp_path, "hang-navigate")
    assert operation.intent == "navigation"
    # The tip has not moved yet.
    assert session.leaf_id == operation.meta["sourceTipId"]
    await session.close()


async def test_pitrio_finishes_the_navigation_pi_left_as_pi_does(tmp_path: Path) -> None:
    path = copy_fixture("pi-hang-navigate.killed", tmp_path)
    killed = len(transactions(path))
    session = await JsonlSessionStore(tmp_path).open("pi-hang-navigate")
    harness = harness_on(session)
    operation = harness.interrupted
    assert operation is not None
    assert (operation.intent, operation.at) == ("navigation", "summary.effect_pending")
    events: list[Any] = []
    harness.subscribe(events.append)
    await harness.resume()
    assert [e.type for e in events] == ["recovery_start", "navigation_end", "recovery_end"]
    end = events[1]
    assert isinstance(end, NavigationEnd)
    assert end.status == "completed"
    assert end.from_tip_id == operation.meta["sourceTipId"]
    assert session.leaf_id == end.tip_id == end.entry_id
    assert end.tip_id is not None
    entry = session.get_entry(end.tip_id)
    assert isinstance(entry, BranchSummaryEntry)
    assert entry.parent_id == operation.meta["intent"]["targetId"]
    assert entry.summary.endswith("SUMMARY AGAIN")
    assert leftovers(session) == []
    assert [m.role for m in harness.messages] == ["user", "assistant", "branchSummary"]
    await session.close()
    ours = transactions(path)[killed:]
    pis = transactions(DATA / "pi-hang-navigate.resumed.jsonl")[killed:]
    assert shape(ours) == shape(pis)
    pi_out = json.loads((DATA / "pi-hang-navigate.resumed.json").read_text())
    assert pi_out["events"][-1] == {"type": "navigation_end", "status": "completed"}
    assert pi_out["branch"][-1][0] == "branch_summary"


async def test_pi_finishes_the_navigation_pitrio_left(
    tmp_path: Path, pi_node_modules: Path
) -> None:
    path = await kill_mid_summary(tmp_path, "pitrio", "hang-navigate")
    out = await pi(pi_node_modules, "resume", str(path))
    assert out["open"] == [{"lane": "main", "kind": "navigation"}]
    assert out["result"] == "completed"
    assert out["events"][0] == {
        "type": "retry_scheduled", "recovery": True, "attempt": 2, "step": "task"
    }  # fmt: skip
    assert [row[:2] for row in out["branch"]] == [
        ["message", "user"], ["message", "assistant"], ["branch_summary", out["branch"][-1][1]]
    ]  # fmt: skip
    assert out["lane"]["result"] == {"kind": "navigation", "status": "completed"}
    session = await JsonlSessionStore(tmp_path).open("pitrio", read_only=True)
    assert isinstance(session.get_branch()[-1], BranchSummaryEntry)
    assert restore_lane(session).operation is None
    await session.close()


async def test_pi_killed_mid_navigation_is_the_recorded_fixture(
    tmp_path: Path, pi_node_modules: Path
) -> None:
    path = await pi_killed(pi_node_modules, tmp_path, "hang-navigate")
    fixture = DATA / "pi-hang-navigate.killed.jsonl"
    assert shape(structural(transactions(path))) == shape(structural(transactions(fixture)))


async def test_a_navigation_killed_before_its_move_is_committed_on_resume(
    tmp_path: Path,
) -> None:
    """Killed after its first transaction (``navigation.ready_to_commit``): the next
    harness moves the tip and ends it."""
    session, harness = await _two_turns(tmp_path)
    target = session.get_branch()[1].id
    source = session.leaf_id
    await harness._begin_navigation(target, False, None, "here")
    again = Harness(model=MODEL, stream_fn=ScriptedModel([]), session=session)
    assert again.interrupted is not None
    assert again.interrupted.at == "navigation.ready_to_commit"
    events: list[Any] = []
    again.subscribe(events.append)
    await again.resume()
    assert [e.type for e in events] == ["recovery_start", "navigation_end", "recovery_end"]
    assert session.leaf_id == target
    assert session.labels == {target: "here"}
    result = last_result(session)
    assert (result["status"], result["fromTipId"], result["tipId"]) == ("completed", source, target)
    await session.close()


# -- the API ---------------------------------------------------------------------------


async def _two_turns(tmp_path: Path, stream_fn: Any = None) -> tuple[Any, Harness]:
    session = await JsonlSessionStore(tmp_path).create(cwd=str(tmp_path), session_id="s")
    harness = Harness(
        model=MODEL,
        stream_fn=stream_fn or ScriptedModel(lambda _: ScriptedResponse.text("SUMMARY")),
        session=session,
    )
    await harness.set_model(MODEL)
    for question, answer in (("first", "one"), ("second", "two")):
        await session.append_message(
            UserMessage(content=(TextContent(text=question),), timestamp=1)
        )
        reply = AssistantMessage(
            content=(TextContent(text=answer),),
            api="scripted",
            provider="local",
            model="scripted",
            stop_reason="stop",
            timestamp=1,
        )
        await session.append_message(reply)
    harness.agent.state.messages = list(session.build_context().messages)
    return session, harness


async def test_a_plain_navigation_to_the_root_leaves_an_empty_context(tmp_path: Path) -> None:
    session, harness = await _two_turns(tmp_path)
    events: list[Any] = []
    harness.subscribe(events.append)
    end = await harness.navigate_tree(None)
    assert (end.status, end.tip_id, end.entry_id) == ("completed", None, None)
    assert [e.type for e in events] == ["navigation_start", "navigation_end"]
    assert events[0].target_id is None
    assert session.leaf_id is None
    assert session.get_value("pi.branch.tip", "main") is None
    assert ("pi.branch.tip", "main") in session._state.values  # a null tip, as Pi's
    assert harness.messages == []
    assert last_result(session)["tipId"] is None
    await session.close()


async def test_bad_navigations_are_refused_with_the_reason(tmp_path: Path) -> None:
    session, harness = await _two_turns(tmp_path)
    first = session.get_branch()[0].id
    with pytest.raises(UsageError, match="current tip"):
        await harness.navigate_tree(session.leaf_id)
    with pytest.raises(UsageError, match="root"):
        await harness.navigate_tree(None, label="x")
    with pytest.raises(UsageError, match="summarize=True"):
        await harness.navigate_tree(None, summarize=True)
    with pytest.raises(SessionNotFoundError):
        await harness.navigate_tree("no-such-entry")
    # Nothing was recorded, and the harness is free.
    assert restore_lane(session).last_operation_id is None
    assert not harness.is_busy
    end = await harness.navigate_tree(first)
    assert end.status == "completed"
    await session.close()
    with pytest.raises(UsageError, match="needs a session"):
        await Harness(model=MODEL, stream_fn=ScriptedModel([])).navigate_tree("x")


async def test_a_navigation_while_busy_is_refused(tmp_path: Path) -> None:
    hanging = Hanging()
    session, harness = await _two_turns(tmp_path, hanging)
    first = session.get_branch()[0].id

    async def navigate_then_abort() -> None:
        with pytest.raises(AgentBusyError):
            await harness.navigate_tree(first)
        harness.abort()

    await while_out(harness.compact, hanging.started, navigate_then_abort)
    await session.close()


async def test_abort_leaves_the_tip_where_it_was(tmp_path: Path) -> None:
    hanging = Hanging()
    session, harness = await _two_turns(tmp_path, hanging)
    source = session.leaf_id
    target = session.get_branch()[1].id
    end = await while_out(
        lambda: harness.navigate_tree(target, summarize=True), hanging.started, harness.abort
    )
    assert end.status == "aborted"
    assert session.leaf_id == source
    assert last_result(session)["status"] == "aborted"
    assert leftovers(session) == []
    await session.close()


async def test_an_outer_cancel_records_the_navigation_as_aborted(tmp_path: Path) -> None:
    hanging = Hanging()
    session, harness = await _two_turns(tmp_path, hanging)
    target = session.get_branch()[1].id
    events: list[str] = []
    harness.subscribe(lambda e: events.append(e.type))
    navigating = await while_out(
        lambda: harness.navigate_tree(target, summarize=True), hanging.started
    )
    assert navigating is None  # cancelled
    assert events == ["navigation_start", "navigation_end"]
    assert last_result(session)["status"] == "aborted"
    assert not harness.is_busy
    await session.close()


async def test_a_failed_summary_fails_the_navigation(tmp_path: Path) -> None:
    failing = ScriptedModel(lambda _: ScriptedResponse(stop_reason="error", error_message="bad"))
    session, harness = await _two_turns(tmp_path, failing)
    source = session.leaf_id
    target = session.get_branch()[1].id
    end = await harness.navigate_tree(target, summarize=True, custom_instructions="files")
    assert end.status == "failed"
    assert "bad" in (end.error_message or "")
    assert session.leaf_id == source
    result = last_result(session)
    assert result["status"] == "failed"
    assert result["error"]["code"] == "summarization_failed"
    await session.close()


async def test_custom_instructions_reach_the_summary_request(tmp_path: Path) -> None:
    seen: list[str] = []

    def answer(context: Any) -> ScriptedResponse:
        seen.append(context.messages[0].content[0].text)
        return ScriptedResponse.text("NOTED")

    session, harness = await _two_turns(tmp_path, ScriptedModel(answer))
    target = session.get_branch()[1].id
    end = await harness.navigate_tree(target, summarize=True, custom_instructions="the tests")
    assert end.status == "completed"
    assert len(seen) == 1
    assert seen[0].endswith("Additional focus: the tests")
    assert "second" in seen[0]  # the branch left
    assert "two" in seen[0]
    meta_writes = [
        w["value"]
        for tx in transactions(only_jsonl(tmp_path))
        for w in tx
        if w.get("namespace") == "pi.op.meta" and w["op"] == "set"
    ]
    assert meta_writes[-1]["intent"] == {
        "kind": "navigation", "targetId": target, "summarize": True,
        "customInstructions": "the tests",
    }  # fmt: skip
    await session.close()


async def test_a_broken_stream_function_fails_the_navigation_as_data(tmp_path: Path) -> None:
    def broken(model: Any, context: Any, options: Any) -> Any:
        msg = "no connection"
        raise RuntimeError(msg)

    session, harness = await _two_turns(tmp_path, broken)
    source = session.leaf_id
    end = await harness.navigate_tree(session.get_branch()[1].id, summarize=True)
    assert (end.status, end.error_message, end.tip_id) == ("failed", "no connection", source)
    assert session.leaf_id == source
    assert last_result(session)["error"]["code"] == "harness_fault"
    await session.close()
