"""Compaction and tree navigation as operations, written as Pi's harness writes them.

Pi 0.85.0's lane (pi-agent-core ``harness/runtime/lane.js``: ``acceptCompaction``,
``acceptNavigation``; ``drive/structural.js``) runs a standalone compaction
(``lane.compact()``) and a tree navigation (``lane.navigateTree()``) as operations of
their own, recorded before and after each effect:

* the first transaction names the operation (``pi.op.meta``, its intent ``compaction`` or
  ``navigation``), its state and the lane's (``currentOperationId``); a summary's input is
  kept as ``pi.op.preparation`` (``OPERATION:TASK``), so a restarted process summarises the
  same messages;
* a summary goes ``summary.deciding`` -> ``summary.ready`` (with the id its entry will
  take, the model and the retry policy) -> ``summary.effect_pending`` (``attempt``; each
  request as ``request: {index, usageId}`` before it is sent, then its usage row and
  ``usageIds``) -> the entry; an attempt that fails with a retryable error waits in
  ``summary.retry_wait``;
* a navigation without a summary is ``navigation.ready_to_commit``;
* the last transaction writes the entry (a ``compaction``, or a ``branch_summary`` under
  the target), moves the tip, sets the target's label, deletes the operation's records and
  writes ``pi.result``, with the lane idle again.

:class:`StructuralOperation` writes these transactions; the harness drives it
(``Harness.compact``, ``Harness.navigate_tree``) and, for an operation a killed process
left, resumes it from its state (Pi's ``recoverStructuralGeneration``: an attempt that was
out is counted as interrupted and made again, as the next attempt).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal, final

from pitrio import AgentMessage, AssistantMessage, Usage, wire

from ._branch_summary import BranchPreparation
from ._compaction import CompactionPreparation, CompactionSettings
from ._compaction_utils import FileOperations
from ._entries import JSONValue, Write, new_id, now_ms
from ._errors import SessionFormatError
from ._operations import OP_META, OP_RESULT, OP_STATE, Operation, lane_state_write
from ._session import Session
from ._session_state import BRANCH_TIP, ENTRY_LABEL, LANE_CONFIG

__all__ = [
    "INTERRUPTED_SUMMARY",
    "OVERFLOW_DECLINED",
    "OP_PREPARATION",
    "StructuralOperation",
    "branch_preparation_from",
    "compaction_preparation_from",
]

OP_PREPARATION: Final = "pi.op.preparation"

# Pi's text (drive/structural.js, recoverStructuralGeneration).
INTERRUPTED_SUMMARY: Final = (
    "Structural summary attempt was interrupted and its external outcome is unknown"
)
# Pi's error when a hook declines an overflow's compaction (``drive/structural.js``: the run
# fails, code ``compaction_declined``).
OVERFLOW_DECLINED: Final = "Overflow compaction was declined"

Status = Literal["completed", "declined", "aborted", "failed"]


def _set(namespace: str, key: str, value: JSONValue) -> Write:
    return {"kind": "value", "op": "set", "namespace": namespace, "key": key, "value": value}


def _delete(namespace: str, key: str) -> Write:
    return {"kind": "value", "op": "delete", "namespace": namespace, "key": key}


def _messages(messages: Sequence[AgentMessage]) -> list[Any]:
    return [wire.unstructure(m) for m in messages]


def _structure(values: Any) -> tuple[AgentMessage, ...]:
    if not isinstance(values, list):
        msg = "an operation's preparation holds no message list (pi.op.preparation)"
        raise SessionFormatError(msg)
    return tuple(wire.structure_message(v) for v in values)


def _file_ops(file_ops: FileOperations) -> dict[str, Any]:
    return {
        "read": sorted(file_ops.read),
        "written": sorted(file_ops.written),
        "edited": sorted(file_ops.edited),
    }


def _file_ops_from(value: Any) -> FileOperations:
    value = value if isinstance(value, Mapping) else {}
    return FileOperations(
        read=set(value.get("read") or ()),
        written=set(value.get("written") or ()),
        edited=set(value.get("edited") or ()),
    )


def compaction_preparation_json(preparation: CompactionPreparation) -> dict[str, Any]:
    """Pi's ``durableCompactionPreparation``."""
    out: dict[str, Any] = {
        "kind": "compaction",
        "messagesToSummarize": _messages(preparation.messages_to_summarize),
        "turnPrefixMessages": _messages(preparation.turn_prefix_messages),
        "retainedTail": _messages(preparation.retained_tail),
        "isSplitTurn": preparation.is_split_turn,
        "tokensBefore": preparation.tokens_before,
    }
    if preparation.previous_summary is not None:
        out["previousSummary"] = preparation.previous_summary
    settings = preparation.settings
    out["fileOps"] = _file_ops(preparation.file_ops)
    out["settings"] = {
        "enabled": settings.enabled,
        "reserveTokens": settings.reserve_tokens,
        "keepRecentTokens": settings.keep_recent_tokens,
    }
    return out


def compaction_preparation_from(value: Mapping[str, Any]) -> CompactionPreparation:
    """A compaction preparation read back from ``pi.op.preparation``."""
    settings = value.get("settings") or {}
    previous = value.get("previousSummary")
    return CompactionPreparation(
        messages_to_summarize=_structure(value.get("messagesToSummarize")),
        turn_prefix_messages=_structure(value.get("turnPrefixMessages", [])),
        retained_tail=_structure(value.get("retainedTail")),
        is_split_turn=bool(value.get("isSplitTurn")),
        tokens_before=int(value.get("tokensBefore", 0)),
        previous_summary=previous if isinstance(previous, str) else None,
        file_ops=_file_ops_from(value.get("fileOps")),
        settings=CompactionSettings(
            enabled=bool(settings.get("enabled", True)),
            reserve_tokens=int(settings.get("reserveTokens", 16384)),
            keep_recent_tokens=int(settings.get("keepRecentTokens", 20000)),
        ),
    )


def branch_preparation_json(preparation: BranchPreparation) -> dict[str, Any]:
    """Pi's ``durableBranchPreparation``."""
    return {
        "kind": "branch_summary",
        "messages": _messages(preparation.messages),
        "fileOps": _file_ops(preparation.file_ops),
        "totalTokens": preparation.total_tokens,
    }


def branch_preparation_from(value: Mapping[str, Any]) -> BranchPreparation:
    """A branch-summary preparation read back from ``pi.op.preparation``."""
    return BranchPreparation(
        messages=_structure(value.get("messages")),
        file_ops=_file_ops_from(value.get("fileOps")),
        total_tokens=int(value.get("totalTokens", 0)),
    )


@final
class StructuralOperation:
    """One compaction or navigation operation of a lane, written as Pi writes it.

    Made by :meth:`begin` (a new one: its first transaction) or :meth:`adopt` (one a
    killed process left); each method writes its transaction before it returns.
    """

    __slots__ = ("_lane", "_meta", "_session", "_state")

    def __init__(self, session: Session, meta: Mapping[str, Any], state: Mapping[str, Any]) -> None:
        self._session = session
        self._lane = session.lane_name
        self._meta = dict(meta)
        self._state: dict[str, Any] = dict(state)

    @property
    def id(self) -> str:
        return str(self._meta["operationId"])

    @property
    def meta(self) -> Mapping[str, Any]:
        return self._meta

    @property
    def state(self) -> Mapping[str, Any]:
        return self._state

    @property
    def at(self) -> str:
        return str(self._state["at"])

    @property
    def task(self) -> Mapping[str, Any]:
        task: Mapping[str, Any] = self._state.get("task") or {}
        return task

    @property
    def source_tip_id(self) -> str | None:
        tip = self._meta.get("sourceTipId")
        return tip if isinstance(tip, str) else None

    @classmethod
    def adopt(cls, session: Session, operation: Operation) -> StructuralOperation:
        """Go on with an operation restored from the session."""
        return cls(session, operation.meta, operation.state)

    def _lane_state(self, current: str | None, last: str | None) -> Write:
        return lane_state_write(self._session, self._lane, current, last)

    def _put(self, state: dict[str, Any]) -> Write:
        self._state = state
        return _set(OP_STATE, self.id, state)

    def _scope(self) -> dict[str, Any]:
        """What every state carries (Pi's ``operationScopeOf``)."""
        return {
            "control": self._state.get("control", {"status": "running"}),
            "settings": self._state.get("settings"),
            "latestAssistantEntryId": self._state.get("latestAssistantEntryId"),
        }

    @classmethod
    async def begin(
        cls,
        session: Session,
        *,
        intent: dict[str, Any],
        settings: Mapping[str, Any],
        configuration: Mapping[str, Any],
        state: dict[str, Any],
        preparation: dict[str, Any] | None,
    ) -> StructuralOperation:
        """Accept a compaction or navigation (Pi's first transaction: the preparation,
        ``op.meta``, ``op.state``, the lane's state). ``state``: the fields after the
        scope (``at``, ``task`` or ``targetId``)."""
        op_id = new_id()
        lane = session.lane_name
        meta = {
            "operationId": op_id,
            "lane": lane,
            "sourceTipId": session.leaf_id,
            "startedAt": now_ms(),
            "intent": intent,
        }
        scope = {
            "control": {"status": "running"},
            "settings": dict(settings),
            "latestAssistantEntryId": None,
        }
        operation = cls(session, meta, {**scope, **state})
        writes: list[Write] = []
        if (LANE_CONFIG, lane) not in session._state.values:
            writes.append(_set(LANE_CONFIG, lane, dict(configuration)))
        if preparation is not None:
            task_id = str(state["task"]["taskId"])
            writes.append(_set(OP_PREPARATION, f"{op_id}:{task_id}", preparation))
        writes += [
            _set(OP_META, op_id, meta),
            _set(OP_STATE, op_id, operation._state),
            operation._lane_state(op_id, None),
        ]
        await session._record([writes])
        return operation

    @classmethod
    async def begin_in_run(
        cls,
        session: Session,
        meta: Mapping[str, Any],
        checkpoint: Mapping[str, Any],
        *,
        reason: str,
        preparation: dict[str, Any],
    ) -> StructuralOperation:
        """A compaction inside a run (Pi's ``runCheckpoint`` with the threshold reached):
        the run's state becomes ``summary.deciding``, its task resuming the run at the
        ``checkpoint`` it was at (``resume_checkpoint``), with the preparation beside it
        (one transaction)."""
        operation = cls(session, meta, checkpoint)
        resume_after = {
            "continuation": checkpoint.get("continuation"),
            "triggerEntryId": checkpoint.get("triggerEntryId"),
        }
        task = {
            "taskId": new_id(),
            "reason": reason,
            "boundary": {"kind": "resume_checkpoint", "resumeAfter": resume_after},
        }
        state = {**operation._scope(), "at": "summary.deciding", "task": task}
        key = f"{operation.id}:{task['taskId']}"
        writes = [
            _set(OP_PREPARATION, key, preparation),
            operation._put(state),
            operation._lane_state(operation.id, None),
        ]
        await session._record([writes])
        return operation

    @property
    def in_run(self) -> bool:
        """Whether this is a run's compaction (its end resumes the run)."""
        return bool(self._meta.get("intent", {}).get("kind") == "run")

    def _resumed(
        self, configuration: Mapping[str, Any], retry_policy: Mapping[str, int]
    ) -> dict[str, Any]:
        """The run's state after its compaction (Pi's ``resume_checkpoint``): a request
        is ``assistant.ready`` at the checkpoint's trigger; a run that may finish is at
        its checkpoint again."""
        boundary = self.task.get("boundary") or {}
        resume_after = boundary.get("resumeAfter") or {}
        continuation = resume_after.get("continuation") or {}
        if continuation.get("kind") == "may_finish":
            return {**self._scope(), "at": "checkpoint", **resume_after}
        return {
            **self._scope(),
            "at": "assistant.ready",
            "generationContext": {
                "stepId": new_id(),
                "triggerEntryId": resume_after.get("triggerEntryId"),
                "configuration": dict(configuration),
                "streamOptions": {},
                "retryPolicy": dict(retry_policy),
                "overflowRecoveryUsed": bool(continuation.get("overflowRecoveryUsed")),
            },
            "nextAttempt": 1,
        }

    async def resume_run(
        self,
        configuration: Mapping[str, Any],
        retry_policy: Mapping[str, int],
        before: Sequence[Write] = (),
    ) -> Mapping[str, Any]:
        """A run's compaction ends: ``before`` (the entry, the tip) and the run's state
        at its checkpoint again, in one transaction; returns that state. The run goes on
        from there (a threshold compaction a hook declined leaves no entry: the run goes
        on uncompacted; one that failed ends the run, see ``Harness._fail_run``)."""
        state = self._resumed(configuration, retry_policy)
        lane = self._lane_state(self.id, None)
        await self._session._record([[*before, self._put(state), lane]])
        return state

    def preparation(self) -> Mapping[str, Any]:
        """The summary's input (``pi.op.preparation``).

        Raises:
            SessionFormatError: the session does not hold it.
        """
        stored = self._session.get_value(OP_PREPARATION, f"{self.id}:{self.task.get('taskId')}")
        if not isinstance(stored, Mapping):
            msg = f"Structural task {self.task.get('taskId')} is missing its preparation"
            raise SessionFormatError(msg)
        return stored

    async def ready(
        self,
        configuration: Mapping[str, Any],
        retry_policy: Mapping[str, int],
        next_attempt: int = 1,
    ) -> None:
        """``summary.deciding`` -> ``summary.ready``: the summary's entry id is reserved."""
        state = {
            **self._scope(),
            "at": "summary.ready",
            "task": self.task,
            "summaryContext": {
                "resultEntryId": new_id(),
                "configuration": dict(configuration),
                "streamOptions": {"deferred": False},
                "retryPolicy": dict(retry_policy),
            },
            "nextAttempt": next_attempt,
        }
        await self._session._record([[self._put(state)]])

    @property
    def result_entry_id(self) -> str | None:
        context = self._state.get("summaryContext") or {}
        value = context.get("resultEntryId")
        return value if isinstance(value, str) else None

    @property
    def max_attempts(self) -> int:
        context = self._state.get("summaryContext") or {}
        return int((context.get("retryPolicy") or {}).get("maxAttempts", 1))

    @property
    def base_delay_ms(self) -> int:
        context = self._state.get("summaryContext") or {}
        return int((context.get("retryPolicy") or {}).get("baseDelayMs", 1000))

    @property
    def attempt(self) -> int:
        """The attempt out (``summary.effect_pending``) or next (``ready``,
        ``retry_wait``)."""
        return int(self._state.get("attempt") or self._state.get("nextAttempt") or 1)

    async def effect_pending(self) -> None:
        """``summary.ready`` -> ``summary.effect_pending`` (Pi's attempt intent)."""
        state = {
            **self._scope(),
            "at": "summary.effect_pending",
            "task": self.task,
            "summaryContext": self._state.get("summaryContext"),
            "attempt": int(self._state.get("nextAttempt", 1)),
            "usageIds": [],
        }
        await self._session._record([[self._put(state)]])

    async def request(self, index: int) -> None:
        """A summary request is about to be sent (``request: {index, usageId}``)."""
        state = {**self._state, "request": {"index": index, "usageId": new_id()}}
        await self._session._record([[self._put(state)]])

    async def response(self, message: AssistantMessage) -> None:
        """Its response is in: its usage row, and its id joins ``usageIds``."""
        request = self._state.get("request")
        if not isinstance(request, Mapping):
            return
        usage_id = str(request["usageId"])
        state = {k: v for k, v in self._state.items() if k != "request"}
        state["usageIds"] = [*state.get("usageIds", []), usage_id]
        row: Write = {
            "kind": "usage",
            "id": usage_id,
            "usage": wire.unstructure(message.usage),
            "adjustment": False,
        }
        await self._session._record([[row, self._put(state)]])

    async def retry_wait(self, error_message: str) -> int:
        """The attempt out failed (or was interrupted): wait for the next one
        (``summary.retry_wait``); returns its ``notBefore`` (ms)."""
        attempt = int(self._state.get("attempt", 1))
        delay = self.base_delay_ms * 2 ** max(0, attempt - 1)
        state = {
            **self._scope(),
            "at": "summary.retry_wait",
            "task": self.task,
            "summaryContext": self._state.get("summaryContext"),
            "nextAttempt": attempt + 1,
            "notBefore": now_ms() + delay,
            "errorMessage": error_message,
        }
        await self._session._record([[self._put(state)]])
        return int(state["notBefore"])

    async def ready_again(self) -> None:
        """``summary.retry_wait`` -> ``summary.ready`` (the next attempt)."""
        state = {
            **self._scope(),
            "at": "summary.ready",
            "task": self.task,
            "summaryContext": self._state.get("summaryContext"),
            "nextAttempt": int(self._state.get("nextAttempt", 1)),
        }
        await self._session._record([[self._put(state)]])

    def _cleanup(self) -> list[Write]:
        """Pi's ``operationCleanupWrites``: the operation's records go."""
        prefix = f"{self.id}:"
        writes = [_delete(OP_META, self.id), _delete(OP_STATE, self.id)]
        for namespace, key in list(self._session._state.values):
            if namespace == OP_PREPARATION and key.startswith(prefix):
                writes.append(_delete(namespace, key))
        return writes

    def _terminal(
        self, status: Status, tip_id: str | None, error: Mapping[str, str] | None
    ) -> list[Write]:
        record: dict[str, Any] = {
            "operationId": self.id,
            "kind": self._meta["intent"]["kind"],
            "status": status,
        }
        if error is not None:
            record["error"] = dict(error)
        record.update(
            fromTipId=self.source_tip_id,
            tipId=tip_id,
            startedAt=self._meta.get("startedAt"),
            endedAt=now_ms(),
        )
        return [
            *self._cleanup(),
            _set(OP_RESULT, self.id, record),
            self._lane_state(None, self.id),
        ]

    async def finish(
        self,
        status: Status,
        *,
        error: Mapping[str, str] | None = None,
        before: Sequence[Write] = (),
        tip_id: str | None = None,
    ) -> None:
        """The operation ends: ``before`` (the entry, the tip) with its records deleted,
        ``pi.result`` and the lane idle, in one transaction (Pi's terminal). A run's
        compaction declined or aborted leaves the run at the checkpoint it was at instead
        (the run goes on, or ends, from there; a failed one ends the run: the harness
        writes the run's result)."""
        if self.in_run:
            boundary = self.task.get("boundary") or {}
            resume_after = boundary.get("resumeAfter") or {}
            state = {**self._scope(), "at": "checkpoint", **resume_after}
            await self._session._record([[*before, self._put(state)]])
            return
        tip = tip_id if before else self._session.leaf_id
        await self._session._record([[*before, *self._terminal(status, tip, error)]])

    def compaction_writes(
        self,
        summary: str,
        *,
        tokens_before: int,
        retained_tail: Sequence[AgentMessage],
        details: JSONValue,
        usage: Usage | None,
        from_hook: bool = False,
    ) -> tuple[str, list[Write]]:
        """The compaction entry under the reserved id, and the tip on it; ``from_hook``:
        a ``before_compaction`` hook gave it (a new id; its usage, if any, as a usage
        row first, Pi's ``publishStructuralOutcome``)."""
        writes = self._hook_usage(usage) if from_hook else []
        entry_id = self.result_entry_id or new_id()
        entry: Write = {
            "kind": "entry",
            "id": entry_id,
            "parentId": self._session.leaf_id,
            "type": "compaction",
            "summary": summary,
            "retainedTail": _messages(retained_tail),
            "tokensBefore": tokens_before,
            "details": details,
        }
        if usage is not None:
            entry["usage"] = wire.unstructure(usage)
        entry["fromHook"] = from_hook
        return entry_id, [*writes, entry, _set(BRANCH_TIP, self._lane, entry_id)]

    @staticmethod
    def _hook_usage(usage: Usage | None) -> list[Write]:
        if usage is None:
            return []
        return [
            {"kind": "usage", "id": new_id(), "usage": wire.unstructure(usage), "adjustment": False}
        ]

    def navigation_writes(
        self,
        target_id: str | None,
        label: str | None,
        summary: tuple[str, JSONValue, Usage | None] | None,
        from_hook: bool = False,
    ) -> tuple[str | None, list[Write]]:
        """The tip moved to the target (and, with a summary, the ``branch_summary`` entry
        under it, the tip on that), the target's label: the new tip and the writes;
        ``from_hook``: a ``before_navigation`` hook gave the summary (as
        :meth:`compaction_writes`)."""
        writes: list[Write] = []
        if from_hook and summary is not None:
            writes += self._hook_usage(summary[2])
        writes.append(_set(BRANCH_TIP, self._lane, target_id))
        tip = target_id
        if summary is not None:
            text, details, usage = summary
            tip = self.result_entry_id or new_id()
            entry: Write = {
                "kind": "entry",
                "id": tip,
                "parentId": target_id,
                "type": "branch_summary",
                "fromId": self.source_tip_id,
                "summary": text,
                "details": details,
            }
            if usage is not None:
                entry["usage"] = wire.unstructure(usage)
            entry["fromHook"] = from_hook
            writes += [entry, _set(BRANCH_TIP, self._lane, tip)]
        if label is not None and target_id is not None:
            writes.append(_set(ENTRY_LABEL, target_id, label))
        return tip, writes
