"""The agent loop: pi-agent-core 0.85.0's ``agent-loop.js`` on Trio.

Every input is an argument and every output goes to ``emit``; the loop keeps no
state between calls. The order of events, hook calls and queue polls is Pi's,
exactly (see ``docs/loop.md``). What Trio adds is structure:

* a provider stream is opened with ``async with`` and its producer is cancelled when
  the run's :class:`AbortSignal` fires; the loop then still emits ``message_end``,
  ``turn_end`` and ``agent_end`` (the aborted message is data);
* a parallel tool batch runs its calls together: tools finish in any order, their
  ``tool_execution_end`` events follow completion order, and their result messages
  enter the transcript in the assistant's source order. The calls run in the loop's
  own task until one of them waits; only then does the rest go on in a task of the
  run's nursery (opened at the first tool batch, so a run without tool calls has
  none), and the batch waits for its tasks before it ends;
* tools run in a cancel scope that the abort cancels (one per round of calls that
  return at once, not one per call); a tool that must finish shields itself, and an
  after-hook or listener never runs inside it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Final, TypeAlias, final

import attrs
import trio

from ._errors import IncompleteStreamError, InvalidStateError, UsageError
from ._events import (
    AGENT_START,
    TURN_START,
    AgentEnd,
    AgentEvent,
    AssistantMessageEvent,
    DoneEvent,
    ErrorEvent,
    StartEvent,
    new_agent_end,
    new_message_end,
    new_message_start,
    new_message_update,
    new_turn_end,
)
from ._loop_config import (
    AgentContext,
    Emit,
    EmitFn,
    LoopConfig,
    MaybeAwaitable,
    NextTurn,
    TurnContext,
    default_convert_to_llm,
    is_awaitable,
    js_microtask_hop,
    maybe_await,
)
from ._messages import AgentMessage, AssistantMessage, ToolCall, ToolResultMessage, constructor
from ._model import Context, StreamFn, StreamOptions, request_options
from ._signal import AbortSignal
from ._stream import EventStream
from ._tool_batch import fail_truncated, run_tool_batch

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
            "No default stream function configured. Pass stream_fn= explicitly or call "
            "pitrio.set_default_stream_fn()."
        )
        raise InvalidStateError(msg)
    return _default_stream_fn


# --------------------------------------------------------------------------------------
# Entry points


def _check_continue(context: AgentContext) -> None:
    if not context.messages:
        msg = "Cannot continue: no messages in context"
        raise UsageError(msg)
    if context.messages[-1].role == "assistant":
        msg = "Cannot continue from message role: assistant"
        raise UsageError(msg)


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
    return await invoke_loop(prompts, current, config, emit, signal, stream_fn)


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
        UsageError: the context is empty or ends with an assistant message.
    """
    _check_continue(context)
    current = AgentContext(
        system_prompt=context.system_prompt, messages=context.messages, tools=context.tools
    )
    return await invoke_loop((), current, config, emit, signal, stream_fn)


async def invoke_loop(
    prompts: Sequence[AgentMessage],
    context: AgentContext,
    config: LoopConfig,
    emit: EmitFn,
    signal: AbortSignal | None,
    stream_fn: StreamFn | None,
) -> list[AgentMessage]:
    """One invocation: agent_start, turn_start, the prompts' events, then the loop, on
    ``context`` itself (the entry points' working copy; the Agent makes its own)."""
    new_messages: list[AgentMessage] = list(prompts)
    emitter = Emit(emit)
    # emit, and an await only if a listener left something to wait for (as in _consume)
    pending = emit(AGENT_START)
    if pending is not None:
        await pending
    pending = emit(TURN_START)
    if pending is not None:
        await pending
    for prompt in prompts:
        pending = emit(new_message_start(message=prompt))
        if pending is not None:
            await pending
        pending = emit(new_message_end(message=prompt))
        if pending is not None:
            await pending
    await _run_loop(
        context,
        new_messages,
        config,
        signal or AbortSignal(),
        emitter,
        stream_fn if stream_fn is not None else _resolve_stream_fn(None),
        None,
        None,
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
            return _consumer_step()

        messages = await run(emit)
        stream.end(messages)

    return EventStream(_is_agent_end, _agent_end_messages, producer)


async def _consumer_step() -> None:
    await js_microtask_hop()


def _is_agent_end(event: AgentEvent) -> bool:
    return type(event) is AgentEnd


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
        UsageError: at once (no stream) if the context is empty or ends with an
            assistant message.
    """
    _check_continue(context)
    return _agent_stream(
        lambda emit: run_agent_loop_continue(context, config, emit, signal, stream_fn)
    )


# --------------------------------------------------------------------------------------
# The loop


def _poll(
    fn: Callable[[], MaybeAwaitable] | None,
) -> list[AgentMessage] | Awaitable[list[AgentMessage]]:
    """A queue poll's messages (a copy), or an awaitable of them when the hook is async.
    Not a coroutine itself: the loop polls two or three times per turn, and the queues
    of an Agent answer at once."""
    if fn is None:
        return []
    result = fn()
    if type(result) is not list and is_awaitable(result):
        return _polled(result)
    return list(result) if result else []


async def _polled(result: Awaitable[Sequence[AgentMessage] | None]) -> list[AgentMessage]:
    messages = await result
    return list(messages) if messages else []


_Resume: TypeAlias = tuple[
    "_Requests", bool, "TurnContext | None", AssistantMessage, list[ToolCall]
]
"""Where :func:`_run_loop` goes on inside the run's nursery: its requests, whether a turn
completed, the last turn, and the response whose tool calls are to run."""


async def _run_loop(
    context: AgentContext,
    new_messages: list[AgentMessage],
    config: LoopConfig,
    signal: AbortSignal,
    emit: Emit,
    stream_fn: StreamFn,
    nursery: trio.Nursery | None,
    resume: _Resume | None,
) -> None:
    """The loop (Pi's ``runLoop``). The run's nursery, where what a tool call must run
    beside it lives (the rest of a batch whose call waits, async update emissions), is
    opened at the first tool batch: the rest of the run then goes on inside it
    (``resume``), one nursery per run instead of one per batch, none for a run without
    tool calls. Each batch waits for its own tasks before it returns."""
    wants_turn = config.prepare_next_turn is not None or config.should_stop_after_turn is not None
    pending: list[AgentMessage] = []
    if resume is None:
        requests = _Requests(stream_fn)
        # Pi's lastCompletedTurn: built only for the hooks that receive it.
        turned = False
        last_turn: TurnContext | None = None
        polled = _poll(config.get_steering_messages)
        pending = polled if isinstance(polled, list) else await polled
    else:
        requests, turned, last_turn, _, _ = resume
    while True:
        has_more_tool_calls = True
        while has_more_tool_calls or pending:
            if resume is not None:
                _, _, _, message, tool_calls = resume  # the resumed turn's
                resume = None
            else:
                if turned:
                    if config.prepare_next_turn is not None:
                        assert last_turn is not None
                        update = await maybe_await(config.prepare_next_turn(last_turn))
                        if update is not None:
                            if update.context is not None:
                                context = update.context
                            if update.model is not None or update.thinking_level is not None:
                                config = attrs.evolve(
                                    config,
                                    model=(
                                        update.model if update.model is not None else config.model
                                    ),
                                    reasoning=(
                                        config.reasoning
                                        if update.thinking_level is None
                                        else None
                                        if update.thinking_level == "off"
                                        else update.thinking_level
                                    ),
                                )
                    if not pending:
                        polled = _poll(config.get_steering_messages)
                        pending = polled if isinstance(polled, list) else await polled
                    pending_emit = emit.now(TURN_START)
                    if pending_emit is not None:
                        await pending_emit

                if pending:
                    for pending_message in pending:
                        await emit(new_message_start(message=pending_message))
                        await emit(new_message_end(message=pending_message))
                        context.messages.append(pending_message)
                        new_messages.append(pending_message)
                    pending = []

                message = await _stream_assistant_response(context, config, signal, emit, requests)
                new_messages.append(message)
                if message.stop_reason == "error" or message.stop_reason == "aborted":
                    await emit(new_turn_end(message=message, tool_results=()))
                    await emit(new_agent_end(messages=tuple(new_messages)))
                    return
                tool_calls = []  # a loop, not a comprehension: no function call per turn
                for block in message.content:
                    if type(block) is ToolCall:
                        tool_calls.append(block)

            tool_results: tuple[ToolResultMessage, ...] = ()
            has_more_tool_calls = False
            if tool_calls:
                if message.stop_reason == "length":
                    tool_results, terminate = await fail_truncated(tool_calls, emit)
                elif nursery is None:
                    async with trio.open_nursery() as opened:
                        await _run_loop(
                            context,
                            new_messages,
                            config,
                            signal,
                            emit,
                            stream_fn,
                            opened,
                            (requests, turned, last_turn, message, tool_calls),
                        )
                    return
                else:
                    tool_results, terminate = await run_tool_batch(
                        context, message, tool_calls, config, signal, emit, nursery
                    )
                has_more_tool_calls = not terminate
                context.messages.extend(tool_results)
                new_messages.extend(tool_results)

            pending_emit = emit.now(new_turn_end(message=message, tool_results=tool_results))
            if pending_emit is not None:
                await pending_emit
            turned = True
            if wants_turn:
                last_turn = TurnContext(
                    message=message,
                    tool_results=tool_results,
                    context=context,
                    new_messages=new_messages,
                )
                if config.should_stop_after_turn is not None and await maybe_await(
                    config.should_stop_after_turn(last_turn)
                ):
                    await emit(new_agent_end(messages=tuple(new_messages)))
                    return
            polled = _poll(config.get_steering_messages)
            pending = polled if isinstance(polled, list) else await polled

        polled = _poll(config.get_follow_up_messages)
        follow_ups = polled if isinstance(polled, list) else await polled
        if follow_ups:
            pending = follow_ups
            continue
        break
    await emit(new_agent_end(messages=tuple(new_messages)))


@final
class _Requests:
    """The model requests of one invocation: the stream function, and the options of
    the last request (a run makes many requests with the same template, signal, key and
    reasoning: they are built again only when one of these changes)."""

    __slots__ = ("_options", "_template", "stream_fn")

    def __init__(self, stream_fn: StreamFn) -> None:
        self.stream_fn = stream_fn
        self._template: StreamOptions | None = None
        self._options: StreamOptions | None = None

    def options(
        self,
        template: StreamOptions,
        signal: AbortSignal,
        api_key: str | None,
        reasoning: str | None,
    ) -> StreamOptions:
        """The template with this request's signal, key and reasoning."""
        options = self._options
        if (
            options is not None
            and self._template is template
            and options.signal is signal
            and options.api_key == api_key
            and options.reasoning == reasoning
        ):
            return options
        options = request_options(template, signal, api_key, reasoning)
        self._template, self._options = template, options
        return options


async def _stream_assistant_response(
    context: AgentContext,
    config: LoopConfig,
    signal: AbortSignal,
    emit: Emit,
    requests: _Requests,
) -> AssistantMessage:
    messages: list[AgentMessage] = context.messages
    if config.transform_context is not None:
        messages = await maybe_await(config.transform_context(messages, signal))
    llm_messages = config.convert_to_llm(messages)
    if type(llm_messages) is not list and is_awaitable(llm_messages):
        llm_messages = await llm_messages
    llm_context = _new_context(
        system_prompt=context.system_prompt, messages=llm_messages, tools=context.tools
    )
    api_key = None
    if config.get_api_key is not None:
        api_key = await maybe_await(config.get_api_key(config.model.provider))
    options = requests.options(
        config.stream_options,
        signal,
        api_key or config.api_key or config.stream_options.api_key,
        config.reasoning,
    )
    returned = requests.stream_fn(config.model, llm_context, options)
    # Pi awaits the stream function, so an async one (returning the stream) is allowed.
    response = returned if isinstance(returned, EventStream) else await returned
    # the property, not _producer: a stream class may fill itself (harness frames)
    if not response.has_producer:  # already filled, or filled by someone else
        # (cancel() only stops a producer: nothing for the abort to do here)
        return await _consume(response, context, emit)
    remove = signal.add_callback(response.cancel)
    try:
        async with trio.open_nursery() as nursery:
            response.start_producer(nursery)
            return await _consume(response, context, emit)
    finally:
        remove()


_new_context: Final = constructor(Context)


async def _consume(
    response: EventStream[AssistantMessageEvent, AssistantMessage],
    context: AgentContext,
    emit: Emit,
) -> AssistantMessage:
    msgs = context.messages
    added_partial = False
    # The buffered events are taken straight from the stream's queue: ``async for`` would
    # build and run a coroutine (``__anext__``) for every delta. Only when the queue is
    # empty does the loop await the stream (which waits, or takes a lazily pushed event).
    queue = response._queue
    anext = response.__anext__
    while True:
        if queue:
            event = queue.popleft()
        else:
            try:
                event = await anext()
            except StopAsyncIteration:
                break
        # Dispatch on the exact class (the event classes are final), not match or
        # isinstance(): this runs for every streamed delta, where either costs ~4% of a
        # turn. The class is looked up once; mypy narrows ``kind``, not ``event``, hence
        # the ignores below, each on what the branch's checks have ruled out.
        kind = type(event)
        if kind is StartEvent:
            partial = event.partial  # type: ignore[union-attr]  # a StartEvent
            msgs.append(partial)
            added_partial = True
            pending = emit.now(new_message_start(message=partial))
            if pending is not None:
                await pending
        elif kind is DoneEvent or kind is ErrorEvent:
            break  # the terminal event carries the final message: the stream's result
        elif added_partial:
            partial = event.partial  # type: ignore[union-attr]  # not done/error
            msgs[-1] = partial
            # emit.now, and an await only if a listener left something to wait for: most
            # emissions finish synchronously (the other hot emission sites do the same).
            pending = emit.now(
                new_message_update(message=partial, assistant_message_event=event)  # type: ignore[arg-type]  # an update event
            )
            if pending is not None:
                await pending
    try:
        final = response.result_nowait()
    except trio.WouldBlock:
        msg = (
            "the provider stream ended without a final message (no done/error event and no result)"
        )
        raise IncompleteStreamError(msg) from None
    if added_partial:
        msgs[-1] = final
    else:
        msgs.append(final)
        await emit(new_message_start(message=final))
    pending = emit.now(new_message_end(message=final))
    if pending is not None:
        await pending
    return final
