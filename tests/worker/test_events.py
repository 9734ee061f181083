"""Harness events over Redis Streams, against a real redis-server (``tests/_services.py``):
a run publishes every event in the CLI's json-mode wire form, a reader started late replays
them and then follows live, and the stream stays bounded."""

from __future__ import annotations

from typing import Any

import pytest
import redis
import trio

from pitrio import Model, UsageError
from pitrio.cli._app import event_to_wire as cli_event_to_wire
from pitrio.harness import Harness, InMemorySessionStore
from pitrio.testing import ScriptedModel, ScriptedResponse
from pitrio.worker import (
    StreamedEvent,
    WorkerError,
    follow,
    open_event_publisher,
    stream_for,
)

MODEL = Model(id="scripted", api="scripted", provider="local", context_window=200_000)


async def _run(harness: Harness, text: str) -> None:
    await harness.prompt(text)


async def _collect_until_settled(
    url: str, session_id: str, out: list[StreamedEvent], settled: int
) -> None:
    seen = 0
    async for event in follow(url, session_id, poll=0.05):
        out.append(event)
        if event.data["type"] == "settled":
            seen += 1
            if seen == settled:
                return


async def test_a_late_reader_replays_the_run_then_follows_the_next_one_live(
    redis_url: str,
) -> None:
    session = await InMemorySessionStore().create()
    stream = ScriptedModel([ScriptedResponse.text("first answer"), ScriptedResponse.text("two")])
    harness = Harness(model=MODEL, stream_fn=stream, session=session)
    local: list[dict[str, Any]] = []
    harness.subscribe(lambda event: local.append(cli_event_to_wire(event)))
    with trio.fail_after(60):
        async with open_event_publisher(redis_url, stream=stream_for(session.id)) as publisher:
            harness.subscribe(publisher)
            await harness.prompt("one")
            first_run = len(local)
            # A reader that starts after the first run: it replays it, then waits.
            late: list[StreamedEvent] = []
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_collect_until_settled, redis_url, session.id, late, 2)
                while len(late) < first_run:  # noqa: ASYNC110 - caught up with the replay
                    await trio.sleep(0.01)
                assert [e.data for e in late] == local  # everything, in order, as the CLI
                await harness.prompt("two")  # now live
        assert publisher.published == len(local)
    assert [e.data for e in late] == local
    types = [e["type"] for e in local]
    assert types[0] == "agent_start"
    assert types.count("settled") == 2
    assert "message_update" in types  # the streamed deltas too
    ids = [e.id for e in late]
    assert ids == sorted(ids, key=lambda i: tuple(map(int, i.split("-"))))
    # Resuming after an entry id gives exactly what follows it.
    resumed: list[StreamedEvent] = []
    with trio.fail_after(30):
        async for event in follow(redis_url, session.id, after=ids[first_run - 1], poll=0.05):
            resumed.append(event)
            if len(resumed) == len(ids) - first_run:
                break
    assert [e.id for e in resumed] == ids[first_run:]
    await session.close()


async def test_the_stream_stays_bounded(redis_url: str) -> None:
    session = await InMemorySessionStore().create()
    replies = [ScriptedResponse.text(f"answer {i}") for i in range(60)]
    harness = Harness(model=MODEL, stream_fn=ScriptedModel(replies), session=session)
    key = stream_for(session.id)
    local: list[dict[str, Any]] = []
    harness.subscribe(lambda event: local.append(cli_event_to_wire(event)))
    with trio.fail_after(120):
        async with open_event_publisher(redis_url, stream=key, maxlen=100) as publisher:
            harness.subscribe(publisher)
            for i in range(60):
                await harness.prompt(f"question {i}")
    client = redis.Redis.from_url(redis_url)
    try:
        length: Any = client.xlen(key)
        newest: Any = client.xrevrange(key, count=1)
    finally:
        client.close()
    assert publisher.published == len(local) > 500
    # MAXLEN ~ trims whole blocks of entries (stream-node-max-entries, 100): about 100 kept.
    assert 100 <= length <= 200
    assert newest[0][1][b"event"].decode() != ""
    with trio.fail_after(30):
        kept = []
        async for event in follow(redis_url, session.id, poll=0.05):
            kept.append(event.data)
            if len(kept) == length:
                break
    assert kept == local[-length:]  # the newest events, in order
    await session.close()


async def test_redis_going_away_does_not_disturb_the_run_and_is_reported_at_exit() -> None:
    from _services import free_port

    session = await InMemorySessionStore().create()
    harness = Harness(
        model=MODEL, stream_fn=ScriptedModel([ScriptedResponse.text("fine")]), session=session
    )
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    answers: list[str] = []

    async def run() -> None:
        async with open_event_publisher(url, stream="s") as publisher:
            harness.subscribe(publisher)
            await harness.prompt("hi")
            answers.append(harness.messages[-1].text)

    with (
        trio.fail_after(60),
        pytest.raises(WorkerError, match="publishing to Redis stream") as info,
    ):
        await run()
    assert answers == ["fine"]  # the run went on
    assert "ConnectionError" in str(info.value)
    with trio.fail_after(60), pytest.raises(WorkerError, match="reading Redis stream 's'"):
        async for _ in follow(url, stream="s"):
            pass  # pragma: no cover
    await session.close()


async def test_bad_arguments_are_clear_errors(redis_url: str) -> None:
    with pytest.raises(UsageError, match="maxlen must be a positive int"):
        async with open_event_publisher(redis_url, stream="s", maxlen=0):
            pass  # pragma: no cover
    with pytest.raises(UsageError, match="needs a session id or a stream"):
        async for _ in follow(redis_url):
            pass  # pragma: no cover
    with pytest.raises(UsageError, match="not a Redis URL"):
        async for _ in follow("http://example.com", "x"):
            pass  # pragma: no cover


async def test_a_follower_waiting_for_events_can_be_cancelled(redis_url: str) -> None:
    with trio.fail_after(30):
        with trio.move_on_after(0.3) as scope:
            async for _ in follow(redis_url, "nobody-writes-here", poll=0.05):
                pass  # pragma: no cover
        assert scope.cancelled_caught
