"""Prompts as jobs of a Celery task queue (Redis as the broker), run by N workers.

:func:`make_app` returns a Celery app with one task, ``pitrio.prompt``: open the
session in PostgreSQL (:class:`~pitrio.harness.PostgresSessionStore`; its lease keeps a
second worker out), build a harness with the application's factory, publish its events
(:func:`~pitrio.worker.open_event_publisher`), run the prompt with :func:`trio.run`.
:func:`submit_prompt` enqueues one. ``python -m pitrio worker`` starts a worker.

Delivery is at least once: the task is acknowledged late (``acks_late``) and a job whose
worker process died is given back to the queue (``task_reject_on_worker_lost``), so it
is delivered again. Each prompt carries an idempotency key, recorded in the session as
custom entries (``pitrio.job``: ``started``, then ``done``) in the same transactions as
the run's own writes, so that a duplicate delivery never runs the prompt twice:

- ``done`` already recorded: the job returns what was recorded, and runs nothing;
- ``started`` but not ``done`` (the worker died mid-run): the run is continued, not
  started over. The harness's run recovery (:attr:`~pitrio.harness.Harness.interrupted`,
  :meth:`~pitrio.harness.Harness.resume`) finishes the cut-off run from the session's
  operation records: recorded tool outcomes are used, an interrupted request is made
  again, a tool that started without a recorded outcome runs again only when it is
  replay-safe. A prompt that never reached the session is run; a run that ended before
  its ``done`` was written is only marked ``done``. An app may pass its own
  ``on_interrupted`` hook instead (:func:`record_interrupted` records ``interrupted``
  and runs nothing).
"""

from __future__ import annotations

import atexit
import functools
import importlib
import json
import os
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import attrs
import trio

from pitrio import UsageError

from ._errors import WorkerError
from ._events import (
    EventPublisher,
    _redis_client,
    control_for,
    open_event_publisher,
    stream_for,
)

__all__ = [
    "JOB_ENTRY",
    "HarnessFactory",
    "InterruptedHook",
    "WorkerConfig",
    "make_app",
    "make_client_app",
    "record_interrupted",
    "run_prompt_job",
    "submit_prompt",
]

JOB_ENTRY: Final = "pitrio.job"
"""The custom entry type recording a job's idempotency key and state in its session."""

TASK_NAME: Final = "pitrio.prompt"

_CONTROL_POLL: Final = 0.1  # seconds between reads of a session's control stream
_CONTROL_BATCH: Final = 100
_STORE_RETRIES: Final = 20  # a job whose database fails is tried again this many times

HarnessFactory = Callable[[Any], Any]
"""``(session) -> Harness``: the application's model, tools and settings for a session."""

InterruptedHook = Callable[[Any, Any, str], Awaitable[Mapping[str, Any]]]
"""``(session, harness, key) -> result``: what to do with a job whose earlier delivery
started the prompt and died before it ended."""


@attrs.frozen(kw_only=True)
class WorkerConfig:
    """Where a worker finds its servers and the application's harness.

    Attributes:
        postgres_url: the sessions' database.
        events_url: the Redis server of the event streams.
        factory: the harness factory, or its import path ``"module:function"``.
        schema: the sessions' schema.
        on_interrupted: a redelivery hook instead of continuing the run (e.g.
            :func:`record_interrupted`).
    """

    postgres_url: str
    events_url: str
    factory: HarnessFactory | str
    schema: str = "pitrio"
    on_interrupted: InterruptedHook | None = None

    def harness_factory(self) -> HarnessFactory:
        if not isinstance(self.factory, str):
            return self.factory
        module, _, name = self.factory.partition(":")
        if not module or not name:
            msg = f"the harness factory must be 'module:function'; got {self.factory!r}"
            raise UsageError(msg)
        found: HarnessFactory = getattr(importlib.import_module(module), name)
        return found


def _job_states(session: Any, key: str) -> list[str]:
    from pitrio.harness import CustomEntry

    return [
        e.data["state"]
        for e in session.entries
        if isinstance(e, CustomEntry)
        and e.custom_type == JOB_ENTRY
        and isinstance(e.data, dict)
        and e.data.get("key") == key
    ]


async def record_interrupted(session: Any, harness: Any, key: str) -> Mapping[str, Any]:
    """An ``on_interrupted`` hook that records ``interrupted`` and runs nothing."""
    await session.append_custom(JOB_ENTRY, {"key": key, "state": "interrupted"})
    return {"status": "interrupted", "key": key}


def _prompt_reached_session(session: Any, key: str) -> bool:
    """Whether a user message follows the job's ``started`` entry."""
    from pitrio.harness import CustomEntry, MessageEntry

    started = False
    for entry in session.entries:
        if (
            isinstance(entry, CustomEntry)
            and entry.custom_type == JOB_ENTRY
            and isinstance(entry.data, dict)
            and entry.data.get("key") == key
        ):
            started = True
        elif started and isinstance(entry, MessageEntry) and entry.message.role == "user":
            return True
    return False


async def _job_facts(session: Any, key: str) -> tuple[list[str], bool]:
    """The job's states so far and whether its prompt reached the session, read in a
    worker thread: they are in entries of the whole session, which a resumed session
    reads back from storage (the event loop's thread only holds the active branch's)."""

    def read() -> tuple[list[str], bool]:
        return _job_states(session, key), _prompt_reached_session(session, key)

    return await trio.to_thread.run_sync(read)


def _last_text(harness: Any) -> Any:
    last = harness.messages[-1] if harness.messages else None
    return getattr(last, "text", None)


async def run_prompt_job(
    config: WorkerConfig,
    session_id: str,
    prompt: str,
    key: str,
    *,
    cwd: str | None = None,
    store: Any = None,
) -> dict[str, Any]:
    """One job: the prompt ``prompt`` in session ``session_id`` (created if missing), at
    most once per ``key``. Raises :class:`~pitrio.harness.SessionLockedError` while
    another worker has the session open (the task retries). ``store``: a
    :class:`~pitrio.harness.PostgresSessionStore` of ``config``'s database to use (and
    leave open: a worker keeps one, and its connections, from job to job); by default
    one is opened for the job and closed after it.

    Besides the run's events, the session's stream gets the job's markers
    (``{"type": "pitrio.job", "state": "started" | "done" | "failed", "key": ...}``), so
    that a follower knows which events belong to which prompt. While the run goes on,
    the job watches the session's control stream (:func:`~pitrio.worker.control_for`):
    an ``{"type": "abort", "keys": [...]}`` naming its key aborts the run, which then
    settles as an aborted answer (:func:`~pitrio.worker.send_abort`)."""
    from pitrio.harness import PostgresSessionStore

    if store is not None:
        return await _job_in(store, config, session_id, prompt, key, cwd)
    async with PostgresSessionStore(config.postgres_url, schema=config.schema) as own:
        return await _job_in(own, config, session_id, prompt, key, cwd)


async def _job_in(
    store: Any, config: WorkerConfig, session_id: str, prompt: str, key: str, cwd: str | None
) -> dict[str, Any]:
    from pitrio.harness import SessionNotFoundError

    try:
        session = await store.open(session_id)
    except SessionNotFoundError:
        session = await store.create(session_id=session_id, cwd=cwd)
    try:
        stream = stream_for(session_id)
        async with open_event_publisher(config.events_url, stream=stream) as publisher:
            try:
                result = await _run_job(config, session, publisher, prompt, key)
            except Exception as exc:
                marker = {"type": JOB_ENTRY, "state": "failed", "key": key}
                await _published(publisher.publish({**marker, "error": str(exc)}))
                raise
            marker = {"type": JOB_ENTRY, "state": "done", "key": key}
            await _published(publisher.publish({**marker, "status": result["status"]}))
        return result
    finally:
        await session.close()


async def _published(waiting: Awaitable[None] | None) -> None:
    if waiting is not None:
        await waiting


async def _run_job(
    config: WorkerConfig, session: Any, publisher: EventPublisher, prompt: str, key: str
) -> dict[str, Any]:
    states, reached = await _job_facts(session, key)
    if "done" in states or "interrupted" in states:
        return {"status": "duplicate", "key": key, "states": states}
    factory = config.harness_factory()
    if "started" in states and config.on_interrupted is not None:
        return dict(await config.on_interrupted(session, factory(session), key))
    redelivered = "started" in states
    if not redelivered:
        await session.append_custom(JOB_ENTRY, {"key": key, "state": "started"})
    harness = factory(session)
    harness.subscribe(publisher)
    await _published(publisher.publish({"type": JOB_ENTRY, "state": "started", "key": key}))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_watch_aborts, config.events_url, session.id, key, harness)
        if not redelivered or not reached:
            await harness.prompt(prompt)  # recovers an interrupted run first
        elif harness.interrupted is not None:
            await harness.resume()  # the cut-off run goes on where it stopped
        nursery.cancel_scope.cancel(reason="the job's run is over")
    await session.append_custom(JOB_ENTRY, {"key": key, "state": "done"})
    result = {"status": "done", "key": key, "text": _last_text(harness)}
    if redelivered:
        result["recovered"] = True
    return result


async def _watch_aborts(events_url: str, session_id: str, key: str, harness: Any) -> None:
    """Abort ``harness``'s run once the session's control stream names ``key`` in an
    ``abort`` (also one sent before the job started); runs until cancelled."""
    client = _redis_client(events_url)
    stream = control_for(session_id)
    last = "0"

    def read() -> Any:
        return client.xread({stream: last}, count=_CONTROL_BATCH)

    try:
        while True:
            for _stream, entries in await trio.to_thread.run_sync(read) or ():
                for raw_id, fields in entries:
                    last = raw_id.decode()
                    data = _control_data(fields)
                    if data.get("type") == "abort" and key in data.get("keys", ()):
                        while True:  # until the job ends: a run that starts late is aborted too
                            harness.abort()
                            await trio.sleep(_CONTROL_POLL)
            await trio.sleep(_CONTROL_POLL)
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(client.close)


def _control_data(fields: Mapping[bytes, bytes]) -> dict[str, Any]:
    try:
        data = json.loads(fields.get(b"event", b"{}"))
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def make_app(
    broker_url: str,
    config: WorkerConfig,
    *,
    result_backend: str | None = None,
    visibility_timeout: float = 3600.0,
    retry_locked_after: float = 2.0,
) -> Any:
    """A Celery app whose task ``pitrio.prompt`` runs :func:`run_prompt_job`.

    ``visibility_timeout`` is how long Redis waits for an unacknowledged job before it
    gives it to another worker (make it longer than a prompt takes: a shorter one is a
    duplicate delivery, which the idempotency key then stops). ``retry_locked_after``:
    seconds before a job whose session is open elsewhere is tried again.
    """
    try:
        import celery
    except ImportError:
        msg = "pitrio's jobs need Celery, which is not installed: pip install 'pitrio[worker]'"
        raise UsageError(msg) from None
    from pitrio.harness import SessionError, SessionLockedError

    app = celery.Celery("pitrio", broker=broker_url, backend=result_backend)
    stores: list[Any] = []  # one store per worker process, its connections kept

    def store() -> Any:
        if not stores:
            from pitrio.harness import PostgresSessionStore

            stores.append(PostgresSessionStore(config.postgres_url, schema=config.schema))
            atexit.register(stores[0].close_sync)
        return stores[0]

    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        broker_transport_options={
            "visibility_timeout": visibility_timeout,
            # Look for jobs whose worker vanished (unacknowledged past the timeout) every
            # few seconds, not kombu's default of about every 100 s.
            "unacked_restore_interval": max(1, min(10, round(visibility_timeout / 4))),
            "unacked_restore_throttle": 1,
            # The sweep holds a lock in Redis; a worker SIGKILLed while holding it would
            # stop every sweep until the lock expires (kombu's default: 300 s).
            "unacked_mutex_expire": max(1, min(300, round(visibility_timeout / 2))),
        },
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )

    @app.task(name=TASK_NAME, bind=True, max_retries=None)  # type: ignore[untyped-decorator]
    def prompt_task(
        self: Any, session_id: str, prompt: str, key: str, cwd: str | None = None
    ) -> dict[str, Any]:
        try:
            job = functools.partial(
                run_prompt_job, config, session_id, prompt, key, cwd=cwd, store=store()
            )
            return trio.run(job)
        except Exception as exc:
            error = _single(exc)
            if isinstance(error, SessionLockedError):
                raise self.retry(exc=error, countdown=retry_locked_after) from None
            if isinstance(error, SessionError):  # the database failed: try again, a while
                raise self.retry(
                    exc=error, countdown=retry_locked_after, max_retries=_STORE_RETRIES
                ) from None
            if isinstance(error, WorkerError):  # the run ended; its events did not all go out
                return {"status": "done", "key": key, "events_error": str(error)}
            raise

    return app


def _single(exc: BaseException) -> BaseException:
    """The one exception inside (nested) single-exception groups, or ``exc``."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def make_client_app(broker_url: str) -> Any:
    """A Celery app that only submits prompts (:func:`submit_prompt`) to the workers of
    ``broker_url``, as ``pitrio serve --queue`` does; it runs no job itself."""
    try:
        import celery
    except ImportError:
        msg = "pitrio's jobs need Celery, which is not installed: pip install 'pitrio[worker]'"
        raise UsageError(msg) from None
    app = celery.Celery("pitrio", broker=broker_url)
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        broker_connection_retry_on_startup=True,
    )
    return app


def submit_prompt(
    app: Any, session_id: str, prompt: str, *, key: str | None = None, cwd: str | None = None
) -> Any:
    """Enqueue a prompt; returns Celery's ``AsyncResult``. ``key`` (default: a new
    UUID) makes submitting the same prompt twice run it once."""
    key = key or str(uuid.uuid4())
    return app.send_task(TASK_NAME, args=[session_id, prompt, key, cwd])


def config_from_env(environ: Mapping[str, str] | None = None) -> tuple[str, WorkerConfig]:
    """The broker URL and :class:`WorkerConfig` from ``PITRIO_BROKER_URL``,
    ``PITRIO_POSTGRES_URL``, ``PITRIO_REDIS_URL`` (default: the broker) and
    ``PITRIO_HARNESS_FACTORY``."""
    env = os.environ if environ is None else environ
    missing = [
        name
        for name in ("PITRIO_BROKER_URL", "PITRIO_POSTGRES_URL", "PITRIO_HARNESS_FACTORY")
        if not env.get(name)
    ]
    if missing:
        msg = f"python -m pitrio worker needs {', '.join(missing)} set (see docs/deploy.md)"
        raise UsageError(msg)
    broker = env["PITRIO_BROKER_URL"]
    return broker, WorkerConfig(
        postgres_url=env["PITRIO_POSTGRES_URL"],
        events_url=env.get("PITRIO_REDIS_URL") or broker,
        factory=env["PITRIO_HARNESS_FACTORY"],
        schema=env.get("PITRIO_POSTGRES_SCHEMA") or "pitrio",
    )


def worker_main(argv: list[str]) -> int:
    """``python -m pitrio worker [celery worker options]``: a Celery worker for the
    configuration in the environment (:func:`config_from_env`)."""
    broker, config = config_from_env()
    visibility = float(os.environ.get("PITRIO_VISIBILITY_TIMEOUT") or 3600)
    app = make_app(broker, config, result_backend=broker, visibility_timeout=visibility)
    app.worker_main(["worker", "--loglevel=INFO", *argv])
    return 0
