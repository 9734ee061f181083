"""Spans of a harness's runs, built from its events.

:func:`instrument` subscribes to a :class:`~pitrio.harness.Harness` and turns its events
into Pi's span vocabulary (pi-agent-core 0.85.0, ``harness/telemetry.js``:
``AI_TELEMETRY_SCHEMA`` and ``HARNESS_TELEMETRY_SCHEMA``)::

    pi.harness.run                 agent_start .. settled (retries included)
    ├── pi.harness.turn            turn_start .. turn_end
    │   ├── pi.ai.request          turn_start .. the assistant message's end
    │   └── pi.harness.tool        tool_execution_start .. _end (parallel calls: siblings)
    ├── pi.harness.sleep           auto_retry_start .. the next attempt
    └── pi.harness.step            compaction_start .. _end inside a run (kind compaction)
    pi.harness.compaction          a manual compact(), a root span

The kernel and the providers are untouched: the listener is a plain function (no
checkpoint, the harness's fast path), and spans are started from the context it is handed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, final

import trio

from .. import (
    AgentEnd,
    AgentStart,
    AssistantMessage,
    ImageContent,
    MessageEnd,
    MessageStart,
    MessageUpdate,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolExecutionEnd,
    ToolExecutionStart,
    ToolResultMessage,
    TurnEnd,
    TurnStart,
    UserMessage,
)
from ..harness import AutoRetryEnd, AutoRetryStart, CompactionEnd, CompactionStart, Settled
from ._context import (
    NOOP_TELEMETRY_CONTEXT,
    SpanAttributes,
    SpanScope,
    SpanStatus,
    TelemetryContext,
    TelemetrySpan,
)

if TYPE_CHECKING:
    from ..harness import Harness, HarnessEvent

__all__ = ["CAPTURE_CONTENT_ENV", "instrument"]

CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The environment variable that opts in to message content (OpenTelemetry's name)."""

_CONTENT_ON = frozenset({"true", "1", "span_only", "event_only", "span_and_event"})

LANE = "main"
"""The lane name on every span: pitrio's harness runs one lane."""


def instrument(
    harness: Harness,
    telemetry: TelemetryContext,
    *,
    capture_content: bool | None = None,
) -> Callable[[], None]:
    """Record the harness's runs as spans under ``telemetry``; returns a function that stops.

    Args:
        harness: the harness to observe (its listeners; nothing else changes).
        telemetry: where the root spans go (:class:`InMemoryTelemetryContext`,
            :class:`OpenTelemetryContext`, or any :class:`TelemetryContext`).
        capture_content: also record messages, tool arguments and results (JSON strings
            in ``pi.ai.input.messages``, ``pi.ai.output.messages``, ``pi.tool.arguments``
            and ``pi.tool.result``). ``None``: on when the environment variable
            ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is ``true`` (or one of
            OpenTelemetry's ``span_only``, ``event_only``, ``span_and_event``).

    With :data:`NOOP_TELEMETRY_CONTEXT` (telemetry switched off) nothing is subscribed:
    an application can always call ``instrument`` and pay nothing while it is off.
    """
    if telemetry is NOOP_TELEMETRY_CONTEXT:
        return _nothing
    if capture_content is None:
        capture_content = os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() in _CONTENT_ON
    recorder = _Recorder(harness, telemetry, capture_content)
    return harness.subscribe(recorder)


def _nothing() -> None:
    """What stops an instrumentation that recorded nothing."""


_Open = tuple[SpanScope, TelemetrySpan]


def _open(parent: TelemetryContext, name: str, attributes: SpanAttributes) -> _Open:
    scope = parent.start_span(name, attributes)
    return scope, scope.__enter__()


def _close(opened: _Open | None) -> None:
    if opened is not None:
        opened[0].__exit__(None, None, None)


@final
class _Recorder:
    """The listener: one open span per level, keyed as the events are."""

    __slots__ = (
        "_chunks",
        "_content",
        "_first_chunk",
        "_handlers",
        "_harness",
        "_operation",
        "_operations",
        "_request",
        "_request_start",
        "_run",
        "_sleep",
        "_step",
        "_telemetry",
        "_tools",
        "_turn",
        "_turn_id",
        "_turns",
    )

    def __init__(self, harness: Harness, telemetry: TelemetryContext, content: bool) -> None:
        self._harness = harness
        self._telemetry = telemetry
        self._content = content
        self._operations = 0
        self._operation = ""
        self._turns = 0
        self._turn_id = ""
        self._run: _Open | None = None
        self._turn: _Open | None = None
        self._request: _Open | None = None
        self._request_start = 0.0
        self._chunks = 0
        self._first_chunk = False
        self._tools: dict[str, _Open] = {}
        self._sleep: _Open | None = None
        self._step: _Open | None = None
        self._handlers: dict[type, Callable[[Any], None]] = {
            AgentStart: self._agent_start,
            TurnStart: self._turn_start,
            MessageStart: self._message_start,
            MessageUpdate: self._message_update,
            MessageEnd: self._message_end,
            ToolExecutionStart: self._tool_start,
            ToolExecutionEnd: self._tool_end,
            TurnEnd: self._turn_end,
            AgentEnd: self._agent_end,
            AutoRetryStart: self._retry_start,
            AutoRetryEnd: self._retry_end,
            CompactionStart: self._compaction_start,
            CompactionEnd: self._compaction_end,
            Settled: self._settled,
        }

    def __call__(self, event: HarnessEvent) -> None:
        handler = self._handlers.get(type(event))
        if handler is not None:
            try:
                handler(event)
            except Exception:
                # Recording is passive (Pi's adapter contract): a failing adapter loses its
                # span, never the run. (try costs nothing here until something raises.)
                return

    def _new_operation(self) -> str:
        self._operations += 1
        self._operation = f"op-{self._operations}"
        return self._operation

    def _session_id(self) -> str:
        session = self._harness.session
        return session.id if session is not None else ""

    # -- run ------------------------------------------------------------------------------

    def _agent_start(self, event: AgentStart) -> None:
        if self._run is None:
            self._run = _open(
                self._telemetry,
                "pi.harness.run",
                {
                    "pi.session.id": self._session_id(),
                    "pi.lane.name": LANE,
                    "pi.operation.id": self._new_operation(),
                    "pi.operation.recovery": False,
                    "pi.operation.kind": "run",
                },
            )
        if self._sleep is not None:
            self._sleep[1].set_attributes({"pi.sleep.outcome": "elapsed"})
            _close(self._sleep)
            self._sleep = None

    def _agent_end(self, event: AgentEnd) -> None:
        # A run's attempts end in agent_end; the run span ends at settled (after retries
        # and compactions), so only what a cut-off attempt left open is closed here.
        self._close_turn()

    def _settled(self, event: Settled) -> None:
        self._close_turn()
        if self._sleep is not None:
            self._sleep[1].set_attributes({"pi.sleep.outcome": "aborted"})
            _close(self._sleep)
            self._sleep = None
        run = self._run
        if run is None:
            return
        message = event.message
        stop = message.stop_reason if message is not None else "stop"
        if stop == "aborted":
            run[1].set_attributes({"pi.operation.outcome": "aborted"})
        elif stop == "error":
            run[1].set_attributes({"pi.operation.outcome": "failed", "pi.error.type": "error"})
            run[1].set_status(
                SpanStatus(
                    status="error",
                    error_name="ProviderError",
                    error_message=message.error_message if message is not None else None,
                )
            )
        else:
            run[1].set_attributes({"pi.operation.outcome": "completed"})
        _close(run)
        self._run = None

    # -- turn -----------------------------------------------------------------------------

    def _turn_start(self, event: TurnStart) -> None:
        self._close_turn()
        parent = self._run[1] if self._run is not None else self._telemetry
        self._turns += 1
        self._turn_id = f"turn-{self._turns}"
        self._turn = _open(
            parent,
            "pi.harness.turn",
            {
                "pi.lane.name": LANE,
                "pi.operation.id": self._operation,
                "pi.turn.id": self._turn_id,
            },
        )
        # Each turn opens with its model request: the span starts here so that it covers
        # the time to the first streamed event too.
        self._open_request()

    def _turn_end(self, event: TurnEnd) -> None:
        self._close_turn()

    def _close_turn(self) -> None:
        if self._request is not None:
            _close(self._request)
            self._request = None
        for opened in self._tools.values():
            _close(opened)
        self._tools.clear()
        _close(self._turn)
        self._turn = None

    def _parent(self) -> TelemetryContext:
        if self._turn is not None:
            return self._turn[1]
        if self._run is not None:
            return self._run[1]
        return self._telemetry

    # -- request --------------------------------------------------------------------------

    def _open_request(self) -> None:
        model = self._harness.model
        self._request = _open(
            self._parent(),
            "pi.ai.request",
            {
                "pi.ai.operation": "stream",
                "pi.ai.provider": model.provider,
                "pi.ai.model": model.id,
                "pi.ai.api": model.api,
                "pi.ai.streaming": True,
            },
        )
        self._request_start = trio.current_time()
        self._chunks = 0
        self._first_chunk = False

    def _message_start(self, event: MessageStart) -> None:
        if not isinstance(event.message, AssistantMessage):
            return
        if self._request is None:
            self._open_request()
        if self._content and self._request is not None:
            # The context as the model is sent it (the assistant message not yet added).
            messages = [_message_json(m) for m in self._harness.messages]
            self._request[1].set_attributes({"pi.ai.input.messages": _json(messages)})

    def _message_update(self, event: MessageUpdate) -> None:
        if self._request is None:
            return
        self._chunks += 1
        if not self._first_chunk:
            self._first_chunk = True
            elapsed = (trio.current_time() - self._request_start) * 1000
            self._request[1].set_attributes({"pi.ai.stream.time_to_first_chunk_ms": elapsed})

    def _message_end(self, event: MessageEnd) -> None:
        message = event.message
        request = self._request
        if request is None or not isinstance(message, AssistantMessage):
            return
        span = request[1]
        usage = message.usage
        stop = "tool_use" if message.stop_reason == "toolUse" else message.stop_reason
        span.set_attributes(
            {
                "pi.ai.response.model": message.response_model or message.model or None,
                "pi.ai.response.id": message.response_id,
                "pi.ai.response.stop_reason": stop,
                "pi.ai.usage.input_tokens": usage.input,
                "pi.ai.usage.output_tokens": usage.output,
                "pi.ai.usage.cache_read_tokens": usage.cache_read,
                "pi.ai.usage.cache_write_tokens": usage.cache_write,
                "pi.ai.usage.reasoning_tokens": usage.reasoning,
                "pi.ai.usage.total_tokens": usage.total_tokens,
                "pi.ai.usage.cost": usage.cost.total,
                "pi.ai.stream.chunk_count": self._chunks,
            }
        )
        if self._content:
            span.set_attributes({"pi.ai.output.messages": _json([_message_json(message)])})
        if message.stop_reason in ("error", "aborted"):
            name = "ProviderError" if message.stop_reason == "error" else "AbortError"
            span.set_attributes({"pi.ai.error.type": name})
            span.set_status(
                SpanStatus(status="error", error_name=name, error_message=message.error_message)
            )
        _close(request)
        self._request = None

    # -- tools ----------------------------------------------------------------------------

    def _tool_start(self, event: ToolExecutionStart) -> None:
        attributes: dict[str, Any] = {
            "pi.lane.name": LANE,
            "pi.operation.id": self._operation,
            "pi.turn.id": self._turn_id if self._turn is not None else None,
            "pi.tool.name": event.tool_name,
            "pi.tool.call_id": event.tool_call_id,
            "pi.tool.replay": "never",
            "pi.tool.recovery": False,
        }
        method = _mcp_method(event.tool_name)
        if method is not None:
            attributes["pi.mcp.method"] = method
        if self._content:
            attributes["pi.tool.arguments"] = _json(event.args)
        self._tools[event.tool_call_id] = _open(self._parent(), "pi.harness.tool", attributes)

    def _tool_end(self, event: ToolExecutionEnd) -> None:
        opened = self._tools.pop(event.tool_call_id, None)
        if opened is None:
            return
        span = opened[1]
        ended: dict[str, Any] = {"pi.tool.is_error": event.is_error}
        details = event.result.details
        if isinstance(details, dict) and isinstance(details.get("mcp"), dict):
            for key, value in details["mcp"].items():
                if key in _MCP_KEYS and isinstance(value, str):
                    ended[f"pi.mcp.{key}"] = value
        span.set_attributes(ended)
        if self._content:
            span.set_attributes(
                {"pi.tool.result": _json([_part_json(c) for c in event.result.content])}
            )
        if event.is_error:
            text = "".join(c.text for c in event.result.content if isinstance(c, TextContent))
            span.set_status(SpanStatus(status="error", error_name="ToolError", error_message=text))
        _close(opened)

    # -- retry ----------------------------------------------------------------------------

    def _retry_start(self, event: AutoRetryStart) -> None:
        if self._run is None:
            return
        self._run[1].add_event(
            "pi.harness.retry_scheduled",
            {"pi.step.attempt": event.attempt, "pi.sleep.delay_ms": event.delay * 1000},
        )
        _close(self._sleep)
        self._sleep = _open(
            self._run[1],
            "pi.harness.sleep",
            {"pi.operation.id": self._operation, "pi.sleep.delay_ms": event.delay * 1000},
        )

    def _retry_end(self, event: AutoRetryEnd) -> None:
        if self._sleep is not None:
            self._sleep[1].set_attributes({"pi.sleep.outcome": "aborted"})
            _close(self._sleep)
            self._sleep = None
        if self._run is not None:
            self._run[1].add_event(
                "pi.harness.retry_end",
                {"pi.step.attempt": event.attempt, "pi.retry.success": event.success},
            )

    # -- compaction -----------------------------------------------------------------------

    def _compaction_start(self, event: CompactionStart) -> None:
        _close(self._step)
        if self._run is not None:
            self._step = _open(
                self._run[1],
                "pi.harness.step",
                {
                    "pi.lane.name": LANE,
                    "pi.operation.id": self._operation,
                    "pi.step.kind": "compaction",
                    "pi.step.attempt": 1,
                    "pi.compaction.reason": event.reason,
                },
            )
        else:
            self._step = _open(
                self._telemetry,
                "pi.harness.compaction",
                {
                    "pi.session.id": self._session_id(),
                    "pi.lane.name": LANE,
                    "pi.operation.id": self._new_operation(),
                    "pi.operation.recovery": False,
                    "pi.operation.kind": "compaction",
                },
            )

    def _compaction_end(self, event: CompactionEnd) -> None:
        step = self._step
        if step is None:
            return
        span = step[1]
        if self._run is not None:
            outcome = {"completed": "succeeded", "declined": "succeeded"}.get(
                event.status, event.status
            )
            span.set_attributes({"pi.step.outcome": outcome})
        else:
            span.set_attributes({"pi.operation.outcome": event.status})
        if event.status == "failed":
            span.set_status(
                SpanStatus(
                    status="error", error_name="CompactionError", error_message=event.error_message
                )
            )
        _close(step)
        self._step = None


# -- content (OpenTelemetry GenAI's message JSON) ----------------------------------------


_MCP_KEYS = frozenset(("server", "tool", "method", "transport", "protocol_version", "session_id"))


def _mcp_method(tool_name: str) -> str | None:
    """The MCP method a call of ``tool_name`` makes, by pitrio.mcp's names
    (``mcp__SERVER__TOOL``: ``tools/call``; ``mcp__read_resource``: ``resources/read``)."""
    if not tool_name.startswith("mcp__"):
        return None
    if tool_name == "mcp__read_resource":
        return "resources/read"
    return "tools/call" if "__" in tool_name[5:] else None


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _part_json(block: object) -> dict[str, Any]:
    if isinstance(block, TextContent):
        return {"type": "text", "content": block.text}
    if isinstance(block, ThinkingContent):
        return {"type": "reasoning", "content": block.thinking}
    if isinstance(block, ToolCall):
        return {
            "type": "tool_call",
            "id": block.id,
            "name": block.name,
            "arguments": block.arguments,
        }
    if isinstance(block, ImageContent):
        return {"type": "blob", "modality": "image", "mime_type": block.mime_type}
    return {"type": type(block).__name__}


def _parts(content: str | Sequence[object]) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "content": content}]
    return [_part_json(block) for block in content]


_FINISH = {"toolUse": "tool_call", "stop": "stop", "length": "length"}


def _message_json(message: object) -> dict[str, Any]:
    if isinstance(message, UserMessage):
        return {"role": "user", "parts": _parts(message.content)}
    if isinstance(message, AssistantMessage):
        return {
            "role": "assistant",
            "parts": _parts(message.content),
            "finish_reason": _FINISH.get(message.stop_reason, "error"),
        }
    if isinstance(message, ToolResultMessage):
        return {
            "role": "tool",
            "parts": [
                {
                    "type": "tool_call_response",
                    "id": message.tool_call_id,
                    "response": _parts(message.content),
                }
            ],
        }
    role = getattr(message, "role", "user")
    return {"role": str(role), "parts": []}
