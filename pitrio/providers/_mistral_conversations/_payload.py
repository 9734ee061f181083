"""A ``mistral-conversations`` request: the URL, the headers and the JSON body.

The request side of pi-ai 0.85.0's ``api/mistral-conversations.js``: ``streamSimple``'s
options (the max-tokens clamp, ``prompt_mode`` or ``reasoning_effort``),
``buildChatPayload`` with ``toChatMessages`` and ``toFunctionTools``, the tool-call id
normalizer (Mistral takes ids of nine letters and digits), ``buildMistralHeaders``, and
``toMistralWirePayload``, which turns the payload the ``on_payload`` hook sees (the
``@mistralai`` SDK's camelCase names: ``maxTokens``, ``toolCalls``, ``imageUrl``) into
the snake_case body sent to ``<baseUrl>/v1/chat/completions``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, TypeAlias

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
from .._json import json_stringify
from .._options import clamp_max_tokens_to_context, clamp_thinking_level
from .._request import HttpRequest
from .._transform import (
    make_strict_json_schema,
    resolve_json_schema_strict,
    sanitize_surrogates,
    short_hash,
    transform_messages,
)

__all__ = [
    "JSONObject",
    "build_body",
    "build_headers",
    "build_request",
    "chat_url",
    "derive_tool_call_id",
    "to_wire_payload",
]

JSONObject: TypeAlias = dict[str, Any]

TOOL_CALL_ID_LENGTH: Final = 9
"""Mistral's tool-call ids: nine letters and digits."""

_EFFORT_MODELS: Final = frozenset(
    {"mistral-small-2603", "mistral-small-latest", "mistral-medium-3.5"}
)
"""The reasoning models that take ``reasoning_effort`` (the others take
``prompt_mode: "reasoning"``)."""

_TOOL_CHOICES: Final = ("auto", "none", "any", "required")

_TOP_LEVEL_NAMES: Final = (
    ("topP", "top_p"),
    ("maxTokens", "max_tokens"),
    ("randomSeed", "random_seed"),
    ("responseFormat", "response_format"),
    ("toolChoice", "tool_choice"),
    ("presencePenalty", "presence_penalty"),
    ("frequencyPenalty", "frequency_penalty"),
    ("parallelToolCalls", "parallel_tool_calls"),
    ("reasoningEffort", "reasoning_effort"),
    ("promptMode", "prompt_mode"),
    ("promptCacheKey", "prompt_cache_key"),
    ("safePrompt", "safe_prompt"),
)
_CHUNK_NAMES: Final = (
    ("imageUrl", "image_url"),
    ("documentUrl", "document_url"),
    ("documentName", "document_name"),
    ("fileId", "file_id"),
    ("referenceIds", "reference_ids"),
    ("inputAudio", "input_audio"),
)


def build_request(model: Model, context: Context, options: StreamOptions) -> HttpRequest:
    """The request pi-ai's ``streamSimple`` sends; the body in the SDK's camelCase form
    (what ``on_payload`` sees; :func:`to_wire_payload` gives the bytes' form).

    Raises:
        MissingApiKeyError: no API key (an authorization header does not replace it).
        ValueError: a tool choice that is neither a known string nor a function.
    """
    if not options.api_key:
        require_api_key(model.provider, None, None, ())
    assert options.api_key
    return HttpRequest(
        url=chat_url(model),
        headers=build_headers(model, options.api_key, options),
        body=build_body(model, context, options),
    )


def chat_url(model: Model) -> str:
    """``<baseUrl>/v1/chat/completions`` (the base URL's path kept, one slash)."""
    base = (model.base_url or "https://api.mistral.ai").rstrip("/")
    return f"{base}/v1/chat/completions"


def _uses_prompt_caching(options: StreamOptions) -> bool:
    return options.cache_retention != "none" and bool(options.session_id)


def _has_header(headers: Mapping[str, str | None] | None, target: str) -> bool:
    return any(name.lower() == target for name in headers or {})


def build_headers(model: Model, api_key: str, options: StreamOptions) -> dict[str, str]:
    """pi-ai's ``buildMistralHeaders``: its defaults, ``model.headers`` and
    ``options.headers`` over them (``None`` removes one), then ``x-affinity`` with the
    session id when prompts are cached and no layer set it."""
    headers = merge_headers(
        {
            "User-Agent": pi_user_agent(),
            "accept": "text/event-stream",
            "authorization": f"Bearer {api_key}",
            "content-type": "application/json",
        },
        model.headers,
        options.headers,
    )
    explicit = _has_header(model.headers, "x-affinity") or _has_header(
        options.headers, "x-affinity"
    )
    if _uses_prompt_caching(options) and not explicit:
        assert options.session_id
        headers["x-affinity"] = options.session_id
    return headers


# ---------------------------------------------------------------------------------------
# Options (streamSimple)


def _reasoning(model: Model, options: StreamOptions) -> tuple[str | None, str | None]:
    """``(promptMode, reasoningEffort)`` for the requested thinking level."""
    level = clamp_thinking_level(model, options.reasoning) if options.reasoning else None
    if level == "off" or level is None or not model.reasoning:
        return None, None
    if model.id in _EFFORT_MODELS:
        effort = (model.thinking_level_map or {}).get(level)
        return None, effort if effort is not None else "high"
    return "reasoning", None


def _tool_choice(choice: str | Mapping[str, Any]) -> JSONObject | str:
    if isinstance(choice, str):
        if choice in _TOOL_CHOICES:
            return choice
        msg = (
            f"tool_choice={choice!r} is not a Mistral tool choice: use one of "
            f"{', '.join(map(repr, _TOOL_CHOICES))} or "
            "{'type': 'function', 'function': {'name': ...}}"
        )
        raise ValueError(msg)
    function = choice.get("function")
    name = function.get("name") if isinstance(function, Mapping) else None
    if not isinstance(name, str):
        msg = (
            f"tool_choice={dict(choice)!r} names no function: give {{'function': {{'name': ...}}}}"
        )
        raise ValueError(msg)
    return {"type": "function", "function": {"name": name}}


def build_body(model: Model, context: Context, options: StreamOptions) -> JSONObject:
    """``buildChatPayload`` for ``streamSimple``'s options (camelCase names)."""
    prompt_mode, effort = _reasoning(model, options)
    requested = options.max_tokens if options.max_tokens is not None else model.max_tokens
    max_tokens = clamp_max_tokens_to_context(model, context, requested)
    messages = convert_messages(model, context)
    body: JSONObject = {"model": model.id, "stream": True, "messages": messages}
    if context.tools:
        body["tools"] = convert_tools(context.tools)
    if options.temperature is not None:
        body["temperature"] = options.temperature
    body["maxTokens"] = max_tokens
    if options.tool_choice:
        body["toolChoice"] = _tool_choice(options.tool_choice)
    if prompt_mode:
        body["promptMode"] = prompt_mode
    if effort:
        body["reasoningEffort"] = effort
    if _uses_prompt_caching(options):
        body["promptCacheKey"] = options.session_id
    if context.system_prompt:
        messages.insert(
            0, {"role": "system", "content": sanitize_surrogates(context.system_prompt)}
        )
    return body


def convert_tools(tools: Sequence[Any]) -> list[JSONObject]:
    """``toFunctionTools``: strict (constrained) schemas where a tool asks for them."""
    out: list[JSONObject] = []
    for tool in tools:
        strict = resolve_json_schema_strict(tool, True)
        parameters = make_strict_json_schema(tool.parameters) if strict else dict(tool.parameters)
        out.append(
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": parameters,
                    "strict": bool(strict),
                },
            }
        )
    return out


# ---------------------------------------------------------------------------------------
# Messages


def derive_tool_call_id(call_id: str, attempt: int) -> str:
    """``deriveMistralToolCallId``: the id's letters and digits when there are nine,
    else nine characters of a hash of them (``attempt`` > 0 after a collision)."""
    normalized = "".join(c for c in call_id if c.isascii() and c.isalnum())
    if attempt == 0 and len(normalized) == TOOL_CALL_ID_LENGTH:
        return normalized
    seed_base = normalized or call_id
    seed = seed_base if attempt == 0 else f"{seed_base}:{attempt}"
    hashed = "".join(c for c in short_hash(seed) if c.isascii() and c.isalnum())
    return hashed[:TOOL_CALL_ID_LENGTH]


def _id_normalizer() -> Callable[[str, Model, AssistantMessage], str]:
    """``createMistralToolCallIdNormalizer``: one id per source id, never two sources
    on one id."""
    ids: dict[str, str] = {}
    owners: dict[str, str] = {}

    def normalize(call_id: str, _model: Model, _message: AssistantMessage) -> str:
        existing = ids.get(call_id)
        if existing:
            return existing
        attempt = 0
        while True:
            candidate = derive_tool_call_id(call_id, attempt)
            owner = owners.get(candidate)
            if not owner or owner == call_id:
                ids[call_id] = candidate
                owners[candidate] = call_id
                return candidate
            attempt += 1

    return normalize


def _image_url(block: ImageContent) -> str:
    return f"data:{block.mime_type};base64,{block.data}"


def _tool_result_text(text: str, has_images: bool, takes_images: bool, is_error: bool) -> str:
    """``buildToolResultText``."""
    trimmed = text.strip()
    prefix = "[tool error] " if is_error else ""
    if trimmed:
        suffix = (
            "\n[tool image omitted: model does not support images]"
            if has_images and not takes_images
            else ""
        )
        return f"{prefix}{trimmed}{suffix}"
    if has_images:
        if takes_images:
            return f"{prefix}(see attached image)"
        return f"{prefix}(image omitted: model does not support images)"
    return f"{prefix}(no tool output)"


def convert_messages(model: Model, context: Context) -> list[JSONObject]:
    """``transformMessages`` with Mistral's ids, then ``toChatMessages``."""
    takes_images = "image" in model.input
    result: list[JSONObject] = []
    for message in transform_messages(context.messages, model, _id_normalizer()):
        if isinstance(message, UserMessage):
            if isinstance(message.content, str):
                result.append({"role": "user", "content": sanitize_surrogates(message.content)})
                continue
            had_images = any(isinstance(b, ImageContent) for b in message.content)
            chunks: list[JSONObject] = []
            for block in message.content:
                if isinstance(block, TextContent):
                    chunks.append({"type": "text", "text": sanitize_surrogates(block.text)})
                elif takes_images:
                    chunks.append({"type": "image_url", "imageUrl": _image_url(block)})
            if chunks:
                result.append({"role": "user", "content": chunks})
            elif had_images and not takes_images:
                content = "(image omitted: model does not support images)"
                result.append({"role": "user", "content": content})
        elif isinstance(message, AssistantMessage):
            parts: list[JSONObject] = []
            calls: list[JSONObject] = []
            for item in message.content:
                if isinstance(item, TextContent):
                    if item.text.strip():
                        parts.append({"type": "text", "text": sanitize_surrogates(item.text)})
                elif isinstance(item, ThinkingContent):
                    if item.thinking.strip():
                        text = sanitize_surrogates(item.thinking)
                        parts.append(
                            {"type": "thinking", "thinking": [{"type": "text", "text": text}]}
                        )
                else:
                    arguments = json_stringify(item.arguments or {})
                    calls.append(
                        {
                            "id": item.id,
                            "type": "function",
                            "function": {"name": item.name, "arguments": arguments},
                            "index": 0,
                        }
                    )
            turn: JSONObject = {"role": "assistant", "prefix": False}
            if parts:
                turn["content"] = parts
            if calls:
                turn["toolCalls"] = calls
            if parts or calls:
                result.append(turn)
        else:
            result.append(_tool_message(message, takes_images))
    return result


def _tool_message(message: ToolResultMessage, takes_images: bool) -> JSONObject:
    text = "\n".join(
        sanitize_surrogates(b.text) for b in message.content if isinstance(b, TextContent)
    )
    images = [b for b in message.content if isinstance(b, ImageContent)]
    content: list[JSONObject] = [
        {
            "type": "text",
            "text": _tool_result_text(text, bool(images), takes_images, message.is_error),
        }
    ]
    if takes_images:
        content.extend({"type": "image_url", "imageUrl": _image_url(b)} for b in images)
    return {
        "role": "tool",
        "toolCallId": message.tool_call_id,
        "name": message.tool_name,
        "content": content,
    }


# ---------------------------------------------------------------------------------------
# The wire form


def _rename(record: JSONObject, names: Sequence[tuple[str, str]]) -> JSONObject:
    out = dict(record)
    for source, target in names:
        if source in out:
            out[target] = out.pop(source)
    return out


def to_wire_payload(payload: Any) -> Any:
    """``toMistralWirePayload``: the SDK's camelCase names as the API's snake_case ones
    (the top level, each message, each content chunk, ``responseFormat``). A payload
    that is not an object (an ``on_payload`` hook's) is sent as it is."""
    if not isinstance(payload, dict):
        return payload
    wire = _rename(payload, _TOP_LEVEL_NAMES)
    if isinstance(payload.get("messages"), list):
        wire["messages"] = [_wire_message(m) for m in payload["messages"]]
    response_format = wire.get("response_format")
    if isinstance(response_format, dict):
        response_format = _rename(response_format, (("jsonSchema", "json_schema"),))
        schema = response_format.get("json_schema")
        if isinstance(schema, dict):
            response_format["json_schema"] = _rename(schema, (("schemaDefinition", "schema"),))
        wire["response_format"] = response_format
    return wire


def _wire_message(message: Any) -> Any:
    if not isinstance(message, dict):
        return message
    wire = _rename(message, (("toolCalls", "tool_calls"), ("toolCallId", "tool_call_id")))
    if isinstance(message.get("content"), list):
        wire["content"] = [
            _rename(c, _CHUNK_NAMES) if isinstance(c, dict) else c for c in message["content"]
        ]
    return wire
