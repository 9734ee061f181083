"""Codex stream events (from SSE or a WebSocket) into the Responses event processor.

pi-ai 0.85.0's ``mapCodexEvents`` in front of the shared ``processResponsesStream``
(:class:`~pitrio.providers._openai_responses._events.ResponsesEventProcessor`): an
``error`` event or ``response.failed`` fails the request with Codex's texts,
``response.done`` / ``response.incomplete`` end it as ``response.completed`` (an
unknown status read as none, ``end_turn`` kept), and the response's ``default``
service tier is priced as the requested ``flex`` or ``priority``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, final

from ..._events import AssistantMessageEvent, DoneEvent
from ..._messages import JSONValue
from ..._model import Model, StreamOptions
from ..._stream import AssistantMessageEventStream
from .._json import json_parse, json_stringify
from .._openai_responses._events import ResponsesEventProcessor
from .._output import PartialMessage
from .._request import ABORTED_AFTER_HEADERS, ProviderFailure

__all__ = ["CodexApiError", "CodexEvents", "CodexProtocolError", "parse_event", "push_done"]

_TERMINAL: Final = frozenset({"response.done", "response.completed", "response.incomplete"})
_STATUSES: Final = frozenset(
    {"completed", "incomplete", "failed", "cancelled", "queued", "in_progress"}
)


class CodexApiError(ProviderFailure):
    """An ``error`` event or ``response.failed`` from the Codex backend (not a transport
    failure: the request is not retried over SSE)."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


class CodexProtocolError(ProviderFailure):
    """An event that is not JSON (not a transport failure either)."""


def parse_event(data: str, transport: str) -> JSONValue:
    """``JSON.parse`` of one event's data.

    Raises:
        CodexProtocolError: ``Invalid Codex <transport> JSON: <reason>``.
    """
    try:
        return json_parse(data)
    except ValueError as exc:
        msg = f"Invalid Codex {transport} JSON: {exc}"
        raise CodexProtocolError(msg) from None


@final
class CodexEvents:
    """Feeds decoded Codex events to a :class:`ResponsesEventProcessor`.

    Args:
        output: the message being built.
        push: where the events go.
        model: for pricing.
        service_tier: the requested tier.
        on_first_event: called before the first event is handled (the WebSocket
            transport's ``start`` event).
    """

    __slots__ = ("_first", "_on_first_event", "_output", "_processor", "_service_tier", "done")

    def __init__(
        self,
        output: PartialMessage,
        push: Callable[[AssistantMessageEvent], None],
        model: Model,
        *,
        service_tier: str | None,
        on_first_event: Callable[[], None] | None = None,
    ) -> None:
        self._output = output
        self._service_tier = service_tier
        self._processor = ResponsesEventProcessor(output, push, model, service_tier=service_tier)
        self._on_first_event = on_first_event
        self._first = True
        self.done = False
        """Whether the terminal event came (later events are not read)."""

    @property
    def started(self) -> bool:
        """Whether an event reached the processor (the WebSocket's ``start`` was pushed)."""
        return not self._first

    def handle(self, event: JSONValue) -> bool:
        """Handle one decoded event; ``True`` at the terminal one.

        Raises:
            CodexApiError: an ``error`` event or ``response.failed``.
            ProviderFailure: what the processor raises.
        """
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            return False
        kind = event["type"]
        if kind == "error":
            code, message = _event_error(event)
            text = message or code or json_stringify(event)
            msg = f"Codex error: {text}"
            raise CodexApiError(msg, code)
        if kind == "response.failed":
            response = event.get("response")
            error = response.get("error") if isinstance(response, dict) else None
            error = error if isinstance(error, dict) else {}
            code = error.get("code")
            message = error.get("message")
            raise CodexApiError(
                message if message and isinstance(message, str) else "Codex response failed",
                code if isinstance(code, str) else None,
            )
        if kind in _TERMINAL:
            event = self._completed(event)
        self._start()
        self._processor.handle(event)
        if kind in _TERMINAL:
            self.done = True
        return self.done

    def finish(self) -> None:
        """The events are over (raises when no terminal response event came)."""
        self._processor.finish()

    def _start(self) -> None:
        if self._first:
            self._first = False
            if self._on_first_event is not None:
                self._on_first_event()

    def _completed(self, event: dict[str, Any]) -> dict[str, JSONValue]:
        response = event.get("response")
        if isinstance(response, dict):
            end_turn = response.get("end_turn")
            if isinstance(end_turn, bool):
                self._output.end_turn = end_turn
            response = dict(response)
            status = response.get("status")
            if not (isinstance(status, str) and status in _STATUSES):
                response.pop("status", None)
            # resolveCodexServiceTier: a "default" answer to a flex or priority request
            # is priced as requested.
            if response.get("service_tier") == "default" and self._service_tier in (
                "flex",
                "priority",
            ):
                response["service_tier"] = self._service_tier
        return {**event, "type": "response.completed", "response": response}


def _event_error(event: dict[str, Any]) -> tuple[str | None, str | None]:
    nested = event.get("error")
    nested = nested if isinstance(nested, dict) else {}
    code = event.get("code") if isinstance(event.get("code"), str) else nested.get("code")
    message = event.get("message")
    if not isinstance(message, str):
        message = nested.get("message")
    return (
        code if isinstance(code, str) else None,
        message if isinstance(message, str) else None,
    )


def push_done(
    stream: AssistantMessageEventStream, output: PartialMessage, options: StreamOptions
) -> None:
    """pi-ai's end of a request (both transports): aborted, ``assertSuccessfulOutput``,
    then the ``done`` event.

    Raises:
        ProviderFailure: ``Request was aborted``, ``Codex stream ended without a stop
            reason``, or the error the response ended in.
    """
    if options.signal is not None and options.signal.aborted:
        raise ProviderFailure(ABORTED_AFTER_HEADERS)
    if output.stop_reason == "pending":
        msg = "Codex stream ended without a stop reason"
        raise ProviderFailure(msg)
    if output.stop_reason in ("error", "aborted"):
        raise ProviderFailure(output.error_message or "An unknown error occurred")
    message = output.snapshot()
    stream.push(DoneEvent(reason=message.stop_reason, message=message))  # type: ignore[arg-type]  # stop, length or toolUse here
