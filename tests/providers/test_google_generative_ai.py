"""google-generative-ai: the SDK's framing, the request, and the API through the registry.

The behaviour is pinned event for event against pi-ai by
``test_google_generative_ai_conformance.py``; these tests cover what the fixtures
cannot: any split of the body into reads, the registry and ``Models``' key lookup.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import httpx
import pytest
from hypothesis import given, settings, strategies as st

from pitrio import Context, DoneEvent, ErrorEvent, Model, StreamOptions, UserMessage
from pitrio.providers import Models, get_api
from pitrio.providers._google_generative_ai import build_request
from pitrio.providers._google_generative_ai._events import GoogleStreamDecoder
from pitrio.providers._request import ProviderFailure

from .conftest import collect, stream_response

BODY = (
    b": ping\n\n"
    b'data: {"a": 1}\r\n\r\n'
    b'event: x\ndata: {"skipped": true}\n\n'
    b'data:{"b":"caf\xc3\xa9"}\r\r'
    b"data: [2]\n\n"
)
EXPECTED = ['{"a": 1}', '{"b":"café"}', "[2]"]


def _decode(chunks: list[bytes]) -> list[str]:
    decoder = GoogleStreamDecoder()
    out = [e.data for chunk in chunks for e in decoder.feed(chunk)]
    out += [e.data for e in decoder.flush()]
    return out


def test_the_framing_is_the_sdks() -> None:
    """Events end at \\n\\n, \\r\\r or \\r\\n\\r\\n; only events starting with data: count."""
    assert _decode([BODY]) == EXPECTED


@settings(deadline=None, max_examples=200)
@given(cuts=st.lists(st.integers(1, len(BODY) - 1), unique=True, max_size=12))
def test_any_split_into_reads_gives_the_same_events(cuts: list[int]) -> None:
    """Reads may end anywhere, inside a delimiter or a UTF-8 character."""
    bounds = [0, *sorted(cuts), len(BODY)]
    chunks = [BODY[a:b] for a, b in itertools.pairwise(bounds)]
    assert _decode(chunks) == EXPECTED


def test_text_left_at_the_end_is_an_incomplete_segment() -> None:
    """The SDK's ``Incomplete JSON segment at the end``; whitespace alone is fine."""
    decoder = GoogleStreamDecoder()
    events = decoder.feed(b'data: {"a":1}\n\ndata: {"b"')
    assert [e.data for e in events] == ['{"a":1}']
    with pytest.raises(ProviderFailure, match=r"^Incomplete JSON segment at the end$"):
        decoder.flush()
    decoder = GoogleStreamDecoder()
    decoder.feed(b'data: {"a":1}\n\n \r\n')
    assert decoder.flush() == []


def test_a_read_that_is_an_error_object_fails() -> None:
    """A read holding only ``{"error": {"code": 4xx/5xx, ...}}`` is the SDK's ApiError."""
    decoder = GoogleStreamDecoder()
    body = {"error": {"code": 429, "message": "slow down", "status": "RESOURCE_EXHAUSTED"}}
    with pytest.raises(ProviderFailure, match=r"^got status: RESOURCE_EXHAUSTED\. \{"):
        decoder.feed(json.dumps(body).encode())
    # A code outside 400-599, or an error inside an SSE event, is not.
    assert decoder.feed(b'{"error": {"code": 200}}') == []


def _model(**kwargs: Any) -> Model:
    return Model(
        id=kwargs.pop("id", "gemini-2.5-flash"),
        api="google-generative-ai",
        provider="google",
        base_url="https://generativelanguage.googleapis.com/v1beta",
        **kwargs,
    )


def test_the_request_goes_to_stream_generate_content() -> None:
    """URL, key header and body as the SDK sends them; the key is not in the URL."""
    model = _model()
    request = build_request(
        model, Context(messages=[UserMessage(content="hi")]), StreamOptions(api_key="g-key")
    )
    assert request.url == (
        "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash"
        ":streamGenerateContent?alt=sse"
    )
    assert request.headers["x-goog-api-key"] == "g-key"
    assert "g-key" not in request.url
    assert request.body == {
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
        "generationConfig": {"maxOutputTokens": model.max_tokens},
    }


def test_an_empty_history_is_refused_as_the_sdk_does() -> None:
    """No contents: the SDK's ``contents are required``."""
    with pytest.raises(ValueError, match=r"^contents are required$"):
        build_request(_model(), Context(messages=[]), StreamOptions(api_key="k"))


def _chunk(text: str, finish: str | None = None) -> bytes:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": [{"text": text}]}}
    if finish:
        candidate["finishReason"] = finish
    return f"data: {json.dumps({'candidates': [candidate]})}\r\n\r\n".encode()


async def test_models_streams_gemini_with_gemini_api_key() -> None:
    """The catalog's Gemini models stream through the registry with GEMINI_API_KEY."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return stream_response([_chunk("Hel"), _chunk("lo", "STOP")])

    assert get_api("google-generative-ai") is not None
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        models = Models(client=client, env={"GEMINI_API_KEY": "from-env"})
        model = models.get("google", "gemini-2.5-flash")
        assert model is not None
        async with models:
            events = await collect(
                models.stream_simple(model, Context(messages=[UserMessage(content="hi")]))
            )
    assert seen[0].headers["x-goog-api-key"] == "from-env"
    assert seen[0].url.path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    last = events[-1]
    assert isinstance(last, DoneEvent)
    assert last.message.text == "Hello"


async def test_without_a_key_the_stream_fails_naming_the_provider() -> None:
    """No GEMINI_API_KEY: one error event, pi-ai's text."""
    async with Models(env={}) as models:
        model = models.get("google", "gemini-2.5-flash")
        assert model is not None
        events = await collect(
            models.stream_simple(model, Context(messages=[UserMessage(content="hi")]))
        )
    assert len(events) == 1
    assert isinstance(events[0], ErrorEvent)
    assert events[0].error.error_message == "No API key for provider: google"


async def test_a_json_answer_to_the_stream_request_is_read_whole() -> None:
    """A server that answers with a JSON array of responses (no ``alt=sse``) is read as
    the stream would be (pitrio's addition; anything else JSON is refused, naming it)."""
    answers = [
        [json.loads(_chunk("Hel")[6:]), json.loads(_chunk("lo", "STOP")[6:])],
        {"unexpected": True},
    ]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=answers.pop(0))

    context = Context(messages=[UserMessage(content="hi")])
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        stream_fn = get_api("google-generative-ai")
        events = await collect(stream_fn(client, _model(), context, StreamOptions(api_key="k")))
        refused = await collect(stream_fn(client, _model(), context, StreamOptions(api_key="k")))
    assert [e.type for e in events] == [
        "start",
        "text_start",
        "text_delta",
        "text_delta",
        "text_end",
        "done",
    ]
    assert isinstance(events[-1], DoneEvent)
    assert events[-1].message.text == "Hello"
    last = refused[-1]
    assert isinstance(last, ErrorEvent)
    assert (last.error.error_message or "").startswith(
        "Google: the server answered the streaming request with a JSON body that is not a "
        'response: {"unexpected":true}'
    )
