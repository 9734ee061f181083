"""An ``azure-openai-responses`` request: the Azure endpoint, the deployment, the body.

The request side of pi-ai 0.85.0's ``api/azure-openai-responses.js``: where the request
goes (``resolveAzureConfig``: ``azure_base_url`` or ``AZURE_OPENAI_BASE_URL``, else
``https://<AZURE_OPENAI_RESOURCE_NAME>.openai.azure.com/openai/v1``, else
``model.base_url``; an Azure host's bare path becomes ``/openai/v1``), the API version
(``?api-version=``, default ``v1``), the deployment sent as ``model``
(``azure_deployment_name`` or ``AZURE_OPENAI_DEPLOYMENT_NAME_MAP``'s
``model=deployment`` pairs, else the model id), the ``AzureOpenAI`` SDK's ``api-key``
header, and ``buildParams`` (the Responses body of :mod:`.._openai_responses._payload`
with Azure's differences: no cache-retention or service-tier fields, strict tools by
default, no provider-specific reasoning cases).

The request options this API reads from ``options.extra`` (pi-ai's ``stream`` options):
``azure_base_url``, ``azure_resource_name``, ``azure_api_version``,
``azure_deployment_name``, and ``env`` (a scoped environment read before
``os.environ``).
"""

from __future__ import annotations

from typing import Final
from urllib.parse import quote, urlsplit, urlunsplit

import attrs

from ..._model import Context, Model, StreamOptions
from .._http import merge_headers, pi_user_agent, require_api_key
from .._openai_responses._payload import JSONObject, convert_messages, convert_tools
from .._options import clamp_max_tokens_to_context, clamp_thinking_level, provider_env
from .._request import ProviderFailure

__all__ = [
    "AzureRequest",
    "build_body",
    "build_request",
    "deployment_name",
    "resolve_endpoint",
]

_DEFAULT_API_VERSION: Final = "v1"
_TOOL_CALL_PROVIDERS: Final = frozenset(
    {"openai", "openai-codex", "opencode", "azure-openai-responses"}
)
_AZURE_HOSTS: Final = (".openai.azure.com", ".cognitiveservices.azure.com", ".ai.azure.com")
_MIN_OUTPUT_TOKENS: Final = 16
_PROMPT_CACHE_KEY_MAX_CHARS: Final = 64


@attrs.frozen(kw_only=True)
class AzureRequest:
    """A ``POST <base>/responses?api-version=<v>`` request, ready to send."""

    url: str
    headers: dict[str, str]
    body: JSONObject


def _extra(options: StreamOptions, key: str) -> str | None:
    value = options.extra.get(key)
    return value if isinstance(value, str) and value else None


def build_request(model: Model, context: Context, options: StreamOptions) -> AzureRequest:
    """The request pi-ai's ``streamSimple`` sends for this model, context and options.

    Raises:
        MissingApiKeyError: no ``options.api_key``.
        ProviderFailure: no base URL anywhere, or one that is no URL (pi-ai's texts).
    """
    deployment = deployment_name(model, options)
    api_key = require_api_key(model.provider, options.api_key, None)
    base_url, api_version = resolve_endpoint(model, options)
    client_headers: dict[str, str | None] = {"User-Agent": pi_user_agent()}
    client_headers.update(model.headers or {})
    client_headers.update(options.headers or {})
    headers = merge_headers(
        {"Accept": "application/json"},
        {"api-key": api_key},
        client_headers,
        {"Content-Type": "application/json"},
    )
    url = f"{base_url}/responses?api-version={quote(api_version, safe='')}"
    return AzureRequest(
        url=url, headers=headers, body=build_body(model, context, options, deployment)
    )


def deployment_name(model: Model, options: StreamOptions) -> str:
    """``azure_deployment_name``, else the model's entry in
    ``AZURE_OPENAI_DEPLOYMENT_NAME_MAP`` (``id=deployment,id=deployment``), else its id."""
    given = _extra(options, "azure_deployment_name")
    if given:
        return given
    mapping: dict[str, str] = {}
    for entry in (provider_env("AZURE_OPENAI_DEPLOYMENT_NAME_MAP", options) or "").split(","):
        pair = entry.strip().split("=")[:2]  # JavaScript's split("=", 2)
        if len(pair) == 2 and pair[0] and pair[1]:
            mapping[pair[0].strip()] = pair[1].strip()
    return mapping.get(model.id) or model.id


def resolve_endpoint(model: Model, options: StreamOptions) -> tuple[str, str]:
    """``(base_url, api_version)`` as pi-ai's ``resolveAzureConfig`` finds them.

    Raises:
        ProviderFailure: no base URL anywhere, or one that is no URL.
    """
    api_version = (
        _extra(options, "azure_api_version")
        or provider_env("AZURE_OPENAI_API_VERSION", options)
        or _DEFAULT_API_VERSION
    )
    base_url = (_extra(options, "azure_base_url") or "").strip() or (
        provider_env("AZURE_OPENAI_BASE_URL", options) or ""
    ).strip()
    if not base_url:
        resource = _extra(options, "azure_resource_name") or provider_env(
            "AZURE_OPENAI_RESOURCE_NAME", options
        )
        if resource:
            base_url = f"https://{resource}.openai.azure.com/openai/v1"
    if not base_url:
        base_url = model.base_url
    if not base_url:
        msg = (
            "Azure OpenAI base URL is required. Set AZURE_OPENAI_BASE_URL or "
            "AZURE_OPENAI_RESOURCE_NAME, or pass azureBaseUrl, azureResourceName, or "
            "model.baseUrl."
        )
        raise ProviderFailure(msg)
    return _normalize_base_url(base_url), api_version


def _normalize_base_url(base_url: str) -> str:
    """``normalizeAzureBaseUrl``: an Azure host with no path (or ``/openai``, or
    ``/openai/v1/responses``) gets ``/openai/v1``; no trailing slash."""
    trimmed = base_url.strip().rstrip("/")
    parts = urlsplit(trimmed)
    if not parts.scheme or not parts.netloc:
        msg = f"Invalid Azure OpenAI base URL: {base_url}"
        raise ProviderFailure(msg)
    host = (parts.hostname or "").lower()
    path = parts.path.rstrip("/")
    query = parts.query
    if host.endswith(_AZURE_HOSTS) and path in ("", "/openai", "/openai/v1/responses"):
        path, query = "/openai/v1", ""
    return urlunsplit((parts.scheme.lower(), parts.netloc, path or "/", query, "")).rstrip("/")


def build_body(
    model: Model, context: Context, options: StreamOptions, deployment: str
) -> JSONObject:
    """The JSON body: ``streamSimple``'s option handling, then Azure's ``buildParams``."""
    requested = options.max_tokens if options.max_tokens is not None else model.max_tokens
    max_tokens = clamp_max_tokens_to_context(model, context, requested)
    effort = None
    if options.reasoning:
        level = clamp_thinking_level(model, options.reasoning)
        effort = None if level == "off" else level
    body: JSONObject = {
        "model": deployment,
        "input": convert_messages(model, context, tool_call_providers=_TOOL_CALL_PROVIDERS),
        "stream": True,
    }
    if options.session_id is not None:
        body["prompt_cache_key"] = options.session_id[:_PROMPT_CACHE_KEY_MAX_CHARS]
    body["store"] = False
    if max_tokens:
        body["max_output_tokens"] = max(max_tokens, _MIN_OUTPUT_TOKENS)
    if options.temperature is not None:
        body["temperature"] = options.temperature
    if context.tools:
        strict = (model.compat or {}).get("supportsStrictMode")
        body["tools"] = convert_tools(context.tools, supports_strict_mode=strict is not False)
    if options.tool_choice is not None:
        body["tool_choice"] = options.tool_choice
    if model.reasoning:
        level_map = model.thinking_level_map or {}
        summary = options.extra.get("reasoning_summary")
        if effort or summary:
            mapped = level_map.get(effort) if effort else None
            wire_effort = (mapped if mapped is not None else effort) if effort else "medium"
            body["reasoning"] = {"effort": wire_effort, "summary": summary or "auto"}
            body["include"] = ["reasoning.encrypted_content"]
        elif not ("off" in level_map and level_map["off"] is None):
            off = level_map.get("off")
            body["reasoning"] = {"effort": off if off is not None else "none"}
    if options.sampling_params:
        body.update(options.sampling_params)
    return body
