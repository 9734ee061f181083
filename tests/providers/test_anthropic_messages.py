"""Unit tests of the anthropic-messages provider, over ``httpx.MockTransport``.

Request conversion is checked on :func:`build_request` (what would go on the wire) and,
end to end, in the transport's handler; streaming, errors, retries and aborts run the
provider against scripted SSE bodies in Trio's virtual time.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import attrs
import httpx
import pytest
import trio
import trio.testing

from pitrio import AbortSignal, AssistantMessageEventStream
from pitrio._events import AssistantMessageEvent, ErrorEvent
from pitrio._messages import (
    AssistantMessage,
    ImageContent,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from pitrio._model import Context, Model, ModelCost, StreamOptions
from pitrio.providers._anthropic_messages import build_request, stream_anthropic_messages
from pitrio.providers._options import MaxTokensClampedWarning

API = "anthropic-messages"
MODEL = Model(
    id="claude-sonnet-4-5",
    api=API,
    provider="anthropic",
    base_url="https://anthropic.test",
    cost=ModelCost(input=3, output=15, cache_read=0.3, cache_write=3.75),
    context_window=200_000,
    max_tokens=16_000,
)
THINKING_MODEL = attrs.evolve(MODEL, reasoning=True)


@attrs.frozen
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]


def user(text: str) -> UserMessage:
    return UserMessage(content=text)


def context(*messages: Any, system: str = "", tools: Sequence[Tool] = ()) -> Context:
    return Context(system_prompt=system, messages=list(messages) or [user("hi")], tools=tools)


def options(**kwargs: Any) -> StreamOptions:
    kwargs.setdefault("api_key", "sk-test")
    return StreamOptions(**kwargs)


# -- scripted HTTP ------------------------------------------------------------------------


class Body(httpx.AsyncByteStream):
    """A response body that yields ``chunks``, optionally hanging after ``hang_after`` of
    them; records whether the provider closed it."""

    def __init__(self, chunks: Sequence[bytes], *, hang_after: int | None = None) -> None:
        self.chunks = list(chunks)
        self.hang_after = hang_after
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for index, chunk in enumerate(self.chunks):
            if index == self.hang_after:
                await trio.sleep_forever()
            await trio.lowlevel.checkpoint()
            yield chunk
        if self.hang_after == len(self.chunks):
            await trio.sleep_forever()

    async def aclose(self) -> None:
        self.closed = True


def sse(*events: dict[str, Any]) -> list[bytes]:
    """One named SSE event per Messages API event (the name is its ``type``)."""
    return [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events]


def message_start(model: str = "claude-sonnet-4-5", **usage: Any) -> dict[str, Any]:
    usage = {"input_tokens": 10, "output_tokens": 1, **usage}
    return {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "usage": usage,
        },
    }


def block_start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def delta(index: int, **fields: Any) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": fields}


def block_stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


def message_delta(stop_reason: str, **usage: Any) -> dict[str, Any]:
    return {"type": "message_delta", "delta": {"stop_reason": stop_reason}, "usage": usage}


MESSAGE_STOP = {"type": "message_stop"}


def text_response(text: str = "Hello") -> list[dict[str, Any]]:
    return [
        message_start(),
        block_start(0, {"type": "text", "text": ""}),
        delta(0, type="text_delta", text=text),
        block_stop(0),
        message_delta("end_turn", output_tokens=5),
        MESSAGE_STOP,
    ]


Handler = Callable[[httpx.Request], Awaitable[httpx.Response]]


class Server:
    """Answers requests from a script of responses; records requests and their times."""

    def __init__(self, *responses: httpx.Response | Handler) -> None:
        self.responses = list(responses)
        self.requests: list[httpx.Request] = []
        self.times: list[float] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        self.times.append(trio.current_time())
        response = self.responses[len(self.requests) - 1]
        if isinstance(response, httpx.Response):
            return response
        return await response(request)

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.MockTransport(self))

    def body(self, n: int = 0) -> Any:
        return json.loads(self.requests[n].content)


def ok(events: Sequence[dict[str, Any]] | Body) -> httpx.Response:
    body = events if isinstance(events, Body) else Body(sse(*events))
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=body)


async def collect(
    stream: AssistantMessageEventStream,
    on_event: Callable[[AssistantMessageEvent], None] | None = None,
) -> tuple[list[AssistantMessageEvent], AssistantMessage]:
    events: list[AssistantMessageEvent] = []
    async with stream:
        async for event in stream:
            events.append(event)
            if on_event is not None:
                on_event(event)
        result = await stream.result()
    return events, result


async def run(
    server: Server,
    ctx: Context | None = None,
    opts: StreamOptions | None = None,
    model: Model = MODEL,
) -> tuple[list[AssistantMessageEvent], AssistantMessage]:
    async with server.client() as client:
        stream = stream_anthropic_messages(client, model, ctx or context(), opts or options())
        return await collect(stream)


def types(events: Sequence[AssistantMessageEvent]) -> list[str]:
    return [e.type for e in events]


# -- request conversion -------------------------------------------------------------------


def test_system_prompt_and_last_user_message_carry_cache_control() -> None:
    """The system block and the last user block get ``cache_control`` (retention short)."""
    request = build_request(MODEL, context(user("Say hello"), system="Be terse."), options())
    ephemeral = {"type": "ephemeral"}
    assert request.url == "https://anthropic.test/v1/messages?beta=true"
    assert request.body == {
        "model": "claude-sonnet-4-5",
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "Say hello", "cache_control": ephemeral}],
            },
        ],
        "max_tokens": 16_000,
        "stream": True,
        "system": [{"type": "text", "text": "Be terse.", "cache_control": ephemeral}],
    }


@pytest.mark.parametrize(
    ("retention", "expected"),
    [("long", {"type": "ephemeral", "ttl": "1h"}), ("none", None)],
)
def test_cache_retention(retention: str, expected: dict[str, str] | None) -> None:
    """``long`` adds a one-hour TTL; ``none`` sends no cache_control at all."""
    request = build_request(MODEL, context(system="S"), options(cache_retention=retention))
    system = request.body["system"][0]
    last_user = request.body["messages"][-1]
    if expected is None:
        assert "cache_control" not in system
        assert last_user == {"role": "user", "content": "hi"}
    else:
        assert system["cache_control"] == expected
        assert last_user["content"][-1]["cache_control"] == expected


def test_user_text_and_images() -> None:
    """Image blocks become base64 sources; blank text blocks and blank turns are dropped."""
    model = attrs.evolve(MODEL, input=("text", "image"))
    image = ImageContent(data="iVBORw0KGgo=", mime_type="image/png")
    ctx = context(
        user("   "),
        UserMessage(content=(TextContent(text="Here:"), image, TextContent(text=" \n"))),
    )
    request = build_request(model, ctx, options(cache_retention="none"))
    assert request.body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Here:"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
                },
            ],
        },
    ]


def test_images_become_placeholders_for_text_only_models() -> None:
    """A model without image input gets pi-ai's placeholder text instead."""
    image = ImageContent(data="AA", mime_type="image/png")
    ctx = context(UserMessage(content=(TextContent(text="see"), image, image)))
    request = build_request(MODEL, ctx, options(cache_retention="none"))
    assert request.body["messages"][0]["content"] == [
        {"type": "text", "text": "see"},
        {"type": "text", "text": "(image omitted: model does not support images)"},
    ]


def _assistant(*content: Any, **fields: Any) -> AssistantMessage:
    fields.setdefault(
        "stop_reason", "toolUse" if any(isinstance(c, ToolCall) for c in content) else "stop"
    )
    return AssistantMessage(
        content=content, api=API, provider="anthropic", model="claude-sonnet-4-5", **fields
    )


def test_assistant_history_thinking_tool_calls_and_results() -> None:
    """Signed thinking is replayed, redacted thinking as its opaque data, unsigned
    thinking as text; tool results of one turn share one user message."""
    model = attrs.evolve(MODEL, input=("text", "image"))
    ctx = context(
        user("Look"),
        _assistant(
            ThinkingContent(thinking="Need files.", thinking_signature="sig-1"),
            ThinkingContent(
                thinking="[Reasoning redacted]", thinking_signature="opaque", redacted=True
            ),
            ThinkingContent(thinking="Unsigned."),
            TextContent(text=""),
            TextContent(text="Reading."),
            ToolCall(id="toolu_1", name="read", arguments={"path": "a.txt"}),
            ToolCall(id="toolu_2", name="read", arguments={"path": "b.png"}),
        ),
        ToolResultMessage(
            tool_call_id="toolu_1",
            tool_name="read",
            content=(TextContent(text="l1"), TextContent(text="l2")),
        ),
        ToolResultMessage(
            tool_call_id="toolu_2",
            tool_name="read",
            is_error=True,
            content=(ImageContent(data="R0lG", mime_type="image/gif"),),
        ),
    )
    request = build_request(model, ctx, options(cache_retention="none"))
    assert request.body["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Need files.", "signature": "sig-1"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "Unsigned."},
                {"type": "text", "text": "Reading."},
                {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a.txt"}},
                {"type": "tool_use", "id": "toolu_2", "name": "read", "input": {"path": "b.png"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": "l1\nl2",
                    "is_error": False,
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "is_error": True,
                    "content": [
                        {"type": "text", "text": "(see attached image)"},
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/gif", "data": "R0lG"},
                        },
                    ],
                },
            ],
        },
    ]


def test_foreign_errored_and_orphaned_turns() -> None:
    """An errored turn is dropped; a foreign turn's thinking becomes text and its tool
    call id is sanitized; a call without a result gets a synthetic error result."""
    foreign = AssistantMessage(
        content=(
            ThinkingContent(thinking="Their thoughts.", thinking_signature="{}"),
            ToolCall(id="call_9|fc_abc+/=", name="bash", arguments={"cmd": "ls"}),
        ),
        api="openai-responses",
        provider="openai",
        model="gpt-5",
        stop_reason="toolUse",
    )
    ctx = context(
        user("a"),
        _assistant(TextContent(text="half"), stop_reason="error", error_message="terminated"),
        user("b"),
        foreign,
        user("c"),
    )
    request = build_request(MODEL, ctx, options(cache_retention="none"))
    assert request.body["messages"] == [
        {"role": "user", "content": "a"},
        {"role": "user", "content": "b"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Their thoughts."},
                {
                    "type": "tool_use",
                    "id": "call_9_fc_abc___",
                    "name": "bash",
                    "input": {"cmd": "ls"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "call_9_fc_abc___",
                    "content": "No result provided",
                    "is_error": True,
                }
            ],
        },
        {"role": "user", "content": "c"},
    ]


def test_tool_schemas() -> None:
    """Tools keep only type/properties/required of their schema, stream their input
    eagerly, and the last one carries cache_control."""
    tools = [
        Tool(
            "read",
            "Read a file",
            {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
                "additionalProperties": False,
            },
        ),
        Tool("bash", "Run", {"type": "object", "properties": {"cmd": {"type": "string"}}}),
    ]
    request = build_request(MODEL, context(tools=tools), options())
    assert request.body["tools"] == [
        {
            "name": "read",
            "description": "Read a file",
            "eager_input_streaming": True,
            "input_schema": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
        {
            "name": "bash",
            "description": "Run",
            "eager_input_streaming": True,
            "input_schema": {
                "type": "object",
                "properties": {"cmd": {"type": "string"}},
                "required": [],
            },
            "cache_control": {"type": "ephemeral"},
        },
    ]


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("any", {"type": "any"}),
        ({"type": "tool", "name": "bash"}, {"type": "tool", "name": "bash"}),
        (None, None),
    ],
)
def test_tool_choice(choice: Any, expected: dict[str, str] | None) -> None:
    """A string becomes ``{type: <string>}``; an object passes through."""
    request = build_request(MODEL, context(), options(tool_choice=choice))
    assert request.body.get("tool_choice") == expected


def test_thinking_budget_raises_max_tokens_and_drops_temperature() -> None:
    """``low`` on a budget model: max_tokens + 2048 (capped by the model), the budget,
    no temperature, and the interleaved-thinking beta header."""
    opts = options(reasoning="low", max_tokens=4000, temperature=0.7)
    request = build_request(THINKING_MODEL, context(), opts)
    assert request.body["max_tokens"] == 6048
    assert request.body["thinking"] == {
        "type": "enabled",
        "budget_tokens": 2048,
        "display": "summarized",
    }
    assert "temperature" not in request.body
    assert request.headers["anthropic-beta"] == "interleaved-thinking-2025-05-14"


def test_thinking_budget_shrinks_to_leave_answer_room() -> None:
    """When the model cap leaves no room, the budget leaves 1024 tokens to answer."""
    model = attrs.evolve(THINKING_MODEL, max_tokens=9000)
    opts = options(reasoning="medium", thinking_budgets={"medium": 8500})
    request = build_request(model, context(), opts)
    assert request.body["max_tokens"] == 9000
    assert request.body["thinking"]["budget_tokens"] == 9000 - 1024


def test_adaptive_thinking_sends_an_effort() -> None:
    """``compat.forceAdaptiveThinking``: adaptive thinking with an effort, no budget."""
    model = attrs.evolve(
        THINKING_MODEL,
        compat={"forceAdaptiveThinking": True},
        thinking_level_map={"xhigh": "xhigh"},
    )
    for level, effort in [
        ("minimal", "low"),
        ("medium", "medium"),
        ("xhigh", "xhigh"),
        ("max", "high"),
    ]:
        request = build_request(model, context(), options(reasoning=level))
        assert request.body["thinking"] == {"type": "adaptive", "display": "summarized"}
        assert request.body["output_config"] == {"effort": effort}
        assert request.body["max_tokens"] == 16_000
        assert "anthropic-beta" not in request.headers


def test_reasoning_off_disables_thinking() -> None:
    """``reasoning="off"`` means no thinking (pi-ai would send a NaN max_tokens)."""
    request = build_request(THINKING_MODEL, context(), options(reasoning="off", temperature=0))
    assert request.body["thinking"] == {"type": "disabled"}
    assert request.body["temperature"] == 0
    assert request.body["max_tokens"] == 16_000


def test_max_tokens_is_clamped_to_the_context_window() -> None:
    """max_tokens <= context window - estimated input - 4096."""
    model = attrs.evolve(MODEL, context_window=10_000)
    with pytest.warns(MaxTokensClampedWarning):
        request = build_request(model, context(user("x" * 4000)), options(max_tokens=9000))
    assert request.body["max_tokens"] == 10_000 - 1000 - 4096


def test_sampling_params_are_merged_into_the_body_last() -> None:
    """``sampling_params`` reach the wire, over what pitrio set (as for the other APIs)."""
    opts = options(temperature=0.5, sampling_params={"top_k": 40, "temperature": 0.1})
    request = build_request(MODEL, context(), opts)
    assert request.body["top_k"] == 40
    assert request.body["temperature"] == 0.1


def test_headers_and_betas() -> None:
    """The SDK's headers, then model headers, then option headers (``None`` removes one);
    a configured anthropic-beta list replaces pi-ai's own betas."""
    model = attrs.evolve(THINKING_MODEL, headers={"X-Team": "a", "anthropic-beta": "b1, b2,b1"})
    opts = options(
        reasoning="high", headers={"x-team": "b", "anthropic-dangerous-direct-browser-access": None}
    )
    request = build_request(model, context(), opts)
    headers = dict(request.headers)
    assert headers.pop("user-agent").startswith("pi (")
    assert headers == {
        "accept": "application/json",
        "anthropic-version": "2023-06-01",
        "x-api-key": "sk-test",
        "x-team": "b",
        "anthropic-beta": "b1,b2",
        "content-type": "application/json",
    }


def test_oauth_token_uses_claude_code_identity() -> None:
    """An ``sk-ant-oat`` key: Bearer auth, the Claude Code system block, tool names and
    betas."""
    tools = [Tool("bash", "Run", {"type": "object", "properties": {}})]
    request = build_request(
        MODEL,
        context(system="Mine", tools=tools),
        options(api_key="sk-ant-oat01-x", cache_retention="none"),
    )
    assert request.headers["authorization"] == "Bearer sk-ant-oat01-x"
    assert "x-api-key" not in request.headers
    assert request.headers["user-agent"] == "claude-cli/2.1.251"
    assert request.headers["anthropic-beta"] == "claude-code-20250219,oauth-2025-04-20"
    assert [b["text"] for b in request.body["system"]] == [
        "You are Claude Code, Anthropic's official CLI for Claude.",
        "Mine",
    ]
    assert request.body["tools"][0]["name"] == "Bash"


# -- streaming ----------------------------------------------------------------------------


async def test_text_stream_events_usage_and_request() -> None:
    """A plain text answer: start, text_start/delta/end, done; the request as built."""
    server = Server(ok(text_response("Hello there")))
    ctx = context(user("Say hello"), system="Be terse.")
    events, result = await run(server, ctx, options(temperature=0.5))

    request = server.requests[0]
    assert request.method == "POST"
    assert str(request.url) == "https://anthropic.test/v1/messages?beta=true"
    assert request.headers["x-api-key"] == "sk-test"
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert server.body() == build_request(MODEL, ctx, options(temperature=0.5)).body
    assert server.body()["temperature"] == 0.5

    assert types(events) == ["start", "text_start", "text_delta", "text_end", "done"]
    assert events[0].partial.content == ()  # type: ignore[union-attr]
    assert events[2].delta == "Hello there"  # type: ignore[union-attr]
    assert result.text == "Hello there"
    assert result.stop_reason == "stop"
    assert result.raw_stop_reason == "end_turn"
    assert result.usage.input == 10
    assert result.usage.output == 5
    assert result.usage.total_tokens == 15
    assert result.usage.cost.total == pytest.approx((10 * 3 + 5 * 15) / 1e6)
    assert result is events[-1].message  # type: ignore[union-attr]


async def test_served_model_and_cache_usage() -> None:
    """The final model is the one in message_start; 1h cache writes cost twice the input
    rate; message_delta's non-null usage fields replace the earlier ones."""
    start = message_start(
        model="claude-sonnet-4-5-20250929",
        input_tokens=12,
        cache_read_input_tokens=10240,
        cache_creation_input_tokens=2048,
        cache_creation={"ephemeral_5m_input_tokens": 1024, "ephemeral_1h_input_tokens": 1024},
    )
    end = message_delta(
        "end_turn",
        output_tokens=321,
        cache_creation_input_tokens=None,
        output_tokens_details={"thinking_tokens": 100},
    )
    server = Server(ok([start, *text_response()[1:4], end, MESSAGE_STOP]))
    _, result = await run(server)
    usage = result.usage
    assert result.model == "claude-sonnet-4-5-20250929"
    assert (usage.input, usage.output, usage.cache_read, usage.cache_write) == (
        12,
        321,
        10240,
        2048,
    )
    assert usage.cache_write_1h == 1024
    assert usage.reasoning == 100
    assert usage.total_tokens == 12 + 321 + 10240 + 2048
    assert usage.cost.cache_write == (3.75 * 1024 + 3 * 2 * 1024) / 1_000_000


async def test_thinking_signature_and_redacted_thinking() -> None:
    """signature_delta accumulates silently; redacted thinking is a placeholder block."""
    server = Server(
        ok(
            [
                message_start(),
                block_start(0, {"type": "thinking", "thinking": "", "signature": ""}),
                delta(0, type="thinking_delta", thinking="91 = 7 * 13"),
                delta(0, type="signature_delta", signature="EqQB"),
                delta(0, type="signature_delta", signature="CgIY"),
                block_stop(0),
                block_start(1, {"type": "redacted_thinking", "data": "opaque"}),
                block_stop(1),
                message_delta("end_turn", output_tokens=9),
                MESSAGE_STOP,
            ]
        )
    )
    events, result = await run(server, opts=options(reasoning="low"), model=THINKING_MODEL)
    assert types(events) == [
        "start",
        "thinking_start",
        "thinking_delta",
        "thinking_end",
        "thinking_start",
        "thinking_end",
        "done",
    ]
    assert result.content == (
        ThinkingContent(thinking="91 = 7 * 13", thinking_signature="EqQBCgIY"),
        ThinkingContent(
            thinking="[Reasoning redacted]", thinking_signature="opaque", redacted=True
        ),
    )


async def test_tool_call_arguments_are_parsed_at_every_fragment() -> None:
    """Each input_json_delta (even an empty one) gives a toolcall_delta with the partial
    JSON parsed so far; content_block_stop parses the whole."""
    fragments = ["", '{"pa', 'th": "/tmp/', 'x", "mode": 6', "44}"]
    server = Server(
        ok(
            [
                message_start(),
                block_start(0, {"type": "tool_use", "id": "toolu_1", "name": "write", "input": {}}),
                *(delta(0, type="input_json_delta", partial_json=f) for f in fragments),
                block_stop(0),
                message_delta("tool_use", output_tokens=20),
                MESSAGE_STOP,
            ]
        )
    )
    events, result = await run(server)
    partial_args = [
        e.partial.content[0].arguments  # type: ignore[union-attr]
        for e in events
        if e.type == "toolcall_delta"
    ]
    assert partial_args == [
        {},
        {},
        {"path": "/tmp/"},
        {"path": "/tmp/x", "mode": 6},
        {"path": "/tmp/x", "mode": 644},
    ]
    assert [e.delta for e in events if e.type == "toolcall_delta"] == fragments
    end = next(e for e in events if e.type == "toolcall_end")
    assert end.tool_call == ToolCall(
        id="toolu_1",
        name="write",
        arguments={"path": "/tmp/x", "mode": 644},
    )
    assert result.stop_reason == "toolUse"


async def test_tool_input_given_whole_in_block_start_is_kept() -> None:
    """A proxy's complete ``input`` in content_block_start survives content_block_stop
    (pi-ai 0.85.0 resets it to {}; see the deviations document)."""
    server = Server(
        ok(
            [
                message_start(),
                block_start(
                    0, {"type": "tool_use", "id": "t", "name": "w", "input": {"city": "Paris"}}
                ),
                block_stop(0),
                message_delta("tool_use"),
                MESSAGE_STOP,
            ]
        )
    )
    _, result = await run(server)
    assert result.tool_calls[0].arguments == {"city": "Paris"}


async def test_crlf_split_across_reads() -> None:
    """A CRLF cut between two reads is one line break (pi-ai dispatches early)."""
    text = "".join(b.decode() for b in sse(*text_response())).replace("\n", "\r\n")
    first, rest = text.split("\r\n", 1)
    server = Server(ok(Body([(first + "\r").encode(), ("\n" + rest).encode()])))
    events, result = await run(server)
    assert result.stop_reason == "stop"
    assert result.text == "Hello"
    assert types(events)[-1] == "done"


async def test_data_only_events_are_ignored_as_in_pi_ai() -> None:
    """Events without an ``event:`` line are skipped (pi-ai dispatches by name)."""
    body = [f"data: {json.dumps(e)}\n\n".encode() for e in text_response()]
    events, result = await run(Server(ok(Body(body))))
    assert types(events) == ["start", "error"]
    assert result.error_message == "Anthropic stream ended without a stop reason"


async def test_stream_without_message_stop_is_an_error() -> None:
    """A stop reason without message_stop still fails; content and usage are kept."""
    events, result = await run(Server(ok(text_response()[:-1])))
    assert types(events)[-2:] == ["text_end", "error"]
    assert result.stop_reason == "error"
    assert result.error_message == "Anthropic stream ended before message_stop"
    assert result.raw_stop_reason == "end_turn"
    assert result.usage.output == 5


async def test_error_event_mid_stream() -> None:
    """``event: error`` ends the stream with its raw data as the message, no text_end."""
    error = b'event: error\ndata: {"type": "error", "error": {"type": "overloaded_error"}}\n\n'
    server = Server(ok(Body([*sse(*text_response()[:3]), error])))
    events, result = await run(server)
    assert types(events) == ["start", "text_start", "text_delta", "error"]
    assert result.error_message == '{"type": "error", "error": {"type": "overloaded_error"}}'
    assert result.text == "Hello"


async def test_refusal_and_unknown_stop_reasons() -> None:
    """refusal -> error with the explanation; an unknown stop reason is an error."""
    refusal = {
        "type": "message_delta",
        "delta": {"stop_reason": "refusal", "stop_details": {"explanation": "Policy"}},
    }
    _, result = await run(Server(ok([*text_response()[:4], refusal, MESSAGE_STOP])))
    assert (result.stop_reason, result.error_message) == ("error", "Policy")
    _, result = await run(Server(ok([*text_response()[:4], message_delta("nope"), MESSAGE_STOP])))
    assert (result.stop_reason, result.error_message) == ("error", "Unhandled stop reason: nope")


async def test_unparsable_event_data() -> None:
    """Data that is not JSON fails with pi-ai's 'Could not parse' text and the raw lines."""
    bad = b'event: content_block_delta\ndata: {"type":\n\n'
    _, result = await run(Server(ok(Body([*sse(*text_response()[:2]), bad]))))
    assert result.error_message is not None
    assert result.error_message.startswith(
        "Could not parse Anthropic SSE event content_block_delta: "
    )
    assert result.error_message.endswith(
        '; data={"type":; raw=event: content_block_delta\\ndata: {"type":'
    )


async def test_on_payload_and_on_response() -> None:
    """``on_payload`` may replace the body (stream stays true); ``on_response`` sees the
    status and headers before ``start``."""
    seen: list[tuple[int, str]] = []

    def on_payload(body: Any, model: Model) -> Any:
        return {**body, "stream": False, "metadata": {"user_id": "u"}}

    async def on_response(status: int, headers: Any, model: Model) -> None:
        await trio.lowlevel.checkpoint()
        seen.append((status, headers["content-type"]))

    server = Server(ok(text_response()))
    _, result = await run(server, opts=options(on_payload=on_payload, on_response=on_response))
    assert server.body()["stream"] is True
    assert server.body()["metadata"] == {"user_id": "u"}
    assert seen == [(200, "text/event-stream")]
    assert result.stop_reason == "stop"


# -- errors and retries -------------------------------------------------------------------

RATE_LIMITED = {"type": "error", "error": {"type": "rate_limit_error", "message": "Slow"}}


async def test_missing_api_key_is_a_lone_error() -> None:
    """No key and no auth header: one error event, no request."""
    server = Server()
    events, result = await run(server, opts=StreamOptions())
    assert types(events) == ["error"]
    assert result.error_message == "No API key for provider: anthropic"
    assert result.usage == Usage()
    assert server.requests == []


async def test_http_error_is_not_retried_by_default() -> None:
    """A 429 ends the stream at once with the SDK's text; no start event."""
    server = Server(httpx.Response(429, json=RATE_LIMITED, headers={"retry-after": "1"}))
    events, result = await run(server)
    assert types(events) == ["error"]
    assert len(server.requests) == 1
    assert result.error_message == "429 " + json.dumps(RATE_LIMITED, separators=(",", ":"))
    assert result.stop_reason == "error"


async def test_529_is_retried_after_retry_after_ms(autojump_clock: trio.testing.MockClock) -> None:
    """With max_retries, a 529 is retried after the server's retry-after-ms."""
    overloaded = httpx.Response(
        529,
        headers={"retry-after-ms": "250"},
        json={"type": "error", "error": {"type": "overloaded_error"}},
    )
    server = Server(overloaded, ok(text_response()))
    events, result = await run(server, opts=options(max_retries=2))
    assert len(server.requests) == 2
    assert server.times[1] - server.times[0] == pytest.approx(0.25)
    assert server.body(0) == server.body(1)
    assert types(events)[0] == "start"
    assert result.stop_reason == "stop"


async def test_retry_after_seconds_and_exhausted_retries(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """retry-after (seconds) is honoured; when retries run out the last error is kept."""
    limited = httpx.Response(429, headers={"retry-after": "3"}, json=RATE_LIMITED)
    last = httpx.Response(503, text="Service Unavailable")
    server = Server(limited, limited, last)
    _, result = await run(server, opts=options(max_retries=2))
    assert len(server.requests) == 3
    assert server.times[1] - server.times[0] == pytest.approx(3)
    assert result.error_message == "503 Service Unavailable"


async def test_exponential_back_off_without_retry_headers(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Without retry headers: 0.5 s, then 1 s (each less up to 25 % jitter)."""
    server = Server(
        httpx.Response(500, text="a"), httpx.Response(500, text="b"), ok(text_response())
    )
    _, result = await run(server, opts=options(max_retries=5))
    assert result.stop_reason == "stop"
    first, second = server.times[1] - server.times[0], server.times[2] - server.times[1]
    assert 0.375 <= first <= 0.5
    assert 0.75 <= second <= 1.0


async def test_retry_after_above_the_cap_fails_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A requested delay above max_retry_delay fails without waiting; 0 lifts the cap."""
    limited = httpx.Response(429, headers={"retry-after": "120"}, json=RATE_LIMITED)
    server = Server(limited)
    _, result = await run(server, opts=options(max_retries=3))
    assert len(server.requests) == 1
    assert result.error_message is not None
    assert result.error_message.startswith("Server requested 120s retry delay (max: 60s). 429 ")

    server = Server(limited, ok(text_response()))
    _, result = await run(server, opts=options(max_retries=3, max_retry_delay=0))
    assert server.times[1] - server.times[0] == pytest.approx(120)
    assert result.stop_reason == "stop"


async def test_timeout_before_headers(autojump_clock: trio.testing.MockClock) -> None:
    """``timeout`` bounds the wait for the response headers only."""

    async def slow(request: httpx.Request) -> httpx.Response:
        await trio.sleep(10)
        return ok(text_response())

    async def slow_body(request: httpx.Request) -> httpx.Response:
        return ok(Body(sse(*text_response())))

    events, result = await run(Server(slow), opts=options(timeout=0.5))
    assert types(events) == ["error"]
    assert result.error_message == "Request timed out."
    _, result = await run(Server(slow_body), opts=options(timeout=0.5))
    assert result.stop_reason == "stop"


async def test_connection_error_mid_body_keeps_what_arrived() -> None:
    """A broken connection mid-body: error, text so far kept, no text_end, body closed."""

    class Broken(Body):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            for chunk in self.chunks:
                yield chunk
            raise httpx.ReadError("peer went away")

    body = Broken(sse(*text_response()[:3]))
    events, result = await run(Server(ok(body)))
    assert types(events) == ["start", "text_start", "text_delta", "error"]
    assert result.error_message == "peer went away"
    assert result.text == "Hello"
    assert body.closed


async def test_response_is_closed_on_success_and_on_failure() -> None:
    """The body is closed after a normal end and after a parse failure."""
    bodies = [
        Body(sse(*text_response())),
        Body(
            [
                *sse(*text_response()[:2]),
                b"event: message_delta\ndata: x\n\n",
                *sse(*text_response()[2:]),
            ]
        ),
    ]
    for body in bodies:
        await run(Server(ok(body)))
        assert body.closed


# -- aborts -------------------------------------------------------------------------------


async def test_abort_before_headers() -> None:
    """Cancelling while the request waits for headers: 'Request aborted', no start."""
    in_flight = trio.Event()

    async def hang(request: httpx.Request) -> httpx.Response:
        in_flight.set()
        await trio.sleep_forever()
        raise AssertionError  # pragma: no cover

    async with Server(hang).client() as client:
        stream = stream_anthropic_messages(client, MODEL, context(), options())
        async with trio.open_nursery() as nursery:

            async def abort() -> None:
                await in_flight.wait()
                stream.cancel()

            nursery.start_soon(abort)
            events, result = await collect(stream)
    assert types(events) == ["error"]
    assert isinstance(events[0], ErrorEvent)
    assert events[0].reason == "aborted"
    assert result.stop_reason == "aborted"
    assert result.error_message == "Request aborted"


@pytest.mark.parametrize("via", ["cancel", "signal"])
async def test_abort_mid_stream_closes_the_response(via: str) -> None:
    """An abort while the body hangs: 'Request was aborted', partial content kept, no
    *_end events, and the HTTP response closed (no connection leak). The abort may come
    from ``stream.cancel()`` (the loop) or from the signal alone."""
    events_sent = [
        message_start(),
        block_start(0, {"type": "tool_use", "id": "t1", "name": "write", "input": {}}),
        delta(0, type="input_json_delta", partial_json='{"path": "/tmp/a'),
    ]
    body = Body(sse(*events_sent), hang_after=len(events_sent))
    signal = AbortSignal()
    async with Server(ok(body)).client() as client:
        stream = stream_anthropic_messages(client, MODEL, context(), options(signal=signal))

        def on_event(event: AssistantMessageEvent) -> None:
            if event.type == "toolcall_delta":
                stream.cancel() if via == "cancel" else signal.abort()

        events, result = await collect(stream, on_event)
    assert types(events) == ["start", "toolcall_start", "toolcall_delta", "error"]
    assert result.stop_reason == "aborted"
    assert result.error_message == "Request was aborted"
    assert result.tool_calls[0].arguments == {"path": "/tmp/a"}
    assert body.closed


async def test_abort_during_retry_sleep(autojump_clock: trio.testing.MockClock) -> None:
    """An abort during the back-off sleep is 'Request aborted' and sends nothing more."""
    overloaded = httpx.Response(529, headers={"retry-after-ms": "5000"}, json={})
    server = Server(overloaded, ok(text_response()))
    async with server.client() as client:
        stream = stream_anthropic_messages(client, MODEL, context(), options(max_retries=3))
        async with trio.open_nursery() as nursery:

            async def abort() -> None:
                await trio.sleep(1)
                stream.cancel()

            nursery.start_soon(abort)
            events, result = await collect(stream)
    assert len(server.requests) == 1
    assert types(events) == ["error"]
    assert result.error_message == "Request aborted"


async def test_non_string_delta_values_are_appended_as_javascript_strings() -> None:
    """Missing, null or non-string delta members append what JavaScript's ``+=`` would
    ('undefined', 'null', '1.5', ...): the final text is pi-ai's."""
    server = Server(
        ok(
            [
                message_start(),
                block_start(0, {"type": "text", "text": "a"}),
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta"}},
                delta(0, type="text_delta", text=None),
                delta(0, type="text_delta", text=1.5),
                delta(0, type="text_delta", text=[1, None, "x"]),
                delta(0, type="text_delta", text={"k": 1}),
                block_stop(0),
                message_delta("end_turn"),
                MESSAGE_STOP,
            ]
        )
    )
    events, result = await run(server)
    assert result.text == "aundefinednull1.51,,x[object Object]"
    assert [e.delta for e in events if e.type == "text_delta"] == [
        "undefined",
        "null",
        "1.5",
        "1,,x",
        "[object Object]",
    ]


async def test_tool_input_that_is_not_an_object_gives_empty_arguments() -> None:
    """``arguments`` stays a dict: JSON input that is a list or a number gives ``{}``."""
    server = Server(
        ok(
            [
                message_start(),
                block_start(0, {"type": "tool_use", "id": "t", "name": "f", "input": "odd"}),
                delta(0, type="input_json_delta", partial_json="[1, 2"),
                block_stop(0),
                message_delta("tool_use"),
                MESSAGE_STOP,
            ]
        )
    )
    events, result = await run(server)
    assert [e.partial.content[0].arguments for e in events if e.type == "toolcall_start"] == [{}]  # type: ignore[union-attr]
    assert result.tool_calls[0].arguments == {}
