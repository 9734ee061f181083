"""pitrio beyond one process: harness events fanned out over Redis Streams.

A run's events go to a Redis stream as it runs (:func:`open_event_publisher`, a harness
listener), and any other process can :func:`follow` them: from the start of the stream
(a late reader replays what it holds), then live. With sessions in PostgreSQL
(:class:`pitrio.harness.PostgresSessionStore`), any worker can continue any session.
Needs the ``worker`` extra (``pip install 'pitrio[worker]'``, the ``redis`` package),
imported when first used. See ``docs/deploy.md``.
"""

from __future__ import annotations

from ._errors import WorkerError as WorkerError
from ._events import (
    DEFAULT_MAXLEN as DEFAULT_MAXLEN,
    EventPublisher as EventPublisher,
    Follower as Follower,
    StreamedEvent as StreamedEvent,
    event_to_wire as event_to_wire,
    follow as follow,
    open_event_publisher as open_event_publisher,
    stream_for as stream_for,
)

__all__ = [
    "DEFAULT_MAXLEN",
    "EventPublisher",
    "Follower",
    "StreamedEvent",
    "WorkerError",
    "event_to_wire",
    "follow",
    "open_event_publisher",
    "stream_for",
]
