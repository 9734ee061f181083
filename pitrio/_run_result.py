"""One-call runs: :class:`RunResult` (what ``Agent.run()`` returns) and :class:`UsageLimits`.

A limit is enforced the way an abort is: when the run goes over one, its abort signal is
set, which cancels the cancel scope around what the run is doing (the provider stream,
the tool calls) and keeps it from starting a new request; the run then settles as
every aborted run does (Pi's settlement: the partial message kept with
``stop_reason="aborted"``, ``turn_end`` and ``agent_end`` emitted, nothing left
running). The wall-time limit is a Trio deadline on the run, which the agent turns into
the same abort. The result names the limit (``exceeded_limit``, ``error_message``); no
exception leaves the run.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar, final

import attrs

from ._errors import UsageError
from ._events import AgentEvent, MessageEnd, MessageStart, MessageUpdate, TurnStart
from ._messages import AgentMessage, AssistantMessage, Cost, StopReason, Usage

if TYPE_CHECKING:
    from ._signal import AbortSignal

__all__ = ["RunResult", "UsageLimits"]

OutputT = TypeVar("OutputT")


def _check_limit(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        msg = f"UsageLimits.{attribute.name} must be a number or None; got {value!r}"
        raise UsageError(msg)
    if value < 0 or math.isnan(value):
        msg = f"UsageLimits.{attribute.name} must be at least 0; got {value!r}"
        raise UsageError(msg)


@final
@attrs.frozen(kw_only=True)
class UsageLimits:
    """Caps on what one ``Agent.run()`` may spend (pydantic-ai's ``UsageLimits``).

    Every cap is optional (``None``: no cap). Tokens and cost are the sums over the
    run's assistant messages, as providers report them (checked at every streamed
    update that carries usage and at each message's end).

    Attributes:
        max_requests: model requests the run may make; the next one is not sent.
        max_input_tokens: prompt tokens, cached or not (``input + cache_read +
            cache_write``).
        max_output_tokens: output tokens.
        max_total_tokens: ``total_tokens``.
        max_cost: dollars (``usage.cost.total``).
        max_seconds: wall time of the run, in seconds (Trio's clock).
    """

    max_requests: int | None = attrs.field(default=None, validator=_check_limit)
    max_input_tokens: int | None = attrs.field(default=None, validator=_check_limit)
    max_output_tokens: int | None = attrs.field(default=None, validator=_check_limit)
    max_total_tokens: int | None = attrs.field(default=None, validator=_check_limit)
    max_cost: float | None = attrs.field(default=None, validator=_check_limit)
    max_seconds: float | None = attrs.field(default=None, validator=_check_limit)


@final
@attrs.frozen(kw_only=True)
class RunResult(Generic[OutputT]):
    """What ``Agent.run()`` returns once the run has settled.

    Attributes:
        output: the final answer: the text of the run's last assistant message (or,
            with ``output_type=``, the typed value the model gave).
        messages: the messages the run added to the transcript, the prompt first.
        usage: token counts and cost summed over the run's assistant messages.
        requests: how many model requests the run made.
        stop_reason: ``stop_reason`` of the last assistant message: ``"stop"`` for a
            finished answer, ``"aborted"`` when an abort or a usage limit cut the run
            short, ``"error"`` when it failed.
        error_message: why the run did not finish (the limit's text when a limit ended
            it), else ``None``.
        exceeded_limit: the :class:`UsageLimits` field that ended the run (such as
            ``"max_requests"``), else ``None``.
    """

    output: OutputT
    messages: tuple[AgentMessage, ...]
    usage: Usage
    requests: int
    stop_reason: StopReason
    error_message: str | None = None
    exceeded_limit: str | None = None


_NO_LIMITS: Final = UsageLimits()


@final
class RunObserver:
    """A listener for one run: collects its messages, sums usage, enforces limits."""

    __slots__ = (
        "error_message",
        "exceeded_limit",
        "limits",
        "messages",
        "requests",
        "usage",
        "watch_usage",
    )

    def __init__(self, limits: UsageLimits | None) -> None:
        self.limits = limits if limits is not None else _NO_LIMITS
        lim = self.limits
        self.watch_usage = any(
            v is not None
            for v in (
                lim.max_input_tokens,
                lim.max_output_tokens,
                lim.max_total_tokens,
                lim.max_cost,
            )
        )
        self.messages: list[AgentMessage] = []
        self.requests = 0
        self.usage = _Sum()
        self.exceeded_limit: str | None = None
        self.error_message: str | None = None

    def exceed(self, limit: str, text: str, signal: AbortSignal | None) -> None:
        if self.exceeded_limit is not None:
            return
        self.exceeded_limit = limit
        self.error_message = f"Usage limit exceeded: {text}"
        if signal is not None:
            signal.abort(self.error_message)

    def __call__(self, event: AgentEvent, signal: AbortSignal) -> None:
        if type(event) is MessageUpdate:
            if self.watch_usage and type(event.message) is AssistantMessage:
                self._check_usage(self.usage.plus(event.message.usage), signal)
        elif type(event) is MessageStart:
            # A request started after the abort is answered without being sent.
            if type(event.message) is AssistantMessage and not signal.aborted:
                self.requests += 1
        elif type(event) is MessageEnd:
            message = event.message
            self.messages.append(message)
            if type(message) is AssistantMessage:
                self.usage = self.usage.plus(message.usage)
                if self.watch_usage:
                    self._check_usage(self.usage, signal)
        elif type(event) is TurnStart:
            cap = self.limits.max_requests
            if cap is not None and self.requests >= cap:
                self.exceed(
                    "max_requests",
                    f"the next request would exceed max_requests={cap}",
                    signal,
                )

    def _check_usage(self, total: _Sum, signal: AbortSignal) -> None:
        lim = self.limits
        for name, used, cap in (
            ("max_input_tokens", total.input + total.cache_read + total.cache_write,
             lim.max_input_tokens),
            ("max_output_tokens", total.output, lim.max_output_tokens),
            ("max_total_tokens", total.total_tokens, lim.max_total_tokens),
        ):  # fmt: skip
            if cap is not None and used > cap:
                self.exceed(name, f"{used} tokens > {name}={cap}", signal)
                return
        if lim.max_cost is not None and total.cost > lim.max_cost:
            self.exceed("max_cost", f"${total.cost:.6g} > max_cost={lim.max_cost}", signal)

    def result(self, output: OutputT) -> RunResult[OutputT]:
        last = next(
            (m for m in reversed(self.messages) if type(m) is AssistantMessage), None
        )
        stop_reason: StopReason = last.stop_reason if last is not None else "stop"
        error = self.error_message
        if error is None and last is not None and last.stop_reason in ("error", "aborted"):
            error = last.error_message
        return RunResult(
            output=output,
            messages=tuple(self.messages),
            usage=self.usage.as_usage(),
            requests=self.requests,
            stop_reason=stop_reason,
            error_message=error,
            exceeded_limit=self.exceeded_limit,
        )


@final
@attrs.frozen
class _Sum:
    """Running totals of :class:`Usage` (immutable: a partial adds to a copy)."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    total_tokens: int = 0
    cost_input: float = 0
    cost_output: float = 0
    cost_cache_read: float = 0
    cost_cache_write: float = 0
    cost: float = 0
    cache_write_1h: int | None = None
    reasoning: int | None = None

    def plus(self, u: Usage) -> _Sum:
        c = u.cost
        return _Sum(
            self.input + u.input,
            self.output + u.output,
            self.cache_read + u.cache_read,
            self.cache_write + u.cache_write,
            self.total_tokens + u.total_tokens,
            self.cost_input + c.input,
            self.cost_output + c.output,
            self.cost_cache_read + c.cache_read,
            self.cost_cache_write + c.cache_write,
            self.cost + c.total,
            _add(self.cache_write_1h, u.cache_write_1h),
            _add(self.reasoning, u.reasoning),
        )

    def as_usage(self) -> Usage:
        return Usage(
            input=self.input,
            output=self.output,
            cache_read=self.cache_read,
            cache_write=self.cache_write,
            total_tokens=self.total_tokens,
            cost=Cost(
                input=self.cost_input,
                output=self.cost_output,
                cache_read=self.cost_cache_read,
                cache_write=self.cost_cache_write,
                total=self.cost,
            ),
            cache_write_1h=self.cache_write_1h,
            reasoning=self.reasoning,
        )


def _add(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else a + b
