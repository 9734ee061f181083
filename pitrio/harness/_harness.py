"""The Harness: an Agent with a session, hooks, per-turn state, retry and compaction.

One :class:`Harness` drives one :class:`pitrio.Agent` through its public hooks:

* before the first request of a prompt, and before every later request (the loop's
  ``prepare_next_turn``), the harness rebuilds a :class:`TurnState`: the model, the
  thinking level, the active tools bound to their :class:`ToolContext`, the resources,
  and the system prompt (a string, or a function of the turn state called every turn).
  A change made mid-run (:meth:`Harness.set_model`, :meth:`Harness.set_tools`, ...)
  applies from the next request;
* every ``message_end`` is appended to the session, and what a run commits is written
  to storage before the effect it guards (the request, a tool; a process killed mid-tool
  keeps the prompt and the tool call), the transactions between two effects in one
  write; after each ``turn_end`` the session is flushed (synced by the store's ``fsync``
  policy) and :class:`SavePoint` emitted; after the prompt (retries included)
  :class:`Settled`;
* with a session, each run is recorded as Pi's harness records an operation (``_operations``:
  its state before each request and tool, each tool's outcome), so a run its process left
  unfinished is :attr:`Harness.interrupted` to the next harness and :meth:`Harness.resume`
  finishes it (``_recovery``);
* a run ending with a retryable provider error is retried with back-off
  (:class:`RetrySettings`); a context overflow is compacted and continued once;
  above the compaction threshold the session is compacted at the run's checkpoints
  (before its first request, between turns, after its last answer); a compaction that
  fails there ends the run as failed, as Pi's does.

This module holds the :class:`Harness` itself: driving a prompt through the Agent,
recording it in the session, retrying and compacting. It plays the part of Pi's lane
(pi-agent-core 0.85.0, ``harness/runtime/lane.js`` and ``runtime/drive/``: ``retry.js``,
``recovery.js`` for a context overflow, ``structural.js`` for compaction), on one
Agent, recording its runs as Pi's durable operations. The per-turn state is in ``_turn``, the
hook glue in ``_hook_bridge``, the hooks in ``_hooks``, the events in ``_events``, the
retry policy in ``_retry``.
"""

from __future__ import annotations

import contextlib
import math
import os
import random as _random
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Literal, TypeVar, final

import attrs
import trio

from pitrio import (
    Agent,
    AgentBusyError,
    AgentMessage,
    AgentTool,
    ArgumentTypeError,
    AssistantMessage,
    EventStream,
    ImageContent,
    Model,
    NextTurn,
    PitrioError,
    QueueMode,
    StreamFn,
    StreamOptions,
    TextContent,
    ThinkingLevel,
    ToolResultMessage,
    TurnContext,
    Usage,
    UsageError,
    UserMessage,
    wire,
)

from . import _recovery
from ._branch_summary import (
    collect_entries_for_branch_summary,
    prepare_branch_entries,
    summarize_branch,
)
from ._compaction import (
    CompactionPreparation,
    CompactionSettings,
    ContextTokenCounter,
    prepare_compaction,
    should_compact,
)
from ._entries import new_id, now_ms
from ._errors import BranchSummaryError, CompactionError, SessionFormatError
from ._events import (
    AutoRetryEnd,
    AutoRetryStart,
    CompactionEnd,
    CompactionReason,
    CompactionStart,
    HandlerError,
    NavigationEnd,
    NavigationStart,
    QueueUpdate,
    RecoveryEnd,
    RecoveryStart,
    SavePoint,
    Settled,
)
from ._frames import FramedStream
from ._hook_bridge import HookBridge
from ._hooks import (
    BeforeCompactionEvent,
    BeforeCompactionResult,
    BeforeNavigationEvent,
    BeforeNavigationResult,
    HookError,
    HookName,
    Hooks,
)
from ._invocation import InvokedTool
from ._listeners import EventBus, HarnessListener
from ._messages import convert_to_llm as harness_convert_to_llm
from ._operations import (
    Operation,
    OperationRecorder,
    restore_lane,
    settings_json,
)
from ._queue import (
    PI_KINDS,
    QueuedMessage,
    QueueKind,
    enqueue_writes,
    inbox,
    queued,
    select,
    take_writes as _take_writes,
)
from ._retry import RetrySettings, is_context_overflow, is_retryable, retry_delay
from ._session import Session
from ._session_state import LANE_CONFIG, LANE_STATE
from ._structural import (
    INTERRUPTED_SUMMARY,
    OVERFLOW_DECLINED,
    StructuralOperation,
    branch_preparation_from,
    branch_preparation_json,
    compaction_preparation_from,
    compaction_preparation_json,
)
from ._summary import CompactionResult, ResponseHook, compact
from ._turn import (
    Resources,
    SystemPromptFn,
    ToolContext,
    ToolFactory,
    TurnConfig,
    TurnState,
)

if TYPE_CHECKING:
    from pitrio import AbortSignal

__all__ = ["Harness"]

_T = TypeVar("_T")


_ERROR_STOPS = ("error", "aborted")


@final
class Harness:
    """An agent with a session, hooks, per-turn state, automatic retry and compaction.

    ::

        harness = Harness(model=model, stream_fn=stream_fn, session=session,
                          system_prompt=lambda turn: f"You are using {turn.model.id}.")
        harness.subscribe(print)
        await harness.prompt("hello")

    Args:
        model: the model to request (change it with :meth:`set_model`).
        stream_fn: the stream function (a provider's, a replay, a scripted model;
            default: pitrio's default stream function).
        session: where the transcript is kept; its context is loaded at once. Without
            one, the transcript lives in memory and compaction is unavailable.
        tools: tools, or :data:`ToolFactory` functions called with the
            :class:`ToolContext` (tools then need not know the working directory).
        active_tools: names of the tools offered to the model (``None``: all).
        system_prompt: a string, or a :data:`SystemPromptFn` called before each request.
        thinking_level: the reasoning level.
        cwd: the tools' working directory (default: the process's).
        data_dir: the tools' data directory.
        resources: skills, prompt templates and context files for the system prompt.
        retry: automatic retry settings.
        compaction: compaction settings (``CompactionSettings`` of
            :mod:`pitrio.harness`; default: Pi's). Compaction needs a session.
        compaction_failure: what a failed compaction at the threshold inside a run
            does: ``"fail_run"`` (Pi's harness: the run ends failed with the summary's
            error) or ``"continue"`` (Pi's coding agent: the run goes on uncompacted;
            :class:`CompactionEnd` reports the failure). An overflow's failed
            compaction always ends the run (its request cannot be repeated as it was).
        stream_options: the template of each request's options.
        get_api_key: ``(provider) -> key``, called before each request.
        convert_to_llm: default: the harness's converter (custom roles as Pi's).
        tool_execution: ``"parallel"`` or ``"sequential"``.
        steering_mode: how the steering queue drains (the Agent's).
        follow_up_mode: how the follow-up queue drains (the Agent's).
        random: the jitter source (``() -> float`` in ``[0, 1)``).
    """

    def __init__(
        self,
        *,
        model: Model,
        stream_fn: StreamFn | None = None,
        session: Session | None = None,
        tools: Sequence[AgentTool | ToolFactory] = (),
        active_tools: Sequence[str] | None = None,
        system_prompt: str | SystemPromptFn = "",
        thinking_level: ThinkingLevel = "off",
        cwd: str | os.PathLike[str] | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        resources: Resources | None = None,
        retry: RetrySettings | None = None,
        compaction: CompactionSettings | None = None,
        compaction_failure: Literal["fail_run", "continue"] = "fail_run",
        stream_options: StreamOptions | None = None,
        get_api_key: Callable[[str], Any] | None = None,
        convert_to_llm: Callable[[list[AgentMessage]], Any] | None = None,
        tool_execution: Literal["parallel", "sequential"] = "parallel",
        steering_mode: QueueMode = "one-at-a-time",
        follow_up_mode: QueueMode = "one-at-a-time",
        random: Callable[[], float] | None = None,
    ) -> None:
        _check_model(model)
        if compaction_failure not in ("fail_run", "continue"):
            msg = f"compaction_failure must be 'fail_run' or 'continue'; got {compaction_failure!r}"
            raise UsageError(msg)
        self._session = session
        self._compaction_failure = compaction_failure
        # What another lane's harness is made with (lane()).
        self._options: dict[str, Any] = {
            "model": model,
            "stream_fn": stream_fn,
            "tools": tools,
            "active_tools": active_tools,
            "system_prompt": system_prompt,
            "thinking_level": thinking_level,
            "cwd": cwd,
            "data_dir": data_dir,
            "resources": resources,
            "retry": retry,
            "compaction": compaction,
            "compaction_failure": compaction_failure,
            "stream_options": stream_options,
            "get_api_key": get_api_key,
            "convert_to_llm": convert_to_llm,
            "tool_execution": tool_execution,
            "steering_mode": steering_mode,
            "follow_up_mode": follow_up_mode,
            "random": random,
        }
        self._lanes: dict[str, Harness] = {}
        self._config = TurnConfig(
            model=model,
            thinking_level=thinking_level,
            tool_sources=tuple(tools),
            active_tools=None if active_tools is None else tuple(active_tools),
            system_prompt=system_prompt,
            tool_context=ToolContext(
                cwd=os.fspath(cwd) if cwd is not None else os.getcwd(),
                data_dir=os.fspath(data_dir) if data_dir is not None else None,
            ),
            resources=resources if resources is not None else Resources(),
        )
        self.retry = retry if retry is not None else RetrySettings()
        """Automatic retry settings (may be replaced between prompts)."""
        self.compaction = compaction
        """Compaction settings (``None``: Pi's defaults); ``enabled=False`` turns automatic
        compaction off."""
        self._random = random if random is not None else _random.random
        if convert_to_llm is None:
            convert_to_llm = harness_convert_to_llm
        self._agent = Agent(
            model=model,
            thinking_level=thinking_level,
            stream_fn=stream_fn,
            convert_to_llm=convert_to_llm,
            get_api_key=get_api_key,
            should_stop_after_turn=self._after_turn,
            prepare_next_turn=self._prepare_next_turn,
            tool_execution=tool_execution,
            steering_mode=steering_mode,
            follow_up_mode=follow_up_mode,
            stream_options=stream_options,
        )
        # The Agent resolved the stream function (pitrio's default when None); the
        # harness wraps it for the provider hooks.
        self._bridge = HookBridge(Hooks(), self._agent.stream_fn)
        self._agent.stream_fn = self._bridge.stream
        self._ops: OperationRecorder | None = None
        self._interrupted: Operation | None = None
        self._prompts: list[AgentMessage] = []
        if session is not None:
            self._agent.state.messages = list(session.build_context().messages)
            if not session.read_only:
                ops = self._ops = OperationRecorder(
                    session,
                    settings_json(compaction or CompactionSettings(), tool_execution),
                    lambda: self._config.thinking_level,  # the level it runs at
                )
                self._config.wrap = lambda tool: InvokedTool(tool, ops, session)
                self._agent.stream_fn = self._recorded_stream
                self._interrupted = _interrupted(session)
        self._agent.subscribe(self._on_agent_event)
        self._bus = EventBus()
        self._busy = False
        self._idle = trio.Event()
        self._idle.set()
        self._abort_requested = False
        self._cancel_scope: trio.CancelScope | None = None
        self._replaced_messages: list[AgentMessage] | None = None
        self._compacted_in_run = False
        self._last_assistant: AssistantMessage | None = None
        self._context_tokens = ContextTokenCounter()  # the threshold check, incremental
        # the last prepare_compaction() and what it was made for (_prepare_compaction)
        self._prepared: (
            tuple[tuple[Session, str | None, CompactionSettings], CompactionPreparation | None]
            | None
        ) = None
        self._retry_attempt = 0
        # The error a run's compaction ended the run with (its operation is over: Pi's
        # ``resume_checkpoint`` boundary failing); ``None`` while the run goes on.
        self._run_ended: AssistantMessage | None = None
        # Whether the run's first request still has its threshold check to pass (Pi's
        # checkpoint before it; see _first_request)
        self._first_check = False
        # Queued messages handed to the Agent (its queues, or the prompt), with the entry
        # ids reserved for them.
        self._delivering: list[tuple[AgentMessage, str]] = []

    # -- state --------------------------------------------------------------------------

    @property
    def hooks(self) -> Hooks:
        """The hook registry (:meth:`Hooks.on`)."""
        return self._bridge.hooks

    @hooks.setter
    def hooks(self, hooks: Hooks) -> None:
        self._bridge.hooks = hooks

    @property
    def agent(self) -> Agent:
        """The Agent underneath (for its queues and state; drive it through the harness)."""
        return self._agent

    @property
    def session(self) -> Session | None:
        """The session, or ``None``."""
        return self._session

    @property
    def messages(self) -> list[AgentMessage]:
        """The model's context as of now (the session's context plus the running turn)."""
        return self._agent.state.messages

    @property
    def model(self) -> Model:
        return self._config.model

    @property
    def thinking_level(self) -> ThinkingLevel:
        return self._config.thinking_level

    @property
    def tool_context(self) -> ToolContext:
        return self._config.tool_context

    @property
    def resources(self) -> Resources:
        return self._config.resources

    @property
    def turn(self) -> TurnState | None:
        """The state of the latest request (``None`` before the first)."""
        return self._config.turn

    @property
    def interrupted(self) -> Operation | None:
        """The operation the session was in when its process stopped (a run killed
        mid-tool or mid-request, a compaction or a tree navigation killed mid-summary),
        read from the session's operation records; :meth:`resume` (or the next
        :meth:`prompt`) recovers it. ``None`` when the last operation ended."""
        return self._interrupted

    @property
    def is_busy(self) -> bool:
        """Whether a prompt (with its retries and recoveries) or a compaction is running."""
        return self._busy

    async def set_model(self, model: Model) -> None:
        """Use ``model`` from the next request on; recorded in the session.

        Raises:
            ArgumentTypeError: ``model`` is not a :class:`pitrio.Model`.
        """
        _check_model(model)
        self._config.model = model
        self._agent.state.model = model
        if self._session is not None:
            await self._session.append_model_change(model.provider, model.id)

    async def set_thinking_level(self, level: ThinkingLevel) -> None:
        """Use ``level`` from the next request on; recorded in the session."""
        self._config.thinking_level = level
        self._agent.state.thinking_level = level
        if self._session is not None:
            await self._session.append_thinking_level_change(level)

    def set_tools(self, tools: Sequence[AgentTool | ToolFactory]) -> None:
        """Replace the tools from the next request on."""
        self._config.tool_sources = tuple(tools)

    def set_active_tools(self, names: Sequence[str] | None) -> None:
        """Offer only the tools named (``None``: all) from the next request on."""
        self._config.active_tools = None if names is None else tuple(names)

    def set_resources(self, resources: Resources) -> None:
        self._config.resources = resources

    def set_system_prompt(self, system_prompt: str | SystemPromptFn) -> None:
        self._config.system_prompt = system_prompt

    def set_tool_context(
        self,
        *,
        cwd: str | os.PathLike[str] | None = None,
        data_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        """Rebind the tools from the next request on."""
        self._config.rebind(cwd=cwd, data_dir=data_dir)

    @property
    def lane_name(self) -> str:
        """The session lane this harness runs on (``"main"``, or :meth:`lane`'s)."""
        return self._session.lane_name if self._session is not None else "main"

    async def lane(self, name: str, *, create_at: str | None = None) -> Harness:
        """A harness on the session's lane ``name`` (Pi's ``harness.lane(name)``): the
        same settings, hooks and session storage, with that lane's own branch, queue and
        operations, so its runs go on beside this one's. A lane the session lacks is
        created with its tip at ``create_at`` (an entry id; ``None``: an empty branch);
        an existing one, with a run its process left unfinished, has it as
        :attr:`interrupted`. The same name gives the same harness.

        Raises:
            UsageError: no session; an invalid name; a store with one lane.
            SessionNotFoundError: ``create_at`` names no entry.
        """
        session = self._session
        if session is None or session.read_only:
            msg = "lane() needs a session: pass session= to Harness (not read-only)"
            raise UsageError(msg)
        if name == self.lane_name:
            await trio.lowlevel.checkpoint()
            return self
        lanes = self._lanes
        if name in lanes:
            await trio.lowlevel.checkpoint()
            return lanes[name]
        view = await session.lane(name, create_at=create_at)
        if view.model is None:
            await view.append_model_change(self.model.provider, self.model.id)
        config = self._config
        current = {
            "model": config.model,
            "thinking_level": config.thinking_level,
            "tools": config.tool_sources,
            "active_tools": config.active_tools,
            "system_prompt": config.system_prompt,
            "resources": config.resources,
            "cwd": config.tool_context.cwd,
            "data_dir": config.tool_context.data_dir,
        }
        other = Harness(**{**self._options, **current, "session": view})
        other.hooks = self.hooks
        other._lanes = lanes
        lanes[self.lane_name] = self
        lanes[name] = other
        return other

    # -- listeners and queues -------------------------------------------------------------

    def subscribe(self, listener: HarnessListener) -> Callable[[], None]:
        """Add a listener for Agent and harness events; returns a function removing it."""
        return self._bus.subscribe(listener)

    def steer(self, message: AgentMessage | str) -> None:
        """Queue a message for after the current turn."""
        self._agent.steer(message)

    def follow_up(self, message: AgentMessage | str) -> None:
        """Queue a message for when the agent would otherwise stop."""
        self._agent.follow_up(message)

    def abort(self) -> None:
        """Abort the prompt: the running request and tools, a retry's back-off, or a
        compaction. No-op when idle. Does not wait (see :meth:`wait_for_idle`)."""
        if not self._busy:
            return
        self._abort_requested = True
        self._agent.abort()
        if self._cancel_scope is not None:
            self._cancel_scope.cancel()

    # -- the durable queue (Pi's lane inbox) ---------------------------------------------

    @property
    def queued(self) -> tuple[QueuedMessage, ...]:
        """The durable queue, in order (see :meth:`enqueue`); empty without a session."""
        if self._ops is None or self._session is None:
            return ()
        return queued(self._session)

    def _queue_session(self) -> Session:
        if self._ops is None or self._session is None:
            msg = "the durable queue needs a session: pass session= to Harness (not read-only)"
            raise UsageError(msg)
        return self._session

    async def enqueue(
        self,
        kind: QueueKind,
        input: str | AgentMessage,
        images: Sequence[ImageContent] = (),
    ) -> str:
        """Queue a message durably (Pi's ``enqueue``); returns the id its entry will have.

        ``kind`` ``"steer"`` delivers it after the running turn, ``"follow_up"`` when the
        run would stop, ``"next_run"`` before the next prompt. The message is written to
        the session before this returns and stays queued through an abort or a crash
        until a run takes it: a prompt's start takes every ``next_run`` message and the
        first ``steer`` and ``follow_up`` (all of them with the queue mode ``"all"``) as
        entries before its own; a running turn takes steering and follow-up messages as
        the Agent delivers them. :meth:`cancel_queued` takes one back.

        Raises:
            UsageError: no session; an unknown ``kind``; an empty message; images with a
                message that is not a string; a pending assistant message.
        """
        session = self._queue_session()
        if kind not in PI_KINDS:
            msg = f"unknown queue kind {kind!r}: use 'steer', 'follow_up' or 'next_run'"
            raise UsageError(msg)
        if isinstance(input, str):
            if not input and not images:
                msg = "Queued input must contain text or an image"
                raise UsageError(msg)
            content = ((TextContent(text=input),) if input else ()) + tuple(images)
            message: AgentMessage = UserMessage(content=content, timestamp=now_ms())
        else:
            (message,) = _normalize_input(input, ())
            if images:
                msg = "Images can be added only to a queued string (pass them in the message)"
                raise UsageError(msg)
            if isinstance(message, AssistantMessage) and message.stop_reason == "pending":
                msg = "Cannot queue a pending assistant message"
                raise UsageError(msg)
        entry_id = new_id()
        assert self._ops is not None
        names = self._tool_names() or [t.name for t in self._config.build(session).tools]
        config = self._ops._lane_config(self._config.model, names)
        await session._record([enqueue_writes(session, entry_id, kind, message, config)])
        if self._busy and kind != "next_run":
            self._deliver(entry_id, kind, message)
        await self._bus.emit(QueueUpdate(queued=self.queued))
        return entry_id

    async def next_run(self, input: str | AgentMessage, images: Sequence[ImageContent] = ()) -> str:
        """Queue a message for the start of the next prompt (Pi's ``nextRun``):
        :meth:`enqueue` with ``"next_run"``."""
        return await self.enqueue("next_run", input, images)

    async def cancel_queued(
        self, entry_id: str
    ) -> Literal["cancelled", "already_consumed", "not_found"]:
        """Take a queued message back (Pi's ``cancelQueued``): ``"cancelled"``, or
        ``"already_consumed"`` when a run took it (its entry is in the session), or
        ``"not_found"``.

        Raises:
            UsageError: no session.
        """
        session = self._queue_session()
        if all(item.get("entryId") != entry_id for item in inbox(session)):
            return "already_consumed" if entry_id in session._state.by_id else "not_found"
        self._undeliver(entry_id)
        await session._record([_take_writes(session, [entry_id])])
        await self._bus.emit(QueueUpdate(queued=self.queued))
        return "cancelled"

    def _deliver(self, entry_id: str, kind: str, message: AgentMessage) -> None:
        """Hand a queued message to the Agent's queue (its entry is written when the
        Agent delivers it)."""
        self._delivering.append((message, entry_id))
        if kind == "steer":
            self._agent.steer(message)
        else:
            self._agent.follow_up(message)

    def _undeliver(self, entry_id: str | None = None) -> None:
        """Take queued messages (one, or all) back from the Agent's queues: they stay in
        the durable queue for the next run."""
        gone = [m for m, e in self._delivering if entry_id is None or e == entry_id]
        if not gone:
            return
        self._delivering = [(m, e) for m, e in self._delivering if not any(m is g for g in gone)]
        agent = self._agent
        steering = [m for m in agent.queued_steering if not any(m is g for g in gone)]
        follow_up = [m for m in agent.queued_follow_up if not any(m is g for g in gone)]
        agent.clear_all_queues()
        for m in steering:
            agent.steer(m)
        for m in follow_up:
            agent.follow_up(m)

    def _take_delivered(self, message: AgentMessage) -> str | None:
        for n, (queued_message, entry_id) in enumerate(self._delivering):
            if queued_message is message:
                del self._delivering[n]
                return entry_id
        return None

    def _take_queued_for_prompt(self) -> list[AgentMessage]:
        """What a prompt's start takes from the durable queue (Pi's ``acceptRun``)."""
        if self._ops is None or self._session is None:
            return []
        agent = self._agent
        taken = select(queued(self._session), agent.steering_mode, agent.follow_up_mode)
        for item in taken:
            self._delivering.append((item.message, item.entry_id))
        return [item.message for item in taken]

    def _deliver_inbox(self) -> None:
        """A recovered run takes the queue's steering and follow-up messages as it
        goes (they were queued while it ran)."""
        if self._session is None:
            return
        for item in queued(self._session):
            if item.kind != "next_run":
                self._deliver(item.entry_id, item.kind, item.message)

    # -- usage, idle callbacks, watching -------------------------------------------------

    async def record_usage(
        self,
        usage: Usage | Mapping[str, Any],
        *,
        entry_id: str | None = None,
        details: Any = None,
    ) -> str:
        """Record a usage adjustment in the session (Pi's ``recordUsage``: a usage row
        with ``adjustment: true``, beside the entry ``entry_id`` if given, with
        ``details``); returns the row's id (see :attr:`Session.usage_rows`).

        Raises:
            UsageError: no session.
        """
        session = self._queue_session()
        usage_id = new_id()
        row: dict[str, Any] = {
            "kind": "usage",
            "id": usage_id,
            "usage": wire.unstructure(usage) if isinstance(usage, Usage) else dict(usage),
            "adjustment": True,
        }
        if entry_id is not None:
            row["entryId"] = entry_id
        if details is not None:
            row["details"] = details
        await session._record([[row]])
        return usage_id

    async def run_when_idle(self, callback: Callable[[], Awaitable[object]]) -> None:
        """Wait until the harness is idle, then run ``await callback()`` with the harness
        claimed (Pi's ``runWhenIdle``): a :meth:`prompt` meanwhile raises
        :class:`~pitrio.AgentBusyError`. Returns when the callback has.
        """
        while True:
            await self.wait_for_idle()
            if not self._busy:
                break
        self._claim()
        try:
            await callback()
        finally:
            self._release()

    @asynccontextmanager
    async def watch(self) -> AsyncIterator[Watcher]:
        """Watch the harness (Pi's ``watch``): a :class:`Watcher` with a snapshot of now
        (the context, the queue, the running or interrupted operation) and, by
        ``async for``, every event from then on, until the block ends::

            async with harness.watch() as watcher:
                print(len(watcher.snapshot.messages))
                async for event in watcher:
                    ...
        """
        send, receive = trio.open_memory_channel[Any](math.inf)
        unsubscribe = self.subscribe(send.send_nowait)
        try:
            snapshot = WatchSnapshot(
                messages=tuple(self.messages),
                queued=self.queued,
                operation=self._current_operation(),
                busy=self._busy,
            )
            async with receive:
                yield Watcher(snapshot, receive)
        finally:
            unsubscribe()
            send.close()

    def _current_operation(self) -> Operation | None:
        ops = self._ops
        if ops is not None and ops.active and self._session is not None:
            try:
                return restore_lane(self._session, self._session.lane_name).operation
            except PitrioError:
                return None
        return self._interrupted

    async def wait_for_idle(self) -> None:
        """Wait until no prompt or compaction runs. Checkpoints."""
        if self._idle.is_set():
            await trio.lowlevel.checkpoint()
            return
        await self._idle.wait()

    # -- running ------------------------------------------------------------------------

    async def prompt(
        self,
        input: str | AgentMessage | Sequence[AgentMessage],
        images: Sequence[ImageContent] = (),
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run a prompt; returns once it has settled (retries and recoveries included).

        When the session's last run was left unfinished (:attr:`interrupted`), that run
        is finished first (:meth:`resume`), as Pi's lane finishes its current operation
        before the next.

        With ``await nursery.start(harness.prompt, ...)`` the call returns once the
        first run is active. Failures end the run as data (an error message), never as
        an exception.

        Raises:
            AgentBusyError: a prompt or a compaction is running.
        """
        messages = _normalize_input(input, images)
        if self._interrupted is not None:
            # Pi's lane finishes its current operation before the next run starts.
            await self.resume()
        self._claim()
        taken = self._take_queued_for_prompt()
        await self._drive([*taken, *messages], task_status)

    async def resume(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Continue from the context as it is (Pi's ``continue()``).

        When the session's last run was left unfinished (:attr:`interrupted`: its
        process was killed mid-request or mid-tool), recover that run instead, from the
        state its records name: an interrupted request is settled as an error (with what
        its committed frames had streamed) and, after the retry back-off, made again; of
        its tool batch, recorded outcomes are used, calls that never started
        run, and calls that started without a recorded outcome run again only when their
        tool's replay policy is ``"safe"`` (else they end with Pi's interrupted result);
        then the run goes on. :class:`RecoveryStart` and :class:`RecoveryEnd` frame what
        the recovery settles. An interrupted compaction or tree navigation is finished
        (its summary asked again as the next attempt, from its recorded preparation).

        Raises:
            AgentBusyError: a prompt or a compaction is running.
            UsageError: nothing to continue from.
        """
        if self._busy:
            self._claim()  # raises AgentBusyError
        if self._interrupted is not None:
            self._claim()
            if self._interrupted.intent != "run":
                try:
                    await self._recover_structural(self._interrupted)
                finally:
                    self._release()
                task_status.started()
                return
            await self._recover(self._interrupted, task_status)
            return
        messages = self._agent.state.messages
        if not messages:
            msg = "No messages to continue from"
            raise UsageError(msg)
        if messages[-1].role == "assistant" and not self._agent.has_queued_messages():
            msg = "Cannot continue from message role: assistant"
            raise UsageError(msg)
        self._claim()
        await self._drive(None, task_status)

    async def compact(self, custom_instructions: str | None = None) -> CompactionEnd:
        """Compact the session now (summarise the older part, keep the recent tail).

        Returns the :class:`CompactionEnd` event (``declined`` when there is nothing to
        compact). With a writable session the compaction is an operation of its own,
        recorded as Pi's harness records it (``_structural``): a process killed
        mid-summary leaves it :attr:`interrupted`, and :meth:`resume` finishes it.
        Unless it was aborted, a run then starts for the messages the durable queue
        holds (Pi's ``continueAfterStructural``), and settles before this returns.

        Raises:
            AgentBusyError: a prompt or a compaction is running.
            UsageError: the harness has no session.
        """
        if self._session is None:
            msg = "compact() needs a session: pass session= to Harness"
            raise UsageError(msg)
        if self._interrupted is not None and not self._busy:
            await self.resume()  # Pi's lane finishes its operation first
        self._claim()
        try:
            end = await self._compact("manual", custom_instructions=custom_instructions)
        finally:
            self._release()
        await self._continue_after_structural(end.status)
        return end

    async def _continue_after_structural(self, status: str) -> None:
        """Pi's ``continueAfterStructural``: after a compaction or navigation that was
        not aborted, a run starts for what the lane's inbox holds (steering, follow-up
        and next-run messages, as a prompt's start takes them); nothing runs when it is
        empty."""
        if status == "aborted" or self._busy or self._ops is None or self._session is None:
            return
        self._undeliver()  # what was queued meanwhile is in the durable queue still
        agent = self._agent
        if not select(queued(self._session), agent.steering_mode, agent.follow_up_mode):
            return
        self._claim()
        await self._drive(self._take_queued_for_prompt(), trio.TASK_STATUS_IGNORED)

    def _claim(self) -> None:
        if self._busy:
            msg = (
                "Harness is busy (a prompt or compaction is running). Use steer() or "
                "follow_up() to queue messages, or wait_for_idle()."
            )
            raise AgentBusyError(msg)
        self._busy = True
        self._idle = trio.Event()
        self._abort_requested = False
        self._bridge.failure = None

    def _release(self) -> None:
        self._busy = False
        self._run_ended = None
        self._cancel_scope = None
        self._config.prompt_system_prompt = None
        self._idle.set()

    async def _drive(
        self,
        prompts: list[AgentMessage] | None,
        task_status: trio.TaskStatus[None],
        *,
        recovered: bool = False,
    ) -> None:
        if not recovered:
            self._last_assistant = None
            self._retry_attempt = 0
            self._run_ended = None
        overflow_attempted = False
        try:
            if prompts is not None:
                prompts = await self._start_prompt(prompts)
                self._prompts = list(prompts)
            elif self._ops is not None and not recovered:
                await self._ops.begin_resume(self._config.model, self._tool_names())
            await self._apply_turn_state()
            if not recovered:
                self._watch_first_request(prompts or [])
            if self._aborting():
                # Aborted before the run started: nothing runs.
                task_status.started()
                return
            if prompts is not None:
                await self._agent.prompt(prompts, task_status=task_status)
            else:
                await self._agent.resume(task_status=task_status)
            self._sync_after_run()
            while not self._aborting() and self._run_ended is None:
                message = self._last()
                if message is None or message.stop_reason != "error" or self._bridge.failure:
                    break
                window = self._config.model.context_window
                if is_context_overflow(message, window):
                    if overflow_attempted or not self._can_compact(message):
                        break
                    overflow_attempted = True
                    self._drop_failed(message)
                    end = await self._compact("overflow", will_retry=True)
                    if end.status != "completed" or self._aborting():
                        break
                    await self._continue()
                    continue
                if not self.retry.enabled or not is_retryable(message, window):
                    break
                if not await self._back_off(message):
                    break
                await self._continue()
            await self._finish_retry()
            last = self._last()
            if (
                not self._aborting()
                and self._run_ended is None
                and last is not None
                and last.stop_reason not in _ERROR_STOPS
                and self._threshold_reached(self._agent.state.messages)
            ):
                await self._compact("threshold")
        finally:
            self._prompts = []
            self._undeliver()  # what no turn took stays in the durable queue
            with trio.CancelScope(shield=True):
                try:
                    if self._ops is not None:
                        await self._ops.finish(self._outcome())
                    if self._session is not None:
                        await self._session.flush()
                finally:
                    self._release()
            await self._bus.emit(Settled(message=self._last_assistant))

    def _outcome(self) -> Literal["completed", "aborted", "failed"]:
        """How the run's operation ends (Pi's ``pi.result`` status)."""
        last = self._last_assistant
        if self._abort_requested or (last is not None and last.stop_reason == "aborted"):
            return "aborted"
        if self._bridge.failure is not None or (last is not None and last.stop_reason == "error"):
            return "failed"
        return "completed"

    async def _recorded_stream(self, model: Model, context: Any, options: StreamOptions) -> Any:
        """The stream function with a session: the request is recorded as
        ``assistant.effect_pending`` before it is sent, and its answer's frames are
        written as they stream (``_frames``: Pi's ``pi.pending.assistant_frame``)."""
        key = None
        if self._ops is not None:
            names = self._tool_names()
            retry = self.retry
            delay = round(retry.base_delay * 1000)
            await self._ops.before_request(model, retry.max_retries + 1, names, delay)
            key = self._ops.frames_key
        returned = self._bridge.stream(model, context, options)
        stream = returned if isinstance(returned, EventStream) else await returned
        if key is None or self._session is None or not stream.has_producer:
            return stream  # (a stream filled already streams without a pause to write in)
        return FramedStream(stream, self._session, key)

    def _tool_names(self) -> list[str]:
        """The names of the tools the latest request offered."""
        turn = self._config.turn
        return [t.name for t in turn.tools] if turn is not None else []

    def _will_retry(self, message: AssistantMessage) -> bool:
        """Whether a failed response will be retried (``assistant.retry_wait``)."""
        window = self._config.model.context_window
        return (
            message.stop_reason == "error"
            and self.retry.enabled
            and self._retry_attempt < self.retry.max_retries
            and is_retryable(message, window)
            and not is_context_overflow(message, window)
        )

    # -- recovery -----------------------------------------------------------------------

    async def _recover(self, operation: Operation, task_status: trio.TaskStatus[None]) -> None:
        """Bring an interrupted run to its end, from the state its records name (Pi's
        drive on a restored lane): an interrupted request is settled as an error (with
        its committed frames) and, as a retry, made again; of a tool batch, recorded
        outcomes are used, calls never started run, calls started without an outcome
        run again only when their tool's replay policy is ``"safe"`` (else they end as
        interrupted); then the run goes on."""
        session, ops = self._session, self._ops
        assert session is not None
        assert ops is not None
        self._interrupted = None
        self._last_assistant = None
        self._retry_attempt = 0
        self._run_ended = None
        ops.adopt(operation)
        self._deliver_inbox()
        await self._bus.emit(RecoveryStart(operation_id=operation.id, at=operation.at))
        left = False

        async def leave() -> None:
            nonlocal left
            left = True
            await self._bus.emit(RecoveryEnd(operation_id=operation.id, resumed=True))

        try:
            go_on = await _recovery.settle(self, session, ops, operation, leave)
        except BaseException:
            with trio.CancelScope(shield=True):
                try:
                    await ops.finish("failed")
                finally:
                    self._release()
            raise
        self._agent.state.messages = list(session.build_context().messages)
        self._drop_trailing_failure()
        go_on = go_on and self._run_ended is None  # (its compaction may have ended it)
        if not left:
            await self._bus.emit(RecoveryEnd(operation_id=operation.id, resumed=go_on))
        retried = go_on and await self._recovered_retry(ops.state, operation.at)
        ended = go_on and not retried  # retries used up, or the back-off aborted
        go_on = retried
        if go_on and self._threshold_reached(self._agent.state.messages):
            # The killed run would have compacted before this request (the check a
            # run's later requests get in prepare_next_turn; Pi's drive compacts at a
            # checkpoint).
            await self._compact("threshold")
            self._drop_trailing_failure()
            go_on = self._run_ended is None
        if not go_on:
            with trio.CancelScope(shield=True):
                try:
                    await ops.finish(self._outcome() if ended else "completed")
                    await session.flush()
                finally:
                    self._release()
            task_status.started()
            await self._bus.emit(Settled(message=self._last_assistant))
            return
        await self._drive(None, task_status, recovered=True)

    async def _recovered_retry(self, state: Mapping[str, Any], found_at: str) -> bool:
        """A request the run was retrying is retried as Pi's drive does: from
        ``assistant.retry_wait`` (a failed answer, or the interrupted request just
        settled) after the back-off (what is left of it when the wait was found in the
        session), with :class:`AutoRetryStart`; from ``assistant.ready`` of a later
        attempt at once. The retry's end (:class:`AutoRetryEnd`) follows its answer.
        ``False`` when the retries are used up (the run ends failed)."""
        at = state.get("at")
        if at == "assistant.ready":
            self._retry_attempt = max(0, int(state.get("nextAttempt", 1)) - 1)
            return True
        if at != "assistant.retry_wait":
            return True
        settings = self.retry
        attempt = max(1, int(state.get("nextAttempt", 2)) - 1)
        error = str(state.get("errorMessage") or "Assistant request failed")
        if not settings.enabled or attempt > settings.max_retries:
            self._last_assistant = AssistantMessage(stop_reason="error", error_message=error)
            return False
        if found_at == "assistant.retry_wait":
            delay = max(0.0, (float(state.get("notBefore") or 0) - now_ms()) / 1000)
        else:
            delay = retry_delay(attempt, settings, error, random=self._random) or 0.0
        self._retry_attempt = attempt
        return await self._wait_for_retry(delay, error)

    def _drop_trailing_failure(self) -> None:
        """The settled interrupted request (or a failed answer waiting for its retry), in
        a context that keeps failed answers (Pi's coding-agent sessions), leaves the
        Agent's context: it is asked again, as a retry is (see _continue)."""
        messages = self._agent.state.messages
        end = len(messages)
        while (
            end
            and isinstance(last := messages[end - 1], AssistantMessage)
            and (last.stop_reason in _ERROR_STOPS)
        ):
            end -= 1  # (a failed answer waiting for its retry, then the interrupted one)
        if end < len(messages):
            self._agent.state.messages = messages[:end]

    def _aborting(self) -> bool:
        """Whether abort() was called (a method: it changes while the prompt runs)."""
        return self._abort_requested

    def _last(self) -> AssistantMessage | None:
        """The last assistant message of the prompt so far (set by the listener)."""
        return self._last_assistant

    async def _start_prompt(self, prompts: list[AgentMessage]) -> list[AgentMessage]:
        """Run ``before_agent_start``; a failure is kept and ends the run as an error."""
        if not self.hooks.has("before_agent_start"):
            return prompts
        try:
            turn = self._config.build(self._session)
            system_prompt = await self._config.resolve_system_prompt(turn)
            added, override = await self.hooks.run_before_agent_start(tuple(prompts), system_prompt)
        except Exception as exc:
            self._bridge.failure = exc
            return prompts
        if override != system_prompt:
            self._config.prompt_system_prompt = override
        return [*prompts, *added]

    async def _continue(self) -> None:
        await self._apply_turn_state()
        if not self._abort_requested:
            # A context that keeps failed answers (Pi's coding-agent sessions) may end in
            # the one being retried: Pi's coding agent drops it from the Agent's messages
            # (not from the session) before it continues, and so does this.
            messages = self._agent.state.messages
            last = messages[-1] if messages else None
            if isinstance(last, AssistantMessage) and last.stop_reason in _ERROR_STOPS:
                self._agent.state.messages = messages[:-1]
            await self._agent.resume()
            self._sync_after_run()

    def _sync_after_run(self) -> None:
        """After a compaction inside a run, the Agent's transcript becomes the session's
        context (the loop already used it for the run's later requests)."""
        if (self._compacted_in_run or self._run_ended is not None) and self._session is not None:
            # (a compaction that ended the run: the failure tail's message is not in the
            # session, nor in the transcript)
            self._compacted_in_run = False
            self._agent.state.messages = list(self._session.build_context().messages)

    def _abort_scope(self) -> trio.CancelScope:
        """A cancel scope that :meth:`abort` cancels (cancelled already if it was called);
        the caller resets ``_cancel_scope`` when it leaves the scope."""
        scope = self._cancel_scope = trio.CancelScope()
        if self._abort_requested:
            scope.cancel()
        return scope

    def _drop_failed(self, message: AssistantMessage) -> None:
        """The failed response leaves the context (it stays in the session)."""
        messages = self._agent.state.messages
        if messages and messages[-1] is message:
            self._agent.state.messages = messages[:-1]

    async def _back_off(self, message: AssistantMessage) -> bool:
        """Wait before the next retry; ``False`` when retrying is over."""
        settings = self.retry
        error = message.error_message or "Unknown error"
        if self._retry_attempt >= settings.max_retries:
            if self._retry_attempt > 0:
                await self._end_retry(False, error)
            return False
        delay = retry_delay(
            self._retry_attempt + 1,
            settings,
            error,
            random=self._random,
            headers=self._bridge.error_headers,
        )
        if delay is None:
            if self._retry_attempt > 0:
                await self._end_retry(False, error)
            return False
        self._retry_attempt += 1
        return await self._wait_for_retry(delay, error, message)

    async def _wait_for_retry(
        self, delay: float, error: str, failed: AssistantMessage | None = None
    ) -> bool:
        """Announce the retry (:class:`AutoRetryStart`), drop the ``failed`` answer from
        the context, wait ``delay`` seconds; ``False`` when an abort ended the wait."""
        await self._bus.emit(
            AutoRetryStart(
                attempt=self._retry_attempt,
                max_attempts=self.retry.max_retries,
                delay=delay,
                error_message=error,
            )
        )
        if failed is not None:
            self._drop_failed(failed)
        with self._abort_scope() as scope:
            await trio.sleep(delay)
        self._cancel_scope = None
        if scope.cancelled_caught or self._abort_requested:
            await self._end_retry(False, "Retry cancelled")
            return False
        return True

    async def _end_retry(self, success: bool, final_error: str | None) -> None:
        attempt, self._retry_attempt = self._retry_attempt, 0
        await self._bus.emit(
            AutoRetryEnd(success=success, attempt=attempt, final_error=final_error)
        )

    async def _finish_retry(self) -> None:
        """A retry whose run ended without a successful response (aborted) ends here."""
        if self._retry_attempt > 0:
            last = self._last_assistant
            error = last.error_message if last is not None else None
            await self._end_retry(False, error or "Retry aborted")

    # -- per-turn state -----------------------------------------------------------------

    async def _apply_turn_state(self) -> None:
        """Set the Agent up for the next run's first request."""
        try:
            await self._config.apply(self._agent, self._session)
        except Exception as exc:
            self._bridge.failure = exc
        self._bridge.install(self._agent)

    def _prepare_next_turn(
        self, turn: TurnContext, signal: AbortSignal | None
    ) -> Awaitable[NextTurn | None] | None:
        """The loop's ``prepare_next_turn``: the next request's state.

        With a fixed system prompt, below the compaction threshold, nothing needs
        rebuilding unless something changed: then the loop goes on with no extra work.
        """
        compact = self._threshold_reached(turn.context.messages)
        if not compact and self._config.unchanged():
            return None
        return self._next_turn(turn, compact)

    async def _next_turn(self, turn: TurnContext, compact: bool) -> NextTurn | None:
        messages = turn.context.messages
        replaced = False
        if compact and await self._compact_mid_run():
            if self._replaced_messages is not None:
                messages, replaced = self._replaced_messages, True
            self._replaced_messages = None
        self._raise_if_ended()
        return await self._config.next_turn(self._session, messages, replaced=replaced)

    def _watch_first_request(self, prompts: Sequence[AgentMessage]) -> None:
        """Pi's drive checks the compaction threshold at the run's first checkpoint too
        (``runCheckpoint`` after ``startRun``): when the context with the prompt is over
        it, the Agent's first request goes through :meth:`_first_request`, which
        compacts before it is sent (the later requests are checked in
        ``prepare_next_turn``)."""
        self._first_check = False
        if self._ops is None or not self._over_threshold([*self._agent.state.messages, *prompts]):
            # (what to summarise is decided once the prompt is on the branch)
            return
        self._first_check = True
        self._agent.transform_context = self._first_request

    async def _first_request(
        self, messages: list[AgentMessage], signal: AbortSignal
    ) -> list[AgentMessage]:
        """The Agent's ``transform_context`` for a run whose first request is over the
        threshold: the prompt is in the session (its ``message_end`` wrote it), so the
        run compacts at its checkpoint as Pi's does, and the request (and the run's
        later ones: the loop's list is replaced in place) goes on from the compacted
        context. Then the ``context`` hook, if any, as without it."""
        if self._first_check:
            self._first_check = False
            if self._threshold_reached(messages) and await self._compact_mid_run():
                if self._replaced_messages is not None:
                    messages[:] = self._replaced_messages
                self._replaced_messages = None
            self._raise_if_ended()
        if self.hooks.has("context"):
            return await self._bridge.transform_context(messages, signal)
        return messages

    def _raise_if_ended(self) -> None:
        """A compaction that ended the run inside the Agent's loop ends the loop too (its
        failure tail's message is not written: the run's result is)."""
        if self._run_ended is not None:
            raise CompactionError(str(self._run_ended.error_message), reason="summarization_failed")

    def _after_turn(self, turn: TurnContext, signal: AbortSignal | None) -> bool:
        if self._bridge.failure is not None:
            # A tool hook failed during the turn: the run ends as an error run.
            raise self._bridge.failure
        return False

    # -- events -------------------------------------------------------------------------

    def _on_agent_event(self, event: Any, signal: AbortSignal) -> Awaitable[None] | None:
        kind = event.type
        if kind == "message_end":
            message = event.message
            if message.role == "assistant":
                self._last_assistant = message
            if self._session is not None or self._ends_retry(message):
                return self._message_end(event)
        elif kind == "turn_end":
            return self._turn_end(event)
        elif self._ops is not None and self._ops.active:
            if kind == "tool_execution_start":
                return self._tool_start(event)
            if kind == "tool_execution_end":
                return self._tool_end(event)
        return self._bus.deliver(event)

    async def _record_message(self, ops: OperationRecorder, message: AgentMessage) -> None:
        assert self._session is not None
        queued_id = self._take_delivered(message)
        if any(m is message for m in self._prompts):
            entry_id = new_id() if queued_id is None else queued_id
            model, names = self._config.model, self._tool_names()
            writes = ops.begin_writes(entry_id, model, names, prompt=queued_id is None)
            if queued_id is not None:
                writes = _take(self._session, writes, queued_id)
            await self._session._append_message_with(message, entry_id=entry_id, after=writes)
            if queued_id is not None:
                await self._bus.emit(QueueUpdate(queued=self.queued))
        elif queued_id is not None:
            writes = _take(self._session, [], queued_id)
            await self._session._append_message_with(message, entry_id=queued_id, after=writes)
            ops.delivered(queued_id)
            await self._bus.emit(QueueUpdate(queued=self.queued))
        elif isinstance(message, AssistantMessage):
            await ops.assistant_end(message, retry=self._will_retry(message))
        elif isinstance(message, ToolResultMessage):
            await ops.tool_result_end(message)
        else:
            await self._session.append_message(message)

    def _tool_start(self, event: Any) -> Awaitable[None] | None:
        """The call's intent, written before its tool runs (with its siblings' in a
        parallel batch: see ``OperationRecorder.commit_tool_intent``)."""
        ops = self._ops
        assert ops is not None
        turn = self._config.turn
        tool = next((t for t in turn.tools if t.name == event.tool_name), None) if turn else None
        if ops.commit_tool_intent(event.tool_call_id, event.args, tool):
            return self._write_then_emit(event)
        return self._bus.deliver(event)

    def _tool_end(self, event: Any) -> Awaitable[None] | None:
        """The call's outcome, written at once while a sibling still runs."""
        ops = self._ops
        assert ops is not None
        result = event.result
        message = ToolResultMessage(
            tool_call_id=event.tool_call_id,
            tool_name=event.tool_name,
            content=result.content,
            details=result.details,
            usage=result.usage,
            added_tool_names=result.added_tool_names or None,
            is_error=event.is_error,
            timestamp=now_ms(),
        )
        if ops.commit_tool_outcome(message, result.terminate is True):
            return self._write_then_emit(event)
        return self._bus.deliver(event)

    async def _write_then_emit(self, event: Any) -> None:
        assert self._session is not None
        await self._session._write()
        await self._bus.emit(event)

    def _message_end(self, event: Any) -> Awaitable[None] | None:
        """A message joins the session. The run's answers and tool results are
        committed under the ids its records reserved and written by the next write
        (before the next tool runs or request is sent, or the save point); prompts,
        queued messages and others are written at once."""
        message = event.message
        ops = self._ops
        if (
            ops is not None
            and ops.active
            and not self._delivering
            and isinstance(message, AssistantMessage | ToolResultMessage)
            and ops.reserved(message)
            and not any(m is message for m in self._prompts)
        ):
            if isinstance(message, AssistantMessage):
                retry = self._will_retry(message)
                overflow = None if retry else self._overflow_task(message)
                ops.commit_assistant_end(message, retry=retry, overflow=overflow)
            else:
                ops.commit_tool_result_end(message)
            if self._ends_retry(message):
                return self._emit_message_end(event)
            return self._bus.deliver(event)
        return self._record_message_end(event)

    async def _record_message_end(self, event: Any) -> None:
        message = event.message
        ops = self._ops
        if ops is not None and (ops.active or any(m is message for m in self._prompts)):
            await self._record_message(ops, message)
        elif self._session is not None and self._run_ended is None:
            await self._session.append_message(message)
        await self._emit_message_end(event)

    async def _emit_message_end(self, event: Any) -> None:
        await self._bus.emit(event)
        if self._ends_retry(event.message):
            await self._end_retry(True, None)

    def _ends_retry(self, message: AgentMessage) -> bool:
        """Whether ``message`` is the answer that ends an automatic retry."""
        return (
            isinstance(message, AssistantMessage)
            and self._retry_attempt > 0
            and message.stop_reason not in _ERROR_STOPS
        )

    async def _turn_end(self, event: Any) -> None:
        await self._bus.emit(event)
        entry_id = None
        if self._session is not None:
            await self._session.flush()
            entry_id = self._session.leaf_id
        await self._bus.emit(SavePoint(entry_id=entry_id))

    # -- compaction ---------------------------------------------------------------------

    def _can_compact(self, message: AssistantMessage) -> bool:
        """Overflow recovery needs a session, the error must be this model's, and the
        branch must have something to summarise (:meth:`_summarizable`)."""
        return (
            self._session is not None
            and self._compaction_settings().enabled
            and message.provider == self._config.model.provider
            and message.model == self._config.model.id
            and self._summarizable()
        )

    def _summarizable(self) -> bool:
        """Whether an automatic compaction would summarise anything: the branch's cut
        leaves older messages (or a split turn's prefix) out of the kept tail. When the
        kept tail is the whole context (one huge message, a large system prompt or
        tools with a short history), Pi's coding agent does not compact; Pi's harness
        would ask for a summary of nothing, keep everything, and do it again at every
        checkpoint (docs/deviations.md)."""
        if self._session is None:
            return False
        preparation = self._prepare_compaction()
        return preparation is not None and bool(
            preparation.messages_to_summarize or preparation.turn_prefix_messages
        )

    def _prepare_compaction(self) -> CompactionPreparation | None:
        """:func:`prepare_compaction` of the session's branch, made once per branch tip
        and settings: the check before a compaction (:meth:`_summarizable`) and the
        compaction itself share it, and a context over the threshold with nothing to
        summarise is not walked again at every checkpoint until something is appended."""
        session = self._session
        assert session is not None  # checked by the callers
        settings = self._compaction_settings()
        key = (session, session.leaf_id, settings)
        cached = self._prepared
        if cached is not None and cached[0] == key:
            return cached[1]
        preparation = prepare_compaction(_branch(session), settings)
        self._prepared = (key, preparation)
        return preparation

    def _compaction_settings(self) -> CompactionSettings:
        if self.compaction is not None:
            return self.compaction
        return CompactionSettings()

    def _threshold_reached(self, messages: Sequence[AgentMessage]) -> bool:
        """Whether to compact before the next request: ``messages`` are over the
        threshold and the branch has something to summarise."""
        return self._over_threshold(messages) and self._summarizable()

    def _over_threshold(self, messages: Sequence[AgentMessage]) -> bool:
        window = self._config.model.context_window
        if self._session is None or window <= 0:
            return False
        settings = self._compaction_settings()
        if not settings.enabled:
            return False
        estimate = self._context_tokens.estimate(messages)
        return should_compact(estimate.tokens, window, settings)

    async def _compact_mid_run(self) -> bool:
        end = await self._compact("threshold")
        return end.status == "completed"

    async def _compact(
        self,
        reason: CompactionReason,
        *,
        custom_instructions: str | None = None,
        will_retry: bool = False,
    ) -> CompactionEnd:
        session = self._session
        assert session is not None  # checked by the callers
        await self._bus.emit(CompactionStart(reason=reason))
        op: StructuralOperation | None = None
        end: CompactionEnd
        try:
            op = self._overflow_operation() if reason == "overflow" else None
            preparation: CompactionPreparation | None
            if op is not None:
                preparation = compaction_preparation_from(op.preparation())
            else:
                preparation = self._prepare_compaction()
            if preparation is None:
                end = CompactionEnd(reason=reason, status="declined")
            else:
                if reason == "manual" and self._ops is not None and not self._ops.active:
                    op = await self._begin_compaction(preparation, custom_instructions)
                elif reason == "threshold":
                    op = await self._begin_run_compaction(preparation)
                end = await self._run_compaction(
                    reason, preparation, op, custom_instructions, will_retry
                )
        except Exception as exc:
            # A failure is data: the compaction ends as failed (a broken stream function,
            # a storage error).
            self._cancel_scope = None
            end = CompactionEnd(reason=reason, status="failed", error_message=str(exc))
            if op is not None and _open(session, op):
                with trio.CancelScope(shield=True):
                    if op.in_run:
                        with contextlib.suppress(Exception):  # (left to the next restore)
                            await self._fail_run("harness_fault", str(exc) or type(exc).__name__)
                    else:
                        await _finish_failed(op, exc)
        except BaseException:
            # The caller's own cancellation (not abort(); it may come as a group of
            # Cancelled from the summary's requests): the compaction still ends, as
            # aborted (Pi's ``aborted: true``), before the cancellation goes on.
            self._cancel_scope = None
            with trio.CancelScope(shield=True):
                if op is not None and _open(session, op):
                    await op.finish("aborted")
                self._moved(op)
                await self._bus.emit(CompactionEnd(reason=reason, status="aborted"))
            raise
        self._moved(op)
        await self._bus.emit(end)
        return end

    async def _handler_error(self, hook: HookName, exc: Exception) -> None:
        """A structural handler failed: reported (:class:`HandlerError`, Pi's
        ``handler_error``) and skipped."""
        cause = exc.cause if isinstance(exc, HookError) else exc
        await self._bus.emit(HandlerError(hook=hook, error_message=str(cause)))

    async def _fail_run(self, code: str, message: str) -> None:
        """A run's compaction failed, or an overflow's was declined: the run ends as
        failed (Pi's ``resume_checkpoint`` boundary: the run's records give way to
        ``pi.result`` with the error, in one transaction). Its last message, for
        :class:`Settled`, is an error with ``message`` (not in the transcript)."""
        assert self._ops is not None
        model = self._config.model
        self._run_ended = self._last_assistant = AssistantMessage(
            content=(TextContent(text=""),),
            api=model.api,
            provider=model.provider,
            model=model.id,
            stop_reason="error",
            error_message=message,
            timestamp=now_ms(),
        )
        await self._ops.finish("failed", error={"code": code, "message": message})

    def _overflow_operation(self) -> StructuralOperation | None:
        """The overflow's compaction the run recorded with its failed answer
        (``summary.deciding``, see :meth:`_overflow_task`), or ``None``."""
        ops = self._ops
        if ops is None or not ops.active or self._session is None:
            return None
        state = ops.state
        if state.get("at") != "summary.deciding" or state["task"].get("reason") != "overflow":
            return None
        return StructuralOperation(self._session, ops.meta, state)

    def _overflow_task(self, message: AssistantMessage) -> tuple[dict[str, Any], Any] | None:
        """When ``message`` is a context overflow the run recovers from, the compaction's
        task and preparation (Pi's ``prepareOverflowCompaction``: from the branch before
        the failed answer), recorded with that answer (its ``summary.deciding``)."""
        ops, session = self._ops, self._session
        if (
            ops is None
            or session is None
            or message.stop_reason != "error"
            or not is_context_overflow(message, self._config.model.context_window)
            or not self._can_compact(message)
        ):
            return None
        context = ops.state.get("generationContext") or {}
        if context.get("overflowRecoveryUsed"):
            return None
        preparation = self._prepare_compaction()
        if preparation is None:
            return None
        resume_after = {
            "continuation": {"kind": "need_assistant", "overflowRecoveryUsed": True},
            "triggerEntryId": context.get("triggerEntryId"),
        }
        task = {
            "taskId": new_id(),
            "reason": "overflow",
            "boundary": {"kind": "resume_checkpoint", "resumeAfter": resume_after},
        }
        return task, compaction_preparation_json(preparation)

    def _moved(self, op: StructuralOperation | None) -> None:
        """After a run's compaction the run records from the state it left."""
        if op is not None and op.in_run and self._ops is not None:
            self._ops.moved_to(op.state)

    async def _begin_run_compaction(
        self, preparation: CompactionPreparation
    ) -> StructuralOperation | None:
        """A compaction at the threshold inside a run (Pi's ``runCheckpoint``): recorded
        as the run's ``summary.*`` states, from the checkpoint the run is at; ``None``
        (not recorded) when the run is at none."""
        ops = self._ops
        assert self._session is not None
        checkpoint = await ops.checkpoint() if ops is not None else None
        if ops is None or checkpoint is None:
            return None
        return await StructuralOperation.begin_in_run(
            self._session,
            ops.meta,
            checkpoint,
            reason="threshold",
            preparation=compaction_preparation_json(preparation),
        )

    async def _begin_compaction(
        self, preparation: CompactionPreparation, custom_instructions: str | None
    ) -> StructuralOperation:
        """A standalone compaction's first transaction (Pi's ``acceptCompaction``)."""
        assert self._session is not None
        assert self._ops is not None
        extra = {} if custom_instructions is None else {"customInstructions": custom_instructions}
        task = {"taskId": new_id(), "reason": "manual", **extra, "boundary": {"kind": "finish"}}
        return await StructuralOperation.begin(
            self._session,
            intent={"kind": "compaction", **extra},
            settings=self._ops.settings,
            configuration=self._lane_configuration(),
            state={"at": "summary.deciding", "task": task},
            preparation=compaction_preparation_json(preparation),
        )

    async def _run_compaction(
        self,
        reason: CompactionReason,
        preparation: CompactionPreparation,
        op: StructuralOperation | None,
        custom_instructions: str | None,
        will_retry: bool,
    ) -> CompactionEnd:
        """Summarise, write the entry (with ``op``: as the operation's last transaction)
        and make it the context; the :class:`CompactionEnd` to emit."""
        session = self._session
        assert session is not None

        async def summarize(stream_fn: StreamFn, hook: ResponseHook | None) -> CompactionResult:
            return await compact(
                preparation,
                stream_fn=stream_fn,
                model=self._config.model,
                custom_instructions=custom_instructions,
                thinking_level=self._config.thinking_level,
                stream_options=self._agent.stream_options,
                on_response=hook,
            )

        result: CompactionResult | None = None
        decision: BeforeCompactionResult | None = None
        try:
            with self._abort_scope() as scope:
                if op is None or op.at == "summary.deciding":
                    decision = await self.hooks.run_before_compaction(
                        BeforeCompactionEvent(
                            reason=reason,
                            preparation=preparation,
                            custom_instructions=custom_instructions,
                            operation_id=None if op is None else op.id,
                        ),
                        self._handler_error,
                    )
                if decision is not None:
                    result = decision.compaction
                elif op is None:
                    result = await summarize(self._bridge.stream, None)
                else:
                    result = await self._structural_summary(op, summarize)
        except (CompactionError, SessionFormatError, HookError) as exc:
            self._cancel_scope = None
            if op is not None and _open(session, op):
                code = _failure_code(exc)
                if op.in_run and reason == "threshold" and self._compaction_failure == "continue":
                    await op.finish("failed")  # back at its checkpoint, uncompacted
                elif op.in_run:  # Pi's resume_checkpoint boundary: the run fails
                    await self._fail_run(code, str(exc))
                else:
                    await op.finish("failed", error={"code": code, "message": str(exc)})
            return CompactionEnd(reason=reason, status="failed", error_message=str(exc))
        self._cancel_scope = None
        if decision is not None and decision.decline and not scope.cancelled_caught:
            if op is not None and op.in_run and reason == "overflow":
                await self._fail_run("compaction_declined", OVERFLOW_DECLINED)
            elif op is not None:
                await op.finish("declined")
            return CompactionEnd(reason=reason, status="declined")
        if result is None or scope.cancelled_caught:
            if op is not None:
                await op.finish("aborted")
            return CompactionEnd(reason=reason, status="aborted")
        from_hook = decision is not None
        if op is None:
            entry_id = await session.append_compaction(
                result.summary,
                tokens_before=result.tokens_before,
                retained_tail=result.retained_tail,
                details=result.details,
                usage=result.usage,
                from_hook=from_hook,
            )
        else:
            entry_id, writes = op.compaction_writes(
                result.summary,
                tokens_before=result.tokens_before,
                retained_tail=result.retained_tail,
                details=result.details,
                usage=result.usage,
                from_hook=from_hook,
            )
            if op.in_run:
                await op.resume_run(self._lane_configuration(), self._retry_policy(), writes)
            else:
                await op.finish("completed", before=writes, tip_id=entry_id)
        await session.flush()
        messages = list(session.build_context().messages)
        if self._agent.is_running:
            self._replaced_messages = messages
            self._compacted_in_run = True
        else:
            self._agent.state.messages = messages
        return CompactionEnd(
            reason=reason,
            status="completed",
            entry_id=entry_id,
            summary=result.summary,
            tokens_before=result.tokens_before,
            details=result.details,
            will_retry=will_retry,
        )

    # -- compaction and navigation as operations ----------------------------------------

    def _lane_configuration(self) -> dict[str, Any]:
        """The lane's configuration (``pi.lane.config``; a summary records it)."""
        assert self._session is not None
        stored = self._session.get_value(LANE_CONFIG, self._session.lane_name)
        if isinstance(stored, Mapping):
            return dict(stored)
        model = self._config.model
        return {
            "model": {"provider": model.provider, "modelId": model.id},
            "thinkingLevel": self._config.thinking_level,
            "activeToolNames": self._tool_names(),
        }

    def _retry_policy(self) -> dict[str, int]:
        """Pi's ``normalizedRetryPolicy`` from the harness's retry settings."""
        retry = self.retry
        return {
            "maxAttempts": retry.max_retries + 1 if retry.enabled else 1,
            "baseDelayMs": round(retry.base_delay * 1000),
        }

    async def _structural_summary(
        self,
        op: StructuralOperation,
        summarize: Callable[[StreamFn, ResponseHook | None], Awaitable[_T]],
    ) -> _T:
        """Drive ``op`` from the state it is at to its summary (Pi's structural drive):
        ``deciding`` -> ``ready`` -> ``effect_pending`` with each request recorded; an
        attempt that fails with a retryable error, or that a killed process left out
        (counted as interrupted), is made again as the next one after its
        ``retry_wait``, unless it was the last.

        Raises:
            CompactionError: the interrupted attempt was the last one (the operation
                has failed: Pi's ``structural_interrupted``).
        """
        while True:
            at = op.at
            if at == "summary.deciding":
                await op.ready(self._lane_configuration(), self._retry_policy())
            elif at == "summary.effect_pending":
                if op.attempt >= op.max_attempts:
                    error = {"code": "structural_interrupted", "message": INTERRUPTED_SUMMARY}
                    await op.finish("failed", error=error)
                    raise CompactionError(INTERRUPTED_SUMMARY, reason="summarization_failed")
                await op.retry_wait(INTERRUPTED_SUMMARY)
            elif at == "summary.retry_wait":
                wait = (int(op.state.get("notBefore", 0)) - now_ms()) / 1000
                await trio.sleep(max(0.0, wait))
                await op.ready_again()
            elif at == "summary.ready":
                summary = await self._summary_attempt(op, summarize)
                if summary:
                    return summary[0]
            else:
                msg = f"Operation {op.id} is at {at}, not a summary state"
                raise SessionFormatError(msg)

    async def _summary_attempt(
        self,
        op: StructuralOperation,
        summarize: Callable[[StreamFn, ResponseHook | None], Awaitable[_T]],
    ) -> list[_T]:
        """One attempt of a summary (``summary.effect_pending``): ``[its summary]``, or
        ``[]`` when it failed with a retryable error and waits for the next attempt
        (``summary.retry_wait``, Pi's)."""
        await op.effect_pending()
        responses: list[AssistantMessage] = []

        async def record(message: AssistantMessage) -> None:
            responses.append(message)
            await op.response(message)

        try:
            return [await summarize(self._recording_stream(op), record)]
        except (CompactionError, BranchSummaryError):
            last = responses[-1] if responses else None
            window = self._config.model.context_window
            if (
                last is None
                or last.stop_reason != "error"
                or not is_retryable(last, window)
                or op.attempt >= op.max_attempts
            ):
                raise
            await op.retry_wait(last.error_message or "Summary request failed")
            return []

    def _recording_stream(self, op: StructuralOperation) -> StreamFn:
        """The stream function of a summary attempt: each request is recorded
        (``request: {index, usageId}``) before it is sent."""
        index = 0
        inner = self._bridge.stream

        async def stream(model: Model, context: Any, options: StreamOptions) -> Any:
            nonlocal index
            await op.request(index)
            index += 1
            returned = inner(model, context, options)
            return returned if isinstance(returned, EventStream) else await returned

        return stream

    async def navigate_tree(
        self,
        target_id: str | None,
        *,
        summarize: bool = False,
        custom_instructions: str | None = None,
        label: str | None = None,
    ) -> NavigationEnd:
        """Move the session's tip to ``target_id`` (``None``: before the first entry),
        Pi's ``navigateTree``; the next prompt continues from there.

        With ``summarize=True`` the branch being left (from the common ancestor to the
        current tip) is summarised with Pi's branch-summary prompt (plus
        ``custom_instructions``) and the summary is written under the target as a
        ``branch_summary`` entry, which becomes the tip. ``label`` labels the target.
        With a writable session the navigation is an operation recorded as Pi's harness
        records it: a process killed mid-summary leaves it :attr:`interrupted`, and
        :meth:`resume` finishes it. Returns the :class:`NavigationEnd` event
        (``completed``, ``aborted`` by :meth:`abort`, or ``failed`` with the error).
        Unless it was aborted, a run then starts for the messages the durable queue
        holds, as after :meth:`compact`.

        Raises:
            AgentBusyError: a prompt, compaction or navigation is running.
            UsageError: no session; the target is the current tip; a label for the root;
                a summary with no entry to leave or to go to.
            SessionNotFoundError: no entry ``target_id`` in the session.
        """
        session = self._session
        if session is None:
            msg = "navigate_tree() needs a session: pass session= to Harness"
            raise UsageError(msg)
        if self._interrupted is not None and not self._busy:
            await self.resume()  # Pi's lane finishes its operation first
        source = session.leaf_id
        if target_id == source:
            msg = f"navigate_tree(): {target_id!r} is the current tip already; name another entry"
            raise UsageError(msg)
        if target_id is None and label is not None:
            msg = "navigate_tree(): the root (None) cannot take a label; pass label=None"
            raise UsageError(msg)
        if summarize and (source is None or target_id is None):
            msg = (
                "navigate_tree(summarize=True) needs entries on both sides: the session "
                "has no tip yet, or the target is the root (None)"
            )
            raise UsageError(msg)
        if target_id is not None:
            session.get_entry(target_id)  # raises SessionNotFoundError
        self._claim()
        try:
            op = await self._begin_navigation(target_id, summarize, custom_instructions, label)
            await self._bus.emit(NavigationStart(target_id=target_id, summarize=summarize))
            end = await self._run_navigation(op)
        finally:
            self._release()
        await self._continue_after_structural(end.status)
        return end

    async def _begin_navigation(
        self,
        target_id: str | None,
        summarize: bool,
        custom_instructions: str | None,
        label: str | None,
    ) -> StructuralOperation:
        """A navigation's first transaction (Pi's ``acceptNavigation``)."""
        session = self._session
        assert session is not None
        settings = self._ops.settings if self._ops is not None else {}
        intent: dict[str, Any] = {"kind": "navigation", "targetId": target_id}
        intent["summarize"] = summarize
        if label is not None:
            intent["label"] = label
        if custom_instructions is not None:
            intent["customInstructions"] = custom_instructions
        state: dict[str, Any]
        preparation = None
        if summarize:
            assert target_id is not None
            entries, _ = collect_entries_for_branch_summary(session, session.leaf_id, target_id)
            preparation = branch_preparation_json(prepare_branch_entries(entries))
            extra = {}
            if custom_instructions is not None:
                extra["customInstructions"] = custom_instructions
            boundary: dict[str, Any] = {"kind": "commit_navigation", "targetId": target_id}
            if label is not None:
                boundary["label"] = label
            task = {"taskId": new_id(), **extra, "boundary": boundary}
            state = {"at": "summary.deciding", "task": task}
        else:
            state = {"at": "navigation.ready_to_commit", "targetId": target_id}
            if label is not None:
                state["label"] = label
        return await StructuralOperation.begin(
            session,
            intent=intent,
            settings=settings,
            configuration=self._lane_configuration(),
            state=state,
            preparation=preparation,
        )

    async def _run_navigation(self, op: StructuralOperation) -> NavigationEnd:
        """Drive a navigation from its state to its end (the tip moved, a summary
        written); emits and returns the :class:`NavigationEnd`."""
        session = self._session
        assert session is not None
        source = op.source_tip_id
        end: NavigationEnd
        try:
            if op.at == "navigation.ready_to_commit":
                target = op.state.get("targetId")
                label = op.state.get("label")
                tip, writes = op.navigation_writes(target, label, None)
                await op.finish("completed", before=writes, tip_id=tip)
                end = NavigationEnd(status="completed", from_tip_id=source, tip_id=tip)
            else:
                end = await self._summarized_navigation(op)
        except Exception as exc:
            self._cancel_scope = None
            end = NavigationEnd(
                status="failed", from_tip_id=source, tip_id=source, error_message=str(exc)
            )
            if _open(session, op):
                with trio.CancelScope(shield=True):
                    await _finish_failed(op, exc)
        except BaseException:
            self._cancel_scope = None
            with trio.CancelScope(shield=True):
                if _open(session, op):
                    await op.finish("aborted")
                aborted = NavigationEnd(status="aborted", from_tip_id=source, tip_id=source)
                await self._bus.emit(aborted)
            raise
        await session.flush()
        self._agent.state.messages = list(session.build_context().messages)
        await self._bus.emit(end)
        return end

    async def _summarized_navigation(self, op: StructuralOperation) -> NavigationEnd:
        session = self._session
        assert session is not None
        source = op.source_tip_id
        boundary = op.task.get("boundary") or {}
        target = boundary.get("targetId")
        label = boundary.get("label")
        instructions = op.task.get("customInstructions")
        preparation = branch_preparation_from(op.preparation())

        async def summarize(stream_fn: StreamFn, hook: ResponseHook | None) -> Any:
            return await summarize_branch(
                preparation,
                stream_fn=stream_fn,
                model=self._config.model,
                custom_instructions=instructions,
                stream_options=self._agent.stream_options,
                on_response=hook,
            )

        result = None
        decision: BeforeNavigationResult | None = None
        try:
            with self._abort_scope() as scope:
                if op.at == "summary.deciding":
                    decision = await self.hooks.run_before_navigation(
                        BeforeNavigationEvent(
                            target_id=str(target),
                            preparation=preparation,
                            custom_instructions=instructions,
                            operation_id=op.id,
                        ),
                        self._handler_error,
                    )
                if decision is not None:
                    result = decision.summary
                else:
                    result = await self._structural_summary(op, summarize)
        except (BranchSummaryError, CompactionError, SessionFormatError, HookError) as exc:
            self._cancel_scope = None
            if _open(session, op):
                code = _failure_code(exc)
                await op.finish("failed", error={"code": code, "message": str(exc)})
            return NavigationEnd(
                status="failed", from_tip_id=source, tip_id=source, error_message=str(exc)
            )
        self._cancel_scope = None
        if decision is not None and decision.decline and not scope.cancelled_caught:
            await op.finish("declined")
            return NavigationEnd(status="declined", from_tip_id=source, tip_id=source)
        if result is None or scope.cancelled_caught:
            await op.finish("aborted")
            return NavigationEnd(status="aborted", from_tip_id=source, tip_id=source)
        details = {"readFiles": result.read_files, "modifiedFiles": result.modified_files}
        summary = (result.summary, details, result.usage)
        tip, writes = op.navigation_writes(target, label, summary, from_hook=decision is not None)
        await op.finish("completed", before=writes, tip_id=tip)
        return NavigationEnd(
            status="completed",
            from_tip_id=source,
            tip_id=tip,
            entry_id=tip,
            summary=result.summary,
        )

    async def _recover_structural(self, operation: Operation) -> None:
        """Finish a compaction or navigation a killed process left (Pi's drive on a
        restored lane), from the state its records name."""
        session = self._session
        assert session is not None
        self._interrupted = None
        op = StructuralOperation.adopt(session, operation)
        await self._bus.emit(RecoveryStart(operation_id=operation.id, at=operation.at))
        if operation.intent == "navigation":
            await self._run_navigation(op)
        else:
            await self._bus.emit(CompactionStart(reason="manual"))
            try:
                preparation = compaction_preparation_from(op.preparation())
                end = await self._run_compaction(
                    "manual", preparation, op, op.task.get("customInstructions"), False
                )
            except SessionFormatError as exc:
                error = {"code": "invalid_preparation", "message": str(exc)}
                await op.finish("failed", error=error)
                end = CompactionEnd(reason="manual", status="failed", error_message=str(exc))
            except BaseException:
                with trio.CancelScope(shield=True):
                    if _open(session, op):
                        await op.finish("aborted")
                    await self._bus.emit(CompactionEnd(reason="manual", status="aborted"))
                raise
            await self._bus.emit(end)
        await self._bus.emit(RecoveryEnd(operation_id=operation.id, resumed=False))

    async def _recover_run_compaction(self, operation: Operation) -> Mapping[str, Any]:
        """Finish the compaction a killed run was in (Pi's structural drive on the
        restored run), its summary asked again from the recorded preparation; returns
        the run's state after it (at the checkpoint its task resumes)."""
        session, ops = self._session, self._ops
        assert session is not None
        assert ops is not None
        op = StructuralOperation.adopt(session, operation)
        reason: CompactionReason = (
            "overflow" if op.task.get("reason") == "overflow" else "threshold"
        )
        await self._bus.emit(CompactionStart(reason=reason))
        try:
            preparation = compaction_preparation_from(op.preparation())
            end = await self._run_compaction(reason, preparation, op, None, False)
        except SessionFormatError as exc:
            await op.finish("failed")
            end = CompactionEnd(reason=reason, status="failed", error_message=str(exc))
        self._moved(op)
        await self._bus.emit(end)
        return ops.state


def _interrupted(session: Session) -> Operation | None:
    """The operation the session's lane was in (a run, a compaction, a navigation), if
    its records are whole."""
    try:
        return restore_lane(session, session.lane_name).operation
    except PitrioError:
        return None


async def _finish_failed(op: StructuralOperation, exc: Exception) -> None:
    """End ``op`` as failed with ``exc`` as its error; a failure to write that is left to
    the next restore (the operation stays interrupted)."""
    error = {"code": "harness_fault", "message": str(exc) or type(exc).__name__}
    try:
        await op.finish("failed", error=error)
    except Exception:
        return


def _failure_code(exc: Exception) -> str:
    """The ``error.code`` of an operation that failed with ``exc`` (Pi's codes; a
    failing hook is ``hook_failed``)."""
    if isinstance(exc, HookError):
        return "hook_failed"
    return str(getattr(exc, "reason", "summarization_failed"))


def _open(session: Session, op: StructuralOperation) -> bool:
    """Whether ``op`` is still the lane's current operation (not yet finished; a
    run's compaction: still summarising)."""
    state = session.get_value(LANE_STATE, session.lane_name)
    current = isinstance(state, Mapping) and state.get("currentOperationId") == op.id
    return current and (not op.in_run or op.at.startswith("summary."))


def _take(session: Session | None, writes: list[Any], entry_id: str) -> list[Any]:
    """``writes`` taking ``entry_id`` out of the durable queue in the same transaction:
    its payload deleted, and the lane state (the last one written) without it."""
    assert session is not None
    taken = _take_writes(session, [entry_id])
    lane = [w for w in writes if w.get("namespace") == LANE_STATE and w.get("op") == "set"]
    if not lane:
        return [*writes, *taken]
    value = dict(lane[-1]["value"])
    value["inbox"] = [i for i in value.get("inbox") or () if i.get("entryId") != entry_id]
    rest = [w for w in writes if w not in lane]
    return [*rest, *taken[:-1], {**lane[-1], "value": value}]


@final
@attrs.frozen(kw_only=True)
class WatchSnapshot:
    """What :meth:`Harness.watch` saw when it started.

    Attributes:
        messages: the context.
        queued: the durable queue.
        operation: the running run's operation, or the interrupted one, or ``None``.
        busy: whether a prompt or compaction was running.
    """

    messages: tuple[AgentMessage, ...]
    queued: tuple[QueuedMessage, ...]
    operation: Operation | None
    busy: bool


@final
class Watcher:
    """A watch on a harness (:meth:`Harness.watch`): its ``snapshot``
    (:class:`WatchSnapshot`), then its events by ``async for``."""

    __slots__ = ("_receive", "snapshot")

    def __init__(self, snapshot: WatchSnapshot, receive: trio.MemoryReceiveChannel[Any]) -> None:
        self.snapshot = snapshot
        self._receive = receive

    def __aiter__(self) -> Watcher:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise StopAsyncIteration from None


def _branch(session: Session) -> list[Any]:
    # From the branch's last compaction down: all prepare_compaction() reads (a long
    # session's older entries stay unread).
    return session._state.context_path(session.leaf_id)


def _check_model(model: object) -> None:
    if not isinstance(model, Model):
        msg = f"model must be a pitrio.Model; got {model!r}"
        raise ArgumentTypeError(msg)


def _normalize_input(
    input: str | AgentMessage | Sequence[AgentMessage], images: Sequence[ImageContent]
) -> list[AgentMessage]:
    if isinstance(input, str):
        return [UserMessage(content=(TextContent(text=input), *images), timestamp=now_ms())]
    messages = list(input) if isinstance(input, list | tuple) else [input]
    for message in messages:
        if not hasattr(message, "role"):
            msg = f"expected a message (an object with a 'role') or a string; got {message!r}"
            raise ArgumentTypeError(msg)
    return messages
