"""The history and tools in chat-completions form (pi-ai's ``convertMessages`` / ``convertTools``).

From pi-ai 0.85.0's ``api/openai-completions.js``: the system prompt as a ``system`` or
``developer`` message, user content with ``image_url`` parts, assistant turns with
their text, thinking replayed in the server's reasoning field or as
``reasoning_details``, tool calls with normalized ids, tool results (images forwarded
in a user message when the server needs it), and the tools as ``function`` tools
(strict schemas when asked for).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final

from ..._messages import (
    AssistantMessage,
    ImageContent,
    JSONValue,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from ..._model import Context, Model, ToolSpec
from .._json import json_parse, json_stringify
from .._transform import (
    make_strict_json_schema,
    resolve_json_schema_strict,
    sanitize_surrogates,
    short_hash,
    transform_messages,
)
from ._compat import CompletionsCompat, JSONObject

__all__ = ["convert_messages"]


_REPLAY_FIELDS: Final = frozenset({"reasoning", "reasoning_content", "reasoning_text"})


def _normalize_tool_call_id(model: Model) -> Any:
    def normalize(tool_call_id: str, _model: Model, _source: AssistantMessage) -> str:
        if "|" in tool_call_id:
            call_part, _, item_part = tool_call_id.partition("|")
            call_id = re.sub(r"[^a-zA-Z0-9_-]", "_", call_part)
            item_id = re.sub(r"[^a-zA-Z0-9_-]", "_", item_part)
            combined = f"{call_id}_{item_id}" if item_id else call_id
            if len(combined) <= 40:
                return combined
            digest = short_hash(tool_call_id)[:8]
            return f"{call_id[: max(1, 40 - len(digest) - 1)]}_{digest}"
        if model.provider == "openai" and len(tool_call_id) > 40:
            return tool_call_id[:40]
        return tool_call_id

    return normalize


def _image_url(block: ImageContent) -> JSONObject:
    return {
        "type": "image_url",
        "image_url": {"url": f"data:{block.mime_type};base64,{block.data}"},
    }


def _is_reasoning_detail(detail: JSONValue) -> bool:
    if not isinstance(detail, dict):
        return False
    if not (
        (detail.get("id") is None or isinstance(detail["id"], str))
        and ("format" not in detail or isinstance(detail["format"], str))
        and (
            "index" not in detail
            or (isinstance(detail["index"], int | float) and not isinstance(detail["index"], bool))
        )
    ):
        return False
    kind = detail.get("type")
    if kind == "reasoning.summary":
        return isinstance(detail.get("summary"), str)
    if kind == "reasoning.encrypted":
        return isinstance(detail.get("data"), str)
    if kind == "reasoning.text":
        return isinstance(detail.get("text"), str) and (
            detail.get("signature") is None or isinstance(detail["signature"], str)
        )
    return False


def _parse_reasoning_details(signature: str | None) -> list[JSONValue] | None:
    if not signature:
        return None
    try:
        parsed = json_parse(signature)
    except ValueError:
        return None
    if isinstance(parsed, list) and parsed and all(_is_reasoning_detail(d) for d in parsed):
        return parsed
    return None


def _parse_legacy_encrypted_detail(signature: str | None) -> JSONValue:
    if not signature:
        return None
    try:
        parsed = json_parse(signature)
    except ValueError:
        return None
    if (
        _is_reasoning_detail(parsed)
        and parsed.get("type") == "reasoning.encrypted"
        and isinstance(parsed.get("id"), str)
        and parsed["id"]
        and parsed["data"]
    ):
        return parsed
    return None


def _convert_tools(tools: Sequence[ToolSpec], compat: CompletionsCompat) -> list[JSONObject]:
    supports_strict = compat.supports_strict_mode is not False
    out = []
    for tool in tools:
        strict = resolve_json_schema_strict(tool, supports_strict)
        parameters = make_strict_json_schema(tool.parameters) if strict else dict(tool.parameters)
        function: JSONObject = {
            "name": tool.name,
            "description": tool.description,
            "parameters": parameters,
        }
        if supports_strict:
            function["strict"] = bool(strict)
        out.append({"type": "function", "function": function})
    return out


def convert_messages(model: Model, context: Context, compat: CompletionsCompat) -> list[JSONObject]:
    """The ``messages`` of a chat-completions request (pi-ai's ``convertMessages``)."""
    params: list[JSONObject] = []
    messages = transform_messages(context.messages, model, _normalize_tool_call_id(model))
    if context.system_prompt:
        role = "developer" if model.reasoning and compat.supports_developer_role else "system"
        params.append({"role": role, "content": sanitize_surrogates(context.system_prompt)})
    last_role: str | None = None
    index = 0
    while index < len(messages):
        message = messages[index]
        if (
            compat.requires_assistant_after_tool_result
            and last_role == "toolResult"
            and isinstance(message, UserMessage)
        ):
            params.append({"role": "assistant", "content": "I have processed the tool results."})
        if isinstance(message, UserMessage):
            if isinstance(message.content, str):
                params.append({"role": "user", "content": sanitize_surrogates(message.content)})
            else:
                parts = [
                    {"type": "text", "text": sanitize_surrogates(block.text)}
                    if isinstance(block, TextContent)
                    else _image_url(block)
                    for block in message.content
                ]
                if parts:
                    params.append({"role": "user", "content": parts})
                else:
                    index += 1
                    continue
            last_role = "user"
        elif isinstance(message, AssistantMessage):
            converted = _convert_assistant(model, message, compat)
            if converted is not None:
                params.append(converted)
            last_role = "assistant"
        else:
            images: list[JSONObject] = []
            while index < len(messages) and isinstance(messages[index], ToolResultMessage):
                result = messages[index]
                assert isinstance(result, ToolResultMessage)
                text = "\n".join(b.text for b in result.content if isinstance(b, TextContent))
                has_images = any(isinstance(b, ImageContent) for b in result.content)
                if not text:
                    text = "(see attached image)" if has_images else "(no tool output)"
                tool_message: JSONObject = {
                    "role": "tool",
                    "content": sanitize_surrogates(text),
                    "tool_call_id": result.tool_call_id,
                }
                if compat.requires_tool_result_name and result.tool_name:
                    tool_message["name"] = result.tool_name
                params.append(tool_message)
                if has_images and "image" in model.input:
                    images.extend(
                        _image_url(b) for b in result.content if isinstance(b, ImageContent)
                    )
                index += 1
            if images:
                if compat.requires_assistant_after_tool_result:
                    params.append(
                        {"role": "assistant", "content": "I have processed the tool results."}
                    )
                params.append(
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "Attached image(s) from tool result:"},
                            *images,
                        ],
                    }
                )
                last_role = "user"
            else:
                last_role = "toolResult"
            continue
        index += 1
    return params


def _convert_assistant(
    model: Model, message: AssistantMessage, compat: CompletionsCompat
) -> JSONObject | None:
    out: JSONObject = {
        "role": "assistant",
        "content": "" if compat.requires_assistant_after_tool_result else None,
    }
    text_parts = [
        {"type": "text", "text": sanitize_surrogates(b.text)}
        for b in message.content
        if isinstance(b, TextContent) and b.text.strip()
    ]
    text = "".join(p["text"] for p in text_parts)
    thinking = [b for b in message.content if isinstance(b, ThinkingContent)]
    calls = [b for b in message.content if isinstance(b, ToolCall)]
    signed = next(
        (
            d
            for d in (_parse_reasoning_details(b.thinking_signature) for b in thinking)
            if d is not None
        ),
        None,
    )
    legacy = [
        d
        for d in (_parse_legacy_encrypted_detail(c.thought_signature) for c in calls)
        if d is not None
    ]
    preserved = signed if signed is not None else (legacy or None)
    non_empty = [b for b in thinking if b.thinking.strip()]
    if non_empty:
        if compat.requires_thinking_as_text:
            thinking_text = "\n\n".join(sanitize_surrogates(b.thinking) for b in non_empty)
            out["content"] = [{"type": "text", "text": thinking_text}, *text_parts]
        else:
            if text:
                out["content"] = text
            if not preserved:
                signature = non_empty[0].thinking_signature
                if model.provider == "opencode-go" and signature == "reasoning":
                    signature = "reasoning_content"
                if signature and signature in _REPLAY_FIELDS:
                    out[signature] = "\n".join(b.thinking for b in non_empty)
    elif text:
        out["content"] = text
    if calls:
        out["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": json_stringify(call.arguments)},
            }
            for call in calls
        ]
    if preserved:
        out["reasoning_details"] = preserved
    if (
        compat.requires_reasoning_content_on_assistant_messages
        and model.reasoning
        and "reasoning_content" not in out
    ):
        out["reasoning_content"] = ""
    content = out["content"]
    if not content and "tool_calls" not in out:
        return None
    return out
