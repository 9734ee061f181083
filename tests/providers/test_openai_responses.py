"""openai-responses unit tests on ``httpx.MockTransport``: request conversion, streaming,
errors, retries, aborts, and deferred responses in OpenAI's background mode.

The oracle traces are checked in ``test_conformance_responses.py``; these tests pin what
the corpus does not reach and pitrio's own additions (service tier and reasoning summary
options, background mode).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any

import attrs
import httpx
import pytest
import trio
import trio.testing

from pitrio._events import (
    AssistantMessageEvent,
    DoneEvent,
    ErrorEvent,
    TextDeltaEvent,
    ThinkingEndEvent,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
)
from pitrio._messages import (
    AssistantMessage,
    DeferredHandle,
    ImageContent,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from pitrio._model import Context, Model, ModelCost, StreamOptions
from pitrio._signal import AbortSignal
from pitrio._stream import AssistantMessageEventStream
from pitrio.providers._deferred import (
    DEFAULT_POLL_AFTER_MS,
    DeferredError,
    cancel_deferred,
    fetch_deferred,
    supports_deferred,
)
from pitrio.providers._openai_responses import stream_openai_responses
from pitrio.providers._openai_responses._payload import build_request
from pitrio.providers._options import MaxTokensClampedWarning

Handler = Callable[[httpx.Request], Awaitable[httpx.Response]]

BASE_URL = "https://api.test/v1"
GPT = Model(
    id="gpt-4.1",
    api="openai-responses",
    provider="openai",
    base_url=BASE_URL,
    cost=ModelCost(input=2, output=8, cache_read=0.5),
    max_tokens=4096,
)
REASONER = Model(
    id="o4-mini",
    api="openai-responses",
    provider="openai",
    base_url=BASE_URL,
    reasoning=True,
    input=("text", "image"),
    max_tokens=4096,
)


@attrs.frozen
class Tool:
    name: str
    description: str
    parameters: Mapping[str, Any]


READ = Tool("read", "Read a file", {"type": "object", "properties": {"path": {"type": "string"}}})


def options(**kwargs: Any) -> StreamOptions:
    kwargs.setdefault("api_key", "sk-test")
    return StreamOptions(**kwargs)


def hi(text: str = "hi") -> Context:
    return Context(messages=[UserMessage(content=text)])


def body_of(model: Model, context: Context, opts: StreamOptions | None = None) -> dict[str, Any]:
    return build_request(model, context, opts or options()).body


def assistant(*content: Any, model: Model = GPT, **kwargs: Any) -> AssistantMessage:
    kwargs.setdefault(
        "stop_reason", "toolUse" if any(isinstance(b, ToolCall) for b in content) else "stop"
    )
    return AssistantMessage(
        content=tuple(content), api=model.api, provider=model.provider, model=model.id, **kwargs
    )


# --------------------------------------------------------------------------------------
# Scripted HTTP


def sse(*events: Mapping[str, Any]) -> bytes:
    out = b""
    for event in events:
        out += f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()
    return out


def text_response(
    text: str = "Hello", *, usage: Mapping[str, Any] | None = None, **extra: Any
) -> bytes:
    item = {"id": "msg_1", "type": "message", "role": "assistant", "content": []}
    done = {**item, "status": "completed", "content": [{"type": "output_text", "text": text}]}
    final = {"id": "resp_1", "status": "completed", "output": [], **extra}
    if usage is not None:
        final["usage"] = usage
    return sse(
        {"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}},
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {"type": "response.output_text.delta", "output_index": 0, "delta": text},
        {"type": "response.output_item.done", "output_index": 0, "item": done},
        {"type": "response.completed", "response": final},
    )


class ScriptedBody(httpx.AsyncByteStream):
    """A response body: the given chunks, then optionally hanging; records closing."""

    def __init__(self, chunks: Iterable[bytes], *, hang: bool = False) -> None:
        self.chunks = list(chunks)
        self.hang = hang
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk
        if self.hang:
            await trio.sleep_forever()

    async def aclose(self) -> None:
        self.closed = True


@attrs.define
class Server:
    """Answers requests from a list of responses, recording every request."""

    responses: list[httpx.Response | Callable[[], Awaitable[httpx.Response]]]
    requests: list[httpx.Request] = attrs.field(factory=list)
    times: list[float] = attrs.field(factory=list)

    async def handle(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        self.requests.append(request)
        self.times.append(trio.current_time())
        answer = self.responses.pop(0)
        if callable(answer):
            return await answer()
        return answer

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.MockTransport(self.handle))

    def bodies(self) -> list[Any]:
        return [json.loads(r.content) if r.content else None for r in self.requests]


def ok(body: bytes | ScriptedBody) -> httpx.Response:
    stream = body if isinstance(body, ScriptedBody) else ScriptedBody([body])
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=stream)


def error(status: int, payload: Any, headers: Mapping[str, str] | None = None) -> httpx.Response:
    content = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return httpx.Response(status, headers=dict(headers or {}), content=content)


def as_json(payload: Any) -> httpx.Response:
    return httpx.Response(200, json=payload)


async def collect(
    stream: AssistantMessageEventStream,
) -> tuple[list[AssistantMessageEvent], AssistantMessage]:
    events: list[AssistantMessageEvent] = []
    async with stream:
        async for event in stream:
            events.append(event)
        return events, await stream.result()


async def run(
    server: Server, model: Model, context: Context, opts: StreamOptions
) -> tuple[list[AssistantMessageEvent], AssistantMessage]:
    async with server.client() as client:
        return await collect(stream_openai_responses(client, model, context, opts))


# ======================================================================================
# Request conversion


def test_plain_request_body_and_headers() -> None:
    context = Context(system_prompt="Be terse.", messages=[UserMessage(content="hi")])
    request = build_request(GPT, context, options(temperature=0.5))
    assert request.url == "https://api.test/v1/responses"
    assert request.body == {
        "model": "gpt-4.1",
        "input": [
            {"role": "system", "content": "Be terse."},
            {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        ],
        "stream": True,
        "store": False,
        "max_output_tokens": 4096,
        "temperature": 0.5,
    }
    headers = {k.lower(): v for k, v in request.headers.items()}
    assert headers["authorization"] == "Bearer sk-test"
    assert headers["accept"] == headers["content-type"] == "application/json"
    assert headers["user-agent"].startswith("pi (")


def test_max_output_tokens_has_a_floor_and_follows_the_context_window() -> None:
    assert body_of(GPT, hi(), options(max_tokens=3))["max_output_tokens"] == 16
    small = attrs.evolve(GPT, context_window=5000)
    # 5000 - ceil(len("hi") / 4) - 4096 = 903
    with pytest.warns(MaxTokensClampedWarning):
        assert body_of(small, hi())["max_output_tokens"] == 903


@pytest.mark.parametrize(
    ("level", "level_map", "effort"),
    [
        ("high", None, "high"),
        ("minimal", None, "minimal"),
        ("xhigh", None, "high"),  # not offered without a map entry: clamped down
        ("xhigh", {"xhigh": "xhigh"}, "xhigh"),
        ("low", {"low": "gentle"}, "gentle"),  # the wire value comes from the map
        ("minimal", {"minimal": None}, "low"),  # unsupported: moves up
    ],
)
def test_reasoning_effort(level: str, level_map: dict[str, str | None] | None, effort: str) -> None:
    model = attrs.evolve(REASONER, thinking_level_map=level_map)
    body = body_of(model, hi(), options(reasoning=level))
    assert body["reasoning"] == {"effort": effort, "summary": "auto"}
    assert body["include"] == ["reasoning.encrypted_content"]


def test_reasoning_summary_option_and_no_effort() -> None:
    body = body_of(
        REASONER, hi(), options(reasoning="low", extra={"reasoning_summary": "detailed"})
    )
    assert body["reasoning"] == {"effort": "low", "summary": "detailed"}
    # A summary alone asks for the default effort.
    body = body_of(REASONER, hi(), options(extra={"reasoning_summary": "concise"}))
    assert body["reasoning"] == {"effort": "medium", "summary": "concise"}


def test_reasoning_off() -> None:
    assert body_of(REASONER, hi(), options(reasoning="off"))["reasoning"] == {"effort": "none"}
    assert "include" not in body_of(REASONER, hi())
    mapped = attrs.evolve(REASONER, thinking_level_map={"off": "minimal"})
    assert body_of(mapped, hi())["reasoning"] == {"effort": "minimal"}
    # A map that forbids "off" sends no reasoning member at all.
    forbids = attrs.evolve(REASONER, thinking_level_map={"off": None})
    assert "reasoning" not in body_of(forbids, hi())
    # A model without reasoning never gets one.
    assert "reasoning" not in body_of(GPT, hi(), options(reasoning="high"))


def test_developer_role_for_reasoning_models() -> None:
    context = Context(system_prompt="sys", messages=[UserMessage(content="x")])
    assert body_of(REASONER, context)["input"][0] == {"role": "developer", "content": "sys"}
    legacy = attrs.evolve(REASONER, compat={"supportsDeveloperRole": False})
    assert body_of(legacy, context)["input"][0] == {"role": "system", "content": "sys"}


def test_encrypted_reasoning_is_replayed_verbatim() -> None:
    item = {
        "id": "rs_1",
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "Plan."}],
        "encrypted_content": "gAAAA-secret",
    }
    turn = assistant(
        ThinkingContent(thinking="Plan.", thinking_signature=json.dumps(item)),
        ThinkingContent(thinking="unsigned thoughts"),  # same model, no signature: dropped
        TextContent(text="Done.", text_signature='{"v":1,"id":"msg_9","phase":"final_answer"}'),
        model=REASONER,
    )
    context = Context(messages=[UserMessage(content="go"), turn, UserMessage(content="again")])
    items = body_of(REASONER, context)["input"]
    assert items[1] == item
    assert items[2] == {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Done.", "annotations": []}],
        "status": "completed",
        "id": "msg_9",
        "phase": "final_answer",
    }
    assert len(items) == 4


def test_foreign_thinking_becomes_text_and_ids_are_generated() -> None:
    claude = Model(id="claude", api="anthropic-messages", provider="anthropic")
    turn = assistant(
        ThinkingContent(thinking="Their thoughts.", thinking_signature="sig"),
        TextContent(text="Their answer.", text_signature="ignored-foreign"),
        model=claude,
    )
    items = body_of(GPT, Context(messages=[UserMessage(content="q"), turn]))["input"]
    assert [(i["id"], i["content"][0]["text"]) for i in items[1:]] == [
        ("msg_pi_1", "Their thoughts."),
        ("msg_pi_1_1", "Their answer."),
    ]


def test_function_tools_and_tool_choice() -> None:
    duplicate = Tool("read", "Read a file (v2)", {"type": "object"})
    context = Context(messages=[UserMessage(content="q")], tools=[READ, duplicate])
    body = body_of(GPT, context, options(tool_choice="required"))
    # One tool per name: the later definition, in the first one's place; no "strict".
    assert body["tools"] == [
        {
            "type": "function",
            "name": "read",
            "description": "Read a file (v2)",
            "parameters": {"type": "object"},
        }
    ]
    assert body["tool_choice"] == "required"
    strict = attrs.evolve(GPT, compat={"supportsStrictMode": True})
    assert body_of(strict, context)["tools"][0]["strict"] is False


def test_tool_calls_and_results() -> None:
    call = ToolCall(id="call_1|fc_1", name="read", arguments={"path": "a.txt", "n": 1.0})
    orphan = ToolCall(id="call_2|fc_2", name="read", arguments={})
    turn = assistant(call, orphan)
    result = ToolResultMessage(
        tool_call_id="call_1|fc_1",
        tool_name="read",
        content=(TextContent(text="line 1"), TextContent(text="line 2")),
    )
    context = Context(messages=[UserMessage(content="q"), turn, result], tools=[READ])
    items = body_of(GPT, context)["input"]
    assert items[1] == {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "read",
        "arguments": '{"path":"a.txt","n":1}',  # as JSON.stringify writes it
    }
    assert items[3] == {
        "type": "function_call_output",
        "call_id": "call_1",
        "output": "line 1\nline 2",
    }
    # A call without a result gets pi-ai's synthetic error result.
    assert items[4] == {
        "type": "function_call_output",
        "call_id": "call_2",
        "output": "No result provided",
    }


def test_other_models_tool_calls_lose_their_item_id() -> None:
    older = attrs.evolve(GPT, id="gpt-4o")
    turn = assistant(ToolCall(id="call_1|fc_1", name="read", arguments={}), model=older)
    result = ToolResultMessage(tool_call_id="call_1|fc_1", tool_name="read", content=())
    items = body_of(GPT, Context(messages=[turn, result]))["input"]
    assert items[0] == {
        "type": "function_call",
        "call_id": "call_1",
        "name": "read",
        "arguments": "{}",
    }
    assert items[1] == {
        "type": "function_call_output",
        "call_id": "call_1",
        "output": "(no tool output)",
    }


def test_images_for_vision_and_text_only_models() -> None:
    png = ImageContent(data="iVBORw0KGgo=", mime_type="image/png")
    user = UserMessage(content=(TextContent(text="look"), png))
    shot = ToolResultMessage(tool_call_id="c|fc_1", tool_name="read", content=(png,))
    turn = assistant(ToolCall(id="c|fc_1", name="read", arguments={}), model=REASONER)
    context = Context(messages=[user, turn, shot])
    image = {
        "type": "input_image",
        "detail": "auto",
        "image_url": "data:image/png;base64,iVBORw0KGgo=",
    }
    items = body_of(REASONER, context)["input"]
    assert items[0]["content"] == [{"type": "input_text", "text": "look"}, image]
    assert items[2]["output"] == [image]

    blind = attrs.evolve(REASONER, input=("text",))
    items = body_of(blind, context)["input"]
    assert items[0]["content"][1] == {
        "type": "input_text",
        "text": "(image omitted: model does not support images)",
    }
    assert items[2]["output"] == "(tool image omitted: model does not support images)"


def test_errored_turns_are_not_replayed() -> None:
    broken = assistant(TextContent(text="half"), stop_reason="error", error_message="terminated")
    items = body_of(
        GPT, Context(messages=[UserMessage(content="a"), broken, UserMessage(content="b")])
    )["input"]
    assert [i["content"][0]["text"] for i in items] == ["a", "b"]


def test_store_false_and_sampling_params_last() -> None:
    body = body_of(GPT, hi(), options(sampling_params={"top_p": 0.5, "store": True}))
    assert body["top_p"] == 0.5
    assert body["store"] is True  # sampling params override the named fields
    assert body_of(GPT, hi())["store"] is False


def test_prompt_cache_key_and_session_headers() -> None:
    request = build_request(GPT, hi(), options(session_id="s" * 80))
    assert request.body["prompt_cache_key"] == "s" * 64
    assert "prompt_cache_retention" not in request.body
    assert request.headers["session_id"] == request.headers["x-client-request-id"] == "s" * 80

    long = build_request(GPT, hi(), options(session_id="s1", cache_retention="long"))
    assert long.body["prompt_cache_retention"] == "24h"

    none = build_request(GPT, hi(), options(session_id="s1", cache_retention="none"))
    assert "prompt_cache_key" not in none.body
    assert "session_id" not in none.headers

    router = attrs.evolve(GPT, provider="openrouter")
    headers = build_request(router, hi(), options(session_id="s1")).headers
    assert headers["x-session-id"] == "s1"
    assert "session_id" not in headers


def test_header_layers() -> None:
    model = attrs.evolve(GPT, headers={"X-Model": "m", "X-Both": "model"})
    opts = options(headers={"x-both": "option", "User-Agent": None, "X-New": "n"})
    headers = {k.lower(): v for k, v in build_request(model, hi(), opts).headers.items()}
    assert headers["x-model"] == "m"
    assert headers["x-both"] == "option"
    assert headers["x-new"] == "n"
    assert "user-agent" not in headers  # None removes a header


def test_authorization_header_instead_of_a_key() -> None:
    opts = StreamOptions(headers={"Authorization": "Bearer from-header"})
    headers = {k.lower(): v for k, v in build_request(GPT, hi(), opts).headers.items()}
    assert headers["authorization"] == "Bearer from-header"


def test_service_tier_option_is_sent() -> None:
    assert body_of(GPT, hi(), options(extra={"service_tier": "flex"}))["service_tier"] == "flex"
    assert "service_tier" not in body_of(GPT, hi())


# ======================================================================================
# Streaming


async def test_text_stream_events_and_usage() -> None:
    usage = {
        "input_tokens": 1000,
        "input_tokens_details": {"cached_tokens": 400},
        "output_tokens": 50,
        "total_tokens": 1050,
    }
    server = Server([ok(text_response("Hello", usage=usage))])
    events, message = await run(server, GPT, hi(), options())
    assert [e.type for e in events] == ["start", "text_start", "text_delta", "text_end", "done"]
    assert message.text == "Hello"
    assert message.stop_reason == "stop"
    assert message.raw_stop_reason == "completed"
    assert message.response_id == "resp_1"
    assert message.content == (TextContent(text="Hello", text_signature='{"v":1,"id":"msg_1"}'),)
    assert message.usage.input == 600
    assert message.usage.cache_read == 400
    assert message.usage.total_tokens == 1050
    assert message.usage.cost.input == pytest.approx(600 * 2 / 1e6)
    assert message.usage.cost.cache_read == pytest.approx(400 * 0.5 / 1e6)
    # Partials are snapshots: the first delta's partial does not change later.
    delta = next(e for e in events if isinstance(e, TextDeltaEvent))
    assert delta.partial.stop_reason == "pending"


@pytest.mark.parametrize(
    ("response_tier", "option_tier", "factor"),
    [("priority", None, 2), (None, "flex", 0.5), ("default", "flex", 1), (None, None, 1)],
)
async def test_service_tier_pricing(
    response_tier: str | None, option_tier: str | None, factor: float
) -> None:
    usage = {"input_tokens": 1000, "output_tokens": 100, "total_tokens": 1100}
    extra = {} if response_tier is None else {"service_tier": response_tier}
    server = Server([ok(text_response(usage=usage, **extra))])
    opts = options(extra={} if option_tier is None else {"service_tier": option_tier})
    _, message = await run(server, GPT, hi(), opts)
    cost = message.usage.cost
    assert cost.input == pytest.approx(1000 * 2 / 1e6 * factor)
    assert cost.output == pytest.approx(100 * 8 / 1e6 * factor)
    assert cost.total == pytest.approx(cost.input + cost.output)


async def test_reasoning_and_function_call_stream() -> None:
    reasoning = {"id": "rs_1", "type": "reasoning", "summary": []}
    reasoning_done = {
        **reasoning,
        "summary": [{"type": "summary_text", "text": "Think."}],
        "encrypted_content": "E",
    }
    call = {
        "id": "fc_1",
        "type": "function_call",
        "call_id": "call_1",
        "name": "read",
        "arguments": "",
    }
    body = sse(
        {"type": "response.output_item.added", "output_index": 0, "item": reasoning},
        {"type": "response.reasoning_summary_text.delta", "output_index": 0, "delta": "Think."},
        {"type": "response.output_item.done", "output_index": 0, "item": reasoning_done},
        {"type": "response.output_item.added", "output_index": 1, "item": call},
        {
            "type": "response.function_call_arguments.delta",
            "output_index": 1,
            "delta": '{"path": "a',
        },
        {
            "type": "response.function_call_arguments.done",
            "output_index": 1,
            "arguments": '{"path": "a.txt"}',
        },
        {
            "type": "response.output_item.done",
            "output_index": 1,
            "item": {**call, "arguments": '{"path": "a.txt"}'},
        },
        {"type": "response.completed", "response": {"id": "r", "status": "completed"}},
    )
    events, message = await run(Server([ok(body)]), REASONER, hi(), options(reasoning="high"))
    deltas = [e.delta for e in events if isinstance(e, ToolCallDeltaEvent)]
    assert deltas == ['{"path": "a', '.txt"}']
    thinking_end = next(e for e in events if isinstance(e, ThinkingEndEvent))
    assert json.loads(thinking_end.partial.content[0].thinking_signature or "") == reasoning_done  # type: ignore[union-attr]
    end = next(e for e in events if isinstance(e, ToolCallEndEvent))
    assert end.tool_call == ToolCall(id="call_1|fc_1", name="read", arguments={"path": "a.txt"})
    assert message.stop_reason == "toolUse"


async def test_http_error_is_data() -> None:
    payload = {"error": {"message": "Invalid model", "type": "invalid_request_error", "code": None}}
    events, message = await run(Server([error(400, payload)]), GPT, hi(), options())
    assert [e.type for e in events] == ["error"]
    assert message.stop_reason == "error"
    assert message.error_message == (
        "OpenAI API error (400): "
        '{"message":"Invalid model","type":"invalid_request_error","code":null}'
    )


async def test_no_api_key_is_a_lone_error() -> None:
    server = Server([])
    events, message = await run(server, GPT, hi(), StreamOptions())
    assert [e.type for e in events] == ["error"]
    assert message.error_message == "No API key for provider: openai"
    assert message.usage == Usage()
    assert server.requests == []


async def test_retries_honour_retry_after(autojump_clock: trio.testing.MockClock) -> None:
    server = Server(
        [
            error(429, {"error": {"message": "slow"}}, {"retry-after": "7"}),
            error(503, b"busy", {"retry-after-ms": "1500"}),
            ok(text_response("ok")),
        ]
    )
    _, message = await run(server, GPT, hi(), options(max_retries=2))
    assert message.text == "ok"
    assert len(server.requests) == 3
    assert server.times[1] - server.times[0] == pytest.approx(7)
    assert server.times[2] - server.times[1] == pytest.approx(1.5)
    assert server.bodies()[0] == server.bodies()[2]  # each retry is the same request


async def test_no_retries_by_default_and_not_for_400() -> None:
    server = Server([error(500, {"error": {"message": "x"}})])
    _, message = await run(server, GPT, hi(), options())
    assert message.error_message == 'OpenAI API error (500): {"message":"x"}'
    assert len(server.requests) == 1
    server = Server([error(400, {"error": {"message": "bad"}})])
    _, message = await run(server, GPT, hi(), options(max_retries=3))
    assert len(server.requests) == 1


async def test_retry_delay_over_the_limit_fails_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = Server([error(429, {"error": {"message": "slow down"}}, {"retry-after": "120"})])
    start = trio.current_time()
    _, message = await run(server, GPT, hi(), options(max_retries=1, max_retry_delay=30))
    assert trio.current_time() == start
    assert message.error_message == "Server requested 120s retry delay (max: 30s). 429 slow down"
    # 0 disables the limit.
    server = Server(
        [error(429, {"error": {"message": "x"}}, {"retry-after": "120"}), ok(text_response())]
    )
    _, message = await run(server, GPT, hi(), options(max_retries=1, max_retry_delay=0))
    assert message.stop_reason == "stop"


async def test_timeout_covers_only_the_headers(autojump_clock: trio.testing.MockClock) -> None:
    async def slow_headers() -> httpx.Response:
        await trio.sleep(10)
        return ok(text_response())

    _, message = await run(Server([slow_headers]), GPT, hi(), options(timeout=2))
    assert message.error_message == "Request timed out."

    async def slow_body() -> httpx.Response:
        # Headers at once, then the body takes longer than the timeout.
        body = text_response()
        return ok(ScriptedBody([body[:40], body[40:]]))

    _, message = await run(Server([slow_body]), GPT, hi(), options(timeout=2))
    assert message.stop_reason == "stop"


async def test_abort_mid_stream_closes_the_response(autojump_clock: trio.testing.MockClock) -> None:
    item = {"id": "msg_1", "type": "message", "role": "assistant", "content": []}
    body = ScriptedBody(
        [
            sse(
                {"type": "response.output_item.added", "output_index": 0, "item": item},
                {"type": "response.output_text.delta", "output_index": 0, "delta": "Partial"},
            )
        ],
        hang=True,
    )
    events: list[AssistantMessageEvent] = []
    async with Server([ok(body)]).client() as client:
        stream = stream_openai_responses(client, GPT, hi(), options())
        async with stream:
            async for event in stream:
                events.append(event)
                if event.type == "text_delta":
                    stream.cancel()
            message = await stream.result()
    assert body.closed
    assert [e.type for e in events] == ["start", "text_start", "text_delta", "error"]
    assert isinstance(events[-1], ErrorEvent)
    assert events[-1].reason == "aborted"
    assert message.stop_reason == "aborted"
    assert message.error_message == "Request was aborted"
    assert message.content == (TextContent(text="Partial"),)


async def test_abort_by_signal_before_headers(autojump_clock: trio.testing.MockClock) -> None:
    signal = AbortSignal()

    async def never() -> httpx.Response:
        await trio.sleep_forever()
        raise AssertionError  # pragma: no cover

    async with Server([never]).client() as client:
        stream = stream_openai_responses(client, GPT, hi(), options(signal=signal))
        async with stream:
            with trio.move_on_after(1):
                await trio.sleep(0.5)
                signal.abort()
                events = [event async for event in stream]
            message = await stream.result()
    assert [e.type for e in events] == ["error"]
    assert message.stop_reason == "aborted"
    assert message.error_message == "Request aborted"


async def test_abort_during_retry_sleep(autojump_clock: trio.testing.MockClock) -> None:
    server = Server([error(500, {"error": {"message": "x"}}, {"retry-after": "30"})])
    async with server.client() as client:
        stream = stream_openai_responses(client, GPT, hi(), options(max_retries=1))
        async with stream:
            await trio.sleep(5)
            stream.cancel()
            message = await stream.result()
    assert message.error_message == "Request aborted"
    assert len(server.requests) == 1


async def test_stream_errors_are_data() -> None:
    body = sse({"type": "error", "code": "server_error", "message": "Overloaded", "param": None})
    _, message = await run(Server([ok(body)]), GPT, hi(), options())
    assert message.error_message == "Error Code server_error: Overloaded"

    _, message = await run(Server([ok(b"data: {oops\n\n")]), GPT, hi(), options())
    assert message.stop_reason == "error"
    assert message.error_message

    _, message = await run(Server([ok(b"")]), GPT, hi(), options())
    assert message.error_message == "OpenAI Responses stream ended before a terminal response event"


def _call(item_id: str, call_id: str, name: str, **extra: Any) -> dict[str, Any]:
    return {"id": item_id, "type": "function_call", "call_id": call_id, "name": name, **extra}


async def test_items_are_matched_by_item_id_when_output_index_is_missing() -> None:
    """Servers such as llama.cpp leave out ``output_index``: two parallel function calls
    with interleaved deltas still get their own arguments (keyed by ``item_id``)."""
    body = sse(
        {"type": "response.created", "response": {"id": "r", "status": "in_progress"}},
        {"type": "response.output_item.added", "item": _call("fc_a", "call_a", "read")},
        {"type": "response.output_item.added", "item": _call("fc_b", "call_b", "read")},
        {"type": "response.function_call_arguments.delta", "item_id": "fc_a", "delta": '{"path"'},
        {"type": "response.function_call_arguments.delta", "item_id": "fc_b", "delta": '{"path"'},
        {"type": "response.function_call_arguments.delta", "item_id": "fc_a", "delta": ':"a"}'},
        {"type": "response.function_call_arguments.delta", "item_id": "fc_b", "delta": ':"b"}'},
        {
            "type": "response.output_item.done",
            "item": _call("fc_a", "call_a", "read", arguments='{"path":"a"}'),
        },
        {
            "type": "response.output_item.done",
            "item": _call("fc_b", "call_b", "read", arguments='{"path":"b"}'),
        },
        {"type": "response.completed", "response": {"id": "r", "status": "completed"}},
    )
    events, message = await run(Server([ok(body)]), GPT, hi(), options())
    assert message.stop_reason == "toolUse", message.error_message
    calls = [block for block in message.content if isinstance(block, ToolCall)]
    assert [(c.id, c.arguments) for c in calls] == [
        ("call_a|fc_a", {"path": "a"}),
        ("call_b|fc_b", {"path": "b"}),
    ]
    assert [e.type for e in events].count("toolcall_end") == 2


async def test_an_event_that_matches_several_open_items_is_an_error() -> None:
    """No ``item_id`` and an ``output_index`` shared by two open items: pitrio cannot
    tell where the delta goes and says so, naming the event."""
    body = sse(
        {"type": "response.output_item.added", "item": _call("fc_a", "call_a", "read")},
        {"type": "response.output_item.added", "item": _call("fc_b", "call_b", "read")},
        {"type": "response.function_call_arguments.delta", "delta": "{}"},
        {"type": "response.completed", "response": {"id": "r", "status": "completed"}},
    )
    _, message = await run(Server([ok(body)]), GPT, hi(), options())
    assert message.stop_reason == "error"
    assert message.error_message is not None
    assert "response.function_call_arguments.delta" in message.error_message
    assert "2 open items" in message.error_message


async def test_on_payload_and_on_response_hooks() -> None:
    seen: list[Any] = []

    async def on_payload(body: Any, model: Model) -> Any:
        return {**body, "metadata": {"trace": "t1"}}

    def on_response(status: int, headers: Mapping[str, str], model: Model) -> None:
        seen.append((status, headers.get("x-request-id"), model.id))

    response = ok(text_response())
    response.headers["x-request-id"] = "req_1"
    server = Server([response])
    await run(server, GPT, hi(), options(on_payload=on_payload, on_response=on_response))
    assert server.bodies()[0]["metadata"] == {"trace": "t1"}
    assert seen == [(200, "req_1", "gpt-4.1")]


# ======================================================================================
# Deferred responses (background mode)


def background(status: str, **extra: Any) -> dict[str, Any]:
    return {"id": "resp_bg", "object": "response", "status": status, "output": [], **extra}


FINISHED = background(
    "completed",
    output=[
        {
            "id": "rs_1",
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": "Thought."}],
            "encrypted_content": "E",
        },
        {
            "id": "msg_1",
            "type": "message",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Answer."}],
        },
        {
            "id": "fc_1",
            "type": "function_call",
            "call_id": "call_1",
            "name": "read",
            "arguments": '{"path":"a"}',
        },
        {"id": "ws_1", "type": "web_search_call", "status": "completed"},
    ],
    usage={"input_tokens": 100, "output_tokens": 20, "total_tokens": 120},
    service_tier="flex",
)

HANDLE = DeferredHandle(
    provider="openai", model_id="gpt-4.1", api="openai-responses", id="resp_bg", poll_after_ms=1000
)


async def test_background_create_returns_a_deferred_handle() -> None:
    server = Server([as_json(background("queued"))])
    events, message = await run(
        server, GPT, hi(), options(deferred=True, extra={"service_tier": "flex"})
    )
    request = server.requests[0]
    assert request.method == "POST"
    assert request.url == "https://api.test/v1/responses"
    body = server.bodies()[0]
    assert body["background"] is True
    assert body["store"] is True  # background mode requires stored responses
    assert body["stream"] is False
    assert [e.type for e in events] == ["start", "done"]
    assert isinstance(events[-1], DoneEvent)
    assert events[-1].reason == "deferred"
    assert message.stop_reason == "deferred"
    assert message.content == ()
    assert message.deferred == DeferredHandle(
        provider="openai",
        model_id="gpt-4.1",
        api="openai-responses",
        id="resp_bg",
        poll_after_ms=DEFAULT_POLL_AFTER_MS,
        data={"serviceTier": "flex"},
    )


async def test_background_create_that_already_finished() -> None:
    _, message = await run(Server([as_json(FINISHED)]), GPT, hi(), options(deferred=True))
    assert message.stop_reason == "toolUse"
    assert message.deferred is None


async def test_background_create_error_is_data() -> None:
    server = Server([error(400, {"error": {"message": "Background mode is not supported"}})])
    _, message = await run(server, GPT, hi(), options(deferred=True))
    assert message.stop_reason == "error"
    assert message.error_message is not None
    assert message.error_message.startswith("OpenAI API error (400): ")


async def fetch(
    server: Server, handle: DeferredHandle = HANDLE, wait_ms: float = 0, model: Model = GPT
) -> tuple[list[AssistantMessageEvent], AssistantMessage]:
    async with server.client() as client:
        return await collect(fetch_deferred(client, model, handle, options(), wait_ms=wait_ms))


async def test_fetch_pending_answers_deferred_again() -> None:
    server = Server([as_json(background("in_progress"))])
    events, message = await fetch(server)
    assert server.requests[0].method == "GET"
    assert server.requests[0].url == "https://api.test/v1/responses/resp_bg"
    assert "content-type" not in server.requests[0].headers
    assert [e.type for e in events] == ["start", "done"]
    assert message.stop_reason == "deferred"
    assert message.deferred == HANDLE


async def test_fetch_polls_while_it_may_wait(autojump_clock: trio.testing.MockClock) -> None:
    server = Server(
        [as_json(background("queued")), as_json(background("in_progress")), as_json(FINISHED)]
    )
    _, message = await fetch(server, wait_ms=5000)
    assert len(server.requests) == 3
    assert [b - a for a, b in zip(server.times, server.times[1:], strict=False)] == [
        pytest.approx(1.0)
    ] * 2
    assert message.stop_reason == "toolUse"

    # The wait ends: the answer is still "deferred", after the allowed time only.
    server = Server([as_json(background("queued")) for _ in range(4)])
    start = trio.current_time()
    _, message = await fetch(server, wait_ms=2500)
    assert message.stop_reason == "deferred"
    assert trio.current_time() - start == pytest.approx(2.5)
    assert len(server.requests) == 4  # at 0, 1, 2 and 2.5 s


async def test_fetch_abort_while_polling(autojump_clock: trio.testing.MockClock) -> None:
    server = Server([as_json(background("queued")) for _ in range(10)])
    async with server.client() as client:
        stream = fetch_deferred(client, GPT, HANDLE, options(), wait_ms=60_000)
        async with stream:
            await trio.sleep(2.5)
            stream.cancel()
            message = await stream.result()
    assert message.stop_reason == "aborted"
    assert message.error_message == "Request aborted"
    assert len(server.requests) == 3  # at 0, 1 and 2 s


async def test_fetch_finished_streams_the_message_block_by_block() -> None:
    events, message = await fetch(Server([as_json(FINISHED)]))
    assert [e.type for e in events] == [
        "start",
        "thinking_start",
        "thinking_delta",
        "thinking_end",
        "text_start",
        "text_delta",
        "text_end",
        "toolcall_start",
        "toolcall_delta",
        "toolcall_end",
        "done",
    ]
    assert message.content == (
        ThinkingContent(
            thinking="Thought.",
            thinking_signature=json.dumps(FINISHED["output"][0], separators=(",", ":")),
        ),
        TextContent(text="Answer.", text_signature='{"v":1,"id":"msg_1"}'),
        ToolCall(id="call_1|fc_1", name="read", arguments={"path": "a"}),
    )
    assert message.stop_reason == "toolUse"
    assert message.response_id == "resp_bg"
    assert message.usage.input == 100
    assert message.usage.cost.input == pytest.approx(100 * 2 / 1e6 * 0.5)  # flex


@pytest.mark.parametrize(
    ("response", "text"),
    [
        (
            background("failed", error={"code": "server_error", "message": "Crashed."}),
            "server_error: Crashed.",
        ),
        (background("cancelled"), "Response was cancelled"),
        (
            background("incomplete", incomplete_details={"reason": "content_filter"}),
            "Response incomplete: content_filter",
        ),
    ],
)
async def test_fetch_unsuccessful_outcomes(response: dict[str, Any], text: str) -> None:
    events, message = await fetch(Server([as_json(response)]))
    assert events[-1].type == "error"
    assert message.stop_reason == "error"
    assert message.error_message == text


async def test_fetch_length_outcome() -> None:
    response = background(
        "incomplete",
        incomplete_details={"reason": "max_output_tokens"},
        output=[
            {"id": "m", "type": "message", "content": [{"type": "output_text", "text": "Cut"}]}
        ],
    )
    events, message = await fetch(Server([as_json(response)]))
    assert isinstance(events[-1], DoneEvent)
    assert events[-1].reason == "length"
    assert message.text == "Cut"


async def test_fetch_errors_are_data() -> None:
    missing = error(
        404,
        {
            "error": {
                "message": "No response with id 'resp_bg' found.",
                "type": "invalid_request_error",
            }
        },
    )
    _, message = await fetch(Server([missing]))
    assert message.error_message is not None
    assert message.error_message.startswith("OpenAI API error (404): ")

    other = attrs.evolve(GPT, id="gpt-5")
    server = Server([])
    _, message = await fetch(server, model=other)
    assert message.error_message == (
        "Deferred response resp_bg belongs to openai/gpt-4.1 (openai-responses), "
        "not openai/gpt-5 (openai-responses)"
    )
    assert server.requests == []

    chat = attrs.evolve(GPT, api="openai-completions")
    _, message = await fetch(
        Server([]), model=chat, handle=attrs.evolve(HANDLE, api="openai-completions")
    )
    assert message.error_message == "API does not support deferred responses"


async def test_cancel_deferred() -> None:
    server = Server([as_json(background("cancelled"))])
    async with server.client() as client:
        await cancel_deferred(client, GPT, HANDLE, options())
    assert server.requests[0].method == "POST"
    assert server.requests[0].url == "https://api.test/v1/responses/resp_bg/cancel"
    assert server.requests[0].content == b""

    server = Server([error(404, {"error": {"message": "not found"}})])
    async with server.client() as client:
        with pytest.raises(DeferredError, match=r"^OpenAI API error \(404\): "):
            await cancel_deferred(client, GPT, HANDLE, options())

    chat = attrs.evolve(GPT, api="openai-completions")
    async with Server([]).client() as client:
        with pytest.raises(DeferredError, match="API cannot cancel deferred responses"):
            await cancel_deferred(client, chat, HANDLE, options())


def test_supports_deferred() -> None:
    assert supports_deferred("openai-responses")
    assert not supports_deferred("anthropic-messages")


# ======================================================================================
# The benchmark harness (correctness only; no timing is asserted)


async def test_benchmark_harness_runs() -> None:
    from benchmarks.bench_provider_sse_responses import (  # test-only import
        build_body,
        build_events,
        measure_decode,
        measure_http,
        measure_process,
    )

    events = build_events(3)
    assert [e["type"] for e in events].count("response.output_text.delta") == 3
    assert build_body(events).count(b"\n\n") == len(events)
    # measure_http checks the streamed message and raises if it is wrong.
    assert await measure_http(20, 1) > 0
    assert measure_decode(20, 1) > 0
    assert measure_process(20, 1) > 0
