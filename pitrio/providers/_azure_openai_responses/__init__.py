"""The ``azure-openai-responses`` API: OpenAI's Responses endpoint on Azure OpenAI.

A port of pi-ai 0.85.0's ``api/azure-openai-responses.js`` with the parts of the OpenAI
SDK's ``AzureOpenAI`` client (6.40.0) that it relies on: the request goes to
``<base>/responses?api-version=<version>`` with the key in ``api-key``, the body names
the deployment as ``model`` (``_payload``: endpoint, deployment and body). The stream
is the Responses stream of :mod:`pitrio.providers._openai_responses` (its events,
processor and end checks), with Azure's texts (``Azure OpenAI API error (<status>):
...``, ``Azure OpenAI Responses stream ended without a stop reason``) and no
service-tier pricing. The ``azure-*`` fixtures of ``tests/providers/data/azure`` pin
the behaviour; the deliberate differences are in ``docs/deviations.md``
("azure-openai-responses").
"""

from __future__ import annotations

from functools import partial
from typing import Final, final

import httpx

from ..._messages import JSONValue
from ..._model import Context, Model, StreamOptions
from ..._stream import AssistantMessageEventStream
from .._openai_responses._background import apply_response_object
from .._openai_responses._events import ResponsesEventProcessor, _dispatch
from .._openai_responses._finish import check_done, format_error, template_message
from .._output import PartialMessage
from .._request import Exchange, HttpRequest, exchange_stream
from .._sse import ServerSentEvent
from ._payload import build_request

__all__ = ["stream_azure_openai_responses"]

_LABEL: Final = "Azure OpenAI Responses"
_ERROR_PREFIX: Final = "Azure OpenAI API error"


def stream_azure_openai_responses(
    client: httpx.AsyncClient, model: Model, context: Context, options: StreamOptions
) -> AssistantMessageEventStream:
    """Stream one Azure OpenAI Responses answer (pi-ai's ``streamSimple``).

    Returns at once; the request is made when the caller opens the stream with
    ``async with``. Failures and aborts end the stream with an ``error`` event (stop
    reason ``error`` or ``aborted``); nothing is raised.

    Args:
        client: the HTTP client (borrowed, not closed).
        model: a model whose ``api`` is ``"azure-openai-responses"``.
        context: system prompt, messages and tools.
        options: ``api_key`` (``AZURE_OPENAI_API_KEY``) and the common options; from
            ``options.extra``: ``azure_base_url``, ``azure_resource_name``,
            ``azure_api_version``, ``azure_deployment_name``, ``reasoning_summary`` and
            ``env`` (read before ``os.environ`` for ``AZURE_OPENAI_BASE_URL``,
            ``AZURE_OPENAI_RESOURCE_NAME``, ``AZURE_OPENAI_API_VERSION`` and
            ``AZURE_OPENAI_DEPLOYMENT_NAME_MAP``).
    """
    return exchange_stream(
        partial(_AzureExchange, context=context),
        client,
        model,
        options,
        template=template_message(model),
    )


@final
class _AzureExchange(Exchange):
    """One streamed Azure Responses request (``providers/_request.py`` runs it)."""

    api_label = _LABEL

    def __init__(
        self,
        stream: AssistantMessageEventStream,
        output: PartialMessage,
        model: Model,
        options: StreamOptions,
        *,
        context: Context,
    ) -> None:
        super().__init__(stream, output, model, options)
        self._context = context
        self._processor = ResponsesEventProcessor(
            output, stream.push, model, price_service_tier=False
        )

    def build_request(self) -> HttpRequest:
        request = build_request(self.model, self._context, self.options)
        return HttpRequest(url=request.url, headers=request.headers, body=request.body)

    def handle_sse(self, sse: ServerSentEvent) -> bool:
        return _dispatch(sse, self._processor)

    def handle_complete(self, body: JSONValue) -> None:
        if not isinstance(body, dict) or body.get("object") != "response":
            super().handle_complete(body)
        assert isinstance(body, dict)
        apply_response_object(self._processor, self.output, body)

    def end_of_events(self, terminal: bool) -> None:
        self._processor.finish()

    def check_end(self) -> None:
        check_done(self.output, _LABEL)

    def error_text(self, exc: Exception) -> str:
        return format_error(exc, _ERROR_PREFIX)
