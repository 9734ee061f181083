"""Compaction: Pi's token estimates, cut points, summary requests and overflow detection.

The pinned cases in ``data/compaction_pi.json`` were computed by Pi 0.85.0's own code
(``node/compaction_pin.mjs``) on generated branches; pitrio must give the same answers.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given, strategies as st

from pitrio import (
    AbortSignal,
    AssistantMessage,
    Context,
    Model,
    StreamOptions,
    TextContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
    wire,
)
from pitrio.harness import (
    CompactionError,
    CompactionSettings,
    compact,
    estimate_context_tokens,
    estimate_tokens,
    generate_branch_summary,
    prepare_compaction,
    should_compact,
)
from pitrio.harness._branch_summary import prepare_branch_entries
from pitrio.harness._compaction import find_cut_point
from pitrio.harness._compaction_utils import serialize_conversation
from pitrio.harness._entries import (
    MessageEntry,
    SessionEntry,
    build_session_context,
    entry_from_wire,
)
from pitrio.harness._messages import convert_to_llm
from pitrio.harness._retry import is_context_overflow
from pitrio.harness._summary import (
    SUMMARIZATION_PROMPT,
    SUMMARIZATION_SYSTEM_PROMPT,
    UPDATE_SUMMARIZATION_PROMPT,
)
from pitrio.testing import ScriptedModel, ScriptedResponse

PINNED = Path(__file__).parent / "data" / "compaction_pi.json"
MODEL = Model(id="m", api="x", provider="p", reasoning=True, context_window=64000, max_tokens=8000)


@cache
def _pinned() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(PINNED.read_text(encoding="utf-8"))
    return data


def _cases() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = _pinned()["cases"]
    return cases


def _entries(case: dict[str, Any]) -> list[SessionEntry]:
    return [entry_from_wire(e) for e in case["entries"]]


def _ref(message: Any) -> str:
    return f"{message.role}@{message.timestamp}"


def _settings(case: dict[str, Any]) -> CompactionSettings:
    s = case["settings"]
    return CompactionSettings(
        enabled=s["enabled"],
        reserve_tokens=s["reserveTokens"],
        keep_recent_tokens=s["keepRecentTokens"],
    )


CASE_IDS = [f"seed{c['seed']}" for c in _cases()]


@pytest.mark.parametrize("case", _cases(), ids=CASE_IDS)
def test_estimates_and_cut_points_match_pi(case: dict[str, Any]) -> None:
    entries = _entries(case)
    messages = build_session_context(entries)
    assert [estimate_tokens(m) for m in messages] == case["tokens"]
    estimate = estimate_context_tokens(messages)
    expected = case["estimate"]
    assert (
        estimate.tokens,
        estimate.usage_tokens,
        estimate.trailing_tokens,
        estimate.last_usage_index,
    ) == (
        expected["tokens"],
        expected["usageTokens"],
        expected["trailingTokens"],
        expected["lastUsageIndex"],
    )
    assert (
        should_compact(estimate.tokens, MODEL.context_window, _settings(case))
        is (case["shouldCompact"])
    )
    for point in case["cutPoints"]:
        cut = find_cut_point(entries, 0, len(entries), point["keep"])
        assert (cut.first_kept_entry_index, cut.turn_start_index, cut.is_split_turn) == (
            point["firstKeptEntryIndex"],
            point["turnStartIndex"],
            point["isSplitTurn"],
        ), point["keep"]
    # Where Pi's 2,000-character cut halves a surrogate pair, pitrio drops the half.
    expected_text = re.sub("[\ud800-\udfff]", "", case["serialized"])
    assert serialize_conversation(convert_to_llm(messages)) == expected_text


@pytest.mark.parametrize("case", _cases(), ids=CASE_IDS)
def test_preparation_matches_pi(case: dict[str, Any]) -> None:
    preparation = prepare_compaction(_entries(case), _settings(case))
    expected = case["preparation"]
    if expected is None:
        assert preparation is None
        return
    assert preparation is not None
    assert [_ref(m) for m in preparation.messages_to_summarize] == expected["messagesToSummarize"]
    assert [_ref(m) for m in preparation.turn_prefix_messages] == expected["turnPrefixMessages"]
    assert [_ref(m) for m in preparation.retained_tail] == expected["retainedTail"]
    assert preparation.is_split_turn is expected["isSplitTurn"]
    assert preparation.tokens_before == expected["tokensBefore"]
    assert preparation.previous_summary == expected["previousSummary"]
    ops = preparation.file_ops
    assert (sorted(ops.read), sorted(ops.written), sorted(ops.edited)) == (
        expected["fileOps"]["read"],
        expected["fileOps"]["written"],
        expected["fileOps"]["edited"],
    )


def _summary_model(requests: list[dict[str, Any]]) -> ScriptedModel:
    def respond(context: Context) -> ScriptedResponse:
        n = len(requests) + 1
        return ScriptedResponse.text(
            f"SUMMARY {n}", usage=Usage(input=10 * n, output=5, total_tokens=10 * n + 5)
        )

    def record(model: Model, context: Context, options: StreamOptions) -> Any:
        stream = scripted(model, context, options)
        (message,) = context.messages
        assert isinstance(message, UserMessage)
        assert not isinstance(message.content, str)
        block = message.content[0]
        assert isinstance(block, TextContent)
        requests.append(
            {
                "systemPrompt": context.system_prompt,
                "text": block.text,
                "maxTokens": options.max_tokens,
                "reasoning": options.reasoning,
                "cacheRetention": options.cache_retention,
            }
        )
        return stream

    scripted = ScriptedModel(respond)
    return record  # type: ignore[return-value]  # a stream function, like ScriptedModel


@pytest.mark.parametrize("case", _cases(), ids=CASE_IDS)
async def test_summary_requests_and_results_match_pi(case: dict[str, Any]) -> None:
    preparation = prepare_compaction(_entries(case), _settings(case))
    expected = case["compacted"]
    if expected is None:
        assert preparation is None
        return
    assert preparation is not None
    requests: list[dict[str, Any]] = []
    result = await compact(
        preparation,
        stream_fn=_summary_model(requests),
        model=MODEL,
        custom_instructions="focus on files" if case["seed"] % 2 else None,
        thinking_level="high" if case["seed"] % 4 == 1 else None,
    )
    wanted = [{**r, "text": re.sub("[\ud800-\udfff]", "", r["text"])} for r in expected["requests"]]
    assert requests == wanted
    assert result.summary == expected["summary"]
    assert result.details == expected["details"]
    assert wire.unstructure(result.usage) == expected["usage"]
    assert [_ref(m) for m in result.retained_tail] == expected["retainedTail"]
    assert result.tokens_before == preparation.tokens_before


@pytest.mark.parametrize("case", _cases(), ids=CASE_IDS)
def test_branch_preparation_matches_pi(case: dict[str, Any]) -> None:
    prepared = prepare_branch_entries(_entries(case), 0 if case["seed"] % 2 else 3000)
    expected = case["branch"]
    assert [_ref(m) for m in prepared.messages] == expected["messages"]
    assert prepared.total_tokens == expected["totalTokens"]
    ops = prepared.file_ops
    assert (sorted(ops.read), sorted(ops.written), sorted(ops.edited)) == (
        expected["fileOps"]["read"],
        expected["fileOps"]["written"],
        expected["fileOps"]["edited"],
    )


def test_the_pinned_cases_cover_the_interesting_shapes() -> None:
    """The fixture exercises split turns, earlier compactions and both prompts."""
    prepared = [c["preparation"] for c in _cases() if c["preparation"]]
    assert any(p["isSplitTurn"] for p in prepared)
    assert any(not p["isSplitTurn"] for p in prepared)
    assert any(p["previousSummary"] for p in prepared)
    texts = [r["text"] for c in _cases() if c["compacted"] for r in c["compacted"]["requests"]]
    assert any(t.endswith(SUMMARIZATION_PROMPT) for t in texts)
    assert any("<previous-summary>" in t for t in texts)
    assert any("more characters truncated]" in t for t in texts)


def test_overflow_detection_matches_pi() -> None:
    cases = _pinned()["overflow"]
    assert any(c["result"] for c in cases)
    assert any(not c["result"] for c in cases)
    for case in cases:
        message = wire.structure_message(case["message"])
        assert is_context_overflow(message, case["contextWindow"] or 0) is case["result"], case


# -- scenarios on hand-made branches ---------------------------------------------------


def _branch(*messages: Any) -> list[SessionEntry]:
    entries: list[SessionEntry] = []
    for index, message in enumerate(messages):
        entries.append(
            MessageEntry(
                id=f"e{index}",
                parent_id=f"e{index - 1}" if index else None,
                seq=index,
                timestamp=index,
                message=message,
            )
        )
    return entries


def _request_text(model: ScriptedModel, index: int = 0) -> str:
    (message,) = model.requests[index].messages
    assert isinstance(message, UserMessage)
    assert not isinstance(message.content, str)
    (block,) = message.content
    assert isinstance(block, TextContent)
    return block.text


def _user(text: str) -> UserMessage:
    return UserMessage(content=text)


def _calls(*calls: tuple[str, str, str]) -> AssistantMessage:
    return AssistantMessage(
        content=tuple(ToolCall(id=i, name=n, arguments={"path": p}) for i, n, p in calls),
        stop_reason="toolUse",
    )


def _result(call_id: str, text: str) -> ToolResultMessage:
    return ToolResultMessage(
        tool_call_id=call_id, tool_name="read", content=(TextContent(text=text),)
    )


def _answer(text: str, tokens: int = 0) -> AssistantMessage:
    return AssistantMessage(
        content=(TextContent(text=text),), usage=Usage(input=tokens, total_tokens=tokens)
    )


def test_a_tool_result_is_never_separated_from_its_call() -> None:
    """However the budget falls, the kept tail never starts with a tool result."""
    branch = _branch(
        _user("x" * 400),
        _calls(("c1", "read", "a.py"), ("c2", "edit", "b.py")),
        _result("c1", "y" * 4000),
        _result("c2", "z" * 4000),
        _answer("done " * 100),
        _user("again"),
        _calls(("c3", "write", "c.py")),
        _result("c3", "w" * 2000),
        _answer("ok"),
    )
    for keep in range(0, 4000, 25):
        cut = find_cut_point(branch, 0, len(branch), keep)
        first = branch[cut.first_kept_entry_index]
        assert first.type == "message"
        assert first.message.role != "toolResult", keep
        preparation = prepare_compaction(branch, CompactionSettings(keep_recent_tokens=keep))
        assert preparation is not None
        tail_ids = {m.tool_call_id for m in preparation.retained_tail if m.role == "toolResult"}
        kept_calls = {
            c.id for m in preparation.retained_tail if m.role == "assistant" for c in m.tool_calls
        }
        prefix_calls = {
            c.id
            for m in preparation.turn_prefix_messages
            if m.role == "assistant"
            for c in m.tool_calls
        }
        assert tail_ids <= kept_calls | prefix_calls, keep


def test_keep_recent_tokens_is_honoured() -> None:
    """The tail kept holds at least keep_recent_tokens (when the branch has that many)."""
    branch = _branch(*[m for i in range(20) for m in (_user(f"q{i} " * 50), _answer("a " * 200))])
    total = sum(estimate_tokens(e.message) for e in branch if e.type == "message")
    for keep in (1, 100, 500, 1000, 2000):
        preparation = prepare_compaction(branch, CompactionSettings(keep_recent_tokens=keep))
        assert preparation is not None
        kept = sum(estimate_tokens(m) for m in preparation.retained_tail)
        assert kept >= min(keep, total)
        # ... and not a whole turn more than needed.
        assert kept - estimate_tokens(preparation.retained_tail[0]) < keep
        parts = (
            preparation.messages_to_summarize,
            preparation.turn_prefix_messages,
            preparation.retained_tail,
        )
        assert sum(len(p) for p in parts) == 40
        # A cut at an assistant message splits its turn: the user message goes in the prefix.
        if preparation.retained_tail[0].role == "assistant":
            assert preparation.is_split_turn
            assert [m.role for m in preparation.turn_prefix_messages] == ["user"]


async def test_the_summary_request_uses_pis_prompt_and_lists_files() -> None:
    branch = _branch(
        _user("Fix the bug in parser.py"),
        _calls(("c1", "read", "src/parser.py"), ("c2", "read", "README.md")),
        _result("c1", "def parse(): ..."),
        _result("c2", "readme"),
        _calls(("c3", "edit", "src/parser.py")),
        _result("c3", "edited"),
        _answer("Fixed.", tokens=5000),
        _user("Now add a test"),
        _answer("Added."),
    )
    # "Added." and "Now add a test" are 2 + 4 tokens: a budget of 5 keeps that last turn.
    preparation = prepare_compaction(branch, CompactionSettings(keep_recent_tokens=5))
    assert preparation is not None
    assert [m.role for m in preparation.retained_tail] == ["user", "assistant"]
    assert not preparation.is_split_turn
    model = ScriptedModel([ScriptedResponse.text("## Goal\nFix the parser")])
    result = await compact(preparation, stream_fn=model, model=MODEL)
    (request,) = model.requests
    assert request.system_prompt == SUMMARIZATION_SYSTEM_PROMPT
    text = _request_text(model)
    assert text.startswith("<conversation>\n[User]: Fix the bug in parser.py\n\n")
    assert '[Assistant tool calls]: read(path="src/parser.py"); read(path="README.md")' in text
    assert text.endswith("</conversation>\n\n" + SUMMARIZATION_PROMPT)
    assert result.summary == (
        "## Goal\nFix the parser\n\n<read-files>\nREADME.md\n</read-files>\n\n"
        "<modified-files>\nsrc/parser.py\n</modified-files>"
    )
    assert result.read_files == ["README.md"]
    assert result.modified_files == ["src/parser.py"]
    tail_tokens = sum(estimate_tokens(m) for m in preparation.retained_tail)
    assert result.tokens_before == 5000 + tail_tokens


async def test_a_later_compaction_updates_the_previous_summary() -> None:
    from pitrio.harness import CompactionEntry

    compaction = CompactionEntry(
        id="k",
        parent_id=None,
        seq=0,
        timestamp=0,
        summary="## Goal\nold goal",
        retained_tail=(_user("kept question"), _answer("kept answer")),
        tokens_before=9000,
        details={"readFiles": ["old.txt"], "modifiedFiles": []},
    )
    later = _branch(_user("new question " * 30), _answer("new answer " * 30), _user("last"))
    later = [
        attrs_evolve(e, id=f"n{i}", parent_id="k" if i == 0 else f"n{i - 1}")
        for i, e in enumerate(later)
    ]
    preparation = prepare_compaction([compaction, *later], CompactionSettings(keep_recent_tokens=1))
    assert preparation is not None
    assert preparation.previous_summary == "## Goal\nold goal"
    assert [_ref(m) for m in preparation.messages_to_summarize][:2] == ["user@0", "assistant@0"]
    model = ScriptedModel([ScriptedResponse.text("## Goal\nold goal, new goal")])
    result = await compact(preparation, stream_fn=model, model=MODEL)
    text = _request_text(model)
    assert "[User]: kept question" in text
    assert "<previous-summary>\n## Goal\nold goal\n</previous-summary>\n\n" in text
    assert text.endswith(UPDATE_SUMMARIZATION_PROMPT)
    assert result.read_files == ["old.txt"]


def attrs_evolve(entry: Any, **changes: Any) -> Any:
    import attrs

    return attrs.evolve(entry, **changes)


async def test_failed_and_aborted_summaries_raise_pis_errors(
    autojump_clock: trio.testing.MockClock,
) -> None:
    branch = _branch(_user("a " * 100), _answer("b " * 100), _user("c"))
    preparation = prepare_compaction(branch, CompactionSettings(keep_recent_tokens=1))
    assert preparation is not None
    failing = ScriptedModel([ScriptedResponse(stop_reason="error", error_message="overloaded")])
    with pytest.raises(CompactionError, match=r"^Summarization failed: overloaded$") as info:
        await compact(preparation, stream_fn=failing, model=MODEL)
    assert info.value.reason == "summarization_failed"

    signal = AbortSignal()
    slow = ScriptedModel([ScriptedResponse.text("late", delay=10)])
    caught: list[CompactionError] = []

    async def run() -> None:
        try:
            await compact(preparation, stream_fn=slow, model=MODEL, signal=signal)
        except CompactionError as exc:
            caught.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        await trio.sleep(1)
        signal.abort()
    (error,) = caught
    assert error.reason == "aborted"
    assert str(error) == "Request was aborted"
    assert trio.current_time() == 1


async def test_branch_summaries_use_pis_prompt_and_preamble() -> None:
    branch = _branch(_user("try approach B"), _calls(("c1", "write", "b.py")), _result("c1", "ok"))
    model = ScriptedModel([ScriptedResponse.text("## Goal\nB")])
    result = await generate_branch_summary(branch, stream_fn=model, model=MODEL)
    assert result.summary == (
        "The user explored a different conversation branch before returning here.\n"
        "Summary of that exploration:\n\n## Goal\nB\n\n<modified-files>\nb.py\n</modified-files>"
    )
    assert _request_text(model).startswith(
        '<conversation>\n[User]: try approach B\n\n[Assistant tool calls]: write(path="b.py")'
    )
    empty = await generate_branch_summary([], stream_fn=model, model=MODEL)
    assert empty.summary == "No content to summarize"


def test_should_compact_respects_the_reserve_and_the_switch() -> None:
    settings = CompactionSettings(reserve_tokens=1000)
    assert not should_compact(9000, 10000, settings)
    assert should_compact(9001, 10000, settings)
    assert not should_compact(99999, 10000, CompactionSettings(enabled=False))
    assert CompactionSettings() == CompactionSettings(
        enabled=True, reserve_tokens=16384, keep_recent_tokens=20000
    )


def test_nothing_to_compact() -> None:
    assert prepare_compaction([]) is None
    usage_only = estimate_context_tokens([_answer("x", tokens=0), _user("abcd" * 10)])
    assert usage_only.last_usage_index is None
    assert usage_only.tokens == 1 + 10


def test_the_pinned_fixture_is_what_pi_computes_now(pi_node_modules: Path) -> None:
    """Rerun Pi's code (installed in tests/harness/node from its lock) and compare."""
    import os
    import subprocess

    from _node import node_executable

    script = Path(__file__).parent / "node" / "compaction_pin.mjs"
    output = subprocess.run(
        [node_executable(), str(script)],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PI_NODE_MODULES": str(pi_node_modules)},
    ).stdout
    assert json.loads(output) == _pinned()


async def test_leaving_a_branch_collects_its_entries_back_to_the_fork() -> None:
    from pitrio.harness import InMemorySessionStore, collect_entries_for_branch_summary

    store = InMemorySessionStore()
    session = await store.create(cwd="/")
    root = await session.append_message(_user("start"))
    fork = await session.append_message(_answer("ok"))
    a1 = await session.append_message(_user("try A"))
    a2 = await session.append_message(_answer("A failed"))
    await session.set_leaf(fork)
    b1 = await session.append_message(_user("try B"))

    entries, common = collect_entries_for_branch_summary(session, a2, b1)
    assert common == fork
    assert [e.id for e in entries] == [a1, a2]
    entries, common = collect_entries_for_branch_summary(session, a2, root)
    assert (common, [e.id for e in entries]) == (root, [fork, a1, a2])
    assert collect_entries_for_branch_summary(session, None, b1) == ([], None)
    # The collected entries are what a branch summary summarises.
    model = ScriptedModel([ScriptedResponse.text("## Goal\nA")])
    result = await generate_branch_summary(
        collect_entries_for_branch_summary(session, a2, b1)[0], stream_fn=model, model=MODEL
    )
    assert "[User]: try A\n\n[Assistant]: A failed" in _request_text(model)
    assert result.summary.endswith("## Goal\nA")


@st.composite
def branches(draw: st.DrawFn) -> list[SessionEntry]:
    """Turns of a coding session: a user message (or a shell command, or a branch
    summary), assistant steps with tool calls, each followed by its results."""
    from pitrio.harness import BranchSummaryEntry, CustomEntry
    from pitrio.harness._messages import BashExecutionMessage

    entries: list[SessionEntry] = []
    calls = 0

    def add(make: Any) -> None:
        n = len(entries)
        entries.append(make(id=f"e{n}", parent_id=f"e{n - 1}" if n else None, seq=n, timestamp=n))

    def message(m: Any) -> None:
        add(lambda **kw: MessageEntry(message=m, **kw))

    words = st.text(alphabet="ab ", max_size=300)
    for _ in range(draw(st.integers(1, 6))):
        opener = draw(st.sampled_from(["user", "user", "bash", "branch", "custom"]))
        if opener == "bash":
            message(BashExecutionMessage(command="ls", output=draw(words)))
        elif opener == "branch":
            add(lambda **kw: BranchSummaryEntry(from_id=None, summary=draw(words), **kw))
        elif opener == "custom":
            add(lambda **kw: CustomEntry(custom_type="note", **kw))
        message(_user(draw(words)))
        for _ in range(draw(st.integers(0, 3))):
            ids = [f"c{calls + i}" for i in range(draw(st.integers(1, 3)))]
            calls += len(ids)
            message(_calls(*[(i, "read", f"{i}.py") for i in ids]))
            for i in ids:
                message(_result(i, draw(words)))
        message(_answer(draw(words)))
    return entries


@given(branches(), st.integers(0, 600))
def test_compaction_partitions_a_branch_at_a_turn_boundary(
    branch: list[SessionEntry], keep: int
) -> None:
    preparation = prepare_compaction(branch, CompactionSettings(keep_recent_tokens=keep))
    assert preparation is not None
    summarized = preparation.messages_to_summarize
    prefix = preparation.turn_prefix_messages
    tail = preparation.retained_tail
    everything = [m for e in branch if (m := _entry_as_message(e)) is not None]
    assert [*summarized, *prefix, *tail] == everything
    assert tail, "the newest messages are always kept"
    assert tail[0].role != "toolResult"
    kept_calls = {c.id for m in (*prefix, *tail) if m.role == "assistant" for c in m.tool_calls}
    assert {m.tool_call_id for m in tail if m.role == "toolResult"} <= kept_calls
    if prefix:
        # A split turn: its start is summarised apart (a cut right at a shell command
        # or branch summary is "split" too in Pi, with an empty prefix).
        assert preparation.is_split_turn
        assert prefix[0].role in ("user", "bashExecution", "branchSummary")
        # (The tail may still start with a user message: Pi moves a cut back over a
        # custom entry just before it and then finds the previous turn's start.)
    # The budget is reached somewhere after the previous turn boundary; the cut is the
    # first boundary at or after that point ("about" keep_recent_tokens, as in Pi).
    start = len(summarized) + len(prefix)
    cut_roles = ("user", "assistant", "bashExecution", "branchSummary")
    previous = [i for i in range(start) if everything[i].role in cut_roles]
    if previous:
        total = sum(estimate_tokens(m) for m in everything)
        after_previous = sum(estimate_tokens(m) for m in everything[previous[-1] + 1 :])
        assert after_previous >= min(keep, total)


def _entry_as_message(entry: SessionEntry) -> Any:
    from pitrio.harness._messages import BranchSummaryMessage

    if entry.type == "message":
        return entry.message
    if entry.type == "branch_summary":
        return BranchSummaryMessage(
            summary=entry.summary, from_id=entry.from_id, timestamp=entry.timestamp
        )
    return None


async def test_summary_requests_are_retried_like_pis(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from pitrio.harness._retry import RetrySettings

    branch = _branch(_user("a " * 100), _answer("b " * 100), _user("c"))
    preparation = prepare_compaction(branch, CompactionSettings(keep_recent_tokens=1))
    assert preparation is not None
    overloaded = ScriptedResponse(stop_reason="error", error_message="529 overloaded")
    model = ScriptedModel([overloaded, overloaded, ScriptedResponse.text("## Goal\nX")])
    start = trio.current_time()
    result = await compact(
        preparation, stream_fn=model, model=MODEL, retry=RetrySettings(base_delay=2.0)
    )
    assert result.summary.startswith("## Goal\nX")
    assert model.calls == 3
    assert trio.current_time() - start == 2.0 + 4.0  # 2 s, then 4 s, as Pi (no jitter)

    # Not retryable, or out of retries: the error ends the compaction.
    model = ScriptedModel([ScriptedResponse(stop_reason="error", error_message="invalid api key")])
    with pytest.raises(CompactionError, match="invalid api key"):
        await compact(preparation, stream_fn=model, model=MODEL, retry=RetrySettings())
    assert model.calls == 1
    model = ScriptedModel([overloaded] * 3)
    with pytest.raises(CompactionError, match=r"^Summarization failed: 529 overloaded$"):
        await compact(preparation, stream_fn=model, model=MODEL, retry=RetrySettings(max_retries=2))
    assert model.calls == 3

    # An abort during the wait ends it at once, as an aborted summary.
    signal = AbortSignal()
    model = ScriptedModel([overloaded, ScriptedResponse.text("never")])
    caught: list[CompactionError] = []

    async def run() -> None:
        try:
            await compact(
                preparation,
                stream_fn=model,
                model=MODEL,
                signal=signal,
                retry=RetrySettings(base_delay=30.0),
            )
        except CompactionError as exc:
            caught.append(exc)

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        await trio.sleep(5)
        signal.abort()
    (error,) = caught
    assert (error.reason, str(error)) == ("aborted", "Summarization aborted")
    assert trio.current_time() - start == 5
    assert model.calls == 1
