"""Record a run's model stream to a file and replay it offline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from hypothesis import given, strategies as st

from pitrio import (
    AbortSignal,
    Agent,
    AgentEvent,
    AssistantMessage,
    Model,
    StreamOptions,
    TextContent,
    ThinkingContent,
    Tool,
    ToolCall,
    ToolResult,
    Usage,
    text_result,
    wire,
)
from pitrio.harness._replay import (
    RecordingStreamFn,
    ReplayFileError,
    ReplayMismatchError,
    ReplayStreamFn,
)
from pitrio.testing import ScriptedModel, ScriptedResponse, check_trace

MODEL = Model(id="m", api="scripted", provider="scripted")


Clock = trio.testing.MockClock  # every async test runs in virtual time (autojump_clock)


def _tool() -> Tool:
    async def execute(call_id: str, params: Any, signal: AbortSignal, on_update: Any) -> ToolResult:
        await trio.sleep(len(params["path"]) + (params["path"] == "b.txt"))
        return text_result(f"read {params['path']}")

    return Tool(
        name="read",
        description="Read a file",
        parameters={"type": "object", "properties": {"path": {"type": "string"}}},
        execute=execute,
    )


def _script() -> list[ScriptedResponse]:
    return [
        ScriptedResponse(
            content=(
                TextContent(text="Let me look at both files first."),
                *ScriptedResponse.tool_calls(
                    ("c1", "read", {"path": "a.txt"}), ("c2", "read", {"path": "b.txt"})
                ).content,
            ),
            chunk_size=5,
        ),
        ScriptedResponse.text("Both files say hello, in different words.", chunk_size=7),
    ]


def _without_timestamps(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_timestamps(v) for k, v in value.items() if k != "timestamp"}
    if isinstance(value, list):
        return [_without_timestamps(v) for v in value]
    return value


async def _run(agent: Agent, *prompts: str) -> list[Any]:
    seen: list[AgentEvent] = []
    agent.subscribe(lambda event, signal: seen.append(event))
    for prompt in prompts:
        await agent.prompt(prompt)
    check_trace(seen)
    return [_without_timestamps(wire.unstructure(e)) for e in seen]


def _agent(stream_fn: Any, system_prompt: str = "Be brief.") -> Agent:
    return Agent(
        model=MODEL,
        system_prompt=system_prompt,
        tools=[_tool()],
        stream_fn=stream_fn,
        stream_options=StreamOptions(temperature=0.5, api_key="secret-key"),
    )


async def test_a_replayed_run_emits_the_recorded_events(
    tmp_path: Path, autojump_clock: Clock
) -> None:
    path = tmp_path / "run.jsonl"
    scripted = ScriptedModel(_script())
    recorder = RecordingStreamFn(scripted, path)
    recorded = await _run(_agent(recorder), "compare a and b")
    assert recorder.requests == 2

    replay = ReplayStreamFn(path)
    replayed = await _run(_agent(replay), "compare a and b")
    assert replayed == recorded
    assert replay.remaining == 0
    assert any(e["type"] == "message_update" for e in recorded)  # deltas, not just ends

    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert lines[0] == {"kind": "pitrio-replay", "version": 1}
    first = lines[1]
    assert first["index"] == 0
    assert first["request"]["systemPrompt"] == "Be brief."
    assert first["request"]["options"] == {"temperature": 0.5}  # never the API key
    assert "secret-key" not in path.read_text(encoding="utf-8")
    assert first["request"]["tools"][0]["name"] == "read"
    assert first["request"]["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "compare a and b"}]}
    ]
    # The second request repeats the first's message: only the new ones are written.
    delta = lines[2]["request"]["messagesDelta"]
    assert "messages" not in lines[2]["request"]
    assert (delta["base"], delta["keep"]) == (0, 1)
    assert [m["role"] for m in delta["append"]] == ["assistant", "toolResult", "toolResult"]
    assert delta["append"][1]["content"] == [{"type": "text", "text": "read a.txt"}]


async def test_partial_messages_are_stored_as_patches(
    tmp_path: Path, autojump_clock: Clock
) -> None:
    """A long streamed text costs a file linear in its length, not quadratic."""
    path = tmp_path / "run.jsonl"
    text = "x" * 20_000
    recorder = RecordingStreamFn(ScriptedModel([ScriptedResponse.text(text, chunk_size=10)]), path)
    events = await _run(_agent(recorder), "go")
    size = path.stat().st_size
    assert sum(e["type"] == "message_update" for e in events) > 2000
    assert size < 10 * len(text) + 200_000  # a full partial per delta would be ~40 MB
    assert await _run(_agent(ReplayStreamFn(path)), "go") == events


async def test_a_changed_request_names_the_request_and_the_path(
    tmp_path: Path, autojump_clock: Clock
) -> None:
    path = tmp_path / "run.jsonl"
    await _run(_agent(RecordingStreamFn(ScriptedModel(_script()), path)), "compare a and b")

    replay = ReplayStreamFn(path)
    agent = _agent(replay)
    await agent.prompt("compare a and c")
    last = agent.state.messages[-1]
    assert last.stop_reason == "error"
    assert last.error_message == (
        "replay: request 0 differs from the recording at $.messages[0].content[0].text: "
        'recorded "compare a and b", got "compare a and c" '
        "(pass strict=False to replay responses regardless)"
    )

    replay = ReplayStreamFn(path)
    with pytest.raises(ReplayMismatchError) as info:
        replay(
            MODEL,
            _context("other system prompt", "compare a and b"),
            StreamOptions(temperature=0.5),
        )
    assert info.value.index == 0
    assert info.value.path == "$.systemPrompt"
    assert (info.value.recorded, info.value.actual) == ("Be brief.", "other system prompt")


def _context(system_prompt: str, text: str) -> Any:
    from pitrio import Context, user_text

    return Context(system_prompt=system_prompt, messages=[user_text(text)], tools=[_tool()])


async def test_a_missing_option_or_extra_request_is_a_mismatch(
    tmp_path: Path, autojump_clock: Clock
) -> None:
    path = tmp_path / "run.jsonl"
    await _run(_agent(RecordingStreamFn(ScriptedModel(_script()), path)), "compare a and b")
    replay = ReplayStreamFn(path)
    with pytest.raises(ReplayMismatchError, match=r"at \$\.options\.temperature: recorded 0\.5"):
        replay(MODEL, _context("Be brief.", "compare a and b"), StreamOptions())
    # Non-strict replays answer whatever is asked, in order, then run out.
    loose = ReplayStreamFn(path, strict=False)
    agent = _agent(loose, system_prompt="changed")
    await agent.prompt("anything")
    assert agent.state.messages[-1].content == (
        TextContent(text="Both files say hello, in different words."),
    )
    await agent.prompt("one more")
    assert agent.state.messages[-1].error_message == (
        'replay: request 2 differs from the recording at $: recorded null, got "a request '
        'beyond the 2 recorded" (pass strict=False to replay responses regardless)'
    )


async def test_a_message_or_tool_list_that_grew_or_shrank_is_a_mismatch(
    tmp_path: Path, autojump_clock: Clock
) -> None:
    from pitrio import Context, user_text

    path = tmp_path / "run.jsonl"
    await _run(_agent(RecordingStreamFn(ScriptedModel(_script()), path)), "compare a and b")
    prompt = user_text("compare a and b")
    other = Tool(
        name="ls",
        description="List files",
        parameters={"type": "object"},
        execute=_tool().execute,
    )
    brief = "Be brief."
    cases = [
        (Context(system_prompt=brief, messages=[], tools=[_tool()]), "$.messages.length", 1, 0),
        (
            Context(system_prompt=brief, messages=[prompt, user_text("+")], tools=[_tool()]),
            "$.messages.length",
            1,
            2,
        ),
        (Context(system_prompt=brief, messages=[prompt], tools=[]), "$.tools.length", 1, 0),
        (
            Context(system_prompt=brief, messages=[prompt], tools=[_tool(), other]),
            "$.tools.length",
            1,
            2,
        ),
    ]
    for context, where, recorded, actual in cases:
        replay = ReplayStreamFn(path)
        with pytest.raises(ReplayMismatchError) as info:
            replay(MODEL, context, StreamOptions(temperature=0.5))
        assert (info.value.index, info.value.path) == (0, where)
        assert (info.value.recorded, info.value.actual) == (recorded, actual)
        assert replay.remaining == 2  # nothing was played
    # The same request as recorded plays.
    replay = ReplayStreamFn(path)
    same = Context(system_prompt="Be brief.", messages=[prompt], tools=[_tool()])
    replay(MODEL, same, StreamOptions(temperature=0.5))
    assert replay.remaining == 1


async def test_an_aborted_request_replays_until_the_replay_is_aborted(
    tmp_path: Path, autojump_clock: Clock
) -> None:
    path = tmp_path / "run.jsonl"

    def provider() -> Any:
        """A slow provider with its own abort text."""
        scripted = ScriptedModel([ScriptedResponse.text("never finished", chunk_size=3, delay=10)])

        def stream_fn(model: Model, context: Any, options: StreamOptions) -> Any:
            stream = scripted(model, context, options)
            stream.abort_message = "Operation cancelled by the user"
            return stream

        return stream_fn

    async def run_and_abort(stream_fn: Any) -> list[Any]:
        agent = _agent(stream_fn)
        seen: list[AgentEvent] = []
        agent.subscribe(lambda event, signal: seen.append(event))
        async with trio.open_nursery() as nursery:
            await nursery.start(agent.prompt, "start")
            await trio.sleep(5)
            agent.abort()
        check_trace(seen)
        return [_without_timestamps(wire.unstructure(e)) for e in seen]

    recorded = await run_and_abort(RecordingStreamFn(provider(), path))
    last = recorded[-1]["messages"][-1]
    assert (last["stopReason"], last["errorMessage"]) == (
        "aborted",
        "Operation cancelled by the user",
    )
    assert last["content"] == [{"type": "text", "text": "never finished"}]  # streamed so far
    assert await run_and_abort(provider()) == recorded  # recording changed nothing
    record = json.loads(path.read_text(encoding="utf-8").splitlines()[1])
    assert record["interrupted"] is True
    assert await run_and_abort(ReplayStreamFn(path)) == recorded


async def test_a_stream_function_that_raised_raises_again(
    tmp_path: Path, autojump_clock: Clock
) -> None:
    """Recording is transparent: a stream function that raises (at once, or when
    awaited) ends the run exactly as without the recorder, and so does its replay."""
    path = tmp_path / "run.jsonl"

    def broken(model: Model, context: Any, options: StreamOptions) -> Any:
        raise ConnectionError("no route to host")

    async def broken_async(model: Model, context: Any, options: StreamOptions) -> Any:
        await trio.sleep(1)
        raise ConnectionError("no route to host")

    for stream_fn in (broken, broken_async):
        plain = await _run(_agent(stream_fn), "hi")
        assert plain[-1]["messages"][-1]["errorMessage"] == "no route to host"
        assert await _run(_agent(RecordingStreamFn(stream_fn, path)), "hi") == plain
        assert await _run(_agent(ReplayStreamFn(path)), "hi") == plain


async def test_an_async_stream_function_is_recorded(tmp_path: Path, autojump_clock: Clock) -> None:
    path = tmp_path / "run.jsonl"
    scripted = ScriptedModel(_script())

    async def slow_to_connect(model: Model, context: Any, options: StreamOptions) -> Any:
        await trio.sleep(2)
        return scripted(model, context, options)

    recorded = await _run(_agent(RecordingStreamFn(slow_to_connect, path)), "compare a and b")
    assert await _run(_agent(ReplayStreamFn(path)), "compare a and b") == recorded


def test_bad_files_give_clear_errors(tmp_path: Path) -> None:
    missing = tmp_path / "missing.jsonl"
    with pytest.raises(ReplayFileError, match="does not exist; record one with RecordingStreamFn"):
        ReplayStreamFn(missing)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(ReplayFileError, match="is empty"):
        ReplayStreamFn(empty)
    foreign = tmp_path / "session.jsonl"
    foreign.write_text('{"type": "session", "version": 3}\n')
    with pytest.raises(ReplayFileError, match="does not start with a pitrio-replay header"):
        ReplayStreamFn(foreign)
    future = tmp_path / "future.jsonl"
    future.write_text('{"kind": "pitrio-replay", "version": 9}\n')
    with pytest.raises(ReplayFileError, match="format version 9; this pitrio reads version 1"):
        ReplayStreamFn(future)


async def test_a_torn_file_is_reported(tmp_path: Path, autojump_clock: Clock) -> None:
    path = tmp_path / "run.jsonl"
    await _run(_agent(RecordingStreamFn(ScriptedModel(_script()), path)), "compare a and b")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])
    with pytest.raises(ReplayFileError, match="its last line is torn not valid JSON"):
        ReplayStreamFn(path)
    lines = data.decode().splitlines()
    path.write_text("\n".join([lines[0], lines[2]]) + "\n")
    with pytest.raises(ReplayFileError, match=r"missing the exchanges for requests \[0\]"):
        ReplayStreamFn(path)


async def test_a_new_recording_replaces_the_file(tmp_path: Path, autojump_clock: Clock) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text("old contents\n")
    await _run(_agent(RecordingStreamFn(ScriptedModel(_script()), path)), "compare a and b")
    await _run(_agent(RecordingStreamFn(ScriptedModel(_script()), path)), "compare a and b")
    assert len(path.read_text().splitlines()) == 3  # header and two exchanges
    assert ReplayStreamFn(path).remaining == 2


async def test_a_recording_is_private_to_its_user(tmp_path: Path, autojump_clock: Clock) -> None:
    """A recording holds the whole conversation: created 0600 whatever the umask."""
    import os

    path = tmp_path / "run.jsonl"
    old = os.umask(0o022)
    try:
        await _run(_agent(RecordingStreamFn(ScriptedModel(_script()), path)), "compare a and b")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o600
    assert ReplayStreamFn(path).remaining == len(_script())  # every exchange recorded


async def test_every_kind_of_block_replays_exactly(tmp_path: Path, autojump_clock: Clock) -> None:
    """Thinking, text and tool-call deltas (arguments streamed as partial JSON) and a
    final usage all come back as they were streamed."""
    from pitrio import ThinkingContent, ToolCall, Usage

    path = tmp_path / "run.jsonl"
    response = ScriptedResponse(
        content=(
            ThinkingContent(thinking="Which file? Probably a.txt.", thinking_signature="sig"),
            TextContent(text="Reading it now."),
            ToolCall(id="c1", name="read", arguments={"path": "a.txt", "lines": [1, 2, 3]}),
        ),
        chunk_size=3,
        usage=Usage(input=120, output=30, total_tokens=150),
    )
    script = [response, ScriptedResponse.text("Done.")]
    recorded = await _run(_agent(RecordingStreamFn(ScriptedModel(script), path)), "go")
    kinds = {e["assistantMessageEvent"]["type"] for e in recorded if e["type"] == "message_update"}
    assert {"thinking_delta", "text_delta", "toolcall_delta"} <= kinds
    assert await _run(_agent(ReplayStreamFn(path)), "go") == recorded


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3)
    ),
    max_leaves=10,
)


@given(st.lists(json_values, min_size=1, max_size=6))
def test_patches_rebuild_any_sequence_of_json_values(values: list[Any]) -> None:
    """Each value is rebuilt exactly from the previous one and its patch."""
    from pitrio.harness._replay import _apply, _copy, _diff

    current: Any = None
    previous: Any = None
    for value in values:
        ops: list[dict[str, Any]] = []
        if previous is None:
            ops.append({"p": [], "set": value})
        else:
            _diff(previous, value, [], ops)
        current = _apply(_copy(current), json.loads(json.dumps(ops)))
        assert current == value
        previous = value


blocks = st.one_of(
    st.builds(TextContent, text=st.text(max_size=8)),
    st.builds(ThinkingContent, thinking=st.text(max_size=8)),
    st.builds(
        ToolCall,
        id=st.text(min_size=1, max_size=3),
        name=st.sampled_from(["read", "edit"]),
        arguments=st.dictionaries(st.text(max_size=3), st.integers(0, 9), max_size=2),
    ),
)


@st.composite
def partial_sequences(draw: st.DrawFn) -> list[AssistantMessage]:
    """Partials as a provider streams them: blocks grow, get added, get replaced;
    usage changes now and then."""
    message = AssistantMessage(stop_reason="pending")
    out = [message]
    for _ in range(draw(st.integers(1, 12))):
        content = list(message.content)
        action = draw(st.sampled_from(["grow", "add", "replace", "usage", "drop"]))
        if action == "grow" and content and isinstance(content[-1], TextContent):
            content[-1] = TextContent(text=content[-1].text + draw(st.text(max_size=4)))
        elif action == "replace" and content:
            content[draw(st.integers(0, len(content) - 1))] = draw(blocks)
        elif action == "drop" and content:
            content.pop()
        elif action == "usage":
            message = attrs.evolve(message, usage=Usage(output=draw(st.integers(0, 99))))
        else:
            content.append(draw(blocks))
        message = attrs.evolve(message, content=tuple(content))
        out.append(message)
    return out


@given(partial_sequences())
def test_partials_survive_the_file_format(partials: list[AssistantMessage]) -> None:
    from pitrio import StartEvent, TextDeltaEvent
    from pitrio.harness._replay import _decode_events, _encode_events

    events = [StartEvent(partial=partials[0])] + [
        TextDeltaEvent(content_index=0, delta="", partial=p) for p in partials[1:]
    ]
    records = json.loads(json.dumps(_encode_events(events)))
    assert _decode_events(records) == events


async def test_ignored_paths_are_not_compared(tmp_path: Path, autojump_clock: Clock) -> None:
    path = tmp_path / "run.jsonl"
    await _run(_agent(RecordingStreamFn(ScriptedModel(_script()), path)), "compare a and b")
    events = await _run(
        _agent(ReplayStreamFn(path, ignore={"$.systemPrompt"}), "Today is another day."),
        "compare a and b",
    )
    assert events[-1]["messages"][-1]["content"][0]["text"].startswith("Both files")
    replay = ReplayStreamFn(path, ignore={"$.messages[0].content"})
    with pytest.raises(ReplayMismatchError, match=r"at \$\.systemPrompt"):
        replay(MODEL, _context("changed", "other words"), StreamOptions(temperature=0.5))


async def test_a_long_conversation_makes_a_linear_file(
    tmp_path: Path, autojump_clock: Clock
) -> None:
    path = tmp_path / "run.jsonl"
    turns = 60
    model = ScriptedModel([ScriptedResponse.text(f"answer {i} " + "x" * 500) for i in range(turns)])
    agent = _agent(RecordingStreamFn(model, path))
    prompts = [f"question {i} " + "y" * 500 for i in range(turns)]
    recorded = await _run(agent, *prompts)
    size = path.stat().st_size
    # ~1 kB of new messages and ~3 kB of events a turn; requests repeating the whole
    # conversation would add ~1.1 kB * 60 * 61 / 2 = 2 MB.
    assert size < turns * 6_000
    replayed = await _run(_agent(ReplayStreamFn(path)), *prompts)
    assert replayed == recorded
    # A recording whose earlier exchange is gone cannot rebuild the later requests.
    lines = path.read_text(encoding="utf-8").splitlines()
    del lines[1]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ReplayFileError, match=r"missing the exchanges for requests \[0\]"):
        ReplayStreamFn(path)
