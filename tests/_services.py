"""Real servers for the tests: PostgreSQL and Redis, Debian's packages, started per run.

:func:`postgres_server` and :func:`redis_server` are session-scoped fixtures: each
installs its package with ``apt-get`` when the binaries are missing (as root, one
installer at a time under a file lock, as ``tests/web/_cdp.py`` installs chromium),
starts one server on 127.0.0.1 and a free port in a temporary directory, and stops it
after the run (also when a test failed). PostgreSQL refuses to run as root: as root, the
cluster belongs to the ``postgres`` system user the package creates. Where the package
cannot be installed at all the tests skip, loudly; with ``CI=true`` they fail instead.

:func:`postgres_url` gives each test a fresh schema on the shared server
(:func:`fresh_schema`); :func:`redis_url` the Redis server, emptied before the test.
``tests/conftest.py`` registers this module as a plugin (``pytest_plugins``), so any test
can ask for them. Other code (the benchmarks) can start a server with :func:`start_postgres` /
:func:`start_redis`, context managers.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import attrs
import pytest

_LOCK: Final = "/tmp/pitrio-services-install.lock"


def _fail_or_skip(reason: str) -> None:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(reason)
    pytest.skip(reason)


def _find(binary: str) -> str | None:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{binary}"))
    if found:
        return found[-1]  # the newest version installed
    return shutil.which(binary)


def ensure_package(package: str, binary: str) -> str | None:
    """Install Debian's ``package`` (with apt-get, as root) unless ``binary`` is found;
    None when it is there, else why it cannot be."""
    if _find(binary) is not None:
        return None
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        return (
            f"these tests need Debian's {package} ({binary} is missing), and cannot install "
            f"it here (needs root and apt-get): run `apt-get install -y {package}`"
        )
    with open(_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one installer at a time (parallel runs)
        if _find(binary) is not None:
            return None
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        command = [apt, "install", "-y", package]
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, check=False, timeout=900
        )
        if done.returncode != 0:  # a fresh machine may have no package lists yet
            subprocess.run([apt, "update"], env=env, capture_output=True, check=False, timeout=900)
            done = subprocess.run(
                command, env=env, capture_output=True, text=True, check=False, timeout=900
            )
        if done.returncode != 0 or _find(binary) is None:
            return (
                f"`apt-get install -y {package}` failed ({done.returncode}); install Debian's "
                f"{package} to run these tests:\n{done.stderr[-2000:]}"
            )
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@attrs.frozen
class Server:
    """A running server: where to reach it."""

    url: str
    port: int
    directory: Path


def _run_as() -> tuple[int | None, int | None]:
    """The user and group to run PostgreSQL as: ``postgres`` when we are root."""
    if os.geteuid() != 0:
        return None, None
    try:
        user = pwd.getpwnam("postgres")
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "postgres"],
            check=True,
            capture_output=True,
            timeout=60,
        )
        user = pwd.getpwnam("postgres")
    return user.pw_uid, user.pw_gid


@contextlib.contextmanager
def start_postgres() -> Iterator[Server]:
    """A PostgreSQL cluster in a temporary directory on 127.0.0.1 and a free port, user
    ``pitrio`` with trust authentication; stopped and removed on exit."""
    initdb, pg_ctl = _find("initdb"), _find("pg_ctl")
    assert initdb is not None
    assert pg_ctl is not None
    uid, gid = _run_as()
    directory = Path(tempfile.mkdtemp(prefix="pitrio-pg-"))
    if uid is not None and gid is not None:
        os.chown(directory, uid, gid)
    data = directory / "data"
    log = directory / "server.log"

    def run(*command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            command,
            user=uid,
            group=gid,
            extra_groups=[] if uid is not None else None,
            cwd=directory,
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )

    try:
        done = run(
            initdb, "-D", str(data), "-U", "pitrio", "--auth=trust", "-E", "UTF8", "--no-sync"
        )
        if done.returncode != 0:
            msg = f"initdb failed ({done.returncode}): {done.stderr[-2000:]}"
            raise RuntimeError(msg)
        port = free_port()
        options = (
            f"-c listen_addresses=127.0.0.1 -p {port} -k {directory} "
            "-c max_connections=200 -c shared_buffers=32MB"
        )
        done = run(pg_ctl, "-D", str(data), "-l", str(log), "-o", options, "-w", "start")
        if done.returncode != 0:
            server_log = log.read_text() if log.exists() else ""
            msg = f"pg_ctl start failed ({done.returncode}): {done.stderr}\n{server_log[-2000:]}"
            raise RuntimeError(msg)
        try:
            yield Server(f"postgresql://pitrio@127.0.0.1:{port}/postgres", port, directory)
        finally:
            run(pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop", timeout=60)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@contextlib.contextmanager
def start_redis() -> Iterator[Server]:
    """A redis-server on 127.0.0.1 and a free port, no persistence; stopped on exit."""
    binary = _find("redis-server")
    assert binary is not None
    directory = Path(tempfile.mkdtemp(prefix="pitrio-redis-"))
    port = free_port()
    command = [
        binary,
        "--bind", "127.0.0.1",
        "--port", str(port),
        "--dir", str(directory),
        "--save", "",
        "--appendonly", "no",
        "--protected-mode", "yes",
    ]  # fmt: skip
    log = (directory / "server.log").open("w")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                msg = (
                    f"redis-server ended ({process.returncode}): "
                    + (directory / "server.log").read_text()[-2000:]
                )
                raise RuntimeError(msg)
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if time.monotonic() > deadline:
                msg = "redis-server did not listen within 30 s"
                raise RuntimeError(msg)
            time.sleep(0.05)
        yield Server(f"redis://127.0.0.1:{port}/0", port, directory)
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=20)
        log.close()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Server]:
    """One PostgreSQL server for the whole run (installed first if need be)."""
    problem = ensure_package("postgresql", "initdb")
    if problem is not None:
        _fail_or_skip(problem)
    with start_postgres() as server:
        yield server


def fresh_schema() -> str:
    return f"t_{uuid.uuid4().hex[:16]}"


@pytest.fixture
def postgres_url(postgres_server: Server) -> str:
    """The server's URL; pair it with :func:`fresh_schema` for a store of one's own."""
    return postgres_server.url


@pytest.fixture(scope="session")
def redis_server() -> Iterator[Server]:
    """One redis-server for the whole run (installed first if need be)."""
    problem = ensure_package("redis-server", "redis-server")
    if problem is not None:
        _fail_or_skip(problem)
    with start_redis() as server:
        yield server


@pytest.fixture
def redis_url(redis_server: Server) -> str:
    """The server's URL, its database emptied first."""
    import redis

    client = redis.Redis.from_url(redis_server.url)
    try:
        client.flushdb()
    finally:
        client.close()
    return redis_server.url
