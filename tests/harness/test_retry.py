"""Automatic retry: classification, back-off delays in virtual time, caps, abort."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from pitrio import AssistantMessage, Model, Usage
from pitrio.harness import (
    AutoRetryEnd,
    AutoRetryStart,
    Harness,
    HarnessEvent,
    RetrySettings,
    is_context_overflow,
    is_retryable,
    server_retry_delay,
)
from pitrio.testing import ScriptedModel, ScriptedResponse, check_trace

MODEL = Model(id="m", api="scripted", provider="scripted")


def _error(text: str) -> ScriptedResponse:
    return ScriptedResponse(stop_reason="error", error_message=text)


def _failed(text: str, **kwargs: Any) -> AssistantMessage:
    return AssistantMessage(stop_reason="error", error_message=text, **kwargs)


class Recorder:
    """Harness events with the virtual time each arrived at."""

    def __init__(self, harness: Harness) -> None:
        self.events: list[tuple[float, HarnessEvent]] = []
        harness.subscribe(self)

    def __call__(self, event: HarnessEvent) -> None:
        self.events.append((trio.current_time(), event))

    def of(self, kind: str) -> list[tuple[float, Any]]:
        return [(t, e) for t, e in self.events if e.type == kind]

    def types(self) -> list[str]:
        return [e.type for _, e in self.events]


def _harness(responses: list[ScriptedResponse], **kwargs: Any) -> tuple[Harness, ScriptedModel]:
    scripted = ScriptedModel(responses)
    kwargs.setdefault("random", lambda: 0.0)
    return Harness(model=MODEL, stream_fn=scripted, **kwargs), scripted


# -- classification ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "429 Too Many Requests",
        "Rate limit reached for requests",
        '529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
        "502 Bad Gateway",
        "503 Service Unavailable",
        "Connection error.",
        "connection reset by peer",
        "Request timed out.",
        "fetch failed",
        "terminated",
        "Anthropic stream ended before message_stop",
    ],
)
def test_transient_errors_are_retryable(text: str) -> None:
    assert is_retryable(_failed(text))


@pytest.mark.parametrize(
    "text",
    [
        "401 invalid x-api-key",
        "400 Bad Request: messages: field required",
        "403 Forbidden",
        "prompt is too long: 213462 tokens > 200000 maximum",
        "Your input exceeds the context window of this model",
        "429 You exceeded your current quota: insufficient_quota",
    ],
)
def test_auth_bad_request_overflow_and_quota_are_not_retryable(text: str) -> None:
    assert not is_retryable(_failed(text))


def test_only_error_stops_are_retryable() -> None:
    assert not is_retryable(AssistantMessage(stop_reason="aborted", error_message="503"))
    assert not is_retryable(AssistantMessage(stop_reason="stop"))
    assert not is_retryable(_failed(""))


def test_context_overflow_detection() -> None:
    assert is_context_overflow(_failed("prompt is too long: 213462 tokens > 200000 maximum"))
    # Rate limits mentioning tokens are not overflows (pi-ai's exclusions).
    assert not is_context_overflow(_failed("Rate limit: too many tokens per minute"))
    # Silent overflow: a successful response whose input exceeds the window.
    silent = AssistantMessage(stop_reason="stop", usage=Usage(input=1200, cache_read=10))
    assert is_context_overflow(silent, 1000)
    assert not is_context_overflow(silent, 0)
    filled = AssistantMessage(stop_reason="length", usage=Usage(input=995, output=0))
    assert is_context_overflow(filled, 1000)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("429 rate limited; retry-after: 7", 7.0),
        ("429 rate limited (retry-after-ms: 1500)", 1.5),
        ("Rate limit reached. Please try again in 20s.", 20.0),
        ("Rate limit reached. Please try again in 350ms.", 0.35),
        ("Server requested 120s retry delay (max: 60s). 429", 120.0),
        ("overloaded; retry after 2 minutes", 120.0),
        ("503 Service Unavailable", None),
        (None, None),
    ],
)
def test_server_retry_delay_parsing(text: str | None, seconds: float | None) -> None:
    assert server_retry_delay(text) == (pytest.approx(seconds) if seconds is not None else None)


@pytest.mark.parametrize(
    ("field", "value"),
    [("max_retries", -1), ("max_retries", 1.5), ("base_delay", -2), ("jitter", 2.0)],
)
def test_settings_reject_bad_values(field: str, value: Any) -> None:
    with pytest.raises(ValueError, match=field):
        RetrySettings(**{field: value})


# -- the harness retrying ---------------------------------------------------------------


async def test_exponential_delays_then_success(autojump_clock: trio.testing.MockClock) -> None:
    harness, scripted = _harness(
        [_error("503 Service Unavailable")] * 3 + [ScriptedResponse.text("ok")],
        retry=RetrySettings(base_delay=2.0, jitter=0.0),
    )
    recorder = Recorder(harness)
    start = trio.current_time()
    await harness.prompt("hi")
    starts = recorder.of("auto_retry_start")
    assert [e.delay for _, e in starts] == [2.0, 4.0, 8.0]
    assert [e.attempt for _, e in starts] == [1, 2, 3]
    assert all(e.max_attempts == 3 for _, e in starts)
    # Each retry's run starts exactly its delay after the announcement.
    runs = recorder.of("agent_start")
    assert [t - start for t, _ in runs] == pytest.approx([0.0, 2.0, 6.0, 14.0], abs=1e-3)
    assert [e for _, e in recorder.of("auto_retry_end")] == [
        AutoRetryEnd(success=True, attempt=3, final_error=None)
    ]
    assert scripted.calls == 4
    # The failed responses left the context before each retry.
    assert [m.role for m in harness.messages] == ["user", "assistant"]
    assert harness.messages[-1].stop_reason == "stop"
    for request in scripted.requests:
        assert [m.role for m in request.messages] == ["user"]
    assert recorder.types()[-1] == "settled"
    # Each of the four runs is a well-formed Agent run.
    agent_events: list[Any] = [e for _, e in recorder.events if not _is_harness_only(e)]
    traces = _runs(agent_events)
    assert len(traces) == 4
    assert all(check_trace(trace) == [] for trace in traces)


def _runs(events: list[Any]) -> list[list[Any]]:
    runs: list[list[Any]] = []
    for event in events:
        if event.type == "agent_start":
            runs.append([])
        runs[-1].append(event)
    return runs


def _busy(harness: Harness) -> bool:
    return harness.is_busy


def _is_harness_only(event: HarnessEvent) -> bool:
    return event.type in {
        "save_point",
        "settled",
        "auto_retry_start",
        "auto_retry_end",
        "compaction_start",
        "compaction_end",
    }


async def test_retry_count_is_capped(autojump_clock: trio.testing.MockClock) -> None:
    harness, scripted = _harness(
        [_error("502 Bad Gateway")] * 5, retry=RetrySettings(max_retries=2, jitter=0.0)
    )
    recorder = Recorder(harness)
    await harness.prompt("hi")
    assert scripted.calls == 3
    assert len(recorder.of("auto_retry_start")) == 2
    assert [e for _, e in recorder.of("auto_retry_end")] == [
        AutoRetryEnd(success=False, attempt=2, final_error="502 Bad Gateway")
    ]
    # The last failure stays in the context: the run's outcome is that error.
    assert harness.messages[-1].error_message == "502 Bad Gateway"
    assert not harness.is_busy


async def test_delays_are_capped_by_max_delay_and_jittered(
    autojump_clock: trio.testing.MockClock,
) -> None:
    draws = iter([1.0, 0.5, 0.0])
    harness, _ = _harness(
        [_error("overloaded")] * 3 + [ScriptedResponse.text("ok")],
        retry=RetrySettings(base_delay=10.0, max_delay=15.0, jitter=0.2),
        random=lambda: next(draws),
    )
    recorder = Recorder(harness)
    await harness.prompt("hi")
    delays = [e.delay for _, e in recorder.of("auto_retry_start")]
    assert delays == pytest.approx([10.0 * 0.8, 15.0 * 0.9, 15.0])


async def test_retry_after_in_the_error_is_honoured(autojump_clock: trio.testing.MockClock) -> None:
    harness, _ = _harness(
        [_error("429 Too Many Requests; retry-after: 7"), ScriptedResponse.text("ok")]
    )
    recorder = Recorder(harness)
    start = trio.current_time()
    await harness.prompt("hi")
    assert [e.delay for _, e in recorder.of("auto_retry_start")] == [7.0]
    assert recorder.of("agent_start")[1][0] - start == pytest.approx(7.0, abs=1e-3)


async def test_retry_after_above_max_delay_is_not_waited_for(
    autojump_clock: trio.testing.MockClock,
) -> None:
    harness, scripted = _harness(
        [_error("429 Too Many Requests; retry-after: 600"), ScriptedResponse.text("ok")]
    )
    recorder = Recorder(harness)
    start = trio.current_time()
    await harness.prompt("hi")
    assert scripted.calls == 1
    assert recorder.of("auto_retry_start") == []
    assert trio.current_time() - start == pytest.approx(0.0, abs=1e-3)


class _HttpErrors:
    """A scripted model whose failed requests also report an HTTP error response with
    these headers, as pitrio's providers do (``StreamOptions.on_error_response``)."""

    def __init__(self, responses: list[ScriptedResponse], headers: list[dict[str, str]]) -> None:
        self.scripted = ScriptedModel(responses)
        self.headers = headers

    def __call__(self, model: Model, context: Any, options: Any) -> Any:
        index = self.scripted.calls
        if index < len(self.headers) and options.on_error_response is not None:
            options.on_error_response(429, self.headers[index], model)
        return self.scripted(model, context, options)


@pytest.mark.parametrize(
    ("headers", "delay"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after-ms": "2500"}, 2.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),  # pi-ai reads -ms first
        ({"retry-after": "Wed, 21 Oct 2026 07:28:12 GMT"}, 12.0),  # 12 s after "now"
        ({"retry-after": "Wed, 21 Oct 2026 07:27:00 GMT"}, 0.0),  # in the past: at once
    ],
)
async def test_an_http_retry_after_header_is_honoured(
    headers: dict[str, str],
    delay: float,
    autojump_clock: trio.testing.MockClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from email.utils import parsedate_to_datetime

    from pitrio.harness import _retry

    now = parsedate_to_datetime("Wed, 21 Oct 2026 07:28:00 GMT").timestamp()
    monkeypatch.setattr(_retry, "_wall_clock", lambda: now)
    stream = _HttpErrors([_error("429 Too Many Requests"), ScriptedResponse.text("ok")], [headers])
    harness = Harness(
        model=MODEL, stream_fn=stream, random=lambda: 0.0, retry=RetrySettings(base_delay=30.0)
    )
    recorder = Recorder(harness)
    start = trio.current_time()
    await harness.prompt("hi")
    assert [e.delay for _, e in recorder.of("auto_retry_start")] == [pytest.approx(delay)]
    assert recorder.of("agent_start")[1][0] - start == pytest.approx(delay, abs=1e-3)
    assert harness.messages[-1].text == "ok"


async def test_a_retry_after_header_above_max_delay_stops_retrying(
    autojump_clock: trio.testing.MockClock,
) -> None:
    stream = _HttpErrors(
        [_error("429 Too Many Requests"), ScriptedResponse.text("ok")], [{"retry-after": "600"}]
    )
    harness = Harness(model=MODEL, stream_fn=stream, random=lambda: 0.0)
    recorder = Recorder(harness)
    await harness.prompt("hi")
    assert stream.scripted.calls == 1
    assert recorder.of("auto_retry_start") == []
    assert harness.messages[-1].stop_reason == "error"


async def test_headers_of_an_earlier_failure_do_not_leak_into_a_later_retry(
    autojump_clock: trio.testing.MockClock,
) -> None:
    stream = _HttpErrors(
        [_error("503 Service Unavailable")] * 2 + [ScriptedResponse.text("ok")],
        [{"retry-after": "7"}],  # only the first failure said when to come back
    )
    harness = Harness(
        model=MODEL,
        stream_fn=stream,
        random=lambda: 0.0,
        retry=RetrySettings(base_delay=2.0, jitter=0.0),
    )
    recorder = Recorder(harness)
    await harness.prompt("hi")
    assert [e.delay for _, e in recorder.of("auto_retry_start")] == [7.0, 4.0]


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({}, None),
        ({"retry-after": "soon"}, None),  # neither a number nor a date: not a delay
        ({"retry-after-ms": "x", "retry-after": "3"}, 3.0),  # a bad -ms falls through
        ({"Retry-After": "4"}, 4.0),  # header names are case-insensitive
        ({"retry-after": "2abc"}, 2.0),  # JavaScript's parseFloat reads the prefix
    ],
)
def test_retry_after_header_parsing(headers: dict[str, str], seconds: float | None) -> None:
    from pitrio.harness._retry import retry_after

    assert retry_after(headers, now=0.0) == seconds


@pytest.mark.parametrize(
    "text", ["401 Unauthorized", "400 Bad Request", "prompt is too long: 300000 tokens"]
)
async def test_non_retryable_errors_end_the_prompt(
    text: str, autojump_clock: trio.testing.MockClock
) -> None:
    harness, scripted = _harness([_error(text), ScriptedResponse.text("never")])
    recorder = Recorder(harness)
    await harness.prompt("hi")
    assert scripted.calls == 1
    assert "auto_retry_start" not in recorder.types()
    assert recorder.types()[-2:] == ["agent_end", "settled"]


async def test_disabled_retry(autojump_clock: trio.testing.MockClock) -> None:
    harness, scripted = _harness(
        [_error("503"), ScriptedResponse.text("ok")], retry=RetrySettings(enabled=False)
    )
    await harness.prompt("hi")
    assert scripted.calls == 1


async def test_abort_during_backoff_ends_at_once(autojump_clock: trio.testing.MockClock) -> None:
    harness, scripted = _harness(
        [_error("503 Service Unavailable"), ScriptedResponse.text("never")],
        retry=RetrySettings(base_delay=30.0, jitter=0.0),
    )
    recorder = Recorder(harness)
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(harness.prompt, "hi")
        await trio.sleep(5.0)
        assert harness.is_busy
        assert recorder.of("auto_retry_start")[0][1].delay == 30.0
        harness.abort()
        await harness.wait_for_idle()
        assert trio.current_time() - start == pytest.approx(5.0, abs=1e-3)
    assert scripted.calls == 1
    ends = recorder.of("auto_retry_end")
    assert [e for _, e in ends] == [
        AutoRetryEnd(success=False, attempt=1, final_error="Retry cancelled")
    ]
    assert ends[0][0] - start == pytest.approx(5.0, abs=1e-3)
    assert recorder.types()[-1] == "settled"
    assert not _busy(harness)
    # The harness is usable again.
    await harness.prompt("again")
    assert scripted.calls == 2
    assert harness.messages[-1].text == "never"


async def test_abort_of_a_retried_run_ends_retrying_unsuccessfully(
    autojump_clock: trio.testing.MockClock,
) -> None:
    harness, _ = _harness(
        [_error("503"), ScriptedResponse.text("slow", delay=10.0)],
        retry=RetrySettings(base_delay=1.0, jitter=0.0),
    )
    recorder = Recorder(harness)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(harness.prompt, "hi")
        await trio.sleep(3.0)  # the retry is streaming
        harness.abort()
    ends = [e for _, e in recorder.of("auto_retry_end")]
    assert len(ends) == 1
    assert ends[0].success is False
    assert ends[0].attempt == 1
    assert harness.messages[-1].stop_reason == "aborted"
    assert recorder.types()[-1] == "settled"


async def test_retry_events_sit_between_runs(autojump_clock: trio.testing.MockClock) -> None:
    harness, _ = _harness([_error("503"), ScriptedResponse.text("ok")])
    recorder = Recorder(harness)
    await harness.prompt("hi")
    types = recorder.types()
    i = types.index("auto_retry_start")
    assert types[i - 1] == "agent_end"
    assert types[i + 1] == "agent_start"
    # auto_retry_end(success) follows the first good message_end, inside the retried run.
    j = types.index("auto_retry_end")
    assert types[j - 1] == "message_end"
    assert isinstance(recorder.events[i][1], AutoRetryStart)


async def test_a_retry_mid_run_continues_after_the_tool_results(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from pitrio import Tool, text_result

    ran: list[str] = []

    async def execute(call_id: str, params: Any, signal: Any, on_update: Any) -> Any:
        ran.append(call_id)
        return text_result("result")

    tool = Tool(name="t", execute=execute, parameters={"type": "object"})
    harness, scripted = _harness(
        [
            ScriptedResponse.tool_calls(("c1", "t", {})),
            _error("Connection error."),
            ScriptedResponse.text("done"),
        ],
        tools=[tool],
    )
    await harness.prompt("go")
    assert ran == ["c1"]  # the tool is not run again
    assert [m.role for m in scripted.requests[2].messages] == ["user", "assistant", "toolResult"]
    assert [m.role for m in harness.messages] == ["user", "assistant", "toolResult", "assistant"]


# Pi's own answers (pi-ai 0.85.0 isRetryableAssistantError, isContextOverflow) for these
# texts, produced with this Node script (argv[2]: a JSON list of texts):
#
#   import { isRetryableAssistantError } from "@earendil-works/pi-ai/dist/utils/retry.js";
#   import { isContextOverflow } from "@earendil-works/pi-ai/dist/utils/overflow.js";
#   const texts = JSON.parse(process.argv[2]);
#   const out = texts.map((t) => {
#     const usage = { input: 0, output: 0, cacheRead: 0 };
#     const m = { stopReason: "error", errorMessage: t, usage };
#     return [t, isRetryableAssistantError(m), isContextOverflow(m, 0)];
#   });
#   console.log(JSON.stringify(out));
PI_CLASSIFICATION: list[tuple[str, bool, bool]] = [
    ("429 Too Many Requests", True, False),
    ("Rate limit reached for requests", True, False),
    (
        "rate_limit_error: Number of request tokens has exceeded your per-minute rate limit",
        True,
        False,
    ),
    (
        '529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
        True,
        False,
    ),
    ("500 Internal Server Error", True, False),
    ("502 Bad Gateway", True, False),
    ("503 Service Unavailable", True, False),
    ("504 Gateway Timeout", True, False),
    ("524 A timeout occurred", True, False),
    ("Internal server error", True, False),
    ("Connection error.", True, False),
    ("connection refused", True, False),
    ("other side closed", True, False),
    ("fetch failed", True, False),
    ("terminated", True, False),
    ("Request timed out.", True, False),
    ("timeout", True, False),
    ("socket hang up", True, False),
    ("getaddrinfo ENOTFOUND api.example.com", True, False),
    ("Anthropic stream ended before message_stop", True, False),
    ("stream ended without a done event", True, False),
    ("Server requested 120s retry delay (max: 60s). 429", True, False),
    ("Provider returned error", True, False),
    ("An error occurred while processing your request. You can retry your request", True, False),
    ("ResourceExhausted: quota", True, False),
    ("websocket closed", True, False),
    ("401 invalid x-api-key", False, False),
    ("401 Unauthorized", False, False),
    ("403 Forbidden", False, False),
    ("400 Bad Request: messages: field required", False, False),
    ("404 model not found", False, False),
    (
        "429 You exceeded your current quota, please check your plan and billing details: "
        "insufficient_quota",
        False,
        False,
    ),
    ("Monthly usage limit reached", False, False),
    ("prompt is too long: 213462 tokens > 200000 maximum", False, True),
    ("Your input exceeds the context window of this model", False, True),
    ("This model's maximum context length is 8192 tokens", False, True),
    (
        "Requested token count exceeds the model's maximum context length of 131072 tokens",
        False,
        True,
    ),
    ("the request exceeds the available context size, try increasing it", False, True),
    ("400 status code (no body)", False, True),
    ("413 (no body)", False, True),
    ("Throttling error: Too many tokens, please wait before trying again.", False, False),
    ("Rate limit: too many tokens per minute", True, False),
    ("request_too_large", False, True),
    ("Operation aborted", False, False),
    ("Invalid JSON in tool arguments", False, False),
    ("context_length_exceeded", False, True),
    ("Input is too long for requested model.", False, True),
    (
        "input token count (1196265) exceeds the maximum number of tokens allowed (1048575)",
        False,
        True,
    ),
    ("Please reduce the length of the messages or completion", False, True),
]


@pytest.mark.parametrize(("text", "retryable", "overflow"), PI_CLASSIFICATION)
def test_classification_matches_pi(text: str, retryable: bool, overflow: bool) -> None:
    message = _failed(text)
    assert is_context_overflow(message) is overflow
    # The coding agent retries what pi-ai calls retryable, unless it is an overflow.
    assert is_retryable(message) is (retryable and not overflow)
