"""The provider fixture player: a scripted HTTP server on Trio, and a run of pitrio's
provider against it that records the oracle's trace (``PROVIDERS.md`` §1-3).

:func:`play_fixture` is the whole run: it validates the fixture, serves its scripted
responses from ``127.0.0.1`` (random port), runs the fixture's API through the
provider registry, records every request and event, and returns the records with the
problems seen (the oracle's exit status 3).
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import struct
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, NoReturn, final

import attrs
import httpx
import trio

from .. import _wire as wire
from .._events import AssistantMessageEvent
from .._messages import AssistantMessage, LlmMessage, ToolCall
from .._model import Context, Model, ModelCost, StreamOptions
from .._signal import AbortSignal
from .._stream import AssistantMessageEventStream
from ..providers import stream_simple
from ..providers._common import MaxTokensClampedWarning, register_cost_tiers

__all__ = [
    "APIS",
    "FixtureError",
    "PlayResult",
    "canon",
    "format_trace",
    "normalize_event",
    "normalize_message",
    "play_fixture",
    "validate_fixture",
]

APIS: Final[Mapping[str, str]] = {
    "openai-completions": "/v1",
    "anthropic-messages": "",
    "openai-responses": "/v1",
}
_THINKING_LEVELS: Final = ("off", "minimal", "low", "medium", "high", "xhigh", "max")
_EVENT_TYPES: Final = (
    "start",
    "text_start",
    "text_delta",
    "text_end",
    "thinking_start",
    "thinking_delta",
    "thinking_end",
    "toolcall_start",
    "toolcall_delta",
    "toolcall_end",
    "done",
    "error",
)
_HEADER_DENYLIST: Final = frozenset(
    {
        "host",
        "connection",
        "content-length",
        "accept-encoding",
        "accept-language",
        "sec-fetch-mode",
        "transfer-encoding",
        "keep-alive",
    }
)
_PI_USER_AGENT: Final = re.compile(r"^pi \(.*\)$")
_BLOCK_SCRATCH_KEYS: Final = ("partialArgs", "partialJson", "streamIndex", "customInput", "index")


class FixtureError(Exception):
    """The fixture is malformed (the oracle's exit status 2); the text names the JSON path."""


# ---------------------------------------------------------------------------------------
# Validation (the oracle's validateFixture)


def _seconds(milliseconds: float | None) -> float | None:
    """A fixture's milliseconds (pi-ai's ``timeoutMs``, ``maxRetryDelayMs``) as the
    seconds of :class:`~pitrio.StreamOptions`."""
    return None if milliseconds is None else milliseconds / 1000


def _is_obj(value: object) -> bool:
    return isinstance(value, dict)


def _bad(path: str, message: str) -> NoReturn:
    text = f"{path}: {message}"
    raise FixtureError(text)


def _check_keys(obj: object, allowed: Sequence[str], path: str) -> None:
    if not isinstance(obj, dict):
        _bad(path, "must be an object")
    for key in obj:
        if key not in allowed:
            _bad(f"{path}.{key}", f"unknown key (allowed: {', '.join(allowed)})")


def _type_ok(value: object, kind: str) -> bool:
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if isinstance(value, float) and value.is_integer():
        is_int = True
    checks: dict[str, Callable[[], bool]] = {
        "array": lambda: isinstance(value, list),
        "object": lambda: isinstance(value, dict),
        "integer": lambda: is_int,
        "nonneg-integer": lambda: is_int and value >= 0,  # type: ignore[operator]  # is_int
        "positive-integer": lambda: is_int and value > 0,  # type: ignore[operator]  # is_int
        "string": lambda: isinstance(value, str),
        "number": lambda: isinstance(value, int | float) and not isinstance(value, bool),
        "boolean": lambda: isinstance(value, bool),
    }
    return checks[kind]()


def _check_type(value: object, kind: str, path: str) -> None:
    if not _type_ok(value, kind):
        what = f"a {kind}" if kind.endswith("integer") else f"of type {kind}"
        _bad(path, f"must be {what}")


def _optional(obj: Mapping[str, Any], key: str, kind: str, path: str) -> None:
    if key in obj and obj[key] is not None:
        _check_type(obj[key], kind, f"{path}.{key}")


def _validate_block(block: object, path: str, role: str) -> None:
    if not isinstance(block, dict):
        _bad(path, "must be an object")
    types = ("text", "thinking", "toolCall") if role == "assistant" else ("text", "image")
    if block.get("type") not in types:
        _bad(f"{path}.type", f"must be one of {' | '.join(types)}")
    kind = block["type"]
    if kind == "text":
        _check_keys(block, ("type", "text", "textSignature"), path)
        _check_type(block.get("text"), "string", f"{path}.text")
        _optional(block, "textSignature", "string", path)
    elif kind == "image":
        _check_keys(block, ("type", "data", "mimeType"), path)
        _check_type(block.get("data"), "string", f"{path}.data")
        _check_type(block.get("mimeType"), "string", f"{path}.mimeType")
    elif kind == "thinking":
        _check_keys(block, ("type", "thinking", "thinkingSignature", "redacted"), path)
        _check_type(block.get("thinking"), "string", f"{path}.thinking")
        _optional(block, "thinkingSignature", "string", path)
        _optional(block, "redacted", "boolean", path)
    else:
        _check_keys(block, ("type", "id", "name", "arguments", "thoughtSignature"), path)
        _check_type(block.get("id"), "string", f"{path}.id")
        _check_type(block.get("name"), "string", f"{path}.name")
        _check_type(block.get("arguments"), "object", f"{path}.arguments")
        _optional(block, "thoughtSignature", "string", path)


def _text_or_content(message: Mapping[str, Any], path: str) -> None:
    if ("text" in message) == ("content" in message):
        _bad(path, "needs exactly one of text, content")
    _optional(message, "text", "string", path)


def _validate_message(message: object, path: str) -> None:
    if not isinstance(message, dict):
        _bad(path, "must be an object")
    role = message.get("role")
    if role == "user":
        _check_keys(message, ("role", "text", "content", "timestamp"), path)
        _text_or_content(message, path)
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            _check_type(content, "array", f"{path}.content")
            for i, block in enumerate(content):
                _validate_block(block, f"{path}.content[{i}]", "user")
    elif role == "assistant":
        _check_keys(
            message,
            (
                "role",
                "text",
                "content",
                "stopReason",
                "errorMessage",
                "usage",
                "api",
                "provider",
                "model",
                "timestamp",
            ),
            path,
        )
        _text_or_content(message, path)
        if "content" in message:
            _check_type(message["content"], "array", f"{path}.content")
            for i, block in enumerate(message["content"]):
                _validate_block(block, f"{path}.content[{i}]", "assistant")
        if "stopReason" in message and message["stopReason"] not in (
            "stop",
            "length",
            "toolUse",
            "error",
            "aborted",
        ):
            _bad(f"{path}.stopReason", "must be one of stop | length | toolUse | error | aborted")
        for key in ("errorMessage", "api", "provider", "model"):
            _optional(message, key, "string", path)
        _optional(message, "usage", "object", path)
    elif role == "toolResult":
        _check_keys(
            message,
            (
                "role",
                "toolCallId",
                "toolName",
                "text",
                "content",
                "isError",
                "addedToolNames",
                "timestamp",
            ),
            path,
        )
        _check_type(message.get("toolCallId"), "string", f"{path}.toolCallId")
        _check_type(message.get("toolName"), "string", f"{path}.toolName")
        _text_or_content(message, path)
        if "content" in message:
            _check_type(message["content"], "array", f"{path}.content")
            for i, block in enumerate(message["content"]):
                _validate_block(block, f"{path}.content[{i}]", "toolResult")
        _optional(message, "isError", "boolean", path)
        _optional(message, "addedToolNames", "array", path)
    else:
        _bad(f"{path}.role", "must be one of user | assistant | toolResult")
    _optional(message, "timestamp", "nonneg-integer", path)


_HEX_PAIRS: Final = re.compile(r"^(?:[0-9a-fA-F]{2})*$")


def _validate_part(part: object, path: str) -> None:
    if isinstance(part, str):
        return
    if not isinstance(part, dict):
        _bad(path, "must be a string or an object")
    _check_keys(part, ("text", "hex", "data", "event", "delayMs", "split", "note"), path)
    if sum(1 for k in ("text", "hex", "data") if k in part) != 1:
        _bad(path, "needs exactly one of text, hex, data")
    _optional(part, "text", "string", path)
    if "hex" in part:
        _check_type(part["hex"], "string", f"{path}.hex")
        if not _HEX_PAIRS.match(re.sub(r"\s+", "", part["hex"])):
            _bad(f"{path}.hex", "must be pairs of hex digits (whitespace allowed)")
    if "event" in part:
        if "data" not in part:
            _bad(f"{path}.event", "only allowed together with data")
        _check_type(part["event"], "string", f"{path}.event")
    _optional(part, "delayMs", "nonneg-integer", path)
    _optional(part, "split", "positive-integer", path)
    _optional(part, "note", "string", path)


def _validate_response(response: object, path: str) -> None:
    _check_keys(
        response,
        ("status", "headers", "headersDelayMs", "body", "json", "hangAfter", "end", "note"),
        path,
    )
    assert isinstance(response, dict)
    _optional(response, "status", "integer", path)
    if "status" in response and not 100 <= response["status"] <= 599:
        _bad(f"{path}.status", "must be 100..599")
    if "headers" in response:
        _check_type(response["headers"], "object", f"{path}.headers")
        for key, value in response["headers"].items():
            _check_type(value, "string", f"{path}.headers.{key}")
    _optional(response, "headersDelayMs", "nonneg-integer", path)
    if "body" in response and "json" in response:
        _bad(path, "body and json are exclusive")
    if "body" in response:
        _check_type(response["body"], "array", f"{path}.body")
        for i, part in enumerate(response["body"]):
            _validate_part(part, f"{path}.body[{i}]")
    n_parts = len(response["body"]) if "body" in response else (1 if "json" in response else 0)
    if "hangAfter" in response:
        _check_type(response["hangAfter"], "nonneg-integer", f"{path}.hangAfter")
        if response["hangAfter"] > n_parts:
            _bad(f"{path}.hangAfter", f"must be <= the number of body parts ({n_parts})")
    if "end" in response and response["end"] not in ("close", "reset"):
        _bad(f"{path}.end", "must be one of close | reset")
    if "end" in response and "hangAfter" in response:
        _bad(path, "end and hangAfter are exclusive")
    _optional(response, "note", "string", path)


def validate_fixture(fixture: object) -> None:
    """Check a fixture as the oracle does.

    Raises:
        FixtureError: the first problem, naming its JSON path.
    """
    _check_keys(
        fixture,
        (
            "name",
            "description",
            "api",
            "model",
            "apiKey",
            "context",
            "options",
            "responses",
            "abort",
            "timeoutMs",
            "errorMessagePattern",
        ),
        "fixture",
    )
    assert isinstance(fixture, dict)
    _optional(fixture, "name", "string", "fixture")
    _optional(fixture, "description", "string", "fixture")
    if fixture.get("api") not in APIS:
        _bad("fixture.api", f"must be one of {' | '.join(APIS)}")
    model = fixture.get("model", {})
    p = "fixture.model"
    _check_keys(
        model,
        (
            "id",
            "name",
            "provider",
            "baseUrlPath",
            "reasoning",
            "input",
            "cost",
            "contextWindow",
            "maxTokens",
            "headers",
            "compat",
            "thinkingLevelMap",
        ),
        p,
    )
    for key, kind in (
        ("id", "string"),
        ("name", "string"),
        ("provider", "string"),
        ("baseUrlPath", "string"),
        ("reasoning", "boolean"),
    ):
        _optional(model, key, kind, p)
    if "input" in model:
        _check_type(model["input"], "array", f"{p}.input")
        if any(x not in ("text", "image") for x in model["input"]):
            _bad(f"{p}.input", 'entries must be "text" or "image"')
    if "cost" in model:
        _check_keys(
            model["cost"], ("input", "output", "cacheRead", "cacheWrite", "tiers"), f"{p}.cost"
        )
        for key in ("input", "output", "cacheRead", "cacheWrite"):
            _optional(model["cost"], key, "number", f"{p}.cost")
        _optional(model["cost"], "tiers", "array", f"{p}.cost")
    _optional(model, "contextWindow", "nonneg-integer", p)
    _optional(model, "maxTokens", "positive-integer", p)
    for key in ("headers", "compat", "thinkingLevelMap"):
        _optional(model, key, "object", p)
    api_key = fixture.get("apiKey")
    if api_key is not None and not isinstance(api_key, str):
        _bad("fixture.apiKey", "must be a string or null")
    context = fixture.get("context", {})
    p = "fixture.context"
    _check_keys(context, ("systemPrompt", "messages", "tools"), p)
    _optional(context, "systemPrompt", "string", p)
    if "messages" in context:
        _check_type(context["messages"], "array", f"{p}.messages")
        for i, message in enumerate(context["messages"]):
            _validate_message(message, f"{p}.messages[{i}]")
    if "tools" in context:
        _check_type(context["tools"], "array", f"{p}.tools")
        for i, tool in enumerate(context["tools"]):
            tp = f"{p}.tools[{i}]"
            _check_keys(tool, ("name", "description", "parameters", "constrainedSampling"), tp)
            _check_type(tool.get("name"), "string", f"{tp}.name")
            _check_type(tool.get("description"), "string", f"{tp}.description")
            _check_type(tool.get("parameters"), "object", f"{tp}.parameters")
            _optional(tool, "constrainedSampling", "object", tp)
    options = fixture.get("options", {})
    p = "fixture.options"
    _check_keys(
        options,
        (
            "reasoning",
            "maxTokens",
            "temperature",
            "toolChoice",
            "sessionId",
            "cacheRetention",
            "headers",
            "maxRetries",
            "maxRetryDelayMs",
            "timeoutMs",
            "metadata",
            "thinkingBudgets",
        ),
        p,
    )
    if "reasoning" in options and options["reasoning"] not in _THINKING_LEVELS:
        _bad(f"{p}.reasoning", f"must be one of {' | '.join(_THINKING_LEVELS)}")
    _optional(options, "maxTokens", "positive-integer", p)
    _optional(options, "temperature", "number", p)
    if "toolChoice" in options and not isinstance(options["toolChoice"], str | dict):
        _bad(f"{p}.toolChoice", "must be a string or an object")
    _optional(options, "sessionId", "string", p)
    if "cacheRetention" in options and options["cacheRetention"] not in ("none", "short", "long"):
        _bad(f"{p}.cacheRetention", "must be one of none | short | long")
    for key, kind in (
        ("headers", "object"),
        ("maxRetries", "nonneg-integer"),
        ("maxRetryDelayMs", "nonneg-integer"),
        ("timeoutMs", "positive-integer"),
        ("metadata", "object"),
        ("thinkingBudgets", "object"),
    ):
        _optional(options, key, kind, p)
    if "responses" not in fixture:
        _bad("fixture.responses", "required (use [] when no request is expected)")
    _check_type(fixture["responses"], "array", "fixture.responses")
    for i, response in enumerate(fixture["responses"]):
        _validate_response(response, f"fixture.responses[{i}]")
    if "abort" in fixture:
        abort = fixture["abort"]
        _check_keys(abort, ("event", "nth", "request", "delayMs"), "fixture.abort")
        has_event = "event" in abort or "nth" in abort
        if ("request" in abort) == has_event:
            _bad("fixture.abort", "needs either request, or event/nth")
        if "request" in abort:
            _check_type(abort["request"], "positive-integer", "fixture.abort.request")
        if "event" in abort and abort["event"] != "any" and abort["event"] not in _EVENT_TYPES:
            _bad("fixture.abort.event", f'must be "any" or one of {" | ".join(_EVENT_TYPES)}')
        _optional(abort, "nth", "positive-integer", "fixture.abort")
        _optional(abort, "delayMs", "nonneg-integer", "fixture.abort")
    _optional(fixture, "timeoutMs", "positive-integer", "fixture")
    if "errorMessagePattern" in fixture:
        _check_type(fixture["errorMessagePattern"], "string", "fixture.errorMessagePattern")
        try:
            re.compile(fixture["errorMessagePattern"])
        except re.error as exc:
            _bad("fixture.errorMessagePattern", f"not a valid regular expression: {exc}")


# ---------------------------------------------------------------------------------------
# Building pitrio's model, context and options


@final
@attrs.frozen(kw_only=True)
class FixtureTool:
    """A tool as a fixture gives it (``ToolSpec`` plus ``constrainedSampling``)."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    constrained_sampling: Mapping[str, Any] | None = None


def build_model(fixture: Mapping[str, Any], port: int) -> Model:
    """The fixture's model, its base URL pointing at ``127.0.0.1:port``."""
    spec = fixture.get("model", {})
    api = fixture["api"]
    model_id = spec.get("id", "test-model")
    cost = spec.get("cost", {})
    model = Model(
        id=model_id,
        name=spec.get("name", model_id),
        api=api,
        provider=spec.get("provider", "test"),
        base_url=f"http://127.0.0.1:{port}{spec.get('baseUrlPath', APIS[api])}",
        reasoning=spec.get("reasoning", False),
        input=tuple(spec.get("input", ("text",))),
        cost=ModelCost(
            input=cost.get("input", 0),
            output=cost.get("output", 0),
            cache_read=cost.get("cacheRead", 0),
            cache_write=cost.get("cacheWrite", 0),
        ),
        context_window=spec.get("contextWindow", 128000),
        max_tokens=spec.get("maxTokens", 4096),
        headers=spec.get("headers"),
        compat=spec.get("compat"),
        thinking_level_map=spec.get("thinkingLevelMap"),
    )
    if cost.get("tiers"):
        register_cost_tiers(model, cost["tiers"])
    return model


_ZERO_USAGE: Final = {
    "input": 0,
    "output": 0,
    "cacheRead": 0,
    "cacheWrite": 0,
    "totalTokens": 0,
    "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
}


def _message_json(spec: Mapping[str, Any], model: Model) -> dict[str, Any]:
    timestamp = spec.get("timestamp", 0)
    if spec["role"] == "user":
        content = spec["text"] if "text" in spec else spec["content"]
        return {"role": "user", "content": content, "timestamp": timestamp}
    if spec["role"] == "assistant":
        content = [{"type": "text", "text": spec["text"]}] if "text" in spec else spec["content"]
        usage = {**_ZERO_USAGE, **spec.get("usage", {})}
        usage["cost"] = {**_ZERO_USAGE["cost"], **spec.get("usage", {}).get("cost", {})}  # type: ignore[dict-item]  # a dict
        has_call = any(b.get("type") == "toolCall" for b in content)
        message = {
            "role": "assistant",
            "content": content,
            "api": spec.get("api", model.api),
            "provider": spec.get("provider", model.provider),
            "model": spec.get("model", model.id),
            "usage": usage,
            "stopReason": spec.get("stopReason", "toolUse" if has_call else "stop"),
            "timestamp": timestamp,
        }
        if "errorMessage" in spec:
            message["errorMessage"] = spec["errorMessage"]
        return message
    content = [{"type": "text", "text": spec["text"]}] if "text" in spec else spec["content"]
    message = {
        "role": "toolResult",
        "toolCallId": spec["toolCallId"],
        "toolName": spec["toolName"],
        "content": content,
        "isError": spec.get("isError", False),
        "timestamp": timestamp,
    }
    if "addedToolNames" in spec:
        message["addedToolNames"] = spec["addedToolNames"]
    return message


def build_context(fixture: Mapping[str, Any], model: Model) -> Context:
    """The fixture's context as pitrio values."""
    spec = fixture.get("context", {})
    messages: list[LlmMessage] = [
        wire.structure_message(json.loads(json.dumps(_message_json(m, model))))
        for m in spec.get("messages", ())
    ]
    tools = tuple(
        FixtureTool(
            name=t["name"],
            description=t["description"],
            parameters=t["parameters"],
            constrained_sampling=t.get("constrainedSampling"),
        )
        for t in spec.get("tools", ())
    )
    return Context(system_prompt=spec.get("systemPrompt", ""), messages=messages, tools=tools)


def build_options(fixture: Mapping[str, Any], signal: AbortSignal) -> StreamOptions:
    """The fixture's ``streamSimple`` options plus ``signal`` and ``api_key``."""
    spec = fixture.get("options", {})
    api_key = fixture.get("apiKey", "sk-test")
    return StreamOptions(
        signal=signal,
        api_key=api_key,
        reasoning=spec.get("reasoning"),
        session_id=spec.get("sessionId"),
        max_tokens=spec.get("maxTokens"),
        temperature=spec.get("temperature"),
        tool_choice=spec.get("toolChoice"),
        headers=spec.get("headers"),
        max_retries=spec.get("maxRetries"),
        max_retry_delay=_seconds(spec.get("maxRetryDelayMs")),
        timeout=_seconds(spec.get("timeoutMs")),
        thinking_budgets=spec.get("thinkingBudgets"),
        cache_retention=spec.get("cacheRetention"),
        metadata=spec.get("metadata"),
    )


# ---------------------------------------------------------------------------------------
# Trace records


def normalize_message(message: AssistantMessage) -> dict[str, Any]:
    """A message in trace form: wire JSON without ``timestamp``/``responseId`` and
    scratch fields."""
    out: dict[str, Any] = wire.unstructure(message)
    out.pop("timestamp", None)
    out.pop("responseId", None)
    for block in out.get("content", ()):
        if isinstance(block, dict):
            for key in _BLOCK_SCRATCH_KEYS:
                block.pop(key, None)
    for entry in out.get("diagnostics") or ():
        if isinstance(entry, dict):
            entry.pop("timestamp", None)
    return out


def _normalize_block(block: ToolCall) -> dict[str, Any]:
    out: dict[str, Any] = wire.unstructure(block)
    for key in _BLOCK_SCRATCH_KEYS:
        out.pop(key, None)
    return out


def normalize_event(event: AssistantMessageEvent) -> dict[str, Any]:
    """One event record (``PROVIDERS.md`` §3.3)."""
    record: dict[str, Any] = {"type": event.type}
    for name, key in (
        ("content_index", "contentIndex"),
        ("delta", "delta"),
        ("content", "content"),
        ("reason", "reason"),
    ):
        value = getattr(event, name, None)
        if value is not None:
            record[key] = value
    tool_call = getattr(event, "tool_call", None)
    if tool_call is not None:
        record["toolCall"] = _normalize_block(tool_call)
    for name in ("partial", "message", "error"):
        value = getattr(event, name, None)
        if value is not None:
            record[name] = normalize_message(value)
    return record


_LEADING_KEYS: Final = ("type", "role")


def canon(value: Any) -> Any:
    """Keys sorted with ``type`` and ``role`` first; ``None`` dropped from objects."""
    if isinstance(value, list | tuple):
        return [canon(v) for v in value]
    if not isinstance(value, dict):
        return value

    def order(key: str) -> tuple[int, str]:
        return (_LEADING_KEYS.index(key) if key in _LEADING_KEYS else 99, key)

    return {k: canon(value[k]) for k in sorted(value, key=order) if value[k] is not None}


def format_trace(records: Sequence[Mapping[str, Any]]) -> str:
    """The oracle's printed form: a JSON array, one record per line."""
    lines = [
        json.dumps(canon(r), separators=(",", ":"), ensure_ascii=False, allow_nan=True)
        for r in records
    ]
    return "[\n" + ",\n".join(lines) + "\n]\n" if lines else "[]\n"


# ---------------------------------------------------------------------------------------
# The scripted server


def _part_bytes(part: str | Mapping[str, Any]) -> bytes:
    if isinstance(part, str):
        return part.encode()
    if "text" in part:
        return str(part["text"]).encode()
    if "hex" in part:
        return bytes.fromhex(re.sub(r"\s+", "", part["hex"]))
    event = f"event: {part['event']}\n" if "event" in part else ""
    data = json.dumps(part["data"], separators=(",", ":"), ensure_ascii=False)
    return f"{event}data: {data}\n\n".encode()


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


_REASONS: Final = {
    200: "OK",
    400: "Bad Request",
    429: "Too Many Requests",
    500: "Internal Server Error",
}


class _RequestReader:
    """Reads HTTP/1.1 requests (Content-Length or chunked bodies) from a stream."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buffer = b""

    async def _fill(self) -> bool:
        data = await self.stream.receive_some(65536)
        if not data:
            return False
        self.buffer += data
        return True

    async def _read_until(self, marker: bytes) -> bytes | None:
        while marker not in self.buffer:
            if not await self._fill():
                return None
        head, _, self.buffer = self.buffer.partition(marker)
        return head

    async def _read_exact(self, n: int) -> bytes | None:
        while len(self.buffer) < n:
            if not await self._fill():
                return None
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    async def read_request(self) -> tuple[str, str, dict[str, str], bytes] | None:
        head = await self._read_until(b"\r\n\r\n")
        if head is None:
            return None
        lines = head.decode("latin-1").split("\r\n")
        method, target, *_ = lines[0].split(" ")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            key = name.strip().lower()
            value = value.strip()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        body = b""
        if headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size_line = await self._read_until(b"\r\n")
                if size_line is None:
                    return None
                size = int(size_line.split(b";")[0], 16)
                if size == 0:
                    await self._read_until(b"\r\n")
                    break
                data = await self._read_exact(size + 2)
                if data is None:
                    return None
                body += data[:-2]
        elif "content-length" in headers:
            data = await self._read_exact(int(headers["content-length"]))
            if data is None:
                return None
            body = data
        return method, target, headers, body


@final
class _Server:
    """The scripted HTTP server of one fixture run."""

    def __init__(
        self,
        responses: Sequence[Mapping[str, Any]],
        records: list[dict[str, Any]],
        problems: list[str],
        on_request: Callable[[int], None],
    ) -> None:
        self.responses = responses
        self.records = records
        self.problems = problems
        self.on_request = on_request
        self.count = 0

    async def handle(self, stream: trio.SocketStream) -> None:
        reader = _RequestReader(stream)
        try:
            while True:
                request = await reader.read_request()
                if request is None:
                    return
                if not await self._serve(stream, reader, *request):
                    return
        except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
            return
        finally:
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(stream)

    def _record(self, method: str, target: str, headers: Mapping[str, str], body: bytes) -> int:
        self.count += 1
        n = self.count
        record: dict[str, Any] = {
            "type": "request",
            "n": n,
            "method": method,
            "path": target,
            "headers": {
                k: ("pi (<platform>)" if k == "user-agent" and _PI_USER_AGENT.match(v) else v)
                for k, v in headers.items()
                if k not in _HEADER_DENYLIST and not k.startswith("x-stainless-")
            },
        }
        text = body.decode("utf-8", "replace")
        if text:
            try:
                record["body"] = json.loads(text)
            except ValueError:
                record["bodyText"] = text
        self.records.append(record)
        self.on_request(n)
        return n

    async def _serve(
        self,
        stream: trio.SocketStream,
        reader: _RequestReader,
        method: str,
        target: str,
        headers: Mapping[str, str],
        body: bytes,
    ) -> bool:
        """Answer one request; returns whether the connection may serve another."""
        n = self._record(method, target, headers, body)
        if n > len(self.responses):
            self.problems.append(
                f"request {n} arrived but only {len(self.responses)} response(s) are scripted"
            )
            payload = b'{"error":{"message":"provider-oracle: unscripted request"}}'
            await stream.send_all(
                b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(payload), payload)
            )
            return False
        spec = self.responses[n - 1]
        if spec.get("headersDelayMs") and await self._client_gone_within(
            stream, reader, spec["headersDelayMs"] / 1000
        ):
            return False
        status = spec.get("status", 200)
        given: Mapping[str, str] = spec.get("headers", {})
        out_headers: dict[str, str] = {}
        if not any(k.lower() == "content-type" for k in given):
            out_headers["content-type"] = (
                "application/json" if "json" in spec or status >= 300 else "text/event-stream"
            )
        out_headers.update(given)
        head = f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in out_headers.items())
        head += "transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
        await stream.send_all(head.encode("latin-1"))
        parts: list[Any] = (
            [json.dumps(spec["json"], separators=(",", ":"), ensure_ascii=False)]
            if "json" in spec
            else list(spec.get("body", ()))
        )
        hang_after = spec.get("hangAfter")
        for index, part in enumerate(parts):
            if hang_after == index:
                await self._wait_client_gone(stream, reader)
                return False
            if (
                isinstance(part, dict)
                and part.get("delayMs")
                and await self._client_gone_within(stream, reader, part["delayMs"] / 1000)
            ):
                return False
            data = _part_bytes(part)
            split = part.get("split") if isinstance(part, dict) else None
            step = split or len(data) or 1
            for offset in range(0, len(data), step):
                if offset > 0:
                    await trio.sleep(0.002)
                await stream.send_all(_chunk(data[offset : offset + step]))
        if hang_after is not None and hang_after == len(parts):
            await self._wait_client_gone(stream, reader)
            return False
        if spec.get("end") == "reset":
            await trio.sleep(0.005)
            _reset(stream)
            return False
        await stream.send_all(b"0\r\n\r\n")
        return False

    async def _wait_client_gone(self, stream: trio.SocketStream, reader: _RequestReader) -> None:
        while True:
            data = await stream.receive_some(65536)
            if not data:
                return
            reader.buffer += data

    async def _client_gone_within(
        self, stream: trio.SocketStream, reader: _RequestReader, seconds: float
    ) -> bool:
        with trio.move_on_after(seconds):
            await self._wait_client_gone(stream, reader)
            return True
        return False


def _reset(stream: trio.SocketStream) -> None:
    """Destroy the TCP connection (RST) without finishing the chunked body."""
    sock = stream.socket
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


# ---------------------------------------------------------------------------------------
# The run


@final
@attrs.frozen
class PlayResult:
    """What a fixture run produced: the trace records and the problems (exit 3)."""

    records: list[dict[str, Any]]
    problems: list[str]


async def play_fixture(
    fixture: Mapping[str, Any], *, client: httpx.AsyncClient | None = None
) -> PlayResult:
    """Run one fixture against pitrio's provider for its API.

    Args:
        fixture: the decoded fixture JSON.
        client: the HTTP client to use (default: a fresh one, closed afterwards).

    Raises:
        FixtureError: the fixture is malformed.
    """
    validate_fixture(fixture)
    records: list[dict[str, Any]] = []
    problems: list[str] = []
    abort_spec: Mapping[str, Any] | None = fixture.get("abort")
    signal = AbortSignal()
    stream_box: list[AssistantMessageEventStream] = []
    fired = False
    limit = fixture.get("timeoutMs", 10000) / 1000

    async with trio.open_nursery() as nursery:

        def do_abort() -> None:
            assert abort_spec is not None
            records.append({"type": "abort", "trigger": dict(abort_spec)})
            signal.abort()

        async def abort_later(delay: float) -> None:
            await trio.sleep(delay)
            do_abort()

        def fire_abort() -> None:
            nonlocal fired
            if fired or abort_spec is None:
                return
            fired = True
            if abort_spec.get("delayMs"):
                nursery.start_soon(abort_later, abort_spec["delayMs"] / 1000)
            else:
                do_abort()

        def on_request(n: int) -> None:
            if abort_spec is not None and abort_spec.get("request") == n:
                fire_abort()

        server = _Server(fixture["responses"], records, problems, on_request)
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        server_scope = trio.CancelScope()

        async def run_server() -> None:
            with server_scope:
                await trio.serve_listeners(server.handle, listeners)

        nursery.start_soon(run_server)
        own_client = client is None
        http = client or httpx.AsyncClient(
            timeout=httpx.Timeout(None), trust_env=False, verify=False
        )
        try:
            # pi-ai clamps max_tokens silently; pitrio warns (MaxTokensClampedWarning),
            # which is not part of the trace. The player runs one fixture at a time.
            with warnings.catch_warnings(), trio.move_on_after(limit) as timeout_scope:
                warnings.simplefilter("ignore", MaxTokensClampedWarning)
                await _consume(
                    fixture,
                    port,
                    http,
                    signal,
                    abort_spec,
                    records,
                    problems,
                    fire_abort,
                    stream_box,
                )
            if timeout_scope.cancelled_caught:
                problems.append(
                    f"fixture did not finish within {fixture.get('timeoutMs', 10000)} ms "
                    "(trace so far printed)"
                )
        finally:
            if own_client:
                with trio.CancelScope(shield=True):
                    await http.aclose()
            server_scope.cancel()
            nursery.cancel_scope.cancel()
    if server.count < len(fixture["responses"]):
        problems.append(
            f"{len(fixture['responses']) - server.count} scripted response(s) never requested "
            f"({server.count} request(s) made)"
        )
    if abort_spec is not None and not fired:
        problems.append(f"abort trigger never fired: {json.dumps(abort_spec)}")
    return PlayResult(records, problems)


async def _consume(
    fixture: Mapping[str, Any],
    port: int,
    http: httpx.AsyncClient,
    signal: AbortSignal,
    abort_spec: Mapping[str, Any] | None,
    records: list[dict[str, Any]],
    problems: list[str],
    fire_abort: Callable[[], None],
    stream_box: list[AssistantMessageEventStream],
) -> None:
    model = build_model(fixture, port)
    context = build_context(fixture, model)
    options = build_options(fixture, signal)
    stream = stream_simple(http, model, context, options)
    stream_box.append(stream)
    remove = signal.add_callback(stream.cancel)
    total = 0
    per_type: dict[str, int] = {}
    terminal: AssistantMessageEvent | None = None
    try:
        async with stream:
            async for event in stream:
                records.append(normalize_event(event))
                if terminal is not None:
                    problems.append(f'event "{event.type}" after the terminal event')
                if event.type in ("done", "error"):
                    terminal = event
                total += 1
                per_type[event.type] = per_type.get(event.type, 0) + 1
                if abort_spec is not None and "request" not in abort_spec:
                    want = abort_spec.get("event", "any")
                    count = total if want == "any" else per_type.get(event.type, 0)
                    if (want in ("any", event.type)) and count == abort_spec.get("nth", 1):
                        fire_abort()
            result = await stream.result()
    finally:
        remove()
    if terminal is None:
        problems.append("the event stream ended without a done/error event")
    else:
        terminal_message = getattr(terminal, "message", None) or getattr(terminal, "error", None)
        if result is not terminal_message:
            problems.append("stream.result() is not the terminal event's message")
    records.append({"type": "result", "message": normalize_message(result)})
    pattern = fixture.get("errorMessagePattern")
    if pattern is not None and (
        not isinstance(result.error_message, str) or not re.search(pattern, result.error_message)
    ):
        problems.append(
            f"errorMessagePattern {pattern} does not match errorMessage "
            f"{json.dumps(result.error_message)}"
        )
