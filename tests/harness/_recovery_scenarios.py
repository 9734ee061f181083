"""The scenarios of tests/harness/test_recovery_traces.py on pitrio's side.

The same scripted runs as ``node/pi_recovery_trace.mjs`` (``tool``, ``retry``,
``queue``, ``steer``): a model that answers by the context, the unsafe tool ``look``. A run writes
a JSONL session; a *cut* is a copy of it with only its first K transactions (what a
process killed after its K-th write left); :func:`restore` brings a cut back with
pitrio's harness and reports what Pi's script reports: the operation it found, how the
run ended, the tool's runs, the events (in Pi's vocabulary: :func:`pitrio_trace`) and
the branch's messages.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pitrio import Model, TextContent, Tool, ToolCall, text_result, wire
from pitrio.harness import (
    Harness,
    JsonlSessionStore,
    MessageEntry,
    RetrySettings,
    _frames,
    restore_session,
)
from pitrio.testing import ScriptedModel, ScriptedResponse

MODEL = Model(id="scripted", api="scripted", provider="local")
RETRY = RetrySettings(base_delay=0.001, jitter=0)
SCENARIOS = ("tool", "retry", "queue", "steer")
PROMPT = {
    "tool": "look at a.txt",
    "retry": "look at a.txt",
    "queue": "go",
    "steer": "look at a.txt",
}


class Script:
    """One process's model and tool: the answers by the context; the retryable error
    served once (by the run, or by the restore of a cut made before it)."""

    def __init__(self, scenario: str, *, error_served: bool = False) -> None:
        self.scenario = scenario
        self.error_served = error_served
        self.ran = 0
        self.current: Harness | None = None

    def respond(self, context: Any) -> ScriptedResponse:
        messages = context.messages
        last = messages[-1] if messages else None
        if last is not None and (
            last.role == "toolResult" or (self.scenario == "steer" and _text(last) == "s2")
        ):
            return ScriptedResponse.text("finished", chunk_size=4, checkpoint_each_event=True)
        if self.scenario in ("tool", "steer"):
            return ScriptedResponse(
                content=(
                    TextContent(text="let me look"),
                    ToolCall(id="call_1", name="look", arguments={"path": "a.txt"}),
                ),
                chunk_size=4,
                checkpoint_each_event=True,
            )
        if self.scenario == "retry" and not self.error_served:
            self.error_served = True
            return ScriptedResponse(stop_reason="error", error_message="overloaded_error")
        return ScriptedResponse.text("finished", chunk_size=4, checkpoint_each_event=True)

    async def look(self, call_id: str, params: Any, sig: Any, on_update: Any) -> Any:
        self.ran += 1
        if self.scenario == "steer" and self.current is not None:
            await self.current.enqueue("steer", "s2")  # steered while the tool runs
        return text_result(f"seen {params['path']}")

    def harness(self, session: Any, retry: RetrySettings = RETRY) -> Harness:
        tool = Tool(
            name="look",
            description="look at a file",
            execute=self.look,
            parameters={"type": "object", "properties": {"path": {"type": "string"}}},
        )
        self.current = Harness(
            model=MODEL,
            stream_fn=ScriptedModel(self.respond),
            session=session,
            tools=[tool],
            retry=retry,
        )
        return self.current


async def run(scenario: str, root: Path) -> Path:
    """The scenario uninterrupted on a new JSONL session under ``root``; its file. Its
    answers' frames are written as they stream, a write as soon as the last one ended
    (``FRAME_INTERVAL`` 0: the scripted stream is faster than any network)."""
    interval, _frames.FRAME_INTERVAL = _frames.FRAME_INTERVAL, 0
    try:
        return await _run(scenario, root)
    finally:
        _frames.FRAME_INTERVAL = interval


async def _run(scenario: str, root: Path) -> Path:
    store = JsonlSessionStore(root, fsync="never")
    session = await store.create(cwd="/work/project", session_id=scenario)
    harness = Script(scenario).harness(session)
    if scenario == "queue":
        await harness.enqueue("steer", "s1")
        follow = await harness.enqueue("follow_up", "f1")
        await harness.next_run("n1")
        await harness.cancel_queued(follow)
    await harness.prompt(PROMPT[scenario])
    await session.close()
    assert session.path is not None
    return Path(session.path)


def cuts(lines: list[str], root: Path) -> list[Path]:
    """Each prefix of a session's transactions (``lines[0]`` is its header) as a file of
    its own under ``root``: cut K holds the first K transactions."""
    out = []
    for k in range(1, len(lines)):
        where = root / f"cut{k}" / "sessions"
        where.mkdir(parents=True)
        path = where / "session.jsonl"
        path.write_text("\n".join(lines[: k + 1]) + "\n")
        out.append(path)
    return out


def _text(message: Any) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return " ".join(b.text for b in content if isinstance(b, TextContent))


def branch_messages(session: Any) -> list[list[Any]]:
    return [
        [
            e.message.role,
            getattr(e.message, "stop_reason", None),
            _text(e.message),
            getattr(e.message, "error_message", None),
        ]
        for e in session.get_branch()
        if isinstance(e, MessageEntry)
    ]


async def restore(scenario: str, path: Path) -> dict[str, Any]:
    """Restore one cut as ``pi_recovery_trace.mjs restore`` does."""
    store = JsonlSessionStore(path.parent.parent, fsync="never")
    session = await store.open(path)
    before = branch_messages(session)
    script = Script(scenario, error_served=any(m[3] == "overloaded_error" for m in before))
    lanes = restore_session(session)
    open_ = [
        {"lane": name, "kind": lane.operation.intent}
        for name, lane in lanes.items()
        if lane.operation is not None
    ]
    main = lanes.get("main")
    state = main.operation.state if main is not None and main.operation is not None else {}
    retrying = state.get("at") == "assistant.ready" and int(state.get("nextAttempt", 1)) > 1
    harness = script.harness(session)
    events: list[Any] = []
    harness.subscribe(events.append)
    result = None
    if harness.interrupted is not None:
        await harness.resume()
        result = _result(session)
    if scenario == "queue" and (main is None or main.last_operation_id is None) and not open_:
        await harness.prompt(PROMPT[scenario])
        result = _result(session)
    messages = branch_messages(session)
    await session.close()
    return {
        "open": open_,
        "result": result,
        "ran": script.ran,
        "events": pitrio_trace(events, retrying=retrying),
        "messages": messages,
    }


def _result(session: Any) -> str | None:
    lane = restore_session(session)["main"]
    record = session.get_value("pi.result", lane.last_operation_id or "")
    return record.get("status") if isinstance(record, dict) else None


# -- the comparison --------------------------------------------------------------------

COMPARED = (
    "message_start",
    "message_end",
    "turn_start",
    "turn_end",
    "tool_start",
    "tool_end",
    "retry_start",
    "retry_end",
    "run_end",
)
"""Pi's event types both traces are compared on. Left out: ``entry_added`` and ``usage``
(pitrio has no such events: a listener reads the session), ``message_update`` (the
chunking of a stream is the provider's), ``run_start``, ``retry_scheduled`` and
``queue_update`` (see pitrio_trace)."""


def _message(message: Any) -> list[Any]:
    role = message["role"]
    if role == "assistant":
        return [role, message.get("stopReason"), _wire_text(message)]
    return [role, _wire_text(message)]


def _wire_text(message: Any) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return " ".join(b["text"] for b in content or () if b.get("type") == "text")


def pi_trace(events: list[Any]) -> list[list[Any]]:
    """Pi's events (as its script printed them) projected on :data:`COMPARED`."""
    out: list[list[Any]] = []
    for event in events:
        kind = event["type"]
        if kind not in COMPARED:
            continue
        row: list[Any] = [kind]
        if kind in ("message_start", "message_end"):
            row += _message(event["message"])
        elif kind == "tool_end":
            row += [event["toolName"], event.get("isError", False)]
        elif kind == "tool_start":
            row += [event["toolName"]]
        elif kind == "run_end":
            row += [event["status"]]
        elif kind == "retry_end":
            row += [event["success"]]
        out.append([*row, bool(event.get("recovery"))])
    return out


def pitrio_trace(events: list[Any], *, retrying: bool = False) -> list[list[Any]]:
    """pitrio's events, in Pi's vocabulary, projected as :func:`pi_trace` projects
    Pi's: between RecoveryStart and RecoveryEnd an event is Pi's ``recovery: true``;
    ``auto_retry_start`` / ``auto_retry_end`` are ``retry_start`` / ``retry_end``;
    ``settled`` is ``run_end``. pitrio's Agent makes each request a turn of its own, Pi
    a retried request part of its step's: the ``turn_end`` of a failed request followed
    by a retry and the ``turn_start`` of the retried request are left out (and, with
    ``retrying``, the first turn's start: a restore at ``assistant.ready`` of a later
    attempt). A turn's ``turn_start`` comes before the user messages it takes (the
    prompt's, delivered steering) in pitrio's Agent (as in Pi's ``Agent``), after them
    in Pi's harness: it is moved after them."""
    out: list[list[Any]] = []
    recovery = False
    for event in events:
        kind = event.type
        if kind == "recovery_start":
            recovery = True
            continue
        if kind == "recovery_end":
            recovery = False
            continue
        if kind == "turn_start" and (retrying or (out and out[-1][0] == "retry_start")):
            retrying = False
            continue
        if kind == "auto_retry_start" and out and out[-1][0] == "turn_end":
            out.pop()
        row: list[Any]
        if kind in ("message_start", "message_end"):
            row = [kind, *_message(json.loads(json.dumps(wire.unstructure(event.message))))]
        elif kind in ("turn_start", "turn_end"):
            row = [kind]
        elif kind == "tool_execution_start":
            row = ["tool_start", event.tool_name]
        elif kind == "tool_execution_end":
            row = ["tool_end", event.tool_name, event.is_error]
        elif kind == "auto_retry_start":
            row = ["retry_start"]
        elif kind == "auto_retry_end":
            row = ["retry_end", event.success]
        elif kind == "settled":
            row = ["run_end", "completed"]
        else:
            continue
        out.append([*row, recovery])
    return _turn_after_prompt(out)


def _turn_after_prompt(rows: list[list[Any]]) -> list[list[Any]]:
    """Each ``turn_start`` moved after the user messages that follow it (the prompt's,
    delivered steering)."""
    out = list(rows)
    i = 0
    while i < len(out):
        j = i + 1
        if out[i][0] == "turn_start":
            while (
                j < len(out)
                and out[j][0] in ("message_start", "message_end")
                and out[j][1] == "user"
            ):
                j += 1
            out[i:j] = [*out[i + 1 : j], out[i]]
        i = j
    return out
