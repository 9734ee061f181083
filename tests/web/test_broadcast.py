"""What the pages get, below the socket: the outbox that batches broadcasts, the JSON text
of a delta, and the WebSocket frames written directly (the same bytes for every page)."""

from __future__ import annotations

import contextlib
import functools
import json
import socket
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given, settings, strategies as st

import pitrio.web._http as http_module
import pitrio.web._pages as pages_module
from pitrio.ui import Append, AppendDelta, Replace, Status, Transcript, UiMessage
from pitrio.ui._protocol import new_delta
from pitrio.web._http import BEHIND_BYTES, Client, Gate, handle_connection, text_frame
from pitrio.web._pages import (
    FRAME_SECONDS,
    MAX_FRAME_SECONDS,
    SEND_SHARE,
    Broadcaster,
    delta_text,
    message_text,
)

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


class _Page:
    """A page at the other end of a socket pair: what its :class:`Client` wrote, read
    as a WebSocket client reads it."""

    def __init__(self, size: int = 1 << 20) -> None:
        mine, self.peer = socket.socketpair()
        for end in (mine, self.peer):
            end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)
            end.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)
        self.peer.setblocking(False)
        self.stream = trio.SocketStream(trio.socket.from_stdlib_socket(mine))
        self.client = Client(self.stream)
        self.protocol = FrameProtocol(client=True, extensions=[])
        self.bytes = b""  # everything read so far

    def read(self) -> bytes:
        """What the socket holds now."""
        data = b""
        with contextlib.suppress(BlockingIOError):
            while chunk := self.peer.recv(1 << 20):
                data += chunk
        self.bytes += data
        return data

    def received(self) -> list[Any]:
        """The messages that came since the last call (a batch's opened), in order."""
        self.protocol.receive_bytes(self.read())
        out: list[Any] = []
        for frame in self.protocol.received_frames():
            assert frame.opcode is Opcode.TEXT
            data = json.loads(str(frame.payload))
            out.extend(data if isinstance(data, list) else [data])
        return out

    def close(self) -> None:
        self.client.close()
        self.stream.socket.close()
        self.peer.close()


class _Pages(Broadcaster):
    def __init__(self, nursery: trio.Nursery | None) -> None:
        super().__init__()
        self.view = Transcript()
        self.nursery = nursery
        self.pages: list[_Page] = []

    def connect(self, size: int = 1 << 20) -> _Page:
        page = _Page(size)
        self.pages.append(page)
        self.flush()
        self.clients.add(page.client)
        return page

    def close(self) -> None:
        for page in self.pages:
            page.close()


@pytest.fixture
def no_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Writing a batch takes no time (the batches' interval stays FRAME_SECONDS)."""
    monkeypatch.setattr(pages_module, "_clock", lambda: 0.0)


def _delta(n: int, item: str = "i1") -> AppendDelta:
    return AppendDelta(id=item, delta=f"w{n} ")


async def test_a_burst_goes_to_every_page_as_one_frame(
    autojump_clock: trio.abc.Clock, no_clock: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first message goes at once; what follows within FRAME_SECONDS waits and goes as
    one array, one frame made once for every page, and the view has it all already.
    Deltas in a row to one item and channel go as one."""
    made: list[str] = []

    def counted(text: str) -> bytes:
        made.append(text)
        return text_frame(text)

    monkeypatch.setattr(pages_module, "text_frame", counted)
    async with trio.open_nursery() as nursery:
        pages = _Pages(nursery)
        pages.publish([Append(id="i1", kind="assistant", working=True)])
        first, second = pages.connect(), pages.connect()
        await trio.sleep(1)
        pages.publish([_delta(0)])  # after a quiet interval: at once
        assert [m["delta"] for m in first.received()] == ["w0 "]
        assert second.received() == [_delta(0).to_json()]
        made.clear()
        pages.publish([_delta(1), _delta(2)])
        pages.publish([AppendDelta(id="i1", delta="t", channel="thinking"), _delta(3)])
        pages.broadcast({"type": "queued", "mode": "steer", "text": "x"})
        pages.publish([_delta(4)])
        assert first.received() == []  # waiting in the outbox
        await trio.sleep(FRAME_SECONDS * 2)
        assert len(made) == 1  # one frame for both pages
        batch = first.received()
        assert batch == [
            AppendDelta(id="i1", delta="w1 w2 ").to_json(),
            AppendDelta(id="i1", delta="t", channel="thinking").to_json(),
            _delta(3).to_json(),
            {"type": "queued", "mode": "steer", "text": "x"},
            _delta(4).to_json(),
        ]
        assert second.received() == batch
        assert second.bytes == first.bytes
        snapshot = pages.view.snapshot()
        assert isinstance(snapshot[1], Replace)
        assert snapshot[1].text == "w0 w1 w2 w3 w4 "
        pages.close()


async def test_a_message_to_one_page_comes_after_what_was_broadcast(
    autojump_clock: trio.abc.Clock, no_clock: None
) -> None:
    """send() flushes the outbox first, and a page connecting gets the outbox's messages
    only in its snapshot, never twice."""
    async with trio.open_nursery() as nursery:
        pages = _Pages(nursery)
        pages.publish([Append(id="i1", kind="assistant", working=True)])
        page = pages.connect()
        pages.publish([_delta(0), _delta(1)])  # within FRAME_SECONDS of the append: wait
        pages.send(page.client, json.dumps({"type": "output", "text": "hi"}))
        assert page.received() == [
            AppendDelta(id="i1", delta="w0 w1 ").to_json(),
            {"type": "output", "text": "hi"},
        ]
        pages.publish([_delta(2)])
        pages.publish([_delta(3)])  # waits in the outbox
        late = pages.connect()  # flushes it to `page` first
        assert [m["delta"] for m in page.received()] == ["w2 w3 "]
        assert late.received() == []
        await trio.sleep(1)
        assert page.received() == []
        assert late.received() == []
        pages.close()


def _frames_end(data: bytes) -> int:
    """Where the last whole frame in ``data`` ends (server frames: not masked)."""
    at = 0
    while at + 2 <= len(data):
        size, head = data[at + 1] & 0x7F, 2
        if size == 126:
            size, head = int.from_bytes(data[at + 2 : at + 4], "big"), 4
        elif size == 127:
            size, head = int.from_bytes(data[at + 2 : at + 10], "big"), 10
        if at + head + size > len(data):
            break
        at += head + size
    return at


async def _read_until_closed(page: _Page, scope: trio.CancelScope) -> None:
    while not scope.cancel_called:
        with trio.move_on_after(0.05):
            await trio.lowlevel.wait_readable(page.peer)
        page.read()


@pytest.mark.parametrize("checkpoints", [False, True])
async def test_a_page_that_stops_reading_is_dropped(checkpoints: bool) -> None:
    """A page whose socket takes nothing more gets frames waiting, up to BEHIND_BYTES;
    then it is dropped with a close reason (it reconnects and gets a snapshot), what waits
    is let go (memory stays bounded), the frame begun is finished, and the others go on."""
    big = "x" * 100_000
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            pages = _Pages(None)  # no nursery: every message goes at once
            slow = pages.connect(size=4096)
            fast = pages.connect()
            slow_scope = trio.CancelScope()
            nursery.start_soon(slow.client.run, slow_scope)
            nursery.start_soon(fast.client.run, trio.CancelScope())
            sent = 0
            while slow.client in pages.clients:
                assert sent < BEHIND_BYTES // len(big) + 100
                pages.broadcast({"type": "output", "text": big, "n": sent})
                sent += 1
                assert slow.client.waiting <= BEHIND_BYTES + len(big) + 100
                got = fast.received()
                while len(got) < 1:  # the fast page reads everything as it comes
                    await trio.lowlevel.wait_readable(fast.peer)
                    got += fast.received()
                assert [m["n"] for m in got] == [sent - 1]
                if checkpoints:  # the writers run between two broadcasts
                    await trio.lowlevel.checkpoint()
            assert sent > BEHIND_BYTES // len(big)  # it held a backlog first
            assert slow.client.closed
            assert slow.client.close_reason is not None
            code, reason = slow.client.close_reason
            assert code == 1008
            assert "fell too far behind" in reason
            assert len(reason.encode()) <= 123  # what a close frame holds
            assert slow.client.waiting < len(big) + 100  # at most the rest of one frame
            pages.broadcast({"type": "output", "text": "after", "n": sent})
            assert [m["n"] for m in fast.received()] == [sent]
            await _read_until_closed(slow, slow_scope)  # its writer ends: the page is closed
            ends = _frames_end(slow.bytes)
            assert ends == len(slow.bytes)  # whole frames only: a close frame may follow
            read = read_frames(slow.bytes)
            assert 0 < len(read) < sent
            assert [json.loads(t)["n"] for t in read] == list(range(len(read)))
            nursery.cancel_scope.cancel()  # the fast page's writer, as its page leaving
        pages.close()


async def test_frames_waiting_go_in_one_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """Frames written while a page's socket is full wait and then go out together, in
    order, in one write (not a write each)."""
    writes: list[int] = []
    original = trio.SocketStream.send_all

    async def counted(self: trio.SocketStream, data: Any) -> None:
        writes.append(len(data))
        await original(self, data)

    monkeypatch.setattr(trio.SocketStream, "send_all", counted)
    page = _Page(4096)
    frames = [text_frame(json.dumps({"n": n, "pad": "y" * 3000})) for n in range(20)]
    for frame in frames:
        page.client.write(frame)
    assert page.client.waiting > 0  # the socket took the first ones only
    assert writes == []  # and nothing waited for a task yet
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(page.client.run, trio.CancelScope())
            while len(page.bytes) < sum(map(len, frames)):
                await trio.lowlevel.wait_readable(page.peer)
                page.read()
            nursery.cancel_scope.cancel()
    assert page.bytes == b"".join(frames)
    assert len(writes) == 1
    page.close()


async def test_the_interval_grows_with_the_time_a_batch_takes(
    autojump_clock: trio.abc.Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a batch that took t seconds to write, the next waits t / SEND_SHARE (at
    least FRAME_SECONDS, at most MAX_FRAME_SECONDS)."""
    took = [0.004]
    readings: list[float] = []

    def timed() -> float:  # each batch reads it twice: before and after writing
        readings.append(0.0 if len(readings) % 2 == 0 else took[0])
        return readings[-1]

    monkeypatch.setattr(pages_module, "_clock", timed)
    async with trio.open_nursery() as nursery:
        pages = _Pages(nursery)
        page = pages.connect()
        gap = took[0] / SEND_SHARE
        assert gap > FRAME_SECONDS * 2
        pages.broadcast({"type": "n", "n": 0})  # at once
        pages.broadcast({"type": "n", "n": 1})  # waits for the gap
        assert [m["n"] for m in page.received()] == [0]
        await trio.sleep(gap - FRAME_SECONDS)
        assert page.received() == []
        await trio.sleep(FRAME_SECONDS * 2)
        assert [m["n"] for m in page.received()] == [1]
        took[0] = 1000.0  # a very slow batch: the next waits MAX_FRAME_SECONDS
        await trio.sleep(gap * 2)
        pages.broadcast({"type": "n", "n": 2})  # at once, and took long
        pages.broadcast({"type": "n", "n": 3})
        assert [m["n"] for m in page.received()] == [2]
        await trio.sleep(MAX_FRAME_SECONDS - FRAME_SECONDS)
        assert page.received() == []
        await trio.sleep(FRAME_SECONDS * 2)
        assert [m["n"] for m in page.received()] == [3]
        pages.close()


def test_merged_deltas_are_the_deltas_json() -> None:
    """The merged delta's text is the one of the AppendDelta with the joined text."""
    assert delta_text('a"1', "x\ny", "thinking") == message_text(
        AppendDelta(id='a"1', delta="x\ny", channel="thinking")
    )


class _Server(Broadcaster):
    """The transport's pages (:class:`pitrio.web._http.Pages`) over a Broadcaster."""

    def __init__(self, pages: int) -> None:
        super().__init__()
        self.view = Transcript()
        self.pages = pages
        self.connected = trio.Event()

    def connect(self, client: Client) -> None:
        self.flush()
        self.clients.add(client)
        if len(self.clients) == self.pages:
            self.connected.set()

    def disconnect(self, client: Client) -> None:
        self.clients.discard(client)

    async def receive(self, client: Client, raw: str | bytes) -> None:
        self.send(client, json.dumps({"type": "output", "text": str(raw)}))


async def test_a_stuck_page_is_closed_with_a_reason_and_the_others_go_on() -> None:
    """Over the real transport: a page that stops reading gets the frames begun, then a
    close frame with code 1008 and the reason; a page reading along gets everything, and
    its pongs and replies keep their place after the frames sent before them."""
    import trio_websocket

    big = "z" * 1_000_000
    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
            port = listeners[0].socket.getsockname()[1]
            server = _Server(2)  # no nursery: every broadcast goes at once
            handler = functools.partial(handle_connection, gate=Gate("t", port), pages=server)
            nursery.start_soon(trio.serve_listeners, handler, listeners)
            url = f"ws://127.0.0.1:{port}/ws?token=t"
            origin = [(b"Origin", f"http://127.0.0.1:{port}".encode())]
            async with (
                trio_websocket.open_websocket_url(
                    url, extra_headers=origin, max_message_size=1 << 24
                ) as stuck,
                trio_websocket.open_websocket_url(
                    url, extra_headers=origin, max_message_size=1 << 24
                ) as live,
            ):
                await server.connected.wait()
                sent = 0
                while len(server.clients) == 2:
                    assert sent < 200
                    server.broadcast({"type": "output", "text": big, "n": sent})
                    sent += 1
                    assert json.loads(await live.get_message())["n"] == sent - 1
                    await trio.lowlevel.checkpoint()
                await live.ping(b"p")  # its pong comes after the frames sent before it
                await live.send_message("hi")
                assert json.loads(await live.get_message()) == {"type": "output", "text": "hi"}
                server.broadcast({"type": "output", "text": "after", "n": sent})
                assert json.loads(await live.get_message())["n"] == sent
                got: list[int] = []
                reason: Any = None
                try:
                    while True:
                        got.append(json.loads(await stuck.get_message())["n"])
                except trio_websocket.ConnectionClosed as exc:
                    reason = exc.reason
                assert got == list(range(len(got)))
                assert len(got) < sent
                assert reason.code == 1008
                assert "fell too far behind" in reason.reason
                # trio-websocket's client keeps its socket after the server's close (its
                # aclose returns early once closed): close it here.
                await stuck._stream.aclose()
            nursery.cancel_scope.cancel()


async def test_a_page_gone_is_dropped_at_the_next_write() -> None:
    """A page whose socket is gone (a reset, a closed tab) is closed by the first write
    that finds it so, and the broadcast drops it; nothing is raised."""
    pages = _Pages(None)
    gone, kept = pages.connect(), pages.connect()
    gone.peer.close()
    pages.broadcast({"type": "output", "text": "x" * 10_000})
    assert gone.client.closed
    assert gone.client.close_reason is None  # nothing to say to a page that is gone
    assert pages.clients == {kept.client}
    assert [m["text"] for m in kept.received()] == ["x" * 10_000]
    gone.client.write(b"late")  # nothing, and nothing raised
    assert gone.client.waiting == 0
    gone.client.close()
    gone.stream.socket.close()
    kept.close()


async def test_a_write_stuck_when_its_page_is_dropped_is_cut_short(
    autojump_clock: trio.abc.Clock,
) -> None:
    """A dropped page's write under way gets a moment (the linger time) to end; a page that
    never reads again has it cut, and then nothing may follow on its socket."""
    big = "x" * 100_000
    pages = _Pages(None)
    slow = pages.connect(size=4096)
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            ended = trio.Event()

            async def write() -> None:
                await slow.client.run(trio.CancelScope())
                ended.set()

            nursery.start_soon(write)
            pages.broadcast({"type": "output", "text": big})
            await trio.sleep(0.1)  # its writer is under way, and stays (nothing reads)
            while slow.client in pages.clients:
                pages.broadcast({"type": "output", "text": big})
            dropped = trio.current_time()
            await ended.wait()
            assert trio.current_time() - dropped >= http_module._DROP_SECONDS
            with pytest.raises(trio.BrokenResourceError):
                await slow.client.send_all(b"a close frame")
    pages.close()


async def test_a_writer_ends_when_its_page_goes_or_leaves() -> None:
    """A page that goes while frames wait ends its writer (closed, nothing raised); one
    that leaves (its connection cancelled) during a write is left torn: nothing follows."""
    big = text_frame("x" * 100_000)
    with trio.fail_after(30):
        gone, left = _Page(4096), _Page(4096)
        async with trio.open_nursery() as nursery:
            ended = trio.Event()

            async def write() -> None:
                await gone.client.run(trio.CancelScope())
                ended.set()

            for page in (gone, left):
                page.client.write(big)  # most of it waits: a write under way
            nursery.start_soon(write)
            nursery.start_soon(left.client.run, trio.CancelScope())
            await trio.testing.wait_all_tasks_blocked()
            gone.peer.close()
            await ended.wait()
            assert gone.client.closed
            nursery.cancel_scope.cancel()  # `left` leaves
        with pytest.raises(trio.BrokenResourceError):
            await left.client.send_all(b"a close frame")
    gone.client.close()
    gone.stream.socket.close()
    left.close()
