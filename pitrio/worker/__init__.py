"""pitrio beyond one process: harness events fanned out over Redis Streams, and
prompts run as jobs of a Celery task queue.

A run's events go to a Redis stream as it runs (:func:`open_event_publisher`, a harness
listener), and any other process can :func:`follow` them: from the start of the stream
(a late reader replays what it holds), then live. With sessions in PostgreSQL
(:class:`pitrio.harness.PostgresSessionStore`), any worker can continue any session:
:func:`make_app` is a Celery app whose jobs run prompts (:func:`run_prompt_job`, at most
once per idempotency key), :func:`submit_prompt` enqueues one, ``python -m pitrio worker``
runs a worker. Needs the ``worker`` extra (``pip install 'pitrio[worker]'``: redis and
celery), imported when first used. See ``docs/deploy.md``.
"""

from __future__ import annotations

from ._errors import WorkerError as WorkerError
from ._events import (
    DEFAULT_MAXLEN as DEFAULT_MAXLEN,
    EventPublisher as EventPublisher,
    Follower as Follower,
    StreamedEvent as StreamedEvent,
    control_for as control_for,
    event_to_wire as event_to_wire,
    follow as follow,
    open_event_publisher as open_event_publisher,
    read_stream as read_stream,
    send_abort as send_abort,
    stream_for as stream_for,
)
from ._jobs import (
    JOB_ENTRY as JOB_ENTRY,
    HarnessFactory as HarnessFactory,
    InterruptedHook as InterruptedHook,
    WorkerConfig as WorkerConfig,
    make_app as make_app,
    make_client_app as make_client_app,
    record_interrupted as record_interrupted,
    run_prompt_job as run_prompt_job,
    submit_prompt as submit_prompt,
)

__all__ = [
    "DEFAULT_MAXLEN",
    "JOB_ENTRY",
    "EventPublisher",
    "Follower",
    "HarnessFactory",
    "InterruptedHook",
    "StreamedEvent",
    "WorkerConfig",
    "WorkerError",
    "control_for",
    "event_to_wire",
    "follow",
    "make_app",
    "make_client_app",
    "open_event_publisher",
    "read_stream",
    "record_interrupted",
    "run_prompt_job",
    "send_abort",
    "stream_for",
    "submit_prompt",
]
