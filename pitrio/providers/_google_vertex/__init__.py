"""The ``google-vertex`` API: Gemini on Google Cloud's Vertex AI (pi-ai 0.85.0).

A port of pi-ai's ``api/google-vertex.js``: the body, the stream and its events are the
``google-generative-ai`` API's (:mod:`pitrio.providers._google_generative_ai`: the same
``google-shared.js`` conversion under the same ``@google/genai`` 1.52.0 SDK); what
differs is where the request goes and how it authenticates (``_payload``): an API key
(``GOOGLE_CLOUD_API_KEY``) in ``x-goog-api-key``, or application default credentials
(``_auth``: an ``authorized_user`` or ``service_account`` file traded for an OAuth
access token, sent as ``Authorization: Bearer``) with the project and location in the
URL. A stream without a finish reason ends with ``Google Vertex stream ended without a
finish reason``. Deliberate differences from pi-ai: ``docs/deviations.md``
("google-vertex").
"""

from __future__ import annotations

from functools import partial
from typing import final

import attrs
import httpx

from ..._model import Context, Model, StreamOptions
from ..._stream import AssistantMessageEventStream
from .._google_generative_ai import _GoogleExchange
from .._request import ABORTED_BEFORE_HEADERS, HttpRequest, exchange_stream
from ._auth import fetch_access_token
from ._payload import build_request

__all__ = ["stream_google_vertex"]


@final
class _VertexExchange(_GoogleExchange):
    """One Vertex ``streamGenerateContent`` request (``providers/_request.py`` runs it)."""

    api_label = "Google Vertex"
    no_finish_text = "Google Vertex stream ended without a finish reason"
    _adc = False  # set by build_request: the request needs an access token

    def build_request(self) -> HttpRequest:
        request = build_request(self.model, self._context, self.options)
        self._adc = request.adc
        return HttpRequest(url=request.url, headers=request.headers, body=request.body)

    async def authorize(self, client: httpx.AsyncClient, request: HttpRequest) -> HttpRequest:
        if not self._adc:
            return request
        token = await fetch_access_token(client, self.options)
        headers = dict(request.headers)
        present = {name.lower() for name in headers}
        for name, value in token.headers().items():
            if name.lower() not in present:  # the SDK keeps a header the caller set
                headers[name] = value
        return attrs.evolve(request, headers=headers)


def stream_google_vertex(
    client: httpx.AsyncClient, model: Model, context: Context, options: StreamOptions
) -> AssistantMessageEventStream:
    """Stream one Gemini answer from Vertex AI as pi-ai 0.85.0's ``streamSimple`` does.

    Returns at once; the request (and, for application default credentials, the token
    request before it) is made by the stream's producer when the stream is opened
    (``async with``). Failures end the stream with an ``error`` event; an abort with
    stop reason ``aborted``.

    Args:
        client: the HTTP client (borrowed, not closed; the token request uses it too).
        model: a ``google-vertex`` model; a ``base_url`` without ``{location}`` is used
            as the API root (the catalog's ``https://{location}-aiplatform...`` is not).
        context: system prompt, messages and tools.
        options: ``api_key`` (``GOOGLE_CLOUD_API_KEY``; none, ``<authenticated>`` or
            ``gcp-vertex-credentials`` means application default credentials from
            ``GOOGLE_APPLICATION_CREDENTIALS`` or gcloud's file, with
            ``GOOGLE_CLOUD_PROJECT`` and ``GOOGLE_CLOUD_LOCATION``), ``reasoning``,
            ``thinking_budgets``, ``max_tokens``, ``temperature``, ``tool_choice``,
            ``headers``, ``max_retries``, ``timeout``, ``on_payload``, ``on_response``;
            from ``options.extra``: ``project``, ``location`` and ``env`` (read before
            ``os.environ``).
    """
    return exchange_stream(
        partial(_VertexExchange, context=context),
        client,
        model,
        options,
        abort_message=ABORTED_BEFORE_HEADERS,
    )
