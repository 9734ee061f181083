"""Harness events fanned out over Redis Streams, for other processes to follow.

:func:`open_event_publisher` gives an :class:`EventPublisher`, a harness listener
(:meth:`~pitrio.harness.Harness.subscribe`) that appends every event to one Redis stream
(``XADD ... MAXLEN ~ n``: the stream keeps about the last ``maxlen`` events, however long
the run). Each entry has one field, ``event``: the event as one JSON object in Pi's wire
form, what ``python -m pitrio --mode json`` writes for it (camelCase, with ``type``).

:func:`follow` reads a stream from its start (or after an entry id) and then waits for
new entries: a reader that starts late replays what the stream still holds, then follows
live.

redis-py's client is synchronous here (its asyncio client runs on asyncio, not Trio):
each command runs in a worker thread (:func:`trio.to_thread.run_sync`). The listener
itself does not wait for Redis: it queues the event and a task of the publisher's
nursery sends queued events in batches (one pipeline per batch), so a run is not slowed
by the network; when the queue is full the listener waits (the run is held back rather
than events dropped).
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, final

import attrs
import trio

from pitrio import UsageError, wire

from ._errors import WorkerError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    import redis

    from pitrio.harness import HarnessEvent

__all__ = [
    "DEFAULT_MAXLEN",
    "EventPublisher",
    "Follower",
    "StreamedEvent",
    "control_for",
    "event_to_wire",
    "follow",
    "open_event_publisher",
    "read_stream",
    "send_abort",
    "stream_for",
]

DEFAULT_MAXLEN = 10_000
"""Events a stream keeps (about: Redis trims whole blocks, ``MAXLEN ~``)."""

_BATCH = 256


def stream_for(session_id: str) -> str:
    """The Redis stream of a session's events: ``pitrio:session:<id>:events``."""
    return f"pitrio:session:{session_id}:events"


def control_for(session_id: str) -> str:
    """The Redis stream of commands to a session's running job (an abort from a page):
    ``pitrio:session:<id>:control``."""
    return f"pitrio:session:{session_id}:control"


def event_to_wire(event: Any) -> dict[str, Any]:
    """An agent or harness event as one JSON object in Pi's wire form (camelCase), as
    the command line's json mode writes it."""
    data: dict[str, Any] = wire.unstructure(event)
    event_type = getattr(event, "type", None)
    if isinstance(event_type, str) and "type" not in data:
        data = {"type": event_type, **data}
    return data


def _redis_client(redis_url: str) -> redis.Redis:
    try:
        import redis
    except ImportError:
        msg = (
            "pitrio.worker needs the redis package, which is not installed: "
            "pip install 'pitrio[worker]'"
        )
        raise UsageError(msg) from None
    try:
        return redis.Redis.from_url(redis_url)
    except ValueError as exc:
        msg = f"not a Redis URL (redis://host:port/db): {redis_url!r}: {exc}"
        raise UsageError(msg) from None


def _failure(what: str, exc: Exception) -> WorkerError:
    return WorkerError(f"{what}: {type(exc).__name__}: {exc}")


@final
class EventPublisher:
    """A harness listener publishing each event to a Redis stream; made by
    :func:`open_event_publisher`, which owns the task that sends them.

    Attributes:
        stream: the stream's key.
        maxlen: about how many events the stream keeps.
        published: how many events reached Redis so far.
    """

    def __init__(
        self,
        client: Any,  # redis.Redis
        *,
        stream: str,
        maxlen: int,
        send: trio.MemorySendChannel[str],
    ) -> None:
        self._client = client
        self.stream = stream
        self.maxlen = maxlen
        self.published = 0
        self._send = send
        self.error: WorkerError | None = None

    def __repr__(self) -> str:
        return f"<EventPublisher stream={self.stream!r} published={self.published}>"

    def __call__(self, event: HarnessEvent) -> Awaitable[None] | None:
        """Queue ``event`` (the harness calls this); waits only when the queue is full."""
        return self.publish(event_to_wire(event))

    def publish(self, data: dict[str, Any]) -> Awaitable[None] | None:
        """Queue one JSON object of the application's own (a job's ``pitrio.job`` marker,
        say) as if it were an event; waits only when the queue is full."""
        text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
        try:
            self._send.send_nowait(text)
        except trio.WouldBlock:
            return self._send.send(text)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass
        return None

    def _xadd_sync(self, texts: list[str]) -> None:
        with self._client.pipeline(transaction=False) as pipe:
            for text in texts:
                pipe.xadd(self.stream, {"event": text}, maxlen=self.maxlen, approximate=True)
            pipe.execute()

    async def _pump(self, receive: trio.MemoryReceiveChannel[str]) -> None:
        async with receive:
            async for first in receive:
                batch = [first]
                while len(batch) < _BATCH:
                    try:
                        batch.append(receive.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                if self.error is not None:
                    continue  # Redis failed: drain the queue so that the run goes on
                try:
                    await trio.to_thread.run_sync(self._xadd_sync, batch)
                except Exception as exc:
                    self.error = _failure(f"publishing to Redis stream {self.stream!r}", exc)
                    continue
                self.published += len(batch)


@asynccontextmanager
async def open_event_publisher(
    redis_url: str,
    *,
    stream: str,
    maxlen: int = DEFAULT_MAXLEN,
    buffer: int = 4096,
) -> AsyncIterator[EventPublisher]:
    """An :class:`EventPublisher` to ``stream`` on the Redis server ``redis_url``
    (``redis://host:port/db``); subscribe it to a harness.

    On exit every queued event is sent first. If Redis failed meanwhile, the run was not
    disturbed (events were dropped from then on) and the exit raises :class:`WorkerError`
    saying why.
    """
    given: object = maxlen
    if not isinstance(given, int) or given < 1:
        msg = f"maxlen must be a positive int (events the stream keeps); got {maxlen!r}"
        raise UsageError(msg)
    if not stream:
        msg = "stream must be a Redis key, e.g. stream_for(session.id)"
        raise UsageError(msg)
    client = _redis_client(redis_url)
    send, receive = trio.open_memory_channel[str](buffer)
    publisher = EventPublisher(client, stream=stream, maxlen=maxlen, send=send)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(publisher._pump, receive)
            async with send:
                yield publisher
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(client.close)
    if publisher.error is not None:
        raise publisher.error


_CONTROL_MAXLEN = 1000


async def send_abort(redis_url: str, session_id: str, keys: Sequence[str]) -> None:
    """Ask the jobs of ``keys`` (idempotency keys of prompts in session ``session_id``) to
    abort their runs: one ``{"type": "abort", "keys": [...]}`` on the session's control
    stream (:func:`control_for`), which a running job watches; a job that has not
    started yet sees it when it starts. Raises :class:`WorkerError` when Redis fails."""
    text = json.dumps({"type": "abort", "keys": list(keys)})
    stream = control_for(session_id)
    await _once(
        redis_url,
        lambda client: client.xadd(
            stream, {"event": text}, maxlen=_CONTROL_MAXLEN, approximate=True
        ),
        f"sending an abort for session {session_id!r}",
    )


async def read_stream(redis_url: str, stream: str) -> list[StreamedEvent]:
    """Every event ``stream`` holds now, oldest first (``follow(..., after=...)`` the
    last one's id goes on from there). Raises :class:`WorkerError` when Redis fails."""
    entries = await _once(
        redis_url, lambda client: client.xrange(stream), f"reading Redis stream {stream!r}"
    )
    return [StreamedEvent(raw_id.decode(), json.loads(f[b"event"])) for raw_id, f in entries]


async def _once(redis_url: str, command: Callable[[Any], Any], what: str) -> Any:
    """One command on a client of its own (in a worker thread), closed after."""
    client = _redis_client(redis_url)
    try:
        return await trio.to_thread.run_sync(command, client)
    except Exception as exc:
        raise _failure(what, exc) from exc
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(client.close)


@final
@attrs.frozen
class StreamedEvent:
    """One event read from a stream: its entry ``id`` (to resume after it) and the event
    as Pi's wire JSON object (``data["type"]`` says which)."""

    id: str
    data: dict[str, Any]


def follow(
    redis_url: str,
    session_id: str | None = None,
    *,
    stream: str | None = None,
    after: str = "0",
    poll: float = 0.5,
) -> Follower:
    """The events of a session's stream (:func:`stream_for`), or of ``stream``: first
    those it holds after entry ``after`` (``"0"``: all of them), then each new one as it
    is published, as :class:`StreamedEvent`. Never ends by itself: stop iterating (on a
    ``settled`` event, say) or cancel it. Use it in ``async for``, or in ``async with``
    to close its connection as soon as the block ends::

        async with follow(url, session_id) as events:
            async for event in events:
                ...

    Each wait for new events lasts at most ``poll`` seconds (in a worker thread, which
    a cancellation waits for: Trio leaves no thread behind).
    """
    if stream is None:
        if session_id is None:
            msg = "follow() needs a session id or a stream"
            raise UsageError(msg)
        stream = stream_for(session_id)
    seconds: object = poll
    if not (isinstance(seconds, int | float) and math.isfinite(seconds) and seconds > 0):
        msg = f"poll must be a positive number of seconds; got {poll!r}"
        raise UsageError(msg)
    return Follower(_redis_client(redis_url), stream, after, max(1, round(poll * 1000)))


@final
class Follower:
    """What :func:`follow` returns: an async iterator of :class:`StreamedEvent`, and an
    async context manager that closes its Redis connection on exit.

    Attributes:
        stream: the stream's key.
        last_id: the id of the last event read (``after`` before the first).
    """

    def __init__(self, client: Any, stream: str, after: str, block_ms: int) -> None:  # redis.Redis
        self._client = client
        self.stream = stream
        self.last_id = after
        self._block = block_ms
        self._pending: list[StreamedEvent] = []

    def __repr__(self) -> str:
        return f"<Follower stream={self.stream!r} last_id={self.last_id!r}>"

    def __aiter__(self) -> Follower:
        return self

    async def __anext__(self) -> StreamedEvent:
        if self._pending:
            await trio.lowlevel.checkpoint()
        while not self._pending:
            try:
                reply: Any = await trio.to_thread.run_sync(self._read_sync)
            except Exception as exc:
                msg = f"reading Redis stream {self.stream!r}"
                raise _failure(msg, exc) from exc
            for _key, entries in reply or ():
                for raw_id, fields in entries:
                    event = StreamedEvent(raw_id.decode(), json.loads(fields[b"event"]))
                    self._pending.append(event)
            if self._pending:
                self.last_id = self._pending[-1].id
        return self._pending.pop(0)

    def _read_sync(self) -> Any:
        return self._client.xread({self.stream: self.last_id}, count=_BATCH, block=self._block)

    async def __aenter__(self) -> Follower:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the Redis connection (a later read opens another)."""
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self._client.close)

    def __del__(self) -> None:
        self._client.close()  # closes the pool's sockets; nothing to wait for
