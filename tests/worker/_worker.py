"""The worker process the tests start: ``python -m pitrio worker`` (a Celery prefork
pool of one child) with the harness factory of ``_factory.py``, stopped (SIGTERM, then
SIGKILL) when the block ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio
from _services import Server

HERE = Path(__file__).parent


@asynccontextmanager
async def worker_process(
    postgres: Server, redis_url: str, schema: str, tmp_path: Path
) -> AsyncIterator[trio.Process]:
    env = {
        **os.environ,
        "PITRIO_BROKER_URL": redis_url,
        "PITRIO_POSTGRES_URL": postgres.url,
        "PITRIO_POSTGRES_SCHEMA": schema,
        "PITRIO_HARNESS_FACTORY": "_factory:make_harness",
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    log = (tmp_path / "worker.log").open("w")
    worker = await trio.lowlevel.open_process(
        [sys.executable, "-m", "pitrio", "worker", "--pool=prefork", "--concurrency=1"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=tmp_path,
    )
    try:
        yield worker
    finally:
        with trio.CancelScope(shield=True):
            worker.send_signal(signal.SIGTERM)
            with trio.move_on_after(30):
                await worker.wait()
            if worker.returncode is None:
                worker.kill()
                await worker.wait()
        log.close()
