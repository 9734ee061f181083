"""``python -m pitrio -c -p`` resumes a run its last process was killed in, then prompts.

``pitrio -p one`` is SIGKILLed while its request is out (a loopback chat server holds the
answer); ``pitrio -c -p two`` says the last run was interrupted, asks again for "one" (the
recovery), then sends "two" with the whole conversation.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest


class _Server:
    """Holds its first request open; answers the others ``answer to <last user text>``."""

    def __init__(self) -> None:
        self.requests: list[list[str]] = []
        self.first = threading.Event()
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                users = [
                    m["content"]
                    if isinstance(m["content"], str)
                    else "".join(p.get("text", "") for p in m["content"])
                    for m in body["messages"]
                    if m["role"] == "user"
                ]
                server.requests.append(users)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                if len(server.requests) == 1:
                    server.first.set()
                    server.release.wait(60)
                    return
                for choice in (
                    {"delta": {"role": "assistant", "content": f"answer to {users[-1]}"}},
                    {"delta": {}, "finish_reason": "stop"},
                ):
                    chunk = {"id": "x", "object": "chat.completion.chunk", "choices": [choice]}
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")

            def log_message(self, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.http.serve_forever, args=(0.05,), daemon=True)


@pytest.fixture
def server() -> Iterator[_Server]:
    s = _Server()
    s.thread.start()
    yield s
    s.release.set()
    s.http.shutdown()
    s.http.server_close()
    s.thread.join()


def test_pitrio_continue_resumes_the_interrupted_run_before_the_prompt(
    server: _Server, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    keep = {k: v for k, v in os.environ.items() if k in {"PATH", "LANG", "LC_ALL"}}
    env = {
        **keep,
        "PITRIO_SESSIONS_DIR": str(tmp_path / "sessions"),
        "PI_CODING_AGENT_DIR": str(tmp_path / "agent"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "HOME": str(tmp_path / "home"),
        "PYTHONUNBUFFERED": "1",
    }
    argv = [sys.executable, "-m", "pitrio", "--cwd", str(work), "--base-url", server.url]
    argv += ["--model", "m"]
    first = subprocess.Popen(
        [*argv, "-p", "one"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        assert server.first.wait(60), "the first pitrio never sent its request"
    finally:
        first.send_signal(signal.SIGKILL)
        _, err = first.communicate(timeout=60)
    assert first.returncode == -signal.SIGKILL, err.decode()

    second = subprocess.run(
        [*argv, "-c", "-p", "two"],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert second.returncode == 0, second.stderr
    assert (
        "The last run of this session was interrupted (at assistant.effect_pending); "
        "it is resumed before the next prompt." in second.stderr
    )
    # The interrupted request made again, then the new prompt with everything before it.
    assert server.requests == [["one"], ["one"], ["one", "two"]]
    assert "answer to two" in second.stdout
