"""What the agent loop takes and shares: its context and configuration, the ``emit``
handle, and the helpers the loop and the tool batch both use.

This module sits below :mod:`pitrio._loop` and :mod:`pitrio._tool_batch`: both import it,
it imports neither (no import cycle).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Sequence
from types import CoroutineType
from typing import Any, Final, Literal, TypeAlias, final

import attrs
import trio

from ._events import AgentEvent
from ._messages import (
    LLM_ROLES,
    AgentMessage,
    AssistantMessage,
    LlmMessage,
    ToolResultMessage,
)
from ._model import Model, StreamOptions
from ._signal import AbortSignal
from ._tools import AfterToolCallContext, AgentTool, BeforeToolCallContext

__all__ = [
    "AgentContext",
    "Emit",
    "EmitFn",
    "LoopConfig",
    "MaybeAwaitable",
    "NextTurn",
    "TurnContext",
    "default_convert_to_llm",
    "error_text",
    "is_awaitable",
    "js_microtask_hop",
    "maybe_await",
]

EmitFn: TypeAlias = Callable[[AgentEvent], "Awaitable[None] | None"]
"""What the loop reports events to: a plain or an async function. A plain function may
return an awaitable for work that can wait (the Agent's listeners do this)."""

MaybeAwaitable: TypeAlias = Any
"""What a hook returns: a value, or an awaitable of it (hooks may be plain or async)."""


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


js_microtask_hop: Final[Callable[[], Awaitable[None]]] = trio.lowlevel.checkpoint
"""``await js_microtask_hop()``: let the tasks that JavaScript would run in this
microtask gap run first.

Pi's event order sometimes depends on how many promise hops a chain takes: two tool
calls that finish together proceed in lockstep (each ``await`` is a microtask, so every
``execute()`` starts before any call ends, and the after-hooks of simultaneous calls
come before their ends); ``Promise.all`` over a tool's update emissions takes one more
tick; ``agentLoop``'s stream consumer runs in the microtask gaps of the loop's awaits.
Trio has no microtasks, so pitrio reproduces each such hop with one scheduling step
(a checkpoint; the name is an alias, so a hop costs no more than the checkpoint), here
and only here. Every call site says which of Pi's hops it is.
"""


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


def is_awaitable(value: object) -> bool:
    """``inspect.isawaitable()``, cheaper for the common answers (a coroutine, or a
    plain value)."""
    if type(value) is CoroutineType:
        return True
    return value is not None and hasattr(type(value), "__await__")


async def maybe_await(value: Any) -> Any:
    """``value``, awaited if it is awaitable (what a plain-or-async hook returned)."""
    if is_awaitable(value):
        return await value
    return value


def error_text(exc: BaseException) -> str:
    """Pi's ``error instanceof Error ? error.message : String(error)``: the message,
    even when it is empty."""
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return error_text(exc.exceptions[0])
    return str(exc)
