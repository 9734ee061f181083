"""openai-completions with ``httpx.MockTransport``: request conversion, stream handling,
errors as data, retries, timeouts and aborts (virtual time where it sleeps)."""

from __future__ import annotations

import json
from functools import partial
from typing import Any

import attrs
import httpx
import pytest
import trio
import trio.testing

from pitrio import (
    AbortSignal,
    AssistantMessage,
    Context,
    ImageContent,
    Model,
    ModelCost,
    StreamOptions,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from pitrio._events import DoneEvent, ErrorEvent
from pitrio.providers import openai_compatible
from pitrio.providers._http import APIError, format_provider_error, merge_headers, retry_delay_ms
from pitrio.providers._json import parse_streaming_json
from pitrio.providers._openai_completions import stream_openai_completions
from pitrio.providers._openai_completions._compat import CompletionsCompat, get_compat
from pitrio.providers._options import MaxTokensClampedWarning
from pitrio.providers._output import calculate_cost
from pitrio.providers._transform import short_hash

from .conftest import Recorder, ScriptedBody, chunk, collect, sse, stream_response

MODEL = openai_compatible("http://test/v1", "m", provider="vllm", max_tokens=1000)


@attrs.frozen
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    constrained_sampling: dict[str, Any] | None = None


READ = Tool(
    "read",
    "Read a file",
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)


def ok_stream(text: str = "Hi") -> httpx.Response:
    return stream_response(sse(chunk(content=text), chunk(finish="stop")))


async def run(
    recorder: Recorder,
    context: Context | None = None,
    options: StreamOptions | None = None,
    model: Model = MODEL,
) -> list[Any]:
    async with recorder.client() as client:
        stream = stream_openai_completions(
            client,
            model,
            context or Context(messages=[UserMessage(content="hi")]),
            options or StreamOptions(api_key="sk-test"),
        )
        return await collect(stream)


def final(events: list[Any]) -> AssistantMessage:
    last = events[-1]
    assert isinstance(last, DoneEvent | ErrorEvent)
    return last.message if isinstance(last, DoneEvent) else last.error


# -- request conversion ------------------------------------------------------------------


async def test_request_body_for_a_full_history() -> None:
    model = attrs.evolve(MODEL, reasoning=True, input=("text", "image"))
    same: dict[str, Any] = {"api": model.api, "provider": model.provider, "model": model.id}
    context = Context(
        system_prompt="Be brief.",
        messages=[
            UserMessage(content="look"),
            UserMessage(
                content=(
                    TextContent(text="here"),
                    ImageContent(data="AAAA", mime_type="image/png"),
                )
            ),
            AssistantMessage(
                content=(
                    ThinkingContent(thinking="plan", thinking_signature="reasoning_content"),
                    TextContent(text="Reading."),
                    ToolCall(id="call_1", name="read", arguments={"path": "a"}),
                ),
                stop_reason="toolUse",
                **same,
            ),
            ToolResultMessage(
                tool_call_id="call_1",
                tool_name="read",
                content=(
                    TextContent(text="alpha"),
                    ImageContent(data="BBBB", mime_type="image/gif"),
                ),
            ),
            AssistantMessage(content=(TextContent(text="broken"),), stop_reason="error", **same),
            UserMessage(content="next"),
        ],
        tools=[READ],
    )
    options = StreamOptions(
        api_key="sk-test", reasoning="medium", tool_choice="auto", temperature=0.5, max_tokens=300
    )
    recorder = Recorder(ok_stream())
    events = await run(recorder, context, options, model)
    assert final(events).stop_reason == "stop"
    body = recorder.bodies[0]
    assert body == {
        "model": "m",
        "stream": True,
        "stream_options": {"include_usage": True},
        "store": False,
        "max_completion_tokens": 300,
        "temperature": 0.5,
        "tool_choice": "auto",
        "reasoning_effort": "medium",
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "read",
                    "description": "Read a file",
                    "parameters": READ.parameters,
                    "strict": False,
                },
            }
        ],
        "messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": "look"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "here"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                ],
            },
            {
                "role": "assistant",
                "content": "Reading.",
                "reasoning_content": "plan",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "read", "arguments": '{"path":"a"}'},
                    }
                ],
            },
            {"role": "tool", "content": "alpha", "tool_call_id": "call_1"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Attached image(s) from tool result:"},
                    {"type": "image_url", "image_url": {"url": "data:image/gif;base64,BBBB"}},
                ],
            },
            {"role": "user", "content": "next"},
        ],
    }


async def test_headers_merge_and_null_removes() -> None:
    model = attrs.evolve(MODEL, headers={"X-Model": "a", "X-Keep": "k"})
    options = StreamOptions(api_key="sk-1", headers={"x-model": None, "X-Opt": "b"})
    recorder = Recorder(ok_stream())
    await run(recorder, options=options, model=model)
    request = recorder.requests[0]
    assert request.url == "http://test/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-1"
    assert request.headers["accept"] == "application/json"
    assert request.headers["content-type"] == "application/json"
    assert request.headers["user-agent"].startswith("pi (")
    assert request.headers["x-keep"] == "k"
    assert request.headers["x-opt"] == "b"
    assert "x-model" not in request.headers


async def test_authorization_header_instead_of_api_key() -> None:
    recorder = Recorder(ok_stream())
    options = StreamOptions(headers={"Authorization": "Bearer from-header"})
    await run(recorder, options=options)
    assert recorder.requests[0].headers["authorization"] == "Bearer from-header"


async def test_missing_api_key_is_a_lone_error_event() -> None:
    recorder = Recorder()
    events = await run(recorder, options=StreamOptions())
    assert len(events) == 1
    message = final(events)
    assert message.stop_reason == "error"
    assert message.error_message == "No API key for provider: vllm"
    assert recorder.requests == []


def test_compat_is_a_frozen_record_with_python_names() -> None:
    """``get_compat`` gives a frozen ``CompletionsCompat``; ``model.compat`` overrides
    it under pi-ai's camelCase names, one per field."""
    detected = get_compat(MODEL)
    assert isinstance(detected, CompletionsCompat)
    assert detected.max_tokens_field == "max_completion_tokens"
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        detected.supports_store = False  # type: ignore[misc]
    wire = {f.name: f.metadata["wire"] for f in attrs.fields(CompletionsCompat)}
    assert len(set(wire.values())) == len(wire) == 26
    assert all(name == name.lower() for name in wire)
    overridden = get_compat(
        attrs.evolve(MODEL, compat={"maxTokensField": "max_tokens", "supportsStore": None})
    )
    assert overridden.max_tokens_field == "max_tokens"
    assert overridden.supports_store == detected.supports_store  # None keeps the detected


async def test_compat_switches() -> None:
    model = attrs.evolve(
        MODEL,
        reasoning=True,
        compat={
            "supportsStore": False,
            "supportsUsageInStreaming": False,
            "supportsStrictMode": False,
            "maxTokensField": "max_tokens",
            "requiresToolResultName": True,
            "requiresAssistantAfterToolResult": True,
            "supportsDeveloperRole": False,
            "thinkingFormat": "qwen-chat-template",
        },
    )
    context = Context(
        system_prompt="sys",
        messages=[
            UserMessage(content="go"),
            AssistantMessage(
                content=(ToolCall(id="c1", name="read", arguments={}),),
                api=model.api,
                provider=model.provider,
                model=model.id,
                stop_reason="toolUse",
            ),
            ToolResultMessage(tool_call_id="c1", tool_name="read", content=()),
            UserMessage(content="more"),
        ],
        tools=[READ],
    )
    recorder = Recorder(ok_stream())
    await run(recorder, context, StreamOptions(api_key="k"), model)
    body = recorder.bodies[0]
    assert "store" not in body
    assert "stream_options" not in body
    assert body["max_tokens"] == 1000
    assert "strict" not in body["tools"][0]["function"]
    assert body["chat_template_kwargs"] == {"enable_thinking": False, "preserve_thinking": True}
    assert [m["role"] for m in body["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]
    assert body["messages"][2]["content"] == ""
    assert body["messages"][3] == {
        "role": "tool",
        "content": "(no tool output)",
        "tool_call_id": "c1",
        "name": "read",
    }
    assert body["messages"][4] == {
        "role": "assistant",
        "content": "I have processed the tool results.",
    }


async def test_strict_tool_schema_for_constrained_sampling() -> None:
    tool = Tool(
        "search",
        "Search",
        {
            "type": "object",
            "properties": {"q": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["q"],
        },
        constrained_sampling={"type": "json_schema"},
    )
    recorder = Recorder(ok_stream())
    await run(recorder, Context(messages=[UserMessage(content="x")], tools=[tool]))
    function = recorder.bodies[0]["tools"][0]["function"]
    assert function["strict"] is True
    assert function["parameters"] == {
        "type": "object",
        "properties": {
            "q": {"type": "string"},
            "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        },
        "required": ["q", "limit"],
        "additionalProperties": False,
    }


async def test_images_become_placeholders_for_text_only_models() -> None:
    context = Context(
        messages=[
            UserMessage(
                content=(
                    ImageContent(data="A", mime_type="image/png"),
                    ImageContent(data="B", mime_type="image/png"),
                    TextContent(text="what?"),
                )
            )
        ]
    )
    recorder = Recorder(ok_stream())
    await run(recorder, context)
    assert recorder.bodies[0]["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "(image omitted: model does not support images)"},
                {"type": "text", "text": "what?"},
            ],
        }
    ]


async def test_max_tokens_is_clamped_to_the_context_window() -> None:
    model = attrs.evolve(MODEL, context_window=5000, max_tokens=4000)
    recorder = Recorder(ok_stream())
    with pytest.warns(MaxTokensClampedWarning, match="max_tokens=4000 .* context_window of 5000"):
        await run(recorder, Context(messages=[UserMessage(content="x" * 400)]), model=model)
    # 5000 - ceil(400 / 4) - 4096 = 804
    assert recorder.bodies[0]["max_completion_tokens"] == 804


async def test_on_payload_and_on_response_hooks() -> None:
    seen: list[int] = []

    async def on_payload(params: Any, model: Model) -> Any:
        return {**params, "seed": 7}

    def on_response(status: int, headers: Any, model: Model) -> None:
        seen.append(status)

    recorder = Recorder(ok_stream())
    options = StreamOptions(api_key="k", on_payload=on_payload, on_response=on_response)
    await run(recorder, options=options)
    assert recorder.bodies[0]["seed"] == 7
    assert seen == [200]


# -- the stream ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("finish", "stop_reason", "error"),
    [
        ("stop", "stop", None),
        ("end", "stop", None),
        ("length", "length", None),
        ("tool_calls", "toolUse", None),
        ("function_call", "toolUse", None),
        ("content_filter", "error", "Provider finish_reason: content_filter"),
        ("weird", "error", "Provider finish_reason: weird"),
    ],
)
async def test_stop_reason_mapping(finish: str, stop_reason: str, error: str | None) -> None:
    recorder = Recorder(stream_response(sse(chunk(content="x"), chunk(finish=finish))))
    message = final(await run(recorder))
    assert message.stop_reason == stop_reason
    assert message.error_message == error
    assert message.raw_stop_reason == finish


async def test_events_usage_cost_and_response_fields() -> None:
    model = attrs.evolve(
        MODEL, cost=ModelCost(input=3, output=15, cache_read=0.3, cache_write=3.75)
    )
    usage = {
        "prompt_tokens": 1200,
        "completion_tokens": 300,
        "prompt_tokens_details": {"cached_tokens": 1000, "cache_write_tokens": 100},
        "completion_tokens_details": {"reasoning_tokens": 120},
    }
    body = sse(
        {
            "id": "resp-1",
            "model": "m-2025",
            "choices": [{"index": 0, "delta": {"role": "assistant"}}],
        },
        chunk(reasoning_content="Think."),
        chunk(content="Hel"),
        chunk(content="lo"),
        chunk(
            tool_calls=[
                {"index": 0, "id": "call_9", "function": {"name": "read", "arguments": '{"pa'}}
            ]
        ),
        chunk(
            tool_calls=[{"index": 0, "function": {"arguments": 'th": "x"}'}}], finish="tool_calls"
        ),
        {"id": "resp-1", "choices": [], "usage": usage},
    )
    events = await run(Recorder(stream_response(body)), model=model)
    assert [e.type for e in events] == [
        "start",
        "thinking_start",
        "thinking_delta",
        "text_start",
        "text_delta",
        "text_delta",
        "toolcall_start",
        "toolcall_delta",
        "toolcall_delta",
        "thinking_end",
        "text_end",
        "toolcall_end",
        "done",
    ]
    assert events[7].partial.content[2].arguments == {}
    assert events[8].partial.content[2].arguments == {"path": "x"}
    message = final(events)
    assert message.stop_reason == "toolUse"
    assert message.response_id == "resp-1"
    assert message.response_model == "m-2025"
    assert message.content == (
        ThinkingContent(thinking="Think.", thinking_signature="reasoning_content"),
        TextContent(text="Hello"),
        ToolCall(id="call_9", name="read", arguments={"path": "x"}),
    )
    assert message.usage.input == 100
    assert message.usage.output == 300
    assert message.usage.cache_read == 1000
    assert message.usage.cache_write == 100
    assert message.usage.reasoning == 120
    assert message.usage.total_tokens == 1500
    assert message.usage.cost.input == (3 / 1000000) * 100
    assert message.usage.cost.total == pytest.approx(
        (100 * 3 + 300 * 15 + 1000 * 0.3 + 100 * 3.75) / 1e6
    )


async def test_malformed_json_ends_with_an_error_and_no_end_events() -> None:
    body = [*sse(chunk(content="ok"))[:1], b"data: {not json\n\n"]
    events = await run(Recorder(stream_response(body)))
    assert [e.type for e in events] == ["start", "text_start", "text_delta", "error"]
    message = final(events)
    assert message.stop_reason == "error"
    assert message.content == (TextContent(text="ok"),)
    assert message.error_message


async def test_error_chunk_mid_stream() -> None:
    body = sse(chunk(content="a"), {"error": {"message": "overloaded", "code": 529}})
    message = final(await run(Recorder(stream_response(body))))
    assert message.stop_reason == "error"
    assert message.error_message == "overloaded"


async def test_stream_without_finish_reason() -> None:
    message = final(await run(Recorder(stream_response(sse(chunk(content="a"))))))
    assert message.error_message == "Stream ended without finish_reason"


async def test_the_body_is_closed_after_every_outcome() -> None:
    body = ScriptedBody([*sse(chunk(content="a"))[:1], b"data: {bad\n\n", b"data: [DONE]\n\n"])
    await run(Recorder(httpx.Response(200, stream=body)))
    assert body.closed


# -- errors as data --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "text"),
    [
        (
            httpx.Response(401, json={"error": {"message": "bad key", "type": "auth"}}),
            '401: {"message":"bad key","type":"auth"}',
        ),
        (httpx.Response(502, text="Bad gateway"), "502 Bad gateway"),
        (httpx.Response(500), "500 status code (no body)"),
        (httpx.Response(422, json={"detail": "nope"}), '422 {"detail":"nope"}'),
    ],
)
async def test_http_errors_keep_the_provider_message(response: httpx.Response, text: str) -> None:
    events = await run(Recorder(response))
    assert len(events) == 1
    message = final(events)
    assert (message.stop_reason, message.error_message) == ("error", text)


@pytest.mark.parametrize(
    ("exc", "text"),
    [
        (
            httpx.ConnectError("refused"),
            "Connection error. POST http://test/v1/chat/completions failed: ConnectError: refused",
        ),
        (httpx.ReadTimeout("slow"), "Request timed out."),
    ],
)
async def test_connection_failures(exc: Exception, text: str) -> None:
    def fail(request: httpx.Request) -> httpx.Response:
        raise exc

    message = final(await run(Recorder(fail)))
    assert (message.stop_reason, message.error_message) == ("error", text)


async def test_timeout_covers_the_wait_for_headers(autojump_clock: trio.testing.MockClock) -> None:
    async def slow(request: httpx.Request) -> httpx.Response:
        await trio.sleep(30)
        return ok_stream()

    start = trio.current_time()
    message = final(await run(Recorder(slow), options=StreamOptions(api_key="k", timeout=1.5)))
    assert message.error_message == "Request timed out."
    assert trio.current_time() - start == pytest.approx(1.5)


async def test_retry_after_is_honoured(autojump_clock: trio.testing.MockClock) -> None:
    recorder = Recorder(
        httpx.Response(429, headers={"retry-after": "2"}, json={"error": {"message": "slow down"}}),
        httpx.Response(503, headers={"retry-after-ms": "250"}, text="busy"),
        ok_stream("done"),
    )
    start = trio.current_time()
    message = final(await run(recorder, options=StreamOptions(api_key="k", max_retries=2)))
    assert message.stop_reason == "stop"
    assert message.text == "done"
    assert len(recorder.requests) == 3
    assert recorder.bodies[0] == recorder.bodies[2]
    assert trio.current_time() - start == pytest.approx(2.25)


async def test_no_retries_by_default() -> None:
    recorder = Recorder(httpx.Response(503, text="busy"), ok_stream())
    message = final(await run(recorder))
    assert message.error_message == "503 busy"
    assert len(recorder.requests) == 1


async def test_non_retryable_status_is_not_retried() -> None:
    recorder = Recorder(httpx.Response(400, json={"error": {"message": "bad"}}), ok_stream())
    await run(recorder, options=StreamOptions(api_key="k", max_retries=3))
    assert len(recorder.requests) == 1


async def test_retry_after_above_the_cap_fails_at_once() -> None:
    recorder = Recorder(httpx.Response(429, headers={"retry-after": "90"}, text="later"))
    options = StreamOptions(api_key="k", max_retries=2, max_retry_delay=30)
    message = final(await run(recorder, options=options))
    assert message.error_message == "Server requested 90s retry delay (max: 30s). 429 later"
    assert len(recorder.requests) == 1


async def test_a_zero_cap_disables_the_limit(autojump_clock: trio.testing.MockClock) -> None:
    recorder = Recorder(
        httpx.Response(429, headers={"retry-after": "90"}, text="later"), ok_stream()
    )
    options = StreamOptions(api_key="k", max_retries=1, max_retry_delay=0)
    start = trio.current_time()
    assert final(await run(recorder, options=options)).stop_reason == "stop"
    assert trio.current_time() - start == pytest.approx(90)


async def test_exponential_backoff_without_headers(autojump_clock: trio.testing.MockClock) -> None:
    recorder = Recorder(httpx.Response(500, text="x"), httpx.Response(500, text="x"), ok_stream())
    start = trio.current_time()
    await run(recorder, options=StreamOptions(api_key="k", max_retries=2))
    # 0.5 s then 1 s, each times a jitter factor in (0.75, 1]
    assert 0.75 * 1.5 < trio.current_time() - start <= 1.5


# -- aborts ----------------------------------------------------------------------------


async def test_abort_mid_stream_ends_blocks_and_closes_the_body() -> None:
    body = ScriptedBody(
        [
            *sse(chunk(content="Writing"))[:1],
            *sse(
                chunk(
                    tool_calls=[
                        {"index": 0, "id": "c", "function": {"name": "w", "arguments": "{"}}
                    ]
                )
            )[:1],
        ],
        hang_after=2,
    )
    events = []
    async with Recorder(httpx.Response(200, stream=body)).client() as client:
        stream = stream_openai_completions(
            client, MODEL, Context(messages=[UserMessage(content="go")]), StreamOptions(api_key="k")
        )
        async with stream:
            async for event in stream:
                events.append(event)
                if event.type == "toolcall_delta":
                    stream.cancel()
    assert [e.type for e in events] == [
        "start",
        "text_start",
        "text_delta",
        "toolcall_start",
        "toolcall_delta",
        "text_end",
        "toolcall_end",
        "error",
    ]
    message = final(events)
    assert (message.stop_reason, message.error_message) == ("aborted", "Request was aborted")
    assert body.closed


async def test_abort_before_headers() -> None:
    arrived = trio.Event()

    async def hang(request: httpx.Request) -> httpx.Response:
        arrived.set()
        await trio.sleep_forever()
        raise AssertionError

    async with Recorder(hang).client() as client:
        stream = stream_openai_completions(
            client, MODEL, Context(messages=[UserMessage(content="go")]), StreamOptions(api_key="k")
        )
        async with stream:
            await arrived.wait()
            stream.cancel()
            events = [e async for e in stream]
    assert len(events) == 1
    message = final(events)
    assert (message.stop_reason, message.error_message) == ("aborted", "Request aborted")


async def test_abort_during_retry_sleep(autojump_clock: trio.testing.MockClock) -> None:
    recorder = Recorder(
        httpx.Response(503, headers={"retry-after": "30"}, text="busy"), ok_stream()
    )
    async with recorder.client() as client:
        stream = stream_openai_completions(
            client,
            MODEL,
            Context(messages=[UserMessage(content="go")]),
            StreamOptions(api_key="k", max_retries=1),
        )
        async with stream:
            with trio.move_on_after(5):
                await stream.result()
            stream.cancel()
            message = await stream.result()
    assert (message.stop_reason, message.error_message) == ("aborted", "Request aborted")
    assert len(recorder.requests) == 1


async def test_no_connection_leak_after_an_abort() -> None:
    """A real socket: after the abort the client has closed the connection."""
    disconnected = trio.Event()

    async def handler(conn: trio.SocketStream) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            data += await conn.receive_some(65536)
        payload = b"data: " + json.dumps(chunk(content="x")).encode() + b"\n\n"
        await conn.send_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n%x\r\n%s\r\n" % (len(payload), payload)
        )
        while await conn.receive_some(65536):
            pass
        disconnected.set()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        model = attrs.evolve(MODEL, base_url=f"http://127.0.0.1:{port}/v1")
        async with httpx.AsyncClient(trust_env=False, verify=False) as client:
            stream = stream_openai_completions(
                client,
                model,
                Context(messages=[UserMessage(content="go")]),
                StreamOptions(api_key="k"),
            )
            async with stream:
                async for event in stream:
                    if event.type == "text_delta":
                        stream.cancel()
            assert (await stream.result()).stop_reason == "aborted"
            with trio.fail_after(5):
                await disconnected.wait()
        nursery.cancel_scope.cancel()


# -- shared helpers ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {}),
        ("  ", {}),
        ('{"a": 1}', {"a": 1}),
        ('{"path": "/tmp/a', {"path": "/tmp/a"}),
        ('{"mode": 6', {"mode": 6}),
        ('{"pa', {}),
        ('{"a": 1, "b"', {"a": 1}),
        ('{"x": "hello\\', {"x": "hello"}),
        ('{"x": "are\\u00', {"x": "are"}),
        ('{"a": tr', {"a": True}),
        ('{"a": [1, {"b": nu', {"a": [1, {"b": None}]}),
        ('{"s": "raw\ncontrol"}', {"s": "raw\ncontrol"}),
        ('{"s": "bad \\q"}', {"s": "bad \\q"}),
        ("null", {}),
    ],
)
def test_parse_streaming_json(text: str, expected: Any) -> None:
    assert parse_streaming_json(text) == expected


def test_calculate_cost_uses_pi_ai_operation_order_and_1h_writes() -> None:
    model = attrs.evolve(
        MODEL, cost=ModelCost(input=3, output=15, cache_read=0.3, cache_write=3.75)
    )
    usage = calculate_cost(
        model, Usage(input=10, output=20, cache_read=30, cache_write=40, cache_write_1h=15)
    )
    assert usage.cost.input == (3 / 1000000) * 10
    assert usage.cost.cache_write == (3.75 * 25 + 3 * 2 * 15) / 1000000
    assert usage.cost.total == (
        usage.cost.input + usage.cost.output + usage.cost.cache_read + usage.cost.cache_write
    )


def test_format_provider_error() -> None:
    error = APIError("429 slow", status=429, error={"message": "slow"})
    assert format_provider_error(error) == '429: {"message":"slow"}'
    assert (
        format_provider_error(error, "OpenAI API error")
        == 'OpenAI API error (429): {"message":"slow"}'
    )
    assert format_provider_error(ValueError("plain")) == "plain"
    assert format_provider_error(APIError("500 x", status=500)) == "500 x"


def test_retry_delay_sources() -> None:
    def error(**headers: str) -> APIError:
        return APIError("e", status=503, headers=httpx.Headers(headers))

    assert retry_delay_ms(error(**{"retry-after-ms": "12.5"}), 0) == 12.5
    assert retry_delay_ms(error(**{"retry-after": "3"}), 0) == 3000
    assert 375 <= retry_delay_ms(error(), 0) <= 500
    assert 6000 <= retry_delay_ms(error(), 10) <= 8000


def test_merge_headers_is_case_insensitive_and_none_removes() -> None:
    assert merge_headers({"A": "1", "B": "2"}, {"a": "3", "b": None}, None) == {"a": "3"}


def test_short_hash_matches_pi_ai() -> None:
    assert short_hash("call_abc|fc_123") == "jp01dsxufnom"


async def test_flipping_the_signal_alone_aborts() -> None:
    signal = AbortSignal()
    body = ScriptedBody(sse(chunk(content="Hi"))[:1], hang_after=1)
    events = []
    async with Recorder(httpx.Response(200, stream=body)).client() as client:
        stream = stream_openai_completions(
            client,
            MODEL,
            Context(messages=[UserMessage(content="go")]),
            StreamOptions(api_key="k", signal=signal),
        )
        async with stream:
            async for event in stream:
                events.append(event)
                if event.type == "text_delta":
                    signal.abort()
    assert [e.type for e in events][-2:] == ["text_end", "error"]
    message = final(events)
    assert (message.stop_reason, message.error_message) == ("aborted", "Request was aborted")
    assert body.closed


async def test_throughput_benchmark_runs_and_checks_its_answer() -> None:
    from benchmarks.bench_provider_sse import build_body, measure_decode, measure_http

    # Correctness only: measure_http raises unless the answer is the N deltas.
    assert await measure_http("openai-completions", 20, 1, 0) > 0
    assert measure_decode("openai-completions", 20, 1, 64) > 0
    assert build_body("openai-completions", 2).count(b"data: ") == 6
