"""Structured output for ``Agent.run(..., output_type=T)``: how the model is asked, and checked.

The output schema is ``T``'s JSON schema (an object type's own schema; any other type
wrapped as ``{"response": ...}``, since the APIs want an object at the root). How the
model is asked depends on the model's API (``output_mode="auto"``):

- ``openai-completions``, ``openai-responses``: the API's native structured output.
  The request carries ``StreamOptions.response_format`` (``json_schema``, strict where
  the server supports it; sent as ``response_format`` or ``text.format``), and the
  model's text answer is the JSON value. A server that does not have it is flagged in
  ``model.compat`` with ``"supportsJsonSchemaOutput": False`` (the final-result tool is
  then used).
- ``anthropic-messages``: a forced tool, as Anthropic advises: the ``final_result``
  tool with Pi's JSON-schema constrained sampling (``constrained_sampling``, strict
  where the model supports strict tools) and ``tool_choice`` forcing it (``"any"`` when
  the agent has other tools, so it can still use them). Anthropic refuses a forced tool
  while the model thinks, so with thinking on the tool is offered, not forced.
- any other API (and ``output_mode="tool"``): pydantic-ai's tool output: the run offers
  the ``final_result`` tool alongside the others.

Every answer is checked the same way: Pi's validator (its coercion and error texts)
against the schema, then conversion into ``T``. A final_result call that fails gets
the error as its tool result; a text answer that fails (not JSON, or not matching) is
answered with a follow-up message giving the errors; a plain text answer in tool mode
gets a follow-up asking for the tool. After ``output_retries`` failed attempts the
run gives up: it is aborted before its next request, and the result says why
(``output`` is then ``None``). pi-ai 0.85.0 has no structured output of its own; this
is pitrio's, built on Pi's options where Pi has them (``toolChoice``,
``constrainedSampling``).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Mapping
from typing import Any, Final, Generic, Literal, TypeAlias, TypeVar, final

import attrs

from ._errors import ArgumentTypeError, UsageError
from ._events import AgentEvent, ToolExecutionEnd, ToolResult, TurnEnd
from ._function_tools import _converter_for, _describe, _is_typeddict, json_schema_of
from ._messages import AssistantMessage, JSONValue, TextContent, ToolCall
from ._model import Model, StreamOptions
from ._signal import AbortSignal
from ._tools import AgentTool, ExecuteFn, ExecutionMode, ToolUpdateCallback
from ._validation import ToolArgumentsError, compile_validator

__all__ = ["FINAL_RESULT", "OutputCollector", "OutputMode"]

OutputT = TypeVar("OutputT")

OutputMode: TypeAlias = Literal["auto", "native", "tool"]
"""How ``Agent.run(output_type=...)`` asks for the output: ``"auto"`` (the API's native
structured output where it has one, else the tool), ``"native"`` (native; an API
without it is a usage error) or ``"tool"`` (the ``final_result`` tool)."""

_Strategy: TypeAlias = Literal["json_schema", "forced_tool", "tool"]

FINAL_RESULT: Final = "final_result"
_DESCRIPTION: Final = "The final response which ends this conversation"
_PROCESSED: Final = "Final result processed."
_ASK_FOR_TOOL: Final = (
    "Plain text responses are not permitted, please include your response in a tool call "
    f"to {FINAL_RESULT}."
)
_JSON_SCHEMA_APIS: Final = frozenset({"openai-completions", "openai-responses"})
_FORCED_TOOL_APIS: Final = frozenset({"anthropic-messages"})
_FENCE: Final = re.compile(r"\A\s*```(?:json)?\s*\n(.*?)\n?```\s*\Z", re.DOTALL)


def _is_object_type(tp: object) -> bool:
    return isinstance(tp, type) and (
        dataclasses.is_dataclass(tp) or attrs.has(tp) or _is_typeddict(tp)
    )


def _strategy(model: Model, mode: str, thinking: bool) -> _Strategy:
    if mode == "tool":
        return "tool"
    compat = model.compat or {}
    if model.api in _JSON_SCHEMA_APIS and (
        mode == "native" or compat.get("supportsJsonSchemaOutput") is not False
    ):
        return "json_schema"
    if model.api in _FORCED_TOOL_APIS:
        # Anthropic rejects a forced tool choice while extended thinking is on.
        thinks = (thinking and model.reasoning) or compat.get("supportsMidConvoEffort") is True
        return "tool" if thinks else "forced_tool"
    if mode == "native":
        msg = (
            f"output_mode='native': the model's API {model.api!r} has no native structured "
            "output in pitrio (openai-completions, openai-responses and anthropic-messages "
            "have); use output_mode='auto' or 'tool'"
        )
        raise UsageError(msg)
    return "tool"


@final
@attrs.frozen(kw_only=True)
class _FinalResultTool:
    """The ``final_result`` tool: a :class:`~pitrio.Tool` that also asks for Pi's
    JSON-schema constrained sampling (``constrainedSampling``, strict where possible)."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    execute_fn: ExecuteFn
    constrained_sampling: Mapping[str, JSONValue] = attrs.field(
        factory=lambda: {"type": "json_schema", "strict": "prefer"}
    )
    label: str = FINAL_RESULT
    execution_mode: ExecutionMode | None = None

    def prepare_arguments(self, arguments: JSONValue) -> JSONValue:
        return arguments

    async def execute(
        self, tool_call_id: str, params: Any, signal: AbortSignal, on_update: ToolUpdateCallback
    ) -> ToolResult:
        return await self.execute_fn(tool_call_id, params, signal, on_update)


@final
class OutputCollector(Generic[OutputT]):
    """How one run asks for its output (tools, stream options) and the listener that
    checks the answers and counts the retries."""

    def __init__(
        self,
        output_type: type[OutputT],
        retries: int,
        follow_up: Callable[[str], None],
        *,
        model: Model,
        mode: OutputMode = "auto",
        thinking: bool = False,
        has_tools: bool = False,
    ) -> None:
        given: object = retries  # checked at run time: the type is a promise only
        if isinstance(given, bool) or not isinstance(given, int) or given < 0:
            msg = f"output_retries must be an int of at least 0; got {retries!r}"
            raise UsageError(msg)
        if mode not in ("auto", "native", "tool"):
            msg = f"output_mode must be 'auto', 'native' or 'tool'; got {mode!r}"
            raise UsageError(msg)
        self.retries = retries
        self.failures = 0
        self.value: OutputT | None = None
        self.has_value = False
        self.error_message: str | None = None
        self._follow_up = follow_up
        self._wrapped = wrapped = not _is_object_type(output_type)
        schema = json_schema_of(output_type)
        if wrapped:
            schema = {
                "type": "object",
                "properties": {"response": schema},
                "required": ["response"],
                "additionalProperties": False,
            }
        self.schema = schema
        self._convert = _converter_for(output_type)
        doc = getattr(output_type, "__doc__", None) if not wrapped else None
        self._doc = None
        if doc and not doc.startswith(f"{getattr(output_type, '__name__', '')}("):
            self._doc = doc.strip()
        self.strategy = _strategy(model, mode, thinking)
        self.tools: tuple[AgentTool, ...] = ()
        self.response_format: dict[str, JSONValue] | None = None
        self.tool_choice: str | dict[str, JSONValue] | None = None
        if self.strategy == "json_schema":
            spec: dict[str, JSONValue] = {"name": FINAL_RESULT, "schema": schema, "strict": True}
            if self._doc is not None:
                spec["description"] = self._doc
            self.response_format = {"type": "json_schema", "json_schema": spec}
            self._validator = compile_validator(schema)
        else:
            self.tools = (self._final_result_tool(),)
            if self.strategy == "forced_tool":
                self.tool_choice = "any" if has_tools else {"type": "tool", "name": FINAL_RESULT}

    def _final_result_tool(self) -> _FinalResultTool:
        description = _DESCRIPTION if self._doc is None else f"{_DESCRIPTION}: {self._doc}"

        async def execute(
            tool_call_id: str, args: Any, signal: AbortSignal, on_update: ToolUpdateCallback
        ) -> ToolResult:
            try:
                value = self._value_of(args)
            except Exception as exc:
                msg = f"Invalid {FINAL_RESULT} arguments: {_describe(exc)}"
                raise ArgumentTypeError(msg) from None
            self.value = value
            self.has_value = True
            return ToolResult(content=(TextContent(text=_PROCESSED),), terminate=True)

        return _FinalResultTool(
            name=FINAL_RESULT, description=description, parameters=self.schema, execute_fn=execute
        )

    def _value_of(self, args: Any) -> OutputT:
        return self._convert(args["response"] if self._wrapped else args)  # type: ignore[return-value]  # converted into output_type

    def stream_options(self, base: StreamOptions) -> StreamOptions:
        """The run's request options: ``base`` with the output's ``response_format`` or
        ``tool_choice`` (a ``tool_choice`` the caller set is kept)."""
        changes: dict[str, Any] = {}
        if self.response_format is not None:
            changes["response_format"] = self.response_format
        if self.tool_choice is not None and base.tool_choice is None:
            changes["tool_choice"] = self.tool_choice
        return attrs.evolve(base, **changes) if changes else base

    def _give_up(self, text: str, signal: AbortSignal) -> None:
        self.error_message = (
            f"Output validation failed: {text} (after {self.failures} attempts; "
            f"output_retries={self.retries})"
        )
        signal.abort(self.error_message)

    def _check_text(self, text: str) -> str | None:
        """Take a native answer; returns what is wrong with it, or ``None``."""
        fenced = _FENCE.match(text)
        try:
            value = json.loads(fenced.group(1) if fenced else text)
        except ValueError as exc:
            return f"The answer is not valid JSON ({exc})."
        try:
            args = self._validator.validate(FINAL_RESULT, value)
        except ToolArgumentsError as exc:
            return "The answer does not match the output schema:\n" + "\n".join(
                f"  - {line}" for line in exc.errors
            )
        try:
            self.value = self._value_of(args)
        except Exception as exc:
            return f"The answer does not match the output schema: {_describe(exc)}"
        self.has_value = True
        return None

    def _failed(self, text: str, retry_message: str, signal: AbortSignal) -> None:
        self.failures += 1
        if self.failures > self.retries:
            self._give_up(text, signal)
        else:
            self._follow_up(retry_message)

    def __call__(self, event: AgentEvent, signal: AbortSignal) -> None:
        if type(event) is ToolExecutionEnd:
            if event.tool_name == FINAL_RESULT and event.is_error and self.tools:
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
                if self.strategy != "json_schema":
                    self._failed(
                        "the model answered without calling final_result", _ASK_FOR_TOOL, signal
                    )
                    return
                problem = self._check_text(message.text)
                if problem is not None:
                    self._failed(
                        "the answer did not match the output schema",
                        f"{problem}\n\nFix the errors and answer again with only the JSON value.",
                        signal,
                    )
