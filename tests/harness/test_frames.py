"""Streamed assistant frames (``pitrio.harness._frames``): Pi's encoder and reducer on
pitrio's stream events, the batched writes of a request's frames, and the session
records they leave (written while the request is out, deleted by its answer)."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
import trio

from pitrio import (
    AssistantMessage,
    AssistantMessageEventStream,
    Context,
    DoneEvent,
    Model,
    StartEvent,
    StreamOptions,
    TextContent,
    TextDeltaEvent,
    TextStartEvent,
    ThinkingContent,
    ToolCall,
    ToolCallDeltaEvent,
    ToolCallStartEvent,
    wire,
)
from pitrio.harness import Harness, JsonlSessionStore, _frames as frames_module
from pitrio.harness._frames import (
    PENDING_FRAMES,
    FramedStream,
    FrameEncoder,
    committed_partial,
    merge_deltas,
    reduce_frames,
)
from pitrio.testing import ScriptedModel, ScriptedResponse

MODEL = Model(id="scripted", api="scripted", provider="local")
ANSWER = ScriptedResponse(
    content=(
        ThinkingContent(thinking="think it over", thinking_signature="sig-1"),
        TextContent(text="let me look at it"),
        ToolCall(id="call_1", name="look", arguments={"path": "a.txt", "n": [1, 2]}),
    ),
    chunk_size=3,
)


async def _events(response: ScriptedResponse) -> list[Any]:
    stream = ScriptedModel([response])(MODEL, Context(), StreamOptions())
    return [event async for event in stream]


def _frames(events: list[Any]) -> list[dict[str, Any]]:
    encoder = FrameEncoder()
    return [f for f in (encoder.encode(e) for e in events) if f is not None]


async def test_the_frames_of_a_stream_reduce_to_its_answer_and_each_prefix_to_a_partial() -> None:
    events = await _events(ANSWER)
    frames = _frames(events)
    kinds = [f["type"] for f in frames]
    assert kinds[0] == "start"
    assert {"thinking_delta", "text_delta", "toolcall_delta", "toolcall_end"} <= set(kinds)
    assert frames[0]["partial"]["content"] == []
    assert frames[0]["partial"]["stopReason"] == "pending"
    final = wire.unstructure(events[-1].message)
    reduced = reduce_frames(frames)
    assert reduced is not None
    assert reduced["content"] == final["content"]
    # Each prefix: the text so far, a tool call's arguments parsed from its JSON so far.
    texts = []
    for n in range(1, len(frames)):
        partial = reduce_frames(frames[:n])
        assert partial is not None
        blocks = partial["content"]
        texts.append(" ".join(b.get("text", "") for b in blocks if b["type"] == "text"))
        if blocks and blocks[-1]["type"] == "toolCall":
            assert isinstance(blocks[-1]["arguments"], dict)
    assert "let" in texts
    assert "let me look at it" in texts
    assert reduce_frames([]) is None
    assert reduce_frames(frames[1:]) is None  # no start frame


def test_a_replay_stops_at_a_frame_that_does_not_fit() -> None:
    start = {"type": "start", "partial": {"role": "assistant", "content": []}}
    text = {"type": "text_start", "contentIndex": 0, "content": {"type": "text", "text": "a"}}
    delta = {"type": "text_delta", "contentIndex": 0, "delta": "b"}
    end = {"type": "text_end", "contentIndex": 0, "content": "ab"}
    gap = {"type": "text_start", "contentIndex": 5, "content": {"type": "text", "text": "x"}}
    after_end = {"type": "text_delta", "contentIndex": 0, "delta": "c"}
    for tail in ([gap, delta], [end, after_end], [start], [{"type": "text_delta"}], ["junk"]):
        reduced = reduce_frames([start, text, delta, *tail])
        assert reduced is not None
        assert reduced["content"][0]["text"] in ("ab",)
    assert reduce_frames([start, text, end])["content"] == [{"type": "text", "text": "ab"}]  # type: ignore[index]


def test_a_delta_the_block_start_already_held_adds_no_frame() -> None:
    base = AssistantMessage(stop_reason="pending")
    held = attrs.evolve(base, content=(TextContent(text="hel"),))
    encoder = FrameEncoder()
    assert encoder.encode(TextDeltaEvent(content_index=0, delta="x", partial=held)) is None
    encoder.encode(StartEvent(partial=base))
    start = encoder.encode(TextStartEvent(content_index=0, partial=held))
    assert start == {
        "type": "text_start",
        "contentIndex": 0,
        "content": {"type": "text", "text": "hel"},
    }
    assert encoder.encode(TextDeltaEvent(content_index=0, delta="he", partial=held)) is None
    frame = encoder.encode(TextDeltaEvent(content_index=0, delta="llo", partial=held))
    assert frame == {"type": "text_delta", "contentIndex": 0, "delta": "lo"}
    assert encoder.encode(TextDeltaEvent(content_index=3, delta="?", partial=held)) is None
    with pytest.raises(ValueError, match="no content block at index 4"):
        encoder.encode(TextStartEvent(content_index=4, partial=held))


def test_a_tool_call_that_starts_with_its_arguments_catches_up_first() -> None:
    """Pi's legacy-grammar case: the start holds arguments its deltas repeat."""
    call = ToolCall(id="c", name="look", arguments={"a": 1})
    partial = AssistantMessage(stop_reason="pending", content=(call,))
    encoder = FrameEncoder()
    encoder.encode(StartEvent(partial=AssistantMessage(stop_reason="pending")))
    start_call = {"type": "toolCall", "id": "c", "name": "look", "arguments": {"a": 1}}
    assert encoder.encode(ToolCallStartEvent(content_index=0, partial=partial)) == {
        "type": "toolcall_start",
        "contentIndex": 0,
        "toolCall": start_call,
    }
    deltas = ['{"b', '":', "2", "}", ","]
    frames = [
        encoder.encode(ToolCallDeltaEvent(content_index=0, delta=d, partial=partial))
        for d in deltas
    ]
    # '{"b": 2' parses to {"b": 2}, which neither is nor extends the start's {"a": 1}
    assert frames[:4] == [None, None, None, None]
    fresh = FrameEncoder()
    fresh.encode(StartEvent(partial=AssistantMessage(stop_reason="pending")))
    fresh.encode(ToolCallStartEvent(content_index=0, partial=partial))
    out = [
        fresh.encode(ToolCallDeltaEvent(content_index=0, delta=d, partial=partial))
        for d in ['{"a"', ":1", ',"b":2', "}", ""]
    ]
    assert out[0] is None
    assert out[1] == {"type": "toolcall_checkpoint", "contentIndex": 0, "json": '{"a":1'}
    assert out[2] == {"type": "toolcall_delta", "contentIndex": 0, "delta": ',"b":2'}
    assert out[4] is None  # an empty delta
    start = {"type": "start", "partial": {"role": "assistant", "content": []}}
    begun = {"type": "toolcall_start", "contentIndex": 0, "toolCall": start_call}
    reduced = reduce_frames([start, begun, out[1], out[2]])
    assert reduced is not None
    assert reduced["content"][0]["arguments"] == {"a": 1, "b": 2}


class SlowSession:
    """A session whose writes take a while: each lasts until the reader has taken
    four more events (or all but the last: the terminal event waits for the write in
    flight). Counts the writes and those in flight."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.most = 0
        self.calls = 0
        self.taken = 0
        self.total = 0
        self.written: list[Any] = []

    async def _record(self, transactions: Any) -> None:
        self.in_flight += 1
        self.calls += 1
        self.most = max(self.most, self.in_flight)
        until = min(self.taken + 4, self.total - 1)
        while self.taken < until:
            await trio.lowlevel.checkpoint()
        self.written += [write for transaction in transactions for write in transaction]
        self.in_flight -= 1


@pytest.fixture
def no_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    """A frame write as soon as the last one ended."""
    monkeypatch.setattr(frames_module, "FRAME_INTERVAL", 0)


async def test_frames_are_written_one_write_in_flight_and_not_after_the_answer(
    no_interval: None,
) -> None:
    events = await _events(ANSWER)

    async def produce(stream: AssistantMessageEventStream) -> None:
        for event in events:
            stream.push(event)

    session = SlowSession()
    session.total = len(events)
    framed = FramedStream(AssistantMessageEventStream(produce), session, "op:entry")  # type: ignore[arg-type]
    assert framed.has_producer
    seen = []
    async with trio.open_nursery() as nursery:
        framed.start_producer(nursery)
        async for event in framed:
            seen.append(event)
            if isinstance(event, DoneEvent):
                assert session.in_flight == 0  # the write in flight ended first
            session.taken += 1
            await trio.lowlevel.checkpoint()
        done_writes = len(session.written)
    assert [type(e) for e in seen] == [type(e) for e in events]
    assert framed.result_nowait() == events[-1].message
    assert await framed.result() == events[-1].message
    assert session.most == 1
    frames = _frames(events)
    values = [w["value"] for w in session.written]
    assert all(
        w["kind"] == "list" and w["namespace"] == PENDING_FRAMES and w["key"] == "op:entry"
        for w in session.written
    )
    assert 1 < session.calls <= len(values) < len(frames)  # batched, deltas joined
    # in order, a prefix: what the written frames make is what some first n events make
    written = reduce_frames(values)
    assert any(written == reduce_frames(frames[:n]) for n in range(1, len(frames) + 1))
    assert len(session.written) == done_writes  # nothing written after the answer


def test_deltas_to_one_block_are_joined_and_make_the_same_answer() -> None:
    start = {"type": "start", "partial": {"role": "assistant", "content": []}}
    text = {"type": "text_start", "contentIndex": 0, "content": {"type": "text", "text": ""}}
    call = {"type": "toolcall_start", "contentIndex": 1, "toolCall": {"type": "toolCall"}}

    def delta(kind: str, index: int, text: str) -> dict[str, Any]:
        return {"type": kind, "contentIndex": index, "delta": text}

    frames = [
        start,
        text,
        delta("text_delta", 0, "a"),
        delta("text_delta", 0, "b"),
        delta("text_delta", 0, "c"),
        call,
        delta("toolcall_delta", 1, '{"p'),
        delta("toolcall_delta", 1, '":1}'),
    ]
    originals = json.loads(json.dumps(frames))
    merged = merge_deltas(json.loads(json.dumps(frames)))
    assert [f["type"] for f in merged] == [
        "start",
        "text_start",
        "text_delta",
        "toolcall_start",
        "toolcall_delta",
    ]
    assert merged[2]["delta"] == "abc"
    assert merged[4]["delta"] == '{"p":1}'
    assert reduce_frames(merged) == reduce_frames(originals)
    # a delta after another block's frame is not joined across it
    split = [start, text, delta("text_delta", 0, "a"), call, delta("text_delta", 0, "b")]
    assert len(merge_deltas(json.loads(json.dumps(split)))) == 5


async def test_a_cancelled_stream_cancels_the_provider() -> None:
    async def produce(stream: AssistantMessageEventStream) -> None:
        stream.push(StartEvent(partial=AssistantMessage(stop_reason="pending")))
        await trio.sleep_forever()

    framed = FramedStream(AssistantMessageEventStream(produce), SlowSession(), "k")  # type: ignore[arg-type]
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            framed.start_producer(nursery)
            first = await framed.__anext__()
            framed.cancel()
            terminal = await framed.__anext__()
    assert isinstance(first, StartEvent)
    assert terminal.type == "error"
    assert terminal.reason == "aborted"


async def test_frame_writes_are_at_least_the_interval_apart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stream faster than the interval: its frames go in one write per interval."""
    monkeypatch.setattr(frames_module, "FRAME_INTERVAL", 0.2)
    events = await _events(ANSWER)

    async def produce(stream: AssistantMessageEventStream) -> None:
        for event in events:
            await trio.sleep(0.01)
            stream.push(event)

    session = SlowSession()
    session.total = len(events)
    framed = FramedStream(AssistantMessageEventStream(produce), session, "k")  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        framed.start_producer(nursery)
        started = trio.current_time()
        async for _ in framed:
            session.taken = session.total  # writes end at once
        elapsed = trio.current_time() - started
    # the stream took about 0.27 s: a write at its start, one after 0.2 s, no more
    assert 1 <= session.calls <= 1 + int(elapsed / 0.2)
    assert session.calls < len(_frames(events))
    assert elapsed < 1  # the pause ended with the stream, not after it


async def test_a_harness_keeps_the_frames_while_the_request_is_out(
    tmp_path: Any, no_interval: None
) -> None:
    store = JsonlSessionStore(tmp_path, fsync="never")
    session = await store.create(cwd="/work/project", session_id="frames")
    answer = ScriptedResponse.text("a streamed answer", chunk_size=2, checkpoint_each_event=True)
    harness = Harness(model=MODEL, stream_fn=ScriptedModel([answer]), session=session)
    during: list[str] = []

    def listener(event: Any) -> None:
        if event.type == "message_update" and harness._ops is not None:
            key = harness._ops.frames_key
            partial = committed_partial(session, key) if key else None
            if partial is not None:
                during.append(" ".join(b.get("text", "") for b in partial["content"]))

    harness.subscribe(listener)
    await harness.prompt("go")
    assert during  # the committed partial, while it streamed
    assert all("a streamed answer".startswith(text) for text in during)
    assert not [key for key in session._state.lists if key[0] == PENDING_FRAMES]
    assert session.path is not None
    writes = []
    text = await trio.Path(session.path).read_text()
    for line in text.splitlines()[1:]:
        parsed = json.loads(line)
        writes += parsed if isinstance(parsed, list) else [parsed]
    appended = [w for w in writes if w["kind"] == "list" and w["op"] == "append"]
    deleted = [w for w in writes if w["kind"] == "list" and w["op"] == "delete"]
    assert appended
    assert all(w["namespace"] == PENDING_FRAMES for w in appended)
    # the answer's entry deleted them in its own transaction
    assert [w["key"] for w in deleted] == [appended[0]["key"]]
    await session.close()
