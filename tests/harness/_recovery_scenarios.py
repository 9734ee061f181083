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
import re
from pathlib import Path
from typing import Any

import trio
import trio.testing

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
            return ScriptedResponse(
                stop_reason="error", error_message="overloaded_error", checkpoint_each_event=True
            )
        return ScriptedResponse.text("finished", chunk_size=4, checkpoint_each_event=True)

    async def look(self, call_id: str, params: Any, sig: Any, on_update: Any) -> Any:
        self.ran += 1
        if self.scenario == "steer" and self.current is not None:
            await self.current.enqueue("steer", "s2")  # steered while the tool runs
        return text_result(f"seen {params['path']}", details={})  # Pi's script's details

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


class _FrameWrites:
    """The session's writer, counting the frame writes in flight (in a worker thread)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.in_flight: list[trio.Event] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def write(self, owner: Any, pending: Any) -> Any:
        if not all(
            write.get("namespace") == "pi.pending.assistant_frame"
            for transaction in pending
            for write in transaction
        ):
            return await self._inner.write(owner, pending)
        done = trio.Event()
        self.in_flight.append(done)
        try:
            return await self._inner.write(owner, pending)
        finally:
            self.in_flight.remove(done)
            done.set()


def _paced(writer: _FrameWrites) -> Any:
    """A listener that holds each streamed event until its frames are in the file: how
    a stream's frames batch into writes is otherwise the scheduler's and the worker
    thread's (on a loaded machine the whole answer can stream during the first write),
    and the session must hold the frames of a request cut mid-stream."""

    async def settle() -> None:
        await trio.testing.wait_all_tasks_blocked()
        while writer.in_flight:
            await writer.in_flight[0].wait()

    def listener(event: Any) -> Any:
        return settle() if event.type == "message_update" else None

    return listener


async def _run(scenario: str, root: Path) -> Path:
    store = JsonlSessionStore(root, fsync="never")
    session = await store.create(cwd="/work/project", session_id=scenario)
    writer = _FrameWrites(session._writer)
    session._writer = writer
    harness = Script(scenario).harness(session)
    harness.subscribe(_paced(writer))
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
    cut = await trio.Path(path).read_text()
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
    after = await trio.Path(path).read_text()
    return {
        "open": open_,
        "result": result,
        "ran": script.ran,
        "events": pitrio_trace(events, retrying=retrying),
        "messages": messages,
        "writes": appended(after.splitlines(), len(cut.splitlines())),
        "known": known_ids(cut),
    }


def _result(session: Any) -> str | None:
    lane = restore_session(session)["main"]
    record = session.get_value("pi.result", lane.last_operation_id or "")
    return record.get("status") if isinstance(record, dict) else None


# -- the session writes ----------------------------------------------------------------

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_TIMES = frozenset(("timestamp", "createdAt", "startedAt", "endedAt", "notBefore", "updatedAt"))


def appended(lines: list[str], cut_length: int) -> list[list[Any]]:
    """The transactions a restore appended to a session (``lines`` after the cut's
    ``cut_length``, its header included), each a list of records, normalised as
    ``pi_recovery_trace.mjs``'s ``appended`` normalises them: ids (also inside keys)
    renamed in order of first appearance in the whole file, ``seq`` left out, times
    ``TIME``, usage numbers ``USAGE``, the api's name ``API``."""
    ids: dict[str, str] = {}
    transactions = []
    for line in lines[1:]:
        parsed = json.loads(line)
        records = parsed if isinstance(parsed, list) else [parsed]
        transactions.append([_normalise_write(record, ids) for record in records])
    return transactions[cut_length - 1 :]


def _normalise_write(value: Any, ids: dict[str, str], key: str | None = None) -> Any:
    if isinstance(value, str):
        if key == "api":
            return "API"
        return _UUID.sub(lambda m: ids.setdefault(m[0], f"id{len(ids) + 1}"), value)
    if isinstance(value, int | float) and not isinstance(value, bool) and key in _TIMES:
        return "TIME"
    if key == "usage" and isinstance(value, dict):
        return "USAGE"
    if isinstance(value, list):
        return [_normalise_write(item, ids) for item in value]
    if isinstance(value, dict):
        return {k: _normalise_write(item, ids, k) for k, item in value.items() if k != "seq"}
    return value


FRAME = "pi.pending.assistant_frame"


def compared_writes(
    transactions: list[list[Any]], known: int, *, pitrio: bool = False
) -> list[list[Any]]:
    """The transactions as both sides are compared on them (``known``: how many ids the
    cut holds; ``pitrio``: the transactions are pitrio's).

    Left out: the transactions that append frames of a streamed answer
    (docs/deviations.md, "Operation records", row "each streamed event of a request is
    a ``pi.pending.assistant_frame`` list element": pitrio writes them a batch at a time
    and none of a stream that ends before its first write starts; how many there are is
    the provider's chunking, pi-ai's faux provider's or pitrio's ``ScriptedModel``'s, as
    ``message_update`` is); the answer's entry, which deletes them, is compared. And the
    usage rows (row "a usage row (``kind: "usage"``) beside each answer": pitrio has
    none, the usage is on the message).

    Merged: a transaction of pitrio's that takes a queued message into the transcript
    with the next transaction (row "a run's start writes the queued messages it takes
    and its prompt in one transaction" and row "a steering message delivered in a run
    is written with the next request's ``assistant.ready``": pitrio writes each
    message in a transaction of its own). In a transaction that takes queued messages
    (both sides') the records are in one order: the entries, the staged copies'
    deletions, then the other records, one per key (the last), by namespace. The ids
    the restore made are renamed in order of first appearance in what is compared
    (the merge changes the order they appear in); the cut's ``known`` ids stay."""
    out: list[list[Any]] = []
    merging = False
    for transaction in transactions:
        records = [r for r in transaction if r["kind"] != "usage"]
        if records and all(r.get("namespace") == FRAME and r["op"] == "append" for r in records):
            continue
        takes = _takes_queued(records)
        if merging:
            out[-1] = [*out[-1], *records]
        else:
            out.append(records)
        merging = pitrio and takes
        if takes or (pitrio and _takes_queued(out[-1])):
            out[-1] = _taking_order(out[-1])
    return _renamed(out, known)


def _takes_queued(records: list[Any]) -> bool:
    """Whether ``records`` take a queued message: its entry, its staged copy deleted and
    the lane's inbox written (a tool result's staged copy has no inbox)."""
    entries = {r["id"] for r in records if r["kind"] == "entry"}
    inbox = any(r.get("namespace") == "pi.lane.state" for r in records)
    return inbox and any(
        r.get("namespace") == "pi.pending.entry" and r["op"] == "delete" and r["key"] in entries
        for r in records
    )


_ORDER = ("pi.branch.tip", "pi.op.meta", "pi.op.state", "pi.lane.state")


def _taking_order(records: list[Any]) -> list[Any]:
    entries = [r for r in records if r["kind"] == "entry"]
    staged = [
        r for r in records if r.get("namespace") == "pi.pending.entry" and r["op"] == "delete"
    ]
    last: dict[tuple[Any, ...], Any] = {}
    for r in records:
        if r["kind"] != "entry" and r not in staged:
            last.pop((r["kind"], r.get("namespace"), r.get("key")), None)
            last[(r["kind"], r.get("namespace"), r.get("key"))] = r
    rank = {n: i for i, n in enumerate(_ORDER)}
    rest = sorted(last.values(), key=lambda r: rank.get(r.get("namespace"), len(_ORDER)))
    return [*entries, *staged, *rest]


_NAME = re.compile(r"\bid(\d+)\b")


def _renamed(transactions: list[list[Any]], known: int) -> list[list[Any]]:
    names: dict[str, str] = {}

    def rename(m: re.Match[str]) -> str:
        if int(m[1]) <= known:
            return m[0]
        return names.setdefault(m[0], f"new{len(names) + 1}")

    out: list[list[Any]] = json.loads(_NAME.sub(rename, json.dumps(transactions)))
    return out


def known_ids(text: str) -> int:
    """How many ids a cut's file (its ``text``) holds: :func:`appended` names them first."""
    return len(set(_UUID.findall(text)))


def write_differences(
    scenario: str, ours: list[dict[str, Any]], theirs: list[dict[str, Any]], records: list[str]
) -> dict[str, Any]:
    """The cuts whose restore appended other transactions in pitrio (``ours``,
    :func:`restore`'s) than in Pi (``theirs``, the script's, with its ``records``):
    {cut: (pitrio's, Pi's)}, as :func:`compared_writes` compares them."""
    out = {}
    for k, (mine, pis) in enumerate(zip(ours, theirs, strict=True), 1):
        known = mine["known"]
        got = compared_writes(mine["writes"], known, pitrio=True)
        want = compared_writes(pi_writes(pis, records), known)
        if got != want:
            out[f"{scenario} cut {k}"] = (got, want)
    return out


def pi_writes(case: dict[str, Any], records: list[str]) -> list[list[Any]]:
    """A cut's writes as Pi's script printed them (indexes into ``records``), decoded."""
    return [[json.loads(records[i]) for i in transaction] for transaction in case["writes"]]


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
