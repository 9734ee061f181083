"""How a Responses stream ends, for the streamed request, background mode and a fetch.

The end of pi-ai 0.85.0's ``streamOpenAIResponses``: the empty partial a stream starts
from (:func:`template_message`), the checks once the events are over
(:func:`check_done`: no stop reason, or a response that ended in an error), the
``done`` event (:func:`push_done`), and an exception's ``errorMessage``
(:func:`format_error`, pi-ai's ``formatOpenAIResponsesError``:
``OpenAI API error (<status>): ...``).
"""

from __future__ import annotations

from typing import Final

from ..._events import DoneEvent
from ..._messages import AssistantMessage
from ..._model import Model, StreamOptions
from ..._stream import AssistantMessageEventStream
from .._http import format_provider_error
from .._output import PartialMessage
from .._request import ABORTED_AFTER_HEADERS, ProviderFailure

__all__ = ["API", "ERROR_PREFIX", "check_done", "format_error", "push_done", "template_message"]


API: Final = "openai-responses"
ERROR_PREFIX: Final = "OpenAI API error"
"""pi-ai's prefix for HTTP errors of this API: ``OpenAI API error (<status>): ...``."""


def template_message(model: Model) -> AssistantMessage:
    """The empty partial a stream of ``model`` starts from."""
    return AssistantMessage(
        api=model.api, provider=model.provider, model=model.id, stop_reason="pending"
    )


def check_done(output: PartialMessage, api_label: str = "OpenAI Responses") -> None:
    """pi-ai's checks once the events are over (``api_label`` names the API in the text
    for a missing stop reason).

    Raises:
        ProviderFailure: no stop reason came, or the response ended in an error
            (``Response incomplete: <reason>`` and the like).
    """
    reason = output.stop_reason
    if reason == "pending":
        msg = f"{api_label} stream ended without a stop reason"
        raise ProviderFailure(msg)
    if reason in ("aborted", "error"):
        raise ProviderFailure(output.error_message or "An unknown error occurred")


def push_done(
    stream: AssistantMessageEventStream, output: PartialMessage, options: StreamOptions
) -> None:
    """:func:`check_done` (and the signal not aborted), then the ``done`` event.

    Raises:
        ProviderFailure: see :func:`check_done`; ``Request was aborted``.
    """
    if options.signal is not None and options.signal.aborted:
        raise ProviderFailure(ABORTED_AFTER_HEADERS)
    check_done(output)
    stream.push(DoneEvent(reason=output.stop_reason, message=output.snapshot()))  # type: ignore[arg-type]  # stop, length, toolUse or deferred


def format_error(exc: BaseException, prefix: str = ERROR_PREFIX) -> str:
    """An exception's ``errorMessage`` (pi-ai's ``formatOpenAIResponsesError``; ``prefix``
    names the API: ``Azure OpenAI API error`` for pi-ai's ``formatAzureOpenAIError``)."""
    if isinstance(exc, ProviderFailure):
        return str(exc)
    return format_provider_error(exc, prefix) or type(exc).__name__
