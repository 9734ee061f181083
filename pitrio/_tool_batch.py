"""One turn's tool calls: pi-agent-core 0.85.0's ``executeToolCalls*`` on Trio.

A batch runs either sequentially (Pi's ``toolExecution: "sequential"``, or any tool of the
batch with ``execution_mode="sequential"``) or in parallel. A parallel batch of several
calls ends only when every call it started has ended (a call that waits goes on in a task
of the run's nursery, which the batch joins; a run without one opens its own), tools finish in
any order, their ``tool_execution_end`` events follow completion order, and their result
messages enter the transcript in the assistant's source order. Its calls run in the
batch's own task until one of them waits; only then does the rest go on in a new task
(:class:`_Calls`). A lone call and a sequential batch need no nursery. The tools of a
round run in one cancel scope that the run's abort cancels (a tool that must finish shields
itself); an after-hook or listener never does.

Per call, as in Pi: ``tool_execution_start``; preparation (find the tool,
``prepare_arguments``, validation, ``before_tool_call``), which may finish the call at
once; execution, with ``on_update`` emitting ``tool_execution_update`` synchronously;
``after_tool_call``; ``tool_execution_end``; then the result messages.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeAlias, final

import attrs
import trio

from ._events import (
    ToolResult,
    new_message_end,
    new_message_start,
    new_tool_execution_end,
    new_tool_execution_start,
    new_tool_execution_update,
)
from ._loop_config import (
    AgentContext,
    Emit,
    LoopConfig,
    error_text,
    js_microtask_hop,
    maybe_await,
)
from ._messages import AssistantMessage, ToolCall, ToolResultMessage, constructor
from ._signal import AbortSignal
from ._tools import (
    AfterToolCallContext,
    AfterToolCallResult,
    AgentTool,
    BeforeToolCallContext,
    BeforeToolCallResult,
    Tool,
    error_result,
)

if TYPE_CHECKING:
    from ._validation import Validator

__all__ = ["BatchOutcome", "fail_truncated", "run_tool_batch"]

BatchOutcome = tuple[tuple[ToolResultMessage, ...], bool]
"""The batch's result messages (source order) and whether the batch terminates the run."""

_TRUNCATED = (
    'Tool call "{name}" was not executed: the response hit the output token limit, so its '
    "arguments may be truncated. Re-issue the tool call with complete arguments."
)


def _load_validation(schema: Mapping[str, Any]) -> Validator:
    """The first tool call's: import the validation package (its compilers cost ``import
    pitrio`` a tenth of its time, and a program may never call a tool), then hand over."""
    global _compile_validator
    from ._validation import compile_validator

    _compile_validator = compile_validator
    return compile_validator(schema)


_compile_validator: Callable[[Mapping[str, Any]], Validator] = _load_validation
"""``pitrio._validation.compile_validator``, imported on first use."""


_new_tool_result_message: Final = constructor(ToolResultMessage)


def _result_message(call: ToolCall, result: ToolResult, is_error: bool) -> ToolResultMessage:
    # Pi stamps the result with Date.now() (agent-loop.js); traces drop timestamps.
    return _new_tool_result_message(
        tool_call_id=call.id,
        tool_name=call.name,
        content=result.content,
        details=result.details,
        usage=result.usage,
        added_tool_names=result.added_tool_names or None,
        is_error=is_error,
        timestamp=int(time.time() * 1000),
    )


async def _emit_result_message(message: ToolResultMessage, emit: Emit) -> None:
    # ``emit.now`` and an await only when a listener left something to wait for: most
    # emissions finish synchronously (so do the other hot emission sites).
    pending = emit.now(new_message_start(message=message))
    if pending is not None:
        await pending
    pending = emit.now(new_message_end(message=message))
    if pending is not None:
        await pending


async def fail_truncated(tool_calls: Sequence[ToolCall], emit: Emit) -> BatchOutcome:
    """The calls of a response cut at the output token limit: none runs (Pi's
    ``stopReason: "length"`` handling); each ends with an error result asking to retry."""
    messages = []
    for call in tool_calls:
        await emit(
            new_tool_execution_start(tool_call_id=call.id, tool_name=call.name, args=call.arguments)
        )
        result = error_result(_TRUNCATED.format(name=call.name))
        await emit(
            new_tool_execution_end(
                tool_call_id=call.id, tool_name=call.name, result=result, is_error=True
            )
        )
        message = _result_message(call, result, True)
        await _emit_result_message(message, emit)
        messages.append(message)
    return tuple(messages), False


@attrs.define(slots=True)
class _Prepared:
    call: ToolCall
    tool: AgentTool
    args: Any


@attrs.define(slots=True)
class _Finalized:
    call: ToolCall
    result: ToolResult
    is_error: bool


# (the hot paths' constructors: see pitrio._messages.constructor)
_new_prepared: Final = constructor(_Prepared)
_new_finalized: Final = constructor(_Finalized)


def _terminates(finalized: Sequence[_Finalized]) -> bool:
    for f in finalized:
        if f.result.terminate is not True:
            return False
    return bool(finalized)


async def run_tool_batch(
    context: AgentContext,
    assistant: AssistantMessage,
    tool_calls: Sequence[ToolCall],
    config: LoopConfig,
    signal: AbortSignal,
    emit: Emit,
    nursery: trio.Nursery | None = None,
) -> BatchOutcome:
    """Run the tool calls of ``assistant`` (Pi's ``executeToolCalls``).

    ``nursery``: the run's, if it has one, for what a call must run beside it (the rest
    of a batch whose call waits, async update emissions); the batch waits for all of it
    before it returns. Without one, a batch of several calls opens its own.
    """
    batch = _Batch(context, assistant, config, signal, emit)
    # Each call's tool, looked up once (Pi's ``tools.find``: the first of that name).
    tools = context.tools
    found: list[AgentTool | None] = []
    sequential = config.tool_execution == "sequential"
    for call in tool_calls:
        name = call.name
        tool = None
        for candidate in tools:
            if candidate.name == name:
                tool = candidate
                if getattr(tool, "execution_mode", None) == "sequential":
                    sequential = True
                break
        found.append(tool)
    if sequential:
        return await batch.run_sequential(tool_calls, found, nursery)
    return await batch.run_parallel(tool_calls, found, nursery)


@final
class _Batch:
    """What every call of one batch shares: the turn's context and assistant message,
    the loop configuration, the run's abort signal and ``emit``."""

    __slots__ = ("assistant", "config", "context", "emit", "signal")

    def __init__(
        self,
        context: AgentContext,
        assistant: AssistantMessage,
        config: LoopConfig,
        signal: AbortSignal,
        emit: Emit,
    ) -> None:
        self.context = context
        self.assistant = assistant
        self.config = config
        self.signal = signal
        self.emit = emit

    # -- one call ----------------------------------------------------------------------

    def prepare(
        self, call: ToolCall, tool: AgentTool | None
    ) -> _Prepared | _Finalized | Coroutine[Any, Any, _Prepared | _Finalized]:
        """Pi's ``prepareToolCall`` (``tool``: the call's, if there is one): a call ready
        to run, or one finished at once; or, when it must wait (a ``before_tool_call``
        hook, arguments too big to validate inline), the coroutine to await for that.
        Most calls need neither, and then no coroutine is made."""
        if tool is None:
            return _Finalized(call, error_result(f"Tool {call.name} not found"), True)
        try:
            arguments = call.arguments
            if type(tool) is Tool:  # its prepare_arguments() only forwards to the function
                prepare = tool.prepare_arguments_fn
            else:
                prepare = getattr(tool, "prepare_arguments", None)
            if prepare is not None:
                arguments = prepare(arguments)
            validator = _compile_validator(tool.parameters)
            args = validator.validate_inline(tool.name, arguments)
            if args is validator.TOO_BIG_INLINE or self.config.before_tool_call is not None:
                return self._prepare_later(call, tool, validator, arguments, args)
            if self.signal.aborted:
                return _Finalized(call, error_result("Operation aborted"), True)
            return _new_prepared(call, tool, args)
        except Exception as exc:  # a ToolArgumentsError too: its text is the tool result
            return _Finalized(call, error_result(error_text(exc)), True)

    async def _prepare_later(
        self,
        call: ToolCall,
        tool: AgentTool,
        validator: Validator,
        arguments: Any,
        args: Any,
    ) -> _Prepared | _Finalized:
        """The rest of :meth:`prepare` when it waits: the validation in a worker thread
        (huge arguments, which abort stops), then ``before_tool_call``."""
        signal = self.signal
        try:
            if args is validator.TOO_BIG_INLINE:
                args = await validator.validate_async(tool.name, arguments, signal=signal)
            before_tool_call = self.config.before_tool_call
            if before_tool_call is not None:
                before: BeforeToolCallResult | None = await maybe_await(
                    before_tool_call(
                        BeforeToolCallContext(
                            assistant_message=self.assistant,
                            tool_call=call,
                            args=args,
                            context=self.context,
                        ),
                        signal,
                    )
                )
                # Pi looks at the signal here (an abort during the hook): not a scope.
                if signal.aborted:
                    return _Finalized(call, error_result("Operation aborted"), True)
                if before is not None and before.block:
                    result = error_result(before.reason or "Tool execution was blocked")
                    if before.terminate is True:
                        result = attrs.evolve(result, terminate=True)
                    return _Finalized(call, result, True)
            if signal.aborted:
                return _Finalized(call, error_result("Operation aborted"), True)
            return _Prepared(call, tool, args)
        except Exception as exc:  # a ToolArgumentsError too: its text is the tool result
            return _Finalized(call, error_result(error_text(exc)), True)

    async def execute(
        self, prepared: _Prepared, nursery: trio.Nursery | None
    ) -> tuple[ToolResult, bool]:
        """Pi's ``executePreparedToolCall``: run one tool in a cancel scope that the
        abort cancels (``nursery``: where an async update emitter may run, if any)."""
        call = prepared.call
        signal = self.signal
        updates = _Updates(call, self.emit, nursery)
        result: ToolResult | None = None
        is_error = False
        scope = trio.CancelScope()
        remove = signal.add_callback(scope.cancel)
        tool = prepared.tool
        # A Tool's execute() only forwards to its function: call that directly.
        execute = tool.execute_fn if type(tool) is Tool else tool.execute
        try:
            with scope:
                try:
                    result = await execute(call.id, prepared.args, signal, updates)
                except Exception as exc:
                    result, is_error = error_result(error_text(exc)), True
        finally:
            remove()
        if updates.sent:
            if await updates.close():
                await js_microtask_hop()
        else:
            updates.accepting = False
        if updates.failure is not None:
            # Pi awaits the update emissions again outside its try block: the failure of
            # a listener fails the run, not just this call. Its siblings are cancelled at
            # their next step (each has one: the lockstep hop), as their events would come
            # only after Pi's run settled.
            raise updates.failure
        if scope.cancelled_caught or result is None:  # the abort cut the tool short
            return error_result("Operation aborted"), True
        return result, is_error

    async def finalize(self, prepared: _Prepared, result: ToolResult, is_error: bool) -> _Finalized:
        """Pi's ``finalizeExecutedToolCall``: ``after_tool_call`` may patch the result."""
        after_tool_call = self.config.after_tool_call
        if after_tool_call is not None:
            try:
                after: AfterToolCallResult | None = await maybe_await(
                    after_tool_call(
                        AfterToolCallContext(
                            assistant_message=self.assistant,
                            tool_call=prepared.call,
                            args=prepared.args,
                            result=result,
                            is_error=is_error,
                            context=self.context,
                        ),
                        self.signal,
                    )
                )
                if after is not None:
                    result = ToolResult(
                        content=after.content if after.content is not None else result.content,
                        details=after.details if after.details is not None else result.details,
                        usage=after.usage if after.usage is not None else result.usage,
                        terminate=(
                            after.terminate if after.terminate is not None else result.terminate
                        ),
                        added_tool_names=result.added_tool_names,
                    )
                    if after.is_error is not None:
                        is_error = after.is_error
            except Exception as exc:
                result, is_error = error_result(error_text(exc)), True
        return _new_finalized(prepared.call, result, is_error)

    def emit_end(self, finalized: _Finalized) -> Awaitable[None] | None:
        """Emit ``tool_execution_end``; returns what a listener left to wait for."""
        return self.emit.now(
            new_tool_execution_end(
                tool_call_id=finalized.call.id,
                tool_name=finalized.call.name,
                result=finalized.result,
                is_error=finalized.is_error,
            )
        )

    # -- the two orders ----------------------------------------------------------------

    async def run_sequential(
        self,
        tool_calls: Sequence[ToolCall],
        tools: Sequence[AgentTool | None],
        nursery: trio.Nursery | None,
    ) -> BatchOutcome:
        """Pi's ``executeToolCallsSequential``: each call to its end before the next."""
        emit, signal = self.emit, self.signal
        finalized_calls: list[_Finalized] = []
        messages: list[ToolResultMessage] = []
        # One call at a time, in this task: no nursery of its own (without the run's,
        # a call's async update emissions are awaited in order when it returns).
        for call, tool in zip(tool_calls, tools, strict=True):
            await emit(
                new_tool_execution_start(
                    tool_call_id=call.id, tool_name=call.name, args=call.arguments
                )
            )
            prepared = self.prepare(call, tool)
            if not isinstance(prepared, _Prepared | _Finalized):
                prepared = await prepared
            if isinstance(prepared, _Finalized):
                finalized = prepared
            else:
                result, is_error = await self.execute(prepared, nursery)
                finalized = await self.finalize(prepared, result, is_error)
            pending = self.emit_end(finalized)
            if pending is not None:
                await pending
            message = _result_message(finalized.call, finalized.result, finalized.is_error)
            await _emit_result_message(message, emit)
            finalized_calls.append(finalized)
            messages.append(message)
            if signal.aborted:  # Pi's check between calls
                break
        return tuple(messages), _terminates(finalized_calls)

    async def run_parallel(
        self,
        tool_calls: Sequence[ToolCall],
        tools: Sequence[AgentTool | None],
        nursery: trio.Nursery | None,
    ) -> BatchOutcome:
        """Pi's ``executeToolCallsParallel``: prepare in order, run the prepared calls
        together, emit the result messages in source order."""
        signal = self.signal
        slots: list[_Finalized | None] = []
        queued: list[tuple[int, _Prepared]] = []
        emit = self.emit
        for call, tool in zip(tool_calls, tools, strict=True):
            pending = emit.now(
                new_tool_execution_start(
                    tool_call_id=call.id, tool_name=call.name, args=call.arguments
                )
            )
            if pending is not None:
                await pending
            prepared = self.prepare(call, tool)
            if not isinstance(prepared, _Prepared | _Finalized):
                prepared = await prepared
            if isinstance(prepared, _Finalized):
                pending = self.emit_end(prepared)
                if pending is not None:
                    await pending
                slots.append(prepared)
                if signal.aborted:
                    break
                continue
            queued.append((len(slots), prepared))
            slots.append(None)
            if signal.aborted:
                break

        if len(queued) == 1:
            # One call: no siblings to run beside.
            await self._run_one(slots, *queued[0], False, nursery)
        elif nursery is not None:
            await self._run_calls(slots, queued, nursery)
        elif queued:
            async with trio.open_nursery() as own:
                await self._run_calls(slots, queued, own)

        finalized_calls = [f for f in slots if f is not None]
        assert len(finalized_calls) == len(slots)
        messages = []
        now = self.emit.now
        for finalized in finalized_calls:
            message = _result_message(finalized.call, finalized.result, finalized.is_error)
            pending = now(new_message_start(message=message))
            if pending is not None:
                await pending
            pending = now(new_message_end(message=message))
            if pending is not None:
                await pending
            messages.append(message)
        return tuple(messages), _terminates(finalized_calls)

    async def _run_calls(
        self,
        slots: list[_Finalized | None],
        queued: Sequence[tuple[int, _Prepared]],
        nursery: trio.Nursery,
    ) -> None:
        """The prepared calls of a parallel batch, together: in this task until one of
        them waits, the others then in tasks of ``nursery`` (see :class:`_Calls`); returns
        when all have ended."""
        calls = _Calls(self.signal, nursery, _Join())
        for index, prepared in queued:
            calls.add(self._run_in_batch(slots, index, prepared, nursery))
        await calls
        await calls.join.wait()

    async def _run_in_batch(
        self,
        slots: list[_Finalized | None],
        index: int,
        prepared: _Prepared,
        nursery: trio.Nursery,
    ) -> None:
        """One call of a parallel batch, driven by :class:`_Calls`: as :meth:`_run_one`
        with lockstep hops, its tool in the cancel scope of the task that runs it."""
        signal = self.signal
        if signal.aborted:
            finalized = _Finalized(prepared.call, error_result("Operation aborted"), True)
            await _EXEC_DONE  # its end is not emitted inside the abort scope
        else:
            call = prepared.call
            updates = _Updates(call, self.emit, nursery)
            result: ToolResult | None = None
            is_error = False
            tool = prepared.tool
            execute = tool.execute_fn if type(tool) is Tool else tool.execute
            try:
                result = await execute(call.id, prepared.args, signal, updates)
            except Exception as exc:
                result, is_error = error_result(error_text(exc)), True
            except trio.Cancelled:
                if not self.signal.aborted:  # (not narrowed: the tool may have aborted)
                    raise
                result = None  # the abort cut the tool short (the scope is _Calls')
            # Pi's lockstep hop (see _run_one), and one more if update emissions owe
            # Promise.all's tick; the driver may already have taken a hop here.
            hops = 1 - await _EXEC_DONE
            if updates.sent:
                if await updates.close():
                    hops += 1
            else:
                updates.accepting = False
            if updates.failure is not None:
                raise updates.failure  # see execute()
            if result is None:
                result, is_error = error_result("Operation aborted"), True
            while hops:
                hops -= 1
                await _HOP
            if self.config.after_tool_call is None:
                finalized = _new_finalized(call, result, is_error)
            else:
                finalized = await self.finalize(prepared, result, is_error)
                await _HOP
        pending = self.emit_end(finalized)
        if pending is not None:
            await pending
        slots[index] = finalized

    async def _run_one(
        self,
        slots: list[_Finalized | None],
        index: int,
        prepared: _Prepared,
        lockstep: bool,
        nursery: trio.Nursery | None,
    ) -> None:
        if self.signal.aborted:
            finalized = _Finalized(prepared.call, error_result("Operation aborted"), True)
        else:
            result, is_error = await self.execute(prepared, nursery)
            # Pi resumes each call after a microtask: calls that finish together proceed
            # in lockstep (every execute() starts before any call ends, after-hooks of
            # simultaneous calls come before their ends).
            if lockstep:
                await js_microtask_hop()
            if self.config.after_tool_call is None:
                finalized = _new_finalized(prepared.call, result, is_error)
            else:
                finalized = await self.finalize(prepared, result, is_error)
                if lockstep:
                    await js_microtask_hop()
        pending = self.emit_end(finalized)
        if pending is not None:
            await pending
        slots[index] = finalized


@final
class _Updates:
    """A running tool's ``on_update``: each call emits ``tool_execution_update`` at once.

    As in Pi, the emission starts synchronously inside ``on_update`` (so a listener sees
    the update before the tool goes on); what it leaves to wait for (an async listener)
    is awaited, in order, by a helper task in the batch's nursery, started on the first
    such update. A call that runs alone (no nursery) leaves it for :meth:`close`. After
    the tool settled, updates are dropped; :meth:`close` waits for the pending emissions
    and re-raises a listener's failure (which fails the run, as in Pi).
    """

    __slots__ = (
        "_call",
        "_done",
        "_emit",
        "_later",
        "_nursery",
        "_send",
        "accepting",
        "failure",
        "sent",
    )

    def __init__(self, call: ToolCall, emit: Emit, nursery: trio.Nursery | None) -> None:
        self._call = call
        self._emit = emit
        self._nursery = nursery
        self._send: trio.MemorySendChannel[Awaitable[None]] | None = None
        self._done: trio.Event | None = None
        self._later: list[Awaitable[None]] | None = None
        self.accepting = True
        self.failure: Exception | None = None
        self.sent = False

    def __call__(self, partial: ToolResult) -> None:
        if not self.accepting:
            return
        self.sent = True
        call = self._call
        update = new_tool_execution_update(
            tool_call_id=call.id, tool_name=call.name, args=call.arguments, partial_result=partial
        )
        try:
            pending = self._emit.now(update)
        except Exception as exc:
            if self.failure is None:
                self.failure = exc
            return
        if pending is None:
            return
        if self._nursery is None:
            if self._later is None:
                self._later = []
            self._later.append(pending)
            return
        if self._send is None:
            self._send, receive = trio.open_memory_channel(math.inf)
            self._done = trio.Event()
            self._nursery.start_soon(self._run, receive)
        self._send.send_nowait(pending)

    async def _run(self, receive: trio.MemoryReceiveChannel[Awaitable[None]]) -> None:
        assert self._done is not None
        try:
            async with receive:
                async for pending in receive:
                    try:
                        await pending
                    except Exception as exc:
                        if self.failure is None:
                            self.failure = exc
        finally:
            self._done.set()

    async def close(self) -> bool:
        """Stop accepting updates and wait for the pending emissions. Returns whether
        the caller owes Pi's extra tick (a lockstep hop)."""
        self.accepting = False
        if self._later is not None:
            later, self._later = self._later, None
            for pending in later:
                try:
                    await pending
                except Exception as exc:
                    if self.failure is None:
                        self.failure = exc
        elif self._send is not None:
            assert self._done is not None
            self._send.close()
            await self._done.wait()
        elif self.sent:
            # Pi's Promise.all() over the update emissions takes one more tick when
            # there were any; calls that finish together keep Pi's relative order.
            return True
        return False


# --------------------------------------------------------------------------------------
# Running the calls of a parallel batch in as few tasks as possible


@final
class _Marker:
    """What a call of a parallel batch yields to :class:`_Calls` (never to Trio)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __await__(self) -> Generator[Any, Any, Any]:
        return (yield self)

    def __repr__(self) -> str:
        return f"<{self.name}>"


_HOP: Final = _Marker("lockstep hop")
"""``await _HOP``: Pi's microtask hop between the steps of a call (``js_microtask_hop``):
the other calls of the batch take their step first."""

_EXEC_DONE: Final = _Marker("tool returned")
"""``await _EXEC_DONE``: the call's tool has returned; the abort no longer concerns it.
Returns whether the driver took a lockstep hop there (``_Calls`` does: the call goes to
the back of the queue, out of the round's abort scope)."""

_Call: TypeAlias = Coroutine[Any, Any, None]


@final
class _Calls:
    """Runs the calls of a parallel batch as Trio would run one task per call, in fewer
    tasks.

    A task per call costs a spawn, a cancel scope and a scheduling round per lockstep
    hop, and most tools return without ever waiting. So the calls are coroutines driven
    right here, in rounds, first in first out (the order the conformance player gives
    Trio's scheduler): ``await _HOP`` sends a call to the back of the queue. While the
    tools of a round run, one cancel scope that the abort cancels is open around them.
    When a call really suspends (awaits something of Trio's), it stays in this task,
    which then only drives it to its end (its tool still in that scope, until it
    returns; later hops are real checkpoints); the rest of the queue goes on in a new
    task of the batch's nursery, the same way. A call's after-hook and listeners never
    run inside the scope, so a later abort cannot cancel them.
    """

    __slots__ = ("_nursery", "_queue", "_signal", "join")

    def __init__(self, signal: AbortSignal, nursery: trio.Nursery, join: _Join) -> None:
        self._signal = signal
        self._nursery = nursery
        self.join = join
        # (the call, whether it has started: its first step runs its tool)
        self._queue: deque[tuple[_Call, bool]] = deque()

    def add(self, call: _Call) -> None:
        self._queue.append((call, False))

    async def _continue(self) -> None:
        try:
            await self
        finally:
            self.join.task_done()

    def __await__(self) -> Generator[Any, Any, None]:
        queue = self._queue
        scope: _AbortScope | None = None
        try:
            while queue:
                call, started = queue.popleft()
                if not started:
                    if scope is None:
                        scope = _AbortScope(self._signal)
                elif scope is not None:
                    scope.close(None)
                    scope = None
                try:
                    # After _EXEC_DONE, True: that was a hop (_HOP ignores the value).
                    yielded = call.send(True if started else None)
                except StopIteration:
                    continue
                if yielded is _HOP or yielded is _EXEC_DONE:
                    queue.append((call, True))
                    continue
                # The call suspended: the rest goes on in a new task, and this task
                # drives the call alone (its tool still in the scope, if it is running).
                if queue:
                    rest = _Calls(self._signal, self._nursery, self.join)
                    rest._queue = queue
                    queue = self._queue = deque()
                    self.join.tasks += 1
                    self._nursery.start_soon(rest._continue)
                tool_scope, scope = scope, None
                yield from _drive_alone(call, yielded, tool_scope)
        except BaseException as exc:
            if scope is not None:
                swallowed = scope.close(exc)
                scope = None
                if swallowed:
                    return
            raise
        finally:
            for call, _ in queue:  # only left after a failure: the batch fails anyway
                call.close()
            if scope is not None:
                scope.close(None)


@final
class _Join:
    """The tasks a batch's :class:`_Calls` started: the batch waits for them to end
    (they may live in the run's nursery, which outlives the batch)."""

    __slots__ = ("_ended", "tasks")

    def __init__(self) -> None:
        self.tasks = 0
        self._ended: trio.Event | None = None

    def task_done(self) -> None:
        self.tasks -= 1
        if self.tasks == 0 and self._ended is not None:
            self._ended.set()

    async def wait(self) -> None:
        if self.tasks:
            self._ended = trio.Event()
            await self._ended.wait()


def _drive_alone(
    call: _Call, yielded: object, scope: _AbortScope | None
) -> Generator[Any, Any, None]:
    """Drive one suspended call of a batch to its end in the current task: what it
    awaits of Trio's goes to Trio, a lockstep hop is a real checkpoint, and the abort
    scope (open while its tool runs) closes when the tool has returned."""
    try:
        while True:
            value: Any = None
            error: BaseException | None = None
            if yielded is _EXEC_DONE:
                value = False  # no hop taken here: the call takes its own
                if scope is not None:
                    done, scope = scope, None
                    done.close(None)
            elif yielded is _HOP:
                try:
                    yield from js_microtask_hop().__await__()
                except BaseException as exc:
                    error = exc
            else:
                try:
                    value = yield yielded
                except BaseException as exc:
                    error = exc
            try:
                yielded = call.send(value) if error is None else call.throw(error)
            except StopIteration:
                return
            finally:
                del error
    except BaseException as exc:
        if scope is not None:
            done, scope = scope, None
            if done.close(exc):
                return
        raise
    finally:
        if scope is not None:
            scope.close(None)


@final
class _AbortScope:
    """A cancel scope entered now, cancelled by the abort, left with :meth:`close`
    (in the same task, with nothing else still open inside it)."""

    __slots__ = ("_remove", "_scope")

    def __init__(self, signal: AbortSignal) -> None:
        scope = self._scope = trio.CancelScope()
        self._remove = signal.add_callback(scope.cancel)
        scope.__enter__()

    def close(self, exc: BaseException | None) -> bool:
        """Leave the scope; returns whether it caught ``exc`` (its own Cancelled)."""
        self._remove()
        if exc is None:
            return bool(self._scope.__exit__(None, None, None))
        return bool(self._scope.__exit__(type(exc), exc, exc.__traceback__))
