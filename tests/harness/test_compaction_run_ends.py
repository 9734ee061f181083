"""A run's compaction as Pi 0.85.0's drive does it, where the run starts or ends.

- The threshold is checked at the run's first checkpoint too (``drive/checkpoint.js``,
  ``runCheckpoint`` after ``startRun``): a prompt whose context is already over it
  compacts before its first request.
- A context overflow's compaction is recorded in the failed answer's transaction
  (``drive/response.js``, ``publishResponse``: the answer with the run's
  ``summary.deciding``, an ``overflow`` task resuming at ``need_assistant``), and a run
  killed during it is finished from there.
- A run's compaction that fails ends the run as failed (``drive/structural.js``, the
  ``resume_checkpoint`` boundary: ``pi.result`` with the summary's error), and an
  overflow's compaction a hook declines fails it with ``compaction_declined``.

Each is pinned against Pi's own harness: ``node/pi_structural.mjs run ROOT pi-MODE MODE``
for the modes below, recorded in ``data/structural/pi-MODE.jsonl`` / ``.json``; pitrio's
harness on the same script (``_structural_child.py``) must make the same transactions
(:func:`outline`: what each writes, in order; the usage row Pi writes beside each answer
is a documented difference) and the same compaction events.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pitrio import Model, TextContent, Tool, ToolResult, text_result
from pitrio.harness import (
    CompactionEntry,
    CompactionSettings,
    Harness,
    JsonlSessionStore,
    RetrySettings,
    restore_lane,
)
from pitrio.testing import ScriptedModel, ScriptedResponse

from ._structural_child import OVERFLOW, SMALL, main as run_child
from ._structural_helpers import last_result
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

MODES = ("first-threshold", "threshold-fail", "overflow", "overflow-decline")


def outline(txs: list[list[dict[str, Any]]]) -> list[list[str]]:
    """What each transaction writes, in order: entries by type (and role), op states by
    ``at``, results by status and error code, other values by namespace; the streamed
    frames and the usage row beside an answer (which pitrio does not write) left out,
    and so a transaction of frames only."""
    out = []
    for tx in txs:
        answer = any(w.get("kind") == "entry" and w.get("type") == "message" for w in tx)
        row = []
        for w in tx:
            namespace = w.get("namespace")
            if w.get("kind") == "entry":
                role = w["message"]["role"] if w["type"] == "message" else None
                row.append(f"entry {w['type']}" + (f" {role}" if role else ""))
            elif w.get("kind") == "usage":
                if not answer:
                    row.append("usage")
            elif namespace == "pi.pending.assistant_frame":
                continue
            elif namespace == "pi.op.state" and w["op"] == "set":
                row.append(f"state {w['value']['at']}")
            elif namespace == "pi.result":
                error = (w["value"].get("error") or {}).get("code")
                row.append(f"result {w['value']['status']} {error}")
            else:
                row.append(f"{namespace} {w['op']}")
        if row:
            out.append(row)
    return out


def _recorded(mode: str) -> dict[str, Any]:
    return json.loads((DATA / f"pi-{mode}.json").read_text())  # type: ignore[no-any-return]


def _branch(session: Any) -> list[list[Any]]:
    """The branch as ``pi_structural.mjs`` prints it, a compaction without its summary."""
    out: list[list[Any]] = []
    for entry in session.get_branch():
        if isinstance(entry, CompactionEntry):
            out.append(["compaction"])
        elif hasattr(entry, "message"):
            text = " ".join(c.text for c in entry.message.content if isinstance(c, TextContent))
            out.append(["message", entry.message.role, text])
    return out


@pytest.mark.parametrize("mode", MODES)
async def test_a_run_compaction_writes_what_pi_writes(tmp_path: Path, mode: str) -> None:
    events: list[Any] = []
    await run_child(tmp_path, "pitrio", mode, events)
    theirs = pi_events(f"pi-{mode}")
    assert our_events(events) == [{k: v for k, v in e.items() if k != "error"} for e in theirs]
    path = only_jsonl(tmp_path)
    assert outline(transactions(path)) == outline(transactions(DATA / f"pi-{mode}.jsonl"))
    recorded = _recorded(mode)
    session = await JsonlSessionStore(tmp_path).open("pitrio", read_only=True)
    result = last_result(session)
    assert {"kind": "run", "status": result["status"], "error": result.get("error")} == (
        recorded["run"]
    )
    pis = [[*e[:1]] if e[0] == "compaction" else e for e in recorded["branch"]]
    assert _branch(session) == pis
    assert leftovers(session) == []
    await session.close()
    settled = events[-1]
    assert settled.type == "settled"
    if recorded["run"]["status"] == "failed":
        # The run's last message says why; it is not in the transcript (nor in Pi's).
        assert settled.message.stop_reason == "error"
        assert settled.message.error_message == recorded["run"]["error"]["message"]
    else:
        assert settled.message.stop_reason == "stop"


async def test_an_overflow_is_recorded_with_the_failed_answer(tmp_path: Path) -> None:
    await run_child(tmp_path, "pitrio", "overflow")
    txs = transactions(only_jsonl(tmp_path))
    pis = transactions(DATA / "pi-overflow.jsonl")

    def answer_and_task(txs: list[list[dict[str, Any]]]) -> list[Any]:
        tx = next(tx for tx in txs if any(w.get("namespace") == "pi.op.preparation" for w in tx))
        return [w for w in tx if w.get("kind") != "usage"]

    ours, theirs = answer_and_task(txs), answer_and_task(pis)
    for answer in (ours[0], theirs[0]):  # (the scripts' answers differ in an empty text)
        message = answer.pop("message")
        assert (message["stopReason"], message["errorMessage"]) == ("error", OVERFLOW)
    deciding = next(w["value"] for w in theirs if w.get("namespace") == "pi.op.state")
    assert deciding["task"]["reason"] == "overflow"
    assert deciding["task"]["boundary"]["resumeAfter"]["continuation"] == {
        "kind": "need_assistant",
        "overflowRecoveryUsed": True,
    }
    for write in ours + theirs:  # (the estimates and frames' deletion aside)
        write.pop("value", None) if write.get("namespace") == "pi.op.preparation" else None
    assert shape([ours]) == shape([theirs])


# -- a run killed during its overflow's compaction ------------------------------------


async def test_a_run_killed_mid_overflow_summary_leaves_what_pi_leaves(tmp_path: Path) -> None:
    path = await kill_mid_summary(tmp_path, "pitrio", "hang-overflow")
    assert outline(transactions(path)) == outline(
        transactions(DATA / "pi-hang-overflow.killed.jsonl")
    )
    session = await JsonlSessionStore(tmp_path).open("pitrio", read_only=True)
    operation = restore_lane(session).operation
    assert operation is not None
    assert (operation.intent, operation.at) == ("run", "summary.effect_pending")
    assert operation.state["task"]["reason"] == "overflow"
    await session.close()


def _answers_again(context: Any) -> ScriptedResponse:
    return ScriptedResponse.text("SUMMARY AGAIN")


async def test_pitrio_finishes_the_overflow_compaction_pi_left_as_pi_does(
    tmp_path: Path,
) -> None:
    path = copy_fixture("pi-hang-overflow.killed", tmp_path)
    killed = len(transactions(path))
    session = await JsonlSessionStore(tmp_path).open("pi-hang-overflow")
    model = Model(id="scripted", api="scripted", provider="local", context_window=200_000)
    harness = Harness(
        model=model,
        stream_fn=ScriptedModel(_answers_again),
        session=session,
        compaction=CompactionSettings(keep_recent_tokens=1),
        retry=RetrySettings(base_delay=0.001),
    )
    assert harness.interrupted is not None
    events: list[Any] = []
    harness.subscribe(events.append)
    await harness.resume()
    ends = [(e.reason, e.status) for e in events if e.type == "compaction_end"]
    assert ends == [("overflow", "completed")]
    recorded = json.loads((DATA / "pi-hang-overflow.resumed.json").read_text())
    assert _branch(session) == [[*e[:1]] if e[0] == "compaction" else e for e in recorded["branch"]]
    assert last_result(session)["status"] == recorded["lane"]["result"]["status"] == "completed"
    assert leftovers(session) == []
    await session.close()
    ours = outline(transactions(path)[killed:])
    assert ours == outline(transactions(DATA / "pi-hang-overflow.resumed.jsonl")[killed:])


async def test_pi_finishes_the_overflow_compaction_pitrio_left(
    tmp_path: Path, pi_node_modules: Path
) -> None:
    path = await kill_mid_summary(tmp_path, "pitrio", "hang-overflow")
    out = await pi(pi_node_modules, "resume", str(path))
    recorded = json.loads((DATA / "pi-hang-overflow.resumed.json").read_text())
    assert (out["open"], out["result"], out["lane"]) == (
        recorded["open"],
        recorded["result"],
        recorded["lane"],
    )
    assert out["branch"] == recorded["branch"]
    assert [e["type"] for e in out["events"]] == [e["type"] for e in recorded["events"]]


# -- Pi's own harness, live ------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_pi_writes_the_recorded_run_compaction(
    tmp_path: Path, pi_node_modules: Path, mode: str
) -> None:
    out = await pi(pi_node_modules, "run", str(tmp_path), f"pi-{mode}", mode)
    out.pop("file")
    assert out == _recorded(mode)
    live = outline(transactions(only_jsonl(tmp_path)))
    assert live == outline(transactions(DATA / f"pi-{mode}.jsonl"))


async def test_pi_killed_mid_overflow_summary_is_the_recorded_fixture(
    tmp_path: Path, pi_node_modules: Path
) -> None:
    path = await pi_killed(pi_node_modules, tmp_path, "hang-overflow")
    fixture = DATA / "pi-hang-overflow.killed.jsonl"
    assert outline(transactions(path)) == outline(transactions(fixture))


# -- where the compaction fails inside the Agent's loop --------------------------------


def _failing_summary(long_answer: bool) -> Any:
    def answer(context: Any) -> ScriptedResponse:
        if str(context.system_prompt).startswith("You are a context summarization"):
            return ScriptedResponse(stop_reason="error", error_message="invalid request")
        if any(m.role == "toolResult" for m in context.messages):
            return ScriptedResponse.text("done")
        if long_answer:
            return ScriptedResponse.tool_calls(("c1", "read", {}))
        return ScriptedResponse.text("one")

    return ScriptedModel(answer)


async def _read(call_id: str, params: Any, sig: Any, on_update: Any) -> ToolResult:
    return text_result("r" * 2000)


async def _after_first(tmp_path: Path, model: Model, stream_fn: Any) -> tuple[Any, Harness]:
    """A harness (a ``read`` tool, ``keep_recent_tokens=1``, no retries) on a new JSONL
    session, its first prompt ("first") run."""
    session = await JsonlSessionStore(tmp_path).create(cwd=str(tmp_path), session_id="s")
    harness = Harness(
        model=model,
        stream_fn=stream_fn,
        session=session,
        tools=[Tool(name="read", description="r", execute=_read, parameters={"type": "object"})],
        compaction=CompactionSettings(keep_recent_tokens=1),
        retry=RetrySettings(enabled=False),
    )
    await harness.set_model(model)
    await harness.prompt("first")
    return session, harness


@pytest.mark.parametrize("where", ["first request", "between requests"])
async def test_a_failed_compaction_inside_the_loop_ends_the_run_failed(
    tmp_path: Path, where: str
) -> None:
    """Before the prompt's first request (its context over the threshold) and before a
    later one (a tool's output over it): the run ends there as failed, its result Pi's,
    and the Agent's failure message is in neither the session nor the transcript."""
    first = where == "first request"
    model = (
        SMALL
        if first
        else Model(id="scripted", api="scripted", provider="local", context_window=16384 + 200)
    )
    session, harness = await _after_first(tmp_path, model, _failing_summary(not first))
    events: list[Any] = []
    harness.subscribe(events.append)
    await harness.prompt("go " + "x" * 400 if first else "go")
    assert [(e.reason, e.status) for e in events if e.type == "compaction_end"] == [
        ("threshold", "failed")
    ]
    assert events[-1].message.error_message == "Summarization failed: invalid request"
    result = last_result(session)
    assert (result["status"], result["error"]) == (
        "failed",
        {"code": "summarization_failed", "message": "Summarization failed: invalid request"},
    )
    # No request after the failure; the transcript ends where the session's branch does.
    assert not any(e.type == "message_start" and e.message.role == "assistant"
                   and e.message.stop_reason == "stop" and "done" in str(e.message.content)
                   for e in events)  # fmt: skip
    assert harness.messages == list(session.build_context().messages)
    assert all(getattr(m, "stop_reason", None) != "error" for m in harness.messages)
    assert session.leaf_id == result["tipId"]
    assert leftovers(session) == []
    await session.close()


async def test_a_broken_stream_function_in_a_run_compaction_fails_the_run(
    tmp_path: Path,
) -> None:
    """Not the summary's failure but the harness's (Pi's ``harness_fault``): the run ends
    failed as well, the error as data."""

    def answer(context: Any) -> ScriptedResponse:
        return ScriptedResponse.text("one")

    answers = ScriptedModel(answer)

    async def stream(model: Any, context: Any, options: Any) -> Any:
        if str(context.system_prompt).startswith("You are a context summarization"):
            raise RuntimeError("stream broke")
        return answers(model, context, options)

    session, harness = await _after_first(tmp_path, SMALL, stream)
    events: list[Any] = []
    harness.subscribe(events.append)
    await harness.prompt("go " + "x" * 400)
    ends = [(e.status, e.error_message) for e in events if e.type == "compaction_end"]
    assert ends == [("failed", "stream broke")]
    result = last_result(session)
    assert (result["status"], result["error"]) == (
        "failed",
        {"code": "harness_fault", "message": "stream broke"},
    )
    assert events[-1].message.error_message == "stream broke"
    assert leftovers(session) == []
    await session.close()


async def test_the_context_hook_sees_the_first_request_compacted(tmp_path: Path) -> None:
    """The compaction before the first request comes first; the ``context`` hook then gets
    the compacted context (the summary, then the prompt), as each later request's."""
    seen: list[list[Any]] = []

    def context_hook(event: Any) -> None:
        seen.append(list(event.messages))

    answers = ScriptedModel(lambda _: ScriptedResponse.text("one"))
    session, harness = await _after_first(tmp_path, SMALL, answers)
    harness.hooks.on("context", context_hook)
    seen.clear()
    await harness.prompt("go " + "x" * 400)
    first = seen[0]
    assert first[0].role == "compactionSummary"
    assert [m.role for m in first[1:]] == ["user"]
    assert first[1].content[0].text.startswith("go ")
    await session.close()
