"""pi-messages: what a backend's events may do beyond the fixtures, the request's
options, and the API through the registry.

The behaviour is pinned event for event against pi-ai by
``test_pi_messages_conformance.py``.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from pitrio import (
    Context,
    DoneEvent,
    ErrorEvent,
    Model,
    StreamOptions,
    TextContent,
    ToolCall,
    UserMessage,
)
from pitrio.providers import Models, get_api
from pitrio.providers._pi_messages import build_payload, messages_url, stream_pi_messages
from pitrio.providers._pi_messages._events import usage_from_json

from .conftest import Recorder, collect, stream_response

CONTEXT = Context(messages=[UserMessage(content="hi")])


def _model(**kwargs: Any) -> Model:
    defaults: dict[str, Any] = {
        "id": "openai/gpt-5",
        "name": "GPT-5",
        "api": "pi-messages",
        "provider": "radius",
        "base_url": "https://radius.example/v1",
    }
    return Model(**{**defaults, **kwargs})


def _events(*events: dict[str, Any]) -> list[bytes]:
    return [f"data: {json.dumps(e)}\n\n".encode() for e in events]


START = {"type": "start"}
USAGE = {"input": 1, "output": 2, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 3}


async def _run(
    *events: dict[str, Any], options: StreamOptions | None = None, model: Model | None = None
) -> tuple[list[Any], Recorder]:
    recorder = Recorder(stream_response(_events(*events)))
    async with recorder.client() as client:
        stream = stream_pi_messages(
            client, model or _model(), CONTEXT, options or StreamOptions(api_key="k")
        )
        return await collect(stream), recorder


async def test_model_headers_are_sent_under_the_options() -> None:
    """pi-ai sends only ``options.headers``; pitrio adds ``model.headers`` under them
    (docs/deviations.md)."""
    model = _model(headers={"X-Tenant": "t", "X-Both": "model"})
    options = StreamOptions(api_key="k", headers={"x-both": "options"})
    events, recorder = await _run(
        START, {"type": "done", "reason": "stop", "usage": USAGE}, options=options, model=model
    )
    assert isinstance(events[-1], DoneEvent)
    headers = recorder.requests[0].headers
    assert headers["x-tenant"] == "t"
    assert headers["x-both"] == "options"
    assert headers["authorization"] == "Bearer k"


def test_debug_asks_for_the_backends_debug_mode() -> None:
    """``options.extra["debug"]`` is pi-ai's ``debug`` option: ``?debug=1``."""
    model = _model(base_url="https://radius.example/v1/")
    assert messages_url(model, StreamOptions()) == "https://radius.example/v1/messages"
    debug = StreamOptions(extra={"debug": True})
    assert messages_url(model, debug) == "https://radius.example/v1/messages?debug=1"


def test_the_payload_leaves_unset_options_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the options given are sent; ``PI_CACHE_RETENTION=long`` is the one default
    passed on."""
    monkeypatch.setenv("PI_CACHE_RETENTION", "long")
    payload = build_payload(_model(), CONTEXT, StreamOptions(reasoning="off"))
    assert payload == {
        "model": "openai/gpt-5",
        "context": {"messages": [{"role": "user", "content": "hi", "timestamp": 0}]},
        "options": {"reasoning": "off", "cacheRetention": "long"},
    }
    monkeypatch.delenv("PI_CACHE_RETENTION")
    assert build_payload(_model(), CONTEXT, StreamOptions())["options"] == {}


async def test_unknown_events_and_blank_data_are_skipped() -> None:
    """An event type a newer backend adds is skipped, as pi-ai's consumers skip it."""
    events, _ = await _run(
        START,
        {"type": "usage_hint", "tokens": 5},
        {"type": "text_start", "contentIndex": 0},
        {"type": "text_end", "contentIndex": 0},
        {"type": "done", "reason": "stop", "usage": USAGE},
    )
    assert [e.type for e in events] == ["start", "text_start", "text_end", "done"]
    done = events[-1]
    assert done.message.content == (TextContent(text=""),)


async def test_tool_arguments_stream_until_the_end_event() -> None:
    """Deltas update the arguments; the end event's call wins."""
    events, _ = await _run(
        START,
        {"type": "toolcall_start", "contentIndex": 0, "id": "c1", "toolName": "read"},
        {"type": "toolcall_delta", "contentIndex": 0, "delta": '{"path": "a'},
        {"type": "toolcall_end", "contentIndex": 0, "toolCall": {"arguments": "not an object"}},
        {"type": "done", "reason": "toolUse", "usage": USAGE},
    )
    delta = events[2]
    assert delta.partial.content[0].arguments == {"path": "a"}
    end = events[3]
    assert end.tool_call == ToolCall(id="c1", name="read", arguments={"path": "a"})


@pytest.mark.parametrize(
    ("event", "text"),
    [
        ({"type": "text_delta", "contentIndex": 0, "delta": "x"},
         "pi-messages: text_delta event for content index 0, but the message has 0 block(s)"),
        ({"type": "text_start", "contentIndex": 2},
         "pi-messages: text_start event for content index 2, but the message has 0 block(s)"),
        ({"type": "done", "reason": "error", "usage": USAGE},
         "pi-messages: a done event's reason must be stop, length or toolUse, got 'error'"),
    ],
)  # fmt: skip
async def test_events_that_do_not_fit_fail_naming_them(event: dict[str, Any], text: str) -> None:
    """pi-ai fails with a TypeError or builds a sparse message; pitrio says what is wrong."""
    events, _ = await _run(START, event)
    last = events[-1]
    assert isinstance(last, ErrorEvent)
    assert last.error.error_message == text
    assert last.error.content == ()


async def test_a_block_event_for_a_block_of_another_kind_fails() -> None:
    """A thinking delta for a text block."""
    events, _ = await _run(
        START,
        {"type": "text_start", "contentIndex": 0},
        {"type": "thinking_delta", "contentIndex": 0, "delta": "x"},
    )
    last = events[-1]
    assert isinstance(last, ErrorEvent)
    assert last.error.error_message == (
        "pi-messages: thinking_delta event for content index 0, a text block"
    )


async def test_an_event_that_is_not_an_object_fails() -> None:
    """JSON that is not an event."""
    events, _ = await _run(START, [1, 2])  # type: ignore[arg-type]  # deliberately not an event
    last = events[-1]
    assert isinstance(last, ErrorEvent)
    assert last.error.error_message == "pi-messages: an event must be a JSON object, got '[1, 2]'"


async def test_the_backends_abort_is_an_abort() -> None:
    """The backend's ``error`` event with reason ``aborted`` keeps that reason."""
    events, _ = await _run(
        START, {"type": "error", "reason": "aborted", "errorMessage": "upstream aborted"}
    )
    last = events[-1]
    assert isinstance(last, ErrorEvent)
    assert last.reason == "aborted"
    assert last.error.error_message == "upstream aborted"
    assert last.error.usage == usage_from_json(None)


def test_usage_counts_what_is_a_number() -> None:
    """Missing or non-numeric counts are 0; the backend's cost is kept."""
    usage = usage_from_json({"input": 3, "output": "2", "cost": {"total": 0.5}, "reasoning": 4})
    assert (usage.input, usage.output, usage.cost.total, usage.reasoning) == (3, 0, 0.5, 4)


async def test_the_registry_and_models_key() -> None:
    """``get_api`` finds the API; ``Models`` takes ``RADIUS_API_KEY`` from the env."""
    assert get_api("pi-messages") is stream_pi_messages
    recorder = Recorder(
        stream_response(_events(START, {"type": "done", "reason": "stop", "usage": USAGE}))
    )
    async with (
        recorder.client() as client,
        Models(client=client, env={"RADIUS_API_KEY": "rk"}) as models,
    ):
        events = await collect(models.stream_simple(_model(), CONTEXT))
    assert isinstance(events[-1], DoneEvent)
    assert events[-1].message.usage.total_tokens == 3
    assert recorder.requests[0].headers["authorization"] == "Bearer rk"
    assert str(recorder.requests[0].url) == "https://radius.example/v1/messages"


async def test_an_http_error_while_aborted_has_no_diagnostic() -> None:
    """pi-ai adds the response-failure diagnostic only when the run was not aborted
    (here the signal is aborted as the error response arrives)."""
    from pitrio import AbortSignal

    signal = AbortSignal()
    recorder = Recorder(httpx.Response(500, json={"error": {"message": "boom"}}))
    async with recorder.client() as client:
        options = StreamOptions(
            api_key="k", signal=signal, on_error_response=lambda *_: signal.abort()
        )
        events = await collect(stream_pi_messages(client, _model(), CONTEXT, options))
    last = events[-1]
    assert isinstance(last, ErrorEvent)
    assert last.reason == "aborted"
    assert last.error.error_message == "500 Internal Server Error: boom"
    assert last.error.diagnostics is None


async def test_a_json_answer_is_refused_naming_it() -> None:
    """A backend answering with one JSON body: pi-ai reads a stream without a terminal
    event; pitrio names the error the body holds."""
    recorder = Recorder(httpx.Response(200, json={"error": {"message": "quota exceeded"}}))
    async with recorder.client() as client:
        events = await collect(
            stream_pi_messages(client, _model(), CONTEXT, StreamOptions(api_key="k"))
        )
    last = events[-1]
    assert isinstance(last, ErrorEvent)
    assert (
        last.error.error_message == "pi-messages: the server answered with an error: quota exceeded"
    )
    assert last.error.content == ()
