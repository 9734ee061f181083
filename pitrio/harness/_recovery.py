"""Settling what an interrupted run left open (Pi's drive on a restored lane).

The state its records name says what to do (pi-agent-core 0.85.0, ``runtime/drive/``):

* ``assistant.effect_pending``: a request was out. Its outcome is unknown, so it is
  settled, without another provider call, as an error message under the reserved entry
  id that keeps the answer's committed frames (``_frames``: Pi's
  ``recoverAssistantGeneration``, with Pi's text); then, as Pi's recovery does, the run
  waits in ``assistant.retry_wait`` and asks again (the harness's back-off);
* ``tools``: of the batch, a call ``completed`` is in the transcript; one
  ``outcome_ready`` has its result recorded (used, never run again); one ``planned`` never
  started and runs now; one ``effect_pending`` started without a recorded outcome and
  runs again only if its record and its tool both say ``replay="safe"`` (Pi's
  ``recoverToolInvocation``), else it ends with Pi's interrupted result (an error). A
  batch with a call to recover is Pi's recovered turn (``turn_start`` ... ``turn_end``
  with ``recovery: true``: between :class:`RecoveryStart` and :class:`RecoveryEnd`); a
  batch of planned calls only is not a recovery (Pi runs it as it would have): the
  recovery ends before it runs;
* ``checkpoint`` that may finish: only the run's end was left to write;
* anything else (``starting``, ``checkpoint``, ``assistant.ready``,
  ``assistant.retry_wait``): no request was out; the run goes on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import attrs

from pitrio import (
    AbortSignal,
    AgentTool,
    AssistantMessage,
    MessageEnd,
    MessageStart,
    Model,
    ToolCall,
    ToolExecutionEnd,
    ToolExecutionStart,
    ToolResult,
    ToolResultMessage,
    TurnEnd,
    TurnStart,
    Usage,
    error_result,
    wire,
)

from ._entries import MessageEntry, now_ms
from ._frames import committed_partial, frames_key
from ._invocation import interrupted_result, new_invocation, run_tool
from ._operations import (
    INTERRUPTED_REQUEST,
    INTERRUPTED_TOOL,
    Operation,
    OperationRecorder,
    pending_result,
    replay_policy,
    stored_args,
)
from ._session import Session


class Harness(Protocol):
    """What recovery uses of the :class:`~pitrio.harness.Harness` it recovers (a protocol,
    so that this module does not import the harness, which imports it)."""

    @property
    def model(self) -> Model: ...

    _bus: Any
    _config: Any

    async def _recover_run_compaction(self, operation: Operation) -> Mapping[str, Any]: ...


__all__ = ["settle"]


async def settle(
    harness: Harness,
    session: Session,
    ops: OperationRecorder,
    operation: Operation,
    leave: Callable[[], Awaitable[None]],
) -> bool:
    """Settle what ``operation`` left open; return whether the run goes on (asks the
    model again). ``leave`` ends the recovery early (a batch with nothing to recover
    runs after it)."""
    state = operation.state
    at = operation.at
    if at == "assistant.effect_pending":
        await _interrupted_request(harness, session, ops, operation)
        return True
    if at == "tools":
        return await _tools(harness, session, ops, operation, leave)
    if at.startswith("summary."):
        # Killed mid-compaction: it is finished first, then the run resumes at the
        # checkpoint its task names.
        state = await harness._recover_run_compaction(operation)
        at = str(state.get("at"))
    continuation = state.get("continuation")
    return not (
        at == "checkpoint"
        and isinstance(continuation, Mapping)
        and continuation.get("kind") == "may_finish"
    )


async def _interrupted_request(
    harness: Harness, session: Session, ops: OperationRecorder, operation: Operation
) -> None:
    state = operation.state
    entry_id = str(state.get("responseEntryId"))
    if entry_id in session._state.by_id:
        return  # its answer is in (the state did not move on): nothing was lost
    message = interrupted_message(harness, session, operation.id, state)
    bus = harness._bus
    await bus.emit(MessageStart(message=message))
    await ops.assistant_end(message, retry=True)
    await bus.emit(MessageEnd(message=message))


def interrupted_message(
    harness: Harness, session: Session, operation_id: str, state: Mapping[str, Any]
) -> AssistantMessage:
    """Pi's ``interruptedAssistantMessage``: the answer's committed partial (its frames)
    with no usage, an error with Pi's text; without frames an empty one."""
    key = frames_key(operation_id, str(state.get("responseEntryId")))
    partial = committed_partial(session, key)
    if partial is not None:
        try:
            message = wire.structure_message({**partial, "stopReason": "error"})
        except Exception:  # a partial pitrio cannot read: settled without it
            message = None
        if isinstance(message, AssistantMessage):
            return attrs.evolve(message, usage=Usage(), error_message=INTERRUPTED_REQUEST)
    context = state.get("generationContext") or {}
    identity = (context.get("configuration") or {}).get("model") or {}
    return AssistantMessage(
        api="unknown",
        provider=str(identity.get("provider", harness.model.provider)),
        model=str(identity.get("modelId", harness.model.id)),
        stop_reason="error",
        error_message=INTERRUPTED_REQUEST,
        timestamp=now_ms(),
    )


async def _execute(
    tool: AgentTool | None, call: ToolCall, args: Any, session: Session, ops: OperationRecorder
) -> tuple[ToolResult, bool]:
    """Run one recovered call (no hooks, no argument validation: the call passed them
    before the crash, or its recorded arguments are used), with its invocation: the
    same ids, the memos it set before the crash."""
    if tool is None:
        return error_result(f"Tool {call.name} not found"), True
    ids = ops.invocation_ids(call.id)

    def on_update(partial: ToolResult) -> None:
        pass

    invocation = None if ids is None else new_invocation(ops, session, ids, on_update)
    try:
        result = await run_tool(tool, invocation, call.id, args, AbortSignal(), on_update)
    except Exception as exc:
        return error_result(str(exc) or type(exc).__name__), True
    return result, False


async def _tools(
    harness: Harness,
    session: Session,
    ops: OperationRecorder,
    operation: Operation,
    leave: Callable[[], Awaitable[None]],
) -> bool:
    batch = operation.state["batch"]
    entry = session.get_entry(str(batch["assistantEntryId"]))
    assistant = entry.message if isinstance(entry, MessageEntry) else None
    if not isinstance(assistant, AssistantMessage):
        return True
    blocks = dict(enumerate(assistant.content))
    ops.adopt_batch({i: b.id for i, b in blocks.items() if isinstance(b, ToolCall)})
    turn = harness._config.build(session)
    tools = {t.name: t for t in turn.tools}
    bus = harness._bus
    # Pi's runTools: a batch with a call to recover is a recovered turn; one of planned
    # calls only runs as it would have.
    if any(c["status"] in ("effect_pending", "outcome_ready") for c in batch["calls"]):
        await bus.emit(TurnStart())
    else:
        await leave()
    terminate = True
    results: list[ToolResultMessage] = []
    for call in batch["calls"]:
        block = blocks.get(int(call["sourceIndex"]))
        if not isinstance(block, ToolCall):
            continue
        status = call["status"]
        if status == "completed":
            terminate = terminate and bool(call.get("terminate"))
            done = session._state.by_id.get(str(call["resultEntryId"]))
            if isinstance(done, MessageEntry) and isinstance(done.message, ToolResultMessage):
                results.append(done.message)
            continue
        tool = tools.get(block.name)
        message: ToolResultMessage | None = None
        ends = False
        if status == "outcome_ready":
            message = pending_result(session, str(call["resultEntryId"]))
            ends = bool(call.get("terminate"))
        if message is None:
            safe = (
                status == "effect_pending"
                and call.get("replay") == "safe"
                and replay_policy(tool) == "safe"
            )
            if status == "planned" or safe:
                message, ends = await _run_call(session, ops, operation, call, block, tool, bus)
            else:
                checkpoint = ops.checkpoint_of(str(call["resultEntryId"]))
                message = interrupted_result(block, checkpoint, INTERRUPTED_TOOL)
                await ops.tool_outcome(message, False)
                await bus.emit(
                    ToolExecutionEnd(
                        tool_call_id=block.id,
                        tool_name=block.name,
                        result=ToolResult(content=message.content, details=message.details),
                        is_error=True,
                    )
                )
        terminate = terminate and ends
        results.append(message)
        await bus.emit(MessageStart(message=message))
        await ops.tool_result_end(message)
        await bus.emit(MessageEnd(message=message))
    await bus.emit(TurnEnd(message=assistant, tool_results=tuple(results)))
    return not terminate


async def _run_call(
    session: Session,
    ops: OperationRecorder,
    operation: Operation,
    call: Mapping[str, Any],
    block: ToolCall,
    tool: AgentTool | None,
    bus: Any,
) -> tuple[ToolResultMessage, bool]:
    """Run a call that never started, or a safe one again; its result and whether it
    ends the run."""
    batch = operation.state["batch"]
    if call["status"] == "planned":
        args = tool.prepare_arguments(block.arguments) if tool else block.arguments
        await ops.tool_intent(block.id, args, tool)
    else:
        args = stored_args(session, operation.id, str(batch["turnId"]), int(call["sourceIndex"]))
        await session._record([ops.clear_checkpoint(str(call["resultEntryId"]))])
    await bus.emit(ToolExecutionStart(tool_call_id=block.id, tool_name=block.name, args=args))
    result, is_error = await _execute(tool, block, args, session, ops)
    message = ToolResultMessage(
        tool_call_id=block.id,
        tool_name=block.name,
        content=result.content,
        details=result.details,
        usage=result.usage,
        added_tool_names=result.added_tool_names or None,
        is_error=is_error,
        timestamp=now_ms(),
    )
    ends = result.terminate is True
    await ops.tool_outcome(message, ends)
    await bus.emit(
        ToolExecutionEnd(
            tool_call_id=block.id, tool_name=block.name, result=result, is_error=is_error
        )
    )
    return message, ends
