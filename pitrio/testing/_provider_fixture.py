"""A provider fixture of the provider oracle (``PROVIDERS.md`` §1): its checks and values.

:func:`validate_fixture` checks a decoded fixture as the oracle's ``validateFixture``
does, naming the JSON path of the first problem; :func:`build_model`,
:func:`build_context` and :func:`build_options` turn it into the
:class:`~pitrio.Model`, :class:`~pitrio.Context` and :class:`~pitrio.StreamOptions`
of the run (milliseconds on the wire, seconds in pitrio).

Three additions to the oracle's format, shared with ``tests/providers/node/google_trace.mjs``
(for the ``azure-openai-responses`` and ``google-vertex`` corpora): ``options.env`` (pi-ai's
scoped environment, ``StreamOptions.extra["env"]`` here), ``files`` (``{name: JSON}``
written to a fresh folder for the run, e.g. a credentials file), and the placeholders
``{baseUrl}`` (the scripted server) and ``{files}`` (that folder) in the env values and
the files' strings (:func:`fill_placeholders`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, NoReturn, final

import attrs

from .. import _wire as wire
from .._messages import LlmMessage
from .._model import Context, Model, ModelCost, StreamOptions
from .._signal import AbortSignal
from ..providers._output import register_cost_tiers
from ._errors import FixtureError

__all__ = [
    "APIS",
    "FixtureTool",
    "build_context",
    "build_model",
    "build_options",
    "fill_placeholders",
    "validate_fixture",
]

APIS: Final[Mapping[str, str]] = {
    "openai-completions": "/v1",
    "anthropic-messages": "",
    "openai-responses": "/v1",
    "google-generative-ai": "/v1beta",
    "mistral-conversations": "",
    "pi-messages": "/v1",
    "bedrock-converse-stream": "",
    "openai-codex-responses": "/backend-api",
    "azure-openai-responses": "/openai/v1",
    "google-vertex": "/v1",
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
    # JSON has one number type: an integer is an int or a float with no fraction.
    integer: int | float | None = None
    if (isinstance(value, int) and not isinstance(value, bool)) or (
        isinstance(value, float) and value.is_integer()
    ):
        integer = value
    checks: dict[str, Callable[[], bool]] = {
        "array": lambda: isinstance(value, list),
        "object": lambda: isinstance(value, dict),
        "integer": lambda: integer is not None,
        "nonneg-integer": lambda: integer is not None and integer >= 0,
        "positive-integer": lambda: integer is not None and integer > 0,
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
    _check_keys(
        part,
        ("text", "hex", "data", "event", "awsEvent", "awsException", "delayMs", "split", "note"),
        path,
    )
    aws = [k for k in ("awsEvent", "awsException") if k in part]
    if len(aws) > 1 or (aws and ("data" not in part or "event" in part)):
        _bad(path, "awsEvent and awsException are exclusive, need data and exclude event")
    for key in aws:
        _check_type(part[key], "string", f"{path}.{key}")
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
            "files",
        ),
        "fixture",
    )
    assert isinstance(fixture, dict)
    _optional(fixture, "files", "object", "fixture")
    for file_name in fixture.get("files", {}):
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", file_name) or file_name.startswith("."):
            _bad(f"fixture.files.{file_name}", "must be a plain file name")
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
            "env",
            "transport",
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
        ("env", "object"),
        ("transport", "string"),
    ):
        _optional(options, key, kind, p)
    for key, value in options.get("env", {}).items():
        _check_type(value, "string", f"{p}.env.{key}")
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


_ZERO_USAGE: Final[dict[str, Any]] = {
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
        usage: dict[str, Any] = {**_ZERO_USAGE, **spec.get("usage", {})}
        usage["cost"] = {**_ZERO_USAGE["cost"], **spec.get("usage", {}).get("cost", {})}
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


def build_options(
    fixture: Mapping[str, Any],
    signal: AbortSignal,
    *,
    base_url: str = "",
    files_dir: str = "",
) -> StreamOptions:
    """The fixture's ``streamSimple`` options plus ``signal`` and ``api_key``.

    ``options.env`` becomes ``extra["env"]`` (pi-ai's scoped ``options.env``); in its
    values ``{baseUrl}`` is the scripted server (``base_url``) and ``{files}`` the
    folder of the fixture's ``files`` (``files_dir``)."""
    spec = fixture.get("options", {})
    api_key = fixture.get("apiKey", "sk-test")
    extra: dict[str, Any] = {}
    if "env" in spec:
        extra["env"] = fill_placeholders(spec["env"], base_url, files_dir)
    if "transport" in spec:
        extra["transport"] = spec["transport"]
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
        extra=extra,
    )


def fill_placeholders(value: Any, base_url: str, files_dir: str) -> Any:
    """``value`` with ``{baseUrl}`` and ``{files}`` replaced in every string."""
    if isinstance(value, str):
        return value.replace("{baseUrl}", base_url).replace("{files}", files_dir)
    if isinstance(value, dict):
        return {k: fill_placeholders(v, base_url, files_dir) for k, v in value.items()}
    if isinstance(value, list):
        return [fill_placeholders(v, base_url, files_dir) for v in value]
    return value
