"""Operation records: a harness run written to its session as Pi's harness writes it.

Pi 0.85.0's AgentHarness (pi-agent-core ``harness/runtime/``: ``lane.js``, ``drive/*.js``)
records every operation in the session before and after each effect, so a killed process
can be resumed: the run's intent (``pi.op.meta``), the state it is at (``pi.op.state``:
``starting``, ``checkpoint``, ``assistant.ready``, ``assistant.effect_pending`` while a
request is out, ``assistant.retry_wait``, ``tools`` with each call ``planned``,
``effect_pending`` (its intent, with the tool's replay policy and ``pi.op.tool_args``),
``outcome_ready`` (its result kept as ``pi.pending.entry``) and ``completed``), the lane's
``pi.lane.state`` (``currentOperationId``, ``lastOperationId``) and, once the run is over,
``pi.result``; a running call's memos (``pi.op.tool_memo``) and checkpoint
(``pi.pending.tool_output``) are written by its invocation (``_invocation``).
:class:`OperationRecorder` writes the same values in the same JSON from the
events of pitrio's Agent; :func:`restore_session` reads them back as Pi's
``restoreSession`` does (``runtime/restore.js``).

The streamed frames of a request (``pi.pending.assistant_frame``) are written by
``_frames`` while it is out; its answer's entry deletes them. Not written: usage rows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Literal, final

import attrs

from pitrio import AgentTool, AssistantMessage, Model, ToolCall, ToolResultMessage, wire

from ._encoding import Encoded, Record, restamped
from ._entries import JSONValue, Write, new_id, now_ms
from ._errors import SessionFormatError
from ._frames import delete_frames, frames_key
from ._session import Session
from ._session_state import BRANCH_TIP, IDLE_LANE, LANE_CONFIG, LANE_STATE, MAIN_BRANCH

__all__ = [
    "INTERRUPTED_REQUEST",
    "INTERRUPTED_TOOL",
    "LaneState",
    "Operation",
    "OperationRecorder",
    "ReplayPolicy",
    "replay_policy",
    "restore_lane",
    "restore_session",
]

OP_META: Final = "pi.op.meta"
OP_STATE: Final = "pi.op.state"
OP_TOOL_ARGS: Final = "pi.op.tool_args"
OP_TOOL_MEMO: Final = "pi.op.tool_memo"
OP_RESULT: Final = "pi.result"
PENDING_ENTRY: Final = "pi.pending.entry"
PENDING_TOOL_OUTPUT: Final = "pi.pending.tool_output"

ReplayPolicy = Literal["safe", "never"]
"""May a tool call whose outcome was never recorded run again after a crash? Pi's
``AgentHarnessTool.replay``: ``"safe"`` (it may: idempotent, read-only) or ``"never"``
(the default: it is reported as interrupted instead)."""

# Pi's texts (drive/recovery.js, drive/tools.js).
INTERRUPTED_REQUEST: Final = (
    "Assistant request was interrupted. The preceding content is the latest committed "
    "partial; newer live output may be missing and the external outcome is unknown."
)
INTERRUPTED_TOOL: Final = (
    "[Tool execution was interrupted. The preceding output is the latest durable progress "
    "snapshot; newer live output may be missing, and the external outcome is unknown.]"
)


# What every state of a running operation says of its control, and the continuations of
# its checkpoints (each encoded once, shared by every state that says it: never changed).
_RUNNING: Final = Encoded(status="running")
_NEED_ASSISTANT: Final = Encoded(kind="need_assistant", overflowRecoveryUsed=False)
_MAY_FINISH: Final = Encoded(kind="may_finish", includeFinalAssistant=True)
_MAY_FINISH_TOOLS: Final = Encoded(kind="may_finish", includeFinalAssistant=False)

# A compaction inside the run keeps its input here (``_structural.OP_PREPARATION``).
_OP_PREPARATION: Final = "pi.op.preparation"


# A tool result with this much text is encoded once for its outcome and its entry; a
# smaller one costs less encoded twice than walked to splice (_encoding).
_LARGE_RESULT: Final = 1024


def _large(message: ToolResultMessage) -> bool:
    size = 0
    for block in message.content:
        size += len(getattr(block, "text", "") or "")
    return size >= _LARGE_RESULT


def replay_policy(tool: object) -> ReplayPolicy:
    """A tool's replay policy: its ``replay`` attribute when it is ``"safe"``, else
    ``"never"`` (Pi's default)."""
    return "safe" if getattr(tool, "replay", None) == "safe" else "never"


# Built in Pi's committed key order, numbered in place when committed (_session_state).
def _set(namespace: str, key: str, value: JSONValue) -> Write:
    return {
        "kind": "value", "op": "set", "seq": None, "namespace": namespace, "key": key,
        "value": value,
    }  # fmt: skip


def _delete(namespace: str, key: str) -> Write:
    return {"kind": "value", "op": "delete", "seq": None, "namespace": namespace, "key": key}


def lane_state_write(session: Session, lane: str, current: str | None, last: str | None) -> Write:
    """The lane's ``pi.lane.state`` naming ``current`` as its operation (and ``last`` as
    its last one, when given), the rest (its inbox) kept."""
    value: dict[str, Any] = dict(IDLE_LANE)
    stored = session.get_value(LANE_STATE, lane)
    if isinstance(stored, Mapping):
        value = {**value, **stored}
    value["currentOperationId"] = current
    if last is not None:
        value["lastOperationId"] = last
    return _set(LANE_STATE, lane, value)


@final
@attrs.frozen
class Operation:
    """An operation a lane was running when its session was last written: Pi's
    ``Operation`` (``meta``: ``pi.op.meta``, ``state``: ``pi.op.state``, as JSON)."""

    meta: Mapping[str, Any]
    state: Mapping[str, Any]

    @property
    def id(self) -> str:
        """The operation's id (``pi.op.meta``'s ``operationId``)."""
        return str(self.meta["operationId"])

    @property
    def intent(self) -> str:
        """The intent's kind (``"run"``, ``"compaction"`` or ``"navigation"``)."""
        return str(self.meta["intent"]["kind"])

    @property
    def at(self) -> str:
        """The state it stopped at (``"tools"``, ``"assistant.effect_pending"``, ...)."""
        return str(self.state["at"])


@final
@attrs.frozen
class LaneState:
    """A lane restored from a session (Pi's ``LaneState``)."""

    tip_id: str | None
    configuration: Mapping[str, Any]
    inbox: tuple[Any, ...]
    last_operation_id: str | None
    operation: Operation | None
    """The interrupted operation, or ``None`` when the lane was idle."""


def _matches(intent: Mapping[str, Any], state: Mapping[str, Any]) -> bool:
    """Pi's ``stateMatchesIntent``."""
    at = str(state.get("at"))
    summary = at.startswith("summary.")
    boundary = state.get("task", {}).get("boundary", {}) if summary else {}
    kind = intent.get("kind")
    if kind == "compaction":
        return summary and boundary.get("kind") == "finish"
    if kind == "navigation":
        if at == "navigation.ready_to_commit":
            return not intent.get("summarize") and state.get("targetId") == intent.get("targetId")
        return bool(intent.get("summarize")) and summary
    return at != "navigation.ready_to_commit" and (
        not summary or boundary.get("kind") == "resume_checkpoint"
    )


def restore_lane(session: Session, lane: str = MAIN_BRANCH) -> LaneState:
    """Restore one lane of ``session`` without starting work (Pi's ``restoreLane``).

    Raises:
        SessionFormatError: the lane is missing a value Pi's restore needs, or its
            operation records do not fit together (Pi's ``SessionInvariantError``).
    """
    tip = session.get_value(BRANCH_TIP, lane)
    has_tip = (BRANCH_TIP, lane) in session._state.values
    config = session.get_value(LANE_CONFIG, lane)
    state = session.get_value(LANE_STATE, lane)
    name = f'"{lane}"'
    if not has_tip:
        msg = f"Lane {name} is missing branch.tip"
        raise SessionFormatError(msg)
    if not isinstance(config, Mapping):
        msg = f"Lane {name} is missing lane.config"
        raise SessionFormatError(msg)
    if not isinstance(state, Mapping):
        msg = f"Lane {name} is missing lane.state"
        raise SessionFormatError(msg)
    operation = None
    op_id = state.get("currentOperationId")
    if op_id is not None:
        meta = session.get_value(OP_META, str(op_id))
        op_state = session.get_value(OP_STATE, str(op_id))
        if not isinstance(meta, Mapping):
            msg = f"Operation {op_id} is missing op.meta"
            raise SessionFormatError(msg)
        if not isinstance(op_state, Mapping):
            msg = f"Operation {op_id} is missing op.state"
            raise SessionFormatError(msg)
        if meta.get("operationId") != op_id or meta.get("lane") != lane:
            msg = f"Operation {op_id} metadata names another operation or lane"
            raise SessionFormatError(msg)
        if not _matches(meta.get("intent", {}), op_state):
            kind = meta.get("intent", {}).get("kind")
            msg = f"Operation {op_id} intent {kind} does not match state {op_state.get('at')}"
            raise SessionFormatError(msg)
        operation = Operation(meta=meta, state=op_state)
    return LaneState(
        tip_id=tip if isinstance(tip, str) else None,
        configuration=config,
        inbox=tuple(state.get("inbox") or ()),
        last_operation_id=state.get("lastOperationId"),
        operation=operation,
    )


def restore_session(session: Session) -> dict[str, LaneState]:
    """Every configured lane of ``session`` (Pi's ``restoreSession``): a name with a
    branch tip, a lane configuration and a lane state."""
    values = session._state.values
    names = {key for (namespace, key) in values if namespace == LANE_STATE} & {
        key for (namespace, key) in values if namespace == LANE_CONFIG
    }
    return {lane: restore_lane(session, lane) for lane in sorted(names)}


@final
class OperationRecorder:
    """Writes one lane's run operations to a session as Pi's harness does.

    The harness calls it at each step of a run; each method writes its transactions to
    the session before it returns (before the request is sent, before a tool runs).
    """

    __slots__ = (
        "_calls",
        "_delivered",
        "_forms",
        "_lane",
        "_memos_set",
        "_meta",
        "_op_id",
        "_running",
        "_session",
        "_settings",
        "_state",
        "thinking_level",
    )

    def __init__(
        self,
        session: Session,
        settings: Mapping[str, Any],
        thinking_level: Callable[[], str] | None = None,
    ) -> None:
        self.thinking_level = thinking_level
        """The harness's thinking level, for a lane's first configuration (``None``:
        the session's, else ``"off"``)."""
        self._session = session
        self._lane = session._lane
        self._settings = Encoded(settings)  # in every state: its JSON made once
        self._op_id: str | None = None
        self._meta: dict[str, Any] = {}
        self._state: dict[str, Any] = {}
        # tool call id -> its call record's index in the batch
        self._calls: dict[str, int] = {}
        # tool call id -> its outcome's message and wire form (the result entry's too)
        self._forms: dict[str, tuple[ToolResultMessage, dict[str, Any]]] = {}
        # Whether the operation may have memos (set, or adopted from the session): only
        # then do outcomes look for memos to delete.
        self._memos_set = False
        self._running = 0  # tools running now (between their start and their return)
        # the queued message last delivered in this run by this process (see delivered)
        self._delivered: str | None = None

    @property
    def active(self) -> bool:
        return self._op_id is not None

    @property
    def state(self) -> Mapping[str, Any]:
        return self._state

    @property
    def settings(self) -> Mapping[str, Any]:
        """The operations' ``settings`` (Pi's captured settings)."""
        return self._settings

    def _lane_state(self, current: str | None, last: str | None = None) -> Write:
        return lane_state_write(self._session, self._lane, current, last)

    def _put(self, state: dict[str, Any]) -> Write:
        assert self._op_id is not None
        # A Record: its writer splices in the JSON of the parts it repeats (_encoding).
        record = self._state = Record(state)
        return _set(OP_STATE, self._op_id, record)

    def _scope(self) -> dict[str, Any]:
        """What every state of the run carries (Pi's ``operationScopeOf``)."""
        return {
            "control": _RUNNING,
            "settings": self._settings,
            "latestAssistantEntryId": self._state.get("latestAssistantEntryId"),
        }

    def adopt(self, operation: Operation) -> None:
        """Go on recording an operation restored from the session."""
        self._op_id = operation.id
        self._meta = dict(operation.meta)
        self._state = dict(operation.state)
        self._calls = {}
        self._forms = {}
        self._memos_set = True

    @property
    def meta(self) -> Mapping[str, Any]:
        """The running operation's ``pi.op.meta``."""
        return self._meta

    def moved_to(self, state: Mapping[str, Any]) -> None:
        """The operation's state was written elsewhere (a compaction inside the run,
        ``_structural``): record from there on."""
        self._state = dict(state)

    async def checkpoint(self) -> Mapping[str, Any] | None:
        """The run's ``checkpoint`` state (written first when the run is still
        ``starting``: Pi's run start), or ``None`` when the run is not at one (a
        compaction inside the run starts from a checkpoint)."""
        if self._op_id is None:
            return None
        if self._state.get("at") in ("starting", None):
            checkpoint = {
                **self._scope(),
                "at": "checkpoint",
                "continuation": _NEED_ASSISTANT,
                "triggerEntryId": self._session.leaf_id,
            }
            await self._session._record([[self._put(checkpoint)]])
        return self._state if self._state.get("at") == "checkpoint" else None

    def adopt_batch(self, call_ids: Mapping[int, str]) -> None:
        """The tool call ids of the adopted batch (by source index)."""
        calls = self._state["batch"]["calls"]
        self._calls = {
            call_ids[c["sourceIndex"]]: n
            for n, c in enumerate(calls)
            if c["sourceIndex"] in call_ids
        }

    def _lane_config(self, model: Model, tool_names: Sequence[str]) -> list[Write]:
        """The lane's configuration when the session has none yet (Pi's lane always has
        one: its restore needs it)."""
        if (LANE_CONFIG, self._lane) in self._session._state.values:
            return []
        level = self.thinking_level() if self.thinking_level is not None else None
        config = {
            "model": {"provider": model.provider, "modelId": model.id},
            "thinkingLevel": level or self._session.thinking_level or "off",
            "activeToolNames": list(tool_names),
        }
        return [_set(LANE_CONFIG, self._lane, config)]

    def begin_writes(
        self, prompt_entry_id: str, model: Model, tool_names: Sequence[str], *, prompt: bool = True
    ) -> list[Write]:
        """The writes that start a run, committed with its prompt's entry (Pi's first
        transaction: the prompt, the tip, ``op.meta``, ``op.state: starting``, the lane).
        ``prompt=False``: a queued message the run takes, not one of its prompt's."""
        if self._op_id is not None:
            if not prompt:
                return []
            # A later message of the same prompt joins the intent.
            self._meta["intent"]["promptEntryIds"].append(prompt_entry_id)
            return [_set(OP_META, self._op_id, self._meta)]
        op_id = self._op_id = new_id()
        self._meta = {
            "operationId": op_id,
            "lane": self._lane,
            "sourceTipId": self._session.leaf_id,
            "startedAt": now_ms(),
            "intent": {"kind": "run", "promptEntryIds": [prompt_entry_id] if prompt else []},
        }
        self._state = {}
        self._forms = {}
        self._memos_set = False
        starting = {**self._scope(), "at": "starting", "latestAssistantEntryId": None}
        return [
            *self._lane_config(model, tool_names),
            _set(OP_META, op_id, self._meta),
            self._put(starting),
            self._lane_state(op_id, None),
        ]

    async def begin_resume(self, model: Model, tool_names: Sequence[str]) -> None:
        """A run without a prompt (``resume()``): Pi's intent names no prompt entries."""
        if self._op_id is not None:
            return
        op_id = self._op_id = new_id()
        self._meta = {
            "operationId": op_id,
            "lane": self._lane,
            "sourceTipId": self._session.leaf_id,
            "startedAt": now_ms(),
            "intent": {"kind": "run", "promptEntryIds": []},
        }
        self._state = {}
        self._forms = {}
        self._memos_set = False
        starting = {**self._scope(), "at": "starting", "latestAssistantEntryId": None}
        writes = [_set(OP_META, op_id, self._meta), self._put(starting)]
        lane = [*self._lane_config(model, tool_names), self._lane_state(op_id, None)]
        await self._session._record([[*writes, *lane]])

    def _configuration(self, model: Model, tool_names: Sequence[str]) -> dict[str, Any]:
        config = self._session.get_value(LANE_CONFIG, self._lane)
        out: dict[str, Any] = dict(config) if isinstance(config, Mapping) else {}
        out["model"] = {"provider": model.provider, "modelId": model.id}
        out.setdefault("thinkingLevel", "off")
        out["activeToolNames"] = list(tool_names)
        return out

    async def before_request(
        self,
        model: Model,
        attempts: int,
        tool_names: Sequence[str],
        base_delay_ms: int = 1000,
    ) -> None:
        """Before a request is sent: ``checkpoint`` -> ``assistant.ready`` ->
        ``assistant.effect_pending``, each its own transaction (Pi's). The retry policy
        recorded is ``attempts`` and ``base_delay_ms`` (what Pi's drive waits before it
        asks again)."""
        if self._op_id is None:
            return
        state = self._state
        trigger = self._session.leaf_id
        transactions: list[list[Write]] = []
        at = state.get("at")
        if at in ("starting", None):
            checkpoint = {
                **self._scope(),
                "at": "checkpoint",
                "continuation": _NEED_ASSISTANT,
                "triggerEntryId": trigger,
            }
            transactions.append([self._put(checkpoint)])
            state = checkpoint
        if state.get("at") == "checkpoint":
            step = new_id()
            ready = {
                **self._scope(),
                "at": "assistant.ready",
                "continuation": state.get("continuation"),
                "triggerEntryId": state.get("triggerEntryId", trigger),
                "generationContext": Encoded(
                    stepId=step,
                    triggerEntryId=self._request_trigger(state, trigger),
                    configuration=Encoded(self._configuration(model, tool_names)),
                    streamOptions={},
                    retryPolicy={"maxAttempts": attempts, "baseDelayMs": base_delay_ms},
                    overflowRecoveryUsed=False,
                ),
                "nextAttempt": 1,
            }
            transactions.append([self._put(ready), self._lane_state(self._op_id)])
            state = ready
        elif state.get("at") == "assistant.retry_wait":
            # Pi's runRetryWait: the wait over, the attempt is ready (its own transaction)
            ready = {
                **self._scope(),
                "at": "assistant.ready",
                "generationContext": state.get("generationContext"),
                "nextAttempt": state.get("nextAttempt"),
            }
            transactions.append([self._put(ready)])
            state = ready
        pending = {
            **self._scope(),
            "at": "assistant.effect_pending",
            "generationContext": state.get("generationContext"),
            "attempt": state.get("nextAttempt", int(state.get("attempt", 0)) + 1),
            "responseEntryId": new_id(),
            "usageId": new_id(),
            "intendedOutputLimit": model.max_tokens,
            "contextWindow": model.context_window,
        }
        transactions.append([self._put(pending)])
        await self._session._record(transactions)

    def delivered(self, entry_id: str) -> None:
        """A queued message (steering) was taken into the transcript in the run: the next
        request answers it (see :meth:`before_request`)."""
        self._delivered = entry_id

    def _request_trigger(self, checkpoint: Mapping[str, Any], leaf: str | None) -> Any:
        """The entry a request answers (Pi's ``planBoundaryInbox``): the queued message
        delivered at the checkpoint, when it is the last entry, else the checkpoint's
        trigger (as Pi's restore of a checkpoint the delivery came after: pitrio writes
        the delivery in a transaction of its own, Pi with ``assistant.ready``)."""
        delivered, self._delivered = self._delivered, None
        if delivered is not None and delivered == leaf:
            return leaf
        return checkpoint.get("triggerEntryId", leaf)

    @property
    def response_entry_id(self) -> str | None:
        if self._state.get("at") == "assistant.effect_pending":
            value: str | None = self._state.get("responseEntryId")
            return value
        return None

    @property
    def frames_key(self) -> str | None:
        """The key of the frame list of the request that is out (``None`` when none is)."""
        entry_id = self.response_entry_id
        if entry_id is None or self._op_id is None:
            return None
        return frames_key(self._op_id, entry_id)

    def reserved(self, message: AssistantMessage | ToolResultMessage) -> bool:
        """Whether ``message`` has an entry id reserved by the run's records (a settled
        answer to the pending request, the result of a call of the batch):
        :meth:`commit_assistant_end` and :meth:`commit_tool_result_end` take it."""
        if isinstance(message, AssistantMessage):
            return self.response_entry_id is not None and message.stop_reason != "pending"
        return self._call(message.tool_call_id) is not None

    async def assistant_end(self, message: AssistantMessage, *, retry: bool) -> str:
        """The response is in: its entry under the reserved id with the next state (a
        tool batch of ``planned`` calls, a ``checkpoint`` that may finish, or
        ``assistant.retry_wait`` when it failed and will be retried), written."""
        if not self.reserved(message):
            return await self._session.append_message(message)
        entry_id = self.commit_assistant_end(message, retry=retry)
        await self._session._write()
        return entry_id

    def commit_assistant_end(
        self,
        message: AssistantMessage,
        *,
        retry: bool,
        overflow: tuple[Mapping[str, Any], JSONValue] | None = None,
    ) -> str:
        """:meth:`assistant_end` without the write (the next write carries it: before a
        tool runs, the next request, the save point); ``message`` is :meth:`reserved`.
        ``overflow``: a context overflow to compact (its task and preparation), recorded
        with the failed answer as the run's ``summary.deciding`` (Pi's
        ``publishResponse``)."""
        session = self._session
        entry_id = self.response_entry_id
        assert entry_id is not None
        frames = [delete_frames(frames_key(str(self._op_id), entry_id))]
        pending = self._state
        self._state = {**pending, "latestAssistantEntryId": entry_id}
        scope = self._scope()
        context = pending.get("generationContext") or {}
        calls = [
            (index, block)
            for index, block in enumerate(message.content)
            if isinstance(block, ToolCall)
        ]
        state: dict[str, Any]
        if message.stop_reason in ("error", "aborted"):
            if overflow is not None and self._op_id is not None:
                task, preparation = overflow
                state = {**scope, "at": "summary.deciding", "task": dict(task)}
                key = f"{self._op_id}:{task['taskId']}"
                after = [*frames, _set(_OP_PREPARATION, key, preparation), self._put(state)]
                return session._commit_message(message, entry_id=entry_id, after=after)
            if not retry:
                # The run ends (or recovers from an overflow, which asks again).
                state = {
                    **scope,
                    "at": "checkpoint",
                    "continuation": _NEED_ASSISTANT,
                    "triggerEntryId": entry_id,
                }
                return session._commit_message(
                    message, entry_id=entry_id, after=[*frames, self._put(state)]
                )
            # Pi's publishResponse: the failed answer is the latest assistant entry
            state = {
                **scope,
                "at": "assistant.retry_wait",
                "generationContext": context,
                "nextAttempt": int(pending.get("attempt", 1)) + 1,
                "notBefore": now_ms(),
                "errorMessage": message.error_message or "Assistant request failed",
            }
        elif calls and message.stop_reason == "toolUse":
            self._calls = {block.id: n for n, (_, block) in enumerate(calls)}
            state = {
                **scope,
                "at": "tools",
                "batch": Record(
                    assistantEntryId=entry_id,
                    configuration=context.get("configuration"),
                    turnId=context.get("stepId"),
                    calls=[
                        Encoded(status="planned", sourceIndex=index, resultEntryId=new_id())
                        for index, _ in calls
                    ],
                ),
            }
        else:
            state = {
                **scope,
                "at": "checkpoint",
                "continuation": _MAY_FINISH,
                "triggerEntryId": entry_id,
            }
        return session._commit_message(
            message, entry_id=entry_id, after=[*frames, self._put(state)]
        )

    def _call(self, tool_call_id: str) -> tuple[int, dict[str, Any]] | None:
        if self._state.get("at") != "tools" or tool_call_id not in self._calls:
            return None
        n = self._calls[tool_call_id]
        return n, self._state["batch"]["calls"][n]

    def invocation_ids(self, tool_call_id: str) -> tuple[str, str, str] | None:
        """``(operation id, turn id, invocation id)`` of a call whose intent is recorded
        (``effect_pending``), else ``None``."""
        found = self._call(tool_call_id)
        if found is None or found[1]["status"] != "effect_pending" or self._op_id is None:
            return None
        return self._op_id, str(self._state["batch"]["turnId"]), str(found[1]["resultEntryId"])

    def owns_effect(self, operation_id: str, invocation_id: str) -> bool:
        """Whether the call ``invocation_id`` of ``operation_id`` is running
        (``effect_pending``): Pi's ``ownsEffect``."""
        if self._op_id != operation_id or self._state.get("at") != "tools":
            return False
        return any(
            c["resultEntryId"] == invocation_id and c["status"] == "effect_pending"
            for c in self._state["batch"]["calls"]
        )

    def note_memo(self) -> None:
        """A memo of the operation was written (see :meth:`_memos`)."""
        self._memos_set = True

    def _memos(self, invocation_id: str | None = None) -> list[Write]:
        """Deletes of the memos of one call (or of the whole operation)."""
        if not self._memos_set:
            return []
        prefix = f"{self._op_id}:" if invocation_id is None else f"{self._op_id}:{invocation_id}:"
        return [
            _delete(OP_TOOL_MEMO, key)
            for namespace, key in list(self._session._state.values)
            if namespace == OP_TOOL_MEMO and key.startswith(prefix)
        ]

    def clear_checkpoint(self, invocation_id: str) -> list[Write]:
        """Before a safe replay, the call's last checkpoint goes (Pi's
        ``clearReplayCheckpoint``)."""
        return [_delete(PENDING_TOOL_OUTPUT, f"{self._op_id}:{invocation_id}")]

    def checkpoint_of(self, invocation_id: str) -> JSONValue:
        """The call's last checkpoint (``pi.pending.tool_output``), or ``None``."""
        return self._session.get_value(PENDING_TOOL_OUTPUT, f"{self._op_id}:{invocation_id}")

    def _with_call(self, n: int, call: dict[str, Any]) -> Write:
        batch = Record(self._state["batch"])
        calls = list(batch["calls"])
        calls[n] = Encoded(call)  # the other calls' JSON is reused
        batch["calls"] = calls
        return self._put({**self._state, "batch": batch})

    def _args_key(self, source_index: int) -> str:
        return f"{self._op_id}:{self._state['batch']['turnId']}:{source_index}"

    async def tool_intent(self, tool_call_id: str, args: JSONValue, tool: AgentTool | None) -> None:
        """Before a tool runs: its arguments and the call ``effect_pending`` with its
        replay policy (Pi's ``publishToolIntent``), written."""
        found = self._call(tool_call_id)
        if found is None or found[1]["status"] != "planned":
            return
        self.commit_tool_intent(tool_call_id, args, tool)
        await self._session._write()

    def commit_tool_intent(
        self, tool_call_id: str, args: JSONValue, tool: AgentTool | None
    ) -> bool:
        """:meth:`tool_intent` without the write; returns whether it must be written
        now: no call of the batch is left ``planned`` (the calls of a parallel batch
        start together; a tool run alone writes what is pending before it runs, see
        ``_invocation.InvokedTool``)."""
        found = self._call(tool_call_id)
        if found is None or found[1]["status"] != "planned":
            return False
        n, call = found
        intent = {
            "status": "effect_pending",
            "sourceIndex": call["sourceIndex"],
            "resultEntryId": call["resultEntryId"],
            "replay": replay_policy(tool),
        }
        writes = [_set(OP_TOOL_ARGS, self._args_key(call["sourceIndex"]), args)]
        self._session._commit([*writes, self._with_call(n, intent)])
        return all(c["status"] != "planned" for c in self._state["batch"]["calls"])

    async def tool_outcome(self, message: ToolResultMessage, terminate: bool) -> None:
        """A tool's result, before it joins the transcript: kept as ``pi.pending.entry``
        and the call ``outcome_ready`` (Pi's ``publishToolOutcome``), written."""
        found = self._call(message.tool_call_id)
        if found is None or found[1]["status"] not in ("planned", "effect_pending"):
            return
        self.commit_tool_outcome(message, terminate)
        await self._session._write()

    def tool_running(self, delta: int) -> None:
        """A tool starts (``+1``) or returns (``-1``): see :meth:`commit_tool_outcome`."""
        self._running += delta

    def commit_tool_outcome(self, message: ToolResultMessage, terminate: bool) -> bool:
        """:meth:`tool_outcome` without the write; returns whether it must be written
        now: a tool of the batch is still running (the outcome must not wait for a
        sibling that stalls). Otherwise it waits for the next write, which comes
        without waiting on any tool: the other calls' ends, the batch's result entries,
        then the save point (or the next call's intent)."""
        found = self._call(message.tool_call_id)
        if found is None or found[1]["status"] not in ("planned", "effect_pending"):
            return False
        n, call = found
        rid = call["resultEntryId"]
        ready = {
            "status": "outcome_ready",
            "sourceIndex": call["sourceIndex"],
            "resultEntryId": rid,
            "terminate": terminate,
        }
        form: dict[str, Any] = wire.unstructure(message)
        payload: dict[str, Any]
        if _large(message):
            # Its JSON made once for the outcome and the entry (restamped, _wire_form).
            form = Encoded(form)
            payload = Record(type="message", payload=form)
        else:  # a small one costs less encoded twice than spliced
            payload = {"type": "message", "payload": form}
        self._forms[message.tool_call_id] = (message, form)
        writes = [
            _set(PENDING_ENTRY, rid, payload),
            _delete(PENDING_TOOL_OUTPUT, f"{self._op_id}:{rid}"),
            *self._memos(rid),
            self._with_call(n, ready),
        ]
        self._session._commit(writes)
        return self._running > 0

    async def tool_result_end(self, message: ToolResultMessage) -> str:
        """A tool result joins the transcript under its reserved id; the call is
        ``completed``, and the last one makes the run a ``checkpoint`` again; written."""
        if not self.reserved(message):
            return await self._session.append_message(message)
        entry_id = self.commit_tool_result_end(message)
        await self._session._write()
        return entry_id

    def commit_tool_result_end(self, message: ToolResultMessage) -> str:
        """:meth:`tool_result_end` without the write (the next write carries it: the
        next tool's, the next request's, the save point's); ``message`` is
        :meth:`reserved`."""
        found = self._call(message.tool_call_id)
        assert found is not None
        n, call = found
        rid = call["resultEntryId"]
        done = {
            "status": "completed",
            "sourceIndex": call["sourceIndex"],
            "resultEntryId": rid,
            "terminate": bool(call.get("terminate", False)),
        }
        after = [_delete(OP_TOOL_ARGS, self._args_key(call["sourceIndex"]))]
        write = self._with_call(n, done)
        calls = self._state["batch"]["calls"]
        if all(c["status"] == "completed" for c in calls):
            final = all(c.get("terminate") for c in calls)
            write = self._put(
                {
                    **self._scope(),
                    "at": "checkpoint",
                    "continuation": _MAY_FINISH_TOOLS if final else _NEED_ASSISTANT,
                    "triggerEntryId": rid,
                }
            )
        return self._session._commit_message(
            message,
            entry_id=rid,
            beside=[_delete(PENDING_ENTRY, rid)],  # Pi's order: entry, staged copy, tip
            after=[*after, write],
            wire_form=self._wire_form(message),
        )

    def _wire_form(self, message: ToolResultMessage) -> dict[str, Any] | None:
        """The result entry's message as JSON, from its outcome's (unstructured once):
        the same result, stamped when the loop made its message; ``None`` when the
        message is not the outcome's."""
        known = self._forms.pop(message.tool_call_id, None)
        if known is None:
            return None
        outcome, form = known
        if not (
            message.content is outcome.content
            and message.details is outcome.details
            and message.usage is outcome.usage
            and message.added_tool_names == outcome.added_tool_names
            and message.is_error == outcome.is_error
            and message.tool_name == outcome.tool_name
        ):
            return None
        if type(form) is Encoded:
            return restamped(form, message.timestamp)
        return {**form, "timestamp": message.timestamp}

    async def finish(
        self,
        status: Literal["completed", "aborted", "failed"],
        error: Mapping[str, str] | None = None,
    ) -> None:
        """The run is over: its records give way to ``pi.result`` (with ``error``, Pi's
        ``{code, message}``, when given) and the lane is idle (Pi's terminal
        transaction)."""
        op_id = self._op_id
        if op_id is None:
            return
        session = self._session
        record = {
            "operationId": op_id,
            "kind": "run",
            "status": status,
            **({} if error is None else {"error": dict(error)}),
            "fromTipId": self._meta.get("sourceTipId"),
            "tipId": session.leaf_id,
            "startedAt": self._meta.get("startedAt"),
            "endedAt": now_ms(),
        }
        writes: list[Write] = [_delete(OP_META, op_id), _delete(OP_STATE, op_id)]
        prefix = f"{op_id}:"
        for namespace, key in list(session._state.values):
            if namespace in (
                OP_TOOL_ARGS,
                OP_TOOL_MEMO,
                PENDING_TOOL_OUTPUT,
                _OP_PREPARATION,
            ) and key.startswith(prefix):
                writes.append(_delete(namespace, key))
        if self.frames_key is not None:
            writes.append(delete_frames(self.frames_key))
        if self._state.get("at") == "tools":
            for call in self._state["batch"]["calls"]:
                if (PENDING_ENTRY, call["resultEntryId"]) in session._state.values:
                    writes.append(_delete(PENDING_ENTRY, call["resultEntryId"]))
        writes += [_set(OP_RESULT, op_id, record), self._lane_state(None, op_id)]
        self._op_id = None
        self._state = {}
        self._calls = {}
        self._forms = {}
        self._memos_set = False
        await session._record([writes])


def settings_json(settings: Any, tool_execution: str) -> dict[str, Any]:
    """Pi's operation ``settings`` from the harness's."""
    return {
        "compaction": {
            "enabled": bool(settings.enabled),
            "reserveTokens": int(settings.reserve_tokens),
            "keepRecentTokens": int(settings.keep_recent_tokens),
        },
        "steeringMode": "all",
        "followUpMode": "all",
        "toolExecution": tool_execution,
    }


def pending_result(session: Session, result_entry_id: str) -> ToolResultMessage | None:
    """A tool result kept as ``pi.pending.entry`` (an outcome recorded before the crash)."""
    stored = session.get_value(PENDING_ENTRY, result_entry_id)
    payload = stored.get("payload") if isinstance(stored, Mapping) else None
    if not isinstance(stored, Mapping) or not isinstance(payload, Mapping):
        return None
    message = wire.structure_message(payload)
    return message if isinstance(message, ToolResultMessage) else None


def stored_args(session: Session, operation_id: str, turn_id: str, index: int) -> JSONValue:
    return session.get_value(OP_TOOL_ARGS, f"{operation_id}:{turn_id}:{index}")
