"""pitrio: a Trio-native, structured-concurrency runtime for LLM agents (a port of Pi 0.85.0)."""

from __future__ import annotations

import typing as _typing

from . import _wire as wire
from ._agent import (
    Agent as Agent,
    AgentState as AgentState,
    Listener as Listener,
    QueueMode as QueueMode,
)
from ._errors import (
    AgentBusyError as AgentBusyError,
    ArgumentTypeError as ArgumentTypeError,
    HarnessError as HarnessError,
    IncompleteStreamError as IncompleteStreamError,
    InvalidStateError as InvalidStateError,
    PitrioError as PitrioError,
    ProviderError as ProviderError,
    ProviderProtocolError as ProviderProtocolError,
    UnknownApiError as UnknownApiError,
    UsageError as UsageError,
    WireFormatError as WireFormatError,
)
from ._events import (
    AgentEnd as AgentEnd,
    AgentEvent as AgentEvent,
    AgentStart as AgentStart,
    AssistantMessageEvent as AssistantMessageEvent,
    DoneEvent as DoneEvent,
    ErrorEvent as ErrorEvent,
    MessageEnd as MessageEnd,
    MessageStart as MessageStart,
    MessageUpdate as MessageUpdate,
    StartEvent as StartEvent,
    TextDeltaEvent as TextDeltaEvent,
    TextEndEvent as TextEndEvent,
    TextStartEvent as TextStartEvent,
    ThinkingDeltaEvent as ThinkingDeltaEvent,
    ThinkingEndEvent as ThinkingEndEvent,
    ThinkingStartEvent as ThinkingStartEvent,
    ToolCallDeltaEvent as ToolCallDeltaEvent,
    ToolCallEndEvent as ToolCallEndEvent,
    ToolCallStartEvent as ToolCallStartEvent,
    ToolExecutionEnd as ToolExecutionEnd,
    ToolExecutionStart as ToolExecutionStart,
    ToolExecutionUpdate as ToolExecutionUpdate,
    ToolResult as ToolResult,
    TurnEnd as TurnEnd,
    TurnStart as TurnStart,
)
from ._lazy import exports as _exports
from ._loop import (
    AgentContext as AgentContext,
    LoopConfig as LoopConfig,
    NextTurn as NextTurn,
    TurnContext as TurnContext,
    agent_loop as agent_loop,
    agent_loop_continue as agent_loop_continue,
    default_convert_to_llm as default_convert_to_llm,
    run_agent_loop as run_agent_loop,
    run_agent_loop_continue as run_agent_loop_continue,
    set_default_stream_fn as set_default_stream_fn,
)
from ._messages import (
    AgentMessage as AgentMessage,
    AssistantMessage as AssistantMessage,
    Cost as Cost,
    CustomMessage as CustomMessage,
    DeferredHandle as DeferredHandle,
    ImageContent as ImageContent,
    StopReason as StopReason,
    TextContent as TextContent,
    ThinkingContent as ThinkingContent,
    ThinkingLevel as ThinkingLevel,
    ToolCall as ToolCall,
    ToolResultMessage as ToolResultMessage,
    Usage as Usage,
    UserMessage as UserMessage,
    user_text as user_text,
)
from ._model import (
    Context as Context,
    Model as Model,
    ModelCost as ModelCost,
    StreamFn as StreamFn,
    StreamOptions as StreamOptions,
)
from ._signal import AbortSignal as AbortSignal
from ._stream import (
    AssistantMessageEventStream as AssistantMessageEventStream,
    EventStream as EventStream,
)
from ._tools import (
    AfterToolCallContext as AfterToolCallContext,
    AfterToolCallResult as AfterToolCallResult,
    AgentTool as AgentTool,
    BeforeToolCallContext as BeforeToolCallContext,
    BeforeToolCallResult as BeforeToolCallResult,
    Tool as Tool,
    error_result as error_result,
    text_result as text_result,
)
from ._wire import register_message_role as register_message_role

if _typing.TYPE_CHECKING:
    from ._function_tools import tool as tool
    from ._output import OutputMode as OutputMode
    from ._run_context import RunContext as RunContext, ToolCallId as ToolCallId
    from ._run_result import RunResult as RunResult, UsageLimits as UsageLimits
    from ._validation import (
        ToolArgumentsError as ToolArgumentsError,
        ToolSchemaError as ToolSchemaError,
        ValidationAborted as ValidationAborted,
    )

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
    "ArgumentTypeError",
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
    "HarnessError",
    "ImageContent",
    "IncompleteStreamError",
    "InvalidStateError",
    "Listener",
    "LoopConfig",
    "MessageEnd",
    "MessageStart",
    "MessageUpdate",
    "Model",
    "ModelCost",
    "NextTurn",
    "OutputMode",
    "PitrioError",
    "ProviderError",
    "ProviderProtocolError",
    "QueueMode",
    "RunContext",
    "RunResult",
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
    "ToolCallId",
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
    "UnknownApiError",
    "Usage",
    "UsageError",
    "UsageLimits",
    "UserMessage",
    "ValidationAborted",
    "WireFormatError",
    "agent_loop",
    "agent_loop_continue",
    "default_convert_to_llm",
    "error_result",
    "register_message_role",
    "run_agent_loop",
    "run_agent_loop_continue",
    "set_default_stream_fn",
    "text_result",
    "tool",
    "user_text",
    "wire",
]

# Typed tools, one-call runs and the validation of tool arguments, imported when first
# used: ``import pitrio`` pays for none of them (the validation package is about a tenth
# of its instructions; the loop imports it at the first tool call).
_LAZY = {
    "OutputMode": "_output",
    "RunContext": "_run_context",
    "RunResult": "_run_result",
    "ToolArgumentsError": "_validation",
    "ToolCallId": "_run_context",
    "ToolSchemaError": "_validation",
    "UsageLimits": "_run_result",
    "ValidationAborted": "_validation",
    "tool": "_function_tools",
}


__getattr__, __dir__ = _exports(globals(), _LAZY)
