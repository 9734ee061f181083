"""Structured output for ``Agent.run(..., output_type=T)``: the ``final_result`` tool.

As pydantic-ai's tool output: the run offers one more tool, ``final_result``, whose
arguments are ``T``'s JSON schema (an object type's own schema; any other type wrapped
as ``{"response": ...}``). A call that passes validation (Pi's validator, then
conversion into ``T``) ends the run with that value (the result's ``terminate``); one
that fails gets the error as its tool result, so the model can try again. A plain
text answer is answered with a follow-up message asking for the tool. After
``output_retries`` failed attempts the run gives up: it is aborted before its next
request, and the result says why (``output`` is then ``None``).

Not done yet: a provider's native structured output (OpenAI ``json_schema``
response format, Anthropic's forced tool choice); the tool is offered alongside the
others, not forced.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final, Generic, TypeVar, final

import attrs

from ._errors import ArgumentTypeError, UsageError
from ._events import AgentEvent, ToolExecutionEnd, ToolResult, TurnEnd
from ._function_tools import _converter_for, _is_typeddict, json_schema_of
from ._messages import AssistantMessage, TextContent, ToolCall
from ._signal import AbortSignal
from ._tools import Tool, ToolUpdateCallback

__all__ = ["OutputCollector"]

OutputT = TypeVar("OutputT")

FINAL_RESULT: Final = "final_result"
_DESCRIPTION: Final = "The final response which ends this conversation"
_PROCESSED: Final = "Final result processed."
_ASK_FOR_TOOL: Final = (
    "Plain text responses are not permitted, please include your response in a tool call "
    f"to {FINAL_RESULT}."
)


def _is_object_type(tp: object) -> bool:
    return isinstance(tp, type) and (
        dataclasses.is_dataclass(tp) or attrs.has(tp) or _is_typeddict(tp)
    )


@final
class OutputCollector(Generic[OutputT]):
    """The ``final_result`` tool of one run, and a listener that counts its retries."""

    def __init__(
        self,
        output_type: type[OutputT],
        retries: int,
        follow_up: Any,
    ) -> None:
        given: object = retries  # checked at run time: the type is a promise only
        if isinstance(given, bool) or not isinstance(given, int) or given < 0:
            msg = f"output_retries must be an int of at least 0; got {retries!r}"
            raise UsageError(msg)
        self.retries = retries
        self.failures = 0
        self.value: OutputT | None = None
        self.has_value = False
        self.error_message: str | None = None
        self._follow_up = follow_up
        wrapped = not _is_object_type(output_type)
        schema = json_schema_of(output_type)
        if wrapped:
            schema = {
                "type": "object",
                "properties": {"response": schema},
                "required": ["response"],
                "additionalProperties": False,
            }
        convert = _converter_for(output_type)
        doc = getattr(output_type, "__doc__", None) if not wrapped else None
        description = _DESCRIPTION
        if doc and not doc.startswith(f"{getattr(output_type, '__name__', '')}("):
            description = f"{_DESCRIPTION}: {doc.strip()}"

        async def execute(
            tool_call_id: str, args: Any, signal: AbortSignal, on_update: ToolUpdateCallback
        ) -> ToolResult:
            try:
                value = convert(args["response"] if wrapped else args)
            except Exception as exc:
                msg = f"Invalid {FINAL_RESULT} arguments: {exc}"
                raise ArgumentTypeError(msg) from None
            self.value = value  # type: ignore[assignment]  # converted into output_type
            self.has_value = True
            return ToolResult(content=(TextContent(text=_PROCESSED),), terminate=True)

        self.tool = Tool(
            name=FINAL_RESULT, description=description, parameters=schema, execute=execute
        )

    def _give_up(self, text: str, signal: AbortSignal) -> None:
        self.error_message = (
            f"Output validation failed: {text} (after {self.failures} attempts; "
            f"output_retries={self.retries})"
        )
        signal.abort(self.error_message)

    def __call__(self, event: AgentEvent, signal: AbortSignal) -> None:
        if type(event) is ToolExecutionEnd:
            if event.tool_name == FINAL_RESULT and event.is_error:
                self.failures += 1
                if self.failures > self.retries:
                    self._give_up("the final_result arguments were invalid", signal)
        elif type(event) is TurnEnd:
            message = event.message
            if (
                type(message) is AssistantMessage
                and message.stop_reason == "stop"
                and not self.has_value
                and not any(type(b) is ToolCall for b in message.content)
            ):
                self.failures += 1
                if self.failures > self.retries:
                    self._give_up("the model answered without calling final_result", signal)
                else:
                    self._follow_up(_ASK_FOR_TOOL)
