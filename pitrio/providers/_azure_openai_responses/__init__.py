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
from typing import final

import httpx

from ..._model import Context, Model, StreamOptions
from ..._stream import AssistantMessageEventStream
from .._openai_responses import _ResponsesExchange
from .._openai_responses._finish import template_message
from .._request import HttpRequest, exchange_stream
from ._payload import build_request

__all__ = ["stream_azure_openai_responses"]

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
class _AzureExchange(_ResponsesExchange):
    """One streamed Azure Responses request (``providers/_request.py`` runs it)."""

    api_label = "Azure OpenAI Responses"
    error_prefix = "Azure OpenAI API error"
    prices_service_tier = False

    def build_request(self) -> HttpRequest:
        request = build_request(self.model, self._context, self.options)
        return HttpRequest(url=request.url, headers=request.headers, body=request.body)
