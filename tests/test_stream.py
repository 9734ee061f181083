"""EventStream and AssistantMessageEventStream: push, completion, results, producers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import trio
import trio.testing

from pitrio import (
    AbortSignal,
    AssistantMessage,
    AssistantMessageEventStream,
    DoneEvent,
    ErrorEvent,
    EventStream,
    StartEvent,
    TextContent,
    TextDeltaEvent,
)


def _int_stream() -> EventStream[int, str]:
    return EventStream(lambda n: n < 0, lambda n: f"ended with {n}")


async def test_push_never_blocks_and_iteration_sees_every_event() -> None:
    """Events pushed before anyone iterates are all delivered, in order, then the result."""
    stream = _int_stream()
    for n in (1, 2, 3, -1):
        stream.push(n)
    assert stream.done
    assert [n async for n in stream] == [1, 2, 3, -1]
    assert await stream.result() == "ended with -1"


async def test_events_after_completion_are_dropped() -> None:
    """Pushing after the completing event changes nothing (pi-ai's rule)."""
    stream = _int_stream()
    stream.push(-5)
    stream.push(7)
    assert [n async for n in stream] == [-5]


async def test_end_sets_the_result_unless_already_set() -> None:
    """end(result) completes the stream; the first result wins."""
    stream = _int_stream()
    stream.push(1)
    stream.end("explicit")
    stream.end("ignored")
    assert [n async for n in stream] == [1]
    assert await stream.result() == "explicit"


async def test_end_without_result_makes_result_fail_clearly() -> None:
    """A stream ended with no value has no result; result() says so instead of hanging."""
    stream = _int_stream()
    stream.end()
    with pytest.raises(RuntimeError, match="without a result"):
        await stream.result()


async def test_result_waits_for_a_later_push() -> None:
    """result() blocks until the completing event arrives."""
    stream = _int_stream()
    seen: list[str] = []

    async def waiter() -> None:
        seen.append(await stream.result())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        assert seen == []
        stream.push(-2)
    assert seen == ["ended with -2"]


async def test_result_checkpoints_even_when_ready() -> None:
    """result() is a checkpoint on the fast path too."""
    stream = _int_stream()
    stream.push(-1)
    with trio.testing.assert_checkpoints():
        await stream.result()


async def test_producer_runs_only_inside_async_with(autojump_clock: trio.testing.MockClock) -> None:
    """The producer starts when the stream is opened and is finished when the block exits."""
    started = trio.Event()

    async def producer(stream: EventStream[int, str]) -> None:
        started.set()
        await trio.sleep(1)
        stream.push(-9)

    stream = EventStream(lambda n: n < 0, str, producer)
    assert not started.is_set()
    async with stream:
        assert [n async for n in stream] == [-9]
    assert started.is_set()
    assert await stream.result() == "-9"


def _assistant_stream(producer: object) -> AssistantMessageEventStream:
    return AssistantMessageEventStream(producer)  # type: ignore[arg-type]  # test producers


async def test_producer_exception_becomes_an_error_event() -> None:
    """A provider bug ends the stream as data: stop reason error, the exception's text."""

    async def producer(stream: AssistantMessageEventStream) -> None:
        partial = AssistantMessage(content=(TextContent(text="par"),), stop_reason="pending")
        stream.push(StartEvent(partial=partial))
        raise ValueError("socket exploded")

    stream = _assistant_stream(producer)
    async with stream:
        events = [e async for e in stream]
    assert [e.type for e in events] == ["start", "error"]
    final = await stream.result()
    assert final.stop_reason == "error"
    assert final.error_message == "socket exploded"
    assert final.content == (TextContent(text="par"),)


async def test_cancel_ends_the_stream_as_aborted_keeping_partial_content(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """cancel() stops the producer; the final message keeps what streamed so far."""

    async def producer(stream: AssistantMessageEventStream) -> None:
        partial = AssistantMessage(content=(TextContent(text="Hel"),), stop_reason="pending")
        stream.push(StartEvent(partial=partial))
        stream.push(TextDeltaEvent(content_index=0, delta="Hel", partial=partial))
        await trio.sleep_forever()

    stream = _assistant_stream(producer)
    signal = AbortSignal()
    signal.add_callback(stream.cancel)
    async with stream:
        kinds = []
        async for event in stream:
            kinds.append(event.type)
            if event.type == "text_delta":
                signal.abort()
    assert kinds == ["start", "text_delta", "error"]
    final = await stream.result()
    assert final.stop_reason == "aborted"
    assert final.error_message == "Request was aborted"
    assert final.text == "Hel"


async def test_a_producer_may_report_its_own_abort_text(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A provider that catches the cancellation pushes its own aborted message, then re-raises."""

    async def producer(stream: AssistantMessageEventStream) -> None:
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            stream.push(
                ErrorEvent(
                    reason="aborted",
                    error=AssistantMessage(stop_reason="aborted", error_message="custom abort"),
                )
            )
            raise

    stream = _assistant_stream(producer)
    async with stream:
        await trio.testing.wait_all_tasks_blocked()
        stream.cancel()
        assert [e.type async for e in stream] == ["error"]
    assert (await stream.result()).error_message == "custom abort"


async def test_a_stream_cancelled_before_it_opens_never_runs_its_producer() -> None:
    """A request made after an abort ends as aborted at once, even without checkpoints."""
    ran = False

    async def producer(stream: AssistantMessageEventStream) -> None:
        nonlocal ran
        ran = True
        stream.push(DoneEvent(reason="stop", message=AssistantMessage()))

    stream = _assistant_stream(producer)
    stream.cancel()
    async with stream:
        assert [e.type async for e in stream] == ["error"]
    assert not ran
    assert (await stream.result()).stop_reason == "aborted"


async def test_done_event_is_the_result() -> None:
    """The done event's message is the stream's result."""
    message = AssistantMessage(content=(TextContent(text="hi"),))

    async def producer(stream: AssistantMessageEventStream) -> None:
        stream.push(DoneEvent(reason="stop", message=message))

    stream = _assistant_stream(producer)
    async with stream:
        assert [e.type async for e in stream] == ["done"]
    assert await stream.result() is message


async def test_opening_twice_is_an_error() -> None:
    """A stream with a producer can be opened once; the error says how to use it."""

    async def producer(stream: AssistantMessageEventStream) -> None:
        stream.push(DoneEvent(reason="stop", message=AssistantMessage()))

    stream = _assistant_stream(producer)
    async with stream:
        with pytest.raises(RuntimeError, match="already open"):
            await stream.__aenter__()


async def test_abort_signal_callbacks_and_scopes(autojump_clock: trio.testing.MockClock) -> None:
    """abort() runs callbacks in order, once; scopes opened after it start cancelled."""
    signal = AbortSignal()
    calls: list[int] = []
    signal.add_callback(lambda: calls.append(1))
    remove = signal.add_callback(lambda: calls.append(2))
    signal.add_callback(lambda: calls.append(3))
    remove()
    with signal.cancel_scope() as scope:
        signal.abort("because")
        await trio.sleep(10)
    assert scope.cancelled_caught
    signal.abort()
    assert calls == [1, 3]
    assert signal.reason == "because"
    with signal.cancel_scope() as late:
        await trio.sleep(10)
    assert late.cancelled_caught
    late_calls: list[str] = []
    signal.add_callback(lambda: late_calls.append("now"))
    assert late_calls == ["now"]
    with trio.testing.assert_checkpoints():
        await signal.wait()


async def test_a_generic_producer_error_reaches_the_consumer_unwrapped() -> None:
    """A plain EventStream re-raises its producer's exception from ``async with``, unwrapped."""

    async def producer(stream: EventStream[int, str]) -> None:
        stream.push(1)
        raise KeyError("lost")

    stream: EventStream[int, str] = EventStream(lambda n: n < 0, str, producer)

    async def consume() -> None:
        async with stream:
            async for _ in stream:
                pass

    with pytest.raises(KeyError, match="lost"):
        await consume()


# -- push_lazily: events taken from an iterable as consumers reach them -----------------


def _counted(values: list[int], taken: list[int]) -> Iterator[int]:
    for value in values:
        taken.append(value)
        yield value


async def test_push_lazily_takes_each_event_when_it_is_read() -> None:
    """The iterable is advanced only as far as the consumer has read, and the stream
    behaves as if every event had been pushed: same order, completion, result."""
    stream = _int_stream()
    taken: list[int] = []
    stream.push_lazily(_counted([1, 2, -3, 4], taken))
    assert taken == []
    iterator = stream.__aiter__()
    assert await iterator.__anext__() == 1
    assert taken == [1]
    assert await iterator.__anext__() == 2
    assert taken == [1, 2]
    assert [n async for n in stream] == [-3]  # completes at -3; 4 is never taken
    assert taken == [1, 2, -3]
    assert stream.done
    assert await stream.result() == "ended with -3"


@pytest.mark.parametrize("ask", ["done", "result", "result_nowait", "push", "end"])
async def test_asking_for_the_state_takes_the_rest(ask: str) -> None:
    """done, result(), result_nowait(), push() and end() see every lazily added event,
    exactly as if they had been pushed."""
    stream = _int_stream()
    stream.push(0)
    stream.push_lazily([1, 2])
    stream.push_lazily([-3, 9])
    if ask == "done":
        assert stream.done
    elif ask == "result":
        assert await stream.result() == "ended with -3"
    elif ask == "result_nowait":
        assert stream.result_nowait() == "ended with -3"
    elif ask == "push":
        stream.push(-7)  # after the completing -3: dropped
    else:
        stream.end("explicit")
    assert [n async for n in stream] == [0, 1, 2, -3]
    assert stream.result_nowait() == "ended with -3"


async def test_push_lazily_without_a_completing_event_ends_on_end() -> None:
    stream = _int_stream()
    stream.push_lazily([1, 2])
    stream.end("closed")
    assert [n async for n in stream] == [1, 2]
    assert await stream.result() == "closed"
