"""Long outputs stay linear: counted work, not time.

Each test counts what a quadratic implementation would repeat per delta (characters
decoded by the tool-argument parser, texts joined, bytes allocated) and checks that
the count grows with the output, not with its square, through the real provider code.
The lazily built fields must also be indistinguishable from eager ones.
"""

from __future__ import annotations

import json
import pickle
import tracemalloc
from collections.abc import Callable
from typing import Any

import attrs
import pytest
import trio
from hypothesis import given, strategies as st

from benchmarks.bench_provider_sse import EVENT_BUILDERS
from benchmarks.bench_scaling import (
    APIS,
    DELTA,
    TOOL_EVENT_BUILDERS,
    sse_body,
    stream_once,
    tool_arguments,
)
from pitrio import (
    Agent,
    AssistantMessage,
    StreamOptions,
    TextContent,
    ThinkingContent,
    ToolCall,
)
from pitrio._messages import LazyValue
from pitrio._wire import converter
from pitrio.providers import _json, _output, _partial_json
from pitrio.providers._partial_json import PartialJSONParser, lazy_arguments
from pitrio.providers._sse import SSEDecoder
from pitrio.testing import ScriptedModel, ScriptedResponse

STREAMED_CALL_APIS = [api for api in APIS if api not in ("google-generative-ai", "google-vertex")]
"""The APIs that stream a tool call's arguments in deltas, over server-sent events
(Gemini sends each call whole, in the @google/genai SDK's own framing, not SSE: that
framing is tested in tests/providers/test_google_generative_ai.py; its text deltas are in
the scaling test below)."""
SSE_CALL_APIS = [api for api in STREAMED_CALL_APIS if api != "bedrock-converse-stream"]
"""Those of them that speak SSE (Bedrock's AWS event stream has its own size limit test in
tests/providers/test_bedrock_converse_stream.py)."""


class Counter:
    """Wraps a function, counting calls and the characters of its first argument."""

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function = function
        self.calls = 0
        self.chars = 0

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        first = args[0]
        self.chars += len(first) if isinstance(first, str) else sum(map(len, first))
        return self.function(*args)


def test_the_parser_decodes_each_character_a_bounded_number_of_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:

    decoded = Counter(_json.json_parse)
    reference = Counter(_json.parse_streaming_json)
    monkeypatch.setattr(_partial_json, "json_parse", decoded)
    monkeypatch.setattr(_partial_json, "parse_streaming_json", reference)
    text = json.dumps(tool_arguments(50_000))
    parser = PartialJSONParser()
    for start in range(0, len(text), 7):
        parser.feed(text[start : start + 7])
        parser.snapshot()  # taken per delta, as the providers do; never read
    assert parser.value() == json.loads(text)
    assert reference.calls == 0  # the whole-string parser never ran
    # Each character is decoded about once (plus the quotes added per chunk); a
    # re-parse per delta would decode ~len(text)**2 / 14 characters.
    assert decoded.chars < 2 * len(text)


@pytest.mark.parametrize("api", STREAMED_CALL_APIS)
async def test_tool_arguments_through_a_provider_are_parsed_once(
    api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The incremental parser's decoding, and partial-json's whole-string parse (which
    # pi-ai runs on the whole text at every delta).
    decoded = Counter(_json.json_parse)
    reference = Counter(_json.parse_streaming_json)
    whole = Counter(_json.parse_partial_json)
    monkeypatch.setattr(_partial_json, "json_parse", decoded)
    monkeypatch.setattr(_partial_json, "parse_streaming_json", reference)
    monkeypatch.setattr(_json, "parse_partial_json", whole)
    arguments = tool_arguments(20_000)
    text = json.dumps(arguments)
    message, events, _ = await stream_once(api, sse_body(api, TOOL_EVENT_BUILDERS[api](text)))
    assert message.tool_calls[0].arguments == arguments
    assert events > len(text) // 20  # one event per delta at least
    assert reference.calls == 0
    assert whole.calls == 0
    # The Responses API sends the whole text once more at the end (parsed once).
    assert decoded.chars < 3 * len(text)


async def _text_answer(api: str, deltas: int) -> int:
    """Stream a text answer holding every event; the peak of traced memory."""
    body = sse_body(api, EVENT_BUILDERS[api](deltas))
    tracemalloc.start()
    try:
        message, events, _ = await stream_once(api, body, keep=[])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert message.text == DELTA * deltas
    assert events >= deltas
    return peak - len(body)


@pytest.mark.parametrize("api", APIS)
async def test_text_deltas_join_the_answer_only_when_it_is_read(
    api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    joined = Counter(_output.join_chunks)
    monkeypatch.setattr(_output, "join_chunks", joined)
    small = await _text_answer(api, 1000)
    joined.calls = joined.chars = 0
    large = await _text_answer(api, 4000)
    # The final text (text_end, done) is built a few times; never once per delta.
    assert joined.calls <= 4
    # Every event is held: with a copy of the text per snapshot, 4x the deltas would
    # need ~16x the memory; shared chunks keep it near 4x.
    assert large < 8 * small


def test_snapshots_taken_earlier_still_read_their_own_prefix() -> None:
    output = _output.PartialMessage(_model(), timestamp=1)
    index = output.add_block(TextContent(text="<"))
    snapshots = []
    for piece in "abcdef":
        output.append_text(index, piece)
        snapshots.append(output.snapshot())
    # Read in reverse: each is its own prefix, whatever was appended after it.
    assert [s.text for s in reversed(snapshots)] == ["<abcdef"[: n + 2] for n in range(5, -1, -1)]
    # A block replaced by set_block starts new chunks from the new block's text.
    output.set_block(index, TextContent(text="new", text_signature="sig"))
    output.append_text(index, "!")
    assert output.snapshot().content[index] == TextContent(text="new!", text_signature="sig")
    assert snapshots[-1].text == "<abcdef"


def _model() -> Any:
    from pitrio import Model

    return Model(id="m", api="openai-completions", provider="p")


def test_lazy_fields_read_like_eager_ones() -> None:
    chunks = ["ab", "cd", "ef"]
    lazy = TextContent(text=LazyValue(_output.join_chunks, chunks, 2))  # type: ignore[arg-type]
    eager = TextContent(text="abcd")
    assert lazy == eager
    assert hash(lazy) == hash(eager)
    assert repr(lazy) == repr(eager)
    assert converter.unstructure(lazy) == converter.unstructure(eager)
    assert pickle.loads(pickle.dumps(lazy)) == eager
    thinking = ThinkingContent(thinking=LazyValue(str.upper, "abc"), redacted=True)  # type: ignore[arg-type]
    assert thinking == ThinkingContent(thinking="ABC", redacted=True)
    parser = PartialJSONParser()
    parser.feed('{"a": [1, "x')
    call = ToolCall(id="c", name="n", arguments=lazy_arguments(parser))
    parser.feed('yz"]}')
    assert call.arguments == {"a": [1, "x"]}
    message = AssistantMessage(content=(lazy, thinking, call))
    assert converter.unstructure(message)["content"][2]["arguments"] == {"a": [1, "x"]}


async def _scripted_peak(deltas: int) -> int:
    model = ScriptedModel([ScriptedResponse.text("x" * deltas, chunk_size=1)])
    agent = Agent(stream_fn=model)
    tracemalloc.start()
    try:
        await agent.prompt("go")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert agent.state.messages[-1].text == "x" * deltas
    return peak


def test_a_scripted_answer_needs_memory_linear_in_its_length() -> None:
    small = trio.run(_scripted_peak, 2000)
    large = trio.run(_scripted_peak, 8000)
    # A full copy of the text per delta would make this ~16x (4x the deltas, each
    # copy 4x longer); shared structure keeps it near 4x.
    assert large < 6 * small


@pytest.mark.parametrize("api", SSE_CALL_APIS)
async def test_an_oversized_sse_event_ends_the_stream_as_an_error(
    api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    kwdefaults = SSEDecoder.__init__.__kwdefaults__
    assert kwdefaults is not None
    monkeypatch.setitem(kwdefaults, "max_event_size", 4096)
    body = sse_body(api, TOOL_EVENT_BUILDERS[api](json.dumps(tool_arguments(10_000))))
    body = body.replace(b"data: ", b"data: " + b" " * 5000, 3)  # a long line early on
    message, _, _ = await stream_once(api, body)
    assert message.stop_reason == "error"
    assert "max_event_size=4,096 bytes" in (message.error_message or "")


@pytest.mark.parametrize("api", SSE_CALL_APIS)
async def test_max_event_size_is_a_stream_option(api: str) -> None:
    body = sse_body(api, TOOL_EVENT_BUILDERS[api](json.dumps(tool_arguments(100))))
    body = body.replace(b"data: ", b"data: " + b" " * 5000, 3)
    message, _, _ = await stream_once(api, body, options=StreamOptions(max_event_size=4096))
    assert message.stop_reason == "error"
    assert "max_event_size=4,096 bytes" in (message.error_message or "")
    message, _, _ = await stream_once(api, body)  # the default (64 MiB) takes it
    assert message.stop_reason != "error", message.error_message


_operations = st.lists(
    st.one_of(
        st.tuples(st.just("add_text"), st.text(max_size=3)),
        st.tuples(st.just("add_thinking"), st.text(max_size=3)),
        st.tuples(st.just("append"), st.text(max_size=4)),
        st.tuples(st.just("set"), st.text(max_size=3)),
        st.tuples(st.just("snapshot_read"), st.just("")),
    ),
    max_size=30,
)


@given(_operations, st.data())
def test_partial_message_snapshots_equal_eager_copies(
    operations: list[tuple[str, str]], data: st.DataObject
) -> None:
    """Any mix of block additions, appends and replacements: every snapshot equals
    the eagerly built message of that moment, whenever (and in whatever order) the
    snapshots are read."""
    output = _output.PartialMessage(_model(), timestamp=1)
    eager: list[Any] = []
    taken: list[tuple[AssistantMessage, tuple[Any, ...]]] = []
    for kind, text in operations:
        if kind == "add_text":
            output.add_block(TextContent(text=text, text_signature="s" if text else None))
            eager.append(TextContent(text=text, text_signature="s" if text else None))
        elif kind == "add_thinking":
            output.add_block(ThinkingContent(thinking=text, redacted=True))
            eager.append(ThinkingContent(thinking=text, redacted=True))
        elif not eager:
            continue
        elif kind == "append":
            index = data.draw(st.integers(0, len(eager) - 1))
            block = eager[index]
            if isinstance(block, TextContent):
                output.append_text(index, text)
                eager[index] = attrs.evolve(block, text=block.text + text)
            else:
                output.append_thinking(index, text)
                eager[index] = attrs.evolve(block, thinking=block.thinking + text)
        elif kind == "set":
            index = data.draw(st.integers(0, len(eager) - 1))
            eager[index] = TextContent(text=text)
            output.set_block(index, TextContent(text=text))
        else:
            assert output.snapshot().content == tuple(eager)
        taken.append((output.snapshot(), tuple(eager)))
    order = data.draw(st.permutations(range(len(taken))))
    for position in order:
        snapshot, expected = taken[position]
        assert snapshot.content == expected
