"""Streamed assistant frames: the committed prefix of a request's answer, as Pi keeps it.

Pi 0.85.0 writes each event of a streaming answer as a compact *frame* (pi-ai's
``AssistantMessageFrameEncoder``: ``start``, ``text_start`` / ``text_delta`` /
``text_end``, the same for thinking, ``toolcall_start`` / ``toolcall_delta`` /
``toolcall_checkpoint`` / ``toolcall_end``) to the list
``pi.pending.assistant_frame`` under ``OPERATION:RESPONSE_ENTRY`` while the request is
``assistant.effect_pending`` (pi-agent-core ``runtime/progress.js``,
``drive/response.js``); the answer's entry deletes the list (``drive/terminal.js``), and
a request interrupted by the death of its process is settled from the frames that were
committed (``reduceAssistantMessageFrames``, ``drive/recovery.js``): its partial answer
survives.

Pi issues one write per frame. :class:`FramedStream` encodes the same frames, one per
event, but batches their writes: one write in flight at a time, at most one every
:data:`FRAME_INTERVAL`, the frames that came meanwhile in the next, the deltas to one
block among them joined into one delta (:func:`merge_deltas`; each frame still its own
transaction, as Pi's). It stops writing at the answer's end (that answer's entry is
written next and deletes them).
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any, Final

import trio

from pitrio import (
    AssistantMessage,
    AssistantMessageEvent,
    DoneEvent,
    ErrorEvent,
    EventStream,
    StartEvent,
    TextDeltaEvent,
    TextEndEvent,
    TextStartEvent,
    ThinkingDeltaEvent,
    ThinkingEndEvent,
    ThinkingStartEvent,
    ToolCallDeltaEvent,
    ToolCallStartEvent,
    wire,
)
from pitrio.providers._json import parse_streaming_json

from ._entries import JSONValue, Write
from ._session import Session

__all__ = ["PENDING_FRAMES", "FrameEncoder", "FramedStream", "reduce_frames"]

PENDING_FRAMES: Final = "pi.pending.assistant_frame"
FRAME_INTERVAL = 0.05
"""Seconds from one frame write's start to the next's, at the least: a fast stream's
frames go in a write or two a tenth of a second (a crash loses at most that much more of
the newest output than Pi's write per frame would). Read at each write (a test may set
it to 0: a write as soon as the last one ended)."""
_EMPTY_ARGUMENTS: Final = json.dumps(parse_streaming_json(""), separators=(",", ":"))


def frames_key(operation_id: str, response_entry_id: str) -> str:
    """The key of a request's frame list (Pi's ``pendingAssistantFrames``)."""
    return f"{operation_id}:{response_entry_id}"


def delete_frames(key: str) -> Write:
    return {"kind": "list", "op": "delete", "namespace": PENDING_FRAMES, "key": key}


def _append(key: str, frame: JSONValue) -> Write:
    return {"kind": "list", "op": "append", "namespace": PENDING_FRAMES, "key": key, "value": frame}


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _optional(block: Mapping[str, Any], *names: str) -> dict[str, Any]:
    return {name: block[name] for name in names if block.get(name) is not None}


def _block(partial: AssistantMessage, index: int) -> dict[str, Any]:
    if not 0 <= index < len(partial.content):
        msg = f"stream event has no content block at index {index}"
        raise ValueError(msg)
    block: dict[str, Any] = wire.unstructure(partial.content[index])
    return block


class FrameEncoder:
    """Pi's ``AssistantMessageFrameEncoder`` on pitrio's stream events: the frame of
    each event (Pi's JSON), or ``None`` for an event that adds nothing (a delta the
    block's start already held, the terminal events)."""

    __slots__ = ("_blocks", "_started")

    def __init__(self) -> None:
        self._started = False
        # content index -> [kind, covered chars, delta chars] or
        # ["toolCall", caught up, catch-up json, snapshot arguments]
        self._blocks: dict[int, list[Any]] = {}

    def encode(self, event: AssistantMessageEvent) -> dict[str, Any] | None:
        if isinstance(event, StartEvent):
            self._started = True
            partial = wire.unstructure(event.partial)
            partial["content"] = []
            partial["stopReason"] = "pending"
            partial.pop("errorMessage", None)
            return {"type": "start", "partial": partial}
        if isinstance(event, (DoneEvent, ErrorEvent)) or not self._started:
            return None
        kind, index = event.type, event.content_index
        if isinstance(event, (TextStartEvent, ThinkingStartEvent)):
            block = _block(event.partial, index)
            text = block["text" if kind == "text_start" else "thinking"]
            self._blocks[index] = [kind[:-6], len(text), 0]
            return {"type": kind, "contentIndex": index, "content": block}
        if isinstance(event, (TextDeltaEvent, ThinkingDeltaEvent)):
            state = self._blocks.get(index)
            if state is None:
                return None
            delta, start = event.delta, state[2]
            state[2] += len(delta)
            covered = max(0, state[1] - start)
            if covered >= len(delta):
                return None
            return {"type": kind, "contentIndex": index, "delta": delta[covered:]}
        if isinstance(event, (TextEndEvent, ThinkingEndEvent)):
            self._blocks.pop(index, None)
            block = _block(event.partial, index)
            names = ("textSignature",) if kind == "text_end" else ("thinkingSignature", "redacted")
            frame = {"type": kind, "contentIndex": index, "content": event.content}
            return frame | _optional(block, *names)
        if isinstance(event, ToolCallStartEvent):
            block = _block(event.partial, index)
            snapshot = _dumps(block.get("arguments", {}))
            caught_up = snapshot == _EMPTY_ARGUMENTS
            self._blocks[index] = ["toolCall", caught_up, "", "" if caught_up else snapshot]
            return {"type": kind, "contentIndex": index, "toolCall": block}
        if isinstance(event, ToolCallDeltaEvent):
            return self._tool_delta(index, event.delta)
        self._blocks.pop(index, None)
        call = wire.unstructure(event.tool_call)
        frame = {
            "type": kind,
            "contentIndex": index,
            "id": call["id"],
            "name": call["name"],
            "arguments": call.get("arguments", {}),
        }
        return frame | _optional(call, "thoughtSignature", "namespace")

    def _tool_delta(self, index: int, delta: str) -> dict[str, Any] | None:
        state = self._blocks.get(index)
        if state is None:
            return None
        if state[1]:
            return (
                {"type": "toolcall_delta", "contentIndex": index, "delta": delta} if delta else None
            )
        # The start held arguments already (a legacy grammar call): catch up first.
        state[2] += delta
        arguments = parse_streaming_json(state[2])
        if _dumps(arguments) != state[3] and not _is_prefix(
            parse_streaming_json(state[3]), arguments
        ):
            return None
        state[1], state[3] = True, ""
        text, state[2] = state[2], ""
        return (
            {"type": "toolcall_checkpoint", "contentIndex": index, "json": text} if text else None
        )


def _is_prefix(snapshot: Any, current: Any) -> bool:
    """Pi's ``isJsonPrefix``."""
    if isinstance(snapshot, str):
        return isinstance(current, str) and current.startswith(snapshot)
    if isinstance(snapshot, list):
        return (
            isinstance(current, list)
            and len(snapshot) <= len(current)
            and all(_is_prefix(v, current[i]) for i, v in enumerate(snapshot))
        )
    if not isinstance(snapshot, dict):
        return bool(snapshot == current and type(snapshot) is type(current))
    return isinstance(current, dict) and all(
        key in current and _is_prefix(value, current[key]) for key, value in snapshot.items()
    )


def reduce_frames(frames: Iterable[Any]) -> dict[str, Any] | None:
    """The partial answer the frames make (Pi's ``reduceAssistantMessageFrames``), as
    Pi's JSON; ``None`` without a start frame. Frames that do not fit (a block started
    twice, a delta before its start) end the replay there: what came before stands."""
    message: dict[str, Any] | None = None
    json_of: dict[int, str] = {}
    ended: set[int] = set()
    for frame in frames:
        if not isinstance(frame, Mapping):
            break
        kind = frame.get("type")
        if kind == "start":
            if message is not None:
                break
            message = copy.deepcopy(dict(frame["partial"]))
            message["content"] = list(message.get("content") or [])
            continue
        if message is None:
            continue
        content = message["content"]
        index = frame.get("contentIndex")
        if kind in ("text_start", "thinking_start", "toolcall_start"):
            if index != len(content):
                break
            content.append(
                copy.deepcopy(dict(frame["toolCall" if kind == "toolcall_start" else "content"]))
            )
            continue
        if not isinstance(index, int) or not 0 <= index < len(content) or index in ended:
            break
        block = content[index]
        if kind in ("text_delta", "thinking_delta"):
            field = "text" if kind == "text_delta" else "thinking"
            if field not in block:
                break
            block[field] += frame["delta"]
        elif kind in ("text_end", "thinking_end"):
            field = "text" if kind == "text_end" else "thinking"
            if field not in block:
                break
            block[field] = frame["content"]
            names = ("textSignature",) if kind == "text_end" else ("thinkingSignature", "redacted")
            for name in names:
                block.pop(name, None)
                if frame.get(name) is not None:
                    block[name] = frame[name]
            ended.add(index)
        elif kind == "toolcall_checkpoint":
            json_of[index] = frame["json"]
            block["arguments"] = parse_streaming_json(frame["json"])
        elif kind == "toolcall_delta":
            json_of[index] = json_of.get(index, "") + frame["delta"]
        elif kind == "toolcall_end":
            block.update(
                id=frame["id"], name=frame["name"], arguments=copy.deepcopy(frame["arguments"])
            )
            for name in ("thoughtSignature", "namespace"):
                block.pop(name, None)
                if frame.get(name) is not None:
                    block[name] = frame[name]
            ended.add(index)
            json_of.pop(index, None)
    if message is None:
        return None
    for index, text in json_of.items():
        if index not in ended and text:
            message["content"][index]["arguments"] = parse_streaming_json(text)
    return message


_DELTAS: Final = frozenset(("text_delta", "thinking_delta", "toolcall_delta"))


def merge_deltas(frames: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """``frames`` with each run of deltas to one block (same type and content index) as
    one delta of their text joined: what :func:`reduce_frames` makes of them is the
    same, and a fast stream's write holds a frame per block, not one per token (Pi
    writes a frame per event; docs/deviations.md)."""
    merged: list[dict[str, Any]] = []
    last: dict[str, Any] | None = None
    for frame in frames:
        kind = frame["type"]
        if (
            last is not None
            and kind in _DELTAS
            and last["type"] == kind
            and last["contentIndex"] == frame["contentIndex"]
        ):
            last["delta"] += frame["delta"]
            continue
        merged.append(frame)
        last = frame if kind in _DELTAS else None
    return merged


def committed_partial(session: Session, key: str) -> dict[str, Any] | None:
    """The partial answer a request's committed frames make (Pi's JSON), or ``None``."""
    elements = session._state.lists.get((PENDING_FRAMES, key), [])
    try:
        return reduce_frames(value for _, value in sorted(elements, key=lambda e: e[0]))
    except (KeyError, TypeError, AttributeError):  # a frame without its fields
        return None


class FramedStream(EventStream[AssistantMessageEvent, AssistantMessage]):
    """A provider's stream, its events unchanged, with each one's frame written to the
    session: one write in flight, the events that came meanwhile encoded and written
    in the next, at most one write every :data:`FRAME_INTERVAL` seconds. The writes run
    in the nursery the request's stream runs in; before the terminal event is handed
    on, the write in flight ends and no other starts (what was not written is dropped
    unencoded: a stream that never yields, a scripted one, costs no encoding)."""

    __slots__ = (
        "_encoder",
        "_flushed",
        "_inner",
        "_key",
        "_nursery",
        "_pause",
        "_pending",
        "_session",
    )

    def __init__(
        self,
        inner: EventStream[AssistantMessageEvent, AssistantMessage],
        session: Session,
        key: str,
    ) -> None:
        super().__init__(_never, _no_result)
        self._inner = inner
        self._session = session
        self._key = key
        self._encoder = FrameEncoder()
        self._pending: list[AssistantMessageEvent] | None = []
        self._nursery: trio.Nursery | None = None
        self._flushed: trio.Event | None = None
        self._pause: trio.CancelScope | None = None

    @property
    def has_producer(self) -> bool:
        """Always: the frame writes need the request's nursery."""
        return True

    def start_producer(self, nursery: trio.Nursery) -> None:
        """Start the provider's producer (if any) in ``nursery``; the writes go there."""
        self._nursery = nursery
        self._inner.start_producer(nursery)

    def cancel(self) -> None:
        """Cancel the provider's producer."""
        self._inner.cancel()

    def result_nowait(self) -> AssistantMessage:
        """The provider stream's result."""
        return self._inner.result_nowait()

    async def result(self) -> AssistantMessage:
        """The provider stream's result, once it has completed."""
        return await self._inner.result()

    def __aiter__(self) -> AsyncIterator[AssistantMessageEvent]:
        return self

    async def __anext__(self) -> AssistantMessageEvent:
        event = await self._inner.__anext__()
        if type(event) is DoneEvent or type(event) is ErrorEvent:
            await self._seal()
            return event
        pending = self._pending
        if pending is not None:
            pending.append(event)
            if self._flushed is None and self._nursery is not None:
                self._flushed = trio.Event()
                self._nursery.start_soon(self._flush, self._flushed)
        return event

    async def _flush(self, done: trio.Event) -> None:
        encode, key = self._encoder.encode, self._key
        try:
            while self._pending:
                started = trio.current_time()
                events, self._pending = self._pending, []
                frames = merge_deltas(f for f in map(encode, events) if f is not None)
                writes = [[_append(key, frame)] for frame in frames]
                if writes:
                    await self._session._record(writes)
                with trio.CancelScope(deadline=started + FRAME_INTERVAL) as self._pause:
                    if self._pending is not None:
                        await trio.sleep_forever()
                self._pause = None
        finally:
            self._flushed = None
            done.set()

    async def _seal(self) -> None:
        """No more writes; the one in flight ends first."""
        self._pending = None
        if self._pause is not None:
            self._pause.cancel()
        flushed = self._flushed
        if flushed is not None:
            await flushed.wait()


def _never(event: AssistantMessageEvent) -> bool:
    return False


def _no_result(event: AssistantMessageEvent) -> AssistantMessage:  # pragma: no cover
    raise AssertionError(event)
