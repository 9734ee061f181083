"""The harness's compaction threshold check is incremental: ContextTokenCounter gives the
same estimate as estimate_context_tokens over the whole transcript, for every way a
transcript changes (grows, loses its end, is replaced by another list), while looking only
at the messages added since the last call.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import given, settings, strategies as st

from pitrio import (
    AgentMessage,
    AssistantMessage,
    Model,
    TextContent,
    Tool,
    ToolCall,
    Usage,
    UserMessage,
    text_result,
)
from pitrio.harness import (
    Harness,
    InMemorySessionStore,
    JsonlSessionStore,
    PiSessionStore,
    _compaction,
    estimate_context_tokens,
)
from pitrio.harness._compaction import ContextTokenCounter
from pitrio.harness._messages import CompactionSummaryMessage
from pitrio.harness._store import _MemoryWriter
from pitrio.testing import ScriptedModel, ScriptedResponse


def _assistant(text: str, tokens: int, stop: str) -> AssistantMessage:
    return AssistantMessage(
        content=(TextContent(text=text), ToolCall(id="c", name="read", arguments={"p": text})),
        api="scripted",
        provider="scripted",
        model="m",
        usage=Usage(input=tokens, output=1, total_tokens=tokens + 1 if tokens else 0),
        stop_reason=stop,  # type: ignore[arg-type]
    )


_texts = st.text(alphabet="ab😀 ", max_size=30)
_messages: st.SearchStrategy[AgentMessage] = st.one_of(
    st.builds(lambda t: UserMessage(content=t), _texts),
    st.builds(
        _assistant,
        _texts,
        st.integers(0, 5000),
        st.sampled_from(["stop", "toolUse", "error", "aborted"]),
    ),
    st.builds(lambda t: CompactionSummaryMessage(summary=t, tokens_before=9), _texts),
)

# A change of a transcript: append messages (drawn again from the pool, so one object
# may appear twice), drop the end, or replace the list (a prefix of it plus new ones, or
# the list rebuilt from the same objects, as the agent's setter copies it).
_ops = st.one_of(
    st.tuples(st.just("append"), st.lists(st.integers(0, 11), max_size=4)),
    st.tuples(st.just("pop"), st.integers(1, 3)),
    st.tuples(st.just("replace"), st.integers(0, 20), st.lists(st.integers(0, 11), max_size=4)),
    st.tuples(st.just("copy")),
    st.tuples(st.just("other")),
)


def _same(a: Any, b: Any) -> bool:
    return (a.tokens, a.usage_tokens, a.trailing_tokens, a.last_usage_index) == (
        b.tokens,
        b.usage_tokens,
        b.trailing_tokens,
        b.last_usage_index,
    )


@settings(max_examples=300, deadline=None)
@given(st.lists(_messages, min_size=12, max_size=12), st.lists(_ops, max_size=25))
def test_the_counter_equals_the_full_estimate_after_every_change(
    pool: list[AgentMessage], ops: list[Any]
) -> None:
    counter = ContextTokenCounter()
    transcript: list[AgentMessage] = []
    other: list[AgentMessage] = [pool[0], pool[5]]
    assert _same(counter.estimate(transcript), estimate_context_tokens(transcript))
    for op in ops:
        if op[0] == "append":
            transcript.extend(pool[i] for i in op[1])
        elif op[0] == "pop":
            del transcript[len(transcript) - op[1] :]
        elif op[0] == "replace":
            transcript = [*transcript[: op[1]], *(pool[i] for i in op[2])]
        elif op[0] == "copy":
            transcript = list(transcript)
        else:  # another list is measured in between (the harness measures two)
            assert _same(counter.estimate(other), estimate_context_tokens(other))
        assert _same(counter.estimate(transcript), estimate_context_tokens(transcript))


def test_a_grown_transcript_costs_only_its_new_messages(monkeypatch: Any) -> None:
    """Estimates are made once per message: appending 3 messages estimates 3."""
    calls: list[AgentMessage] = []
    real = _compaction.estimate_tokens

    def counting(message: AgentMessage) -> int:
        calls.append(message)
        return real(message)

    monkeypatch.setattr(_compaction, "estimate_tokens", counting)
    counter = ContextTokenCounter()
    transcript: list[AgentMessage] = [UserMessage(content=f"m{i}") for i in range(100)]
    first = counter.estimate(transcript)
    assert len(calls) == 100
    transcript += [UserMessage(content="a"), _assistant("b", 40, "toolUse")]
    transcript.append(UserMessage(content="c"))
    again = counter.estimate(transcript)
    assert len(calls) == 103
    # The same messages in a new list (the agent copies its transcript): no estimates.
    copied = counter.estimate(list(transcript))
    assert len(calls) == 103
    assert again.last_usage_index == 101
    assert again.tokens == 41 + 1
    assert _same(copied, again)
    assert _same(again, estimate_context_tokens(transcript))
    assert first.tokens == estimate_context_tokens(transcript[:100]).tokens


async def test_the_harness_threshold_check_estimates_each_message_once(monkeypatch: Any) -> None:
    """Over a 30-turn prompt the harness estimates each message once, not every turn."""
    estimated: list[int] = []
    real = _compaction.estimate_tokens

    def counting(message: AgentMessage) -> int:
        estimated.append(id(message))
        return real(message)

    monkeypatch.setattr(_compaction, "estimate_tokens", counting)
    turns = 30
    script = [ScriptedResponse.tool_calls((f"c{i}", "missing", {})) for i in range(turns)]
    model = Model(id="m", api="scripted", provider="scripted", context_window=128_000)
    session = await InMemorySessionStore().create(cwd="/work/project")
    harness = Harness(model=model, stream_fn=ScriptedModel([*script, ScriptedResponse.text("ok")]),
                      session=session)  # fmt: skip
    with trio.fail_after(30):
        await harness.prompt("go")
    messages = harness.messages
    assert len(messages) == 2 + 2 * turns
    assert messages[-1].role == "assistant"
    assert messages[-1].text == "ok"
    # Each message was estimated at most once (a full rescan each turn: ~30x as many).
    assert len(estimated) == len(set(estimated)) <= len(messages)
    await session.close()


# -- every tool starts with the prompt, the tool call and earlier results written ---------


def _look(store: InMemorySessionStore, session_id: str, seen: list[list[str]]) -> Tool:
    async def look(call_id: str, params: Any, signal: Any, on_update: Any) -> Any:
        # What storage holds when this tool starts (a read-only snapshot of the session).
        stored = await store.open(session_id, read_only=True)
        seen.append([m.role for m in stored.build_context().messages])
        return text_result(f"ok {call_id}")

    return Tool(name="look", description="look", execute=look, parameters={"type": "object"})


async def _run(mode: Any, monkeypatch: Any) -> tuple[list[list[str]], list[int]]:
    store = InMemorySessionStore()
    session = await store.create(cwd="/work/project")
    seen: list[list[str]] = []
    tools = [_look(store, session.id, seen)]
    writes: list[int] = []
    real = _MemoryWriter.write

    async def counting(self: Any, s: Any, transactions: Any) -> None:
        writes.append(len(transactions))
        await real(self, s, transactions)

    monkeypatch.setattr(_MemoryWriter, "write", counting)
    model = Model(id="m", api="scripted", provider="scripted", context_window=128_000)
    calls: list[tuple[str, str, dict[str, Any]]] = [(f"c{i}", "look", {}) for i in range(3)]
    stream = ScriptedModel([ScriptedResponse.tool_calls(*calls), ScriptedResponse.text("ok")])
    harness = Harness(
        model=model, stream_fn=stream, session=session, tools=tools, tool_execution=mode
    )
    with trio.fail_after(30):
        await harness.prompt("go")
    stored = await store.open(session.id, read_only=True)
    assert [m.role for m in stored.build_context().messages] == [
        "user", "assistant", "toolResult", "toolResult", "toolResult", "assistant",
    ]  # fmt: skip
    await session.close()
    return seen, writes


async def test_parallel_tools_start_with_the_prompt_and_the_call_written(
    monkeypatch: Any,
) -> None:
    seen, writes = await _run("parallel", monkeypatch)
    # Every tool started with the prompt and the tool call stored.
    assert seen == [["user", "assistant"]] * 3
    assert all(n >= 1 for n in writes)


async def test_a_sequential_tool_starts_with_the_earlier_results_written(
    monkeypatch: Any,
) -> None:
    seen, writes = await _run("sequential", monkeypatch)
    assert seen == [
        ["user", "assistant"],
        ["user", "assistant", "toolResult"],
        ["user", "assistant", "toolResult", "toolResult"],
    ]
    assert all(n >= 1 for n in writes)


@pytest.mark.parametrize("store_type", [JsonlSessionStore, PiSessionStore])
async def test_a_save_point_whose_sync_fails_writes_each_change_once(
    store_type: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write and the sync of a save point share a worker-thread hop; a failed sync
    raises from flush() without the written changes being written again."""
    session = await store_type(tmp_path).create(cwd="/work/project")
    await session.append_message(UserMessage(content="one"), write=False)
    failures = [OSError(5, "Input/output error")]
    real = os.fsync

    def failing(fd: int) -> None:
        if failures:
            raise failures.pop()
        real(fd)

    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(OSError, match="Input/output"):
        await session.flush()
    assert not session.dirty
    await session.append_message(UserMessage(content="two"), write=False)
    await session.flush()
    await session.close()
    again = await store_type(tmp_path).open(session.id)
    assert [m.content for m in again.build_context().messages] == ["one", "two"]
    await again.close()
