"""What the pages get, below the socket: the outbox that batches broadcasts, the JSON text
of a delta, and the WebSocket frames written directly (the same bytes for every page)."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given, settings, strategies as st

from pitrio.ui import Append, AppendDelta, Replace, Status, Transcript, UiMessage
from pitrio.ui._protocol import new_delta
from pitrio.web._http import Client, text_frame
from pitrio.web._pages import FRAME_SECONDS, Broadcaster, message_text

wsproto = pytest.importorskip("wsproto")
from wsproto.frame_protocol import FrameProtocol, Opcode  # noqa: E402


def read_frames(data: bytes) -> list[str]:
    """The text messages in ``data`` as a WebSocket client reads them (wsproto)."""
    protocol = FrameProtocol(client=True, extensions=[])
    protocol.receive_bytes(data)
    texts: list[str] = []
    for frame in protocol.received_frames():
        assert frame.opcode is Opcode.TEXT
        assert frame.frame_finished
        assert frame.message_finished
        texts.append(str(frame.payload))
    return texts


@pytest.mark.parametrize("size", [0, 1, 125, 126, 65535, 65536, 200_000])
def test_a_text_frame_is_what_a_client_reads(size: int) -> None:
    """Every length form of RFC 6455 (7-bit, 16-bit, 64-bit) reads back as the text."""
    text = ("é" * size)[: max(size // 2, 0)] + "x" * (size - max(size // 2, 0))
    frame = text_frame(text)
    assert read_frames(frame) == [text]
    assert read_frames(frame + text_frame("next")) == [text, "next"]


@settings(deadline=None, max_examples=200)
@given(
    item=st.text(min_size=1, max_size=8),
    delta=st.text(),
    channel=st.sampled_from(["text", "thinking"]),
)
def test_a_deltas_text_is_jsons(item: str, delta: str, channel: Any) -> None:
    """The direct ``appendDelta`` text is exactly ``json.dumps(..., ensure_ascii=False)``:
    quotes, backslashes, control and non-ASCII characters included."""
    message = AppendDelta(id=item, delta=delta, channel=channel)
    assert message_text(message) == json.dumps(message.to_json(), ensure_ascii=False)
    assert json.loads(message_text(message)) == message.to_json()


@settings(deadline=None, max_examples=100)
@given(item=st.text(), delta=st.text(), channel=st.sampled_from(["text", "thinking"]))
def test_a_delta_built_by_its_slots_is_the_attrs_one(item: str, delta: str, channel: Any) -> None:
    """``new_delta`` (the adapter's fast path) makes the value attrs' ``__init__`` makes:
    equal, same hash and repr, still frozen."""
    fast = new_delta(item, delta, channel)
    made = AppendDelta(id=item, delta=delta, channel=channel)
    assert fast == made
    assert hash(fast) == hash(made)
    assert repr(fast) == repr(made)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        fast.delta = "x"  # type: ignore[misc]  # frozen: the point of the check


@pytest.mark.parametrize(
    "message",
    [
        Append(id="i1", kind="tool", title='bash "x"', working=True),
        Replace(id="i1", text="done\n", summary="ok · 1 line", diff="-a\n+b"),
        Status(working=False),
    ],
)
def test_other_messages_text_is_jsons(message: UiMessage) -> None:
    """Every other message goes through the one JSON encoder, with the same result."""
    assert message_text(message) == json.dumps(message.to_json(), ensure_ascii=False)


class _Pages(Broadcaster):
    def __init__(self, nursery: trio.Nursery | None) -> None:
        super().__init__()
        self.view = Transcript()
        self.nursery = nursery

    def connect(self, size: int = 1000) -> trio.MemoryReceiveChannel[bytes]:
        send, receive = trio.open_memory_channel[bytes](size)
        self.flush()
        self.clients.add(Client(send))
        return receive


def _received(receive: trio.MemoryReceiveChannel[bytes]) -> list[Any]:
    """The messages a page got so far (a batch's opened), in order."""
    out: list[Any] = []
    while True:
        try:
            frame = receive.receive_nowait()
        except (trio.WouldBlock, trio.EndOfChannel):  # nothing yet; a dropped page's end
            return out
        for text in read_frames(frame):
            data = json.loads(text)
            out.extend(data if isinstance(data, list) else [data])


def _delta(n: int) -> AppendDelta:
    return AppendDelta(id="i1", delta=f"w{n} ")


async def test_a_burst_goes_to_every_page_as_one_frame(autojump_clock: trio.abc.Clock) -> None:
    """The first message goes at once; what follows within FRAME_SECONDS waits and goes as
    one array, the same bytes object for every page, and the view has it all already."""
    async with trio.open_nursery() as nursery:
        pages = _Pages(nursery)
        pages.publish([Append(id="i1", kind="assistant", working=True)])
        first, second = pages.connect(), pages.connect()
        await trio.sleep(1)
        pages.publish([_delta(0)])  # after a quiet interval: at once
        assert [m["delta"] for m in _received(first)] == ["w0 "]
        assert _received(second) == [_delta(0).to_json()]
        pages.publish([_delta(1), _delta(2)])
        pages.broadcast({"type": "queued", "mode": "steer", "text": "x"})
        assert _received(first) == []  # waiting in the outbox
        await trio.sleep(FRAME_SECONDS * 2)
        frames = [first.receive_nowait(), second.receive_nowait()]
        assert frames[0] is frames[1]
        batch = json.loads(read_frames(frames[0])[0])
        assert batch == [
            _delta(1).to_json(),
            _delta(2).to_json(),
            {"type": "queued", "mode": "steer", "text": "x"},
        ]
        snapshot = pages.view.snapshot()
        assert isinstance(snapshot[1], Replace)
        assert snapshot[1].text == "w0 w1 w2 "


async def test_a_message_to_one_page_comes_after_what_was_broadcast(
    autojump_clock: trio.abc.Clock,
) -> None:
    """send() flushes the outbox first, and a page connecting gets the outbox's messages
    only in its snapshot, never twice."""
    async with trio.open_nursery() as nursery:
        pages = _Pages(nursery)
        pages.publish([Append(id="i1", kind="assistant", working=True)])
        page = pages.connect()
        pages.publish([_delta(0), _delta(1)])  # the second waits
        pages.send(next(iter(pages.clients)), json.dumps({"type": "output", "text": "hi"}))
        assert _received(page) == [
            _delta(0).to_json(),
            _delta(1).to_json(),
            {"type": "output", "text": "hi"},
        ]
        pages.publish([_delta(2)])
        pages.publish([_delta(3)])  # waits in the outbox
        late = pages.connect()  # flushes it to `page` first
        assert [m["delta"] for m in _received(page)] == ["w2 ", "w3 "]
        assert _received(late) == []
        await trio.sleep(1)
        assert _received(page) == []
        assert _received(late) == []


async def test_a_page_that_stops_reading_is_dropped() -> None:
    """A full queue drops the page (it reconnects and gets a snapshot); the others go on."""
    pages = _Pages(None)  # no nursery: every message goes at once
    pages.view.apply(Append(id="i1", kind="assistant", working=True))
    slow = pages.connect(size=1)
    fast = pages.connect()
    pages.publish([_delta(0)])
    pages.publish([_delta(1)])
    assert len(pages.clients) == 1
    assert [m["delta"] for m in _received(fast)] == ["w0 ", "w1 "]
    assert [m["delta"] for m in _received(slow)] == ["w0 "]
