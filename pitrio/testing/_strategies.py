"""Hypothesis strategies for testing code built on pitrio (needs ``pitrio[testing]``).

Two kinds, for the two things an application built on pitrio usually tests:

* **Scripts for a scripted model**, to run *your* agent (your tools, hooks and listeners)
  on many model behaviours: :func:`scripted_responses` draws one model answer,
  :func:`scripted_runs` a whole run's worth (tool-call turns, then an answer that ends
  the run). Give the list to :class:`~pitrio.testing.ScriptedModel`.
* **Event traces**, to test what *consumes* agent events (a UI, a log, a reducer of
  state) without running an agent: :func:`agent_event_traces` draws every event of one
  run in an order pitrio's loop produces (:func:`~pitrio.testing.check_trace` holds),
  :func:`event_stream_prefixes` what a listener has seen so far while a run is going on.

Every strategy shrinks towards short, plain runs: fewer turns, fewer tool calls, no
chunking, no delays.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeAlias

try:
    from hypothesis import strategies as st
except ImportError as exc:  # pragma: no cover  # hypothesis is in the test environment
    msg = (
        "pitrio.testing's Hypothesis strategies need Hypothesis; install it with "
        "pip install 'pitrio[testing]' (or pip install hypothesis)"
    )
    raise ImportError(msg) from exc

from .._errors import ArgumentTypeError, UsageError
from .._events import (
    AgentEnd,
    AgentEvent,
    AgentStart,
    DoneEvent,
    ErrorEvent,
    MessageEnd,
    MessageStart,
    MessageUpdate,
    StartEvent,
    ToolExecutionEnd,
    ToolExecutionStart,
    ToolExecutionUpdate,
    ToolResult,
    TurnEnd,
    TurnStart,
)
from .._messages import (
    AgentMessage,
    AssistantContent,
    AssistantMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from .._tools import error_result, text_result
from ._scripted import ScriptedResponse, _events

__all__ = [
    "agent_event_traces",
    "event_stream_prefixes",
    "scripted_responses",
    "scripted_runs",
]

_ToolArguments: TypeAlias = Sequence[str] | Mapping[str, "st.SearchStrategy[dict[str, Any]]"]
"""The tools a model may call: names, or a mapping from names to argument strategies."""

_StopReason: TypeAlias = Literal["stop", "toolUse", "length", "error", "aborted"]
"""A scripted response's stop reason."""

_STOP_REASONS: tuple[_StopReason, ...] = ("stop", "toolUse", "length", "error", "aborted")
_TRUNCATED = (
    'Tool call "{name}" was not executed: the response hit the output token limit, so its '
    "arguments may be truncated. Re-issue the tool call with complete arguments."
)
_MODEL = ("scripted", "scripted", "scripted-model")
"""(api, provider, model) of the assistant messages in a drawn trace."""

_words = st.text(alphabet="abcdefghij klmnop", max_size=12)


# --------------------------------------------------------------------------------------
# Scripts for ScriptedModel


def _tool_table(given: _ToolArguments, where: str) -> list[tuple[str, st.SearchStrategy[Any]]]:
    """``tools`` as (name, arguments strategy) pairs, checked at run time."""
    tools: object = given
    if isinstance(tools, str):
        msg = f"{where}(tools={tools!r}): give a list of tool names, not one string"
        raise ArgumentTypeError(msg)
    if isinstance(tools, Mapping):
        table = []
        arguments: object
        for name, arguments in tools.items():
            if not isinstance(arguments, st.SearchStrategy):
                msg = (
                    f"{where}(tools=...): the arguments of {name!r} must be a Hypothesis "
                    f"strategy of dicts (e.g. st.fixed_dictionaries(...)); got "
                    f"{type(arguments).__name__}"
                )
                raise ArgumentTypeError(msg)
            table.append((str(name), arguments))
        return table
    if not isinstance(tools, Sequence):
        msg = f"{where}(tools=...): expected a list of tool names; got {type(tools).__name__}"
        raise ArgumentTypeError(msg)
    names: list[str] = []
    entry: object
    for entry in tools:
        if not isinstance(entry, str):
            msg = f"{where}(tools=...): tool names must be str; got {type(entry).__name__}"
            raise ArgumentTypeError(msg)
        names.append(entry)
    return [(entry, st.just({})) for entry in names]


def _check_count(given: int, name: str, where: str, least: int) -> None:
    value: object = given
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        msg = f"{where}({name}={value!r}): must be an int >= {least}"
        raise UsageError(msg)


def _timing() -> st.SearchStrategy[dict[str, Any]]:
    """How a response streams: chunk size, delay (virtual seconds), checkpoints."""
    return st.fixed_dictionaries(
        {
            "chunk_size": st.sampled_from([None, 1, 3, 8]),
            "delay": st.sampled_from([0, 0, 1, 2]),
            "checkpoint_each_event": st.booleans(),
        }
    )


def scripted_responses(
    tools: _ToolArguments = (),
    *,
    stop_reasons: Sequence[_StopReason] = ("stop", "toolUse"),
    max_tool_calls: int = 3,
    id_prefix: str = "call_",
    timing: bool = True,
) -> st.SearchStrategy[ScriptedResponse]:
    """One model answer for a :class:`~pitrio.testing.ScriptedModel`.

    An answer ending with ``toolUse`` calls one to ``max_tool_calls`` of ``tools``
    (ids ``{id_prefix}0``, ``{id_prefix}1``... unique within the answer), sometimes
    after a text or thinking block; ``length`` sometimes has tool calls too (they were
    cut off: the loop does not run them); the others are text, with a drawn
    ``error_message`` for ``error`` and ``aborted``.

    Args:
        tools: the tools the model may call: their names (each called with ``{}``; a
            name listed twice is drawn twice as often), or a mapping from each name to a
            strategy for its arguments (dicts).
        stop_reasons: the stop reasons to draw from.
        max_tool_calls: the most tool calls in one answer.
        id_prefix: the prefix of the tool call ids.
        timing: also draw how it streams: ``chunk_size``, ``delay`` (0-2 virtual
            seconds) and ``checkpoint_each_event``. Without it, the response arrives
            whole and at once.

    Raises:
        UsageError: ``toolUse`` is the only stop reason but there are no tools, a stop
            reason is unknown, or ``max_tool_calls`` is below 1.
        ArgumentTypeError: ``tools`` is neither names nor a mapping to strategies.
    """
    where = "scripted_responses"
    table = _tool_table(tools, where)
    _check_count(max_tool_calls, "max_tool_calls", where, 1)
    reasons = list(stop_reasons)
    for reason in reasons:
        if reason not in _STOP_REASONS:
            msg = f"{where}(stop_reasons=...): {reason!r} is not one of {', '.join(_STOP_REASONS)}"
            raise UsageError(msg)
    if not table:
        reasons = [r for r in reasons if r != "toolUse"]
        if not reasons:
            msg = f"{where}: stop_reasons=['toolUse'] needs tools=[...] to call"
            raise UsageError(msg)
    elif not reasons:
        msg = f"{where}(stop_reasons=[]): give at least one stop reason"
        raise UsageError(msg)
    return _responses(tuple(table), tuple(reasons), max_tool_calls, id_prefix, timing)


@st.composite
def _responses(
    draw: st.DrawFn,
    table: tuple[tuple[str, st.SearchStrategy[Any]], ...],
    reasons: tuple[_StopReason, ...],
    max_tool_calls: int,
    id_prefix: str,
    timing: bool,
) -> ScriptedResponse:
    stop = draw(st.sampled_from(reasons))
    content: list[AssistantContent] = []
    if draw(st.integers(0, 3)) == 0:
        content.append(ThinkingContent(thinking=draw(_words)))
    calls = stop == "toolUse" or (stop == "length" and bool(table) and draw(st.booleans()))
    if not calls or draw(st.booleans()):
        content.append(TextContent(text=draw(_words)))
    if calls:
        for index in range(draw(st.integers(1, max_tool_calls))):
            name, arguments = draw(st.sampled_from(table))
            content.append(ToolCall(id=f"{id_prefix}{index}", name=name, arguments=draw(arguments)))
    error_message = None
    if stop in ("error", "aborted"):
        error_message = draw(st.none() | st.sampled_from(["upstream failure", "rate limited"]))
    options: dict[str, Any] = draw(_timing()) if timing else {}
    return ScriptedResponse(
        content=tuple(content), stop_reason=stop, error_message=error_message, **options
    )


def scripted_runs(
    tools: _ToolArguments = (),
    *,
    max_turns: int = 4,
    max_tool_calls: int = 3,
    failures: bool = True,
    timing: bool = True,
) -> st.SearchStrategy[list[ScriptedResponse]]:
    """A whole run's script for a :class:`~pitrio.testing.ScriptedModel`: zero or more
    tool-call answers, then one answer that ends the run.

    The invariants: tool call ids are unique across the run (``t{turn}c{index}``);
    every answer but the last asks for tools (or, with ``failures``, was cut off at
    the token limit with tool calls, which the loop answers with error results and
    goes on); the last has no tool calls, so a run without steering, follow-ups or a
    tool that terminates asks for exactly ``len(script)`` answers. With ``failures``
    the last answer may also be ``error`` or ``aborted`` (a provider failure) or
    ``length``.

    Args:
        tools: the tools the model may call, as for :func:`scripted_responses`; with
            none, the script is a single answer.
        max_turns: the most answers in the script.
        max_tool_calls: the most tool calls in one answer.
        failures: also draw provider failures and truncated answers.
        timing: also draw how each answer streams (see :func:`scripted_responses`).

    Raises:
        UsageError: ``max_turns`` or ``max_tool_calls`` is below 1.
        ArgumentTypeError: ``tools`` is neither names nor a mapping to strategies.
    """
    where = "scripted_runs"
    table = tuple(_tool_table(tools, where))
    _check_count(max_turns, "max_turns", where, 1)
    _check_count(max_tool_calls, "max_tool_calls", where, 1)
    return _runs(table, max_turns, max_tool_calls, failures, timing)


@st.composite
def _runs(
    draw: st.DrawFn,
    table: tuple[tuple[str, st.SearchStrategy[Any]], ...],
    max_turns: int,
    max_tool_calls: int,
    failures: bool,
    timing: bool,
) -> list[ScriptedResponse]:
    tool_turns = draw(st.integers(0, max_turns - 1)) if table else 0
    middle: tuple[_StopReason, ...] = ("toolUse", "toolUse", "length") if failures else ("toolUse",)
    script = []
    for turn in range(tool_turns):
        response = draw(_responses(table, middle, max_tool_calls, f"t{turn}c", timing))
        if not any(isinstance(block, ToolCall) for block in response.content):
            # A truncated answer without tool calls would end the run: keep it going.
            response = draw(_responses(table, ("toolUse",), max_tool_calls, f"t{turn}c", timing))
        script.append(response)
    last: tuple[_StopReason, ...] = (
        ("stop", "stop", "error", "aborted", "length") if failures else ("stop",)
    )
    script.append(draw(_responses((), last, max_tool_calls, f"t{tool_turns}c", timing)))
    return script


# --------------------------------------------------------------------------------------
# Event traces


def agent_event_traces(
    tools: Sequence[str] = ("search", "fetch"),
    *,
    max_turns: int = 3,
    max_tool_calls: int = 3,
    failures: bool = True,
) -> st.SearchStrategy[list[AgentEvent]]:
    """Every event of one agent run, in an order pitrio's loop produces.

    The run starts from a prompt and follows a script drawn as :func:`scripted_runs`
    does: each answer streams as ``message_start``, ``message_update`` events (text,
    thinking and tool-call deltas with their partial messages) and ``message_end``;
    each tool call runs, in parallel batches (all ``tool_execution_start`` events,
    then the tools' updates and ends interleaved in a drawn order, then the result
    messages in the calls' order) or, for the whole run, sequential ones (each call
    from start to result), and succeeds or fails with an error result. :func:`check_trace` holds
    for every drawn trace, and the messages in ``turn_end`` and ``agent_end`` are the
    very objects of the ``message_end`` events, as in a real run.

    Args:
        tools: the names of the tools the model calls.
        max_turns: the most turns (model answers) in the run.
        max_tool_calls: the most tool calls in one answer.
        failures: also draw failed tools, provider failures and truncated answers.

    Raises:
        UsageError: ``max_turns`` or ``max_tool_calls`` is below 1.
        ArgumentTypeError: ``tools`` is not a list of names.
    """
    where = "agent_event_traces"
    table = tuple(_tool_table(tools, where))
    if isinstance(tools, Mapping):
        msg = f"{where}(tools=...): give tool names; the trace's calls carry no drawn arguments"
        raise ArgumentTypeError(msg)
    _check_count(max_turns, "max_turns", where, 1)
    _check_count(max_tool_calls, "max_tool_calls", where, 1)
    return _traces(table, max_turns, max_tool_calls, failures)


def event_stream_prefixes(
    tools: Sequence[str] = ("search", "fetch"),
    *,
    max_turns: int = 3,
    max_tool_calls: int = 3,
    failures: bool = True,
) -> st.SearchStrategy[list[AgentEvent]]:
    """The events a listener has seen so far while a run goes on: a prefix (possibly
    empty, possibly whole) of a trace drawn by :func:`agent_event_traces`, with the
    same arguments. For testing a consumer that must render or store a run in
    progress (a UI attached mid-run, a log cut by a crash)."""
    traces = agent_event_traces(
        tools, max_turns=max_turns, max_tool_calls=max_tool_calls, failures=failures
    )
    return traces.flatmap(lambda trace: st.integers(0, len(trace)).map(lambda n: trace[:n]))


_Step: TypeAlias = tuple[str, int]
"""One step of a parallel batch: ("update" | "end", index of the call in the batch)."""


@st.composite
def _interleaving(draw: st.DrawFn, updates: Sequence[int]) -> list[_Step]:
    """A merge of the calls' step sequences (each: its updates, then its end)."""
    remaining = [[("update", i)] * n + [("end", i)] for i, n in enumerate(updates)]
    order: list[_Step] = []
    while any(remaining):
        choices = [steps for steps in remaining if steps]
        steps = draw(st.sampled_from(choices))
        order.append(steps.pop(0))
    return order


@st.composite
def _traces(
    draw: st.DrawFn,
    table: tuple[tuple[str, st.SearchStrategy[Any]], ...],
    max_turns: int,
    max_tool_calls: int,
    failures: bool,
) -> list[AgentEvent]:
    script = draw(_runs(table, max_turns, max_tool_calls, failures, False))
    chunk_size = draw(st.sampled_from([None, 1, 4]))
    sequential = draw(st.booleans())  # the agent's tool_execution, for every batch
    prompt = UserMessage(content=(TextContent(text=draw(_words)),), timestamp=0)
    events: list[AgentEvent] = [AgentStart(), TurnStart()]
    emit = events.append
    ended: list[AgentMessage] = []

    def message(m: AgentMessage) -> None:
        emit(MessageStart(message=m))
        emit(MessageEnd(message=m))
        ended.append(m)

    message(prompt)
    for turn, response in enumerate(script):
        if turn:
            emit(TurnStart())
        answer = _stream_answer(response, chunk_size, emit)
        ended.append(answer)
        calls = [b for b in answer.content if isinstance(b, ToolCall)]
        if answer.stop_reason in ("error", "aborted") or not calls:
            emit(TurnEnd(message=answer, tool_results=()))
            break
        results: list[ToolResultMessage] = []
        if answer.stop_reason == "length":
            for call in calls:
                emit(_start(call))
                result = error_result(_TRUNCATED.format(name=call.name))
                emit(_end(call, result, is_error=True))
                results.append(_result_message(call, result, True))
                message(results[-1])
        else:
            outcomes = [
                (draw(st.booleans()) if failures else False, draw(st.integers(0, 2))) for _ in calls
            ]
            if sequential:
                for call, (fails, updates) in zip(calls, outcomes, strict=True):
                    emit(_start(call))
                    for u in range(updates):
                        emit(_update(call, u))
                    result, is_error = _outcome(call, fails)
                    emit(_end(call, result, is_error=is_error))
                    results.append(_result_message(call, result, is_error))
                    message(results[-1])
            else:
                for call in calls:
                    emit(_start(call))
                done: dict[int, ToolResultMessage] = {}
                sent = [0] * len(calls)
                for what, i in draw(_interleaving([n for _, n in outcomes])):
                    call = calls[i]
                    if what == "update":
                        emit(_update(call, sent[i]))
                        sent[i] += 1
                    else:
                        result, is_error = _outcome(call, outcomes[i][0])
                        emit(_end(call, result, is_error=is_error))
                        done[i] = _result_message(call, result, is_error)
                for i in range(len(calls)):
                    results.append(done[i])
                    message(done[i])
        emit(TurnEnd(message=answer, tool_results=tuple(results)))
    emit(AgentEnd(messages=tuple(ended)))
    return events


def _stream_answer(
    response: ScriptedResponse, chunk_size: int | None, emit: Callable[[AgentEvent], None]
) -> AssistantMessage:
    """The message events of one answer, as the loop emits them from its stream."""
    api, provider, model = _MODEL
    template = AssistantMessage(
        api=api, provider=provider, model=model, stop_reason="pending", timestamp=0
    )
    streamed = ScriptedResponse(
        content=response.content,
        stop_reason=response.stop_reason,
        error_message=response.error_message,
        chunk_size=chunk_size,
    )
    for event in _events(streamed, template):
        if isinstance(event, StartEvent):
            emit(MessageStart(message=event.partial))
        elif isinstance(event, DoneEvent):
            emit(MessageEnd(message=event.message))
            return event.message
        elif isinstance(event, ErrorEvent):
            emit(MessageEnd(message=event.error))
            return event.error
        else:
            emit(MessageUpdate(message=event.partial, assistant_message_event=event))
    msg = "a scripted response always ends with done or error"  # pragma: no cover
    raise AssertionError(msg)  # pragma: no cover


def _start(call: ToolCall) -> ToolExecutionStart:
    return ToolExecutionStart(tool_call_id=call.id, tool_name=call.name, args=call.arguments)


def _update(call: ToolCall, n: int) -> ToolExecutionUpdate:
    return ToolExecutionUpdate(
        tool_call_id=call.id,
        tool_name=call.name,
        args=call.arguments,
        partial_result=text_result(f"update {n} of {call.id}"),
    )


def _end(call: ToolCall, result: ToolResult, *, is_error: bool) -> ToolExecutionEnd:
    return ToolExecutionEnd(
        tool_call_id=call.id, tool_name=call.name, result=result, is_error=is_error
    )


def _outcome(call: ToolCall, fails: bool) -> tuple[ToolResult, bool]:
    if fails:
        return error_result(f"{call.name} failed for {call.id}"), True
    return text_result(f"{call.name} done for {call.id}"), False


def _result_message(call: ToolCall, result: ToolResult, is_error: bool) -> ToolResultMessage:
    return ToolResultMessage(
        tool_call_id=call.id,
        tool_name=call.name,
        content=result.content,
        details=result.details,
        is_error=is_error,
        timestamp=0,
    )
