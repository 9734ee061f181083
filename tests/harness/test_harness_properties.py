"""Property: whatever happens (prompts, tool calls, retries, overflows, aborts,
compactions), the session reloaded from its store says what the events said."""

from __future__ import annotations

import tempfile
from typing import Any

import attrs
import trio
from hypothesis import event as note_event, given, settings, strategies as st

from pitrio import Context, Model, Tool, ToolResult, Usage, text_result
from pitrio.harness import (
    CompactionEnd,
    CompactionSettings,
    Harness,
    HarnessEvent,
    InMemorySessionStore,
    JsonlSessionStore,
    RetrySettings,
    SessionStore,
)
from pitrio.testing import ScriptedModel, ScriptedResponse, check_trace, run_virtual

MODEL = Model(id="m", api="scripted", provider="scripted", context_window=4000)
SYSTEM = "agent system prompt"

KINDS = ("text", "tool", "tool", "retryable", "retryable", "overflow", "auth", "slow")


@attrs.frozen
class Prompt:
    responses: tuple[tuple[str, int], ...]
    abort_at: float | None
    steer: bool = False
    follow_up: bool = False


@attrs.frozen
class Compact:
    pass


response = st.tuples(st.sampled_from(KINDS), st.integers(min_value=50, max_value=3900))
steps = st.lists(
    st.one_of(
        st.builds(
            Prompt,
            st.lists(response, min_size=1, max_size=6).map(tuple),
            st.one_of(st.none(), st.floats(min_value=0.0, max_value=8.0)),
            st.booleans(),
            st.booleans(),
        ),
        st.just(Compact()),
    ),
    min_size=1,
    max_size=6,
)


class Responder:
    """Agent requests take the next scripted kind; summary requests get a summary."""

    def __init__(self) -> None:
        self.queue: list[tuple[str, int]] = []
        self.summaries = 0
        self.calls = 0

    def __call__(self, context: Context) -> ScriptedResponse:
        if context.system_prompt != SYSTEM:
            self.summaries += 1
            return ScriptedResponse.text(f"SUMMARY {self.summaries}")
        kind, tokens = self.queue.pop(0) if self.queue else ("text", 100)
        usage = Usage(input=tokens, output=10, total_tokens=tokens + 10)
        if kind == "text":
            return ScriptedResponse.text(f"answer {tokens}", usage=usage)
        if kind == "tool":
            self.calls += 1
            call = (f"c{self.calls}", "echo", {"n": tokens})
            return ScriptedResponse.tool_calls(call, usage=usage)
        if kind == "retryable":
            return ScriptedResponse(stop_reason="error", error_message="503 Service Unavailable")
        if kind == "overflow":
            return ScriptedResponse(
                stop_reason="error", error_message="prompt is too long: 5000 tokens > 4000"
            )
        if kind == "auth":
            return ScriptedResponse(stop_reason="error", error_message="401 Unauthorized")
        return ScriptedResponse.text("slow answer", delay=5.0, usage=usage)


async def _echo(call_id: str, params: Any, signal: Any, on_update: Any) -> ToolResult:
    await trio.sleep(1.0)
    return text_result(f"echo {params.get('n')}")


ECHO = Tool(name="echo", description="echo", execute=_echo, parameters={"type": "object"})


async def _drive(plan: list[Prompt | Compact], store: SessionStore) -> None:
    session = await store.create(cwd="/tmp")
    responder = Responder()
    harness = Harness(
        model=MODEL,
        stream_fn=ScriptedModel(responder),
        session=session,
        tools=[ECHO],
        system_prompt=SYSTEM,
        retry=RetrySettings(max_retries=2, base_delay=1.0),
        compaction=CompactionSettings(reserve_tokens=1000, keep_recent_tokens=200),
        random=lambda: 0.5,
    )
    events: list[HarnessEvent] = []
    harness.subscribe(events.append)
    prompts = 0
    for step in plan:
        if isinstance(step, Compact):
            await harness.compact()
            continue
        prompts += 1
        responder.queue = list(step.responses)
        async with trio.open_nursery() as nursery:
            await nursery.start(harness.prompt, f"prompt {prompts}")
            if step.steer:
                harness.steer(f"steer {prompts}")
            if step.follow_up:
                harness.follow_up(f"follow-up {prompts}")
            if step.abort_at is not None:
                await trio.sleep(step.abort_at)
                harness.abort()
        assert not harness.is_busy
        harness.agent.clear_all_queues()  # an aborted run may leave them queued

    # -- what the events said ----------------------------------------------------------
    said: list[tuple[str, Any]] = []
    for event in events:
        if event.type == "message_end":
            said.append(("message", event.message))
        elif isinstance(event, CompactionEnd) and event.status == "completed":
            said.append(("compaction", (event.entry_id, event.summary)))
    # Every Agent run in between is well formed.
    harness_only = {
        "save_point",
        "settled",
        "auto_retry_start",
        "auto_retry_end",
        "compaction_start",
        "compaction_end",
    }
    runs: list[list[Any]] = []
    for event in events:
        if event.type in harness_only:
            continue
        if event.type == "agent_start":
            runs.append([])
        runs[-1].append(event)
    for run in runs:
        assert check_trace(run) == []
    types = [e.type for e in events]
    for kind in ("auto_retry_start", "compaction_end", "save_point"):
        note_event(f"{kind}: {min(types.count(kind), 3)}")
    note_event(f"aborted: {any(getattr(m, 'stop_reason', '') == 'aborted' for k, m in said)}")
    assert types.count("settled") == prompts
    assert types.count("turn_end") == types.count("save_point")
    for index, kind in enumerate(types):
        if kind == "turn_end":
            assert types[index + 1] == "save_point"
        if kind == "agent_end":
            assert types[index + 1] in (
                "auto_retry_start",
                "auto_retry_end",
                "compaction_start",
                "settled",
            )
    assert types.count("auto_retry_start") == sum(
        e.attempt for e in events if e.type == "auto_retry_end"
    )

    # -- what the session says after a reload ------------------------------------------
    final_context = list(harness.messages)
    await session.close()
    reloaded = await store.open(session.id)
    stored: list[tuple[str, Any]] = []
    for entry in reloaded.entries:
        if entry.type == "message":
            stored.append(("message", entry.message))
        elif entry.type == "compaction":
            stored.append(("compaction", (entry.id, entry.summary)))
    assert stored == said
    # The reloaded context is the model's view: failed responses are left out (as Pi
    # does; providers skip them anyway), everything else is as the harness had it.
    assert list(reloaded.build_context().messages) == [
        m for m in final_context if getattr(m, "stop_reason", None) not in ("error", "aborted")
    ]
    await reloaded.close()


@settings(max_examples=100, deadline=None)
@given(steps)
def test_reloaded_session_equals_what_the_events_said(plan: list[Prompt | Compact]) -> None:
    run_virtual(_drive, plan, InMemorySessionStore())


@settings(max_examples=25, deadline=None)
@given(steps)
def test_reloaded_jsonl_file_equals_what_the_events_said(plan: list[Prompt | Compact]) -> None:
    # The same through Pi's JSONL files on disk (the reload reads the file back).
    with tempfile.TemporaryDirectory() as root:
        run_virtual(_drive, plan, JsonlSessionStore(root))
