"""The agent loop: pi-agent-core 0.85.0's ``agent-loop.js`` on Trio.

Every input is an argument and every output goes to ``emit``; the loop keeps no
state between calls. The order of events, hook calls and queue polls is Pi's,
exactly (see ``docs/loop.md``). What Trio adds is structure:

* a provider stream is opened with ``async with`` and its producer is cancelled when
  the run's :class:`AbortSignal` fires; the loop then still emits ``message_end``,
  ``turn_end`` and ``agent_end`` (the aborted message is data);
* a parallel tool batch is a child nursery: tools finish in any order, their
  ``tool_execution_end`` events follow completion order, and their result messages
  enter the transcript in the assistant's source order;
* each tool runs in a cancel scope that the abort cancels; a tool that must finish
  shields itself.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Generator, Sequence
from types import CoroutineType
from typing import Any, Literal, TypeAlias, final

import attrs
import trio

from ._events import (
    AgentEnd,
    AgentEvent,
    AgentStart,
    AssistantMessageEvent,
    MessageEnd,
    MessageStart,
    MessageUpdate,
    ToolExecutionEnd,
    ToolExecutionStart,
    ToolExecutionUpdate,
    ToolResult,
    TurnEnd,
    TurnStart,
)
from ._messages import (
    LLM_ROLES,
    AgentMessage,
    AssistantMessage,
    LlmMessage,
    ToolCall,
    ToolResultMessage,
)
from ._model import Context, Model, StreamFn, StreamOptions
from ._signal import AbortSignal
from ._stream import EventStream
from ._tools import (
    AfterToolCallContext,
    AfterToolCallResult,
    AgentTool,
    BeforeToolCallContext,
    BeforeToolCallResult,
    Tool,
    error_result,
)
from ._validation import ToolArgumentsError, compile_validator

__all__ = [
    "AgentContext",
    "LoopConfig",
    "NextTurn",
    "TurnContext",
    "agent_loop",
    "agent_loop_continue",
    "default_convert_to_llm",
    "run_agent_loop",
    "run_agent_loop_continue",
    "set_default_stream_fn",
]

EmitFn: TypeAlias = Callable[[AgentEvent], "Awaitable[None] | None"]
"""What the loop reports events to: a plain or an async function. A plain function may
return an awaitable for work that can wait (the Agent's listeners do this)."""


@final
class Emit:
    """The loop's handle on ``emit``: awaited for most events, run at once for tool
    updates (Pi emits those synchronously from ``on_update``)."""

    __slots__ = ("now",)

    def __init__(self, fn: EmitFn) -> None:
        self.now = fn

    def __call__(self, event: AgentEvent) -> Awaitable[None]:
        pending = self.now(event)
        # Most emissions finish synchronously: hand back a ready awaitable instead of
        # building a coroutine for every event.
        return _READY if pending is None else pending


@final
class _Ready:
    """An awaitable that is already done (awaiting it does not yield)."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return iter(())  # type: ignore[return-value]  # an empty iterator is a finished generator


_READY = _Ready()


MaybeAwaitable: TypeAlias = Any

_TRUNCATED = (
    'Tool call "{name}" was not executed: the response hit the output token limit, so its '
    "arguments may be truncated. Re-issue the tool call with complete arguments."
)


@final
@attrs.define(kw_only=True, eq=False)
class AgentContext:
    """The loop's working context. The loop appends to ``messages`` as it goes."""

    system_prompt: str = ""
    messages: list[AgentMessage] = attrs.field(factory=list)
    tools: list[AgentTool] = attrs.field(factory=list)


@final
@attrs.frozen(kw_only=True)
class TurnContext:
    """The last completed turn (Pi's ``lastCompletedTurn``): live context and message list."""

    message: AssistantMessage
    tool_results: tuple[ToolResultMessage, ...]
    context: AgentContext
    new_messages: list[AgentMessage]


@final
@attrs.frozen(kw_only=True)
class NextTurn:
    """What ``prepare_next_turn`` may replace for the rest of the invocation."""

    context: AgentContext | None = None
    model: Model | None = None
    thinking_level: str | None = None


def default_convert_to_llm(messages: Sequence[AgentMessage]) -> list[LlmMessage]:
    """Pi's default: keep ``user``, ``assistant`` and ``toolResult`` messages only."""
    return [m for m in messages if m.role in LLM_ROLES]


@attrs.define(kw_only=True)
class LoopConfig:
    """Everything the loop calls back into. Hooks may be plain or async functions.

    Attributes:
        model: the model to request.
        convert_to_llm: turns the transcript into LLM messages before each request.
        transform_context: ``(messages, signal)``, runs before ``convert_to_llm``.
        get_api_key: ``(provider) -> key``, called before every request.
        get_steering_messages: drains queued steering messages (see the loop order).
        get_follow_up_messages: drains queued follow-up messages.
        before_tool_call: ``(ctx, signal) -> BeforeToolCallResult | None``.
        after_tool_call: ``(ctx, signal) -> AfterToolCallResult | None``.
        should_stop_after_turn: ``(turn) -> bool``, after each completed turn.
        prepare_next_turn: ``(turn) -> NextTurn | None``, before each later turn.
        stream_options: the template for each request's options (reasoning is set
            from ``reasoning``; signal and API key per request).
    """

    model: Model
    convert_to_llm: Callable[[list[AgentMessage]], MaybeAwaitable] = default_convert_to_llm
    transform_context: Callable[[list[AgentMessage], AbortSignal], MaybeAwaitable] | None = None
    get_api_key: Callable[[str], MaybeAwaitable] | None = None
    api_key: str | None = None
    get_steering_messages: Callable[[], MaybeAwaitable] | None = None
    get_follow_up_messages: Callable[[], MaybeAwaitable] | None = None
    reasoning: str | None = None
    tool_execution: Literal["parallel", "sequential"] = "parallel"
    before_tool_call: Callable[[BeforeToolCallContext, AbortSignal], MaybeAwaitable] | None = None
    after_tool_call: Callable[[AfterToolCallContext, AbortSignal], MaybeAwaitable] | None = None
    should_stop_after_turn: Callable[[TurnContext], MaybeAwaitable] | None = None
    prepare_next_turn: Callable[[TurnContext], MaybeAwaitable] | None = None
    stream_options: StreamOptions = attrs.field(factory=StreamOptions)


_default_stream_fn: StreamFn | None = None


def set_default_stream_fn(stream_fn: StreamFn | None) -> None:
    """Set the stream function used when none is passed (Pi's ``setDefaultStreamFn``)."""
    global _default_stream_fn
    _default_stream_fn = stream_fn


def _resolve_stream_fn(stream_fn: StreamFn | None) -> StreamFn:
    if stream_fn is not None:
        return stream_fn
    if _default_stream_fn is None:
        msg = (
            "No default stream function configured. Pass streamFn explicitly or call "
            "setDefaultStreamFn()."
        )
        raise RuntimeError(msg)
    return _default_stream_fn


def _is_awaitable(value: object) -> bool:
    # inspect.isawaitable() goes through an ABC check; this is the same test, cheaper,
    # for the common answers (a coroutine, or a plain value).
    if type(value) is CoroutineType:
        return True
    return value is not None and hasattr(type(value), "__await__")


async def _maybe_await(value: Any) -> Any:
    if _is_awaitable(value):
        return await value
    return value


# --------------------------------------------------------------------------------------
# Entry points


def _check_continue(context: AgentContext) -> None:
    if not context.messages:
        msg = "Cannot continue: no messages in context"
        raise ValueError(msg)
    if context.messages[-1].role == "assistant":
        msg = "Cannot continue from message role: assistant"
        raise ValueError(msg)


async def run_agent_loop(
    prompts: Sequence[AgentMessage],
    context: AgentContext,
    config: LoopConfig,
    emit: EmitFn,
    signal: AbortSignal | None = None,
    stream_fn: StreamFn | None = None,
) -> list[AgentMessage]:
    """Run the loop for new ``prompts``, awaiting ``emit`` for every event.

    Works on a copy of ``context`` (prompts appended). Returns the new messages (the
    prompts and everything added), the same list ``agent_end`` carries.
    """
    current = AgentContext(
        system_prompt=context.system_prompt,
        messages=[*context.messages, *prompts],
        tools=context.tools,
    )
    return await _invoke(prompts, current, config, emit, signal, stream_fn)


async def run_agent_loop_continue(
    context: AgentContext,
    config: LoopConfig,
    emit: EmitFn,
    signal: AbortSignal | None = None,
    stream_fn: StreamFn | None = None,
) -> list[AgentMessage]:
    """Continue from ``context`` without a new message (retries, tool-result tails).

    As in Pi, the context object is only shallow-copied: the loop appends to the
    caller's ``context.messages`` list.

    Raises:
        ValueError: the context is empty or ends with an assistant message.
    """
    _check_continue(context)
    current = AgentContext(
        system_prompt=context.system_prompt, messages=context.messages, tools=context.tools
    )
    return await _invoke((), current, config, emit, signal, stream_fn)


async def _invoke(
    prompts: Sequence[AgentMessage],
    context: AgentContext,
    config: LoopConfig,
    emit: EmitFn,
    signal: AbortSignal | None,
    stream_fn: StreamFn | None,
) -> list[AgentMessage]:
    """One invocation: agent_start, turn_start, the prompts' events, then the loop."""
    new_messages: list[AgentMessage] = list(prompts)
    emitter = Emit(emit)
    await emitter(AgentStart())
    await emitter(TurnStart())
    for prompt in prompts:
        await emitter(MessageStart(message=prompt))
        await emitter(MessageEnd(message=prompt))
    await _run_loop(
        context,
        new_messages,
        config,
        signal or AbortSignal(),
        emitter,
        _resolve_stream_fn(stream_fn),
    )
    return new_messages


AgentEventStream: TypeAlias = EventStream[AgentEvent, list[AgentMessage]]


def _agent_stream(
    run: Callable[[EmitFn], Awaitable[list[AgentMessage]]],
) -> AgentEventStream:
    async def producer(stream: AgentEventStream) -> None:
        def emit(event: AgentEvent) -> Awaitable[None]:
            stream.push(event)
            # Pi's loop does not wait for the consumer, but the consumer runs in the
            # microtask gaps of the loop's awaits, so it lags only a little: let it run.
            return trio.lowlevel.checkpoint()

        messages = await run(emit)
        stream.end(messages)

    return EventStream(_is_agent_end, _agent_end_messages, producer)


def _is_agent_end(event: AgentEvent) -> bool:
    return event.type == "agent_end"


def _agent_end_messages(event: AgentEvent) -> list[AgentMessage]:
    return list(event.messages) if isinstance(event, AgentEnd) else []


def agent_loop(
    prompts: Sequence[AgentMessage],
    context: AgentContext,
    config: LoopConfig,
    signal: AbortSignal | None = None,
    stream_fn: StreamFn | None = None,
) -> AgentEventStream:
    """The loop as an event stream (Pi's ``agentLoop``); its result is the new messages.

    The loop runs while the stream is open and does not wait for the consumer::

        async with agent_loop([prompt], context, config) as events:
            async for event in events:
                ...
            new_messages = await events.result()
    """
    return _agent_stream(
        lambda emit: run_agent_loop(prompts, context, config, emit, signal, stream_fn)
    )


def agent_loop_continue(
    context: AgentContext,
    config: LoopConfig,
    signal: AbortSignal | None = None,
    stream_fn: StreamFn | None = None,
) -> AgentEventStream:
    """:func:`run_agent_loop_continue` as an event stream (Pi's ``agentLoopContinue``).

    Raises:
        ValueError: at once (no stream) if the context is empty or ends with an
            assistant message.
    """
    _check_continue(context)
    return _agent_stream(
        lambda emit: run_agent_loop_continue(context, config, emit, signal, stream_fn)
    )


# --------------------------------------------------------------------------------------
# The loop


async def _poll(fn: Callable[[], MaybeAwaitable] | None) -> list[AgentMessage]:
    if fn is None:
        return []
    result = fn()
    if _is_awaitable(result):
        result = await result
    return list(result) if result else []


async def _run_loop(
    context: AgentContext,
    new_messages: list[AgentMessage],
    config: LoopConfig,
    signal: AbortSignal,
    emit: Emit,
    stream_fn: StreamFn,
) -> None:
    last_turn: TurnContext | None = None
    pending = await _poll(config.get_steering_messages)
    while True:
        has_more_tool_calls = True
        while has_more_tool_calls or pending:
            if last_turn is not None:
                if config.prepare_next_turn is not None:
                    update = await _maybe_await(config.prepare_next_turn(last_turn))
                    if update is not None:
                        if update.context is not None:
                            context = update.context
                        if update.model is not None or update.thinking_level is not None:
                            config = attrs.evolve(
                                config,
                                model=update.model if update.model is not None else config.model,
                                reasoning=(
                                    config.reasoning
                                    if update.thinking_level is None
                                    else None
                                    if update.thinking_level == "off"
                                    else update.thinking_level
                                ),
                            )
                if not pending:
                    pending = await _poll(config.get_steering_messages)
                await emit(TurnStart())

            if pending:
                for message in pending:
                    await emit(MessageStart(message=message))
                    await emit(MessageEnd(message=message))
                    context.messages.append(message)
                    new_messages.append(message)
                pending = []

            message = await _stream_assistant_response(context, config, signal, emit, stream_fn)
            new_messages.append(message)
            if message.stop_reason == "error" or message.stop_reason == "aborted":
                await emit(TurnEnd(message=message, tool_results=()))
                await emit(AgentEnd(messages=tuple(new_messages)))
                return

            tool_calls = [b for b in message.content if isinstance(b, ToolCall)]
            tool_results: tuple[ToolResultMessage, ...] = ()
            has_more_tool_calls = False
            if tool_calls:
                if message.stop_reason == "length":
                    tool_results, terminate = await _fail_truncated(tool_calls, emit)
                else:
                    tool_results, terminate = await _execute_tool_calls(
                        context, message, tool_calls, config, signal, emit
                    )
                has_more_tool_calls = not terminate
                context.messages.extend(tool_results)
                new_messages.extend(tool_results)

            await emit(TurnEnd(message=message, tool_results=tool_results))
            last_turn = TurnContext(
                message=message,
                tool_results=tool_results,
                context=context,
                new_messages=new_messages,
            )
            if config.should_stop_after_turn is not None and await _maybe_await(
                config.should_stop_after_turn(last_turn)
            ):
                await emit(AgentEnd(messages=tuple(new_messages)))
                return
            pending = await _poll(config.get_steering_messages)

        follow_ups = await _poll(config.get_follow_up_messages)
        if follow_ups:
            pending = follow_ups
            continue
        break
    await emit(AgentEnd(messages=tuple(new_messages)))


async def _stream_assistant_response(
    context: AgentContext,
    config: LoopConfig,
    signal: AbortSignal,
    emit: Emit,
    stream_fn: StreamFn,
) -> AssistantMessage:
    messages: list[AgentMessage] = context.messages
    if config.transform_context is not None:
        messages = await _maybe_await(config.transform_context(messages, signal))
    llm_messages = await _maybe_await(config.convert_to_llm(messages))
    llm_context = Context(
        system_prompt=context.system_prompt, messages=llm_messages, tools=context.tools
    )
    api_key = None
    if config.get_api_key is not None:
        api_key = await _maybe_await(config.get_api_key(config.model.provider))
    options = _request_options(
        config.stream_options,
        signal,
        api_key or config.api_key or config.stream_options.api_key,
        config.reasoning,
    )
    returned = stream_fn(config.model, llm_context, options)
    # Pi awaits the stream function, so an async one (returning the stream) is allowed.
    response = returned if isinstance(returned, EventStream) else await returned
    remove = signal.add_callback(response.cancel)
    try:
        if not response.has_producer:  # already filled, or filled by someone else
            return await _consume(response, context, emit)
        async with trio.open_nursery() as nursery:
            response.start_producer(nursery)
            return await _consume(response, context, emit)
    finally:
        remove()


def _request_options(
    template: StreamOptions, signal: AbortSignal, api_key: str | None, reasoning: str | None
) -> StreamOptions:
    """The template with this request's signal, key and reasoning (cached: a run makes
    many requests with the same three)."""
    cached = _last_options.get(id(template))
    if (
        cached is not None
        and cached[0] is template
        and cached[1].signal is signal
        and cached[1].api_key == api_key
        and cached[1].reasoning == reasoning
    ):
        return cached[1]
    options = attrs.evolve(template, signal=signal, api_key=api_key, reasoning=reasoning)
    if len(_last_options) > 64:
        _last_options.clear()
    _last_options[id(template)] = (template, options)
    return options


_last_options: dict[int, tuple[StreamOptions, StreamOptions]] = {}


async def _consume(
    response: EventStream[AssistantMessageEvent, AssistantMessage],
    context: AgentContext,
    emit: Emit,
) -> AssistantMessage:
    msgs = context.messages
    added_partial = False
    async for event in response:
        kind = event.type
        if kind == "start":
            msgs.append(event.partial)  # type: ignore[union-attr]  # a StartEvent
            added_partial = True
            await emit(MessageStart(message=event.partial))  # type: ignore[union-attr]  # as above
        elif kind == "done" or kind == "error":
            break  # the terminal event carries the final message: the stream's result
        elif added_partial:
            partial = event.partial  # type: ignore[union-attr]  # every update has one
            msgs[-1] = partial
            await emit(MessageUpdate(message=partial, assistant_message_event=event))  # type: ignore[arg-type]  # an update event
    try:
        final = response.result_nowait()
    except trio.WouldBlock:
        msg = (
            "the provider stream ended without a final message (no done/error event and no result)"
        )
        raise RuntimeError(msg) from None
    if added_partial:
        msgs[-1] = final
    else:
        msgs.append(final)
        await emit(MessageStart(message=final))
    await emit(MessageEnd(message=final))
    return final


# --------------------------------------------------------------------------------------
# Tool batches


def _result_message(call: ToolCall, result: ToolResult, is_error: bool) -> ToolResultMessage:
    return ToolResultMessage(
        tool_call_id=call.id,
        tool_name=call.name,
        content=result.content,
        details=result.details,
        usage=result.usage,
        added_tool_names=result.added_tool_names or None,
        is_error=is_error,
    )


async def _emit_result_message(message: ToolResultMessage, emit: Emit) -> None:
    await emit(MessageStart(message=message))
    await emit(MessageEnd(message=message))


async def _fail_truncated(
    tool_calls: list[ToolCall], emit: Emit
) -> tuple[tuple[ToolResultMessage, ...], bool]:
    messages = []
    for call in tool_calls:
        await emit(
            ToolExecutionStart(tool_call_id=call.id, tool_name=call.name, args=call.arguments)
        )
        result = error_result(_TRUNCATED.format(name=call.name))
        await emit(
            ToolExecutionEnd(
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


def _find_tool(tools: Sequence[AgentTool], name: str) -> AgentTool | None:
    for tool in tools:
        if tool.name == name:
            return tool
    return None


async def _prepare(
    context: AgentContext,
    assistant: AssistantMessage,
    call: ToolCall,
    config: LoopConfig,
    signal: AbortSignal,
) -> _Prepared | _Finalized:
    tool = _find_tool(context.tools, call.name)
    if tool is None:
        return _Finalized(call, error_result(f"Tool {call.name} not found"), True)
    try:
        arguments = call.arguments
        prepare = getattr(tool, "prepare_arguments", None)
        if prepare is not None:
            arguments = prepare(arguments)
        args = compile_validator(tool.parameters).validate(tool.name, arguments)
        if config.before_tool_call is not None:
            before: BeforeToolCallResult | None = await _maybe_await(
                config.before_tool_call(
                    BeforeToolCallContext(
                        assistant_message=assistant, tool_call=call, args=args, context=context
                    ),
                    signal,
                )
            )
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
    except ToolArgumentsError as exc:
        return _Finalized(call, error_result(str(exc)), True)
    except Exception as exc:
        return _Finalized(call, error_result(_error_text(exc)), True)


def _error_text(exc: BaseException) -> str:
    """Pi's ``error instanceof Error ? error.message : String(error)``: the message,
    even when it is empty."""
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _error_text(exc.exceptions[0])
    return str(exc)


@final
class _Updates:
    """A running tool's ``on_update``: each call emits ``tool_execution_update`` at once.

    As in Pi, the emission starts synchronously inside ``on_update`` (so a listener sees
    the update before the tool goes on); what it leaves to wait for (an async listener)
    is awaited, in order, by a helper task in the batch's nursery, started on the first
    such update. After the tool settled, updates are dropped; :meth:`close` waits for
    the pending emissions and re-raises a listener's failure (which fails the run, as in
    Pi).
    """

    __slots__ = ("_call", "_done", "_emit", "_nursery", "_send", "accepting", "failure", "sent")

    def __init__(self, call: ToolCall, emit: Emit, nursery: trio.Nursery) -> None:
        self._call = call
        self._emit = emit
        self._nursery = nursery
        self._send: trio.MemorySendChannel[Awaitable[None]] | None = None
        self._done: trio.Event | None = None
        self.accepting = True
        self.failure: Exception | None = None
        self.sent = False

    def __call__(self, partial: ToolResult) -> None:
        if not self.accepting:
            return
        self.sent = True
        call = self._call
        update = ToolExecutionUpdate(
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

    async def close(self) -> None:
        self.accepting = False
        if self._send is not None:
            assert self._done is not None
            self._send.close()
            await self._done.wait()
        elif self.sent:
            # Pi's Promise.all() over the update emissions takes one more tick when
            # there were any; calls that finish together keep Pi's relative order.
            await trio.lowlevel.checkpoint()


async def _execute_prepared(
    prepared: _Prepared, signal: AbortSignal, emit: Emit, nursery: trio.Nursery
) -> tuple[ToolResult, bool]:
    """Run one tool in a cancel scope that the abort cancels."""
    call = prepared.call
    updates = _Updates(call, emit, nursery)
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
                result, is_error = error_result(_error_text(exc)), True
    finally:
        remove()
    if updates.sent:
        await updates.close()
    else:
        updates.accepting = False
    if updates.failure is not None:
        # Pi awaits the update emissions again outside its try block: the failure of a
        # listener fails the run, not just this call.
        raise updates.failure
    if result is None:  # cancelled by the abort
        return error_result("Operation aborted"), True
    return result, is_error


async def _finalize(
    context: AgentContext,
    assistant: AssistantMessage,
    prepared: _Prepared,
    result: ToolResult,
    is_error: bool,
    config: LoopConfig,
    signal: AbortSignal,
) -> _Finalized:
    if config.after_tool_call is not None:
        try:
            after: AfterToolCallResult | None = await _maybe_await(
                config.after_tool_call(
                    AfterToolCallContext(
                        assistant_message=assistant,
                        tool_call=prepared.call,
                        args=prepared.args,
                        result=result,
                        is_error=is_error,
                        context=context,
                    ),
                    signal,
                )
            )
            if after is not None:
                result = ToolResult(
                    content=after.content if after.content is not None else result.content,
                    details=after.details if after.details is not None else result.details,
                    usage=after.usage if after.usage is not None else result.usage,
                    terminate=after.terminate if after.terminate is not None else result.terminate,
                    added_tool_names=result.added_tool_names,
                )
                if after.is_error is not None:
                    is_error = after.is_error
        except Exception as exc:
            result, is_error = error_result(_error_text(exc)), True
    return _Finalized(prepared.call, result, is_error)


def _emit_end(finalized: _Finalized, emit: Emit) -> Awaitable[None]:
    return emit(
        ToolExecutionEnd(
            tool_call_id=finalized.call.id,
            tool_name=finalized.call.name,
            result=finalized.result,
            is_error=finalized.is_error,
        )
    )


def _terminates(finalized: Sequence[_Finalized]) -> bool:
    return bool(finalized) and all(f.result.terminate is True for f in finalized)


async def _execute_tool_calls(
    context: AgentContext,
    assistant: AssistantMessage,
    tool_calls: list[ToolCall],
    config: LoopConfig,
    signal: AbortSignal,
    emit: Emit,
) -> tuple[tuple[ToolResultMessage, ...], bool]:
    sequential = config.tool_execution == "sequential" or any(
        getattr(_find_tool(context.tools, c.name), "execution_mode", None) == "sequential"
        for c in tool_calls
    )
    if sequential:
        return await _run_sequential(context, assistant, tool_calls, config, signal, emit)
    return await _run_parallel(context, assistant, tool_calls, config, signal, emit)


async def _run_sequential(
    context: AgentContext,
    assistant: AssistantMessage,
    tool_calls: list[ToolCall],
    config: LoopConfig,
    signal: AbortSignal,
    emit: Emit,
) -> tuple[tuple[ToolResultMessage, ...], bool]:
    finalized_calls: list[_Finalized] = []
    messages: list[ToolResultMessage] = []
    async with trio.open_nursery() as nursery:
        for call in tool_calls:
            await emit(
                ToolExecutionStart(tool_call_id=call.id, tool_name=call.name, args=call.arguments)
            )
            prepared = await _prepare(context, assistant, call, config, signal)
            if isinstance(prepared, _Finalized):
                finalized = prepared
            else:
                result, is_error = await _execute_prepared(prepared, signal, emit, nursery)
                finalized = await _finalize(
                    context, assistant, prepared, result, is_error, config, signal
                )
            await _emit_end(finalized, emit)
            message = _result_message(finalized.call, finalized.result, finalized.is_error)
            await _emit_result_message(message, emit)
            finalized_calls.append(finalized)
            messages.append(message)
            if signal.aborted:
                break
    return tuple(messages), _terminates(finalized_calls)


async def _run_parallel(
    context: AgentContext,
    assistant: AssistantMessage,
    tool_calls: list[ToolCall],
    config: LoopConfig,
    signal: AbortSignal,
    emit: Emit,
) -> tuple[tuple[ToolResultMessage, ...], bool]:
    slots: list[_Finalized | None] = []
    queued: list[tuple[int, _Prepared]] = []
    for call in tool_calls:
        await emit(
            ToolExecutionStart(tool_call_id=call.id, tool_name=call.name, args=call.arguments)
        )
        prepared = await _prepare(context, assistant, call, config, signal)
        if isinstance(prepared, _Finalized):
            await _emit_end(prepared, emit)
            slots.append(prepared)
            if signal.aborted:
                break
            continue
        queued.append((len(slots), prepared))
        slots.append(None)
        if signal.aborted:
            break

    lockstep = len(queued) > 1

    async def run_one(index: int, prepared: _Prepared, nursery: trio.Nursery) -> None:
        if signal.aborted:
            finalized = _Finalized(prepared.call, error_result("Operation aborted"), True)
        else:
            result, is_error = await _execute_prepared(prepared, signal, emit, nursery)
            # Pi resumes each call after a microtask: calls that finish together proceed
            # in lockstep (every execute() starts before any call ends, after-hooks of
            # simultaneous calls come before their ends). One scheduling step per await.
            if lockstep:
                await trio.lowlevel.checkpoint()
            if config.after_tool_call is None:
                finalized = _Finalized(prepared.call, result, is_error)
            else:
                finalized = await _finalize(
                    context, assistant, prepared, result, is_error, config, signal
                )
                if lockstep:
                    await trio.lowlevel.checkpoint()
        await _emit_end(finalized, emit)
        slots[index] = finalized

    if queued:
        # The batch is a child nursery: every call (and its update emitter) lives in it.
        async with trio.open_nursery() as nursery:
            # The others are queued first, then the first call runs right here: calls
            # still start in source order, and one task per batch is saved.
            for index, prepared in queued[1:]:
                nursery.start_soon(run_one, index, prepared, nursery)
            await run_one(*queued[0], nursery)

    finalized_calls = [f for f in slots if f is not None]
    assert len(finalized_calls) == len(slots)
    messages = []
    for finalized in finalized_calls:
        message = _result_message(finalized.call, finalized.result, finalized.is_error)
        await _emit_result_message(message, emit)
        messages.append(message)
    return tuple(messages), _terminates(finalized_calls)
