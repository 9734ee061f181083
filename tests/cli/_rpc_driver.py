"""``node/driver.mjs`` in Python, for machines without Node: the same steps through a
small port of Pi's ``RpcClient`` (``dist/modes/rpc/rpc-client.js``: ``req_N`` ids,
``getData`` raising on a failed response, ``waitForIdle`` ending at ``agent_settled``),
so that pitrio's transcript can still be compared with the recorded one of Pi.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

UNDEFINED: Final = object()
"""A JavaScript ``undefined`` result: ``JSON.stringify`` leaves the key out."""


class RpcFailure(Exception):
    """A failed response, as ``getData`` throws it."""


class PyRpcClient:
    """Pi's ``RpcClient`` over a subprocess's pipes."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path, args: list[str]) -> None:
        command = [*argv, "--mode", "rpc", "--provider", "local", "--model", "scripted", *args]
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            encoding="utf-8",
            env=env,
            cwd=cwd,
        )
        self.request_id = 0
        self.lock = threading.Condition()
        self.pending: dict[str, dict[str, Any] | None] = {}
        self.listeners: list[Callable[[dict[str, Any]], None]] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        time.sleep(0.1)

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            data = json.loads(line)
            with self.lock:
                if data.get("type") == "response" and data.get("id") in self.pending:
                    self.pending[data["id"]] = data
                    self.lock.notify_all()
                    continue
                for listener in list(self.listeners):
                    listener(data)
                self.lock.notify_all()

    def on_event(self, listener: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
        with self.lock:
            self.listeners.append(listener)

        def stop() -> None:
            with self.lock:
                if listener in self.listeners:
                    self.listeners.remove(listener)

        return stop

    def send(self, command: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.request_id += 1
        request_id = f"req_{self.request_id}"
        full = {k: v for k, v in command.items() if v is not UNDEFINED} | {"id": request_id}
        with self.lock:
            self.pending[request_id] = None
        self.process.stdin.write(json.dumps(full, separators=(",", ":")) + "\n")
        self.process.stdin.flush()
        with self.lock:
            if not self.lock.wait_for(lambda: self.pending[request_id] is not None, 30):
                msg = f"Timeout waiting for response to {command['type']}"
                raise RpcFailure(msg)
            response = self.pending.pop(request_id)
        assert response is not None
        return response

    def data(self, command: dict[str, Any]) -> Any:
        response = self.send(command)
        if not response["success"]:
            raise RpcFailure(response["error"])
        return response.get("data", UNDEFINED)

    def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 60) -> None:
        seen = threading.Event()

        def listener(event: dict[str, Any]) -> None:
            if predicate(event):
                seen.set()

        stop = self.on_event(listener)
        try:
            if not seen.wait(timeout):
                msg = "Timeout waiting for an event"
                raise RpcFailure(msg)
        finally:
            stop()

    def idle(self) -> threading.Event:
        """``waitForIdle()``'s promise: set at the next ``agent_settled``."""
        settled = threading.Event()

        def listener(event: dict[str, Any]) -> None:
            if event.get("type") == "agent_settled":
                settled.set()

        stop = self.on_event(listener)
        settled.stop = stop  # type: ignore[attr-defined]  # removed once waited for
        return settled

    def await_idle(self, settled: threading.Event) -> None:
        try:
            if not settled.wait(60):
                msg = "Timeout waiting for agent to become idle"
                raise RpcFailure(msg)
        finally:
            settled.stop()  # type: ignore[attr-defined]

    def prompt_and_wait(self, message: str) -> int:
        events: list[dict[str, Any]] = []
        stop = self.on_event(events.append)
        settled = self.idle()
        try:
            self.send({"type": "prompt", "message": message})
            self.await_idle(settled)
        finally:
            stop()
        return len(events)

    def stop(self) -> None:
        """SIGTERM, as ``RpcClient.stop()``; the pipes closed."""
        self.process.terminate()
        try:
            self.process.wait(timeout=1)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        self.reader.join(timeout=10)
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()


def run(argv: list[str], env: dict[str, str], cwd: Path, args: list[str]) -> dict[str, Any]:
    """The steps of ``driver.mjs`` (keep both in the same order)."""
    client = PyRpcClient(argv, env, cwd, args)
    steps: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    responses: list[dict[str, Any]] = []
    timings: list[float] = []
    client.on_event(events.append)
    send = client.send

    def recording_send(command: dict[str, Any]) -> dict[str, Any]:
        response = send(command)
        responses.append(response)
        return response

    client.send = recording_send  # type: ignore[method-assign]  # as driver.mjs wraps send

    def step(name: str, fn: Callable[[], Any]) -> Any:
        nonlocal events, responses
        result: Any = UNDEFINED
        error = None
        started = time.perf_counter()
        try:
            result = fn()
        except RpcFailure as exc:
            error = str(exc).split("\n")[0]
        ms = (time.perf_counter() - started) * 1000
        time.sleep(0.03)
        with client.lock:
            record: dict[str, Any] = {"step": name, "ms": ms, "responses": responses}
            if result is not UNDEFINED:
                record["result"] = result
            if error is not None:
                record["error"] = error
            record["events"] = events
            steps.append(record)
            client.listeners.remove(events.append)
            events, responses = [], []
            client.listeners.insert(0, events.append)
        return None if result is UNDEFINED else result

    def void(command: dict[str, Any]) -> Callable[[], Any]:
        return lambda: (client.send(command), UNDEFINED)[1]

    def data(command: dict[str, Any], key: str | None = None) -> Callable[[], Any]:
        def call() -> Any:
            value = client.data(command)
            if key is not None:
                return value.get(key, UNDEFINED) if isinstance(value, dict) else UNDEFINED
            return value

        return call

    def timed_prompt() -> int:
        started = time.perf_counter()
        count = client.prompt_and_wait("hello")
        timings.append((time.perf_counter() - started) * 1000)
        return count

    def prompt_until_the_tool_runs(message: str) -> None:
        """Send the prompt, return once its tool runs (queued messages then wait for the
        tool, rather than racing the run's first steering poll)."""
        running = threading.Event()

        def listener(event: dict[str, Any]) -> None:
            if event.get("type") == "tool_execution_start":
                running.set()

        stop = client.on_event(listener)
        try:
            client.send({"type": "prompt", "message": message})
            if not running.wait(60):
                msg = "Timeout waiting for the tool to start"
                raise RpcFailure(msg)
        finally:
            stop()

    def steer_and_follow_up() -> Any:
        settled = client.idle()
        prompt_until_the_tool_runs("bash sleep 1; echo slept")
        client.send({"type": "steer", "message": "steered"})
        client.send({"type": "follow_up", "message": "later"})
        client.await_idle(settled)
        return UNDEFINED

    def clear_queue() -> Any:
        settled = client.idle()
        prompt_until_the_tool_runs("bash sleep 1; echo again")
        client.send({"type": "follow_up", "message": "queued"})
        cleared = client.data({"type": "clear_queue"})
        client.await_idle(settled)
        return cleared

    def abort() -> Any:
        seen = threading.Event()

        def delta(event: dict[str, Any]) -> None:
            ame = event.get("assistantMessageEvent") or {}
            if event.get("type") == "message_update" and ame.get("type") == "text_delta":
                seen.set()

        stop = client.on_event(delta)
        try:
            client.send({"type": "prompt", "message": "hang"})
            if not seen.wait(30):
                msg = "timeout waiting for an event"
                raise RpcFailure(msg)
        finally:
            stop()
        client.send({"type": "abort"})
        return UNDEFINED

    def roles() -> Any:
        return [m["role"] for m in client.data({"type": "get_messages"})["messages"]]

    try:
        first = step("getState", data({"type": "get_state"}))
        step("getAvailableModels", data({"type": "get_available_models"}, "models"))
        step(
            "getAvailableThinkingLevels",
            data({"type": "get_available_thinking_levels"}, "levels"),
        )
        step("setThinkingLevel", void({"type": "set_thinking_level", "level": "high"}))
        step("cycleThinkingLevel", data({"type": "cycle_thinking_level"}))
        step("cycleModel", data({"type": "cycle_model"}))
        step("setModel", data({"type": "set_model", "provider": "local", "modelId": "scripted"}))
        step(
            "setModel unknown",
            data({"type": "set_model", "provider": "local", "modelId": "no-such-model"}),
        )
        step("setSteeringMode", void({"type": "set_steering_mode", "mode": "all"}))
        step("setFollowUpMode", void({"type": "set_follow_up_mode", "mode": "one-at-a-time"}))
        step("setSessionName", void({"type": "set_session_name", "name": "rpc work"}))
        step("getState", data({"type": "get_state"}))
        step("promptAndWait", timed_prompt)
        step("promptAndWait tool", lambda: client.prompt_and_wait("read notes.txt"))
        step("getLastAssistantText", data({"type": "get_last_assistant_text"}, "text"))
        step("steer and followUp", steer_and_follow_up)
        step("clearQueue", clear_queue)
        step("abort", abort)
        step("getLastAssistantText", data({"type": "get_last_assistant_text"}, "text"))
        step("promptAndWait error", lambda: client.prompt_and_wait("fail"))
        step("setAutoRetry", void({"type": "set_auto_retry", "enabled": False}))
        step("promptAndWait no retry", lambda: client.prompt_and_wait("flaky one"))
        step("setAutoRetry", void({"type": "set_auto_retry", "enabled": True}))
        step("promptAndWait retry", lambda: client.prompt_and_wait("flaky two"))
        step("abortRetry", void({"type": "abort_retry"}))
        step("bash", data({"type": "bash", "command": "echo hi; echo there"}))
        step("abortBash", void({"type": "abort_bash"}))
        step("getMessages", roles)
        step("getSessionStats", data({"type": "get_session_stats"}))
        step("getCommands", data({"type": "get_commands"}, "commands"))
        step("promptAndWait big", lambda: client.prompt_and_wait("big 90000"))
        step("compact", data({"type": "compact", "customInstructions": UNDEFINED}))
        step("compact again", data({"type": "compact", "customInstructions": UNDEFINED}))
        step("getSessionStats", data({"type": "get_session_stats"}))
        forkable = step("getForkMessages", data({"type": "get_fork_messages"}, "messages"))
        step("getEntries", data({"type": "get_entries", "since": UNDEFINED}))
        step("getTree", data({"type": "get_tree"}))
        entry = forkable[1]["entryId"] if forkable and len(forkable) > 1 else "none"
        step("fork", data({"type": "fork", "entryId": entry}))
        step("getMessages", roles)
        step("fork unknown", data({"type": "fork", "entryId": "no-such-entry"}))
        step("clone", data({"type": "clone"}))
        session_file = (first or {}).get("sessionFile", "none")
        step("switchSession", data({"type": "switch_session", "sessionPath": session_file}))
        step("getState", data({"type": "get_state"}))
        step("newSession", data({"type": "new_session", "parentSession": UNDEFINED}))
        step("compact empty", data({"type": "compact", "customInstructions": UNDEFINED}))
        step("setAutoCompaction", void({"type": "set_auto_compaction", "enabled": False}))
        step("getState", data({"type": "get_state"}))
        html = str(cwd / "session.html")
        step("exportHtml", data({"type": "export_html", "outputPath": html}))
        step("promptAndWait", lambda: client.prompt_and_wait("hello again"))
    finally:
        client.stop()
    return {"steps": steps, "promptAndWaitMs": timings}
