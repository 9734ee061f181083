"""Automatic retry: which failed responses to retry, and how long to wait.

The classification is pi-ai 0.85.0's (``utils/retry.js``, ``utils/overflow.js``): a
response that ended with stop reason ``error`` is retried when its text names a
transient failure (overload, rate limit, a 5xx status, a dropped or refused connection,
a timeout), unless it names an exhausted quota or budget, or a context overflow (that
one is recovered by compaction instead). Authentication and bad-request errors match
none of the patterns, so they are not retried.

The back-off is the coding agent's ``baseDelayMs * 2**(attempt - 1)`` with up to
``jitter`` of it taken off at random, capped at ``max_delay``. When the server said how
long to wait, that delay is used instead: first the failed HTTP response's headers, read
as pi-ai's provider retry reads them (``utils/provider-retry.js``: ``retry-after-ms`` in
milliseconds, else ``retry-after`` in seconds or as an HTTP date), then a delay written
in the error text (``retry-after: 7``, "try again in 20s"). A requested delay above
``max_delay`` is not waited for (retrying stops), as pi-ai's providers refuse a
``retry-after`` above their cap. (Pi's own harness and coding agent retry on the fixed
back-off alone; pitrio adds the server's delay, see ``docs/deviations.md``.)
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Mapping
from email.utils import parsedate_to_datetime
from typing import Final, final

import attrs

from pitrio import AssistantMessage, UsageError

__all__ = [
    "RetrySettings",
    "is_context_overflow",
    "is_retryable",
    "retry_delay",
    "server_retry_delay",
]


def _non_negative(instance: object, attribute: attrs.Attribute[float], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
        msg = f"RetrySettings.{attribute.name} must be a finite number >= 0; got {value!r}"
        raise UsageError(msg)


def _count(instance: object, attribute: attrs.Attribute[int], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        msg = f"RetrySettings.{attribute.name} must be an int >= 0; got {value!r}"
        raise UsageError(msg)


def _fraction(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not (0 <= value <= 1):
        msg = f"RetrySettings.{attribute.name} must be between 0 and 1; got {value!r}"
        raise UsageError(msg)


@final
@attrs.frozen(kw_only=True)
class RetrySettings:
    """How the harness retries a run that ended with a transient provider error.

    Defaults are the coding agent's (``settings.retry``): enabled, 3 retries, 2 s base
    delay (2 s, 4 s, 8 s), at most 60 s.

    Attributes:
        enabled: retry at all.
        max_retries: retries after the first attempt (0: none).
        base_delay: seconds before the first retry; doubled for each later one.
        max_delay: cap on a computed delay, and the longest server-requested delay the
            harness waits for, in seconds.
        jitter: the largest fraction of a computed delay taken off at random (0: exact).
    """

    enabled: bool = True
    max_retries: int = attrs.field(default=3, validator=_count)
    base_delay: float = attrs.field(default=2.0, validator=_non_negative)
    max_delay: float = attrs.field(default=60.0, validator=_non_negative)
    jitter: float = attrs.field(default=0.1, validator=_fraction)


@final
class _Pattern:
    """A case-insensitive pattern compiled at its first search: these are read only
    when a run fails, and compiling the 70-odd alternatives cost every start-up."""

    __slots__ = ("_compiled", "_source")

    def __init__(self, source: str) -> None:
        self._source = source
        self._compiled: re.Pattern[str] | None = None

    def search(self, text: str) -> re.Match[str] | None:
        if self._compiled is None:
            self._compiled = re.compile(self._source, re.IGNORECASE)
        return self._compiled.search(text)


def _pattern(parts: list[str]) -> _Pattern:
    return _Pattern("|".join(parts))


_NON_RETRYABLE: Final = _pattern(
    [
        "GoUsageLimitError",
        "FreeUsageLimitError",
        "Monthly usage limit reached",
        "available balance",
        "insufficient_quota",
        "out of budget",
        "quota exceeded",
        "billing",
    ]
)

_RETRYABLE: Final = _pattern(
    [
        "overloaded",
        "rate.?limit",
        "too many requests",
        "429",
        "500",
        "502",
        "503",
        "504",
        "524",
        "service.?unavailable",
        "server.?error",
        "internal.?error",
        "provider.?returned.?error",
        "exceeded request buffer limit while retrying upstream",
        "network.?error",
        "connection.?error",
        "connection.?refused",
        "connection.?lost",
        "connection.?reset",
        "other side closed",
        "fetch failed",
        "getaddrinfo",
        "ENOTFOUND",
        "EAI_AGAIN",
        "upstream.?connect",
        "reset before headers",
        "socket hang up",
        "socket connection was closed",
        "timed? out",
        "timeout",
        "terminated",
        "websocket.?closed",
        "websocket.?error",
        "ended without",
        "stream ended before message_stop",
        "stream ended before a terminal response event",
        "http2 request did not get a response",
        "retry delay",
        "you can retry your request",
        "try your request again",
        "please retry your request",
        "ResourceExhausted",
    ]
)

_OVERFLOW: Final = tuple(
    _Pattern(p)
    for p in (
        r"prompt is too long",
        r"request_too_large",
        r"input is too long for requested model",
        r"exceeds the context window",
        r"exceeds (?:the )?(?:model'?s )?maximum context length"
        r"(?: of [\d,]+ tokens?|\s*\([\d,]+\))",
        r"input token count.*exceeds the maximum",
        r"maximum prompt length is \d+",
        r"reduce the length of the messages",
        r"maximum context length is \d+ tokens",
        r"exceeds (?:the )?maximum allowed input length of [\d,]+ tokens?",
        r"input \(\d+ tokens\) is longer than the model'?s context length \(\d+ tokens\)",
        r"exceeds the limit of \d+",
        r"exceeds the available context size",
        r"greater than the context length",
        r"context window exceeds limit",
        r"exceeded model token limit",
        r"too large for model with \d+ maximum context length",
        r"prompt has [\d,]+ tokens?, but the configured context size is [\d,]+ tokens?",
        r"model_context_window_exceeded",
        r"prompt too long; exceeded (?:max )?context length",
        r"range of input length should be",
        r"context[_ ]length[_ ]exceeded",
        r"too many tokens",
        r"token limit exceeded",
        r"^4(?:00|13)\s*(?:status code)?\s*\(no body\)",
    )
)

_NOT_OVERFLOW: Final = (
    _Pattern(r"^(Throttling error|Service unavailable):"),
    _Pattern(r"rate limit"),
    _Pattern(r"too many requests"),
)


def is_context_overflow(message: AssistantMessage, context_window: int = 0) -> bool:
    """Whether ``message`` says the request did not fit the model's context (pi-ai's
    ``isContextOverflow``): an overflow error text, or with ``context_window`` a
    response whose input filled the window."""
    text = message.error_message
    if (
        message.stop_reason == "error"
        and text
        and not any(p.search(text) for p in _NOT_OVERFLOW)
        and any(p.search(text) for p in _OVERFLOW)
    ):
        return True
    usage = message.usage
    filled = usage.input + usage.cache_read
    if not context_window:
        return False
    if message.stop_reason == "stop" and filled > context_window:
        return True
    return message.stop_reason == "length" and usage.output == 0 and filled >= context_window * 0.99


def is_retryable(message: AssistantMessage, context_window: int = 0) -> bool:
    """Whether a failed response is worth retrying (pi-ai's
    ``isRetryableAssistantError``, context overflows excluded as the coding agent does)."""
    text = message.error_message
    if message.stop_reason != "error" or not text:
        return False
    if is_context_overflow(message, context_window):
        return False
    if _NON_RETRYABLE.search(text):
        return False
    return _RETRYABLE.search(text) is not None


_UNIT_SECONDS: Final = {
    "ms": 0.001,
    "millisecond": 0.001,
    "milliseconds": 0.001,
    "s": 1.0,
    "sec": 1.0,
    "secs": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "m": 60.0,
    "min": 60.0,
    "mins": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
}
_RETRY_AFTER_MS: Final = re.compile(r"retry-after-ms\W{0,3}(\d+(?:\.\d+)?)", re.IGNORECASE)
_RETRY_AFTER: Final = re.compile(
    r"(?:retry[- ]after|try again in|retry in|server requested)\W{0,3}(\d+(?:\.\d+)?)\s*"
    r"(ms|milliseconds?|s|secs?|seconds?|m|mins?|minutes?)?\b",
    re.IGNORECASE,
)


def server_retry_delay(error_message: str | None) -> float | None:
    """The delay in seconds a server asked for, when the error text carries it.

    Understands ``retry-after-ms: 1500``, ``retry-after: 20`` (seconds), and phrases such
    as "Please try again in 1.5s", "retry after 2 minutes" or pi-ai's "Server requested
    120s retry delay". ``None`` when the text names no delay.
    """
    if not error_message:
        return None
    match = _RETRY_AFTER_MS.search(error_message)
    if match is not None:
        return float(match.group(1)) / 1000
    match = _RETRY_AFTER.search(error_message)
    if match is None:
        return None
    unit = (match.group(2) or "s").lower()
    return float(match.group(1)) * _UNIT_SECONDS[unit]


_FLOAT_PREFIX: Final = re.compile(r"\s*([+-]?(?:Infinity|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?))")


def _parse_float(text: str) -> float | None:
    """JavaScript's ``Number.parseFloat``: a numeric prefix, else ``None`` (NaN)."""
    match = _FLOAT_PREFIX.match(text)
    if match is None:
        return None
    return float(match.group(1).replace("Infinity", "inf"))


def _wall_clock() -> float:
    return time.time()


def retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """The delay in seconds an HTTP error response's headers ask for, as pi-ai reads
    them (``getRetryDelayMs``): ``retry-after-ms`` (milliseconds), else ``retry-after``
    (seconds, or an HTTP date: the time until then from ``now``, the wall clock by
    default; a date in the past is no wait). ``None`` when neither says anything
    readable (pi-ai would then retry at once; the harness uses its own back-off).
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    millis = lowered.get("retry-after-ms")
    if millis:
        value = _parse_float(millis)
        if value is not None:
            return max(0.0, value / 1000)
    after = lowered.get("retry-after")
    if not after:
        return None
    seconds = _parse_float(after)
    if seconds is not None:
        return max(0.0, seconds)
    try:
        when = parsedate_to_datetime(after).timestamp()
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when - (_wall_clock() if now is None else now))


def retry_delay(
    attempt: int,
    settings: RetrySettings,
    error_message: str | None = None,
    *,
    random: Callable[[], float],
    headers: Mapping[str, str] | None = None,
) -> float | None:
    """Seconds to wait before retry number ``attempt`` (1-based), or ``None`` when the
    server asked for longer than ``settings.max_delay`` (do not retry).

    The server's delay comes from the failed response's ``headers`` (pi-ai's reading:
    ``retry-after-ms`` in milliseconds, else ``retry-after`` in seconds or as an HTTP
    date), else from the error text (:func:`server_retry_delay`)."""
    requested = retry_after(headers) if headers else None
    if requested is None:
        requested = server_retry_delay(error_message)
    if requested is not None:
        return requested if requested <= settings.max_delay else None
    delay = min(settings.base_delay * 2.0 ** (attempt - 1), settings.max_delay)
    return delay * (1 - settings.jitter * random())
