"""Helpers shared by the HTTP providers (one place for pi-ai's common machinery).

What lives here, each a port of the pi-ai 0.85.0 / vendor-SDK code named in brackets:

- JavaScript-compatible JSON: :func:`json_stringify` (``JSON.stringify``),
  :func:`json_parse` (``JSON.parse``), :func:`js_length` (UTF-16 length), :func:`js_truthy`;
- partial JSON of streamed tool arguments: :func:`parse_streaming_json`
  (``parseStreamingJson``), :func:`repair_json`, :func:`parse_json_with_repair`,
  :func:`parse_partial_json` (``partial-json`` 0.1.7);
- usage cost: :func:`calculate_cost` (``calculateCost``);
- errors: :class:`APIError` and its subclasses (the SDKs' error classes and texts),
  :func:`api_status_error` (the SDKs' ``makeStatusError``), :func:`format_provider_error`
  (``normalizeProviderError`` + ``formatProviderError``);
- HTTP: :func:`send_streaming` (one SDK request: headers timeout, status errors),
  :func:`send_with_retries` (``retryProviderRequest``), :func:`retry_delay_ms`,
  :func:`is_retryable`, :func:`close_response`, :func:`merge_headers`,
  :func:`pi_user_agent`;
- request building: :func:`transform_messages` (``transformMessages``),
  :func:`sanitize_surrogates`, :func:`short_hash`, :func:`estimate_context_tokens`,
  :func:`clamp_max_tokens_to_context`, :func:`clamp_thinking_level`,
  :func:`thinking_budget_for_level`, :func:`adjust_max_tokens_for_thinking`,
  :func:`resolve_cache_retention`, :func:`require_api_key`, :func:`tool_json`;
- the streamed message: :class:`PartialMessage` (pi-ai's mutable ``output`` object made
  into a builder of frozen snapshots) and :func:`setup_error_message`.

These names are shared by the three provider modules; keep them stable.
"""

from __future__ import annotations

import json
import math
import os
import platform
import random
import re
import time
import warnings
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Mapping,
    Sequence,
)
from contextlib import asynccontextmanager
from email.utils import parsedate_to_datetime
from typing import Any, Final, NoReturn, cast, final

import attrs
import httpx
import trio

from .._errors import ProviderError
from .._messages import (
    AssistantContent,
    AssistantMessage,
    Cost as Cost,
    ImageContent,
    JSONValue,
    LazyValue,
    LlmMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserContent,
    UserMessage,
)
from .._model import Context, Model, ToolSpec

__all__ = [
    "DEFAULT_MAX_RETRY_DELAY_MS",
    "DEFAULT_THINKING_BUDGETS",
    "DEFAULT_TIMEOUT_MS",
    "THINKING_LEVELS",
    "APIConnectionError",
    "APIConnectionTimeoutError",
    "APIError",
    "MissingApiKeyError",
    "PartialMessage",
    "RetryDelayTooLongError",
    "UnsupportedStrictJsonSchemaError",
    "adjust_max_tokens_for_thinking",
    "api_status_error",
    "calculate_cost",
    "clamp_max_tokens_to_context",
    "clamp_thinking_level",
    "close_response",
    "estimate_context_tokens",
    "format_provider_error",
    "is_retryable",
    "js_length",
    "js_truthy",
    "json_parse",
    "json_stringify",
    "make_strict_json_schema",
    "merge_headers",
    "now_ms",
    "open_body",
    "parse_json_with_repair",
    "parse_partial_json",
    "parse_streaming_json",
    "pi_user_agent",
    "register_cost_tiers",
    "repair_json",
    "require_api_key",
    "resolve_json_schema_strict",
    "resolve_cache_retention",
    "retry_delay_ms",
    "sanitize_surrogates",
    "send_streaming",
    "send_with_retries",
    "setup_error_message",
    "MaxTokensClampedWarning",
    "short_hash",
    "supported_thinking_levels",
    "thinking_budget_for_level",
    "tool_json",
    "transform_messages",
]

DEFAULT_MAX_RETRY_DELAY_MS: Final = 60_000
"""pi-ai's cap on a server-requested retry delay (``maxRetryDelayMs``; 0 disables it)."""

DEFAULT_TIMEOUT_MS: Final = 600_000
"""The SDKs' default request timeout (covers only the wait for the response headers)."""

THINKING_LEVELS: Final = ("off", "minimal", "low", "medium", "high", "xhigh", "max")

DEFAULT_THINKING_BUDGETS: Final[Mapping[str, int]] = {
    "minimal": 1024,
    "low": 2048,
    "medium": 8192,
    "high": 16384,
}

MIN_ANSWER_TOKENS: Final = 1024
_CONTEXT_SAFETY_TOKENS: Final = 4096
_MAX_ERROR_BODY_CHARS: Final = 4000


def now_ms() -> int:
    """Milliseconds since the epoch (JavaScript's ``Date.now()``)."""
    return int(time.time() * 1000)


# ---------------------------------------------------------------------------------------
# JavaScript-compatible JSON


def js_length(text: str) -> int:
    """The length of ``text`` in UTF-16 code units (JavaScript's ``string.length``)."""
    if text.isascii():
        return len(text)
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def js_truthy(value: object) -> bool:
    """JavaScript truthiness of a decoded JSON value (``{}`` and ``[]`` are truthy)."""
    if value is None or value is False:
        return False
    if isinstance(value, bool):
        return True
    if isinstance(value, int | float):
        return value != 0 and not (isinstance(value, float) and math.isnan(value))
    if isinstance(value, str):
        return value != ""
    return True


def _js_number(value: float) -> str:
    if math.isnan(value) or math.isinf(value):
        return "null"
    if value == int(value) and abs(value) < 1e21:
        return str(int(value))
    text = repr(value)
    mantissa, _, exponent = text.partition("e")
    if not exponent:
        return text
    digits = mantissa.replace(".", "").lstrip("-")
    exp = int(exponent)
    sign = "-" if value < 0 else ""
    digits = digits.rstrip("0") or "0"
    # repr gives d.ddd e±x; JavaScript uses plain notation for 1e-7 <= |x| < 1e21.
    if -7 < exp < 0:
        return f"{sign}0.{'0' * (-exp - 1)}{digits}"
    if 0 <= exp < 21:
        whole = digits.ljust(exp + 1, "0")
        head, tail = whole[: exp + 1], whole[exp + 1 :]
        return f"{sign}{head}.{tail}" if tail else f"{sign}{head}"
    frac = digits[1:]
    return f"{sign}{digits[0]}{'.' + frac if frac else ''}e{'+' if exp > 0 else '-'}{abs(exp)}"


def _has_float(value: Any) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, dict):
        return any(_has_float(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_has_float(v) for v in value)
    return False


def json_stringify(value: JSONValue) -> str:
    """``JSON.stringify(value)``: compact, keys in insertion order, non-ASCII kept,
    numbers written as JavaScript writes them (``1.0`` as ``1``, ``1e-7``)."""
    if _has_float(value):
        return "".join(_FloatReprEncoder().iterencode(value))
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class _FloatReprEncoder(json.JSONEncoder):
    """A compact encoder that writes floats as JavaScript does."""

    def iterencode(self, o: Any, _one_shot: bool = False) -> Any:
        # The pure-Python iterencode takes the float formatter as an argument.
        return json.encoder._make_iterencode(  # type: ignore[attr-defined]  # private helper, stable since 2.7
            {},
            self.default,
            json.encoder.py_encode_basestring,
            None,
            _js_number,
            ":",
            ",",
            False,
            False,
            True,
        )(o, 0)


def _reject_constant(name: str) -> Any:
    msg = f"Unexpected token '{name[0]}', \"{name}\" is not valid JSON"
    raise ValueError(msg)


_DECODER: Final = json.JSONDecoder(parse_constant=_reject_constant)


def json_parse(text: str) -> JSONValue:
    """``JSON.parse(text)``: strict JSON (no ``NaN``/``Infinity``).

    Raises:
        ValueError: the text is not valid JSON (``json.JSONDecodeError`` included).
    """
    return _DECODER.decode(text)


# ---------------------------------------------------------------------------------------
# Partial JSON (pi-ai's utils/json-parse.js and partial-json 0.1.7)

_VALID_JSON_ESCAPES: Final = frozenset('"\\/bfnrtu')
_HEX4: Final = re.compile(r"[0-9a-fA-F]{4}")
_CONTROL_ESCAPES: Final = {"\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def repair_json(text: str) -> str:
    """Repair string literals: escape raw control characters, double a backslash that
    does not start a valid escape (``repairJson``)."""
    out: list[str] = []
    in_string = False
    index = 0
    length = len(text)
    while index < length:
        char = text[index]
        if not in_string:
            out.append(char)
            if char == '"':
                in_string = True
            index += 1
            continue
        if char == '"':
            out.append(char)
            in_string = False
            index += 1
            continue
        if char == "\\":
            if index + 1 >= length:
                out.append("\\\\")
                index += 1
                continue
            next_char = text[index + 1]
            if next_char == "u":
                digits = text[index + 2 : index + 6]
                if len(digits) == 4 and _HEX4.fullmatch(digits):
                    out.append("\\u" + digits)
                    index += 6
                    continue
            if next_char in _VALID_JSON_ESCAPES:
                out.append("\\" + next_char)
                index += 2
                continue
            out.append("\\\\")
            index += 1
            continue
        if ord(char) <= 0x1F:
            out.append(_CONTROL_ESCAPES.get(char, f"\\u{ord(char):04x}"))
        else:
            out.append(char)
        index += 1
    return "".join(out)


def parse_json_with_repair(text: str) -> JSONValue:
    """``JSON.parse``, retried once on :func:`repair_json`'s output if that changed
    anything (``parseJsonWithRepair``). Raises ``ValueError`` like :func:`json_parse`."""
    try:
        return json_parse(text)
    except ValueError:
        repaired = repair_json(text)
        if repaired != text:
            return json_parse(repaired)
        raise


_JS_WHITESPACE: Final = (
    " \t\n\r\v\f\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
    "\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)


def parse_streaming_json(text: str | None) -> JSONValue:
    """Best-effort parse of a possibly incomplete JSON text (``parseStreamingJson``).

    Never raises: returns ``{}`` for empty text or when nothing can be recovered. The
    result is usually a dict but may be any JSON value the text starts with.
    """
    if not text or not text.strip(_JS_WHITESPACE):
        return {}
    try:
        result = parse_json_with_repair(text)
    except (ValueError, RecursionError):
        pass
    else:
        return {} if result is None else result
    for candidate in (text, None):
        try:
            source = text if candidate is not None else repair_json(text)
            result = parse_partial_json(source)
        except (_PartialJSONError, ValueError, RecursionError):
            continue
        return {} if result is None else result
    return {}


class _PartialJSONError(Exception):
    """partial-json's ``PartialJSON`` / ``MalformedJSON``."""


def _js_substring(text: str, start: int, end: int) -> str:
    length = len(text)
    start = min(max(start, 0), length)
    end = min(max(end, 0), length)
    if start > end:
        start, end = end, start
    return text[start:end]


def parse_partial_json(text: str) -> JSONValue:
    """A line-by-line port of ``partial-json`` 0.1.7's ``parse(text, Allow.ALL)``.

    Raises:
        ValueError: the text is empty or malformed beyond repair.
    """
    if not text.strip(_JS_WHITESPACE):
        msg = f"{text} is empty"
        raise ValueError(msg)
    return _PartialParser(text.strip(_JS_WHITESPACE)).parse_any()


class _PartialParser:
    __slots__ = ("index", "length", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.length = len(text)
        self.index = 0

    def _char(self, index: int) -> str:
        return self.text[index] if 0 <= index < self.length else ""

    def _fail(self, message: str) -> _PartialJSONError:
        return _PartialJSONError(f"{message} at position {self.index}")

    def parse_any(self) -> JSONValue:
        self.skip_blank()
        text, index, length = self.text, self.index, self.length
        if index >= length:
            msg = "Unexpected end of input"
            raise self._fail(msg)
        char = text[index]
        if char == '"':
            return self.parse_str()
        if char == "{":
            return self.parse_obj()
        if char == "[":
            return self.parse_arr()
        rest = text[index:]
        for word, value in (
            ("null", None),
            ("true", True),
            ("false", False),
            ("Infinity", math.inf),
        ):
            if rest[: len(word)] == word or (length - index < len(word) and word.startswith(rest)):
                self.index += len(word)
                return value
        if rest[:9] == "-Infinity" or (1 < length - index < 9 and "-Infinity".startswith(rest)):
            self.index += 9
            return -math.inf
        if rest[:3] == "NaN" or (length - index < 3 and "NaN".startswith(rest)):
            self.index += 3
            return math.nan
        return self.parse_num()

    def parse_str(self) -> str:
        text, length = self.text, self.length
        start = self.index
        escape = False
        self.index += 1
        while self.index < length and (
            text[self.index] != '"' or (escape and text[self.index - 1] == "\\")
        ):
            escape = (not escape) if text[self.index] == "\\" else False
            self.index += 1
        if self._char(self.index) == '"':
            self.index += 1
            try:
                value = json_parse(_js_substring(text, start, self.index - int(escape)))
            except ValueError as exc:
                raise self._fail(str(exc)) from None
            return str(value)
        try:
            value = json_parse(_js_substring(text, start, self.index - int(escape)) + '"')
        except ValueError:
            value = json_parse(_js_substring(text, start, text.rfind("\\")) + '"')
        return str(value)

    def parse_obj(self) -> dict[str, JSONValue]:
        self.index += 1
        self.skip_blank()
        obj: dict[str, JSONValue] = {}
        try:
            while self._char(self.index) != "}":
                self.skip_blank()
                if self.index >= self.length:
                    return obj
                key = self.parse_str()
                self.skip_blank()
                self.index += 1
                try:
                    value = self.parse_any()
                except (_PartialJSONError, ValueError, RecursionError):
                    return obj
                obj[key] = value
                self.skip_blank()
                if self._char(self.index) == ",":
                    self.index += 1
        except (_PartialJSONError, ValueError, RecursionError):
            return obj
        self.index += 1
        return obj

    def parse_arr(self) -> list[JSONValue]:
        self.index += 1
        arr: list[JSONValue] = []
        try:
            while self._char(self.index) != "]":
                arr.append(self.parse_any())
                self.skip_blank()
                if self._char(self.index) == ",":
                    self.index += 1
        except (_PartialJSONError, ValueError, RecursionError):
            return arr
        self.index += 1
        return arr

    def parse_num(self) -> JSONValue:
        text = self.text
        if self.index == 0:
            if text == "-":
                msg = "Not sure what '-' is"
                raise self._fail(msg)
            try:
                return json_parse(text)
            except ValueError as exc:
                try:
                    return json_parse(_js_substring(text, 0, text.rfind("e")))
                except ValueError:
                    pass
                raise self._fail(str(exc)) from None
        start = self.index
        if self._char(self.index) == "-":
            self.index += 1
        while self._char(self.index) and self._char(self.index) not in ",]}":
            self.index += 1
        try:
            return json_parse(_js_substring(text, start, self.index))
        except ValueError:
            if _js_substring(text, start, self.index) == "-":
                msg = "Not sure what '-' is"
                raise self._fail(msg) from None
            try:
                return json_parse(_js_substring(text, start, text.rfind("e")))
            except ValueError as exc:
                raise self._fail(str(exc)) from None

    def skip_blank(self) -> None:
        text, length = self.text, self.length
        while self.index < length and text[self.index] in " \n\r\t":
            self.index += 1


# ---------------------------------------------------------------------------------------
# Usage and cost


def calculate_cost(model: Model, usage: Usage) -> Usage:
    """``usage`` with its ``cost`` computed from ``model.cost`` (``calculateCost``).

    The operation order is pi-ai's, so the doubles are bit-identical. Rate tiers are
    used when the model's cost has a ``tiers`` attribute (a sequence of objects or
    mappings with ``input_tokens_above`` and the four rates).
    """
    rates: Any = model.cost
    tiers = getattr(model.cost, "tiers", None) or _COST_TIERS.get(
        (model.provider, model.id, model.cost)
    )
    if tiers:
        input_tokens = usage.input + usage.cache_read + usage.cache_write
        matched = -1.0
        for tier in tiers:
            above = _rate(tier, "input_tokens_above")
            if input_tokens > above and above > matched:
                rates, matched = tier, above
    rate_input = _rate(rates, "input")
    long_write = usage.cache_write_1h or 0
    short_write = usage.cache_write - long_write
    cost_input = (rate_input / 1000000) * usage.input
    cost_output = (_rate(rates, "output") / 1000000) * usage.output
    cost_cache_read = (_rate(rates, "cache_read") / 1000000) * usage.cache_read
    cost_cache_write = (
        _rate(rates, "cache_write") * short_write + rate_input * 2 * long_write
    ) / 1000000
    total = cost_input + cost_output + cost_cache_read + cost_cache_write
    return attrs.evolve(
        usage,
        cost=Cost(
            input=cost_input,
            output=cost_output,
            cache_read=cost_cache_read,
            cache_write=cost_cache_write,
            total=total,
        ),
    )


_COST_TIERS: dict[tuple[str, str, Any], tuple[Any, ...]] = {}


def register_cost_tiers(model: Model, tiers: Sequence[Mapping[str, float]]) -> None:
    """Price tiers for ``model`` (pi-ai's ``cost.tiers``: mappings with
    ``inputTokensAbove`` and the four rates), used by :func:`calculate_cost` while the
    model's id, provider and base rates are these."""
    _COST_TIERS[model.provider, model.id, model.cost] = tuple(tiers)


def _rate(rates: Any, name: str) -> float:
    if isinstance(rates, Mapping):
        camel = {"cache_read": "cacheRead", "cache_write": "cacheWrite"}.get(name, name)
        if name == "input_tokens_above":
            camel = "inputTokensAbove"
        value = rates.get(name, rates.get(camel, 0))
    else:
        value = getattr(rates, name, 0)
    return float(value or 0)


# ---------------------------------------------------------------------------------------
# Errors


class APIError(ProviderError):
    """An SDK-style API error (the OpenAI and Anthropic SDKs' ``APIError``).

    Attributes:
        status: the HTTP status, ``None`` for connection errors and errors in a stream.
        headers: the response headers, when there was a response.
        error: the decoded error object (OpenAI: the body's ``error`` member;
            Anthropic: the whole body; a stream's ``error`` member).
        message: the SDK's message text (also ``str(exc)``).
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        headers: httpx.Headers | None = None,
        error: JSONValue = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.headers = headers
        self.error = error

    @staticmethod
    def make_message(status: int | None, error: JSONValue, message: str | None) -> str:
        """The SDKs' ``APIError.makeMessage``."""
        text: str | None
        field = error.get("message") if isinstance(error, dict) else None
        if js_truthy(field):
            text = field if isinstance(field, str) else json_stringify(field)
        elif js_truthy(error):
            text = json_stringify(error)
        else:
            text = message
        if status and text:
            return f"{status} {text}"
        if status:
            return f"{status} status code (no body)"
        if text:
            return text
        return "(no status code or body)"


class APIConnectionError(APIError):
    """No response: the connection failed (``Connection error.``)."""

    def __init__(self, message: str = "Connection error.") -> None:
        super().__init__(message)


class APIConnectionTimeoutError(APIConnectionError):
    """The response headers did not arrive in time (``Request timed out.``)."""

    def __init__(self, message: str = "Request timed out.") -> None:
        super().__init__(message)


class RetryDelayTooLongError(ProviderError):
    """The server asked for a retry delay above ``StreamOptions.max_retry_delay``."""


class MissingApiKeyError(ProviderError):
    """No API key and no authorization header (``No API key for provider: <name>``)."""


def api_status_error(
    status: int,
    headers: httpx.Headers,
    body_text: str,
    *,
    error_member: str | None = "error",
    body_fallback: bool = False,
) -> APIError:
    """The SDKs' error for a non-2xx response (``makeStatusError``).

    Args:
        status: the HTTP status.
        headers: the response headers.
        body_text: the response body as text.
        error_member: the body member that is the error object (OpenAI SDK:
            ``"error"``); ``None`` for the whole body (Anthropic SDK).
        body_fallback: when a JSON object body lacks ``error_member``, use the whole
            body as the error object instead of losing it (the OpenAI SDK then says
            ``<status> status code (no body)``; pitrio's openai-completions does not).
    """
    try:
        body: JSONValue = json_parse(body_text)
        parsed = True
    except ValueError:
        body, parsed = None, False
        # A server that streams its error (an SSE body): its event's JSON is the body,
        # not the raw stream.
        event_body = _sse_error_body(body_text)
        if event_body is not None:
            body, parsed = event_body, True
    message = None if parsed and js_truthy(body) else body_text
    if error_member is None:
        error = body
    else:
        error = body.get(error_member) if isinstance(body, dict) else None
        if body_fallback and error is None and isinstance(body, dict) and body:
            error = body
    return APIError(
        APIError.make_message(status, error, message), status=status, headers=headers, error=error
    )


def _sse_error_body(text: str) -> JSONValue:
    """The JSON of the first SSE event of ``text`` that has an ``error`` member (else of
    its first JSON object event); ``None`` when ``text`` is not an SSE stream of JSON."""
    if "data:" not in text:
        return None
    from ._sse import SSEDecoder  # _sse is a leaf; kept out of import time

    decoder = SSEDecoder(dispatch_at_eof=True)
    events = [*decoder.feed(text.encode()), *decoder.flush()]
    first: JSONValue = None
    for event in events:
        try:
            value = json_parse(event.data)
        except ValueError:
            continue
        if isinstance(value, dict):
            if js_truthy(value.get("error")):
                return value
            if first is None:
                first = value
    return first


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [truncated {len(text) - limit} chars]"


def format_provider_error(error: BaseException, prefix: str | None = None) -> str:
    """The display text of a provider failure (``normalizeProviderError`` +
    ``formatProviderError``): ``<status>: <body>`` (or ``<prefix> (<status>): <body>``)
    when the SDK message lost the body, else the message itself."""
    message = str(error)
    status = error.status if isinstance(error, APIError) else None
    body: str | None = None
    if isinstance(error, APIError) and isinstance(error.error, dict) and error.error:
        trimmed = json_stringify(error.error).strip(_JS_WHITESPACE)
        if trimmed:
            body = _truncate(trimmed, _MAX_ERROR_BODY_CHARS)
    carries_body = body is None or body in message
    if carries_body or status is None or body is None:
        if prefix is not None and status is not None:
            return f"{prefix} ({status}): {message}"
        return message
    if prefix is not None:
        return f"{prefix} ({status}): {body}"
    return f"{status}: {body}"


# ---------------------------------------------------------------------------------------
# HTTP


def merge_headers(*layers: Mapping[str, str | None] | None) -> dict[str, str]:
    """Merge header layers; later layers win case-insensitively and ``None`` removes a
    header (the SDKs' ``buildHeaders``). Names keep the casing of their last setter."""
    merged: dict[str, tuple[str, str]] = {}
    for layer in layers:
        if not layer:
            continue
        for name, value in layer.items():
            key = name.lower()
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = (name, value)
    return dict(merged.values())


_ARCH: Final = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "i386": "ia32", "i686": "ia32"}


def pi_user_agent() -> str:
    """pi-ai's ``User-Agent``: ``pi (<platform> <release>; <arch>)``."""
    system = platform.system().lower() or "unknown"
    system = {"windows": "win32"}.get(system, system)
    machine = platform.machine().lower()
    return f"pi ({system} {platform.release()}; {_ARCH.get(machine, machine)})"


async def close_response(response: httpx.Response) -> None:
    """Close a streamed response even while the caller is being cancelled."""
    with trio.CancelScope(shield=True), trio.move_on_after(5):
        await response.aclose()


@asynccontextmanager
async def open_body(response: httpx.Response) -> AsyncIterator[AsyncIterator[bytes]]:
    """The body chunks of a streamed response (decoded), closed properly however the
    iteration ends.

    ``contextlib.aclosing(response.aiter_bytes())`` is not enough under Trio: when the
    consumer stops between two chunks (a parse error, an ``error`` chunk), httpx's and
    httpcore's nested async generators are left suspended and Trio warns
    (``ResourceWarning``) when they are garbage collected. On exit this closes the
    response first and then runs the generator chain to its end (the closed connection
    makes it raise), so every generator finishes; it also closes the response.
    """
    # aiter_bytes(): content-encoding (gzip, deflate) decoded, as fetch() does for pi-ai.
    chunks = cast("AsyncGenerator[bytes, None]", response.aiter_bytes())
    try:
        yield chunks
    finally:
        with trio.CancelScope(shield=True):
            await response.aclose()
            with trio.move_on_after(1):
                try:
                    while True:
                        await chunks.__anext__()
                except (Exception, trio.Cancelled):
                    pass
            await chunks.aclose()


async def send_streaming(
    client: httpx.AsyncClient,
    request: httpx.Request,
    *,
    timeout_ms: float | None = None,
    error_member: str | None = "error",
    body_fallback: bool = False,
) -> httpx.Response:
    """Send one request as the SDKs do and return the open, streamed 2xx response.

    ``timeout_ms`` (default :data:`DEFAULT_TIMEOUT_MS`) bounds only the wait for the
    response headers. The caller must close the response (:func:`close_response`).

    Raises:
        APIConnectionTimeoutError: no headers in time.
        APIConnectionError: the connection failed.
        APIError: a non-2xx status (the body is read and decoded, see
            :func:`api_status_error` for ``error_member`` and ``body_fallback``).
    """
    limit = DEFAULT_TIMEOUT_MS if timeout_ms is None else timeout_ms
    response: httpx.Response | None = None
    try:
        with trio.move_on_after(max(limit, 0) / 1000):
            try:
                response = await client.send(request, stream=True)
            except _DEAD_CONNECTION_ERRORS as exc:
                if not _nothing_received(exc):
                    raise
                # A pooled connection the server had closed (a streamed reply without
                # "Connection: close"): nothing of the response arrived, so the request
                # is sent once more (httpx dropped that connection), whatever
                # max_retries says.
                response = await client.send(request, stream=True)
    except httpx.TimeoutException:
        raise APIConnectionTimeoutError from None
    except httpx.TransportError as exc:
        raise APIConnectionError(_connection_error_text(exc, request)) from exc
    if response is None:
        raise APIConnectionTimeoutError
    if 200 <= response.status_code < 300:
        return response
    try:
        try:
            raw = await response.aread()
            text = raw.decode("utf-8", "replace")
        except httpx.TransportError as exc:
            text = str(exc)
    finally:
        await close_response(response)
    raise api_status_error(
        response.status_code,
        response.headers,
        text,
        error_member=error_member,
        body_fallback=body_fallback,
    )


_DEAD_CONNECTION_ERRORS: Final = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)


def _nothing_received(exc: httpx.TransportError) -> bool:
    """Whether ``exc`` ended a request before any byte of the response arrived."""
    if isinstance(exc, httpx.RemoteProtocolError):
        return "without sending a response" in str(exc)
    return True  # a read or write error while sending or waiting for the status line


def _connection_error_text(exc: BaseException, request: httpx.Request) -> str:
    """pi-ai's ``Connection error.`` (``Request timed out.``), followed by the URL and
    the cause, which pi-ai leaves out."""
    if re.search(r"timed? ?out", f"{exc!r} {exc.__cause__!r}", re.IGNORECASE):
        return "Request timed out."
    cause = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    inner = exc.__cause__ or exc.__context__
    if inner is not None and str(inner) and str(inner) not in cause:
        cause += f" ({type(inner).__name__}: {inner})"
    return f"Connection error. {request.method} {request.url} failed: {cause}"


def is_retryable(error: BaseException) -> bool:
    """Whether pi-ai's ``retryProviderRequest`` retries this error."""
    if not isinstance(error, APIError):
        return False
    should_retry = error.headers.get("x-should-retry") if error.headers is not None else None
    if should_retry == "true":
        return True
    if should_retry == "false":
        return False
    if error.status is None:
        return True
    return error.status in (408, 409, 429) or error.status >= 500


_FLOAT_PREFIX: Final = re.compile(r"\s*([+-]?(?:Infinity|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?))")


def _parse_float(text: str) -> float:
    """JavaScript's ``Number.parseFloat`` (a numeric prefix, else NaN)."""
    match = _FLOAT_PREFIX.match(text)
    if match is None:
        return math.nan
    return float(str(match.group(1)).replace("Infinity", "inf"))


def retry_delay_ms(
    error: APIError, retry_index: int, max_retry_delay_ms: float | None = None
) -> float:
    """The back-off before retry number ``retry_index`` (0-based), in milliseconds.

    ``retry-after-ms`` (float ms), else ``retry-after`` (seconds or an HTTP date), else
    ``min(0.5 * 2**i, 8)`` seconds with up to 25 % jitter.

    Raises:
        RetryDelayTooLongError: the server asked for more than ``max_retry_delay_ms``
            (default 60 s; 0 disables the cap).
    """
    headers = error.headers
    retry_after_ms = headers.get("retry-after-ms") if headers is not None else None
    if retry_after_ms:
        value = _parse_float(retry_after_ms)
        if not math.isnan(value):
            return _check_server_delay(value, max_retry_delay_ms, str(error))
    retry_after = headers.get("retry-after") if headers is not None else None
    if retry_after:
        seconds = _parse_float(retry_after)
        if math.isnan(seconds):
            try:
                when = parsedate_to_datetime(retry_after)
                delay = when.timestamp() * 1000 - time.time() * 1000
            except (TypeError, ValueError, IndexError):
                delay = math.nan
        else:
            delay = seconds * 1000
        return _check_server_delay(delay, max_retry_delay_ms, str(error))
    exponential: float = min(0.5 * 2.0**retry_index, 8.0) * 1000
    return exponential * (1 - random.random() * 0.25)


def _check_server_delay(delay_ms: float, max_retry_delay_ms: float | None, message: str) -> float:
    limit = DEFAULT_MAX_RETRY_DELAY_MS if max_retry_delay_ms is None else max_retry_delay_ms
    if limit > 0 and delay_ms > limit:
        text = (
            f"Server requested {math.ceil(delay_ms / 1000)}s retry delay "
            f"(max: {math.ceil(limit / 1000)}s). {message}"
        )
        raise RetryDelayTooLongError(text)
    return 0.0 if math.isnan(delay_ms) else delay_ms


async def send_with_retries(
    send_once: Callable[[], Awaitable[httpx.Response]],
    *,
    max_retries: int | None = None,
    max_retry_delay_ms: float | None = None,
) -> httpx.Response:
    """Call ``send_once`` until it succeeds or fails for good (``retryProviderRequest``).

    Retries (``max_retries``, default 0) only :func:`is_retryable` errors, each time with
    a fresh identical request, sleeping :func:`retry_delay_ms` in between. Cancellation
    (the caller's abort) propagates as ``trio.Cancelled``; the provider reports it as
    ``Request aborted`` (``_request.ABORTED_BEFORE_HEADERS``).
    """
    total = max_retries or 0
    remaining = total
    while True:
        try:
            return await send_once()
        except APIError as exc:
            if remaining <= 0 or not is_retryable(exc):
                raise
            index = total - remaining
            remaining -= 1
            delay = retry_delay_ms(exc, index, max_retry_delay_ms)
        await trio.sleep(max(0.0, delay) / 1000)


# ---------------------------------------------------------------------------------------
# Request building


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
            if not block.thinking or not block.thinking.strip(_JS_WHITESPACE):
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


def _estimate_content_chars(content: str | Sequence[UserContent]) -> int:
    if isinstance(content, str):
        return js_length(content)
    return sum(
        js_length(block.text) if isinstance(block, TextContent) else 4800 for block in content
    )


def _estimate_message_tokens(message: LlmMessage) -> int:
    if isinstance(message, UserMessage | ToolResultMessage):
        return math.ceil(_estimate_content_chars(message.content) / 4)
    chars = 0
    for block in message.content:
        if isinstance(block, TextContent):
            chars += js_length(block.text)
        elif isinstance(block, ThinkingContent):
            chars += js_length(block.thinking)
        elif isinstance(block, ToolCall):
            chars += js_length(block.name) + js_length(json_stringify(block.arguments))
    return math.ceil(chars / 4)


def _usage_total(usage: Usage) -> int:
    return usage.total_tokens or (usage.input + usage.output + usage.cache_read + usage.cache_write)


def _estimate_tools_tokens(tools: Iterable[ToolSpec]) -> int:
    tool_list = [tool_json(tool) for tool in tools]
    if not tool_list:
        return 0
    return math.ceil(js_length(json_stringify(tool_list)) / 4)


def estimate_context_tokens(context: Context) -> int:
    """pi-ai's ``estimateContextTokens(context).tokens``: the last usable assistant
    usage plus estimates of what follows it, else estimates of everything."""
    messages = list(context.messages)
    latest_prefix = -math.inf
    usage_index: int | None = None
    for index, message in enumerate(messages):
        if (
            isinstance(message, AssistantMessage)
            and message.timestamp >= latest_prefix
            and message.stop_reason not in ("aborted", "error")
            and _usage_total(message.usage) > 0
        ):
            usage_index = index
        latest_prefix = max(latest_prefix, message.timestamp)
    if usage_index is not None:
        last = messages[usage_index]
        assert isinstance(last, AssistantMessage)
        tokens = _usage_total(last.usage)
        added: set[str] = set()
        for message in messages[usage_index + 1 :]:
            tokens += _estimate_message_tokens(message)
            if isinstance(message, ToolResultMessage):
                added.update(message.added_tool_names or ())
        return tokens + _estimate_tools_tokens(t for t in context.tools if t.name in added)
    tokens = sum(_estimate_message_tokens(m) for m in messages)
    if context.system_prompt:
        tokens += math.ceil(js_length(context.system_prompt) / 4)
    return tokens + _estimate_tools_tokens(context.tools)


class MaxTokensClampedWarning(UserWarning):
    """``max_tokens`` was lowered to fit the model's context window (pi-ai's clamp)."""


def clamp_max_tokens_to_context(model: Model, context: Context, max_tokens: int) -> int:
    """``min(max_tokens, max(1, context_window - estimate - 4096))`` (pi-ai's
    ``clampMaxTokensToContext``).

    A clamp warns (:class:`MaxTokensClampedWarning`, once per model, window and
    requested ``max_tokens`` under Python's default warning filter): with a small
    ``context_window`` the 4,096-token safety margin alone can bring ``max_tokens``
    down to 1.
    """
    if model.context_window <= 0:
        return max(1, max_tokens)
    available = model.context_window - estimate_context_tokens(context) - _CONTEXT_SAFETY_TOKENS
    clamped = min(max_tokens, max(1, available))
    if clamped < max_tokens:
        warnings.warn(
            f"max_tokens={max_tokens} for model {model.provider}/{model.id} is lowered to "
            f"fit its context_window of {model.context_window} tokens: pi-ai's clamp "
            f"allows context_window - estimated context - {_CONTEXT_SAFETY_TOKENS} (at "
            f"most {max(1, model.context_window - _CONTEXT_SAFETY_TOKENS)}, at least 1). "
            "If the server's window is larger, give the Model its real context_window "
            "(or a larger one) to avoid this.",
            MaxTokensClampedWarning,
            stacklevel=3,
        )
    return clamped


def supported_thinking_levels(model: Model) -> list[str]:
    """The thinking levels ``model`` accepts (``getSupportedThinkingLevels``)."""
    if not model.reasoning:
        return ["off"]
    level_map = model.thinking_level_map or {}
    levels = []
    for level in THINKING_LEVELS:
        if level in level_map and level_map[level] is None:
            continue
        if level in ("xhigh", "max") and level not in level_map:
            continue
        levels.append(level)
    return levels


def clamp_thinking_level(model: Model, level: str) -> str:
    """The nearest supported level: ``level`` itself, else the next higher, else the
    next lower (``clampThinkingLevel``)."""
    available = supported_thinking_levels(model)
    if level in available:
        return level
    if level not in THINKING_LEVELS:
        return available[0] if available else "off"
    requested = THINKING_LEVELS.index(level)
    for candidate in THINKING_LEVELS[requested:]:
        if candidate in available:
            return candidate
    for candidate in reversed(THINKING_LEVELS[:requested]):
        if candidate in available:
            return candidate
    return available[0] if available else "off"


def thinking_budget_for_level(level: str, custom: Mapping[str, int] | None = None) -> int | None:
    """The thinking token budget of a level (``xhigh``/``max`` count as ``high``)."""
    budgets = {**DEFAULT_THINKING_BUDGETS, **(custom or {})}
    return budgets.get("high" if level in ("xhigh", "max") else level)


def adjust_max_tokens_for_thinking(
    base_max_tokens: int | None,
    model_max_tokens: int,
    level: str,
    custom: Mapping[str, int] | None = None,
) -> tuple[int, int]:
    """``(max_tokens, thinking_budget)`` so that thinking fits (``adjustMaxTokensForThinking``)."""
    budget = thinking_budget_for_level(level, custom) or 0
    if base_max_tokens is None:
        max_tokens = model_max_tokens
    else:
        max_tokens = min(base_max_tokens + budget, model_max_tokens)
    if max_tokens <= budget:
        budget = min(budget, max(0, max_tokens - MIN_ANSWER_TOKENS))
    return max_tokens, budget


def resolve_cache_retention(value: str | None) -> str:
    """``value``, else ``long`` if ``PI_CACHE_RETENTION=long``, else ``short``."""
    if value:
        return value
    if os.environ.get("PI_CACHE_RETENTION") == "long":
        return "long"
    return "short"


def require_api_key(
    provider: str,
    api_key: str | None,
    headers: Mapping[str, str | None] | None,
    auth_headers: Sequence[str] = ("authorization", "cf-aig-authorization"),
) -> str:
    """The key to send: ``api_key``, or ``"unused"`` when a non-blank auth header is
    given (the header then authenticates).

    Raises:
        MissingApiKeyError: neither is there.
    """
    if api_key:
        return api_key
    for name, value in (headers or {}).items():
        if name.lower() in auth_headers and value is not None and value.strip():
            return "unused"
    msg = f"No API key for provider: {provider}"
    raise MissingApiKeyError(msg)


# ---------------------------------------------------------------------------------------
# The streamed message


@final
class PartialMessage:
    """The assistant message being streamed (pi-ai's mutable ``output``).

    Providers change the fields and blocks freely, then call :meth:`snapshot` for the
    frozen :class:`AssistantMessage` each event carries. Blocks are frozen values too:
    :meth:`add_block` appends one and returns its content index, and changed blocks are
    put back with :meth:`set_block` (or :meth:`append_text` / :meth:`append_thinking`).

    Snapshots share what did not change: the tuple of blocks is copied (O(blocks)), and
    a text or thinking block that grows by deltas keeps its chunks in one list shared by
    all its snapshots, each holding a :class:`LazyValue` that joins its own prefix when
    read. A delta therefore costs the same at the start and at the end of a long answer.
    """

    __slots__ = (
        "_builders",
        "api",
        "content",
        "diagnostics",
        "error_message",
        "model",
        "provider",
        "provider_thinking_level",
        "raw_stop_reason",
        "response_id",
        "response_model",
        "stop_reason",
        "timestamp",
        "usage",
    )

    def __init__(self, model: Model, *, timestamp: int | None = None) -> None:
        self.api = model.api
        self.provider = model.provider
        self.model = model.id
        self.content: list[AssistantContent] = []
        self.usage = Usage()
        self.stop_reason = "pending"
        self.error_message: str | None = None
        self.timestamp = now_ms() if timestamp is None else timestamp
        self.response_id: str | None = None
        self.response_model: str | None = None
        self.raw_stop_reason: str | None = None
        self.provider_thinking_level: str | None = None
        self.diagnostics: tuple[JSONValue, ...] | None = None
        # content index -> (the block last built by append_*, its shared chunks)
        self._builders: dict[int, tuple[AssistantContent, list[str]]] = {}

    def snapshot(self) -> AssistantMessage:
        """The message as it is now (a frozen copy)."""
        return AssistantMessage(
            content=tuple(self.content),
            api=self.api,
            provider=self.provider,
            model=self.model,
            usage=self.usage,
            stop_reason=self.stop_reason,  # type: ignore[arg-type]  # a StopReason string
            error_message=self.error_message,
            timestamp=self.timestamp,
            response_id=self.response_id,
            response_model=self.response_model,
            provider_thinking_level=self.provider_thinking_level,
            raw_stop_reason=self.raw_stop_reason,
            diagnostics=self.diagnostics,
        )

    def add_block(self, block: AssistantContent) -> int:
        """Append a block; returns its content index."""
        self.content.append(block)
        return len(self.content) - 1

    def set_block(self, index: int, block: AssistantContent) -> None:
        """Replace the block at ``index``."""
        self.content[index] = block

    def append_text(self, index: int, delta: str) -> None:
        """Append to the text block at ``index`` (O(1): the text is joined when read)."""
        block = self.content[index]
        assert isinstance(block, TextContent)
        # The chunks are shared while the block is the one the last append built (a
        # block replaced by set_block starts a new list).
        built = self._builders.get(index)
        if built is not None and built[0] is block:
            chunks = built[1]
        else:
            chunks = [block.text] if block.text else []
        chunks.append(delta)
        text: Any = LazyValue(join_chunks, chunks, len(chunks))
        new = TextContent(text=text, text_signature=block.text_signature)
        self.content[index] = new
        self._builders[index] = (new, chunks)

    def append_thinking(self, index: int, delta: str) -> None:
        """Append to the thinking block at ``index`` (O(1), like :meth:`append_text`)."""
        block = self.content[index]
        assert isinstance(block, ThinkingContent)
        built = self._builders.get(index)
        if built is not None and built[0] is block:
            chunks = built[1]
        else:
            chunks = [block.thinking] if block.thinking else []
        chunks.append(delta)
        thinking: Any = LazyValue(join_chunks, chunks, len(chunks))
        new = ThinkingContent(
            thinking=thinking,
            thinking_signature=block.thinking_signature,
            redacted=block.redacted,
        )
        self.content[index] = new
        self._builders[index] = (new, chunks)


def join_chunks(chunks: list[str], count: int) -> str:
    """The first ``count`` chunks joined (a :class:`LazyValue` function: the list is
    shared by every snapshot of a block and only grows)."""
    return "".join(chunks[:count] if count < len(chunks) else chunks)


def setup_error_message(model: Model, text: str) -> AssistantMessage:
    """The lone ``error`` message of a failure before the provider started (pi-ai's
    ``lazyStream`` setup error): no content, zero usage without ``reasoning``."""
    return AssistantMessage(
        content=(),
        api=model.api,
        provider=model.provider,
        model=model.id,
        usage=Usage(),
        stop_reason="error",
        error_message=text,
        timestamp=now_ms(),
    )
