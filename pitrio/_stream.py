"""EventStream: a push-style event stream with a final result.

This is pi-ai's ``EventStream`` made structured. A producer pushes events without
waiting (``push`` never blocks); a consumer iterates them; the stream completes on a
completing event (or ``end()``), and its *result* can be awaited.

A stream may carry a *producer*: an async function that fills it. The producer runs
only inside ``async with stream:``, in a nursery that the ``async with`` block owns,
so nothing a stream starts outlives the block::

    async with provider_stream as events:
        async for event in events:
            ...
        message = await events.result()

Events wait in a deque; a consumer with nothing to read waits on a :class:`trio.Event`.
A stream whose events are all known in advance (a scripted answer) can take them as an
iterable instead (:meth:`EventStream.push_lazily`): each is made when a consumer reaches
it, so a long answer's snapshots are never all alive at once.
(A Trio memory channel does the same job but costs about eight times as much to create,
and a stream is created for every model request.)

The producer runs in its own cancel scope (:meth:`EventStream.cancel`); consumers
keep reading after a cancel, so a producer can report its cancellation as data (an
``error`` event) before it re-raises.
"""

from __future__ import annotations

import enum
import itertools
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Final, Generic, Literal, TypeVar

import trio

from ._errors import IncompleteStreamError, InvalidStateError
from ._events import AssistantMessageEvent, DoneEvent, ErrorEvent, StartEvent
from ._messages import AssistantMessage

__all__ = ["AssistantMessageEventStream", "EventStream"]

T = TypeVar("T")
R = TypeVar("R")

Producer = Callable[["EventStream[T, R]"], Awaitable[None]]


class _Unset(enum.Enum):
    """No result yet (a sentinel mypy can narrow away)."""

    UNSET = enum.auto()


_UNSET: Final = _Unset.UNSET


class EventStream(Generic[T, R]):
    """A stream of ``T`` events ending with a result ``R``.

    Args:
        is_complete: tells whether an event completes the stream.
        extract_result: the result carried by a completing event.
        producer: optional async function that fills the stream; it runs while the
            stream is open (``async with``).
    """

    __slots__ = (
        "_done",
        "_extract_result",
        "_is_complete",
        "_nursery",
        "_nursery_manager",
        "_producer",
        "_producer_scope",
        "_queue",
        "_result",
        "_result_ready",
        "_source",
        "_started",
        "_wakeup",
    )

    def __init__(
        self,
        is_complete: Callable[[T], bool],
        extract_result: Callable[[T], R],
        producer: Callable[[EventStream[T, R]], Awaitable[None]] | None = None,
    ) -> None:
        self._is_complete = is_complete
        self._extract_result = extract_result
        self._producer = producer
        self._queue: deque[T] = deque()
        self._wakeup: trio.Event | None = None
        self._done = False
        self._result: R | _Unset = _UNSET
        self._result_ready: trio.Event | None = None
        self._nursery: trio.Nursery | None = None
        self._nursery_manager: AsyncExitStack | None = None
        self._producer_scope: trio.CancelScope | None = None
        self._started = False
        self._source: Iterator[T] | None = None

    # -- producing ---------------------------------------------------------------------

    @property
    def done(self) -> bool:
        """Whether the stream has completed (no further events are accepted)."""
        if self._source is not None:
            self._drain()
        return self._done

    def push(self, event: T) -> None:
        """Add an event without waiting. Ignored once the stream has completed."""
        if self._source is not None:
            self._drain()
        self._push(event)

    def push_lazily(self, events: Iterable[T]) -> None:
        """Add the events of ``events`` as if each were pushed, but take each one only
        when a consumer reaches it (or when the stream's state is asked for: ``done``,
        ``result()``, a later ``push`` or ``end``).

        For streams whose whole content is known when they are returned, such as a
        scripted answer given as a generator: reading a 50,000-delta answer then keeps
        one snapshot alive at a time instead of all of them. An exception raised by the
        iterable reaches whoever made it take the next event.
        """
        if self._source is None:
            self._source = iter(events)
        else:
            self._source = itertools.chain(self._source, events)

    def _drain(self) -> None:
        source, self._source = self._source, None
        if source is not None:
            for event in source:
                self._push(event)

    def _push(self, event: T) -> None:
        if self._done:
            return
        self._queue.append(event)
        if self._is_complete(event):
            self._set_result(self._extract_result(event))
            self._done = True
        wakeup = self._wakeup
        if wakeup is not None:
            self._wakeup = None
            wakeup.set()

    def end(self, result: R | None = None) -> None:
        """Complete the stream; ``result`` is used unless a result was already set."""
        if self._source is not None:
            self._drain()
        if result is not None:
            self._set_result(result)
        if not self._done:
            self._done = True
            wakeup = self._wakeup
            if wakeup is not None:
                self._wakeup = None
                wakeup.set()
        if self._result is _UNSET and self._result_ready is not None:
            # Nobody will ever provide a result: wake waiters so they can fail clearly.
            self._result_ready.set()

    def _set_result(self, result: R) -> None:
        if self._result is _UNSET:
            self._result = result
            if self._result_ready is not None:
                self._result_ready.set()

    # -- consuming ---------------------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[T]:
        return self

    async def __anext__(self) -> T:
        # Buffered events are handed out without a trip through the scheduler: the
        # producer already paid for a checkpoint when it pushed them.
        while True:
            if self._queue:
                return self._queue.popleft()
            source = self._source
            if source is not None:
                for event in source:
                    if self._done:
                        break
                    if self._is_complete(event):
                        self._set_result(self._extract_result(event))
                        self._done = True
                        self._source = None
                    return event
                self._source = None
                continue
            if self._done:
                await trio.lowlevel.checkpoint()
                raise StopAsyncIteration
            if self._wakeup is None:
                self._wakeup = trio.Event()
            await self._wakeup.wait()

    async def result(self) -> R:
        """The stream's result, once it has completed. Checkpoints.

        Raises:
            IncompleteStreamError: the stream ended without a result (``end()`` with no value
                and no completing event).
        """
        if self._source is not None:
            self._drain()
        if self._result is _UNSET and not self._done:
            if self._result_ready is None:
                self._result_ready = trio.Event()
            await self._result_ready.wait()
        else:
            await trio.lowlevel.checkpoint()
        if self._result is _UNSET:
            msg = "the stream ended without a result (end() was called with no value)"
            raise IncompleteStreamError(msg)
        return self._result

    def result_nowait(self) -> R:
        """The result if the stream has one already; raises ``trio.WouldBlock`` if not."""
        if self._result is _UNSET and self._source is not None:
            self._drain()
        if self._result is _UNSET:
            raise trio.WouldBlock
        return self._result

    # -- lifetime ----------------------------------------------------------------------

    def cancel(self) -> None:
        """Cancel the producer (if it is running or has yet to start)."""
        if self._producer_scope is None:
            self._producer_scope = trio.CancelScope()
        self._producer_scope.cancel()

    @property
    def has_producer(self) -> bool:
        """Whether the stream is filled by a producer that has to run somewhere."""
        return self._producer is not None

    def start_producer(self, nursery: trio.Nursery) -> None:
        """Run the producer in ``nursery`` (what ``async with`` does in a nursery of its own).

        Raises:
            InvalidStateError: the producer was already started.
        """
        if self._producer is None:
            return
        if self._started:
            msg = "this stream is already open; open it once and iterate it there"
            raise InvalidStateError(msg)
        self._started = True
        nursery.start_soon(self._run_producer)

    async def __aenter__(self) -> EventStream[T, R]:
        if self._producer is not None:
            if self._started:
                msg = "this stream is already open; open it once and iterate it there"
                raise InvalidStateError(msg)
            manager = AsyncExitStack()
            self._nursery = await manager.enter_async_context(trio.open_nursery())
            self._nursery_manager = manager
            self.start_producer(self._nursery)
        else:
            await trio.lowlevel.checkpoint()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        if self._nursery is None:
            return None
        manager = self._nursery_manager
        assert manager is not None
        if exc is not None:
            self.cancel()
        try:
            return await manager.__aexit__(exc_type, exc, tb)
        except BaseExceptionGroup as group:
            # The nursery is ours, not the caller's: a single failure (the producer's
            # exception) is re-raised as itself, as trio-websocket does at its edge.
            if len(group.exceptions) == 1 and not isinstance(group.exceptions[0], trio.Cancelled):
                raise group.exceptions[0] from None
            raise

    async def _run_producer(self) -> None:
        assert self._producer is not None
        if self._producer_scope is None:
            self._producer_scope = trio.CancelScope()
        elif self._producer_scope.cancel_called:
            # Cancelled before it started (e.g. a request made after an abort): the
            # producer never runs, so a producer without checkpoints cannot slip through.
            self._on_producer_cancelled()
            if not self._done:
                self.end()
            return
        try:
            with self._producer_scope:
                await self._producer(self)
        except Exception as exc:
            self._on_producer_error(exc)
        else:
            if self._producer_scope.cancelled_caught:
                self._on_producer_cancelled()
        finally:
            if not self._done:
                self.end()

    def _on_producer_error(self, exc: Exception) -> None:
        """Turn a producer's exception into data. The default re-raises it."""
        raise exc

    def _on_producer_cancelled(self) -> None:
        """Called when :meth:`cancel` stopped the producer. The default just ends."""


class AssistantMessageEventStream(EventStream[AssistantMessageEvent, AssistantMessage]):
    """The stream a provider returns: completes on ``done`` or ``error``.

    A producer's exception or cancellation never escapes as an exception: the stream
    ends with an ``error`` event whose message keeps what was streamed so far, with
    stop reason ``error`` (the exception's text) or ``aborted``.
    """

    __slots__ = ("_last", "abort_message", "template")

    def __init__(
        self,
        producer: Callable[[AssistantMessageEventStream], Awaitable[None]] | None = None,
        *,
        template: AssistantMessage | None = None,
        abort_message: str = "Request was aborted",
    ) -> None:
        super().__init__(_is_terminal, _terminal_message, producer)  # type: ignore[arg-type]  # subclass of the producer's parameter
        self.template = (
            template if template is not None else AssistantMessage(stop_reason="pending")
        )
        self.abort_message = abort_message
        self._last: AssistantMessageEvent | None = None

    def _push(self, event: AssistantMessageEvent) -> None:
        # EventStream._push for this stream's events, inline: this runs for every delta
        # a provider streams. The last event is kept for a failure's message (_fail):
        # every event before a terminal one carries the partial message.
        if self._done:
            return
        self._queue.append(event)
        self._last = event
        kind = type(event)
        if kind is DoneEvent:
            self._set_result(event.message)  # type: ignore[union-attr]  # a DoneEvent
            self._done = True
        elif kind is ErrorEvent:
            self._set_result(event.error)  # type: ignore[union-attr]  # an ErrorEvent
            self._done = True
        wakeup = self._wakeup
        if wakeup is not None:
            self._wakeup = None
            wakeup.set()

    def push_lazily(self, events: Iterable[AssistantMessageEvent]) -> None:
        # Only a producer's failure reads the partial (see _fail).
        super().push_lazily(events if self._producer is None else self._tracked(events))

    def _tracked(self, events: Iterable[AssistantMessageEvent]) -> Iterator[AssistantMessageEvent]:
        # What was streamed so far is kept by a failure's message (see _fail).
        for event in events:
            self._last = event
            yield event

    def _fail(self, stop_reason: Literal["error", "aborted"], text: str) -> None:
        partial = getattr(self._last, "partial", None)
        base = partial if partial is not None else self.template
        message = base.__class__(
            content=base.content,
            api=base.api,
            provider=base.provider,
            model=base.model,
            usage=base.usage,
            stop_reason=stop_reason,
            error_message=text,
            timestamp=base.timestamp,
            response_id=base.response_id,
            response_model=base.response_model,
        )
        self.push(ErrorEvent(reason=stop_reason, error=message))

    def _on_producer_error(self, exc: Exception) -> None:
        if not self.done:
            self._fail("error", str(exc) or exc.__class__.__name__)

    def _on_producer_cancelled(self) -> None:
        if not self.done:
            self._fail("aborted", self.abort_message)


def _is_terminal(event: AssistantMessageEvent) -> bool:
    return type(event) is DoneEvent or type(event) is ErrorEvent


def _terminal_message(event: AssistantMessageEvent) -> AssistantMessage:
    if isinstance(event, DoneEvent):
        return event.message
    if isinstance(event, ErrorEvent):
        return event.error
    raise AssertionError(event)  # pragma: no cover  # only terminal events get here


_ = StartEvent
