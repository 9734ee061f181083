"""The Agent: state, queues and listeners around the loop (pi-agent-core's ``Agent``).

Each run is a nursery: ``await agent.prompt(...)`` opens one, runs the loop in it and
returns when the run has settled (``agent_end`` listeners done, state idle). Another
task may ``steer()``, ``follow_up()`` or ``abort()`` meanwhile; ``abort()`` cancels the
provider stream and running tools, and the run still ends with ``agent_end``.

To start a run and continue once it is active (Pi's ``prompt()`` marks the run
active before it returns its promise)::

    async with trio.open_nursery() as nursery:
        await nursery.start(agent.prompt, "hello")
        agent.steer(user_text("and then?"))
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Coroutine, Generator, Sequence
from time import time as _time
from typing import (
    TYPE_CHECKING,
    Any,
    Final,
    Literal,
    TypeAlias,
    TypeVar,
    assert_never,
    final,
    overload,
)

import attrs
import trio

from ._deps import RUN_DEPS
from ._errors import AgentBusyError, ArgumentTypeError, UsageError
from ._events import (
    AgentEnd,
    AgentEvent,
    AgentStart,
    MessageEnd,
    MessageStart,
    MessageUpdate,
    ToolExecutionEnd,
    ToolExecutionStart,
    ToolExecutionUpdate,
    TurnEnd,
    TurnStart,
)
from ._loop import _resolve_stream_fn, invoke_loop, run_agent_loop_continue
from ._loop_config import (
    AgentContext,
    LoopConfig,
    TurnContext,
    default_convert_to_llm,
    error_text,
    is_awaitable,
)
from ._messages import (
    AgentMessage,
    AssistantMessage,
    ImageContent,
    TextContent,
    ThinkingLevel,
    UserContent,
    UserMessage,
    constructor,
)
from ._model import Model, StreamFn, StreamOptions
from ._signal import AbortSignal
from ._tools import AgentTool

if TYPE_CHECKING:
    from ._output import OutputCollector, OutputMode
    from ._run_result import RunResult, UsageLimits

__all__ = ["Agent", "AgentState", "Listener", "QueueMode"]

OutputT = TypeVar("OutputT")

QueueMode: TypeAlias = Literal["one-at-a-time", "all"]
Listener: TypeAlias = Callable[[AgentEvent, AbortSignal], Any]
"""``(event, signal)``; may be a plain or an async function. Awaited in order."""

DEFAULT_MODEL = Model(
    id="unknown",
    name="unknown",
    api="unknown",
    provider="unknown",
    input=(),
    context_window=0,
    max_tokens=0,
)

_DEFAULT_OPTIONS = StreamOptions()
"""The request template of every agent given none (never mutated: each run's requests
copy it)."""

_AGENT_DEPS: Any = object()
"""A run's ``deps`` when none is given for the run: the agent's ``deps``."""

_BUSY_PROMPT = (
    "Agent is already processing a prompt. Use steer() or follow_up() to queue messages, "
    "or wait for completion."
)
_BUSY_CONTINUE = "Agent is already processing. Wait for completion before continuing."
_BUSY_RESET = "Agent is already processing. Wait for completion before resetting."


@final
@attrs.define(kw_only=True, eq=False)
class AgentState:
    """What the agent knows. Reduced from events before listeners see them.

    ``messages`` and ``tools`` may be reassigned (the new sequence is copied).
    """

    system_prompt: str = ""
    model: Model = DEFAULT_MODEL
    thinking_level: ThinkingLevel = "off"
    _tools: list[AgentTool] = attrs.field(factory=list, alias="tools")
    _messages: list[AgentMessage] = attrs.field(factory=list, alias="messages")
    is_streaming: bool = False
    streaming_message: AgentMessage | None = None
    pending_tool_calls: frozenset[str] = frozenset()
    error_message: str | None = None

    @property
    def messages(self) -> list[AgentMessage]:
        """The transcript (grows at every ``message_end``)."""
        return self._messages

    @messages.setter
    def messages(self, value: Sequence[AgentMessage]) -> None:
        self._messages = list(value)

    @property
    def tools(self) -> list[AgentTool]:
        """The tools offered to the model at the next run."""
        return self._tools

    @tools.setter
    def tools(self, value: Sequence[AgentTool]) -> None:
        self._tools = list(value)


@final
class _Queue:
    __slots__ = ("messages", "mode")

    def __init__(self, mode: QueueMode) -> None:
        # A list once something is queued: most agents never queue anything.
        self.messages: list[AgentMessage] | tuple[()] = ()
        self.mode: QueueMode = mode

    def push(self, message: AgentMessage) -> None:
        if isinstance(self.messages, list):
            self.messages.append(message)
        else:
            self.messages = [message]

    def drain(self) -> list[AgentMessage]:
        messages = self.messages
        if not messages:
            return []
        if self.mode == "all":
            self.messages = ()
            return list(messages)
        assert isinstance(messages, list)  # not empty
        return [messages.pop(0)]


@final
class _Run:
    """One run's abort signal, and whether it has settled (``agent_end`` listeners done,
    or failed) and is idle (state reset too: ``wait_for_idle()`` returns). The events
    behind the two waits are made only when someone waits: most runs have no waiter."""

    __slots__ = ("_idle", "_settled", "is_idle", "is_settled", "signal")

    def __init__(self) -> None:
        self.signal = AbortSignal()
        self.is_settled = False
        self.is_idle = False
        self._settled: trio.Event | None = None
        self._idle: trio.Event | None = None

    def settle(self) -> None:
        self.is_settled = True
        if self._settled is not None:
            self._settled.set()

    def make_idle(self) -> None:
        self.is_idle = True
        if self._idle is not None:
            self._idle.set()

    async def wait_settled(self) -> None:
        """Block until settled. Checkpoints."""
        if self._settled is None:
            self._settled = trio.Event()
            if self.is_settled:
                self._settled.set()
        await self._settled.wait()

    async def wait_idle(self) -> None:
        """Block until idle. Checkpoints."""
        if self._idle is None:
            self._idle = trio.Event()
            if self.is_idle:
                self._idle.set()
        await self._idle.wait()


async def _abort_when_cancelled(run: _Run) -> None:
    """Lives beside a run: a cancellation from outside becomes the run's abort()."""
    if run.is_settled:
        # The run ended before this task first ran (it never waited): nothing to
        # watch, and no schedule point (Event.wait() makes one even when set), so
        # the nursery's exit does not wait a second round for this task.
        return
    try:
        await run.wait_settled()
    except trio.Cancelled:
        # The run (shielded) now settles as aborted; the Cancelled is not lost: the
        # run's own task re-raises it once the run is idle.
        run.signal.abort()


def _shielded_trap() -> object:
    """What ``trio.lowlevel.cancel_shielded_checkpoint()`` yields to Trio: a schedule
    point that no cancellation can interrupt (taken from the public function, not named)."""
    coro = trio.lowlevel.cancel_shielded_checkpoint()  # noqa: ASYNC105  # driven by hand
    try:
        return coro.send(None)
    finally:
        coro.close()


_SHIELDED_TRAP: Final = _shielded_trap()


@final
class _WatchOnWait:
    """Awaits a run's coroutine, and starts its watcher (:func:`_abort_when_cancelled`)
    in ``nursery`` when the coroutine first waits for something a cancellation could
    interrupt. Until then the run has only run synchronously or passed schedule points
    that cannot be cancelled (a nursery's exit with nothing left to wait for, as at the
    end of a run whose tools all returned at once): a cancellation from outside could
    not have reached it there, and one that came meanwhile is seen by the watcher as soon
    as it starts (it aborts the run at the run's first real wait). So a run that never
    waits needs no watcher task, nor the scheduling rounds that task would cost."""

    __slots__ = ("_coro", "_nursery", "_run")

    def __init__(
        self,
        coro: Coroutine[Any, Any, Exception | None],
        nursery: trio.Nursery | None,
        run: _Run,
    ) -> None:
        self._coro = coro
        self._nursery = nursery
        self._run = run

    def __await__(self) -> Generator[Any, Any, Exception | None]:
        # ``yield from`` the coroutine, watching what it yields to Trio.
        coro = self._coro
        nursery = self._nursery  # (None: the watcher is already there)
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                trap = coro.send(value) if error is None else coro.throw(error)
            except StopIteration as stop:
                result: Exception | None = stop.value
                return result
            finally:
                error = None
            if nursery is not None and trap is not _SHIELDED_TRAP:
                nursery.start_soon(_abort_when_cancelled, self._run)
                nursery = None
            try:
                value = yield trap
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # what Trio throws into the task goes on down
                error = exc


def _unwrap(exc: Exception) -> Exception:
    """The exception itself, not the single-member group a nursery wrapped it in."""
    while isinstance(exc, ExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


@final
class Agent:
    """A stateful agent: a transcript, tools, queues and listeners around the loop.

    Hooks may be plain or async functions; ``should_stop_after_turn`` and
    ``prepare_next_turn`` receive ``(turn, signal)``.
    """

    def __init__(
        self,
        *,
        system_prompt: str = "",
        model: Model | None = None,
        thinking_level: ThinkingLevel = "off",
        tools: Sequence[AgentTool] = (),
        messages: Sequence[AgentMessage] = (),
        stream_fn: StreamFn | None = None,
        convert_to_llm: Callable[[list[AgentMessage]], Any] | None = None,
        transform_context: Callable[[list[AgentMessage], AbortSignal], Any] | None = None,
        get_api_key: Callable[[str], Any] | None = None,
        before_tool_call: Callable[..., Any] | None = None,
        after_tool_call: Callable[..., Any] | None = None,
        should_stop_after_turn: Callable[[TurnContext, AbortSignal | None], Any] | None = None,
        prepare_next_turn: Callable[[TurnContext, AbortSignal | None], Any] | None = None,
        steering_mode: QueueMode = "one-at-a-time",
        follow_up_mode: QueueMode = "one-at-a-time",
        tool_execution: Literal["parallel", "sequential"] = "parallel",
        stream_options: StreamOptions | None = None,
        deps: object = None,
    ) -> None:
        self.state = _new_agent_state(
            system_prompt=system_prompt,
            model=model if model is not None else DEFAULT_MODEL,
            thinking_level=thinking_level,
            tools=list(tools),
            messages=list(messages),
        )
        self.stream_fn = _resolve_stream_fn(stream_fn)
        self.convert_to_llm = (
            convert_to_llm if convert_to_llm is not None else default_convert_to_llm
        )
        self.transform_context = transform_context
        self.get_api_key = get_api_key
        self.before_tool_call = before_tool_call
        self.after_tool_call = after_tool_call
        self.should_stop_after_turn = should_stop_after_turn
        self.prepare_next_turn = prepare_next_turn
        self.tool_execution = tool_execution
        self.deps = deps
        """What tools built by :func:`pitrio.tool` receive as ``RunContext.deps``."""
        # Built on first use (most agents keep the defaults: the runs share one).
        self._stream_options = stream_options
        self._listeners: tuple[Listener, ...] = ()
        self._steering = _Queue(steering_mode)
        self._follow_up = _Queue(follow_up_mode)
        self._run: _Run | None = None

    # -- listeners and queues ----------------------------------------------------------

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Add a listener; returns a function that removes it."""
        entry = listener

        def unsubscribe() -> None:
            for i, existing in enumerate(self._listeners):
                if existing is entry:
                    # Copy-on-write: a run iterating the old list is not disturbed.
                    self._listeners = self._listeners[:i] + self._listeners[i + 1 :]
                    return

        self._listeners = (*self._listeners, listener)
        return unsubscribe

    @property
    def stream_options(self) -> StreamOptions:
        """The template of each request's options (signal, key and reasoning are set
        per request)."""
        options = self._stream_options
        if options is None:
            options = self._stream_options = StreamOptions()
        return options

    @stream_options.setter
    def stream_options(self, options: StreamOptions) -> None:
        self._stream_options = options

    @property
    def steering_mode(self) -> QueueMode:
        """How the steering queue drains (``"one-at-a-time"`` per poll, or ``"all"``)."""
        return self._steering.mode

    @steering_mode.setter
    def steering_mode(self, mode: QueueMode) -> None:
        self._steering.mode = _check_mode(mode)

    @property
    def follow_up_mode(self) -> QueueMode:
        """How the follow-up queue drains (``"one-at-a-time"`` per poll, or ``"all"``)."""
        return self._follow_up.mode

    @follow_up_mode.setter
    def follow_up_mode(self, mode: QueueMode) -> None:
        self._follow_up.mode = _check_mode(mode)

    def steer(self, message: AgentMessage | str) -> None:
        """Queue a message to deliver after the current turn (before the next request)."""
        self._steering.push(_as_message(message))

    def follow_up(self, message: AgentMessage | str) -> None:
        """Queue a message to deliver when the agent would otherwise stop."""
        self._follow_up.push(_as_message(message))

    def clear_steering_queue(self) -> None:
        self._steering.messages = ()

    def clear_follow_up_queue(self) -> None:
        self._follow_up.messages = ()

    def clear_all_queues(self) -> None:
        self.clear_steering_queue()
        self.clear_follow_up_queue()

    def has_queued_messages(self) -> bool:
        return bool(self._steering.messages or self._follow_up.messages)

    @property
    def queued_steering(self) -> tuple[AgentMessage, ...]:
        return tuple(self._steering.messages)

    @property
    def queued_follow_up(self) -> tuple[AgentMessage, ...]:
        return tuple(self._follow_up.messages)

    # -- run control --------------------------------------------------------------------

    @property
    def is_running(self) -> bool:
        """Whether a run is active (from its start until it has settled)."""
        return self._run is not None

    @property
    def signal(self) -> AbortSignal | None:
        """The active run's abort signal, or ``None`` when idle."""
        return self._run.signal if self._run is not None else None

    def abort(self) -> None:
        """Abort the active run (no-op when idle). Does not wait; see :meth:`wait_for_idle`."""
        if self._run is not None:
            self._run.signal.abort()

    async def wait_for_idle(self) -> None:
        """Wait until no run is active. Checkpoints."""
        run = self._run
        if run is None:
            await trio.lowlevel.checkpoint()
            return
        await run.wait_idle()

    def reset(self) -> None:
        """Clear the transcript, error and queues (system prompt, model, tools stay).

        Raises:
            AgentBusyError: a run is active.
        """
        if self._run is not None:
            raise AgentBusyError(_BUSY_RESET)
        self.state.messages = []
        self.state.is_streaming = False
        self.state.streaming_message = None
        self.state.pending_tool_calls = frozenset()
        self.state.error_message = None
        self.clear_all_queues()

    async def prompt(
        self,
        input: str | AgentMessage | Sequence[AgentMessage],
        images: Sequence[ImageContent] = (),
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run the agent on new input; returns when the run has settled.

        ``input`` is a string (a user message, with optional ``images``), a message, or
        a list of messages. With ``await nursery.start(agent.prompt, ...)`` the call
        returns as soon as the run is active (``agent_start`` emitted).

        Failures inside the run (a broken stream function, hook or listener) do not
        raise: they end the run with an error message, as in Pi.

        Raises:
            AgentBusyError: a run is already active.
        """
        if self._run is not None:
            raise AgentBusyError(_BUSY_PROMPT)
        messages = _normalize_input(input, images)
        await self._run_prompts(messages, skip_initial_poll=False, task_status=task_status)

    async def resume(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Continue from the transcript as it is (Pi's ``continue()``).

        From a ``user``/``toolResult``/custom tail the loop continues directly. From an
        ``assistant`` tail, queued steering messages (else follow-ups) are run as
        prompts.

        Raises:
            AgentBusyError: a run is already active.
            UsageError: nothing to continue from.
        """
        if self._run is not None:
            raise AgentBusyError(_BUSY_CONTINUE)
        messages = self.state.messages
        if not messages:
            msg = "No messages to continue from"
            raise UsageError(msg)
        if messages[-1].role == "assistant":
            steering = self._steering.drain()
            if steering:
                await self._run_prompts(steering, skip_initial_poll=True, task_status=task_status)
                return
            follow_ups = self._follow_up.drain()
            if follow_ups:
                await self._run_prompts(
                    follow_ups, skip_initial_poll=False, task_status=task_status
                )
                return
            msg = "Cannot continue from message role: assistant"
            raise UsageError(msg)

        def executor(signal: AbortSignal) -> Coroutine[Any, Any, list[AgentMessage]]:
            return run_agent_loop_continue(
                self._snapshot(),
                self._loop_config(False),
                self._process_event,
                signal,
                self.stream_fn,
            )

        await self._run_with_lifecycle(executor, task_status)

    @overload
    async def run(
        self,
        input: str | AgentMessage | Sequence[AgentMessage],
        images: Sequence[ImageContent] = (),
        *,
        deps: object = ...,
        limits: UsageLimits | None = ...,
        output_type: None = None,
        output_retries: int = ...,
        output_mode: OutputMode = ...,
        task_status: trio.TaskStatus[None] = ...,
    ) -> RunResult[str]: ...

    @overload
    async def run(
        self,
        input: str | AgentMessage | Sequence[AgentMessage],
        images: Sequence[ImageContent] = (),
        *,
        deps: object = ...,
        limits: UsageLimits | None = ...,
        output_type: type[OutputT],
        output_retries: int = ...,
        output_mode: OutputMode = ...,
        task_status: trio.TaskStatus[None] = ...,
    ) -> RunResult[OutputT | None]: ...

    async def run(
        self,
        input: str | AgentMessage | Sequence[AgentMessage],
        images: Sequence[ImageContent] = (),
        *,
        deps: object = _AGENT_DEPS,
        limits: UsageLimits | None = None,
        output_type: type[Any] | None = None,
        output_retries: int = 1,
        output_mode: OutputMode = "auto",
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> RunResult[Any]:
        """Run the agent on new input, as :meth:`prompt` does, and return the result.

        The result holds the answer (``output``: the last assistant message's text), the
        messages the run added, the usage and cost summed over its requests, and how it
        ended (``stop_reason``, ``error_message``). ``deps`` is what tools built by
        :func:`pitrio.tool` receive as ``RunContext.deps`` in this run (default: the
        agent's ``deps``). ``limits`` caps requests, tokens, cost and wall time: a run
        that goes over one is aborted (its events and transcript are those of an aborted
        run) and its result names the limit. With ``output_type=T`` the model is asked
        for a ``T`` (``output_mode``: ``"auto"`` uses the API's native structured output,
        a JSON-schema response format on the OpenAI APIs and a forced ``final_result``
        tool on Anthropic's, and elsewhere offers the ``final_result`` tool; ``"native"``
        insists on the former, ``"tool"`` on the latter); each answer is validated
        against ``T``'s schema and a failing one is sent back with the errors; ``output``
        is then the ``T`` the model gave (``None`` if it gave none valid within
        ``output_retries`` retries; ``error_message`` says why). With ``await
        nursery.start(agent.run, ...)`` the call returns once the run is active, as
        :meth:`prompt` does (the result is then not seen: await ``run()`` itself to get
        it).

        Failures inside the run are data, as for :meth:`prompt`. Checkpoints.

        Raises:
            AgentBusyError: a run is already active.
            UsageError: ``output_type`` has no JSON schema, ``output_retries`` is
                negative, ``output_mode`` is unknown or ``"native"`` for an API without
                native structured output, or the agent already has a tool named
                ``final_result``.
        """
        if self._run is not None:
            raise AgentBusyError(_BUSY_PROMPT)
        # Imported here: ``import pitrio`` does not pay for what only run() uses.
        from ._output import FINAL_RESULT, OutputCollector
        from ._run_result import RunObserver

        messages = _normalize_input(input, images)
        observer = RunObserver(limits)
        seconds = observer.limits.max_seconds
        collector: OutputCollector[Any] | None = None
        if output_type is not None:
            if any(t.name == FINAL_RESULT for t in self.state.tools):
                msg = (
                    f"run(output_type=...) adds a tool named {FINAL_RESULT!r}, and the agent "
                    "already has one; rename that tool"
                )
                raise UsageError(msg)
            state = self.state
            collector = OutputCollector(
                output_type,
                output_retries,
                self.follow_up,
                model=state.model,
                mode=output_mode,
                thinking=state.thinking_level != "off",
                has_tools=bool(state.tools),
            )
        unsubscribe = self.subscribe(observer)
        unsubscribe_output = self.subscribe(collector) if collector is not None else None
        try:
            # The wall-time cap is a deadline: the agent turns the cancellation into an
            # abort, the run settles, and the Cancelled ends here.
            with trio.move_on_after(seconds if seconds is not None else math.inf) as deadline:
                await self._run_prompts(
                    messages,
                    skip_initial_poll=False,
                    task_status=task_status,
                    deps=deps,
                    extra_tools=collector.tools if collector is not None else (),
                    stream_options=(
                        collector.stream_options(self._stream_options or _DEFAULT_OPTIONS)
                        if collector is not None
                        else None
                    ),
                )
        finally:
            unsubscribe()
            if unsubscribe_output is not None:
                unsubscribe_output()
        if deadline.cancelled_caught:
            observer.exceed("max_seconds", f"the run took longer than max_seconds={seconds}", None)
        if collector is not None:
            result: RunResult[Any] = observer.result(collector.value)
            if collector.error_message is not None and result.exceeded_limit is None:
                result = attrs.evolve(result, error_message=collector.error_message)
            elif not collector.has_value and result.error_message is None:
                # Ended without an answer to check (cut off at max_tokens, say).
                result = attrs.evolve(
                    result,
                    error_message=(
                        f"No output: the run ended (stop_reason {result.stop_reason!r}) "
                        "before the model gave a valid one"
                    ),
                )
            return result
        last = next((m for m in reversed(observer.messages) if m.role == "assistant"), None)
        return observer.result(last.text if isinstance(last, AssistantMessage) else "")

    def _run_prompts(
        self,
        messages: list[AgentMessage],
        *,
        skip_initial_poll: bool,
        task_status: trio.TaskStatus[None],
        deps: object = _AGENT_DEPS,
        extra_tools: Sequence[AgentTool] = (),
        stream_options: StreamOptions | None = None,
    ) -> Coroutine[Any, Any, None]:
        """The run of ``messages``, to await (a plain function returning the run's
        coroutine: one coroutine less per prompt)."""

        def executor(signal: AbortSignal) -> Coroutine[Any, Any, list[AgentMessage]]:
            # run_agent_loop's working copy of the snapshot, made at once: the transcript
            # copied once, with the prompts appended. (A plain function returning the
            # loop's coroutine: one coroutine less per run.)
            state = self.state
            context = _new_agent_context(
                system_prompt=state.system_prompt,
                messages=[*state.messages, *messages],
                tools=[*state.tools, *extra_tools] if extra_tools else list(state.tools),
            )
            config = self._loop_config(skip_initial_poll)
            if stream_options is not None:
                config = attrs.evolve(config, stream_options=stream_options)
            return invoke_loop(
                messages, context, config, self._process_event, signal, self.stream_fn
            )

        return self._run_with_lifecycle(executor, task_status, deps)

    def _snapshot(self) -> AgentContext:
        return AgentContext(
            system_prompt=self.state.system_prompt,
            messages=list(self.state.messages),
            tools=list(self.state.tools),
        )

    def _loop_config(self, skip_initial_steering_poll: bool) -> LoopConfig:
        """The loop configuration of one run (Pi's ``createLoopConfig``)."""
        steering = self._steering
        get_steering_messages: Callable[[], list[AgentMessage]] = steering.drain
        if skip_initial_steering_poll:
            skip = True

            def get_steering_messages() -> list[AgentMessage]:
                nonlocal skip
                if skip:
                    skip = False
                    return []
                return steering.drain()

        should_stop = self.should_stop_after_turn
        prepare = self.prepare_next_turn
        state = self.state
        return _new_loop_config(
            model=state.model,
            reasoning=None if state.thinking_level == "off" else state.thinking_level,
            convert_to_llm=self.convert_to_llm,
            transform_context=self.transform_context,
            get_api_key=self.get_api_key,
            get_steering_messages=get_steering_messages,
            get_follow_up_messages=self._follow_up.drain,
            tool_execution=self.tool_execution,
            before_tool_call=self.before_tool_call,
            after_tool_call=self.after_tool_call,
            should_stop_after_turn=(
                (lambda turn: should_stop(turn, self.signal)) if should_stop is not None else None
            ),
            prepare_next_turn=(
                (lambda turn: prepare(turn, self.signal)) if prepare is not None else None
            ),
            stream_options=(
                self._stream_options if self._stream_options is not None else _DEFAULT_OPTIONS
            ),
        )

    async def _run_with_lifecycle(
        self,
        executor: Callable[[AbortSignal], Awaitable[object]],
        task_status: trio.TaskStatus[None],
        deps: object = _AGENT_DEPS,
    ) -> None:
        if self._run is not None:  # pragma: no cover  # callers check first
            msg = "Agent is already processing."
            raise AgentBusyError(msg)
        # The run's dependencies, for RunContext: every task the run starts copies this
        # task's context, so the tools see them wherever they run.
        run_deps = self.deps if deps is _AGENT_DEPS else deps
        # Set only when it changes (most runs have none, as the context around them).
        deps_token = RUN_DEPS.set(run_deps) if RUN_DEPS.get() is not run_deps else None
        run = self._run = _Run()
        state = self.state
        state.is_streaming = True
        state.streaming_message = None
        state.error_message = None
        failure: Exception | None = None
        try:
            # The run's nursery: everything the run starts (provider streams, tool
            # batches) lives in nurseries nested inside this one.
            async with trio.open_nursery() as nursery:
                watched: trio.Nursery | None = nursery
                if task_status is not trio.TASK_STATUS_IGNORED:
                    # Started by nursery.start(): the watcher from the start, as before
                    # the lazy one, so the starter sees the scheduling it always saw.
                    nursery.start_soon(_abort_when_cancelled, run)
                    watched = None
                task_status.started()
                # A cancellation from outside (a deadline, a cancelled nursery) does not
                # tear the run down mid-event: the watcher turns it into abort(), the run
                # settles as an aborted run does, and the Cancelled is re-raised below.
                # The watcher starts when the run first waits: a run that never does
                # (a model that answers at once) cannot be cancelled meanwhile.
                with trio.CancelScope(shield=True):
                    failure = await _WatchOnWait(self._execute(executor, run), watched, run)
                    if not run.is_idle:  # (agent_end's listeners made it idle already)
                        self._finish_run(run)  # at once, as Pi's finishRun
                    run.settle()
        finally:
            if not run.is_idle:
                self._finish_run(run)
            if deps_token is not None:
                RUN_DEPS.reset(deps_token)
        if failure is not None:
            # As Pi's prompt() rejects when its failure handling throws (a listener
            # failing again during the failure tail): the listener's own exception.
            raise failure
        await trio.lowlevel.checkpoint_if_cancelled()

    def _finish_run(self, run: _Run) -> None:
        if run.is_idle:
            return
        state = self.state
        state.is_streaming = False
        state.streaming_message = None
        state.pending_tool_calls = frozenset()
        self._run = None
        run.make_idle()

    async def _execute(
        self, executor: Callable[[AbortSignal], Awaitable[object]], run: _Run
    ) -> Exception | None:
        """Run the loop; a failure ends the run with Pi's failure tail. Returns the
        exception the failure tail itself raised, if any."""
        try:
            await executor(run.signal)
        except Exception as exc:
            try:
                await self._handle_run_failure(_unwrap(exc), run.signal.aborted)
            except Exception as again:
                return _unwrap(again)
        return None

    async def _handle_run_failure(self, error: BaseException, aborted: bool) -> None:
        model = self.state.model
        message = AssistantMessage(
            content=(TextContent(text=""),),
            api=model.api,
            provider=model.provider,
            model=model.id,
            stop_reason="aborted" if aborted else "error",
            error_message=error_text(error),
            timestamp=_now_ms(),
        )
        for event in (
            MessageStart(message=message),
            MessageEnd(message=message),
            TurnEnd(message=message, tool_results=()),
            AgentEnd(messages=(message,)),
        ):
            pending = self._process_event(event)
            if pending is not None:
                await pending

    def _process_event(self, event: AgentEvent) -> Awaitable[None] | None:
        """Reduce the event into the state, then call the listeners in order.

        Runs synchronously as far as it can: plain listeners are called right here. If a
        listener returns an awaitable, the rest (awaiting it, then the later listeners)
        is returned for the caller to await, as Pi's ``processEvents`` continues after
        its first ``await``.
        """
        state = self.state
        # Dispatch on the exact class (the event classes are final), most frequent
        # first: this runs for every event, and a failed isinstance() or a class-pattern
        # match costs several times more; the class is looked up once. It ends in
        # assert_never, so a new event type fails mypy here until it is handled.
        kind = type(event)
        if kind is MessageUpdate or kind is MessageStart:
            state.streaming_message = event.message  # type: ignore[union-attr]  # mypy narrows kind, not event
        elif kind is MessageEnd:
            state.streaming_message = None
            state._messages.append(event.message)  # type: ignore[union-attr]  # mypy narrows kind, not event
        elif kind is TurnStart or kind is AgentStart or kind is ToolExecutionUpdate:
            pass
        elif kind is ToolExecutionStart:
            state.pending_tool_calls = state.pending_tool_calls | {event.tool_call_id}  # type: ignore[union-attr]  # as above
        elif kind is ToolExecutionEnd:
            state.pending_tool_calls = state.pending_tool_calls - {event.tool_call_id}  # type: ignore[union-attr]  # as above
        elif kind is TurnEnd:
            message = event.message  # type: ignore[union-attr]  # mypy narrows kind, not event
            if isinstance(message, AssistantMessage) and message.error_message:
                state.error_message = message.error_message
        elif kind is AgentEnd:
            state.streaming_message = None
        else:
            assert_never(kind)
        run = self._run
        if run is None:
            msg = "Agent listener invoked outside active run"
            raise RuntimeError(msg)
        # Pi's finishRun() follows agent_end's listeners at once: the run is idle when
        # they are done, not later when the loop has closed its nursery (a schedule
        # point where another task would see a run that has ended still running).
        listeners = self._listeners
        if not listeners:
            if kind is AgentEnd:
                self._finish_run(run)
            return None
        signal = run.signal
        called = 0  # a count, not enumerate(): no iterator and tuple per event
        for listener in listeners:
            called += 1  # noqa: SIM113  # see above
            result = listener(event, signal)
            if result is not None and is_awaitable(result):
                pending = _finish_listeners(result, listeners, called, event, signal)
                if kind is AgentEnd:
                    return self._finish_after(pending, run)
                return pending
        if kind is AgentEnd:
            self._finish_run(run)
        return None

    async def _finish_after(self, pending: Awaitable[None], run: _Run) -> None:
        await pending
        self._finish_run(run)


async def _finish_listeners(
    pending: Awaitable[object],
    listeners: tuple[Listener, ...],
    start: int,
    event: AgentEvent,
    signal: AbortSignal,
) -> None:
    await pending
    for listener in listeners[start:]:
        result = listener(event, signal)
        if result is not None and is_awaitable(result):
            await result


_QUEUE_MODES: dict[str, QueueMode] = {"one-at-a-time": "one-at-a-time", "all": "all"}


def _check_mode(mode: str) -> QueueMode:
    checked = _QUEUE_MODES.get(mode)
    if checked is None:
        msg = f"queue mode must be 'one-at-a-time' or 'all'; got {mode!r}"
        raise UsageError(msg)
    return checked


def _as_message(message: AgentMessage | str) -> AgentMessage:
    if isinstance(message, str):
        return UserMessage(content=(TextContent(text=message),), timestamp=_now_ms())
    if not hasattr(message, "role"):
        msg = f"expected a message (an object with a 'role') or a string; got {message!r}"
        raise ArgumentTypeError(msg)
    return message


def _normalize_input(
    input: str | AgentMessage | Sequence[AgentMessage], images: Sequence[ImageContent]
) -> list[AgentMessage]:
    if isinstance(input, str):
        content: tuple[UserContent, ...] = (_new_text_content(text=input), *images)
        return [_new_user_message(content=content, timestamp=_now_ms())]
    if isinstance(input, list | tuple):
        return [_as_message(m) for m in input]
    return [_as_message(input)]


_new_agent_state: Final = constructor(AgentState)
_new_agent_context: Final = constructor(AgentContext)
_new_loop_config: Final = constructor(LoopConfig)
_new_user_message: Final = constructor(UserMessage)
_new_text_content: Final = constructor(TextContent)


def _now_ms() -> int:
    return int(_time() * 1000)
