"""Tool invocations: a tool call's durable identity, memos and checkpoints (Pi's).

Pi 0.85.0's harness hands each tool call an ``AgentHarnessToolInvocation``
(pi-agent-core ``harness/runtime/drive/tools.js``): a stable ``invocationId`` (the call's
reserved result-entry id), its ``operationId`` and ``turnId``, and memos the tool reads
and writes in the session (``pi.op.tool_memo``, ``"<operation>:<invocation>:<name>"``),
which a safe replay after a crash sees again; ``onUpdate(partial, {checkpoint: true})``
keeps the latest progress snapshot (``pi.pending.tool_output``,
``"<operation>:<invocation>"``), which an interrupted call's result starts with
(``runtime/progress.js``). A call's memos are deleted with its outcome; its checkpoint
when its outcome is recorded or before it is replayed.

In pitrio a tool running under a harness with a session asks for its invocation with
:func:`current_invocation`; ``await invocation.checkpoint(partial)`` is Pi's
``onUpdate(partial, {checkpoint: true})``.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias, final

from pitrio import (
    AgentTool,
    ArgumentTypeError,
    InvalidStateError,
    ToolCall,
    ToolResult,
    ToolResultMessage,
    UsageError,
    wire,
)

from ._entries import JSONValue, now_ms
from ._operations import OP_TOOL_MEMO, PENDING_TOOL_OUTPUT, _delete, _set

if TYPE_CHECKING:
    from pitrio import AbortSignal

    from ._operations import OperationRecorder
    from ._session import Session

__all__ = ["ToolInvocation", "current_invocation"]

ToolUpdateCallback: TypeAlias = Callable[[ToolResult], None]

_CURRENT: contextvars.ContextVar[ToolInvocation | None] = contextvars.ContextVar(
    "pitrio_tool_invocation", default=None
)


def current_invocation() -> ToolInvocation | None:
    """The :class:`ToolInvocation` of the tool call running in this task, or ``None``
    outside a tool call of a harness with a session.

    ::

        async def charge(call_id, params, signal, on_update):
            invocation = current_invocation()
            if invocation is not None and invocation.get_memo("charged"):
                return text_result("already charged")   # a replay after a crash
            receipt = await bank.charge(params["amount"])
            if invocation is not None:
                await invocation.set_memo("charged", receipt)
            return text_result(receipt)
    """
    return _CURRENT.get()


def _check_name(name: object) -> None:
    if not isinstance(name, str):
        msg = f"Tool invocation memo name must be a str; got {name!r}"
        raise ArgumentTypeError(msg)
    if not name:
        msg = "Tool invocation memo name must not be empty"
        raise UsageError(msg)
    if ":" in name:
        msg = f"Tool invocation memo name must not contain ':' (got {name!r})"
        raise UsageError(msg)


@final
class ToolInvocation:
    """One tool call's durable identity, memos and checkpoints (Pi's
    ``AgentHarnessToolInvocation``), valid while its tool runs.

    Attributes:
        invocation_id: the call's id, unchanged when it is replayed after a crash (the
            id of the entry its result will have).
        operation_id: the run's operation.
        turn_id: the model response the call belongs to.
    """

    __slots__ = (
        "_active",
        "_ops",
        "_session",
        "_update",
        "invocation_id",
        "operation_id",
        "turn_id",
    )

    invocation_id: str
    operation_id: str
    turn_id: str
    _ops: OperationRecorder
    _session: Session
    _update: ToolUpdateCallback
    _active: bool

    def __repr__(self) -> str:
        return (
            f"ToolInvocation(invocation_id={self.invocation_id!r}, "
            f"operation_id={self.operation_id!r}, turn_id={self.turn_id!r})"
        )

    def _owns(self) -> bool:
        return self._active and self._ops.owns_effect(self.operation_id, self.invocation_id)

    def _check(self) -> None:
        if not self._owns():
            msg = (
                "Tool invocation no longer owns its durable effect (its tool call has "
                "ended; use the invocation only while the tool runs)"
            )
            raise InvalidStateError(msg)

    def _memo_key(self, name: str) -> str:
        return f"{self.operation_id}:{self.invocation_id}:{name}"

    def get_memo(self, name: str, default: JSONValue = None) -> JSONValue:
        """The memo ``name`` this call set (before a crash, too), or ``default``.

        Raises:
            UsageError: ``name`` is empty or contains ``":"`` (``ArgumentTypeError``: not
                a str).
            InvalidStateError: the call has ended.
        """
        _check_name(name)
        self._check()
        key = (OP_TOOL_MEMO, self._memo_key(name))
        return self._session._state.value(*key, default)

    async def set_memo(self, name: str, value: JSONValue) -> None:
        """Set the memo ``name`` to the JSON value ``value``; written to the session
        before this returns.

        Raises:
            UsageError: ``name`` is empty or contains ``":"`` (``ArgumentTypeError``: not
                a str).
            InvalidStateError: the call has ended.
        """
        _check_name(name)
        self._check()
        self._ops.note_memo()
        await self._session._record([[_set(OP_TOOL_MEMO, self._memo_key(name), value)]])

    async def delete_memo(self, name: str) -> None:
        """Delete the memo ``name`` (Pi's ``setMemo(name, undefined)``).

        Raises:
            UsageError: ``name`` is empty or contains ``":"`` (``ArgumentTypeError``: not
                a str).
            InvalidStateError: the call has ended.
        """
        _check_name(name)
        self._check()
        await self._session._record([[_delete(OP_TOOL_MEMO, self._memo_key(name))]])

    async def checkpoint(self, partial: ToolResult) -> None:
        """Publish ``partial`` as a progress update and keep it as the call's durable
        checkpoint (Pi's ``onUpdate(partial, {checkpoint: true})``): when a crash
        interrupts the call and it is not run again, its result starts with this
        content (and has its details and usage). After the call has ended, nothing."""
        if not self._owns():
            return
        self._update(partial)
        key = f"{self.operation_id}:{self.invocation_id}"
        await self._session._record([[_set(PENDING_TOOL_OUTPUT, key, wire.unstructure(partial))]])

    def _expire(self) -> None:
        self._active = False


def new_invocation(
    ops: OperationRecorder, session: Session, ids: tuple[str, str, str], update: ToolUpdateCallback
) -> ToolInvocation:
    """A running call's invocation (the harness makes them; a tool gets its own from
    :func:`current_invocation`)."""
    invocation = object.__new__(ToolInvocation)
    invocation.operation_id, invocation.turn_id, invocation.invocation_id = ids
    invocation._ops = ops
    invocation._session = session
    invocation._update = update
    invocation._active = True
    return invocation


async def run_tool(
    tool: AgentTool,
    invocation: ToolInvocation | None,
    call_id: str,
    params: Any,
    signal: AbortSignal,
    on_update: ToolUpdateCallback,
) -> ToolResult:
    """Run ``tool`` with ``invocation`` as the task's :func:`current_invocation`."""
    if invocation is None:
        return await tool.execute(call_id, params, signal, on_update)
    token = _CURRENT.set(invocation)
    try:
        return await tool.execute(call_id, params, signal, on_update)
    finally:
        invocation._expire()
        _CURRENT.reset(token)


@final
class InvokedTool:
    """A tool as the harness gives it to the Agent: the same tool, run with its
    call's :class:`ToolInvocation` (every other attribute is the tool's)."""

    __slots__ = ("_ops", "_session", "tool")

    def __init__(self, tool: AgentTool, ops: OperationRecorder, session: Session) -> None:
        self.tool = tool
        self._ops = ops
        self._session = session

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tool, name)

    def __repr__(self) -> str:
        return f"InvokedTool({self.tool!r})"

    @property
    def name(self) -> str:
        return self.tool.name

    @property
    def description(self) -> str:
        return self.tool.description

    @property
    def parameters(self) -> Mapping[str, Any]:
        return self.tool.parameters

    @property
    def execution_mode(self) -> Any:
        return getattr(self.tool, "execution_mode", None)

    def prepare_arguments(self, arguments: JSONValue) -> JSONValue:
        prepare = getattr(self.tool, "prepare_arguments", None)  # (optional, as the loop's)
        return arguments if prepare is None else prepare(arguments)

    async def execute(
        self, tool_call_id: str, params: Any, signal: AbortSignal, on_update: ToolUpdateCallback
    ) -> ToolResult:
        session = self._session
        if session._pending:
            # The records this call's effect needs (its intent, and what the run
            # committed since the last write) reach storage before the tool runs.
            await session._write()
        ops = self._ops
        ids = ops.invocation_ids(tool_call_id)
        invocation = None if ids is None else new_invocation(ops, session, ids, on_update)
        ops.tool_running(1)
        try:
            return await run_tool(self.tool, invocation, tool_call_id, params, signal, on_update)
        finally:
            ops.tool_running(-1)


def interrupted_result(call: ToolCall, checkpoint: JSONValue, marker: str) -> ToolResultMessage:
    """Pi's ``interruptedOutcome``: an error result with the call's last checkpoint's
    content (and details and usage), then ``marker``."""
    stored = checkpoint if isinstance(checkpoint, Mapping) else None
    content = list(stored.get("content") or []) if stored is not None else []
    payload: dict[str, Any] = {
        "role": "toolResult",
        "toolCallId": call.id,
        "toolName": call.name,
        "content": [*content, {"type": "text", "text": marker}],
        "isError": True,
        "timestamp": now_ms(),
    }
    if stored is not None:
        for field in ("details", "usage"):
            if stored.get(field) is not None:
                payload[field] = stored[field]
    message = wire.structure_message(payload)
    assert isinstance(message, ToolResultMessage)
    return message
