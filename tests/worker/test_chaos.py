"""Chaos and load on loopback: Celery workers SIGKILLed at random while users send
prompts with tools; every prompt completes exactly once (no lost turn, no repeated unsafe
tool effect), every session loads, and a sample loads in Pi's own harness
(``_chaos.py`` holds the run and the checks).

Bounded for the test run: ``PITRIO_CHAOS_SESSIONS`` sessions (default 20) of
``PITRIO_CHAOS_PROMPTS`` prompts (default 3) on ``PITRIO_CHAOS_WORKERS`` workers (default
3), a worker killed every 1.5-3 s. ``python -m benchmarks.bench_worker --chaos`` runs the
full 200 sessions."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio
from _services import Server, fresh_schema
from harness.conftest import pi_node_modules  # noqa: F401 - the fixture, for Pi's check
from harness.test_session_interop import pitrio_view, run_pi

from pitrio import wire

from ._chaos import Fleet, check, copy_to_jsonl, drive, samples, worker_env

SESSIONS = int(os.environ.get("PITRIO_CHAOS_SESSIONS", "20"))
PROMPTS = int(os.environ.get("PITRIO_CHAOS_PROMPTS", "3"))
WORKERS = int(os.environ.get("PITRIO_CHAOS_WORKERS", "3"))


@pytest.mark.timeout(400)
async def test_killed_workers_lose_no_turn_and_repeat_no_unsafe_effect(
    postgres_server: Server, redis_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Then a sample of the sessions (those with a call cut off by a kill first), copied
    message by message into Pi's harness format, loads in Pi's own harness as it is."""
    schema = fresh_schema()
    effects = tmp_path / "effects"
    env = worker_env(redis_url, postgres_server.url, schema, effects, tool_seconds=0.2)
    fleet = Fleet(WORKERS, env, tmp_path)
    try:
        with trio.fail_after(360):
            await fleet.start_all()
            report = await drive(
                redis_url,
                redis_url,
                fleet=fleet,
                sessions=SESSIONS,
                prompts=PROMPTS,
                kill_every=(1.5, 3.0),
                seed=int(os.environ.get("PITRIO_CHAOS_SEED", "1")),
                give_up_after=300,
            )
        assert fleet.dead() == []
    finally:
        await fleet.stop()
    assert report.failures == [], fleet.logs()
    assert len(report.latencies) == SESSIONS * PROMPTS
    assert report.kills >= 2  # the run lasted long enough for kills to land
    problems = await check(postgres_server.url, schema, effects, sessions=SESSIONS, prompts=PROMPTS)
    assert problems == []
    picked = await samples(postgres_server.url, schema, sessions=SESSIONS)
    pairs = await copy_to_jsonl(postgres_server.url, schema, picked, tmp_path / "pi")
    node_modules = request.getfixturevalue("pi_node_modules")  # Node: skips, or fails in CI
    for source, copy in pairs:
        wanted = wire.messages_to_wire(source.build_context().messages)
        assert pitrio_view(copy)["messages"] == wanted
        path = next((tmp_path / "pi").rglob(f"*{copy.id}*.jsonl"))
        pi = await run_pi(node_modules, "read", str(path))
        assert pi["messages"] == wanted
