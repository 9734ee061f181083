"""The ``before_compaction`` / ``before_navigation`` hooks, with Pi 0.85.0's semantics and
writes (pi-agent-core ``harness/hooks.js`` ``firstStructural``, ``drive/structural.js``
``runStructuralDecision``, ``publishStructuralOutcome``).

A hook sees the preparation (and the target) before the summary is asked of the model; it
may decline the operation (Pi's ``declined`` end: the operation's records deleted, its
result written, nothing else) or give the summary (written as the model's would be, with
``fromHook: true`` and its usage row first, no request made). The reference is Pi's own
harness with the same hooks (``node/pi_structural.mjs`` ``hook-*`` modes), recorded in
``data/structural/pi-hook-*.jsonl`` / ``.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

from pitrio import AgentMessage, Model, TextContent, UsageError, UserMessage
from pitrio.harness import (
    BeforeCompactionEvent,
    BeforeCompactionResult,
    BeforeNavigationEvent,
    BeforeNavigationResult,
    BranchSummaryEntry,
    BranchSummaryResult,
    CompactionEntry,
    CompactionResult,
    CompactionSettings,
    Harness,
    HookError,
    Hooks,
    JsonlSessionStore,
    restore_lane,
)
from pitrio.testing import ScriptedModel, ScriptedResponse

from ._structural_child import main as run_child
from ._structural_helpers import last_result, while_out
from .test_compaction_ops import (
    DATA,
    MODEL,
    kill_mid_summary,
    leftovers,
    only_jsonl,
    our_events,
    pi,
    pi_events,
    shape,
    structural,
    transactions,
)

HOOK_MODES = ("hook-decline-compact", "hook-compact", "hook-decline-navigate", "hook-navigate")


def _pi_run(mode: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads((DATA / f"pi-{mode}.json").read_text())
    return out


def _seen_as_pi(event: Any, target: str) -> dict[str, Any]:
    """What a hook was given, in the form the Node script prints it."""
    if isinstance(event, BeforeCompactionEvent):
        p = event.preparation
        return {
            "reason": event.reason,
            "summarize": len(p.messages_to_summarize),
            "tail": len(p.retained_tail),
            "prefix": len(p.turn_prefix_messages),
            "split": p.is_split_turn,
            "instructions": event.custom_instructions,
        }
    assert isinstance(event, BeforeNavigationEvent)
    return {
        "target": "TARGET" if event.target_id == target else event.target_id,
        "messages": len(event.preparation.messages),
        "instructions": event.custom_instructions,
    }


# -- Pi's writes -----------------------------------------------------------------------


@pytest.mark.parametrize("mode", HOOK_MODES)
async def test_a_hook_decision_writes_what_pi_writes(tmp_path: Path, mode: str) -> None:
    events: list[Any] = []
    seen: list[Any] = []
    await run_child(tmp_path, "pitrio", mode, events, seen)
    pi_run = _pi_run(mode)
    assert our_events(events) == pi_events(f"pi-{mode}")
    ours = structural(transactions(only_jsonl(tmp_path)))
    pis = structural(transactions(DATA / f"pi-{mode}.jsonl"))
    assert shape(ours) == shape(pis)
    # Accepted, then at once the end: no summary.ready, no request, no model usage.
    assert len(pis) == 2
    states = [w["value"]["at"] for w in pis[0] if w.get("namespace") == "pi.op.state"]
    assert states == ["summary.deciding"]
    result = next(w["value"] for w in pis[-1] if w.get("namespace") == "pi.result")
    declined = "decline" in mode
    assert result["status"] == ("declined" if declined else "completed")
    session = await JsonlSessionStore(tmp_path).open("pitrio", read_only=True)
    assert last_result(session)["status"] == result["status"]
    assert leftovers(session) == []
    target = session.get_branch()[1].id
    assert [_seen_as_pi(e, target) for e in seen] == [pi_run["hook"]]
    tip = session.get_branch()[-1]
    if declined:
        assert pi_run["branch"][-1] == ["message", "assistant", "two"]
        assert not isinstance(tip, CompactionEntry | BranchSummaryEntry)
    else:
        assert pi_run["branch"][-1][1] == "HOOK SUMMARY"
        assert isinstance(tip, CompactionEntry | BranchSummaryEntry)
        assert tip.summary == "HOOK SUMMARY"
        assert tip.from_hook is True
        usage_rows = [w for w in pis[-1] if w.get("kind") == "usage"]
        assert len(usage_rows) == 1  # the hook's usage, first in the transaction
        assert pis[-1][0] is usage_rows[0]
    await session.close()


@pytest.mark.parametrize("mode", HOOK_MODES)
async def test_pi_writes_the_recorded_hook_decision(
    tmp_path: Path, pi_node_modules: Path, mode: str
) -> None:
    out = await pi(pi_node_modules, "run", str(tmp_path), "pi", mode)
    recorded = _pi_run(mode)
    assert out["events"] == recorded["events"]
    assert out["branch"] == recorded["branch"]
    hook = dict(out["hook"])
    if hook.get("target") == out["target"]:
        hook["target"] = "TARGET"
    assert hook == recorded["hook"]
    live = structural(transactions(Path(out["file"])))
    assert shape(live) == shape(structural(transactions(DATA / f"pi-{mode}.jsonl")))


# -- killed before the hook decided ---------------------------------------------------


async def test_an_operation_killed_in_its_hook_asks_the_hook_again(tmp_path: Path) -> None:
    path = await kill_mid_summary(tmp_path, "pitrio", "hang-hook-compact")
    session = await JsonlSessionStore(tmp_path).open("pitrio")
    model = Counting()
    harness = Harness(model=MODEL, stream_fn=model, session=session)
    interrupted = harness.interrupted
    assert interrupted is not None
    assert (interrupted.intent, interrupted.at) == ("compaction", "summary.deciding")
    seen: list[Any] = []

    def gives(event: BeforeCompactionEvent) -> BeforeCompactionResult:
        seen.append(event)
        given = CompactionResult(
            summary="AFTER THE CRASH",
            tokens_before=event.preparation.tokens_before,
            usage=None,
            retained_tail=event.preparation.retained_tail,
            details={"readFiles": [], "modifiedFiles": []},
        )
        return BeforeCompactionResult(compaction=given)

    harness.hooks.on("before_compaction", gives)
    await harness.resume()
    assert [e.operation_id for e in seen] == [interrupted.id]
    assert model.requests == 0
    entry = session.get_branch()[-1]
    assert isinstance(entry, CompactionEntry)
    assert (entry.summary, entry.from_hook) == ("AFTER THE CRASH", True)
    assert last_result(session)["status"] == "completed"
    assert leftovers(session) == []
    await session.close()
    assert path.exists()


async def test_pi_finishes_an_operation_pitrio_left_in_its_hook(
    tmp_path: Path, pi_node_modules: Path
) -> None:
    path = await kill_mid_summary(tmp_path, "pitrio", "hang-hook-compact")
    out = await pi(pi_node_modules, "resume", str(path))
    assert out["open"] == [{"lane": "main", "kind": "compaction"}]
    assert out["result"] == "completed"
    assert out["branch"][-1] == ["compaction", "SUMMARY AGAIN"]
    assert out["lane"] == {"current": None, "result": {"kind": "compaction", "status": "completed"}}


# -- outcomes --------------------------------------------------------------------------


def _user(text: str) -> AgentMessage:
    return UserMessage(content=(TextContent(text=text),), timestamp=1)


class Counting:
    """A scripted model that counts its requests."""

    def __init__(self, answer: str = "SUMMARY") -> None:
        self.requests = 0
        self._model = ScriptedModel(lambda _: ScriptedResponse.text(answer))

    def __call__(self, model: Model, context: Any, options: Any) -> Any:
        self.requests += 1
        return self._model(model, context, options)


async def _harness(tmp_path: Path, stream_fn: Any, *, window: int = 200_000) -> Any:
    session = await JsonlSessionStore(tmp_path).create(cwd=str(tmp_path), session_id="s")
    model = Model(id="scripted", api="scripted", provider="local", context_window=window)
    harness = Harness(
        model=model,
        stream_fn=stream_fn,
        session=session,
        compaction=CompactionSettings(keep_recent_tokens=1, reserve_tokens=window - 1),
    )
    await harness.set_model(model)
    return session, harness


async def _with_two_turns(tmp_path: Path, stream_fn: Any) -> Any:
    session, harness = await _harness(tmp_path, stream_fn)
    for text in ("first", "one", "second", "two"):
        await session.append_message(_user(text))
    harness._agent.state.messages = list(session.build_context().messages)
    return session, harness


async def test_a_hook_that_passes_leaves_the_summary_to_the_model(tmp_path: Path) -> None:
    model = Counting()
    session, harness = await _with_two_turns(tmp_path, model)
    seen: list[Any] = []
    harness.hooks.on("before_compaction", lambda e: BeforeCompactionResult())  # no decision
    harness.hooks.on("before_compaction", seen.append)  # returns None
    harness.hooks.on("before_navigation", lambda e: BeforeNavigationResult())  # no decision
    end = await harness.compact("keep the names")
    assert end.status == "completed"
    assert model.requests >= 1
    assert seen[0].custom_instructions == "keep the names"
    assert seen[0].reason == "manual"
    assert seen[0].operation_id == restore_lane(session).last_operation_id
    entry = session.get_branch()[-1]
    assert isinstance(entry, CompactionEntry)
    assert entry.from_hook is False
    assert entry.summary.startswith("SUMMARY")
    target = session.get_branch()[0].id
    nav = await harness.navigate_tree(target, summarize=True)
    assert nav.status == "completed"
    branch_summary = session.get_branch()[-1]
    assert isinstance(branch_summary, BranchSummaryEntry)
    assert branch_summary.from_hook is False
    await session.close()


async def test_the_first_deciding_handler_wins_and_async_handlers_are_awaited(
    tmp_path: Path,
) -> None:
    model = Counting()
    session, harness = await _with_two_turns(tmp_path, model)
    calls: list[str] = []

    async def passes(event: BeforeCompactionEvent) -> None:
        await trio.lowlevel.checkpoint()
        calls.append("passes")

    async def gives(event: BeforeCompactionEvent) -> BeforeCompactionResult:
        await trio.lowlevel.checkpoint()
        calls.append("gives")
        given = CompactionResult(
            summary="MINE",
            tokens_before=event.preparation.tokens_before,
            usage=None,
            retained_tail=event.preparation.retained_tail,
            details={"readFiles": [], "modifiedFiles": []},
        )
        return BeforeCompactionResult(compaction=given)

    def declines(event: BeforeCompactionEvent) -> BeforeCompactionResult:
        calls.append("declines")
        return BeforeCompactionResult(decline=True)

    harness.hooks.on("before_compaction", passes)
    harness.hooks.on("before_compaction", gives)
    harness.hooks.on("before_compaction", declines)
    end = await harness.compact()
    assert calls == ["passes", "gives"]
    assert model.requests == 0
    assert (end.status, end.summary) == ("completed", "MINE")
    entry = session.get_branch()[-1]
    assert isinstance(entry, CompactionEntry)
    assert entry.id == end.entry_id
    assert entry.from_hook is True
    assert entry.usage is None
    # The harness's context is the compacted one.
    assert harness.messages[0].role == "compactionSummary"
    # No usage given: no usage row.
    last = transactions(only_jsonl(tmp_path))[-1]
    assert [w for w in last if w.get("kind") == "usage"] == []
    await session.close()


@pytest.mark.parametrize("kind", ["compaction", "navigation"])
@pytest.mark.parametrize("failure", ["raises", "wrong type", "both"])
@pytest.mark.parametrize("then", ["nothing", "a decliner"])
async def test_a_failing_handler_is_reported_and_skipped(
    tmp_path: Path, kind: str, failure: str, then: str
) -> None:
    """As Pi's ``firstStructural``: a handler that raises (or returns the wrong type, or
    tries to both decline and give a result) is a ``handler_error`` event and is
    skipped; the next handler decides, and with none left the model is asked."""
    model = Counting()
    session, harness = await _with_two_turns(tmp_path, model)
    events: list[Any] = []
    harness.subscribe(events.append)
    given = CompactionResult(summary="x", tokens_before=0, usage=None, retained_tail=(), details={})

    def bad(event: Any) -> Any:
        if failure == "raises":
            raise RuntimeError("boom")
        if failure == "both":
            return BeforeCompactionResult(decline=True, compaction=given)  # (raises)
        return "decline"

    harness.hooks.on(f"before_{kind}", bad)
    if then == "a decliner":
        harness.hooks.on("before_compaction", lambda _: BeforeCompactionResult(decline=True))
        harness.hooks.on("before_navigation", lambda _: BeforeNavigationResult(decline=True))
    if kind == "compaction":
        end: Any = await harness.compact()
    else:
        end = await harness.navigate_tree(session.get_branch()[0].id, summarize=True)
    errors = [e for e in events if e.type == "handler_error"]
    assert [e.hook for e in errors] == [f"before_{kind}"]
    expected = {"raises": "boom", "wrong type": "'decline'", "both": "decline=True or"}
    assert expected[failure] in errors[0].error_message
    if then == "nothing":  # the model was asked
        assert (end.status, model.requests >= 1) == ("completed", True)
    else:
        assert (end.status, model.requests) == ("declined", 0)
    assert last_result(session)["status"] == end.status
    assert leftovers(session) == []
    await session.close()


async def test_a_declined_navigation_keeps_the_tip_and_the_context(tmp_path: Path) -> None:
    model = Counting()
    session, harness = await _with_two_turns(tmp_path, model)
    source = session.leaf_id
    before = list(harness.messages)
    seen: list[BeforeNavigationEvent] = []

    def decline(event: BeforeNavigationEvent) -> BeforeNavigationResult:
        seen.append(event)
        return BeforeNavigationResult(decline=True)

    harness.hooks.on("before_navigation", decline)
    target = session.get_branch()[1].id
    end = await harness.navigate_tree(target, summarize=True, label="back")
    assert (end.status, end.from_tip_id, end.tip_id) == ("declined", source, source)
    assert seen[0].target_id == target
    assert [m.role for m in seen[0].preparation.messages] == ["user", "user"]
    assert session.leaf_id == source
    assert session.labels == {}
    assert harness.messages == before
    assert model.requests == 0
    assert last_result(session)["status"] == "declined"
    await session.close()


async def test_a_navigation_without_a_summary_asks_no_hook(tmp_path: Path) -> None:
    session, harness = await _with_two_turns(tmp_path, Counting())
    seen: list[Any] = []
    harness.hooks.on("before_navigation", seen.append)
    end = await harness.navigate_tree(session.get_branch()[0].id)
    assert end.status == "completed"
    assert seen == []
    await session.close()


async def test_a_supplied_branch_summary_is_written_under_the_target(tmp_path: Path) -> None:
    model = Counting()
    session, harness = await _with_two_turns(tmp_path, model)
    source = session.leaf_id
    target = session.get_branch()[1].id
    given = BranchSummaryResult(
        summary="WHAT HAPPENED", usage=None, read_files=["a.py"], modified_files=[]
    )
    harness.hooks.on("before_navigation", lambda e: BeforeNavigationResult(summary=given))
    end = await harness.navigate_tree(target, summarize=True, custom_instructions="short")
    assert (end.status, end.summary) == ("completed", "WHAT HAPPENED")
    entry = session.get_branch()[-1]
    assert isinstance(entry, BranchSummaryEntry)
    assert (entry.id, entry.parent_id, entry.from_id) == (end.entry_id, target, source)
    assert entry.details == {"readFiles": ["a.py"], "modifiedFiles": []}
    assert entry.from_hook is True
    assert model.requests == 0
    assert harness.messages[-1].role == "branchSummary"
    await session.close()


async def test_abort_ends_a_hook_that_waits_and_the_operation_as_aborted(
    tmp_path: Path,
) -> None:
    session, harness = await _with_two_turns(tmp_path, Counting())
    entered = trio.Event()

    async def waits(event: BeforeCompactionEvent) -> None:
        entered.set()
        await trio.sleep_forever()

    harness.hooks.on("before_compaction", waits)
    end = await while_out(harness.compact, entered, harness.abort)
    assert end.status == "aborted"
    assert last_result(session)["status"] == "aborted"
    await session.close()


async def test_a_threshold_compaction_inside_a_run_asks_the_hook(tmp_path: Path) -> None:
    answers = ScriptedModel([ScriptedResponse.text("one"), ScriptedResponse.text("two")])
    session, harness = await _harness(tmp_path, answers, window=1000)
    seen: list[BeforeCompactionEvent] = []

    def decline(event: BeforeCompactionEvent) -> BeforeCompactionResult:
        seen.append(event)
        return BeforeCompactionResult(decline=True)

    ends: list[Any] = []
    harness.subscribe(lambda e: ends.append(e) if e.type == "compaction_end" else None)
    harness.hooks.on("before_compaction", decline)
    await harness.prompt("first")
    await harness.prompt("second")
    assert seen
    assert {e.reason for e in seen} == {"threshold"}
    assert ends
    assert {e.status for e in ends} == {"declined"}
    assert not any(isinstance(e, CompactionEntry) for e in session.get_branch())
    await session.close()


def test_a_result_cannot_both_decline_and_give() -> None:
    given = BranchSummaryResult(summary="x", usage=None, read_files=[], modified_files=[])
    with pytest.raises(UsageError, match="decline=True or summary"):
        BeforeNavigationResult(decline=True, summary=given)
    compaction = CompactionResult(
        summary="x", tokens_before=0, usage=None, retained_tail=(), details={}
    )
    with pytest.raises(UsageError, match="decline=True or compaction"):
        BeforeCompactionResult(decline=True, compaction=compaction)


@pytest.mark.parametrize("failure", ["raises", "wrong type"])
async def test_the_structural_runners_raise_without_an_error_report(failure: str) -> None:
    """``Hooks.run_before_compaction`` / ``run_before_navigation`` skip a failing handler
    only for a caller that takes the report (the harness does); otherwise it is a
    ``HookError`` naming the hook."""
    hooks = Hooks()

    def bad(event: Any) -> Any:
        if failure == "raises":
            raise RuntimeError("boom")
        return "decline"

    hooks.on("before_compaction", bad)
    hooks.on("before_navigation", bad)
    nothing: Any = None  # (the handlers do not look at the preparation)
    compaction = BeforeCompactionEvent(
        reason="manual", preparation=nothing, custom_instructions=None, operation_id=None
    )
    navigation = BeforeNavigationEvent(
        target_id="t", preparation=nothing, custom_instructions=None, operation_id=None
    )
    with pytest.raises(HookError, match="before_compaction hook failed"):
        await hooks.run_before_compaction(compaction)
    with pytest.raises(HookError, match="before_navigation hook failed"):
        await hooks.run_before_navigation(navigation)
    reported: list[tuple[str, str]] = []

    async def report(hook: Any, exc: Exception) -> None:
        reported.append((hook, type(exc).__name__))

    assert await hooks.run_before_compaction(compaction, report) is None
    assert await hooks.run_before_navigation(navigation, report) is None
    assert reported == [("before_compaction", "HookError"), ("before_navigation", "HookError")]
