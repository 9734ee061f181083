"""Prompts as Celery jobs: at most one run per idempotency key, and a job whose worker
process died is delivered again (acks_late, task_reject_on_worker_lost) and does not run
the prompt a second time. Real PostgreSQL and Redis (``tests/_services.py``); the last
test starts ``python -m pitrio worker`` (a Celery prefork worker) and kills its child
mid-run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import trio
from _services import Server, fresh_schema

from pitrio import UserMessage
from pitrio.harness import MessageEntry, PostgresSessionStore, Session
from pitrio.worker._jobs import (
    JOB_ENTRY,
    WorkerConfig,
    _job_states,
    make_app,
    record_interrupted,
    run_prompt_job,
    submit_prompt,
)

from ._factory import make_harness
from ._worker import worker_process

HERE = Path(__file__).parent


def _prompts(session: Session) -> list[str]:
    out = []
    for e in session.entries:
        if isinstance(e, MessageEntry) and isinstance(e.message, UserMessage):
            content = e.message.content
            out.append(content if isinstance(content, str) else content[0].text)  # type: ignore[union-attr]
    return out


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    pid, block = tmp_path / "pid", tmp_path / "block"
    monkeypatch.setenv("PITRIO_TEST_PID_FILE", str(pid))
    monkeypatch.setenv("PITRIO_TEST_BLOCK_FILE", str(block))
    return pid, block


async def test_a_key_runs_its_prompt_once(
    postgres_url: str, redis_url: str, files: tuple[Path, Path]
) -> None:
    config = WorkerConfig(
        postgres_url=postgres_url, events_url=redis_url, factory=make_harness, schema=fresh_schema()
    )
    with trio.fail_after(60):
        first = await run_prompt_job(config, "s1", "go", "key-1")
        again = await run_prompt_job(config, "s1", "go", "key-1")  # a duplicate delivery
        other = await run_prompt_job(config, "s1", "go on", "key-2")
    assert first == {"status": "done", "key": "key-1", "text": "finished"}
    assert again["status"] == "duplicate"
    assert other["status"] == "done"
    async with PostgresSessionStore(postgres_url, schema=config.schema) as store:
        session = await store.open("s1", read_only=True)
    assert _prompts(session) == ["go", "go on"]
    assert _job_states(session, "key-1") == ["started", "done"]


async def test_a_job_started_before_is_handed_to_the_interrupted_hook(
    postgres_url: str, redis_url: str, files: tuple[Path, Path]
) -> None:
    seen: list[str] = []

    async def hook(session: Any, harness: Any, key: str) -> Mapping[str, Any]:
        seen.append(key)  # where the harness's run recovery will resume the turn
        return {"status": "resumed-by-hook"}

    schema = fresh_schema()
    async with PostgresSessionStore(postgres_url, schema=schema) as store:
        session = await store.create(session_id="s2")
        await session.append_custom(JOB_ENTRY, {"key": "k", "state": "started"})
        await session.close()
    plain = WorkerConfig(
        postgres_url=postgres_url, events_url=redis_url, factory=make_harness, schema=schema
    )
    hooked = attrs_evolve(plain, on_interrupted=hook)
    recording = attrs_evolve(plain, on_interrupted=record_interrupted)
    with trio.fail_after(60):
        assert await run_prompt_job(hooked, "s2", "go", "k") == {"status": "resumed-by-hook"}
        assert seen == ["k"]
        # record_interrupted: recorded as interrupted; the prompt is never run.
        assert (await run_prompt_job(recording, "s2", "go", "k"))["status"] == "interrupted"
        assert (await run_prompt_job(plain, "s2", "go", "k"))["status"] == "duplicate"
        # Without a hook: the job started, but its prompt never reached the session: run it.
        async with PostgresSessionStore(postgres_url, schema=schema) as store:
            session = await store.create(session_id="s3")
            await session.append_custom(JOB_ENTRY, {"key": "k", "state": "started"})
            await session.close()
        done = await run_prompt_job(plain, "s3", "go", "k")
        assert done == {"status": "done", "key": "k", "text": "finished", "recovered": True}
    async with PostgresSessionStore(postgres_url, schema=schema) as store:
        session = await store.open("s2", read_only=True)
        third = await store.open("s3", read_only=True)
    assert _prompts(session) == []
    assert _job_states(session, "k") == ["started", "interrupted"]
    assert _prompts(third) == ["go"]
    assert _job_states(third, "k") == ["started", "done"]


def attrs_evolve(config: WorkerConfig, **changes: Any) -> WorkerConfig:
    import attrs

    return attrs.evolve(config, **changes)


async def _states(url: str, schema: str, sid: str, key: str) -> list[str]:
    async with PostgresSessionStore(url, schema=schema) as store:
        try:
            session = await store.open(sid, read_only=True)
        except Exception:
            return []
        return _job_states(session, key)


async def _wait_for_states(url: str, schema: str, sid: str, key: str, want: list[str]) -> None:
    while await _states(url, schema, sid, key) != want:  # noqa: ASYNC110 - another process
        await trio.sleep(0.2)


async def test_a_celery_job_whose_worker_died_is_redelivered_and_not_run_twice(
    postgres_server: Server, redis_url: str, files: tuple[Path, Path], tmp_path: Path
) -> None:
    pid_file, block_file = files
    schema = fresh_schema()
    url = postgres_server.url
    config = WorkerConfig(postgres_url=url, events_url=redis_url, factory=make_harness)
    app = make_app(redis_url, config, result_backend=redis_url)
    try:
        async with worker_process(postgres_server, redis_url, schema, tmp_path) as worker:
            with trio.fail_after(180):
                block_file.write_text("")
                submit_prompt(app, "killed", "go", key="k1")
                while not pid_file.exists():
                    assert worker.poll() is None, (tmp_path / "worker.log").read_text()
                    await trio.sleep(0.1)
                child = int(pid_file.read_text())
                assert child != worker.pid  # the prefork pool's child runs the job
                await _wait_for_states(url, schema, "killed", "k1", ["started"])
                os.kill(child, signal.SIGKILL)
                # The parent gives the job back; the next child finds it started and
                # continues the cut-off run (slow is not replay-safe: it is not run again,
                # its call ends as interrupted), so the prompt is not run a second time.
                await _wait_for_states(url, schema, "killed", "k1", ["started", "done"])
                block_file.unlink()
                result = submit_prompt(app, "fine", "go", key="k2")
                done = await trio.to_thread.run_sync(lambda: result.get(timeout=120))
                assert done == {"status": "done", "key": "k2", "text": "finished"}
                duplicate = submit_prompt(app, "fine", "go", key="k2")
                again = await trio.to_thread.run_sync(lambda: duplicate.get(timeout=120))
                assert again["status"] == "duplicate"
        async with PostgresSessionStore(url, schema=schema) as store:
            killed = await store.open("killed", read_only=True)
            fine = await store.open("fine", read_only=True)
        assert _prompts(killed) == ["go"]  # run once, cut off by the kill, then continued
        results = [
            e.message
            for e in killed.entries
            if isinstance(e, MessageEntry) and e.message.role == "toolResult"
        ]
        assert len(results) == 1  # the interrupted call, not a second run of slow
        assert "interrupted" in results[0].content[0].text
        assert killed.build_context().messages[-1].text == "finished"
        assert _prompts(fine) == ["go"]
        assert _job_states(fine, "k2") == ["started", "done"]
    finally:
        app.close()


def test_the_worker_command_says_what_it_needs() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PITRIO_")}
    done = subprocess.run(
        [sys.executable, "-m", "pitrio", "worker"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("pitrio worker: python -m pitrio worker needs PITRIO_BROKER_URL")
    assert "PITRIO_HARNESS_FACTORY" in done.stderr


async def test_an_abort_on_the_control_stream_stops_the_jobs_run(
    postgres_url: str, redis_url: str, files: tuple[Path, Path]
) -> None:
    """An abort naming the job's key (sent while its tool runs) aborts the run, which
    settles: the tool's call ends with an error result, the job records done. An abort
    for other keys is left alone."""
    from pitrio import ToolResultMessage
    from pitrio.worker import send_abort

    pid_file, block_file = files
    config = WorkerConfig(
        postgres_url=postgres_url, events_url=redis_url, factory=make_harness, schema=fresh_schema()
    )
    block_file.write_text("")
    results: list[dict[str, Any]] = []

    async def job() -> None:
        results.append(await run_prompt_job(config, "ab", "go", "k-abort"))

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(job)
            while not pid_file.exists():  # noqa: ASYNC110 - the tool started
                await trio.sleep(0.05)
            await send_abort(redis_url, "ab", ["another-key"])
            await trio.sleep(0.3)  # read by the job, which goes on
            assert results == []
            await send_abort(redis_url, "ab", ["k-abort"])
    assert block_file.exists()  # the tool never finished by itself
    assert results[0]["status"] == "done"
    async with PostgresSessionStore(postgres_url, schema=config.schema) as store:
        session = await store.open("ab", read_only=True)
    [result] = [
        e.message
        for e in session.entries
        if isinstance(e, MessageEntry) and isinstance(e.message, ToolResultMessage)
    ]
    assert result.is_error
    assert _job_states(session, "k-abort") == ["started", "done"]


def test_a_job_error_is_found_inside_nursery_groups() -> None:
    from pitrio.worker._jobs import _single

    inner = ValueError("x")
    assert _single(ExceptionGroup("a", [ExceptionGroup("b", [inner])])) is inner
    both = ExceptionGroup("a", [inner, KeyError("y")])
    assert _single(both) is both


def test_a_worker_killed_in_the_redelivery_sweep_holds_it_up_briefly() -> None:
    """kombu's sweep for the jobs of vanished workers takes a lock in Redis; a worker
    SIGKILLed while holding it stops every sweep until the lock expires. The lock lasts half
    the visibility timeout (at most kombu's 300 s), not 300 s behind a 6 s timeout."""
    config = WorkerConfig(
        postgres_url="postgresql://x", events_url="redis://x", factory=make_harness
    )
    quick = make_app("redis://127.0.0.1:1/0", config, visibility_timeout=6)
    slow = make_app("redis://127.0.0.1:1/0", config, visibility_timeout=3600)
    assert quick.conf.broker_transport_options["unacked_mutex_expire"] == 3
    assert slow.conf.broker_transport_options["unacked_mutex_expire"] == 300
