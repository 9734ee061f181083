"""MCP servers for the tests (``_servers.py``), started over stdio or HTTP on loopback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pitrio.mcp import HttpServer, StdioServer

SERVERS = Path(__file__).with_name("_servers.py")


def stdio(kind: str, name: str | None = None) -> StdioServer:
    """The test server ``kind`` as a child process."""
    return StdioServer(name=name or kind, command=sys.executable, args=[str(SERVERS), kind])


def children() -> set[int]:
    """The live (not zombie) child processes of this process."""
    me = os.getpid()
    found: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == me and fields[0] != "Z":
            found.add(int(entry))
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def http_server() -> Iterator[Callable[[str], HttpServer]]:
    """Starts a test server on 127.0.0.1 over streamable HTTP; stopped after the test."""
    started: list[subprocess.Popen[bytes]] = []

    def start(kind: str) -> HttpServer:
        port = _free_port()
        process = subprocess.Popen(
            [sys.executable, str(SERVERS), kind, "--http", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        started.append(process)
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the {kind} HTTP server did not start") from None
                time.sleep(0.05)
        return HttpServer(name=f"{kind}-http", url=f"http://127.0.0.1:{port}/mcp")

    yield start
    for process in started:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
