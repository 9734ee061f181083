"""The history and tools as every API receives them, before the API's own conversion.

What pi-ai 0.85.0's three payload builders share:

- :func:`transform_messages` (``api/transform-messages.js``): images replaced for
  text-only models, another model's thinking turned into text, foreign tool-call ids
  normalized, failed turns dropped, missing tool results synthesized;
- :func:`sanitize_surrogates` (``utils/sanitize-unicode.js``) and :func:`short_hash`
  (``utils/hash.js``);
- tools: :func:`tool_json` (pi-ai's ``Tool`` object), and the strict schemas of
  constrained sampling, :func:`make_strict_json_schema` and
  :func:`resolve_json_schema_strict` (``api/constrained-sampling.js``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Final, NoReturn

import attrs

from .._messages import (
    AssistantContent,
    AssistantMessage,
    ImageContent,
    JSONValue,
    LlmMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserContent,
    UserMessage,
)
from .._model import Model, ToolSpec
from ._json import JS_WHITESPACE
from ._output import now_ms

__all__ = [
    "UnsupportedStrictJsonSchemaError",
    "make_strict_json_schema",
    "resolve_json_schema_strict",
    "resolve_response_format",
    "sanitize_surrogates",
    "short_hash",
    "tool_json",
    "transform_messages",
]


_LONE_SURROGATE: Final = re.compile(
    "[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]"
)
_SURROGATE_PAIR: Final = re.compile("[\ud800-\udbff][\udc00-\udfff]")


def sanitize_surrogates(text: str) -> str:
    """Remove unpaired UTF-16 surrogates (``sanitizeSurrogates``); a well-formed pair
    left in a Python string is joined into its character."""
    if text.isascii() or not any("\ud800" <= ch <= "\udfff" for ch in text):
        return text
    text = _LONE_SURROGATE.sub("", text)
    return _SURROGATE_PAIR.sub(
        lambda m: chr(
            0x10000 + ((ord(m.group()[0]) - 0xD800) << 10) + (ord(m.group()[1]) - 0xDC00)
        ),
        text,
    )


def _imul(a: int, b: int) -> int:
    return (a * b) & 0xFFFFFFFF


def _base36(value: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    if value == 0:
        return "0"
    out = []
    while value:
        value, rem = divmod(value, 36)
        out.append(digits[rem])
    return "".join(reversed(out))


def short_hash(text: str) -> str:
    """pi-ai's ``shortHash`` (two 32-bit accumulators over UTF-16 code units, base 36)."""
    h1, h2 = 0xDEADBEEF, 0x41C6CE57
    data = text.encode("utf-16-le", "surrogatepass")
    for i in range(0, len(data), 2):
        ch = data[i] | (data[i + 1] << 8)
        h1 = _imul(h1 ^ ch, 2654435761)
        h2 = _imul(h2 ^ ch, 1597334677)
    h1 = _imul(h1 ^ (h1 >> 16), 2246822507) ^ _imul(h2 ^ (h2 >> 13), 3266489909)
    h2 = _imul(h2 ^ (h2 >> 16), 2246822507) ^ _imul(h1 ^ (h1 >> 13), 3266489909)
    return _base36(h2 & 0xFFFFFFFF) + _base36(h1 & 0xFFFFFFFF)


def tool_json(tool: ToolSpec) -> dict[str, JSONValue]:
    """A tool as pi-ai's ``Tool`` object: ``{name, description, parameters}``."""
    return {"name": tool.name, "description": tool.description, "parameters": dict(tool.parameters)}


class UnsupportedStrictJsonSchemaError(ValueError):
    """A tool schema that strict (constrained) sampling cannot express."""


_UNSUPPORTED_STRICT_KEYS: Final = (
    "$ref",
    "$defs",
    "definitions",
    "allOf",
    "oneOf",
    "patternProperties",
    "dependentSchemas",
    "dependencies",
    "unevaluatedProperties",
    "propertyNames",
    "contains",
    "prefixItems",
    "not",
    "if",
    "then",
    "else",
)


def _unsupported(text: str) -> NoReturn:
    raise UnsupportedStrictJsonSchemaError(text)


def _is_structured_schema(schema: JSONValue) -> bool:
    if not isinstance(schema, dict):
        return False
    kind = schema.get("type")
    types = [kind] if isinstance(kind, str) else kind if isinstance(kind, list) else []
    return "object" in types or "array" in types or "properties" in schema or "items" in schema


def _schema_allows_null(schema: JSONValue) -> bool:
    if not isinstance(schema, dict):
        return False
    kind = schema.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    if ("const" in schema and schema["const"] is None) or (
        isinstance(schema.get("enum"), list) and None in schema["enum"]
    ):
        return True
    any_of = schema.get("anyOf")
    return isinstance(any_of, list) and any(_schema_allows_null(v) for v in any_of)


def _make_node_strict(schema: JSONValue) -> None:
    if not isinstance(schema, dict):
        _unsupported("boolean schemas are unsupported")
    for key in _UNSUPPORTED_STRICT_KEYS:
        if schema.get(key) is not None:
            _unsupported(f"{key} schemas are unsupported")
    if schema.get("anyOf") is not None:
        any_of = schema["anyOf"]
        if not isinstance(any_of, list) or not any_of:
            _unsupported("anyOf must contain at least one schema")
        for variant in any_of:
            if _is_structured_schema(variant):
                _unsupported("object and array unions are unsupported")
            _make_node_strict(variant)
    if schema.get("items") is not None:
        if isinstance(schema["items"], list):
            _unsupported("tuple schemas are unsupported")
        _make_node_strict(schema["items"])
    is_object = schema.get("type") == "object"
    if schema.get("properties") is not None and not is_object:
        _unsupported("properties require type object")
    if not is_object:
        return
    additional = schema.get("additionalProperties")
    if additional is not None and additional is not False:
        _unsupported("schema-valued or true additionalProperties is unsupported")
    if schema.get("properties") is not None and not isinstance(schema["properties"], dict):
        _unsupported("object properties must be a schema map")
    required_list = schema.get("required")
    if required_list is not None and (
        not isinstance(required_list, list) or any(not isinstance(k, str) for k in required_list)
    ):
        _unsupported("object required must be a string array")
    properties: dict[str, JSONValue] = schema.get("properties") or {}
    required = set(required_list or ())
    if any(key not in properties for key in required):
        _unsupported("required contains an unknown property")
    for key, prop in list(properties.items()):
        _make_node_strict(prop)
        if key not in required and not _schema_allows_null(prop):
            properties[key] = {"anyOf": [prop, {"type": "null"}]}
    if "properties" in schema:
        schema["properties"] = properties
    schema["required"] = list(properties)
    schema["additionalProperties"] = False


def make_strict_json_schema(schema: Mapping[str, JSONValue]) -> dict[str, JSONValue]:
    """The strict subset of a tool schema for constrained sampling (``makeStrictJsonSchema``):
    every property required (optional ones become nullable), no additional properties.

    Raises:
        UnsupportedStrictJsonSchemaError: the schema uses what strict mode cannot express.
    """
    cloned = json.loads(json.dumps(schema))
    if not isinstance(cloned, dict):
        _unsupported("root schema must have type object")
    _make_node_strict(cloned)
    if cloned.get("type") != "object":
        _unsupported("root schema must have type object")
    return cloned


def resolve_json_schema_strict(tool: ToolSpec, supports_strict_mode: bool) -> bool | None:
    """``True`` when ``tool`` asks for JSON-schema constrained sampling (its
    ``constrained_sampling`` is ``{"type": "json_schema", ...}``) and can have it
    (``resolveJsonSchemaStrictSampling``); ``None`` otherwise.

    Raises:
        ValueError: the tool requires strict sampling (``strict: "require"``) and
            cannot have it.
    """
    config = getattr(tool, "constrained_sampling", None)
    if not isinstance(config, Mapping) or config.get("type") != "json_schema":
        return None
    if supports_strict_mode:
        try:
            make_strict_json_schema(tool.parameters)
        except UnsupportedStrictJsonSchemaError as exc:
            if config.get("strict") != "require":
                return None
            msg = f'Tool "{tool.name}" requires JSON-schema constrained sampling, but {exc}.'
            raise ValueError(msg) from None
        return True
    if config.get("strict") == "require":
        msg = (
            f'Tool "{tool.name}" requires JSON-schema constrained sampling, '
            "but strict tools are unsupported."
        )
        raise ValueError(msg)
    return None


def resolve_response_format(
    response_format: Mapping[str, JSONValue], supports_strict_mode: bool
) -> dict[str, JSONValue]:
    """``StreamOptions.response_format`` as sent (pitrio's own; pi-ai has no such option).

    A ``json_schema`` format asking for ``strict`` gets the strict subset of its schema
    (:func:`make_strict_json_schema`) when the server supports strict mode and the
    schema has one; otherwise it is sent as given with ``strict: false``, and the
    server's answer is checked against the schema afterwards as every answer is. Any
    other format is sent as given.
    """
    out = dict(response_format)
    spec = out.get("json_schema")
    if out.get("type") != "json_schema" or not isinstance(spec, Mapping):
        return out
    json_schema = dict(spec)
    schema = json_schema.get("schema")
    if json_schema.get("strict") is True:
        strict = False
        if supports_strict_mode and isinstance(schema, Mapping):
            try:
                json_schema["schema"] = make_strict_json_schema(schema)
                strict = True
            except UnsupportedStrictJsonSchemaError:
                pass
        json_schema["strict"] = strict
    out["json_schema"] = json_schema
    return out


_USER_IMAGE_PLACEHOLDER: Final = "(image omitted: model does not support images)"
_TOOL_IMAGE_PLACEHOLDER: Final = "(tool image omitted: model does not support images)"


def _replace_images(content: Sequence[UserContent], placeholder: str) -> tuple[UserContent, ...]:
    out: list[UserContent] = []
    previous_was_placeholder = False
    for block in content:
        if isinstance(block, ImageContent):
            if not previous_was_placeholder:
                out.append(TextContent(text=placeholder))
            previous_was_placeholder = True
            continue
        out.append(block)
        previous_was_placeholder = block.text == placeholder
    return tuple(out)


def transform_messages(
    messages: Sequence[LlmMessage],
    model: Model,
    normalize_tool_call_id: Callable[[str, Model, AssistantMessage], str] | None = None,
) -> list[LlmMessage]:
    """Prepare a history for ``model`` (``transformMessages``).

    Images become placeholders for text-only models; foreign thinking becomes text;
    foreign tool calls lose ``thought_signature`` and get ids normalized (tool results
    follow); ``error``/``aborted`` assistant turns are dropped; tool calls without a
    result get a synthetic ``No result provided`` error result.
    """
    takes_images = "image" in model.input
    id_map: dict[str, str] = {}
    transformed: list[LlmMessage] = []
    for message in messages:
        if isinstance(message, UserMessage):
            if not takes_images and not isinstance(message.content, str):
                message = attrs.evolve(
                    message, content=_replace_images(message.content, _USER_IMAGE_PLACEHOLDER)
                )
            transformed.append(message)
        elif isinstance(message, ToolResultMessage):
            if not takes_images:
                message = attrs.evolve(
                    message, content=_replace_images(message.content, _TOOL_IMAGE_PLACEHOLDER)
                )
            new_id = id_map.get(message.tool_call_id)
            if new_id and new_id != message.tool_call_id:
                message = attrs.evolve(message, tool_call_id=new_id)
            transformed.append(message)
        else:
            transformed.append(_transform_assistant(message, model, normalize_tool_call_id, id_map))

    result: list[LlmMessage] = []
    pending: list[ToolCall] = []
    seen_results: set[str] = set()

    def insert_synthetic() -> None:
        nonlocal pending, seen_results
        for call in pending:
            if call.id not in seen_results:
                result.append(
                    ToolResultMessage(
                        tool_call_id=call.id,
                        tool_name=call.name,
                        content=(TextContent(text="No result provided"),),
                        is_error=True,
                        timestamp=now_ms(),
                    )
                )
        pending = []
        seen_results = set()

    for message in transformed:
        if isinstance(message, AssistantMessage):
            insert_synthetic()
            if message.stop_reason in ("error", "aborted"):
                continue
            calls = [b for b in message.content if isinstance(b, ToolCall)]
            if calls:
                pending = calls
                seen_results = set()
            result.append(message)
        elif isinstance(message, ToolResultMessage):
            seen_results.add(message.tool_call_id)
            result.append(message)
        else:
            insert_synthetic()
            result.append(message)
    insert_synthetic()
    return result


def _transform_assistant(
    message: AssistantMessage,
    model: Model,
    normalize_tool_call_id: Callable[[str, Model, AssistantMessage], str] | None,
    id_map: dict[str, str],
) -> AssistantMessage:
    same_model = (
        message.provider == model.provider
        and message.api == model.api
        and message.model == model.id
    )
    content: list[AssistantContent] = []
    for block in message.content:
        if isinstance(block, ThinkingContent):
            if block.redacted:
                if same_model:
                    content.append(block)
                continue
            if same_model and block.thinking_signature:
                content.append(block)
                continue
            if not block.thinking or not block.thinking.strip(JS_WHITESPACE):
                continue
            content.append(block if same_model else TextContent(text=block.thinking))
        elif isinstance(block, TextContent):
            content.append(block if same_model else TextContent(text=block.text))
        else:
            call = block
            if not same_model and call.thought_signature:
                call = attrs.evolve(call, thought_signature=None)
            if not same_model and normalize_tool_call_id is not None:
                new_id = normalize_tool_call_id(call.id, model, message)
                if new_id != call.id:
                    id_map[call.id] = new_id
                    call = attrs.evolve(call, id=new_id)
            content.append(call)
    return attrs.evolve(message, content=tuple(content))
