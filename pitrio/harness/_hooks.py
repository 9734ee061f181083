"""Hooks: functions the harness calls to let an application change what happens.

Register a handler with :meth:`Hooks.on` (``harness.hooks.on("tool_call", handler)``);
it returns a function that removes it. Handlers may be plain or async functions and
receive one event value; returning ``None`` changes nothing. Handlers of one hook run in
registration order, each seeing what the earlier ones changed:

========================  ==================================  =================================
hook                      event                               a handler may return
========================  ==================================  =================================
``before_agent_start``    :class:`BeforeAgentStartEvent`      :class:`BeforeAgentStartResult`
                                                              (add messages, set the system
                                                              prompt of this prompt's run)
``context``               :class:`ContextEvent`               a new message list (replaces
                                                              the context of one request)
``tool_call``             :class:`ToolCallEvent`              :class:`ToolCallResult` (block
                                                              the call with a reason); the
                                                              first block wins
``tool_result``           :class:`ToolResultEvent`            :class:`ToolResultPatch`
                                                              (replace fields of the result)
``before_provider_        :class:`ProviderRequestEvent`       :class:`ProviderRequestPatch`
request``                                                     (headers, timeout, retries)
``before_provider_        :class:`ProviderPayloadEvent`       the body to send instead
payload``
``after_provider_         :class:`ProviderResponseEvent`      nothing (observe status and
response``                                                    headers)
``before_compaction``     :class:`BeforeCompactionEvent`      :class:`BeforeCompactionResult`
                                                              (decline it, or give the
                                                              compaction); the first wins
``before_navigation``     :class:`BeforeNavigationEvent`      :class:`BeforeNavigationResult`
                                                              (decline it, or give the
                                                              summary); the first wins
========================  ==================================  =================================

A handler that raises ends the run as an error run (its text names the hook); the
harness is idle again afterwards. For the tool hooks the failing call's result is the
error, and the run ends with the error once the turn is over. A failing
``before_compaction`` / ``before_navigation`` handler ends that operation as failed (no
summary is asked of the model).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, TypeAlias, TypeVar, final, overload

import attrs

from pitrio import (
    AgentMessage,
    ArgumentTypeError,
    HarnessError,
    ImageContent,
    Model,
    TextContent,
    UsageError,
)

from ._branch_summary import BranchPreparation, BranchSummaryResult
from ._compaction import CompactionPreparation
from ._events import CompactionReason
from ._summary import CompactionResult

JSONValue: TypeAlias = Any
UserContent: TypeAlias = TextContent | ImageContent

__all__ = [
    "BeforeAgentStartEvent",
    "BeforeAgentStartResult",
    "BeforeCompactionEvent",
    "BeforeCompactionResult",
    "BeforeNavigationEvent",
    "BeforeNavigationResult",
    "ContextEvent",
    "HookError",
    "HookName",
    "Hooks",
    "ProviderPayloadEvent",
    "ProviderRequestEvent",
    "ProviderRequestPatch",
    "ProviderResponseEvent",
    "ToolCallEvent",
    "ToolCallResult",
    "ToolResultEvent",
    "ToolResultPatch",
]

HookName: TypeAlias = Literal[
    "before_agent_start",
    "context",
    "tool_call",
    "tool_result",
    "before_provider_request",
    "before_provider_payload",
    "after_provider_response",
    "before_compaction",
    "before_navigation",
]
HOOK_NAMES: tuple[HookName, ...] = (
    "before_agent_start",
    "context",
    "tool_call",
    "tool_result",
    "before_provider_request",
    "before_provider_payload",
    "after_provider_response",
    "before_compaction",
    "before_navigation",
)


class HookError(HarnessError):
    """A hook handler raised; the run ends with this error's text."""

    def __init__(self, hook: HookName, cause: BaseException) -> None:
        super().__init__(f"{hook} hook failed: {cause}")
        self.hook = hook
        self.cause = cause


@final
@attrs.frozen(kw_only=True)
class BeforeAgentStartEvent:
    """A prompt is about to run: its messages and the system prompt it would get."""

    prompt: tuple[AgentMessage, ...]
    system_prompt: str


@final
@attrs.frozen(kw_only=True)
class BeforeAgentStartResult:
    """Messages to add after the prompt, and a system prompt for this prompt's run."""

    messages: Sequence[AgentMessage] = ()
    system_prompt: str | None = None


@final
@attrs.frozen(kw_only=True)
class ContextEvent:
    """The messages about to be converted for a model request."""

    messages: tuple[AgentMessage, ...]


@final
@attrs.frozen(kw_only=True)
class ToolCallEvent:
    """A tool call about to run (its arguments already validated)."""

    tool_call_id: str
    tool_name: str
    args: Any


@final
@attrs.frozen(kw_only=True)
class ToolCallResult:
    """``block=True`` refuses the call; the model sees ``reason`` as the tool's error."""

    block: bool = False
    reason: str | None = None


@final
@attrs.frozen(kw_only=True)
class ToolResultEvent:
    """A tool call's result, before it becomes a message."""

    tool_call_id: str
    tool_name: str
    args: Any
    content: tuple[UserContent, ...]
    details: JSONValue
    is_error: bool


@final
@attrs.frozen(kw_only=True)
class ToolResultPatch:
    """Fields of the result to replace; ``None`` keeps a field."""

    content: tuple[UserContent, ...] | None = None
    details: JSONValue = None
    is_error: bool | None = None
    terminate: bool | None = None


@final
@attrs.frozen(kw_only=True)
class ProviderRequestEvent:
    """A model request about to be made, with its transport options.

    Attributes:
        model: the model requested.
        headers: extra request headers.
        timeout: the request timeout in seconds (``None``: the provider's default).
        max_retries: the provider's own retries of a failed HTTP request.
    """

    model: Model
    headers: Mapping[str, str]
    timeout: float | None
    max_retries: int | None


@final
@attrs.frozen(kw_only=True)
class ProviderRequestPatch:
    """Changes to a request's options: ``headers`` maps a name to a value, or to
    ``None`` to remove it; ``timeout`` (seconds) and ``max_retries`` replace."""

    headers: Mapping[str, str | None] | None = None
    timeout: float | None = None
    max_retries: int | None = None


@final
@attrs.frozen(kw_only=True)
class ProviderPayloadEvent:
    """The request body (the provider's JSON) about to be sent."""

    model: Model
    payload: JSONValue


@final
@attrs.frozen(kw_only=True)
class ProviderResponseEvent:
    """The provider answered: the HTTP status and headers (before the body streams)."""

    model: Model
    status: int
    headers: Mapping[str, str]


@final
@attrs.frozen(kw_only=True)
class BeforeCompactionEvent:
    """A compaction is about to ask the model for its summary (Pi's ``before_compaction``).

    Attributes:
        reason: ``manual`` (:meth:`~pitrio.harness.Harness.compact`), ``threshold`` or
            ``overflow`` (inside a run).
        preparation: what the summary would replace and what it keeps.
        custom_instructions: the caller's instructions for the summary, if any.
        operation_id: the compaction's operation (``pi.op.meta``), ``None`` when it is
            not recorded as one; a restarted process that finishes the operation asks the
            hook again with the same id.
    """

    reason: CompactionReason
    preparation: CompactionPreparation
    custom_instructions: str | None = None
    operation_id: str | None = None


@final
@attrs.frozen(kw_only=True)
class BeforeCompactionResult:
    """``decline=True`` ends the compaction as ``declined`` (nothing written but the
    operation's end); ``compaction`` is written as the compaction entry (``fromHook``)
    instead of asking the model. Not both.

    Raises:
        UsageError: both are given.
    """

    decline: bool = False
    compaction: CompactionResult | None = None

    def __attrs_post_init__(self) -> None:
        if self.decline and self.compaction is not None:
            msg = "BeforeCompactionResult takes decline=True or compaction=..., not both"
            raise UsageError(msg)


@final
@attrs.frozen(kw_only=True)
class BeforeNavigationEvent:
    """A navigation is about to ask the model to summarise the branch it leaves (Pi's
    ``before_navigation``; a navigation without ``summarize=True`` does not ask).

    Attributes:
        target_id: the entry the tip moves to.
        preparation: the messages of the branch left that the summary would cover.
        custom_instructions: the caller's instructions for the summary, if any.
        operation_id: the navigation's operation (``pi.op.meta``).
    """

    target_id: str
    preparation: BranchPreparation
    custom_instructions: str | None = None
    operation_id: str | None = None


@final
@attrs.frozen(kw_only=True)
class BeforeNavigationResult:
    """``decline=True`` ends the navigation as ``declined`` (the tip stays);
    ``summary`` is written as the ``branch_summary`` entry (``fromHook``) under the
    target instead of asking the model. Not both.

    Raises:
        UsageError: both are given.
    """

    decline: bool = False
    summary: BranchSummaryResult | None = None

    def __attrs_post_init__(self) -> None:
        if self.decline and self.summary is not None:
            msg = "BeforeNavigationResult takes decline=True or summary=..., not both"
            raise UsageError(msg)


_E = TypeVar("_E")
_R = TypeVar("_R")
Handler: TypeAlias = Callable[[_E], "_R | Awaitable[_R | None] | None"]
# Where a structural hook's runner reports a handler it skipped (the hook, the error).
ErrorReport: TypeAlias = Callable[[HookName, Exception], Awaitable[None]]


@final
class Hooks:
    """The hook registry of one harness (``harness.hooks``)."""

    __slots__ = ("_handlers",)

    def __init__(self) -> None:
        self._handlers: dict[str, list[Callable[[Any], Any]]] = {}

    @overload
    def on(
        self,
        name: Literal["before_agent_start"],
        handler: Handler[BeforeAgentStartEvent, BeforeAgentStartResult],
    ) -> Callable[[], None]: ...
    @overload
    def on(
        self, name: Literal["context"], handler: Handler[ContextEvent, Sequence[AgentMessage]]
    ) -> Callable[[], None]: ...
    @overload
    def on(
        self, name: Literal["tool_call"], handler: Handler[ToolCallEvent, ToolCallResult]
    ) -> Callable[[], None]: ...
    @overload
    def on(
        self, name: Literal["tool_result"], handler: Handler[ToolResultEvent, ToolResultPatch]
    ) -> Callable[[], None]: ...
    @overload
    def on(
        self,
        name: Literal["before_provider_request"],
        handler: Handler[ProviderRequestEvent, ProviderRequestPatch],
    ) -> Callable[[], None]: ...
    @overload
    def on(
        self,
        name: Literal["before_provider_payload"],
        handler: Handler[ProviderPayloadEvent, JSONValue],
    ) -> Callable[[], None]: ...
    @overload
    def on(
        self,
        name: Literal["after_provider_response"],
        handler: Handler[ProviderResponseEvent, None],
    ) -> Callable[[], None]: ...
    @overload
    def on(
        self,
        name: Literal["before_compaction"],
        handler: Handler[BeforeCompactionEvent, BeforeCompactionResult],
    ) -> Callable[[], None]: ...
    @overload
    def on(
        self,
        name: Literal["before_navigation"],
        handler: Handler[BeforeNavigationEvent, BeforeNavigationResult],
    ) -> Callable[[], None]: ...
    def on(self, name: HookName, handler: Callable[[Any], Any]) -> Callable[[], None]:
        """Register ``handler`` for the hook ``name``; returns a function removing it.

        Raises:
            UsageError: ``name`` is not a hook.
            ArgumentTypeError: ``handler`` is not callable.
        """
        if name not in HOOK_NAMES:
            msg = f"unknown hook {name!r}; hooks are: {', '.join(HOOK_NAMES)}"
            raise UsageError(msg)
        _check_callable(name, handler)
        self._handlers[name] = [*self._handlers.get(name, ()), handler]

        def remove() -> None:
            current = self._handlers.get(name, [])
            self._handlers[name] = [h for h in current if h is not handler]

        return remove

    def has(self, name: HookName) -> bool:
        """Whether any handler is registered for ``name``."""
        return bool(self._handlers.get(name))

    async def _call(self, name: HookName, handler: Callable[[Any], Any], event: Any) -> Any:
        try:
            result = handler(event)
            if result is not None and hasattr(type(result), "__await__"):
                result = await result
        except Exception as exc:
            raise HookError(name, exc) from exc
        return result

    # -- runners: each applies the handlers in order ---------------------------------

    async def run_before_agent_start(
        self, prompt: tuple[AgentMessage, ...], system_prompt: str
    ) -> tuple[tuple[AgentMessage, ...], str]:
        """Returns the added messages and the system prompt."""
        added: list[AgentMessage] = []
        for handler in self._handlers.get("before_agent_start", ()):
            event = BeforeAgentStartEvent(prompt=(*prompt, *added), system_prompt=system_prompt)
            result = await self._call("before_agent_start", handler, event)
            if result is None:
                continue
            if not isinstance(result, BeforeAgentStartResult):
                error = _bad_result("before_agent_start", result, "BeforeAgentStartResult")
                raise error
            added.extend(result.messages)
            if result.system_prompt is not None:
                system_prompt = result.system_prompt
        return tuple(added), system_prompt

    async def run_context(self, messages: list[AgentMessage]) -> list[AgentMessage]:
        for handler in self._handlers.get("context", ()):
            result = await self._call("context", handler, ContextEvent(messages=tuple(messages)))
            if result is None:
                continue
            if isinstance(result, str | bytes) or not isinstance(result, Sequence):
                error = _bad_result("context", result, "a list of messages")
                raise error
            messages = list(result)
        return messages

    async def run_tool_call(self, event: ToolCallEvent) -> ToolCallResult | None:
        for handler in self._handlers.get("tool_call", ()):
            result = await self._call("tool_call", handler, event)
            if result is None:
                continue
            if not isinstance(result, ToolCallResult):
                error = _bad_result("tool_call", result, "ToolCallResult")
                raise error
            if result.block:
                return result
        return None

    async def run_tool_result(self, event: ToolResultEvent) -> ToolResultPatch | None:
        merged: ToolResultPatch | None = None
        for handler in self._handlers.get("tool_result", ()):
            result = await self._call("tool_result", handler, event)
            if result is None:
                continue
            if not isinstance(result, ToolResultPatch):
                error = _bad_result("tool_result", result, "ToolResultPatch")
                raise error
            event = attrs.evolve(
                event,
                content=event.content if result.content is None else result.content,
                details=event.details if result.details is None else result.details,
                is_error=event.is_error if result.is_error is None else result.is_error,
            )
            merged = ToolResultPatch(
                content=result.content if result.content is not None else _get(merged, "content"),
                details=result.details if result.details is not None else _get(merged, "details"),
                is_error=(
                    result.is_error if result.is_error is not None else _get(merged, "is_error")
                ),
                terminate=(
                    result.terminate if result.terminate is not None else _get(merged, "terminate")
                ),
            )
        return merged

    async def run_before_provider_request(
        self, event: ProviderRequestEvent
    ) -> ProviderRequestEvent:
        """Returns the request options after every patch."""
        for handler in self._handlers.get("before_provider_request", ()):
            result = await self._call("before_provider_request", handler, event)
            if result is None:
                continue
            if not isinstance(result, ProviderRequestPatch):
                error = _bad_result("before_provider_request", result, "ProviderRequestPatch")
                raise error
            headers = dict(event.headers)
            for key, value in (result.headers or {}).items():
                if value is None:
                    headers.pop(key, None)
                else:
                    headers[key] = value
            event = attrs.evolve(
                event,
                headers=headers,
                timeout=event.timeout if result.timeout is None else result.timeout,
                max_retries=event.max_retries if result.max_retries is None else result.max_retries,
            )
        return event

    async def run_before_provider_payload(self, model: Model, payload: JSONValue) -> JSONValue:
        for handler in self._handlers.get("before_provider_payload", ()):
            event = ProviderPayloadEvent(model=model, payload=payload)
            result = await self._call("before_provider_payload", handler, event)
            if result is not None:
                payload = result
        return payload

    async def run_after_provider_response(self, event: ProviderResponseEvent) -> None:
        for handler in self._handlers.get("after_provider_response", ()):
            await self._call("after_provider_response", handler, event)

    async def run_before_compaction(
        self, event: BeforeCompactionEvent, on_error: ErrorReport | None = None
    ) -> BeforeCompactionResult | None:
        """The first handler's result that declines or gives a compaction (Pi's
        ``firstStructural``); ``None``: ask the model. With ``on_error``, a handler that
        raises or returns the wrong type is reported to it and skipped (Pi's
        ``handler_error``); without, that is a :class:`HookError`."""
        for handler in self._handlers.get("before_compaction", ()):
            result = await self._structural("before_compaction", handler, event, on_error)
            if result is None:
                continue
            if not isinstance(result, BeforeCompactionResult):
                error = _bad_result("before_compaction", result, "BeforeCompactionResult")
                if on_error is None:
                    raise error
                await on_error("before_compaction", error)
                continue
            if result.decline or result.compaction is not None:
                return result
        return None

    async def run_before_navigation(
        self, event: BeforeNavigationEvent, on_error: ErrorReport | None = None
    ) -> BeforeNavigationResult | None:
        """The first handler's result that declines or gives a summary; ``None``: ask
        the model (``on_error`` as in :meth:`run_before_compaction`)."""
        for handler in self._handlers.get("before_navigation", ()):
            result = await self._structural("before_navigation", handler, event, on_error)
            if result is None:
                continue
            if not isinstance(result, BeforeNavigationResult):
                error = _bad_result("before_navigation", result, "BeforeNavigationResult")
                if on_error is None:
                    raise error
                await on_error("before_navigation", error)
                continue
            if result.decline or result.summary is not None:
                return result
        return None

    async def _structural(
        self,
        name: HookName,
        handler: Callable[[Any], Any],
        event: Any,
        on_error: ErrorReport | None,
    ) -> Any:
        """A structural handler's result; one that raises is reported to ``on_error``
        and skipped (``None``), as Pi's ``firstStructural`` skips it (without
        ``on_error``: :class:`HookError`)."""
        try:
            return await self._call(name, handler, event)
        except HookError as exc:
            if on_error is None:
                raise
            await on_error(name, exc)
            return None


def _check_callable(name: str, handler: object) -> None:
    if not callable(handler):
        msg = f"a {name} hook handler must be callable; got {handler!r}"
        raise ArgumentTypeError(msg)


def _get(patch: ToolResultPatch | None, field: str) -> Any:
    return None if patch is None else getattr(patch, field)


def _bad_result(name: HookName, result: object, expected: str) -> HookError:
    cause = TypeError(f"a {name} handler must return {expected} or None; got {result!r}")
    return HookError(name, cause)
