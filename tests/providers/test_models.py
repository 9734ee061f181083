"""The model layer's front door: Models, the API registry, the catalog, API keys."""

from __future__ import annotations

from collections.abc import Iterator

import attrs
import httpx
import pytest

import pitrio.providers
from pitrio import (
    AssistantMessageEventStream,
    Context,
    ModelCost,
    StreamOptions,
    Usage,
    UserMessage,
)
from pitrio._events import ErrorEvent
from pitrio.providers import (
    Models,
    UnknownApiError,
    env_api_key,
    get_api,
    openai_compatible,
    register_api,
    registered_apis,
    stream_simple,
)
from pitrio.providers._output import calculate_cost

from .conftest import Recorder, chunk, collect, sse, stream_response

CONTEXT = Context(messages=[UserMessage(content="hi")])
providers_namespace = vars(pitrio.providers)


@pytest.fixture
def fake_lazy_api() -> Iterator[str]:
    lazy = providers_namespace["_LAZY_APIS"]
    lazy["fake-api"] = ("pitrio.providers._no_such_module", "stream_fake")
    try:
        yield "fake-api"
    finally:
        del lazy["fake-api"]
        providers_namespace["_APIS"].pop("fake-api", None)


def test_registry_knows_the_three_apis() -> None:
    assert {"openai-completions", "anthropic-messages", "openai-responses"} <= set(
        registered_apis()
    )
    assert callable(get_api("openai-completions"))


def test_unknown_api() -> None:
    with pytest.raises(UnknownApiError, match="No API provider registered for api: nope"):
        get_api("nope")


def test_a_missing_module_fails_only_when_its_api_is_used(fake_lazy_api: str) -> None:
    assert fake_lazy_api in registered_apis()
    with pytest.raises(UnknownApiError, match=r"pitrio\.providers\._no_such_module\.stream_fake"):
        get_api(fake_lazy_api)


async def test_a_missing_module_becomes_an_error_event(fake_lazy_api: str) -> None:
    model = attrs.evolve(openai_compatible("http://x/v1", "m"), api=fake_lazy_api)
    async with httpx.AsyncClient() as client:
        events = await collect(stream_simple(client, model, CONTEXT, StreamOptions()))
    assert len(events) == 1
    event = events[0]
    assert isinstance(event, ErrorEvent)
    assert event.error.stop_reason == "error"
    assert event.error.content == ()
    assert event.error.usage == Usage()
    assert "The 'fake-api' API is not available" in (event.error.error_message or "")


async def test_register_api_replaces_an_implementation() -> None:
    calls = []

    def fake(client, model, context, options):  # type: ignore[no-untyped-def]
        calls.append(model.id)
        return get_api("openai-completions")(client, model, context, options)

    register_api("fake-registered", fake)
    try:
        model = attrs.evolve(openai_compatible("http://x/v1", "m"), api="fake-registered")
        recorder = Recorder(stream_response(sse(chunk(content="ok", finish="stop"))))
        async with recorder.client() as client:
            events = await collect(
                stream_simple(client, model, CONTEXT, StreamOptions(api_key="k"))
            )
        assert events[-1].type == "done"
        assert calls == ["m"]
    finally:
        providers_namespace["_APIS"].pop("fake-registered")


def test_openai_compatible_model() -> None:
    model = openai_compatible(
        "http://127.0.0.1:11434/v1/", "llama3.1", provider="ollama", images=True, reasoning=True
    )
    assert model.api == "openai-completions"
    assert model.base_url == "http://127.0.0.1:11434/v1"
    assert model.input == ("text", "image")
    assert model.name == "llama3.1"
    assert model.reasoning


def test_builtin_catalog() -> None:
    models = Models()
    assert {"openai", "anthropic", "groq", "google", "openrouter"} <= set(models.providers())
    gpt = models.get("openai", "gpt-4.1")
    assert gpt is not None
    assert (gpt.api, gpt.base_url, gpt.context_window, gpt.max_tokens) == (
        "openai-responses",
        "https://api.openai.com/v1",
        1047576,
        32768,
    )
    assert gpt.cost == ModelCost(input=2, output=8, cache_read=0.5, cache_write=0)
    claude = models.get("anthropic", "claude-haiku-4-5")
    assert claude is not None
    assert (claude.api, claude.reasoning, claude.context_window) == (
        "anthropic-messages",
        True,
        200000,
    )
    assert models.get("openai", "no-such-model") is None
    assert all(m.provider == "anthropic" for m in models.list("anthropic"))
    assert Models(builtin=False).list() == []


def test_catalog_price_tiers_apply_above_the_threshold() -> None:
    gpt = Models().get("openai", "gpt-5.4")
    assert gpt is not None
    small = calculate_cost(gpt, Usage(input=1000, output=100))
    large = calculate_cost(gpt, Usage(input=300_000, output=100))
    assert small.cost.input == (2.5 / 1000000) * 1000
    assert large.cost.input == (5 / 1000000) * 300_000
    assert large.cost.output == (22.5 / 1000000) * 100


def test_register_and_list() -> None:
    models = Models(builtin=False)
    local = openai_compatible("http://127.0.0.1:8080/v1", "qwen", provider="llama-cpp")
    models.register(local)
    models.register_provider(
        "groq",
        base_url="https://api.groq.com/openai/v1/",
        api="openai-completions",
        models=[openai_compatible("http://ignored", "llama-3.3-70b")],
        headers={"X-Team": "a"},
    )
    assert models.get("llama-cpp", "qwen") is local
    groq = models.get("groq", "llama-3.3-70b")
    assert groq is not None
    assert (groq.base_url, groq.headers) == ("https://api.groq.com/openai/v1", {"X-Team": "a"})
    assert [m.id for m in models.list()] == ["qwen", "llama-3.3-70b"]


def test_env_api_keys() -> None:
    env = {"OPENAI_API_KEY": "sk-o", "ANTHROPIC_API_KEY": "sk-a", "GROQ_API_KEY": "gsk"}
    assert env_api_key("openai", env) == "sk-o"
    assert env_api_key("anthropic", env) == "sk-a"
    assert env_api_key("anthropic", {"ANTHROPIC_OAUTH_TOKEN": "oat", **env}) == "oat"
    assert env_api_key("groq", env) == "gsk"
    assert env_api_key("llama-cpp", env) is None


async def test_models_stream_fn_fills_the_api_key() -> None:
    recorder = Recorder(
        stream_response(sse(chunk(content="one", finish="stop"))),
        stream_response(sse(chunk(content="two", finish="stop"))),
        stream_response(sse(chunk(content="three", finish="stop"))),
    )
    model = openai_compatible("http://test/v1", "m", provider="groq")
    async with recorder.client() as client:
        models = Models(
            client=client,
            get_api_key=lambda provider: "from-callback" if provider == "groq" else None,
            env={"GROQ_API_KEY": "from-env"},
        )
        async with models:
            stream_fn = models.stream_fn
            stream = stream_fn(model, CONTEXT, StreamOptions())
            assert isinstance(stream, AssistantMessageEventStream)
            first = await collect(stream)
            second = await collect(
                models.stream_simple(model, CONTEXT, StreamOptions(api_key="explicit"))
            )
            other = attrs.evolve(model, provider="openai")
            third = await collect(
                Models(client=client, env={"OPENAI_API_KEY": "env-key"}).stream_simple(
                    other, CONTEXT
                )
            )
        assert not client.is_closed  # a borrowed client stays open
    assert [e[-1].type for e in (first, second, third)] == ["done", "done", "done"]
    assert [r.headers["authorization"] for r in recorder.requests] == [
        "Bearer from-callback",
        "Bearer explicit",
        "Bearer env-key",
    ]


def is_closed(client: httpx.AsyncClient) -> bool:
    return client.is_closed


async def test_models_owns_its_client() -> None:
    models = Models(builtin=False)
    with pytest.raises(RuntimeError, match="not open"):
        models.stream_simple(openai_compatible("http://x/v1", "m"), CONTEXT)
    async with models:
        client = models.client
        assert not is_closed(client)
    assert is_closed(client)
    with pytest.raises(RuntimeError, match="not open"):
        _ = models.client


async def test_models_without_a_key_streams_a_setup_error() -> None:
    async with Models(builtin=False, env={}) as models:
        events = await collect(
            models.stream_simple(openai_compatible("http://x/v1", "m", provider="ollama"), CONTEXT)
        )
    assert len(events) == 1
    assert isinstance(events[0], ErrorEvent)
    assert events[0].error.error_message == "No API key for provider: ollama"
