"""Compaction inside a run, and the run Pi starts after a compaction or navigation.

A compaction at the threshold inside a run is recorded as Pi 0.85.0's drive records it
(``drive/checkpoint.js``, ``drive/structural.js``: the run's own ``summary.*`` states, its
task resuming the run at its checkpoint), pinned against Pi's harness (below: writes, a
kill mid-summary, and the restore both ways).

Pi 0.85.0's lane (``lane.js``, ``continueAfterStructural``): once ``lane.compact()`` or
``lane.navigateTree()`` has settled, and unless it was aborted, the lane accepts a run
with no prompt of its own: when the inbox holds steering, follow-up or next-run messages
the run takes them (as a prompt's start does) and goes on; with an empty inbox nothing
runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pitrio import Model, TextContent, Tool, ToolResult, UsageError, text_result
from pitrio.harness import (
    CompactionEntry,
    CompactionSettings,
    Harness,
    JsonlSessionStore,
    RetrySettings,
    restore_lane,
)
from pitrio.testing import ScriptedModel, ScriptedResponse

from ._structural_child import LONG, SMALL, main as run_child
from ._structural_helpers import Hanging, last_result, while_out
from .test_compaction_ops import (
    DATA,
    copy_fixture,
    kill_mid_summary,
    leftovers,
    only_jsonl,
    our_events,
    pi,
    pi_events,
    pi_killed,
    shape,
    transactions,
)
from .test_navigation import _two_turns as _navigation_turns


def _text(message: Any) -> str:
    return "".join(c.text for c in message.content if isinstance(c, TextContent))


async def _two_turns(tmp_path: Path, stream_fn: Any) -> tuple[Any, Harness]:
    """Two turns in the session; a compaction keeps only the last message's turn."""
    session, harness = await _navigation_turns(tmp_path, stream_fn)
    harness.compaction = CompactionSettings(keep_recent_tokens=1)
    return session, harness


def _answers(context: Any) -> ScriptedResponse:
    last = _text(context.messages[-1])
    return ScriptedResponse.text(f"answer to {last}")


async def test_a_navigation_runs_the_messages_queued_for_the_next_run(tmp_path: Path) -> None:
    session, harness = await _two_turns(tmp_path, ScriptedModel(_answers))
    first_answer = session.get_branch()[1].id
    events: list[Any] = []
    harness.subscribe(events.append)
    await harness.enqueue("next_run", "third")
    end = await harness.navigate_tree(first_answer)
    assert end.status == "completed"
    kinds = [e.type for e in events]
    # The run starts after the navigation has ended, and settles before navigate_tree returns.
    assert kinds.index("navigation_end") < kinds.index("agent_start") < kinds.index("agent_end")
    branch = [e.message for e in session.get_branch() if hasattr(e, "message")]
    assert [_text(m) for m in branch] == ["first", "one", "third", "answer to third"]
    assert harness.queued == ()
    assert leftovers(session) == []
    await session.close()


async def test_a_compaction_runs_what_was_queued_while_it_summarised(tmp_path: Path) -> None:
    summary = ScriptedModel(lambda _: ScriptedResponse.text("SUMMARY"))
    harness: Harness | None = None
    summaries: list[Any] = []
    runs: list[Any] = []

    async def stream(model: Any, context: Any, options: Any) -> Any:
        if _text(context.messages[0]).startswith("<conversation>"):
            if not summaries:  # a follow-up is queued while the summary is asked
                assert harness is not None
                await harness.enqueue("follow_up", "later")
            summaries.append(context)
            return summary(model, context, options)
        runs.append(context)
        return ScriptedModel(_answers)(model, context, options)

    session, harness = await _two_turns(tmp_path, stream)
    end = await harness.compact()
    assert end.status == "completed"
    assert len(summaries) == 2  # (a split turn: its prefix is summarised too)
    assert [_text(m) for m in runs[0].messages][1:] == ["two", "later"]  # after the summary
    assert len(runs) == 1
    branch = session.get_branch()
    compaction = next(n for n, e in enumerate(branch) if isinstance(e, CompactionEntry))
    after = [_text(e.message) for e in branch[compaction + 1 :]]
    assert after == ["later", "answer to later"]
    assert harness.queued == ()
    assert leftovers(session) == []
    await session.close()


async def test_nothing_runs_after_an_aborted_compaction(tmp_path: Path) -> None:
    hanging = Hanging()
    session, harness = await _two_turns(tmp_path, hanging)

    async def queue_then_abort() -> None:
        await harness.enqueue("follow_up", "later")
        harness.abort()

    end = await while_out(harness.compact, hanging.started, queue_then_abort)
    assert end.status == "aborted"
    assert [_text(q.message) for q in harness.queued] == ["later"]  # still queued
    assert len(session.get_branch()) == 4
    await session.close()


async def test_nothing_runs_after_a_navigation_with_an_empty_queue(tmp_path: Path) -> None:
    calls = 0

    async def counting(model: Any, context: Any, options: Any) -> Any:
        nonlocal calls
        calls += 1
        return ScriptedModel(_answers)(model, context, options)

    session, harness = await _two_turns(tmp_path, counting)
    end = await harness.navigate_tree(session.get_branch()[1].id)
    assert end.status == "completed"
    assert calls == 0
    assert len(session.get_branch()) == 2
    await session.close()


# -- a compaction at the threshold inside a run, against Pi ----------------------------
#
# ``node/pi_structural.mjs run ROOT pi-threshold threshold`` (``data/structural/``): two
# prompts on a model whose window is the reserve plus 60 tokens, the second answered at
# length, so the second run compacts at its checkpoint after that answer. Pi records the
# compaction as the run's states (``summary.deciding`` with a ``resume_checkpoint`` task,
# ``summary.ready``, ``summary.effect_pending`` and its requests), then the entry with the
# run back at its checkpoint, then the run's end. ``hang-threshold``: killed mid-summary
# (``pi-hang-threshold.killed.jsonl``), and that file once Pi's ``lane.resume()`` finished
# it (``.resumed.jsonl``).


def _from_preparation(txs: list[list[dict[str, Any]]]) -> list[list[dict[str, Any]]]:
    """The transactions from the one that records a compaction's preparation."""
    for n, tx in enumerate(txs):
        if any(w.get("namespace") == "pi.op.preparation" for w in tx):
            return txs[n:]
    return []


def _states(txs: list[list[dict[str, Any]]]) -> list[str]:
    return [
        w["value"]["at"]
        for tx in txs
        for w in tx
        if w.get("namespace") == "pi.op.state" and w["op"] == "set"
    ]


def _harness_on(session: Any) -> Harness:
    return Harness(
        model=SMALL,
        stream_fn=ScriptedModel(lambda _: ScriptedResponse.text("SUMMARY AGAIN")),
        session=session,
        compaction=CompactionSettings(keep_recent_tokens=1),
        retry=RetrySettings(base_delay=0.001),
    )


async def test_a_threshold_compaction_in_a_run_writes_what_pi_writes(tmp_path: Path) -> None:
    events: list[Any] = []
    await run_child(tmp_path, "pitrio", "threshold", events)
    assert our_events(events) == pi_events("pi-threshold")
    assert [e["reason"] for e in pi_events("pi-threshold")] == ["threshold", "threshold"]
    ours = _from_preparation(transactions(only_jsonl(tmp_path)))
    pis = _from_preparation(transactions(DATA / "pi-threshold.jsonl"))
    assert shape(ours) == shape(pis)
    assert _states(pis)[:3] == ["summary.deciding", "summary.ready", "summary.effect_pending"]
    deciding = next(w["value"] for w in pis[0] if w.get("namespace") == "pi.op.state")
    assert deciding["task"]["reason"] == "threshold"
    assert deciding["task"]["boundary"]["kind"] == "resume_checkpoint"
    # The entry, with the run at its checkpoint again; then the run's end.
    entry, resumed = pis[-2], pis[-1]
    assert [w.get("type") or w["namespace"] for w in entry][:3] == [
        "compaction", "pi.branch.tip", "pi.op.state"
    ]  # fmt: skip
    assert _states([entry]) == ["checkpoint"]
    result = next(w["value"] for w in resumed if w.get("namespace") == "pi.result")
    assert (result["kind"], result["status"]) == ("run", "completed")


async def test_pi_writes_the_recorded_threshold_compaction(
    tmp_path: Path, pi_node_modules: Path
) -> None:
    out = await pi(pi_node_modules, "run", str(tmp_path), "pi", "threshold")
    assert out["events"] == json.loads((DATA / "pi-threshold.json").read_text())["events"]
    live = _from_preparation(transactions(Path(out["file"])))
    assert shape(live) == shape(_from_preparation(transactions(DATA / "pi-threshold.jsonl")))


async def test_a_run_killed_mid_threshold_summary_leaves_what_pi_leaves(tmp_path: Path) -> None:
    path = await kill_mid_summary(tmp_path, "pitrio", "hang-threshold")
    ours = _from_preparation(transactions(path))
    pis = _from_preparation(transactions(DATA / "pi-hang-threshold.killed.jsonl"))
    assert shape(ours) == shape(pis)
    session = await JsonlSessionStore(tmp_path).open("pitrio", read_only=True)
    operation = restore_lane(session).operation
    assert operation is not None
    assert (operation.intent, operation.at) == ("run", "summary.effect_pending")
    await session.close()


async def test_pi_killed_mid_threshold_summary_is_the_recorded_fixture(
    tmp_path: Path, pi_node_modules: Path
) -> None:
    path = await pi_killed(pi_node_modules, tmp_path, "hang-threshold")
    fixture = DATA / "pi-hang-threshold.killed.jsonl"
    assert shape(_from_preparation(transactions(path))) == shape(
        _from_preparation(transactions(fixture))
    )


async def test_pitrio_finishes_the_run_pi_left_mid_compaction_as_pi_does(tmp_path: Path) -> None:
    path = copy_fixture("pi-hang-threshold.killed", tmp_path)
    killed = len(transactions(path))
    session = await JsonlSessionStore(tmp_path).open("pi-hang-threshold")
    harness = _harness_on(session)
    assert harness.interrupted is not None
    assert (harness.interrupted.intent, harness.interrupted.at) == (
        "run",
        "summary.effect_pending",
    )
    events: list[Any] = []
    harness.subscribe(events.append)
    await harness.resume()
    kinds = [e.type for e in events]
    assert kinds[:4] == ["recovery_start", "compaction_start", "compaction_end", "recovery_end"]
    assert (events[1].reason, events[2].reason, events[2].status) == (
        "threshold",
        "threshold",
        "completed",
    )
    branch = session.get_branch()
    assert isinstance(branch[-1], CompactionEntry)
    assert branch[-1].summary.startswith("SUMMARY AGAIN")
    assert restore_lane(session).operation is None
    assert leftovers(session) == []
    await session.close()
    # After the kill: the attempt counted as interrupted, attempt 2 and its requests, the
    # entry (under the id reserved before the kill) with the run at its checkpoint, the end.
    ours = transactions(path)[killed:]
    pis = transactions(DATA / "pi-hang-threshold.resumed.jsonl")[killed:]
    assert shape(ours) == shape(pis)
    assert ours[-2][0]["id"] == pis[-2][0]["id"]
    resumed = json.loads((DATA / "pi-hang-threshold.resumed.json").read_text())
    assert resumed["open"] == [{"lane": "main", "kind": "run"}]
    assert resumed["events"][-1] == {"type": "run_end", "status": "completed"}


async def test_pi_finishes_the_run_pitrio_left_mid_compaction(
    tmp_path: Path, pi_node_modules: Path
) -> None:
    path = await kill_mid_summary(tmp_path, "pitrio", "hang-threshold")
    out = await pi(pi_node_modules, "resume", str(path))
    assert out["open"] == [{"lane": "main", "kind": "run"}]
    assert out["result"] == "completed"
    assert out["events"][0] == {
        "type": "retry_scheduled", "recovery": True, "attempt": 2, "step": "task"
    }  # fmt: skip
    assert out["branch"][-1] == ["compaction", "SUMMARY AGAIN"]
    assert out["lane"] == {"current": None, "result": {"kind": "run", "status": "completed"}}
    session = await JsonlSessionStore(tmp_path).open("pitrio", read_only=True)
    assert restore_lane(session).operation is None
    assert isinstance(session.get_branch()[-1], CompactionEntry)
    await session.close()


# -- between two requests of a run -----------------------------------------------------


async def test_a_compaction_between_requests_resumes_the_run_at_its_next_request(
    tmp_path: Path,
) -> None:
    """A tool's output passes the threshold: the run compacts before its next request, as
    Pi's checkpoint does (``need_assistant``): the entry is written with the run
    ``assistant.ready`` at the checkpoint's trigger, and that request goes out from there."""

    async def read(call_id: str, params: Any, sig: Any, on_update: Any) -> ToolResult:
        return text_result("r" * 2000)

    def answer(context: Any) -> ScriptedResponse:
        if str(context.system_prompt).startswith("You are a context summarization"):
            return ScriptedResponse.text("SUMMARY")
        if any(m.role == "toolResult" for m in context.messages):
            return ScriptedResponse.text("done")
        return ScriptedResponse.tool_calls(("c1", "read", {}))

    session = await JsonlSessionStore(tmp_path).create(cwd=str(tmp_path), session_id="s")
    model = Model(id="scripted", api="scripted", provider="local", context_window=16384 + 200)
    harness = Harness(
        model=model,
        stream_fn=ScriptedModel(answer),
        session=session,
        tools=[Tool(name="read", description="r", execute=read, parameters={"type": "object"})],
        # The tool's output alone (500 tokens) is under what to keep, with its call over
        # it: the cut is at the call, so the prompt is a turn prefix to summarise (with
        # less to keep, the cut would pass the output and find nothing to summarise).
        compaction=CompactionSettings(keep_recent_tokens=501),
    )
    await harness.set_model(model)
    events: list[Any] = []
    harness.subscribe(events.append)
    await harness.prompt("go")
    # Two: before the request after the tool's output, and after the last answer (the
    # retained tail holds that output still).
    assert [(e.reason, e.status) for e in events if e.type == "compaction_end"] == [
        ("threshold", "completed")
    ] * 2
    assert _text(harness.messages[-1]) == "done"
    await session.close()
    txs = transactions(only_jsonl(tmp_path))
    states = [
        w["value"]
        for tx in txs
        for w in tx
        if w.get("namespace") == "pi.op.state" and w["op"] == "set"
    ]
    summary = ["summary.deciding", "summary.ready", *["summary.effect_pending"] * 3]
    assert [s["at"] for s in states] == [
        "starting", "checkpoint", "assistant.ready", "assistant.effect_pending",
        *["tools"] * 3, "checkpoint",
        *summary, "assistant.ready", "assistant.effect_pending", "checkpoint",
        *summary, "checkpoint",
    ]  # fmt: skip
    first, second = states[8]["task"], states[16]["task"]
    resume_after = first["boundary"]["resumeAfter"]
    assert resume_after["continuation"] == {"kind": "need_assistant", "overflowRecoveryUsed": False}
    assert second["boundary"]["resumeAfter"]["continuation"]["kind"] == "may_finish"
    ready, pending = states[13], states[14]
    assert ready["generationContext"]["triggerEntryId"] == resume_after["triggerEntryId"]
    assert pending["generationContext"] == ready["generationContext"]
    entry_tx = next(tx for tx in txs if any(w.get("type") == "compaction" for w in tx))
    assert [w.get("namespace") for w in entry_tx][1:3] == ["pi.branch.tip", "pi.op.state"]
    reopened = await JsonlSessionStore(tmp_path).open("s", read_only=True)
    assert restore_lane(reopened).operation is None
    assert leftovers(reopened) == []
    await reopened.close()


# -- a run's compaction that fails or is aborted ----------------------------------------


async def _long_second_run(tmp_path: Path, summary: Any, **options: Any) -> tuple[Any, Harness]:
    """A harness whose second prompt ("second", answered at length) compacts at the
    threshold inside its run; ``summary`` answers the summary requests; ``options`` go
    to the harness."""

    async def stream(model: Any, context: Any, options: Any) -> Any:
        if str(context.system_prompt).startswith("You are a context summarization"):
            return await summary(model, context, options)
        text = _text(context.messages[-1])
        answer = LONG if text == "second" else "one"
        return ScriptedModel(lambda _: ScriptedResponse.text(answer))(model, context, options)

    session = await JsonlSessionStore(tmp_path).create(cwd=str(tmp_path), session_id="s")
    harness = Harness(
        model=SMALL,
        stream_fn=stream,
        session=session,
        compaction=CompactionSettings(keep_recent_tokens=1),
        retry=RetrySettings(enabled=False),
        **options,
    )
    await harness.set_model(SMALL)
    await harness.prompt("first")
    return session, harness


async def test_a_failed_compaction_after_the_last_answer_ends_the_run_failed(
    tmp_path: Path,
) -> None:
    """As Pi's ``resume_checkpoint`` boundary ends it (``test_compaction_run_ends.py``
    holds the writes to Pi's): the run's records give way to its failed result."""
    failing = ScriptedModel(
        lambda _: ScriptedResponse(stop_reason="error", error_message="invalid request")
    )

    async def summary(model: Any, context: Any, options: Any) -> Any:
        return failing(model, context, options)

    session, harness = await _long_second_run(tmp_path, summary)
    events: list[Any] = []
    harness.subscribe(events.append)
    await harness.prompt("second")
    ends = [e for e in events if e.type == "compaction_end"]
    assert [(e.reason, e.status) for e in ends] == [("threshold", "failed")]
    assert _text(harness.messages[-1]) == LONG  # the run's answer stands, uncompacted
    assert events[-1].message.error_message == "Summarization failed: invalid request"
    assert not any(isinstance(e, CompactionEntry) for e in session.get_branch())
    result = last_result(session)
    assert (result["kind"], result["status"], result["error"]["code"]) == (
        "run",
        "failed",
        "summarization_failed",
    )
    assert leftovers(session) == []
    await session.close()
    states = _states(transactions(only_jsonl(tmp_path)))
    assert states[-1] == "summary.effect_pending"  # then the result, in one transaction


async def test_a_failed_compaction_goes_on_uncompacted_when_asked_to(tmp_path: Path) -> None:
    """``compaction_failure="continue"`` (Pi's coding agent, the CLI): the failure is
    reported, the run completes with its answer, and the run's records end as a
    completed run's, the checkpoint written back after the summary's states."""

    async def summary(model: Any, context: Any, options: Any) -> Any:
        failing = ScriptedResponse(stop_reason="error", error_message="invalid request")
        return ScriptedModel(lambda _: failing)(model, context, options)

    session, harness = await _long_second_run(tmp_path, summary, compaction_failure="continue")
    events: list[Any] = []
    harness.subscribe(events.append)
    await harness.prompt("second")
    ends = [e for e in events if e.type == "compaction_end"]
    assert [(e.reason, e.status, e.error_message) for e in ends] == [
        ("threshold", "failed", "Summarization failed: invalid request")
    ]
    assert events[-1].message.stop_reason == "stop"
    assert _text(harness.messages[-1]) == LONG
    assert not any(isinstance(e, CompactionEntry) for e in session.get_branch())
    assert (last_result(session)["kind"], last_result(session)["status"]) == ("run", "completed")
    assert leftovers(session) == []
    await session.close()
    states = _states(transactions(only_jsonl(tmp_path)))
    assert states[-2:] == ["summary.effect_pending", "checkpoint"]
    reopened = await JsonlSessionStore(tmp_path).open("s", read_only=True)
    assert restore_lane(reopened).operation is None
    await reopened.close()


def test_compaction_failure_takes_one_of_two_values() -> None:
    with pytest.raises(UsageError, match="compaction_failure must be 'fail_run' or 'continue'"):
        Harness(model=SMALL, compaction_failure="ignore")  # type: ignore[arg-type]


async def test_abort_during_a_compaction_in_a_run_ends_the_run_aborted(tmp_path: Path) -> None:
    hanging = Hanging()
    session, harness = await _long_second_run(tmp_path, hanging)
    events: list[Any] = []
    harness.subscribe(events.append)

    def check_then_abort() -> None:
        assert restore_lane(session).operation.at == "summary.effect_pending"  # type: ignore[union-attr]
        harness.abort()

    await while_out(lambda: harness.prompt("second"), hanging.started, check_then_abort)
    ends = [e for e in events if e.type == "compaction_end"]
    assert [(e.reason, e.status) for e in ends] == [("threshold", "aborted")]
    assert last_result(session)["status"] == "aborted"
    assert not any(isinstance(e, CompactionEntry) for e in session.get_branch())
    assert leftovers(session) == []  # the preparation went with the run's records
    await session.close()


# -- continueAfterStructural, against Pi -------------------------------------------------


def _branch(session: Any) -> list[list[Any]]:
    """The branch as ``pi_structural.mjs`` prints it (type, and role and text / summary)."""
    out: list[list[Any]] = []
    for entry in session.get_branch():
        if isinstance(entry, CompactionEntry):
            out.append(["compaction", entry.summary.split("\n")[0]])
        elif hasattr(entry, "message"):
            out.append(["message", entry.message.role, _text(entry.message)])
    return out


async def test_a_queued_message_runs_after_a_compaction_as_in_pi(tmp_path: Path) -> None:
    events: list[Any] = []
    await run_child(tmp_path, "pitrio", "compact-queued", events)
    recorded = json.loads((DATA / "pi-compact-queued.json").read_text())
    kinds = [e["type"] for e in recorded["events"]]
    assert kinds.index("compaction_end") < kinds.index("run_start")
    ours = [e.type for e in events]
    assert ours.index("compaction_end") < ours.index("agent_start") < ours.index("agent_end")
    session = await JsonlSessionStore(tmp_path).open("pitrio", read_only=True)
    assert _branch(session) == recorded["branch"]
    assert _branch(session)[-2:] == [
        ["message", "user", "later"],
        ["message", "assistant", "answer to later"],
    ]
    assert restore_lane(session).operation is None
    assert leftovers(session) == []
    await session.close()


async def test_pi_runs_the_queued_message_after_a_compaction(
    tmp_path: Path, pi_node_modules: Path
) -> None:
    out = await pi(pi_node_modules, "run", str(tmp_path), "pi", "compact-queued")
    recorded = json.loads((DATA / "pi-compact-queued.json").read_text())
    assert (out["events"], out["branch"]) == (recorded["events"], recorded["branch"])
