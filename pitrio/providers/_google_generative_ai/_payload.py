"""A ``google-generative-ai`` request: the URL, the headers and the JSON body.

The request side of pi-ai 0.85.0's ``api/google-generative-ai.js`` (``streamSimple``'s
thinking options, ``createClient``, ``buildParams``) and ``api/google-shared.js``
(``convertMessages``, ``convertTools``, the function-calling mode), written out as the
REST body that ``@google/genai`` 1.52.0 sends for those parameters
(``generateContentParametersToMldev``: ``contents``, ``systemInstruction``, ``tools``,
``toolConfig``, and the rest of the config under ``generationConfig``).
"""

from __future__ import annotations

import platform
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final, TypeAlias, final

import attrs

from ..._messages import (
    AssistantMessage,
    ImageContent,
    TextContent,
    ThinkingContent,
    ToolResultMessage,
    UserMessage,
)
from ..._model import Context, Model, StreamOptions
from .._http import merge_headers, pi_user_agent, require_api_key
from .._json import JS_WHITESPACE
from .._options import clamp_max_tokens_to_context, clamp_thinking_level
from .._transform import (
    make_strict_json_schema,
    resolve_json_schema_strict,
    sanitize_surrogates,
    transform_messages,
)

__all__ = [
    "GoogleRequest",
    "JSONObject",
    "build_body",
    "build_headers",
    "build_request",
    "convert_messages",
    "convert_tools",
    "stream_url",
]

JSONObject: TypeAlias = dict[str, Any]

SDK_LABEL: Final = "google-genai-sdk/1.52.0"
"""``@google/genai``'s library label (its ``User-Agent`` and ``x-goog-api-client``)."""

_BASE64_SIGNATURE: Final = re.compile(r"[A-Za-z0-9+/]+={0,2}")
_GEMINI_VERSION: Final = re.compile(r"^gemini(?:-live)?-(\d+)")
_GOOGLE_LEVELS: Final = ("minimal", "low", "medium", "high")


@final
@attrs.frozen(kw_only=True)
class GoogleRequest:
    """One ``streamGenerateContent`` request as pi-ai (through the SDK) sends it."""

    url: str
    headers: Mapping[str, str]
    body: JSONObject


def build_request(model: Model, context: Context, options: StreamOptions) -> GoogleRequest:
    """The request pi-ai's ``streamSimple`` sends for these arguments.

    Raises:
        MissingApiKeyError: no API key (Google takes no authorization header instead).
        ValueError: a model or thinking-level mapping pi-ai rejects (pi-ai's texts).
    """
    if not options.api_key:
        require_api_key(model.provider, None, None, ())
    assert options.api_key
    return GoogleRequest(
        url=stream_url(model),
        headers=build_headers(model, options.api_key, options.headers),
        body=build_body(model, context, options),
    )


def stream_url(model: Model) -> str:
    """``<baseUrl>/models/<id>:streamGenerateContent?alt=sse`` (the SDK's ``tModel``:
    an id already starting with ``models/`` or ``tunedModels/`` is kept)."""
    model_id = model.id
    if ".." in model_id or "?" in model_id or "&" in model_id:
        msg = "invalid model parameter"
        raise ValueError(msg)
    if not model_id.startswith(("models/", "tunedModels/")):
        model_id = f"models/{model_id}"
    base = model.base_url or "https://generativelanguage.googleapis.com/v1beta"
    return f"{base.removesuffix('/')}/{model_id}:streamGenerateContent?alt=sse"


def build_headers(
    model: Model, api_key: str | None, option_headers: Mapping[str, str | None] | None
) -> dict[str, str]:
    """The SDK's default headers patched with pi-ai's (``User-Agent``,
    ``model.headers``, ``options.headers``), then ``x-goog-api-key`` (if ``api_key``)
    unless a header already authenticates. ``x-goog-api-client`` names Python where the
    SDK names Node."""
    label = f"{SDK_LABEL} gl-python/{platform.python_version()}"
    headers = merge_headers(
        {"User-Agent": label, "x-goog-api-client": label, "Content-Type": "application/json"},
        {"User-Agent": pi_user_agent()},
        model.headers,
        option_headers,
    )
    if api_key is not None and not any(
        name.lower() in ("authorization", "x-goog-api-key") for name in headers
    ):
        headers["x-goog-api-key"] = api_key
    return headers


# ---------------------------------------------------------------------------------------
# Model families (google-shared.js, google-generative-ai.js)


def _gemini_major_version(model_id: str) -> int | None:
    match = _GEMINI_VERSION.match(model_id.lower())
    return int(match.group(1)) if match else None


def requires_tool_call_id(model_id: str) -> bool:
    """Whether function calls and responses carry their ids (``requiresToolCallId``)."""
    major = _gemini_major_version(model_id)
    return model_id.startswith(("claude-", "gpt-oss-")) or (major is not None and major >= 3)


def _supports_multimodal_function_response(model_id: str) -> bool:
    major = _gemini_major_version(model_id)
    return major >= 3 if major is not None else True


def _supports_strict_tools(model_id: str) -> bool:
    major = _gemini_major_version(model_id)
    return major is not None and major >= 3


def _is_gemma4(model: Model) -> bool:
    # pi-ai's Vertex API has no Gemma 4 case: there Gemma 4 is an ordinary model.
    return model.api != "google-vertex" and re.search(r"gemma-?4", model.id.lower()) is not None


def _is_gemini3_pro(model: Model) -> bool:
    return re.search(r"gemini-3(?:\.\d+)?-pro", model.id.lower()) is not None


def _is_gemini3_flash(model: Model) -> bool:
    model_id = model.id.lower()
    return re.search(r"gemini-3(?:\.\d+)?-flash", model_id) is not None or model_id in (
        "gemini-flash-latest",
        "gemini-flash-lite-latest",
    )


# ---------------------------------------------------------------------------------------
# Thinking (streamSimple)


def _resolve_level(model: Model, level: str) -> str:
    """``resolveGoogleThinkingLevel``: ``off`` is ``high``; ``thinkingLevelMap`` applies."""
    if level == "off":
        return "high"
    mapped = (model.thinking_level_map or {}).get(level)
    resolved = mapped.lower() if isinstance(mapped, str) else level
    if resolved in _GOOGLE_LEVELS:
        return resolved
    shown = (
        "undefined"
        if mapped is None and level not in (model.thinking_level_map or {})
        else ("null" if mapped is None else str(mapped))
    )
    msg = (
        f"Unsupported Google thinking level mapping for {model.provider}/{model.id}: "
        f"{level} -> {shown}"
    )
    raise ValueError(msg)


def _thinking_level(effort: str, model: Model) -> str:
    if _is_gemini3_pro(model):
        return "LOW" if effort in ("minimal", "low") else "HIGH"
    if _is_gemma4(model):
        return "MINIMAL" if effort in ("minimal", "low") else "HIGH"
    return effort.upper()


_BUDGETS: Final[Sequence[tuple[str, Mapping[str, int]]]] = (
    ("2.5-pro", {"minimal": 128, "low": 2048, "medium": 8192, "high": 32768}),
    ("2.5-flash-lite", {"minimal": 512, "low": 2048, "medium": 8192, "high": 24576}),
    ("2.5-flash", {"minimal": 128, "low": 2048, "medium": 8192, "high": 24576}),
)


def _budget(model: Model, level: str, custom: Mapping[str, int] | None) -> int:
    """``getGoogleBudget``: a custom budget, the model family's table, else -1 (dynamic)."""
    if custom and custom.get(level) is not None:
        return custom[level]
    # pi-ai's Vertex API lacks the Flash-Lite row and gives Flash-Lite Flash's budgets,
    # 128 for "minimal" under Flash-Lite's floor of 512: pitrio uses the row on both APIs.
    for fragment, table in _BUDGETS:
        if fragment in model.id:
            return table[level]
    return -1


def _thinking_config(model: Model, options: StreamOptions) -> JSONObject | None:
    if not model.reasoning:
        return None
    if not options.reasoning:
        # Thinking off: Gemini 3 and Gemma 4 cannot turn it off, only down.
        if _is_gemini3_pro(model):
            return {"thinkingLevel": "LOW"}
        if _is_gemini3_flash(model) or _is_gemma4(model):
            return {"thinkingLevel": "MINIMAL"}
        return {"thinkingBudget": 0}
    level = _resolve_level(model, clamp_thinking_level(model, options.reasoning))
    if _is_gemini3_pro(model) or _is_gemini3_flash(model) or _is_gemma4(model):
        return {"includeThoughts": True, "thinkingLevel": _thinking_level(level, model)}
    return {
        "includeThoughts": True,
        "thinkingBudget": _budget(model, level, options.thinking_budgets),
    }


# ---------------------------------------------------------------------------------------
# The body


def build_body(model: Model, context: Context, options: StreamOptions) -> JSONObject:
    """The REST body of ``generateContentStream`` for pi-ai's ``buildParams``."""
    if options.reasoning:
        # streamSimple resolves the level before anything else (its errors come first).
        _resolve_level(model, clamp_thinking_level(model, options.reasoning))
    requested = options.max_tokens if options.max_tokens is not None else model.max_tokens
    generation: JSONObject = {}
    if options.temperature is not None:
        generation["temperature"] = options.temperature
    generation["maxOutputTokens"] = clamp_max_tokens_to_context(model, context, requested)
    contents = convert_messages(model, context)
    if not contents:
        msg = "contents are required"
        raise ValueError(msg)
    body: JSONObject = {"contents": contents}
    if context.system_prompt:
        body["systemInstruction"] = {
            "role": "user",
            "parts": [{"text": sanitize_surrogates(context.system_prompt)}],
        }
    strict_supported = _supports_strict_tools(model.id)
    if context.tools:
        body["tools"] = convert_tools(context.tools, supports_strict_mode=strict_supported)
        mode = _function_calling_mode(context.tools, options.tool_choice, strict_supported)
        if mode is not None:
            body["toolConfig"] = {"functionCallingConfig": {"mode": mode}}
    thinking = _thinking_config(model, options)
    if thinking is not None:
        generation["thinkingConfig"] = thinking
    body["generationConfig"] = generation
    return body


def _function_calling_mode(
    tools: Sequence[Any], tool_choice: object, supports_strict_mode: bool
) -> str | None:
    """``resolveGoogleFunctionCallingMode``."""
    if tool_choice in ("none", "any"):
        return str(tool_choice).upper()
    if any(resolve_json_schema_strict(tool, supports_strict_mode) is True for tool in tools):
        return "VALIDATED"
    return "AUTO" if tool_choice else None


def convert_tools(tools: Sequence[Any], *, supports_strict_mode: bool) -> list[JSONObject]:
    """One ``functionDeclarations`` tool holding every tool, parameters as
    ``parametersJsonSchema`` (full JSON Schema; strict tools made strict)."""
    declarations = []
    for tool in tools:
        strict = resolve_json_schema_strict(tool, supports_strict_mode)
        parameters = make_strict_json_schema(tool.parameters) if strict is True else tool.parameters
        declarations.append(
            {
                "name": tool.name,
                "description": tool.description,
                "parametersJsonSchema": parameters,
            }
        )
    return [{"functionDeclarations": declarations}]


def _valid_signature(signature: str | None) -> bool:
    return (
        bool(signature)
        and signature is not None
        and len(signature) % 4 == 0
        and _BASE64_SIGNATURE.fullmatch(signature) is not None
    )


def _blank(text: str) -> bool:
    return not text or not text.strip(JS_WHITESPACE)


def convert_messages(model: Model, context: Context) -> list[JSONObject]:
    """The ``contents`` of the request (``convertMessages``)."""
    with_ids = requires_tool_call_id(model.id)

    def normalize(call_id: str, _model: Model, _message: AssistantMessage) -> str:
        if not with_ids:
            return call_id
        return re.sub(r"[^a-zA-Z0-9_-]", "_", call_id)[:64]

    contents: list[JSONObject] = []
    for message in transform_messages(context.messages, model, normalize):
        if isinstance(message, UserMessage):
            if isinstance(message.content, str):
                contents.append(
                    {"role": "user", "parts": [{"text": sanitize_surrogates(message.content)}]}
                )
                continue
            parts = [
                {"text": sanitize_surrogates(block.text)}
                if isinstance(block, TextContent)
                else {"inlineData": {"data": block.data, "mimeType": block.mime_type}}
                for block in message.content
            ]
            if parts:
                contents.append({"role": "user", "parts": parts})
        elif isinstance(message, AssistantMessage):
            parts = _assistant_parts(model, message, with_ids)
            if parts:
                contents.append({"role": "model", "parts": parts})
        else:
            _add_tool_result(contents, model, message, with_ids)
    return contents


def _assistant_parts(model: Model, message: AssistantMessage, with_ids: bool) -> list[JSONObject]:
    same = message.provider == model.provider and message.model == model.id
    parts: list[JSONObject] = []
    for block in message.content:
        if isinstance(block, TextContent):
            signature = block.text_signature if same else None
            signature = signature if _valid_signature(signature) else None
            if _blank(block.text) and not signature:
                continue
            part: JSONObject = {"text": sanitize_surrogates(block.text)}
            if signature:
                part["thoughtSignature"] = signature
            parts.append(part)
        elif isinstance(block, ThinkingContent):
            if not same:
                if not _blank(block.thinking):
                    parts.append({"text": sanitize_surrogates(block.thinking)})
                continue
            signature = block.thinking_signature
            signature = signature if _valid_signature(signature) else None
            if _blank(block.thinking) and not signature:
                continue
            part = {"text": sanitize_surrogates(block.thinking), "thought": True}
            if signature:
                part["thoughtSignature"] = signature
            parts.append(part)
        else:
            call: JSONObject = {"args": block.arguments, "name": block.name}
            if with_ids:
                call = {"id": block.id, **call}
            part = {"functionCall": call}
            signature = block.thought_signature if same else None
            if _valid_signature(signature):
                part["thoughtSignature"] = signature
            parts.append(part)
    return parts


def _add_tool_result(
    contents: list[JSONObject], model: Model, message: ToolResultMessage, with_ids: bool
) -> None:
    text = "\n".join(b.text for b in message.content if isinstance(b, TextContent))
    images = (
        [b for b in message.content if isinstance(b, ImageContent)]
        if "image" in model.input
        else []
    )
    value = sanitize_surrogates(text) if text else ("(see attached image)" if images else "")
    image_parts = [{"inlineData": {"data": b.data, "mimeType": b.mime_type}} for b in images]
    nested = _supports_multimodal_function_response(model.id)
    response: JSONObject = {
        "name": message.tool_name,
        "response": {"error": value} if message.is_error else {"output": value},
    }
    if images and nested:
        response["parts"] = image_parts
    if with_ids:
        response["id"] = message.tool_call_id
    part = {"functionResponse": response}
    last = contents[-1] if contents else None
    if (
        last is not None
        and last["role"] == "user"
        and any("functionResponse" in p for p in last["parts"])
    ):
        last["parts"].append(part)
    else:
        contents.append({"role": "user", "parts": [part]})
    if images and not nested:
        contents.append({"role": "user", "parts": [{"text": "Tool result image:"}, *image_parts]})
