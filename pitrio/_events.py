"""Events: what a provider stream emits, and what the agent loop emits.

Each class mirrors its wire tag (``ToolExecutionEnd`` is ``"tool_execution_end"``).
Events are frozen and carry frozen messages, so one message object can be shared by
``message_end``, ``turn_end`` and ``agent_end`` without copies.
"""

from __future__ import annotations

from typing import ClassVar, Final, Literal, TypeAlias, final, get_args

import attrs

from ._messages import (
    AgentMessage,
    AssistantMessage,
    JSONValue,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserContent,
    constructor,
    fast_construct,
)

# --------------------------------------------------------------------------------------
# Provider stream events (pi-ai's AssistantMessageEvent)


@final
@attrs.frozen(kw_only=True, weakref_slot=False, repr=False)
class StartEvent:
    """The stream began; ``partial`` is the (empty) message so far."""

    type: ClassVar[Literal["start"]] = "start"
    partial: AssistantMessage


@final
@attrs.frozen(kw_only=True, weakref_slot=False, repr=False)
class TextStartEvent:
    type: ClassVar[Literal["text_start"]] = "text_start"
    content_index: int
    partial: AssistantMessage


@final
@attrs.frozen(kw_only=True, weakref_slot=False, repr=False)
class TextDeltaEvent:
    type: ClassVar[Literal["text_delta"]] = "text_delta"
    content_index: int
    delta: str
    partial: AssistantMessage


@final
@attrs.frozen(kw_only=True, weakref_slot=False, repr=False)
class TextEndEvent:
    type: ClassVar[Literal["text_end"]] = "text_end"
    content_index: int
    content: str
    partial: AssistantMessage


@final
@attrs.frozen(kw_only=True, weakref_slot=False, repr=False)
class ThinkingStartEvent:
    type: ClassVar[Literal["thinking_start"]] = "thinking_start"
    content_index: int
    partial: AssistantMessage


@final
@attrs.frozen(kw_only=True, weakref_slot=False, repr=False)
class ThinkingDeltaEvent:
    type: ClassVar[Literal["thinking_delta"]] = "thinking_delta"
    content_index: int
    delta: str
    partial: AssistantMessage


@final
@attrs.frozen(kw_only=True, weakref_slot=False, repr=False)
class ThinkingEndEvent:
    type: ClassVar[Literal["thinking_end"]] = "thinking_end"
    content_index: int
    content: str
    partial: AssistantMessage


@final
@attrs.frozen(kw_only=True, weakref_slot=False, repr=False)
class ToolCallStartEvent:
    type: ClassVar[Literal["toolcall_start"]] = "toolcall_start"
    content_index: int
    partial: AssistantMessage


@final
@attrs.frozen(kw_only=True, weakref_slot=False, repr=False)
class ToolCallDeltaEvent:
    type: ClassVar[Literal["toolcall_delta"]] = "toolcall_delta"
    content_index: int
    delta: str
    partial: AssistantMessage


@final
@attrs.frozen(kw_only=True, weakref_slot=False, repr=False)
class ToolCallEndEvent:
    type: ClassVar[Literal["toolcall_end"]] = "toolcall_end"
    content_index: int
    tool_call: ToolCall
    partial: AssistantMessage


@final
@attrs.frozen(kw_only=True, weakref_slot=False, repr=False)
class DoneEvent:
    """The stream finished normally; ``message`` is final."""

    type: ClassVar[Literal["done"]] = "done"
    reason: Literal["stop", "length", "toolUse", "deferred"]
    message: AssistantMessage


@final
@attrs.frozen(kw_only=True, weakref_slot=False, repr=False)
class ErrorEvent:
    """The stream failed or was aborted; ``error`` is the final message."""

    type: ClassVar[Literal["error"]] = "error"
    reason: Literal["error", "aborted"]
    error: AssistantMessage


AssistantMessageEvent: TypeAlias = (
    StartEvent
    | TextStartEvent
    | TextDeltaEvent
    | TextEndEvent
    | ThinkingStartEvent
    | ThinkingDeltaEvent
    | ThinkingEndEvent
    | ToolCallStartEvent
    | ToolCallDeltaEvent
    | ToolCallEndEvent
    | DoneEvent
    | ErrorEvent
)

UpdateEvent: TypeAlias = (
    TextStartEvent
    | TextDeltaEvent
    | TextEndEvent
    | ThinkingStartEvent
    | ThinkingDeltaEvent
    | ThinkingEndEvent
    | ToolCallStartEvent
    | ToolCallDeltaEvent
    | ToolCallEndEvent
)
"""The events that become ``message_update``."""

# --------------------------------------------------------------------------------------
# Tool results


@final
@attrs.frozen(kw_only=True, weakref_slot=False, repr=False)
class ToolResult:
    """What a tool returns (``AgentToolResult``): content for the model, details for the app.

    ``terminate=True`` asks the loop to stop after this batch (it does only when every
    result of the batch asks for it).
    """

    content: tuple[UserContent, ...] = ()
    details: JSONValue = None
    terminate: bool | None = None
    usage: Usage | None = None
    added_tool_names: tuple[str, ...] | None = None


# --------------------------------------------------------------------------------------
# Agent events


@final
@attrs.frozen(weakref_slot=False, repr=False)
class AgentStart:
    type: ClassVar[Literal["agent_start"]] = "agent_start"


@final
@attrs.frozen(kw_only=True, weakref_slot=False, repr=False)
class AgentEnd:
    type: ClassVar[Literal["agent_end"]] = "agent_end"
    messages: tuple[AgentMessage, ...]


@final
@attrs.frozen(weakref_slot=False, repr=False)
class TurnStart:
    type: ClassVar[Literal["turn_start"]] = "turn_start"


@final
@attrs.frozen(kw_only=True, weakref_slot=False, repr=False)
class TurnEnd:
    type: ClassVar[Literal["turn_end"]] = "turn_end"
    message: AgentMessage
    tool_results: tuple[ToolResultMessage, ...]


@final
@attrs.frozen(kw_only=True, weakref_slot=False, repr=False)
class MessageStart:
    type: ClassVar[Literal["message_start"]] = "message_start"
    message: AgentMessage


@final
@attrs.frozen(kw_only=True, weakref_slot=False, repr=False)
class MessageUpdate:
    type: ClassVar[Literal["message_update"]] = "message_update"
    message: AgentMessage
    assistant_message_event: UpdateEvent


@final
@attrs.frozen(kw_only=True, weakref_slot=False, repr=False)
class MessageEnd:
    type: ClassVar[Literal["message_end"]] = "message_end"
    message: AgentMessage


@final
@attrs.frozen(kw_only=True, weakref_slot=False, repr=False)
class ToolExecutionStart:
    type: ClassVar[Literal["tool_execution_start"]] = "tool_execution_start"
    tool_call_id: str
    tool_name: str
    args: JSONValue


@final
@attrs.frozen(kw_only=True, weakref_slot=False, repr=False)
class ToolExecutionUpdate:
    type: ClassVar[Literal["tool_execution_update"]] = "tool_execution_update"
    tool_call_id: str
    tool_name: str
    args: JSONValue
    partial_result: ToolResult


@final
@attrs.frozen(kw_only=True, weakref_slot=False, repr=False)
class ToolExecutionEnd:
    type: ClassVar[Literal["tool_execution_end"]] = "tool_execution_end"
    tool_call_id: str
    tool_name: str
    result: ToolResult
    is_error: bool


AgentEvent: TypeAlias = (
    AgentStart
    | AgentEnd
    | TurnStart
    | TurnEnd
    | MessageStart
    | MessageUpdate
    | MessageEnd
    | ToolExecutionStart
    | ToolExecutionUpdate
    | ToolExecutionEnd
)

fast_construct(*get_args(AssistantMessageEvent), ToolResult, *get_args(AgentEvent))

# The loop's constructors of the events it emits at every step (plain functions, not
# ``type.__call__``: see :func:`pitrio._messages.constructor`), and the one instance of
# each event without fields.
new_message_start: Final = constructor(MessageStart)
new_message_update: Final = constructor(MessageUpdate)
new_message_end: Final = constructor(MessageEnd)
new_turn_end: Final = constructor(TurnEnd)
new_agent_end: Final = constructor(AgentEnd)
new_tool_execution_start: Final = constructor(ToolExecutionStart)
new_tool_execution_update: Final = constructor(ToolExecutionUpdate)
new_tool_execution_end: Final = constructor(ToolExecutionEnd)
new_tool_result: Final = constructor(ToolResult)
AGENT_START: Final = AgentStart()
TURN_START: Final = TurnStart()
