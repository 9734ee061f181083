"""``--mode rpc``: Pi's coding-agent RPC protocol on stdin / stdout (``docs/rpc.md``).

Each command is one JSON object on one line (split on LF only; a trailing CR is
dropped), with an optional ``id`` echoed in its response
``{"id", "type": "response", "command", "success", "data" | "error"}``. Events are
written as they happen, in the shapes of Pi's json mode
(:class:`pitrio.cli._json_mode.PiEvents`: ``agent_settled``, ``queue_update``,
``compaction_*``, ``auto_retry_*``, delta-only ``message_update``), plus
``bash_execution_update``, ``thinking_level_changed`` and ``session_info_changed``.

All 33 commands of Pi's ``RpcCommand`` union are answered. A ``prompt`` is answered
once it is accepted, before its events; a command that waits (``compact``, ``bash``,
``abort``, the session switches) runs beside the reading of the next ones, as in Pi.
``export_html`` answers that pitrio has no HTML export yet. With ``--no-session`` the
session lives in memory, as Pi's does.

Consent: where pitrio asks before ``bash``, ``write`` or ``edit`` runs (no ``--yes``,
no policy allowing it), the client is asked with Pi's extension UI sub-protocol, an
``extension_ui_request`` with ``method: "confirm"`` answered by an
``extension_ui_response`` (``confirmed``, or ``cancelled``). An abort declines it.

End of input waits for the running prompt, then exits (Pi exits at once).
"""

from __future__ import annotations

import codecs
import contextlib
import datetime
import json
import os
import signal
import subprocess
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, BinaryIO, Final, TextIO, get_args

import attrs
import trio

from pitrio import (
    AssistantMessage,
    ImageContent,
    Model,
    TextContent,
    ThinkingLevel,
    UserMessage,
    wire,
)
from pitrio.harness import (
    BashExecutionMessage,
    BranchSummaryEntry,
    CompactionEntry,
    CompactionSettings,
    HarnessEvent,
    InMemorySessionStore,
    MessageEntry,
    Session,
    SessionEntry,
    SessionError,
    Settled,
    ToolCallEvent,
    estimate_context_tokens,
    expand_prompt_template,
    prepare_compaction,
)

from ._app import App
from ._args import EXIT_OK
from ._errors import RpcCommandError
from ._json_mode import (
    ALREADY_COMPACTED,
    NOTHING_TO_COMPACT,
    PiEvents,
    compaction_error,
    compaction_result,
    dumps,
    pi_message,
    pi_messages,
)

__all__ = ["model_to_pi", "run_rpc"]

THINKING_LEVELS: Final[tuple[str, ...]] = (
    "off",
    "minimal",
    "low",
    "medium",
    "high",
    "xhigh",
    "max",
)
_QUEUE_MODES: Final = ("all", "one-at-a-time")
_BASH_MAX_BYTES: Final = 50 * 1024
_BASH_MAX_LINES: Final = 2000
_BUSY: Final = (
    "Agent is already processing. Specify streamingBehavior ('steer' or 'followUp') "
    "to queue the message."
)
_COMPACTING: Final = (
    "Cannot submit a prompt while compaction is in progress. Wait for compaction to "
    "finish and retry."
)


def model_to_pi(model: Model) -> dict[str, Any]:
    """A model as Pi's RPC mode sends it: camelCase keys, absent optional fields left out."""
    data: dict[str, Any] = {}
    for key, value in wire.unstructure(model).items():
        if value is None:
            continue
        if key == "cost":
            value = {_camel(k): v for k, v in value.items()}
        data[_camel(key)] = value
    return data


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def supported_thinking_levels(model: Model) -> list[str]:
    """pi-ai's ``getSupportedThinkingLevels``."""
    if not model.reasoning:
        return ["off"]
    mapping = model.thinking_level_map or {}
    levels = []
    for level in THINKING_LEVELS:
        if level in mapping and mapping[level] is None:
            continue
        if level in ("xhigh", "max") and level not in mapping:
            continue
        levels.append(level)
    return levels


def clamp_thinking_level(model: Model, level: str) -> str:
    """pi-ai's ``clampThinkingLevel``: the level, else the next supported one up, else down."""
    available = supported_thinking_levels(model)
    if level in available:
        return level
    if level not in THINKING_LEVELS:
        return available[0] if available else "off"
    index = THINKING_LEVELS.index(level)
    for candidate in (*THINKING_LEVELS[index:], *reversed(THINKING_LEVELS[:index])):
        if candidate in available:
            return candidate
    return available[0] if available else "off"


def _iso(ms: int) -> str:
    when = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def entry_to_pi(entry: SessionEntry, session: Session) -> dict[str, Any]:
    """A session entry in the shape of Pi's session format 3 (``session-format.md``)."""
    head = {"id": entry.id, "parentId": entry.parent_id, "timestamp": _iso(entry.timestamp)}
    if isinstance(entry, MessageEntry):
        return {"type": "message", **head, "message": pi_message(entry.message)}
    if isinstance(entry, CompactionEntry):
        first_kept = None
        if entry.retained_tail:
            for candidate in session.get_branch(entry.parent_id):
                if getattr(candidate, "message", None) == entry.retained_tail[0]:
                    first_kept = candidate.id
                    break
        data: dict[str, Any] = {
            "type": "compaction",
            **head,
            "summary": entry.summary,
            "firstKeptEntryId": first_kept,
            "tokensBefore": entry.tokens_before,
        }
        if entry.details is not None:
            data["details"] = entry.details
        if entry.usage is not None:
            data["usage"] = wire.unstructure(entry.usage)
        if entry.from_hook:
            data["fromHook"] = True
        return data
    if isinstance(entry, BranchSummaryEntry):
        data = {"type": "branch_summary", **head, "fromId": entry.from_id, "summary": entry.summary}
        if entry.details is not None:
            data["details"] = entry.details
        if entry.usage is not None:
            data["usage"] = wire.unstructure(entry.usage)
        return data
    return {"type": "custom", **head, "customType": entry.custom_type, "data": entry.data}


def _text_of(message: Any) -> str:
    return "".join(
        block.text for block in getattr(message, "content", ()) if isinstance(block, TextContent)
    )


def _read_lines(stdin: TextIO) -> Callable[[], str | None]:
    """A blocking reader of LF-framed lines (Pi's strict JSONL: U+2028 is no newline)."""
    raw: BinaryIO | None = getattr(stdin, "buffer", None)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def read_line() -> str | None:
        if raw is not None:
            data = raw.readline()
            if not data:
                return None
            line = decoder.decode(data)
        else:
            line = stdin.readline()
            if not line:
                return None
        return line.removesuffix("\n").removesuffix("\r")

    return read_line


async def run_rpc(app: App, stdin: TextIO, out: TextIO) -> int:
    """Serve commands from ``stdin`` until it ends; returns the exit status."""
    if app.session is None:  # --no-session: Pi's in-memory session
        await app.switch_session(await InMemorySessionStore().create(cwd=app.cwd))
    clamped = clamp_thinking_level(app.model, app.thinking)
    if clamped != app.thinking:  # Pi's session starts with the level clamped to the model
        await app.set_thinking(clamped)  # type: ignore[arg-type]  # one of the levels
    read_line = _read_lines(stdin)
    async with trio.open_nursery() as nursery:
        server = _RpcServer(app, out, nursery)
        while True:
            line = await trio.to_thread.run_sync(read_line, abandon_on_cancel=True)
            if line is None:
                break
            if line.strip():
                await server.handle_line(line)
        server.input_ended()
        await server.wait_for_commands()
        await app.harness.wait_for_idle()
        nursery.cancel_scope.cancel(reason="end of input")
    return EXIT_OK


Handler = Callable[[dict[str, Any]], Awaitable[Any]]


class _RpcServer:
    """One RPC connection: the commands, the event lines, the pending UI requests."""

    def __init__(self, app: App, out: TextIO, nursery: trio.Nursery) -> None:
        self.app = app
        self.out = out
        self.nursery = nursery
        self.events = PiEvents(self.write, harness=lambda: app.harness, session=lambda: app.session)
        app.subscribe(self._on_event)
        app.consent.ask = self.ask_consent
        self.pending_ui: dict[str, trio.MemorySendChannel[dict[str, Any]]] = {}
        self.bash_scopes: set[trio.CancelScope] = set()
        self.pending_bash: list[BashExecutionMessage] = []
        self.manual_compaction: trio.CancelScope | None = None
        self.running = 0
        self.idle = trio.Event()
        self.idle.set()
        self.closed = False
        self.handlers: dict[str, Handler] = {
            "prompt": self.prompt,
            "steer": self.steer,
            "follow_up": self.follow_up,
            "abort": self.abort,
            "clear_queue": self.clear_queue,
            "new_session": self.new_session,
            "get_state": self.get_state,
            "set_model": self.set_model,
            "cycle_model": self.cycle_model,
            "get_available_models": self.get_available_models,
            "set_thinking_level": self.set_thinking_level,
            "cycle_thinking_level": self.cycle_thinking_level,
            "get_available_thinking_levels": self.get_available_thinking_levels,
            "set_steering_mode": self.set_steering_mode,
            "set_follow_up_mode": self.set_follow_up_mode,
            "compact": self.compact,
            "set_auto_compaction": self.set_auto_compaction,
            "set_auto_retry": self.set_auto_retry,
            "abort_retry": self.abort_retry,
            "bash": self.bash,
            "abort_bash": self.abort_bash,
            "get_session_stats": self.get_session_stats,
            "export_html": self.export_html,
            "switch_session": self.switch_session,
            "fork": self.fork,
            "clone": self.clone,
            "get_fork_messages": self.get_fork_messages,
            "get_entries": self.get_entries,
            "get_tree": self.get_tree,
            "get_last_assistant_text": self.get_last_assistant_text,
            "set_session_name": self.set_session_name,
            "get_messages": self.get_messages,
            "get_commands": self.get_commands,
        }
        # Commands that wait run beside the reading of the next ones (Pi handles each
        # line without waiting for the previous one).
        self.concurrent = {
            "abort",
            "new_session",
            "compact",
            "bash",
            "switch_session",
            "fork",
            "clone",
            "set_model",
            "cycle_model",
        }

    # -- output ---------------------------------------------------------------------------

    def write(self, data: dict[str, Any]) -> None:
        self.out.write(dumps(data) + "\n")
        self.out.flush()

    def _on_event(self, event: HarnessEvent) -> None:
        self.events(event)
        if isinstance(event, Settled) and self.pending_bash:
            self.nursery.start_soon(self._flush_bash)

    # -- lines ----------------------------------------------------------------------------

    async def handle_line(self, line: str) -> None:
        try:
            command = json.loads(line)
        except ValueError as exc:
            self.write(_error(None, "parse", f"Failed to parse command: {exc}"))
            return
        if isinstance(command, dict) and command.get("type") == "extension_ui_response":
            send = self.pending_ui.pop(str(command.get("id")), None)
            if send is not None:
                send.send_nowait(command)
            return
        if not isinstance(command, dict):
            # As Pi: a JSON value that is no object has no type (and no id).
            self.write(_error(None, _ABSENT, "Unknown command: undefined"))
            return
        name = command.get("type")
        handler = self.handlers.get(name) if isinstance(name, str) else None
        if handler is None:
            if "type" in command:
                self.write(_error(command.get("id"), name, f"Unknown command: {_js_text(name)}"))
            else:  # Pi's command.type: undefined, left out of the response
                self.write(_error(command.get("id"), _ABSENT, "Unknown command: undefined"))
            return
        if name in self.concurrent and not (name == "abort" and not self._working()):
            self.running += 1
            self.idle = trio.Event()
            self.nursery.start_soon(self._run_command, handler, command)
        else:
            await self._answer(handler, command)

    async def _run_command(self, handler: Handler, command: dict[str, Any]) -> None:
        try:
            await self._answer(handler, command)
        finally:
            self.running -= 1
            if self.running == 0:
                self.idle.set()

    async def _answer(self, handler: Handler, command: dict[str, Any]) -> None:
        command_id, name = command.get("id"), command.get("type")
        try:
            data = await handler(command)
        except Exception as exc:  # Pi answers any failure of a command as its error response
            self.write(_error(command_id, name, str(exc) or type(exc).__name__))
            return
        if data is _ANSWERED:
            return
        response: dict[str, Any] = {"type": "response", "command": name, "success": True}
        if command_id is not None:
            response = {"id": command_id, **response}
        if data is not _NO_DATA:
            response["data"] = data
        self.write(response)

    async def wait_for_commands(self) -> None:
        await self.idle.wait()

    def input_ended(self) -> None:
        """Nobody can answer a dialog any more: pending and later ones are cancelled."""
        self.closed = True
        self.cancel_dialogs()

    def cancel_dialogs(self) -> None:
        for send in self.pending_ui.values():
            with contextlib.suppress(trio.WouldBlock, trio.BrokenResourceError):
                send.send_nowait({"cancelled": True})
        self.pending_ui.clear()

    # -- consent over the extension UI protocol ------------------------------------------

    async def ask_consent(self, event: ToolCallEvent) -> str:
        """Ask the client (``extension_ui_request`` ``confirm``); ``"y"`` or ``"n"``.

        After the end of input the request is still written, and declined at once.
        """
        request_id = str(uuid.uuid4())
        args = json.dumps(event.args, ensure_ascii=False)
        self.write(
            {
                "type": "extension_ui_request",
                "id": request_id,
                "method": "confirm",
                "title": f"Allow {event.tool_name}?",
                "message": f"{event.tool_name} {args[:2000]}",
            }
        )
        if self.closed:
            return "n"
        send, receive = trio.open_memory_channel[dict[str, Any]](1)
        self.pending_ui[request_id] = send
        try:
            async with receive:
                answer = await receive.receive()
        finally:
            self.pending_ui.pop(request_id, None)
        if answer.get("cancelled") or not answer.get("confirmed"):
            return "n"
        return "y"

    # -- prompting ------------------------------------------------------------------------

    def _expand(self, text: str) -> str:
        return expand_prompt_template(text, self.app.templates)

    def _user(self, text: str, command: dict[str, Any]) -> UserMessage:
        return UserMessage(content=(TextContent(text=text), *_images(command)), timestamp=_now_ms())

    async def prompt(self, command: dict[str, Any]) -> Any:
        harness = self.app.harness
        text = self._expand(_message(command))
        if self.manual_compaction is not None:
            raise RpcCommandError(_COMPACTING)
        if harness.is_busy and self.events.settling and not self.events.compacting:
            # Past agent_end nothing more runs: a prompt sent on seeing it waits for the
            # session's last write instead of failing (Pi settles before it reads the line).
            await harness.wait_for_idle()
        if harness.is_busy:
            behavior = command.get("streamingBehavior")
            if behavior == "followUp":
                self._queue_follow_up(text, command)
            elif behavior == "steer":
                self._queue_steer(text, command)
            else:
                raise RpcCommandError(_BUSY)
            return _NO_DATA
        await self._flush_bash()
        message = self._user(text, command)
        # The response first, then the run's events (Pi answers after the preflight).
        self.write(_success(command.get("id"), "prompt"))
        await self.nursery.start(harness.prompt, message)
        return _ANSWERED

    def _queue_steer(self, text: str, command: dict[str, Any]) -> None:
        self.events.steering.append(text)
        self.events.queue_update()
        self.app.harness.steer(self._user(text, command))

    def _queue_follow_up(self, text: str, command: dict[str, Any]) -> None:
        self.events.follow_up.append(text)
        self.events.queue_update()
        self.app.harness.follow_up(self._user(text, command))

    async def steer(self, command: dict[str, Any]) -> Any:
        self._queue_steer(self._expand(_message(command)), command)
        return _NO_DATA

    async def follow_up(self, command: dict[str, Any]) -> Any:
        self._queue_follow_up(self._expand(_message(command)), command)
        return _NO_DATA

    def _working(self) -> bool:
        return self.app.harness.is_busy or bool(self.bash_scopes)

    async def abort(self, command: dict[str, Any]) -> Any:
        self.cancel_dialogs()  # Pi's dialogs resolve as declined when the run aborts
        if self.manual_compaction is not None:
            self.manual_compaction.cancel(reason="abort")
        self.app.harness.abort()
        await self.app.harness.wait_for_idle()
        return _NO_DATA

    async def clear_queue(self, command: dict[str, Any]) -> Any:
        steering, follow_up = list(self.events.steering), list(self.events.follow_up)
        self.events.steering.clear()
        self.events.follow_up.clear()
        self.app.harness.agent.clear_all_queues()
        self.events.queue_update()
        return {"steering": steering, "followUp": follow_up}

    # -- sessions -------------------------------------------------------------------------

    async def _switch(self, session: Session) -> None:
        app = self.app
        harness = app.harness
        steering, follow_up = harness.agent.steering_mode, harness.agent.follow_up_mode
        retry, compaction = harness.retry, harness.compaction
        await app.switch_session(session, restore=True)
        new = app.harness
        new.agent.steering_mode, new.agent.follow_up_mode = steering, follow_up
        new.retry, new.compaction = retry, compaction
        self.events.steering.clear()
        self.events.follow_up.clear()

    async def _new_store_session(self) -> Session:
        """A new session (``parentSession`` is not recorded: the stores keep a fork's
        parent only)."""
        app = self.app
        if app.store is None:
            return await InMemorySessionStore().create(cwd=app.cwd)
        return await app.store.create(cwd=app.cwd)

    async def _end_running(self) -> None:
        """Abort what runs in the session being left (Pi tears that session down)."""
        harness = self.app.harness
        if harness.is_busy:
            self.cancel_dialogs()
            harness.abort()
            await harness.wait_for_idle()

    async def new_session(self, command: dict[str, Any]) -> Any:
        await self._end_running()
        await self._switch(await self._new_store_session())
        return {"cancelled": False}

    async def switch_session(self, command: dict[str, Any]) -> Any:
        path = command.get("sessionPath")
        if not isinstance(path, str) or not path:
            msg = "switch_session needs sessionPath (the path of a session file)"
            raise RpcCommandError(msg)
        await self._end_running()
        if self.app.store is None:
            msg = "switch_session needs session files (this run has --no-session)"
            raise RpcCommandError(msg)
        full = await trio.Path(path).absolute()
        await self._switch(await self.app.store.open(str(full)))
        return {"cancelled": False}

    def _session(self) -> Session:
        session = self.app.session
        assert session is not None  # run_rpc always has one
        return session

    async def fork(self, command: dict[str, Any]) -> Any:
        entry_id = command.get("entryId")
        session = self._session()
        try:
            entry = session.get_entry(str(entry_id))
        except SessionError:
            entry = None
        if not isinstance(entry, MessageEntry) or not isinstance(entry.message, UserMessage):
            msg = "Invalid entry ID for forking"
            raise RpcCommandError(msg)
        await self._end_running()
        text = _text_of(entry.message)
        if entry.parent_id is None:
            forked = await self._new_store_session()
        else:
            forked = await session.fork(entry.parent_id, position="at")
        await self._switch(forked)
        return {"text": text, "cancelled": False}

    async def clone(self, command: dict[str, Any]) -> Any:
        session = self._session()
        if session.leaf_id is None:  # nothing written yet (Pi: its file does not exist yet)
            msg = (
                "This session has not been saved yet. Wait for the first assistant response "
                "before cloning or forking it."
            )
            raise RpcCommandError(msg)
        await self._end_running()
        await self._switch(await session.fork(session.leaf_id, position="at"))
        return {"cancelled": False}

    # The commands that read the whole session read it in a worker thread: a resumed
    # session holds the active branch's context, and reads the other entries back from
    # its file or database when asked for them.

    async def get_fork_messages(self, command: dict[str, Any]) -> Any:
        return await trio.to_thread.run_sync(self._fork_messages_sync, self._session())

    def _fork_messages_sync(self, session: Session) -> Any:
        messages = []
        for entry in session.entries:
            if isinstance(entry, MessageEntry) and isinstance(entry.message, UserMessage):
                text = _text_of(entry.message)
                if text:
                    messages.append({"entryId": entry.id, "text": text})
        return {"messages": messages}

    async def get_entries(self, command: dict[str, Any]) -> Any:
        return await trio.to_thread.run_sync(self._entries_sync, self._session(), command)

    def _entries_sync(self, session: Session, command: dict[str, Any]) -> Any:
        entries = list(session.entries)
        since = command.get("since")
        if since is not None:
            ids = [e.id for e in entries]
            if since not in ids:
                msg = f"Entry not found: {since}"
                raise RpcCommandError(msg)
            entries = entries[ids.index(since) + 1 :]
        return {
            "entries": [entry_to_pi(e, session) for e in entries],
            "leafId": session.leaf_id,
        }

    async def get_tree(self, command: dict[str, Any]) -> Any:
        return await trio.to_thread.run_sync(self._tree_sync, self._session())

    def _tree_sync(self, session: Session) -> Any:
        labels = session.labels
        nodes: dict[str, dict[str, Any]] = {}
        roots: list[dict[str, Any]] = []
        for entry in session.entries:
            node: dict[str, Any] = {"entry": entry_to_pi(entry, session), "children": []}
            if entry.id in labels:
                node["label"] = labels[entry.id]
            nodes[entry.id] = node
        for entry in session.entries:
            parent = nodes.get(entry.parent_id) if entry.parent_id is not None else None
            (parent["children"] if parent is not None else roots).append(nodes[entry.id])
        return {"tree": roots, "leafId": session.leaf_id}

    async def set_session_name(self, command: dict[str, Any]) -> Any:
        name = command.get("name")
        if not isinstance(name, str) or not name.strip():
            msg = "Session name cannot be empty"
            raise RpcCommandError(msg)
        session = self._session()
        await session.set_name(name.strip())
        self.write({"type": "session_info_changed", "name": session.name})
        return _NO_DATA

    async def get_session_stats(self, command: dict[str, Any]) -> Any:
        return await trio.to_thread.run_sync(self._stats_sync, self._session())

    def _stats_sync(self, session: Session) -> Any:
        counts = {"user": 0, "assistant": 0, "toolResult": 0, "total": 0, "toolCalls": 0}
        totals = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}
        cost = 0.0

        def add(usage: Any) -> None:
            nonlocal cost
            totals["input"] += usage.input
            totals["output"] += usage.output
            totals["cacheRead"] += usage.cache_read
            totals["cacheWrite"] += usage.cache_write
            cost += usage.cost.total

        for entry in session.entries:
            if isinstance(entry, CompactionEntry | BranchSummaryEntry) and entry.usage:
                add(entry.usage)
            if not isinstance(entry, MessageEntry):
                continue
            counts["total"] += 1
            message = entry.message
            if message.role == "user":
                counts["user"] += 1
            elif message.role == "toolResult":
                counts["toolResult"] += 1
                if getattr(message, "usage", None) is not None:
                    add(message.usage)
            elif isinstance(message, AssistantMessage):
                counts["assistant"] += 1
                counts["toolCalls"] += sum(1 for b in message.content if b.type == "toolCall")
                add(message.usage)
        data: dict[str, Any] = {}
        if session.path is not None:
            data["sessionFile"] = session.path
        data.update(
            {
                "sessionId": session.id,
                "userMessages": counts["user"],
                "assistantMessages": counts["assistant"],
                "toolCalls": counts["toolCalls"],
                "toolResults": counts["toolResult"],
                "totalMessages": counts["total"],
                "tokens": {**totals, "total": sum(totals.values())},
                "cost": cost,
            }
        )
        usage = self._context_usage(session)
        if usage is not None:
            data["contextUsage"] = usage
        return data

    def _context_usage(self, session: Session) -> dict[str, Any] | None:
        """Pi's ``getContextUsage``."""
        window = self.app.model.context_window or 0
        if window <= 0:
            return None
        branch = session.get_branch()
        compactions = [i for i, e in enumerate(branch) if isinstance(e, CompactionEntry)]
        if compactions:
            fresh = False
            for entry in branch[compactions[-1] + 1 :]:
                message = getattr(entry, "message", None)
                if (
                    isinstance(message, AssistantMessage)
                    and message.stop_reason not in ("aborted", "error")
                    and message.usage.input + message.usage.output > 0
                ):
                    fresh = True
            if not fresh:
                return {"tokens": None, "contextWindow": window, "percent": None}
        tokens = estimate_context_tokens(self.app.harness.messages).tokens
        return {"tokens": tokens, "contextWindow": window, "percent": tokens / window * 100}

    async def export_html(self, command: dict[str, Any]) -> Any:
        if not self._session().entries:
            msg = "Nothing to export yet - start a conversation first"
            raise RpcCommandError(msg)
        msg = (
            "export_html is not supported by pitrio yet (it has no HTML exporter); "
            "get_entries returns the whole session"
        )
        raise RpcCommandError(msg)

    # -- state ----------------------------------------------------------------------------

    async def get_state(self, command: dict[str, Any]) -> Any:
        app, harness = self.app, self.app.harness
        session = self._session()
        data: dict[str, Any] = {
            "model": model_to_pi(app.model),
            "thinkingLevel": harness.thinking_level,
            "isStreaming": harness.is_busy and self.manual_compaction is None,
            "isCompacting": self.events.compacting,
            "steeringMode": harness.agent.steering_mode,
            "followUpMode": harness.agent.follow_up_mode,
        }
        if session.path is not None:
            data["sessionFile"] = session.path
        data["sessionId"] = session.id
        if session.name is not None:
            data["sessionName"] = session.name
        data.update(
            {
                "autoCompactionEnabled": self._auto_compaction_enabled(),
                "messageCount": len(harness.messages),
                "pendingMessageCount": len(self.events.steering) + len(self.events.follow_up),
            }
        )
        return data

    async def get_messages(self, command: dict[str, Any]) -> Any:
        return {"messages": pi_messages(self.app.harness.messages)}

    async def get_last_assistant_text(self, command: dict[str, Any]) -> Any:
        for message in reversed(self.app.harness.messages):
            if not isinstance(message, AssistantMessage):
                continue
            if message.stop_reason == "aborted" and not message.content:
                continue
            text = _text_of(message).strip()
            return {"text": text} if text else {}
        return {}  # Pi's { text: undefined }

    async def get_commands(self, command: dict[str, Any]) -> Any:
        commands = []
        for template in self.app.templates:
            path = template.file_path
            scope = "project" if path and path.startswith(self.app.cwd) else "user"
            item: dict[str, Any] = {
                "name": template.name,
                "description": template.description,
                "source": "prompt",
            }
            if path is not None:
                item["sourceInfo"] = {
                    "path": path,
                    "source": "local",
                    "scope": scope,
                    "origin": "top-level",
                    "baseDir": os.path.dirname(path),
                }
            commands.append(item)
        return {"commands": commands}

    # -- models and thinking --------------------------------------------------------------

    def _available(self) -> list[Model]:
        return self.app.available_models()

    async def _use_model(self, model: Model) -> None:
        level = self.app.harness.thinking_level
        await self.app.set_model(model)
        await self._set_level(level)

    async def set_model(self, command: dict[str, Any]) -> Any:
        provider, model_id = command.get("provider"), command.get("modelId")
        for model in self._available():
            if model.provider == provider and model.id == model_id:
                await self._use_model(model)
                return model_to_pi(model)
        msg = f"Model not found: {provider}/{model_id}"
        raise RpcCommandError(msg)

    async def cycle_model(self, command: dict[str, Any]) -> Any:
        models = self._available()
        if len(models) <= 1:
            return None
        current = self.app.model
        index = next(
            (
                i
                for i, m in enumerate(models)
                if (m.provider, m.id) == (current.provider, current.id)
            ),
            0,
        )
        model = models[(index + 1) % len(models)]
        await self._use_model(model)
        return {
            "model": model_to_pi(model),
            "thinkingLevel": self.app.harness.thinking_level,
            "isScoped": False,
        }

    async def get_available_models(self, command: dict[str, Any]) -> Any:
        return {"models": [model_to_pi(m) for m in self._available()]}

    async def _set_level(self, level: str) -> None:
        effective = clamp_thinking_level(self.app.model, level)
        if effective != self.app.harness.thinking_level:
            await self.app.set_thinking(effective)  # type: ignore[arg-type]  # one of the levels
            self.write({"type": "thinking_level_changed", "level": effective})

    async def set_thinking_level(self, command: dict[str, Any]) -> Any:
        level = command.get("level")
        if level not in get_args(ThinkingLevel):
            given = f"unknown thinking level {level!r}" if "level" in command else "no level"
            msg = f"{given}; set_thinking_level takes one of {', '.join(get_args(ThinkingLevel))}"
            raise RpcCommandError(msg)
        await self._set_level(str(level))
        return _NO_DATA

    async def cycle_thinking_level(self, command: dict[str, Any]) -> Any:
        if not self.app.model.reasoning:
            return None
        levels = supported_thinking_levels(self.app.model)
        current = self.app.harness.thinking_level
        index = levels.index(current) if current in levels else -1
        await self._set_level(levels[(index + 1) % len(levels)])
        return {"level": self.app.harness.thinking_level}

    async def get_available_thinking_levels(self, command: dict[str, Any]) -> Any:
        return {"levels": supported_thinking_levels(self.app.model)}

    async def set_steering_mode(self, command: dict[str, Any]) -> Any:
        self.app.harness.agent.steering_mode = _queue_mode(command)
        return _NO_DATA

    async def set_follow_up_mode(self, command: dict[str, Any]) -> Any:
        self.app.harness.agent.follow_up_mode = _queue_mode(command)
        return _NO_DATA

    # -- compaction and retry -------------------------------------------------------------

    def _auto_compaction_enabled(self) -> bool:
        settings = self.app.harness.compaction
        return settings.enabled if settings is not None else True

    async def compact(self, command: dict[str, Any]) -> Any:
        harness = self.app.harness
        if harness.is_busy:  # Pi's compact() aborts the running prompt first
            harness.abort()
            await harness.wait_for_idle()
        settings = harness.compaction if harness.compaction is not None else CompactionSettings()
        branch = self._session().get_branch()
        preparation = prepare_compaction(branch, settings)
        if preparation is None or not (
            preparation.messages_to_summarize or preparation.turn_prefix_messages
        ):
            # Pi's prepareCompaction finds nothing to summarise: its events and text
            # (the harness would summarise an empty history).
            text = ALREADY_COMPACTED if branch and branch[-1].type == "compaction" else None
            text = text or NOTHING_TO_COMPACT
            self.write({"type": "compaction_start", "reason": "manual"})
            self.write(
                {
                    "type": "compaction_end",
                    "reason": "manual",
                    "aborted": False,
                    "willRetry": False,
                    "errorMessage": f"Compaction failed: {text}",
                }
            )
            raise RpcCommandError(text)
        instructions = command.get("customInstructions")
        with trio.CancelScope() as scope:
            self.manual_compaction = scope
            try:
                end = await harness.compact(instructions if isinstance(instructions, str) else None)
            finally:
                self.manual_compaction = None
        if scope.cancelled_caught:
            msg = "Compaction cancelled"
            raise RpcCommandError(msg)
        if end.status != "completed":
            raise RpcCommandError(compaction_error(end, self.app.session))
        return compaction_result(self.app.session, end)

    async def set_auto_compaction(self, command: dict[str, Any]) -> Any:
        harness = self.app.harness
        settings = harness.compaction if harness.compaction is not None else CompactionSettings()
        harness.compaction = attrs.evolve(settings, enabled=bool(command.get("enabled")))
        return _NO_DATA

    async def set_auto_retry(self, command: dict[str, Any]) -> Any:
        harness = self.app.harness
        harness.retry = attrs.evolve(harness.retry, enabled=bool(command.get("enabled")))
        return _NO_DATA

    async def abort_retry(self, command: dict[str, Any]) -> Any:
        if self.events.retrying:
            self.app.harness.abort()
        return _NO_DATA

    # -- bash -----------------------------------------------------------------------------

    async def bash(self, command: dict[str, Any]) -> Any:
        text = command.get("command")
        if not isinstance(text, str):
            msg = "bash needs command (a string)"
            raise RpcCommandError(msg)
        exclude = command.get("excludeFromContext")
        result = await self._run_bash(text, command.get("id"))
        message = BashExecutionMessage(
            command=text,
            output=result["output"],
            exit_code=result.get("exitCode"),
            cancelled=result["cancelled"],
            truncated=result["truncated"],
            full_output_path=result.get("fullOutputPath"),
            timestamp=_now_ms(),
            exclude_from_context=True if exclude else None,
        )
        if self.app.harness.is_busy:
            self.pending_bash.append(message)  # after the run, not between a call and its result
        else:
            await self._record_bash(message)
        return result

    async def _run_bash(self, text: str, command_id: Any) -> dict[str, Any]:
        chunks: list[bytes | bytearray] = []
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        exit_code: int | None = None
        with trio.CancelScope() as scope:
            self.bash_scopes.add(scope)
            try:
                process = await trio.lowlevel.open_process(
                    ["bash", "-c", text],
                    cwd=self.app.cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
                try:
                    assert process.stdout is not None
                    async for data in process.stdout:
                        chunks.append(data)
                        delta = decoder.decode(data)
                        if delta:
                            event: dict[str, Any] = {"type": "bash_execution_update"}
                            if command_id is not None:
                                event["id"] = command_id
                            event["delta"] = delta
                            self.write(event)
                    exit_code = await process.wait()
                finally:
                    if process.returncode is None:
                        with contextlib.suppress(ProcessLookupError, PermissionError):
                            os.killpg(process.pid, signal.SIGKILL)
                        with trio.CancelScope(shield=True):
                            await process.wait()
            finally:
                self.bash_scopes.discard(scope)
        output = b"".join(chunks).decode("utf-8", errors="replace").replace("\r\n", "\n")
        result: dict[str, Any] = {"output": output}
        truncated = False
        lines = output.split("\n")
        if len(output.encode()) > _BASH_MAX_BYTES or len(lines) > _BASH_MAX_LINES:
            truncated = True
            kept = lines[-_BASH_MAX_LINES:]
            while kept and len("\n".join(kept).encode()) > _BASH_MAX_BYTES:
                kept.pop(0)
            fd, path = tempfile.mkstemp(prefix="pi-bash-", suffix=".log")
            with os.fdopen(fd, "w", encoding="utf-8") as file:
                file.write(output)
            result["output"] = "\n".join(kept)
            result["fullOutputPath"] = path
        if not scope.cancelled_caught:
            result["exitCode"] = exit_code
        result["cancelled"] = scope.cancelled_caught
        result["truncated"] = truncated
        order = ("output", "exitCode", "cancelled", "truncated", "fullOutputPath")
        return {k: result[k] for k in order if k in result}

    async def _record_bash(self, message: BashExecutionMessage) -> None:
        harness = self.app.harness
        harness.agent.state.messages = [*harness.agent.state.messages, message]
        session = self.app.session
        if session is not None:
            await session.append_message(message)

    async def _flush_bash(self) -> None:
        pending, self.pending_bash = self.pending_bash, []
        for message in pending:
            await self._record_bash(message)

    async def abort_bash(self, command: dict[str, Any]) -> Any:
        for scope in list(self.bash_scopes):
            scope.cancel(reason="abort_bash")
        return _NO_DATA


_NO_DATA: Final = object()
_ANSWERED: Final = object()


def _success(command_id: Any, name: str) -> dict[str, Any]:
    response: dict[str, Any] = {"type": "response", "command": name, "success": True}
    return {"id": command_id, **response} if command_id is not None else response


_ABSENT: Final = object()
"""A response's command left out (Pi's ``undefined``)."""


def _error(command_id: Any, name: Any, message: str) -> dict[str, Any]:
    """A failed response; a ``None`` id, or an :data:`_ABSENT` command, is left out."""
    response: dict[str, Any] = {"type": "response"}
    if name is not _ABSENT:
        response["command"] = name
    response.update(success=False, error=message)
    return {"id": command_id, **response} if command_id is not None else response


def _js_text(value: Any) -> str:
    """A command's ``type`` as JavaScript's template string shows it (Pi's error text)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, dict):
        return "[object Object]"
    if isinstance(value, list):
        return ",".join("" if v is None else _js_text(v) for v in value)
    return str(value)


def _now_ms() -> int:
    return int(datetime.datetime.now(datetime.UTC).timestamp() * 1000)


def _queue_mode(command: dict[str, Any]) -> Any:
    mode = command.get("mode")
    if mode not in _QUEUE_MODES:
        msg = f'mode must be "all" or "one-at-a-time"; got {mode!r}'
        raise RpcCommandError(msg)
    return mode


def _images(command: dict[str, Any]) -> list[ImageContent]:
    images = command.get("images") or []
    if not isinstance(images, list):
        msg = "images must be a list of {type: image, data, mimeType}"
        raise RpcCommandError(msg)
    result = []
    for item in images:
        if not isinstance(item, dict) or "data" not in item or "mimeType" not in item:
            msg = "each image needs data (base64) and mimeType"
            raise RpcCommandError(msg)
        result.append(ImageContent(data=str(item["data"]), mime_type=str(item["mimeType"])))
    return result


def _message(command: dict[str, Any]) -> str:
    message = command.get("message")
    if not isinstance(message, str):
        msg = f"{command.get('type')} needs a message (a string)"
        raise RpcCommandError(msg)
    return message
