"""A pitrio harness compacting or navigating a JSONL session, as ``node/pi_structural.mjs``
has Pi's harness do (tests/harness/test_compaction_ops.py, test_navigation.py).

    python _structural_child.py ROOT SESSION_ID MODE

Two prompts ("first" -> "one", "second" -> "two"), then MODE: ``compact``
(``Harness.compact()``, ``keep_recent_tokens=1``), ``navigate``
(``navigate_tree(first answer, summarize=True, label="back")``), ``navigate-plain``
(``navigate_tree(first answer)``), ``compact-queued`` (``enqueue("follow_up", "later")``,
then ``compact()``: a run for it follows); ``hang-compact`` / ``hang-navigate``: the summary
request prints "summary started" and never answers (the caller SIGKILLs the child);
``hook-decline-compact`` / ``hook-compact`` / ``hook-decline-navigate`` /
``hook-navigate``: a ``before_compaction`` or ``before_navigation`` hook declines, or gives
the summary ("HOOK SUMMARY", with :data:`HOOK_USAGE`), as in the Node script;
``hang-hook-compact``: the ``before_compaction`` hook prints "summary started" and never
returns; ``threshold`` / ``hang-threshold``: nothing after the prompts, but the model's
window is the reserve plus 60 tokens and "second" is answered "two" and 400 x's, so the
second run compacts at the threshold after that answer, inside the run. Prints the result
event's ``status`` last (the run's last answer's stop reason for ``threshold``).

The modes of :data:`SCRIPTED` answer by what is asked (a summary request "SUMMARY",
"first" "one", the rest "two"), as the Node script's: ``first-threshold`` (the window as
``threshold``; the second prompt is "second" and 400 x's, so its run compacts before its
first request), ``threshold-fail`` (as ``threshold``, every summary request failing with
"invalid request"), ``overflow`` ("second" first answered with a context overflow: the run
compacts and asks again), ``overflow-decline`` (a ``before_compaction`` hook declines
that compaction), ``hang-overflow`` (that summary request never answers).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import trio

from pitrio import Cost, Model, Usage
from pitrio.harness import (
    BeforeCompactionEvent,
    BeforeCompactionResult,
    BeforeNavigationEvent,
    BeforeNavigationResult,
    BranchSummaryResult,
    CompactionResult,
    CompactionSettings,
    Harness,
    JsonlSessionStore,
    RetrySettings,
)
from pitrio.testing import ScriptedModel, ScriptedResponse

MODEL = Model(id="scripted", api="scripted", provider="local", context_window=200_000)
COMPACTION = CompactionSettings(keep_recent_tokens=1)
RETRY = RetrySettings(base_delay=1.0)  # Pi's default policy: 4 attempts, 1000 ms
ANSWERS = {"first": "one", "second": "two"}
HOOK_USAGE = Usage(input=7, output=3, total_tokens=10, cost=Cost())
LATER = {"later": "answer to later"}  # compact-queued: the run after the compaction
LONG = "two " + "x" * 400
# A window the second answer passes (the reserve plus 60 tokens).
SMALL = Model(id="scripted", api="scripted", provider="local", context_window=16384 + 60)


SCRIPTED = ("first-threshold", "threshold-fail", "overflow", "overflow-decline", "hang-overflow")
OVERFLOW = "prompt is too long: 213462 tokens > 200000 maximum"


def _summarizing(context: Any) -> bool:
    return str(context.system_prompt).startswith("You are a context summarization assistant")


def respond(mode: str) -> Any:
    def answer(context: Any) -> ScriptedResponse:
        if _summarizing(context):
            return ScriptedResponse.text("BRANCH SUMMARY" if "navigate" in mode else "SUMMARY")
        last = [m for m in context.messages if m.role == "user"][-1]
        answer = {**ANSWERS, **LATER}[last.content[0].text]
        return ScriptedResponse.text(LONG if "threshold" in mode and answer == "two" else answer)

    scripted = ScriptedModel(answer)

    async def stream_fn(model: Model, context: Any, options: Any) -> Any:
        if mode.startswith("hang") and _summarizing(context):
            print("summary started", flush=True)
            await trio.sleep_forever()
        return scripted(model, context, options)

    return stream_fn


def scripted(mode: str) -> Any:
    """The stream function of a :data:`SCRIPTED` mode."""
    overflowed = False

    def answer(context: Any) -> ScriptedResponse:
        nonlocal overflowed
        if _summarizing(context):
            if mode == "threshold-fail":
                return ScriptedResponse(stop_reason="error", error_message="invalid request")
            return ScriptedResponse.text("SUMMARY")
        last = [m for m in context.messages if m.role == "user"][-1]
        if last.content[0].text == "first":
            return ScriptedResponse.text("one")
        if "overflow" in mode and not overflowed:
            overflowed = True
            return ScriptedResponse(stop_reason="error", error_message=OVERFLOW)
        return ScriptedResponse.text(LONG if mode == "threshold-fail" else "two")

    model = ScriptedModel(answer)

    async def stream_fn(model_: Model, context: Any, options: Any) -> Any:
        if mode == "hang-overflow" and _summarizing(context):
            print("summary started", flush=True)
            await trio.sleep_forever()
        return model(model_, context, options)

    return stream_fn


async def _scripted(harness: Harness, mode: str, events: list[Any] | None) -> None:
    await harness.prompt("first")
    if events is not None:
        harness.subscribe(events.append)
    if mode == "overflow-decline":
        harness.hooks.on("before_compaction", lambda _: BeforeCompactionResult(decline=True))
    await harness.prompt("second " + "x" * 400 if mode == "first-threshold" else "second")


def hook(harness: Harness, mode: str, seen: list[Any]) -> None:
    """The hooks of a ``hook-*`` MODE; ``seen`` receives the events they are given."""
    decline = mode.startswith("hook-decline")

    async def hangs(event: BeforeCompactionEvent) -> None:
        print("summary started", flush=True)
        await trio.sleep_forever()

    def compaction(event: BeforeCompactionEvent) -> BeforeCompactionResult:
        seen.append(event)
        if decline:
            return BeforeCompactionResult(decline=True)
        given = CompactionResult(
            summary="HOOK SUMMARY",
            tokens_before=event.preparation.tokens_before,
            usage=HOOK_USAGE,
            retained_tail=event.preparation.retained_tail,
            details={"readFiles": [], "modifiedFiles": []},
        )
        return BeforeCompactionResult(compaction=given)

    def navigation(event: BeforeNavigationEvent) -> BeforeNavigationResult:
        seen.append(event)
        if decline:
            return BeforeNavigationResult(decline=True)
        given = BranchSummaryResult(
            summary="HOOK SUMMARY", usage=HOOK_USAGE, read_files=[], modified_files=[]
        )
        return BeforeNavigationResult(summary=given)

    harness.hooks.on("before_compaction", hangs if mode.startswith("hang") else compaction)
    harness.hooks.on("before_navigation", navigation)


async def main(
    root: Path,
    session_id: str,
    mode: str,
    events: list[Any] | None = None,
    seen: list[Any] | None = None,
) -> None:
    """The scenario; ``events`` (in-process callers) receives the structural operation's
    harness events, ``seen`` the events the hooks of a ``hook-*`` MODE are given."""
    store = JsonlSessionStore(root)
    session = await store.create(cwd=str(root), session_id=session_id)
    model = SMALL if "threshold" in mode else MODEL
    harness = Harness(
        model=model,
        stream_fn=scripted(mode) if mode in SCRIPTED else respond(mode),
        session=session,
        compaction=COMPACTION,
        retry=RETRY,
    )
    await harness.set_model(model)
    if mode in SCRIPTED:
        await _scripted(harness, mode, events)
        await session.close()
        return
    if mode.endswith("threshold"):
        await harness.prompt("first")
        if events is not None:
            harness.subscribe(events.append)
        await harness.prompt("second")
        last = harness.messages[-1]
        print(getattr(last, "stop_reason", None), flush=True)
        await session.close()
        return
    for text in ANSWERS:
        await harness.prompt(text)
    if events is not None:
        harness.subscribe(events.append)
    if "hook" in mode:
        hook(harness, mode, [] if seen is None else seen)
    target = session.get_branch()[1].id
    if mode == "compact-queued":
        await harness.enqueue("follow_up", "later")
    end: Any
    if mode.endswith("compact") or mode == "compact-queued":
        end = await harness.compact()
    elif mode == "navigate-plain":
        end = await harness.navigate_tree(target)
    else:
        end = await harness.navigate_tree(target, summarize=True, label="back")
    print(end.status, flush=True)
    await session.close()


if __name__ == "__main__":
    trio.run(main, Path(sys.argv[1]), sys.argv[2], sys.argv[3])
