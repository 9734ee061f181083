"""check_trace: the invariants every run's event sequence satisfies."""

from __future__ import annotations

from collections.abc import Sequence
from typing import assert_never

from .._errors import ArgumentTypeError
from .._events import (
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
from .._messages import AssistantMessage, ToolCall, ToolResultMessage

__all__ = ["check_trace"]


def check_trace(events: Sequence[AgentEvent]) -> list[str]:
    """Return the violated invariants of one run's events (empty when all hold).

    Checked: ``agent_start`` first and ``agent_end`` last, once each; turns balanced and
    not nested, message and tool events inside a turn; messages not nested, every
    ``message_update`` inside an assistant message; each tool call started and ended
    once, updates between the two; tool result messages of a turn in the assistant's
    source order, after the call ended; ``agent_end.messages`` equal to the messages
    ended during the run.

    A run that failed (a stream function, hook or listener raised) ends, as in Pi's
    ``handleRunFailure``, with ``message_start``/``message_end`` of an error (or aborted)
    assistant message, a ``turn_end`` of it and an ``agent_end`` listing only it,
    wherever the failure happened: such a trace is checked as a run cut off at that
    point, followed by that tail.

    Raises:
        ArgumentTypeError: ``events`` is not a sequence of agent events (the objects a
            listener receives, not their wire dicts).
    """
    _check_argument(events)
    problems = _check(events, cut=False)
    if problems and _is_failure_tail(events[-4:]):
        agent_end = events[-1]
        assert isinstance(agent_end, AgentEnd)  # checked by _is_failure_tail
        failure = agent_end.messages[0]
        prefix = events[:-4]
        if not any(getattr(e, "message", None) is failure for e in prefix) and not _check(
            prefix, cut=True
        ):
            return []
    return problems


def _check_argument(events: object) -> None:
    if isinstance(events, str | bytes | dict) or not isinstance(events, Sequence):
        msg = (
            f"check_trace(events): expected a list of agent events; got {type(events).__name__} "
            "(collect them with agent.subscribe(lambda event, signal: events.append(event)))"
        )
        raise ArgumentTypeError(msg)
    event: object
    for index, event in enumerate(events):
        if not isinstance(event, AgentEvent):
            msg = (
                f"check_trace(events): events[{index}] is a {type(event).__name__}, not an "
                "agent event (pitrio.AgentStart ... pitrio.AgentEnd); wire dicts can be read "
                "back with pitrio.wire.structure_event()"
            )
            raise ArgumentTypeError(msg)


def _is_failure_tail(tail: Sequence[AgentEvent]) -> bool:
    if len(tail) != 4:
        return False
    start, end, turn_end, agent_end = tail
    if not (
        isinstance(start, MessageStart)
        and isinstance(end, MessageEnd)
        and isinstance(turn_end, TurnEnd)
        and isinstance(agent_end, AgentEnd)
    ):
        return False
    failure = end.message
    return (
        isinstance(failure, AssistantMessage)
        and failure.stop_reason in ("error", "aborted")
        and start.message is failure
        and turn_end.message is failure
        and turn_end.tool_results == ()
        and tuple(agent_end.messages) == (failure,)
    )


def _check(events: Sequence[AgentEvent], *, cut: bool) -> list[str]:
    """Check a whole run, or (``cut``) a run cut off by a failure: open turns, messages
    and tool calls are then allowed at the end, and there is no ``agent_end``."""
    problems: list[str] = []
    if not events:
        return [] if cut else ["no events"]
    kinds = [e.type for e in events]
    if kinds[0] != "agent_start":
        problems.append(f"first event is {kinds[0]!r}, not 'agent_start'")
    if not cut and kinds[-1] != "agent_end":
        problems.append(f"last event is {kinds[-1]!r}, not 'agent_end'")
    if kinds.count("agent_start") != 1:
        problems.append(f"{kinds.count('agent_start')} agent_start events")
    if kinds.count("agent_end") != (0 if cut else 1):
        problems.append(f"{kinds.count('agent_end')} agent_end events")

    in_turn = False
    open_message: object = None
    started: dict[str, int] = {}
    ended: set[str] = set()
    assistant: AssistantMessage | None = None
    results_seen: list[str] = []
    ended_messages: list[object] = []
    for i, event in enumerate(events):
        kind = event.type
        where = f"event {i} ({kind})"
        if kind not in ("agent_start", "agent_end", "turn_start") and not in_turn:
            problems.append(f"{where}: outside a turn")
        match event:
            case AgentStart():
                pass
            case TurnStart():
                if in_turn:
                    problems.append(f"{where}: turn_start inside an open turn")
                in_turn = True
                assistant, results_seen = None, []
            case TurnEnd(message=message, tool_results=tool_results):
                if open_message is not None:
                    problems.append(f"{where}: turn_end while a message is open")
                in_turn = False
                ids = [r.tool_call_id for r in tool_results]
                if ids != results_seen:
                    problems.append(
                        f"{where}: tool_results {ids} differ from the result messages "
                        f"{results_seen}"
                    )
                if isinstance(message, AssistantMessage):
                    order = [b.id for b in message.content if isinstance(b, ToolCall)]
                    positions = [order.index(x) for x in ids if x in order]
                    if positions != sorted(positions):
                        problems.append(f"{where}: tool results {ids} not in source order {order}")
            case MessageStart():
                if open_message is not None:
                    problems.append(f"{where}: message_start inside an open message")
                open_message = event.message
            case MessageUpdate():
                if open_message is None or getattr(open_message, "role", None) != "assistant":
                    problems.append(f"{where}: message_update outside an assistant message")
            case MessageEnd(message=message):
                if open_message is None:
                    problems.append(f"{where}: message_end without message_start")
                open_message = None
                ended_messages.append(message)
                if isinstance(message, AssistantMessage):
                    assistant = message
                elif isinstance(message, ToolResultMessage):
                    if message.tool_call_id not in ended:
                        problems.append(
                            f"{where}: result message for {message.tool_call_id!r} "
                            "before its tool_execution_end"
                        )
                    results_seen.append(message.tool_call_id)
            case ToolExecutionStart(tool_call_id=call_id):
                if call_id in started:
                    problems.append(f"{where}: tool call {call_id!r} started twice")
                started[call_id] = i
                if assistant is None or call_id not in {
                    b.id for b in assistant.content if isinstance(b, ToolCall)
                }:
                    problems.append(
                        f"{where}: tool call {call_id!r} is not in the turn's assistant message"
                    )
            case ToolExecutionUpdate(tool_call_id=call_id):
                if call_id not in started or call_id in ended:
                    problems.append(f"{where}: update for {call_id!r} outside its execution")
            case ToolExecutionEnd(tool_call_id=call_id):
                if call_id not in started:
                    problems.append(f"{where}: tool call {call_id!r} ended without starting")
                if call_id in ended:
                    problems.append(f"{where}: tool call {call_id!r} ended twice")
                ended.add(call_id)
            case AgentEnd():
                if in_turn:
                    problems.append(f"{where}: agent_end inside an open turn")
                if list(event.messages) != ended_messages:
                    problems.append(
                        f"{where}: agent_end.messages differ from the messages ended in the run"
                    )
            case _:
                assert_never(event)
    if not cut:
        for call_id in started:
            if call_id not in ended:
                problems.append(f"tool call {call_id!r} never ended")
        if open_message is not None:
            problems.append("a message was never ended")
    return problems
