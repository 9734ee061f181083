"""The headers and URL of a Messages API request.

pi-ai 0.85.0's ``createClient`` and ``@anthropic-ai/sdk`` 0.123.0's ``buildHeaders``:
the API key (``x-api-key``) or bearer token (OAuth, GitHub Copilot), the SDK's fixed
headers, ``anthropic-version``, the ``anthropic-beta`` features (:func:`_beta_features`,
pi-ai's ``getBetaFeatures``: fine-grained tool streaming, interleaved thinking,
fallbacks, managed effort, OAuth),
session affinity, the model's and the caller's headers, merged as the SDK merges them;
and ``<baseUrl>/v1/messages?beta=true``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Final

from ..._messages import ImageContent, LlmMessage, ToolResultMessage, UserMessage
from ..._model import Context, Model, StreamOptions
from .._http import pi_user_agent
from .._options import resolve_cache_retention
from ._compat import _CLAUDE_CODE_VERSION, _Compat, _compat

DEFAULT_BASE_URL: Final = "https://api.anthropic.com"
ANTHROPIC_VERSION: Final = "2023-06-01"

FINE_GRAINED_TOOL_STREAMING_BETA: Final = "fine-grained-tool-streaming-2025-05-14"
INTERLEAVED_THINKING_BETA: Final = "interleaved-thinking-2025-05-14"
SERVER_SIDE_FALLBACK_BETA: Final = "server-side-fallback-2026-07-01"
MID_CONVERSATION_OUTPUT_CONFIG_BETA: Final = "mid-conversation-output-config-2026-07-01"
THINKING_BINDING_CONTROLS_BETA: Final = "thinking-binding-controls-2026-08-01"
OAUTH_BETAS: Final = ("claude-code-20250219", "oauth-2025-04-20")


def _beta_features(
    model: Model,
    context: Context,
    compat: _Compat,
    is_oauth: bool,
    thinking_enabled: bool,
    options: StreamOptions,
) -> list[str]:
    configured: str | None = None
    configured_seen = False
    for headers in (model.headers, options.headers):
        for name, value in (headers or {}).items():
            if name.lower() == "anthropic-beta":
                configured, configured_seen = value, True
    if configured_seen:
        if configured is None:
            return []
        return list(dict.fromkeys(f.strip() for f in configured.split(",") if f.strip()))
    features: list[str] = []
    if is_oauth:
        features.extend(OAUTH_BETAS)
    if context.tools and not compat.supports_eager_tool_input_streaming:
        features.append(FINE_GRAINED_TOOL_STREAMING_BETA)
    if (
        model.reasoning
        and thinking_enabled
        and options.extra.get("interleavedThinking", True) is not False
        and not compat.force_adaptive_thinking
    ):
        features.append(INTERLEAVED_THINKING_BETA)
    if compat.allowed_fallback_models:
        features.append(SERVER_SIDE_FALLBACK_BETA)
    if compat.supports_mid_convo_effort:
        features.extend((MID_CONVERSATION_OUTPUT_CONFIG_BETA, THINKING_BINDING_CONTROLS_BETA))
    return list(dict.fromkeys(features))


def _build_headers(
    model: Model,
    context: Context,
    options: StreamOptions,
    *,
    is_oauth: bool,
    betas: Sequence[str],
) -> dict[str, str]:
    """The request headers, merged as the SDK does: later layers win case-insensitively
    and a ``None`` value removes a header."""
    api_key = options.api_key
    client_defaults: dict[str, str | None] = {
        "User-Agent": pi_user_agent(),
        "accept": "application/json",
        "anthropic-dangerous-direct-browser-access": "true",
    }
    auth: dict[str, str | None] = {}
    if model.provider == "github-copilot":
        if api_key is not None:
            auth["Authorization"] = f"Bearer {api_key}"
        client_defaults.update(model.headers or {})
        client_defaults.update(_copilot_headers(context.messages))
    elif api_key and is_oauth:
        auth["Authorization"] = f"Bearer {api_key}"
        client_defaults.update({"user-agent": f"claude-cli/{_CLAUDE_CODE_VERSION}", "x-app": "cli"})
        client_defaults.update(model.headers or {})
    else:
        if api_key is not None:
            auth["X-Api-Key"] = api_key
        retention = resolve_cache_retention(options.cache_retention)
        session_id = options.session_id if retention != "none" else None
        if session_id and _compat(model).send_session_affinity_headers:
            client_defaults["x-session-affinity"] = session_id
        client_defaults.update(model.headers or {})
    # pi-ai merges its header objects with Object.assign (case-sensitive keys, first
    # position kept) before the SDK merges the layers case-insensitively.
    client_defaults.update(options.headers or {})
    layers: list[Mapping[str, str | None]] = [
        {
            "accept": "application/json",
            "anthropic-dangerous-direct-browser-access": "true",
            "anthropic-version": ANTHROPIC_VERSION,
        },
        auth,
        client_defaults,
        {"content-type": "application/json"},
    ]
    if betas:
        layers.append({"anthropic-beta": ",".join(betas)})
    merged: dict[str, str] = {}
    removed: set[str] = set()
    for layer in layers:
        for name, value in layer.items():
            key = name.lower()
            if value is None:
                merged.pop(key, None)
                removed.add(key)
            else:
                merged[key] = value
                removed.discard(key)
    if (
        not merged.get("x-api-key")
        and not merged.get("authorization")
        and "x-api-key" not in removed
        and "authorization" not in removed
    ):
        msg = (
            "Could not resolve authentication method. Expected one of apiKey, authToken, "
            'credentials, config, or profile to be set. Or for one of the "X-Api-Key" or '
            '"Authorization" headers to be explicitly omitted'
        )
        raise ValueError(msg)
    return merged


def _copilot_headers(messages: Sequence[LlmMessage]) -> dict[str, str]:
    last = messages[-1] if messages else None
    headers = {
        "X-Initiator": "agent" if last is not None and last.role != "user" else "user",
        "Openai-Intent": "conversation-edits",
    }
    for message in messages:
        if (
            isinstance(message, UserMessage | ToolResultMessage)
            and not isinstance(message.content, str)
            and any(isinstance(block, ImageContent) for block in message.content)
        ):
            headers["Copilot-Vision-Request"] = "true"
            break
    return headers


def _messages_url(model: Model) -> str:
    base = model.base_url or os.environ.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL
    path = "v1/messages?beta=true" if base.endswith("/") else "/v1/messages?beta=true"
    return base + path
