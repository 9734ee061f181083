"""bedrock-converse-stream: the event-stream framing, the request, and the API through the
registry.

The behaviour is pinned event for event against pi-ai by
``test_bedrock_converse_stream_conformance.py``; these tests cover what the fixtures do
not: any split of the body into reads, the payload's model families (strict tools,
GovCloud, level maps, forced cache points), retries of connection failures, ``on_payload``
changing the model, and the messages that are not JSON or not the assistant's.
"""

from __future__ import annotations

import itertools
import json
import os
from typing import Any

import httpx
import pytest
from hypothesis import given, settings, strategies as st

from pitrio import Context, DoneEvent, ErrorEvent, Model, StreamOptions, UserMessage
from pitrio.providers import Models, get_api

pytest.importorskip("botocore", reason="the bedrock extra (pip install 'pitrio[bedrock]')")

from pitrio.providers._bedrock_converse_stream import stream_bedrock_converse_stream
from pitrio.providers._bedrock_converse_stream._events import EventStreamDecoder
from pitrio.providers._bedrock_converse_stream._payload import build_payload
from pitrio.providers._request import ProviderFailure
from pitrio.testing._provider_server import _event_stream_message

from .conftest import ScriptedBody, collect

KEYS = {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret"}


def _event(kind: str, payload: Any) -> bytes:
    headers = {":event-type": kind, ":content-type": "application/json", ":message-type": "event"}
    return _event_stream_message(headers, json.dumps(payload).encode())


BODY = b"".join(
    [
        _event("messageStart", {"role": "assistant"}),
        _event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "caf\u00e9"}}),
        _event("contentBlockStop", {"contentBlockIndex": 0}),
        _event("messageStop", {"stopReason": "end_turn"}),
    ]
)


@pytest.fixture(autouse=True)
def _no_ambient_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setattr("random.random", lambda: 0.0)


def _model(model_id: str = "anthropic.claude-sonnet-4-5-20250929-v1:0", **kw: Any) -> Model:
    return Model(
        id=model_id,
        name=kw.pop("name", model_id),
        api="bedrock-converse-stream",
        provider="amazon-bedrock",
        base_url="http://bedrock.test",
        **kw,
    )


def _context(text: str = "Hi", **kw: Any) -> Context:
    return Context(messages=[UserMessage(content=text, timestamp=0)], **kw)


def _decode(chunks: list[bytes]) -> list[tuple[str | None, str]]:
    decoder = EventStreamDecoder()
    out = [(e.event, e.data) for chunk in chunks for e in decoder.feed(chunk)]
    return out + [(e.event, e.data) for e in decoder.flush()]


@settings(deadline=None, max_examples=100)
@given(cuts=st.lists(st.integers(1, len(BODY) - 1), unique=True, max_size=10))
def test_any_split_into_reads_gives_the_same_messages(cuts: list[int]) -> None:
    """Reads may end anywhere, inside a prelude, a header or a UTF-8 character."""
    bounds = [0, *sorted(cuts), len(BODY)]
    messages = _decode([BODY[a:b] for a, b in itertools.pairwise(bounds)])
    assert [kind for kind, _ in messages] == [
        "event:messageStart",
        "event:contentBlockDelta",
        "event:contentBlockStop",
        "event:messageStop",
    ]
    assert json.loads(messages[1][1])["delta"]["text"] == "caf\u00e9"


def test_a_truncated_message_and_a_bad_length_fail() -> None:
    decoder = EventStreamDecoder()
    assert decoder.feed(BODY[:-3]) != []
    with pytest.raises(ProviderFailure, match="Truncated event message received"):
        decoder.flush()
    huge = b"\x7f\xff\xff\xff" + b"\x00\x00\x00\x00" + b"\x00" * 8
    with pytest.raises(ProviderFailure):
        EventStreamDecoder().feed(huge)


def test_max_event_size_bounds_a_message() -> None:
    """``StreamOptions.max_event_size`` bounds one event-stream message, as it bounds an
    SSE event."""
    big = _event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "x" * 9000}})
    start = _event("messageStart", {"role": "assistant"})
    rest = BODY[len(start) :]
    # Buffered past the limit before it is whole, or whole in one read.
    for chunks in ([start, big[:5000], big[5000:], rest], [start + big + rest]):
        events = _run(lambda r, chunks=chunks: _ok(chunks), max_event_size=4096)
        assert isinstance(events[-1], ErrorEvent)
        assert "max_event_size=4,096 bytes" in (events[-1].error.error_message or "")
        assert isinstance(_run(lambda r, chunks=chunks: _ok(chunks))[-1], DoneEvent)


def _run(
    handler: Any, model: Model | None = None, context: Context | None = None, **options: Any
) -> list[Any]:
    import trio

    async def main() -> list[Any]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            extra = {"env": {**KEYS, **options.pop("env", {})}, **options.pop("extra", {})}
            stream = stream_bedrock_converse_stream(
                client,
                model or _model(),
                context or _context(),
                StreamOptions(extra=extra, **options),
            )
            return await collect(stream)

    return trio.run(main)


def _ok(chunks: list[bytes] | None = None) -> httpx.Response:
    return httpx.Response(
        200,
        headers={"content-type": "application/vnd.amazon.eventstream"},
        stream=ScriptedBody(chunks or [BODY]),
    )


def test_on_payload_may_change_the_model_and_the_body() -> None:
    """``on_payload`` sees pi-ai's command input (``modelId`` included); a replaced one
    is what is sent, to its model's path, signed over the new body."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return _ok()

    def on_payload(payload: Any, model: Model) -> Any:
        assert payload["modelId"] == model.id
        return {
            **payload,
            "modelId": "us.anthropic.claude-haiku-4-5",
            "inferenceConfig": {"maxTokens": 7},
        }

    events = _run(handler, on_payload=on_payload)
    assert isinstance(events[-1], DoneEvent)
    request = seen[0]
    assert request.url.raw_path == b"/model/us.anthropic.claude-haiku-4-5/converse-stream"
    assert json.loads(request.content) == {
        "messages": [
            {"role": "user", "content": [{"text": "Hi"}, {"cachePoint": {"type": "default"}}]}
        ],
        "inferenceConfig": {"maxTokens": 7},
    }
    assert request.headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "accept" not in request.headers


def test_connection_failures_are_retried_three_times_in_all() -> None:
    attempts: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        attempts.append(request.headers["amz-sdk-request"])
        if len(attempts) < 3:
            raise httpx.ConnectError("refused")
        return _ok()

    events = _run(handler)
    assert isinstance(events[-1], DoneEvent)
    assert attempts == ["attempt=1; max=3", "attempt=2; max=3", "attempt=3; max=3"]
    attempts.clear()
    events = _run(lambda r: (_ for _ in ()).throw(httpx.ConnectError("refused")))
    assert isinstance(events[-1], ErrorEvent)
    assert (events[-1].error.error_message or "").startswith("Connection error.")


@pytest.mark.parametrize(
    ("message", "text"),
    [
        (
            _event("messageStart", {"role": "user"}),
            "Unexpected assistant message start but got user",
        ),
        (
            _event_stream_message(
                {":exception-type": "someNewException", ":message-type": "exception"}, b"{}"
            ),
            "SomeNewException: SomeNewException",
        ),
        (
            _event_stream_message(
                {":event-type": "contentBlockDelta", ":message-type": "event"}, b"{oops"
            ),
            "Expecting property name",
        ),
    ],
)
def test_bad_messages_end_the_stream(message: bytes, text: str) -> None:
    events = _run(lambda r: _ok([message]))
    assert isinstance(events[-1], ErrorEvent)
    assert text in (events[-1].error.error_message or "")


def test_the_final_http_error_reaches_on_error_response() -> None:
    """After the SDK's retries, the error response's status and headers go to
    ``on_error_response`` (the harness reads ``retry-after`` there), once."""
    seen: list[tuple[int, str | None]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        headers = {"x-amzn-errortype": "ThrottlingException", "retry-after": "7"}
        return httpx.Response(429, headers=headers, json={"message": "slow down"})

    events = _run(handler, on_error_response=lambda s, h, m: seen.append((s, h.get("retry-after"))))
    assert isinstance(events[-1], ErrorEvent)
    assert events[-1].error.error_message == "Throttling error: slow down"
    assert seen == [(429, "7")]


def test_a_json_body_is_not_an_event_stream() -> None:
    events = _run(lambda r: httpx.Response(200, json={"output": {}}))
    assert isinstance(events[-1], ErrorEvent)
    assert "not a response" in (events[-1].error.error_message or "")


def test_without_botocore_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "botocore" else real(name, *a)
    )
    events = _run(lambda r: _ok())
    assert len(events) == 1
    assert "pip install 'pitrio[bedrock]'" in (events[0].error.error_message or "")


def test_models_streams_bedrock_with_aws_credentials() -> None:
    """Through the registry and ``Models``: AWS keys make the key ``<authenticated>``,
    which is not sent as a bearer token (SigV4 instead)."""
    import trio

    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return _ok()

    async def main() -> list[Any]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            models = Models(client=client, env=KEYS)
            async with models:
                model = models.get("amazon-bedrock", "amazon.nova-pro-v1:0")
                assert model is not None
                assert models.api_key_for("amazon-bedrock") == "<authenticated>"
                options = StreamOptions(extra={"env": KEYS})
                return await collect(models.stream_simple(model, _context(), options))

    assert get_api("bedrock-converse-stream") is stream_bedrock_converse_stream
    events = trio.run(main)
    assert isinstance(events[-1], DoneEvent)
    assert seen[0].url.host == "bedrock-runtime.us-east-1.amazonaws.com"
    assert seen[0].headers["authorization"].startswith("AWS4-HMAC-SHA256 ")


# -- the payload's model families ---------------------------------------------------------


class _Tool:
    def __init__(self, constrained: Any) -> None:
        self.name = "pick"
        self.description = "Pick one"
        self.parameters = {"type": "object", "properties": {"x": {"type": "string"}}}
        self.constrained_sampling = constrained


def test_strict_tools_and_auto_choice() -> None:
    model = _model(compat={"supportsStrictMode": True})
    context = _context(tools=[_Tool({"type": "json_schema"})])
    payload = build_payload(model, context, StreamOptions(tool_choice="auto"))
    spec = payload["toolConfig"]["tools"][0]["toolSpec"]
    assert spec["strict"] is True
    assert spec["inputSchema"]["json"]["additionalProperties"] is False
    assert payload["toolConfig"]["toolChoice"] == {"auto": {}}


def test_thinking_in_gov_cloud_and_with_a_level_map() -> None:
    """GovCloud drops ``display``; a level map names the effort; ``xhigh`` is native on
    Opus 4.7; ``off`` is no thinking; custom budgets and no interleaving on 4.5."""
    opus = _model(
        "us-gov.anthropic.claude-opus-4-6-v1", reasoning=True, thinking_level_map={"low": "medium"}
    )
    fields = build_payload(opus, _context(), StreamOptions(reasoning="low"))[
        "additionalModelRequestFields"
    ]
    assert fields == {"thinking": {"type": "adaptive"}, "output_config": {"effort": "medium"}}
    opus47 = _model("anthropic.claude-opus-4-7", reasoning=True)
    fields = build_payload(opus47, _context(), StreamOptions(reasoning="xhigh"))[
        "additionalModelRequestFields"
    ]
    assert fields["output_config"] == {"effort": "xhigh"}
    sonnet = _model(reasoning=True, max_tokens=64000)
    assert "additionalModelRequestFields" not in build_payload(
        sonnet, _context(), StreamOptions(reasoning="off")
    )
    options = StreamOptions(
        reasoning="low",
        max_tokens=1000,
        thinking_budgets={"low": 4000},
        extra={
            "interleavedThinking": False,
            "thinkingDisplay": "omitted",
            "requestMetadata": {"a": "b"},
        },
    )
    payload = build_payload(sonnet, _context(), options)
    assert payload["additionalModelRequestFields"] == {
        "thinking": {"type": "enabled", "budget_tokens": 3976, "display": "omitted"}
    }
    assert payload["inferenceConfig"] == {"maxTokens": 5000}
    assert payload["requestMetadata"] == {"a": "b"}


def test_cache_points_forced_or_off() -> None:
    profile = _model("arn:aws:bedrock:us-east-1:1:application-inference-profile/x", name="x")
    plain = build_payload(profile, _context(system_prompt="S"), StreamOptions())
    assert plain["system"] == [{"text": "S"}]
    forced = build_payload(
        profile,
        _context(system_prompt="S"),
        StreamOptions(extra={"env": {"AWS_BEDROCK_FORCE_CACHE": "1"}}),
    )
    assert forced["system"][1] == {"cachePoint": {"type": "default"}}
    none = build_payload(
        _model(), _context(system_prompt="S"), StreamOptions(cache_retention="none")
    )
    assert none["system"] == [{"text": "S"}]


def test_an_unknown_image_type_fails_the_request() -> None:
    from pitrio import ImageContent

    context = Context(
        messages=[
            UserMessage(content=(ImageContent(data="AAAA", mime_type="image/bmp"),), timestamp=0)
        ]
    )
    with pytest.raises(ValueError, match="Unknown image type: image/bmp"):
        build_payload(_model(input=("text", "image")), context, StreamOptions())
