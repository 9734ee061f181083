"""A scripted OpenAI-compatible chat-completions server on loopback, for driving the CLI
in a subprocess (a real pseudo-terminal, or pipes) with ``--base-url``."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

Reply = list[dict[str, Any]]
"""The ``delta`` objects of one streamed answer, the last with ``finish_reason``; a
``{"wait": threading.Event}`` part holds the stream (already sent parts flushed) until
the test sets the event; a first part ``{"status": 503, "body": {...}, "headers": {...}}``
answers with that HTTP error instead."""


def text_reply(text: str) -> Reply:
    return [{"delta": {"role": "assistant", "content": text}}, {"finish": "stop"}]


def tool_reply(text: str, name: str, arguments: dict[str, Any], call_id: str = "c1") -> Reply:
    call = {
        "index": 0,
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }
    return [
        {"delta": {"role": "assistant", "content": text}},
        {"delta": {"tool_calls": [call]}},
        {"finish": "tool_calls"},
    ]


def last_user_text(body: dict[str, Any]) -> str:
    for message in reversed(body["messages"]):
        if message["role"] == "user":
            content = message["content"]
            if isinstance(content, str):
                return content
            return "".join(p.get("text", "") for p in content)
    return ""


class ChatServer:
    """Answers each request with ``script(body)``; keeps every request body and its
    headers."""

    def __init__(self, script: Callable[[dict[str, Any]], Reply]) -> None:
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(body)
                server.headers.append(dict(self.headers))
                reply = server.script(body)
                if reply and "status" in reply[0]:  # an HTTP error instead of a stream
                    error = reply[0]
                    payload = json.dumps(error.get("body", {})).encode()
                    self.send_response(error["status"])
                    for name, value in error.get("headers", {}).items():
                        self.send_header(name, value)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for part in reply:
                    if "wait" in part:
                        part["wait"].wait(30)
                        continue
                    if "finish" in part:
                        choice = {"index": 0, "delta": {}, "finish_reason": part["finish"]}
                    else:
                        choice = {"index": 0, "delta": part["delta"]}
                    chunk: dict[str, Any] = {"id": "x", "object": "chat.completion.chunk"}
                    chunk["choices"] = [choice]
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")

            def log_message(self, *args: Any) -> None:
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._http.serve_forever, args=(0.05,))
        self._thread.daemon = True

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._thread.join()


@pytest.fixture
def serve() -> Iterator[Callable[[Callable[[dict[str, Any]], Reply]], ChatServer]]:
    servers: list[ChatServer] = []

    def start(script: Callable[[dict[str, Any]], Reply]) -> ChatServer:
        server = ChatServer(script)
        server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    """An environment with no keys, and sessions, config and history under tmp_path."""
    import os

    keep = {k: v for k, v in os.environ.items() if k in {"PATH", "LANG", "LC_ALL", "SYSTEMROOT"}}
    return {
        **keep,
        "PITRIO_SESSIONS_DIR": str(tmp_path / "sessions"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "HOME": str(tmp_path / "home"),
        "TERM": "xterm",
        "PYTHONUNBUFFERED": "1",
    }


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    root.mkdir()
    (root / "notes.txt").write_text("first line\n")
    return root


def local_models_env(
    server: ChatServer, cli_env: dict[str, str], tmp_path: Path
) -> tuple[dict[str, str], Path]:
    """``cli_env`` with Pi's agent directory (its sessions too) under ``tmp_path``, whose
    ``models.json`` has a provider ``local`` on ``server`` with a key and two models,
    ``plain`` and ``r`` (one that reasons); and that directory."""
    agent_dir = tmp_path / "agent"
    agent_dir.mkdir()
    models = [
        {"id": "plain", "contextWindow": 128000, "maxTokens": 4096},
        {"id": "r", "reasoning": True, "contextWindow": 128000, "maxTokens": 4096},
    ]
    local = {"baseUrl": server.url, "api": "openai-completions", "apiKey": "k", "models": models}
    (agent_dir / "models.json").write_text(json.dumps({"providers": {"local": local}}))
    env = {k: v for k, v in cli_env.items() if k != "PITRIO_SESSIONS_DIR"}
    env |= {"PI_CODING_AGENT_DIR": str(agent_dir)}
    return env, agent_dir
