"""pitrio: a Trio-native, structured-concurrency runtime for LLM agents (a port of Pi 0.85.0)."""

from __future__ import annotations

from . import _wire as wire
from ._agent import (
    Agent as Agent,
)
from ._agent import (
    AgentState as AgentState,
)
from ._agent import (
    Listener as Listener,
)
from ._agent import (
    QueueMode as QueueMode,
)
from ._errors import (
    AgentBusyError as AgentBusyError,
)
from ._errors import (
    PitrioError as PitrioError,
)
from ._errors import (
    UsageError as UsageError,
)
from ._events import (
    AgentEnd as AgentEnd,
)
from ._events import (
    AgentEvent as AgentEvent,
)
from ._events import (
    AgentStart as AgentStart,
)
from ._events import (
    AssistantMessageEvent as AssistantMessageEvent,
)
from ._events import (
    DoneEvent as DoneEvent,
)
from ._events import (
    ErrorEvent as ErrorEvent,
)
from ._events import (
    MessageEnd as MessageEnd,
)
from ._events import (
    MessageStart as MessageStart,
)
from ._events import (
    MessageUpdate as MessageUpdate,
)
from ._events import (
    StartEvent as StartEvent,
)
from ._events import (
    TextDeltaEvent as TextDeltaEvent,
)
from ._events import (
    TextEndEvent as TextEndEvent,
)
from ._events import (
    TextStartEvent as TextStartEvent,
)
from ._events import (
    ThinkingDeltaEvent as ThinkingDeltaEvent,
)
from ._events import (
    ThinkingEndEvent as ThinkingEndEvent,
)
from ._events import (
    ThinkingStartEvent as ThinkingStartEvent,
)
from ._events import (
    ToolCallDeltaEvent as ToolCallDeltaEvent,
)
from ._events import (
    ToolCallEndEvent as ToolCallEndEvent,
)
from ._events import (
    ToolCallStartEvent as ToolCallStartEvent,
)
from ._events import (
    ToolExecutionEnd as ToolExecutionEnd,
)
from ._events import (
    ToolExecutionStart as ToolExecutionStart,
)
from ._events import (
    ToolExecutionUpdate as ToolExecutionUpdate,
)
from ._events import (
    ToolResult as ToolResult,
)
from ._events import (
    TurnEnd as TurnEnd,
)
from ._events import (
    TurnStart as TurnStart,
)
from ._loop import (
    AgentContext as AgentContext,
)
from ._loop import (
    LoopConfig as LoopConfig,
)
from ._loop import (
    NextTurn as NextTurn,
)
from ._loop import (
    TurnContext as TurnContext,
)
from ._loop import (
    agent_loop as agent_loop,
)
from ._loop import (
    agent_loop_continue as agent_loop_continue,
)
from ._loop import (
    default_convert_to_llm as default_convert_to_llm,
)
from ._loop import (
    run_agent_loop as run_agent_loop,
)
from ._loop import (
    run_agent_loop_continue as run_agent_loop_continue,
)
from ._loop import (
    set_default_stream_fn as set_default_stream_fn,
)
from ._messages import (
    AgentMessage as AgentMessage,
)
from ._messages import (
    AssistantMessage as AssistantMessage,
)
from ._messages import (
    Cost as Cost,
)
from ._messages import (
    CustomMessage as CustomMessage,
)
from ._messages import (
    DeferredHandle as DeferredHandle,
)
from ._messages import (
    ImageContent as ImageContent,
)
from ._messages import (
    StopReason as StopReason,
)
from ._messages import (
    TextContent as TextContent,
)
from ._messages import (
    ThinkingContent as ThinkingContent,
)
from ._messages import (
    ThinkingLevel as ThinkingLevel,
)
from ._messages import (
    ToolCall as ToolCall,
)
from ._messages import (
    ToolResultMessage as ToolResultMessage,
)
from ._messages import (
    Usage as Usage,
)
from ._messages import (
    UserMessage as UserMessage,
)
from ._messages import (
    user_text as user_text,
)
from ._model import (
    Context as Context,
)
from ._model import (
    Model as Model,
)
from ._model import (
    ModelCost as ModelCost,
)
from ._model import (
    StreamFn as StreamFn,
)
from ._model import (
    StreamOptions as StreamOptions,
)
from ._signal import AbortSignal as AbortSignal
from ._stream import (
    AssistantMessageEventStream as AssistantMessageEventStream,
)
from ._stream import (
    EventStream as EventStream,
)
from ._tools import (
    AfterToolCallContext as AfterToolCallContext,
)
from ._tools import (
    AfterToolCallResult as AfterToolCallResult,
)
from ._tools import (
    AgentTool as AgentTool,
)
from ._tools import (
    BeforeToolCallContext as BeforeToolCallContext,
)
from ._tools import (
    BeforeToolCallResult as BeforeToolCallResult,
)
from ._tools import (
    Tool as Tool,
)
from ._tools import (
    error_result as error_result,
)
from ._tools import (
    text_result as text_result,
)
from ._validation import ToolArgumentsError as ToolArgumentsError, ToolSchemaError as ToolSchemaError
from ._wire import register_message_role as register_message_role

__version__ = "0.1.0"

__all__ = [
    "AbortSignal",
    "AfterToolCallContext",
    "AfterToolCallResult",
    "Agent",
    "AgentBusyError",
    "AgentContext",
    "AgentEnd",
    "AgentEvent",
    "AgentMessage",
    "AgentStart",
    "AgentState",
    "AgentTool",
    "AssistantMessage",
    "AssistantMessageEvent",
    "AssistantMessageEventStream",
    "BeforeToolCallContext",
    "BeforeToolCallResult",
    "Context",
    "Cost",
    "CustomMessage",
    "DeferredHandle",
    "DoneEvent",
    "ErrorEvent",
    "EventStream",
    "ImageContent",
    "Listener",
    "LoopConfig",
    "MessageEnd",
    "MessageStart",
    "MessageUpdate",
    "Model",
    "ModelCost",
    "NextTurn",
    "PitrioError",
    "QueueMode",
    "StartEvent",
    "StopReason",
    "StreamFn",
    "StreamOptions",
    "TextContent",
    "TextDeltaEvent",
    "TextEndEvent",
    "TextStartEvent",
    "ThinkingContent",
    "ThinkingDeltaEvent",
    "ThinkingEndEvent",
    "ThinkingLevel",
    "ThinkingStartEvent",
    "Tool",
    "ToolArgumentsError",
    "ToolCall",
    "ToolCallDeltaEvent",
    "ToolCallEndEvent",
    "ToolCallStartEvent",
    "ToolExecutionEnd",
    "ToolExecutionStart",
    "ToolExecutionUpdate",
    "ToolResult",
    "ToolResultMessage",
    "ToolSchemaError",
    "TurnContext",
    "TurnEnd",
    "TurnStart",
    "Usage",
    "UsageError",
    "UserMessage",
    "agent_loop",
    "agent_loop_continue",
    "default_convert_to_llm",
    "error_result",
    "register_message_role",
    "run_agent_loop",
    "run_agent_loop_continue",
    "set_default_stream_fn",
    "text_result",
    "user_text",
    "wire",
]
