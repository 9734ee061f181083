"""A Codex request: the account id, the URLs, the headers of both transports, the body.

The request side of pi-ai 0.85.0's ``api/openai-codex-responses.js``
(``extractAccountId``, ``resolveCodexUrl``, ``buildSSEHeaders`` /
``buildWebSocketHeaders``, ``buildRequestBody``). The ``input`` items are the
openai-responses conversion (``convertResponsesMessages`` without the system prompt,
which Codex takes as ``instructions``); what differs from the Responses API is here.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final, final

import attrs

from ..._model import Context, Model, StreamOptions
from .._http import MissingApiKeyError, pi_user_agent
from .._json import json_stringify
from .._openai_responses._payload import JSONObject, convert_messages, service_tier_option
from .._options import clamp_thinking_level, resolve_cache_retention
from .._transform import make_strict_json_schema, resolve_json_schema_strict

__all__ = [
    "DEFAULT_BASE_URL",
    "CodexRequest",
    "build_body",
    "build_request",
    "codex_url",
    "extract_account_id",
    "sse_headers",
    "transport_option",
    "websocket_headers",
    "websocket_url",
]

DEFAULT_BASE_URL: Final = "https://chatgpt.com/backend-api"
_JWT_CLAIM_PATH: Final = "https://api.openai.com/auth"
_OPENAI_BETA_WEBSOCKETS: Final = "responses_websockets=2026-02-06"
_PROMPT_CACHE_KEY_MAX_CHARS: Final = 64
_TRANSPORTS: Final = ("sse", "websocket", "websocket-cached", "auto")


@final
@attrs.frozen(kw_only=True)
class CodexRequest:
    """What both transports send: the body, the account and the Codex session id."""

    body: JSONObject
    api_key: str
    account_id: str
    session_id: str | None
    """The prompt cache key (``options.session_id`` clamped to 64 characters), unless
    ``cache_retention`` is ``"none"``."""
    cache_session_id: str | None
    """``options.session_id`` as given (``None`` with ``cache_retention="none"``): the key
    of the session's WebSocket fallback."""


def build_request(model: Model, context: Context, options: StreamOptions) -> CodexRequest:
    """The request pi-ai's ``streamSimple`` sends for this model, context and options.

    Raises:
        MissingApiKeyError: no ``options.api_key``.
        ValueError: the key is not a ChatGPT access token with an account id
            (``Failed to extract accountId from token``), or a bad ``transport``.
    """
    api_key = options.api_key
    if not api_key:
        msg = f"No API key for provider: {model.provider}"
        raise MissingApiKeyError(msg)
    transport_option(options)
    account_id = extract_account_id(api_key)
    retention = resolve_cache_retention(options.cache_retention)
    cache_session_id = None if retention == "none" else options.session_id
    session_id = (
        None if cache_session_id is None else cache_session_id[:_PROMPT_CACHE_KEY_MAX_CHARS]
    )
    return CodexRequest(
        body=build_body(model, context, options, session_id),
        api_key=api_key,
        account_id=account_id,
        session_id=session_id,
        cache_session_id=cache_session_id,
    )


def transport_option(options: StreamOptions) -> str:
    """``options.extra["transport"]``: ``"sse"``, ``"websocket"``, ``"websocket-cached"``
    or ``"auto"`` (the default: the WebSocket first, SSE when it cannot connect).

    Raises:
        ValueError: another value.
    """
    value = options.extra.get("transport") or "auto"
    if value not in _TRANSPORTS:
        msg = (
            f"StreamOptions.extra['transport'] is {value!r}; the openai-codex-responses API "
            f"takes one of {', '.join(map(repr, _TRANSPORTS))}"
        )
        raise ValueError(msg)
    assert isinstance(value, str)
    return value


def extract_account_id(token: str) -> str:
    """The ``chatgpt_account_id`` claim of a ChatGPT OAuth access token (a JWT).

    pi-ai decodes the payload with ``atob``, which refuses the base64url alphabet that
    JWTs use; both alphabets are accepted here (``docs/deviations.md``).

    Raises:
        ValueError: ``Failed to extract accountId from token``.
    """
    parts = token.split(".")
    try:
        if len(parts) != 3:
            raise ValueError
        segment = parts[1].strip().rstrip("=")
        padded = segment + "=" * (-len(segment) % 4)
        payload = json.loads(base64.b64decode(padded, altchars=b"-_", validate=False))
        claim = payload.get(_JWT_CLAIM_PATH) if isinstance(payload, dict) else None
        account_id = claim.get("chatgpt_account_id") if isinstance(claim, dict) else None
    except (ValueError, binascii.Error, UnicodeDecodeError):
        account_id = None
    if not account_id:
        msg = "Failed to extract accountId from token"
        raise ValueError(msg)
    return account_id if isinstance(account_id, str) else json_stringify(account_id)


def codex_url(base_url: str) -> str:
    """``<base_url>/codex/responses`` (``resolveCodexUrl``: an empty base URL is
    ChatGPT's; a URL already ending in ``/codex`` or ``/codex/responses`` is kept)."""
    raw = base_url if base_url.strip() else DEFAULT_BASE_URL
    normalized = raw.rstrip("/")
    if normalized.endswith("/codex/responses"):
        return normalized
    if normalized.endswith("/codex"):
        return f"{normalized}/responses"
    return f"{normalized}/codex/responses"


def websocket_url(base_url: str) -> str:
    """:func:`codex_url` with ``wss:`` for ``https:`` and ``ws:`` for ``http:``."""
    url = codex_url(base_url)
    scheme, sep, rest = url.partition(":")
    lowered = scheme.lower()
    if lowered == "https":
        return f"wss{sep}{rest}"
    if lowered == "http":
        return f"ws{sep}{rest}"
    return url


def _base_headers(model: Model, options: StreamOptions, request: CodexRequest) -> dict[str, str]:
    # A Headers object: names are case-insensitive (and lowercase on the wire).
    headers: dict[str, str] = {k.lower(): v for k, v in (model.headers or {}).items()}
    for name, value in (options.headers or {}).items():
        if value is None:
            headers.pop(name.lower(), None)
        else:
            headers[name.lower()] = value
    headers["authorization"] = f"Bearer {request.api_key}"
    headers["chatgpt-account-id"] = request.account_id
    headers["originator"] = "pi"
    headers["user-agent"] = pi_user_agent()
    return headers


def sse_headers(model: Model, options: StreamOptions, request: CodexRequest) -> dict[str, str]:
    """The headers of the SSE request (``buildSSEHeaders``)."""
    headers = _base_headers(model, options, request)
    headers["openai-beta"] = "responses=experimental"
    headers["accept"] = "text/event-stream"
    headers["content-type"] = "application/json"
    if request.session_id:
        headers["session-id"] = request.session_id
        headers["x-client-request-id"] = request.session_id
    return headers


def websocket_headers(
    model: Model, options: StreamOptions, request: CodexRequest, request_id: str
) -> dict[str, str]:
    """The headers of the WebSocket handshake (``buildWebSocketHeaders``; pi-ai's attempt
    to drop ``OpenAI-Beta`` before connecting misses the lowercase name, so it is sent)."""
    headers = _base_headers(model, options, request)
    headers.pop("accept", None)
    headers.pop("content-type", None)
    headers["openai-beta"] = _OPENAI_BETA_WEBSOCKETS
    headers["x-client-request-id"] = request_id
    headers["session-id"] = request_id
    return headers


def build_body(
    model: Model, context: Context, options: StreamOptions, session_id: str | None
) -> JSONObject:
    """The JSON body (``streamSimple``'s option handling, then ``buildRequestBody``)."""
    compat = model.compat or {}
    supports_strict = compat.get("supportsStrictMode") is not False
    body: JSONObject = {
        "model": model.id,
        "store": False,
        "stream": True,
        "instructions": context.system_prompt or "You are a helpful assistant.",
        "input": convert_messages(model, attrs.evolve(context, system_prompt="")),
        "text": {"verbosity": options.extra.get("text_verbosity") or "low"},
        "include": ["reasoning.encrypted_content"],
    }
    if session_id is not None:
        body["prompt_cache_key"] = session_id
    body["tool_choice"] = options.tool_choice if options.tool_choice is not None else "auto"
    body["parallel_tool_calls"] = True
    if options.temperature is not None:
        body["temperature"] = options.temperature
    tier = service_tier_option(options)
    if tier is not None:
        body["service_tier"] = tier
    tools = _unique_tools(context.tools)
    if tools:
        body["tools"] = [_tool(tool, supports_strict) for tool in tools]
    effort = _reasoning_effort(model, options)
    if effort is not None:
        summary = options.extra.get("reasoning_summary")
        body["reasoning"] = {"effort": effort, "summary": summary if summary else "auto"}
    return body


def _reasoning_effort(model: Model, options: StreamOptions) -> str | None:
    if not options.reasoning:
        return None
    level = clamp_thinking_level(model, options.reasoning)
    if level == "off":
        return None
    level_map: Mapping[str, Any] = model.thinking_level_map or {}
    # `map[level] ?? level`: a level mapped to null is sent as it is.
    mapped = level_map.get(level)
    return level if mapped is None else mapped


def _unique_tools(tools: Sequence[Any]) -> list[Any]:
    """Tools by name; a later definition replaces an earlier one in its place."""
    by_name: dict[str, Any] = {}
    for tool in tools:
        by_name[tool.name] = tool
    return list(by_name.values())


def _tool(tool: Any, supports_strict: bool) -> JSONObject:
    """``convertResponsesTools`` with ``strict: null``: ``strict`` is ``true`` only for a
    tool asking for JSON-schema constrained sampling that can have it."""
    strict = resolve_json_schema_strict(tool, supports_strict)
    parameters = make_strict_json_schema(tool.parameters) if strict else tool.parameters
    item: JSONObject = {
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": parameters,
    }
    if supports_strict:
        item["strict"] = strict
    return item
