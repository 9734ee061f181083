"""Tools: the AgentTool protocol, a ready-made Tool class, and hook value types."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, TypeAlias, final

import attrs

from ._events import ToolResult, new_tool_result
from ._messages import (
    AssistantMessage,
    JSONValue,
    TextContent,
    ToolCall,
    Usage,
    UserContent,
    constructor,
)

if TYPE_CHECKING:
    from ._signal import AbortSignal

__all__ = [
    "AfterToolCallContext",
    "AfterToolCallResult",
    "AgentTool",
    "BeforeToolCallContext",
    "BeforeToolCallResult",
    "ExecutionMode",
    "Tool",
    "ToolUpdateCallback",
    "error_result",
    "text_result",
]

ExecutionMode: TypeAlias = Literal["sequential", "parallel"]
ToolUpdateCallback: TypeAlias = Callable[[ToolResult], None]
"""Called by a running tool with a partial result; becomes ``tool_execution_update``."""


class AgentTool(Protocol):
    """What the loop needs of a tool.

    ``execute`` runs inside a cancel scope that :meth:`AbortSignal.abort` cancels; a
    tool that must finish its work shields itself
    (``with trio.CancelScope(shield=True):``), and then its result is used. A tool
    that raises produces an error result with the exception's text.
    """

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def parameters(self) -> Mapping[str, Any]: ...

    @property
    def execution_mode(self) -> ExecutionMode | None: ...

    def prepare_arguments(self, arguments: JSONValue) -> JSONValue:
        """Adjust raw arguments before validation; return them unchanged if nothing to do."""
        ...

    async def execute(
        self,
        tool_call_id: str,
        params: Any,
        signal: AbortSignal,
        on_update: ToolUpdateCallback,
    ) -> ToolResult: ...


ExecuteFn: TypeAlias = Callable[
    [str, Any, "AbortSignal", ToolUpdateCallback], Awaitable[ToolResult]
]


@final
@attrs.frozen(kw_only=True)
class Tool:
    """A tool built from an async function (the usual way to define one).

    Example::

        async def add(call_id, params, signal, on_update):
            return text_result(str(params["a"] + params["b"]))

        tool = Tool(name="add", description="Add two numbers", execute=add,
                    parameters={"type": "object", "properties": {
                        "a": {"type": "number"}, "b": {"type": "number"}},
                        "required": ["a", "b"]})
    """

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = attrs.field(
        factory=lambda: {"type": "object", "properties": {}}
    )
    execute_fn: ExecuteFn = attrs.field(alias="execute")
    label: str = ""
    execution_mode: ExecutionMode | None = None
    prepare_arguments_fn: Callable[[JSONValue], JSONValue] | None = attrs.field(
        default=None, alias="prepare_arguments"
    )
    replay: Literal["safe", "never"] = "never"
    """May the harness run this tool again after a crash left a call without a recorded
    outcome? ``"safe"``: yes (idempotent, read-only tools); ``"never"`` (the default): the
    call is reported as interrupted instead (Pi's ``AgentHarnessTool.replay``)."""

    def prepare_arguments(self, arguments: JSONValue) -> JSONValue:
        if self.prepare_arguments_fn is None:
            return arguments
        return self.prepare_arguments_fn(arguments)

    async def execute(
        self,
        tool_call_id: str,
        params: Any,
        signal: AbortSignal,
        on_update: ToolUpdateCallback,
    ) -> ToolResult:
        return await self.execute_fn(tool_call_id, params, signal, on_update)


def text_result(
    text: str, *, details: JSONValue = None, terminate: bool | None = None
) -> ToolResult:
    """A tool result with one text block."""
    return new_tool_result(
        content=(_new_text_content(text=text),), details=details, terminate=terminate
    )


def error_result(text: str) -> ToolResult:
    """Pi's ``createErrorToolResult``: one text block and empty details."""
    return new_tool_result(content=(_new_text_content(text=text),), details={})


_new_text_content: Final = constructor(TextContent)


# --------------------------------------------------------------------------------------
# Hook values


@final
@attrs.frozen(kw_only=True)
class BeforeToolCallContext:
    """Handed to ``before_tool_call``: the call, its validated args and the live context."""

    assistant_message: AssistantMessage
    tool_call: ToolCall
    args: Any
    context: Any


@final
@attrs.frozen(kw_only=True)
class BeforeToolCallResult:
    """Returned by ``before_tool_call`` to block a call (``None`` lets it run)."""

    block: bool = False
    reason: str | None = None
    terminate: bool | None = None


@final
@attrs.frozen(kw_only=True)
class AfterToolCallContext:
    """Handed to ``after_tool_call`` after a call executed (also when it raised)."""

    assistant_message: AssistantMessage
    tool_call: ToolCall
    args: Any
    result: ToolResult
    is_error: bool
    context: Any


@final
@attrs.frozen(kw_only=True)
class AfterToolCallResult:
    """Field-level overrides from ``after_tool_call``; ``None`` keeps the executed value."""

    content: tuple[UserContent, ...] | None = None
    details: JSONValue = None
    usage: Usage | None = None
    terminate: bool | None = None
    is_error: bool | None = None
