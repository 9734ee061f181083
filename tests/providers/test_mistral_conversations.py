"""mistral-conversations: the payload's two forms, ids, options and the API through the
registry.

The behaviour is pinned event for event against pi-ai by
``test_mistral_conversations_conformance.py``; these tests cover what the fixtures
cannot reach: the ``on_payload`` form, tool-call id collisions, the header timeout and
``Models``' key lookup.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest
import trio

from pitrio import (
    AssistantMessage,
    Context,
    DoneEvent,
    ErrorEvent,
    Model,
    StreamOptions,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from pitrio._messages import LlmMessage
from pitrio.providers import Models, get_api
from pitrio.providers._mistral_conversations import error_text, stream_mistral_conversations
from pitrio.providers._mistral_conversations._events import stop_reason
from pitrio.providers._mistral_conversations._payload import (
    build_request,
    derive_tool_call_id,
    to_wire_payload,
)

from .conftest import Recorder, collect, stream_response


def _model(**kwargs: Any) -> Model:
    defaults: dict[str, Any] = {
        "id": "mistral-large-latest",
        "name": "Mistral Large",
        "api": "mistral-conversations",
        "provider": "mistral",
        "base_url": "https://api.mistral.ai",
    }
    return Model(**{**defaults, **kwargs})


def _chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    body = {"id": "c1", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return f"data: {json.dumps({**body, **extra})}\n\n".encode()


CONTEXT = Context(messages=[UserMessage(content="hi")])


async def test_on_payload_sees_the_sdk_form_and_the_body_is_the_apis() -> None:
    """The hook gets camelCase names (maxTokens, toolCalls, imageUrl); the bytes sent
    use the API's snake_case ones, also for a payload the hook replaced."""
    seen: list[Any] = []

    def on_payload(payload: Any, model: Model) -> Any:
        seen.append(payload)
        return {
            **payload,
            "randomSeed": 7,
            "responseFormat": {"jsonSchema": {"schemaDefinition": {}}},
        }

    recorder = Recorder(stream_response([_chunk({"content": "ok"}, "stop")]))
    history: list[LlmMessage] = [
        UserMessage(content="read it"),
        AssistantMessage(
            content=(ToolCall(id="abcdefghi", name="read", arguments={"path": "a"}),),
            api="mistral-conversations",
            provider="mistral",
            model="mistral-large-latest",
            stop_reason="toolUse",
        ),
        ToolResultMessage(tool_call_id="abcdefghi", tool_name="read", content=()),
    ]
    async with recorder.client() as client:
        options = StreamOptions(api_key="k", on_payload=on_payload, max_tokens=10)
        events = await collect(
            stream_mistral_conversations(client, _model(), Context(messages=history), options)
        )
    assert isinstance(events[-1], DoneEvent)
    (payload,) = seen
    assert payload["maxTokens"] == 10
    assert payload["messages"][1]["toolCalls"][0]["id"] == "abcdefghi"
    assert payload["messages"][2]["toolCallId"] == "abcdefghi"
    body = recorder.bodies[0]
    assert body["max_tokens"] == 10
    assert body["random_seed"] == 7
    assert body["response_format"] == {"json_schema": {"schema": {}}}
    assert "maxTokens" not in body
    assert body["messages"][1]["tool_calls"][0]["function"] == {
        "name": "read",
        "arguments": '{"path":"a"}',
    }
    assert body["messages"][2]["tool_call_id"] == "abcdefghi"
    assert recorder.requests[0].url == "https://api.mistral.ai/v1/chat/completions"


def test_a_payload_that_is_not_an_object_is_sent_as_it_is() -> None:
    """A hook's replacement that is not a JSON object is not renamed."""
    assert to_wire_payload([1, 2]) == [1, 2]
    assert to_wire_payload({"messages": ["x"], "toolChoice": "any"}) == {
        "messages": ["x"],
        "tool_choice": "any",
    }


def test_tool_call_ids_become_nine_letters_and_digits() -> None:
    """Nine alphanumerics stay; anything else is hashed; a collision hashes again."""
    assert derive_tool_call_id("ab-cd_ef:ghi", 0) == "abcdefghi"
    hashed = derive_tool_call_id("call_1|fc_2", 0)
    assert len(hashed) == 9
    assert hashed.isalnum()
    assert derive_tool_call_id("call_1|fc_2", 1) != hashed
    assert derive_tool_call_id("", 0) == derive_tool_call_id("", 0)


def _call(call_id: str) -> AssistantMessage:
    return AssistantMessage(
        content=(ToolCall(id=call_id, name="read", arguments={}),),
        api="openai-responses",
        provider="openai",
        model="gpt-5",
        stop_reason="toolUse",
    )


def test_two_ids_that_reduce_alike_get_two_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two source ids the derivation maps to one id: the second gets the next attempt."""
    from pitrio.providers._mistral_conversations import _payload

    def derive(call_id: str, attempt: int) -> str:
        return "samesame1" if attempt == 0 else f"other{attempt:04d}"

    monkeypatch.setattr(_payload, "derive_tool_call_id", derive)
    messages: list[LlmMessage] = [
        _call("first"),
        ToolResultMessage(tool_call_id="first", tool_name="read", content=()),
        _call("second"),
        ToolResultMessage(tool_call_id="second", tool_name="read", content=()),
        _call("first"),
        ToolResultMessage(tool_call_id="first", tool_name="read", content=()),
    ]
    request = build_request(_model(), Context(messages=messages), StreamOptions(api_key="k"))
    body: Any = request.body
    ids = [m["toolCallId"] for m in body["messages"] if m["role"] == "tool"]
    assert ids == ["samesame1", "other0001", "samesame1"]


@pytest.mark.parametrize(
    ("choice", "sent"),
    [
        ("required", "required"),
        (
            {"type": "function", "function": {"name": "read"}},
            {"type": "function", "function": {"name": "read"}},
        ),
    ],
)
def test_tool_choices(choice: Any, sent: Any) -> None:
    """The four strings pass; a function choice keeps only its name."""
    request = build_request(_model(), CONTEXT, StreamOptions(api_key="k", tool_choice=choice))
    body: Any = request.body
    assert body["toolChoice"] == sent


@pytest.mark.parametrize(
    ("choice", "text"),
    [("sometimes", r"^tool_choice='sometimes' is not a Mistral tool choice: use one of 'auto'"),
     ({"type": "function"}, r"^tool_choice=\{'type': 'function'\} names no function")],
)  # fmt: skip
async def test_a_bad_tool_choice_is_an_error_naming_it(choice: Any, text: str) -> None:
    """pi-ai fails with a TypeError; pitrio says what a Mistral tool choice is."""
    async with httpx.AsyncClient() as client:
        options = StreamOptions(api_key="k", tool_choice=choice)
        events = await collect(stream_mistral_conversations(client, _model(), CONTEXT, options))
    (event,) = events
    assert isinstance(event, ErrorEvent)
    assert event.error.error_message is not None
    assert re.match(text, event.error.error_message)


def test_user_images_for_a_text_only_model() -> None:
    """A user turn of images only becomes the placeholder text."""
    from pitrio import ImageContent

    user = UserMessage(content=(ImageContent(data="AA==", mime_type="image/png"),))
    request = build_request(_model(), Context(messages=[user]), StreamOptions(api_key="k"))
    body: Any = request.body
    assert body["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "(image omitted: model does not support images)"}],
        }
    ]


def test_a_reasoning_effort_model_without_a_map_says_high() -> None:
    """Mistral Small's effort is the level's entry of the map, else ``high``."""
    model = _model(id="mistral-small-latest", reasoning=True)
    body: Any = build_request(model, CONTEXT, StreamOptions(api_key="k", reasoning="low")).body
    assert body["reasoningEffort"] == "high"
    assert "promptMode" not in body
    body = build_request(model, CONTEXT, StreamOptions(api_key="k", reasoning="off")).body
    assert "reasoningEffort" not in body


def test_finish_reasons() -> None:
    """pi-ai's mapChatStopReason."""
    assert stop_reason("stop") == ("stop", None)
    assert stop_reason("model_length") == ("length", None)
    assert stop_reason("tool_calls") == ("toolUse", None)
    assert stop_reason("error") == ("error", "Provider stopped with: error")


def test_error_texts() -> None:
    """An HTTP error without a body names its status text (or the status)."""
    from pitrio.providers._http import APIError

    assert error_text(APIError("x", status=503, body_text="  ", reason="Busy")) == (
        "Mistral API error (503): Busy"
    )
    assert error_text(APIError("x", status=503, body_text="")) == (
        "Mistral API error (503): Request failed with status 503"
    )
    assert error_text(RuntimeError()) == "RuntimeError"


async def test_the_timeout_bounds_the_wait_for_the_headers(autojump_clock: trio.abc.Clock) -> None:
    """No headers within ``options.timeout``: ``Request timed out.``; no retry."""
    calls = 0

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        await trio.sleep(120)
        return stream_response([_chunk({"content": "late"}, "stop")])

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        options = StreamOptions(api_key="k", timeout=5, max_retries=3)
        start = trio.current_time()
        events = await collect(stream_mistral_conversations(client, _model(), CONTEXT, options))
    assert trio.current_time() - start == pytest.approx(5)
    (event,) = events
    assert isinstance(event, ErrorEvent)
    assert event.error.error_message == "Request timed out."
    assert calls == 1


async def test_a_long_stream_is_not_cut_at_sixty_seconds(autojump_clock: trio.abc.Clock) -> None:
    """pi-ai's 60 s default limit covers the whole response; pitrio's covers the headers."""
    recorder = Recorder(
        httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=_Slow())
    )
    async with recorder.client() as client:
        events = await collect(
            stream_mistral_conversations(client, _model(), CONTEXT, StreamOptions(api_key="k"))
        )
    done = events[-1]
    assert isinstance(done, DoneEvent)
    assert done.message.content[0].text == "a" * 10  # type: ignore[union-attr]  # a TextContent


class _Slow(httpx.AsyncByteStream):
    """Ten text deltas 30 s apart, then the finish reason."""

    async def __aiter__(self) -> Any:
        for _ in range(10):
            await trio.sleep(30)
            yield _chunk({"content": "a"})
        yield _chunk({}, "stop")


async def test_the_registry_and_models_key() -> None:
    """``get_api`` finds the API; ``Models`` takes ``MISTRAL_API_KEY`` from the env."""
    assert get_api("mistral-conversations") is stream_mistral_conversations
    recorder = Recorder(
        stream_response([_chunk({"content": "hey"}, "stop", usage={"prompt_tokens": 3})])
    )
    async with (
        recorder.client() as client,
        Models(client=client, env={"MISTRAL_API_KEY": "mk"}) as models,
    ):
        model = next(m for m in models.list("mistral") if m.api == "mistral-conversations")
        events = await collect(models.stream_simple(model, CONTEXT))
    assert isinstance(events[-1], DoneEvent)
    assert events[-1].message.usage.input == 3
    assert recorder.requests[0].headers["authorization"] == "Bearer mk"
    assert str(recorder.requests[0].url) == "https://api.mistral.ai/v1/chat/completions"


async def test_a_json_answer_is_refused_naming_it() -> None:
    """A server that answers with one JSON body: pi-ai reads an empty stream; pitrio
    says what came."""
    recorder = Recorder(httpx.Response(200, json={"object": "chat.completion", "choices": []}))
    async with recorder.client() as client:
        events = await collect(
            stream_mistral_conversations(client, _model(), CONTEXT, StreamOptions(api_key="k"))
        )
    (event,) = events[1:]
    assert isinstance(event, ErrorEvent)
    assert (event.error.error_message or "").startswith(
        "Mistral: the server answered the streaming request with a JSON body that is not a "
        'response: {"object":"chat.completion"'
    )
