"""azure-openai-responses: the endpoint, API version and deployment as pi-ai resolves
them (``resolveAzureConfig``, ``normalizeAzureBaseUrl``, ``resolveDeploymentName``), for
the cases the scripted fixtures cannot reach (real Azure hosts), and the registry line."""

from __future__ import annotations

import json
from collections.abc import Mapping

import attrs
import httpx
import pytest

from pitrio import Context, Model, ModelCost, StreamOptions, UserMessage
from pitrio.providers import get_api, stream_simple
from pitrio.providers._azure_openai_responses._payload import (
    build_request,
    deployment_name,
    resolve_endpoint,
)
from pitrio.providers._request import ProviderFailure


@pytest.fixture(autouse=True)
def _no_azure_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "AZURE_OPENAI_BASE_URL",
        "AZURE_OPENAI_RESOURCE_NAME",
        "AZURE_OPENAI_API_VERSION",
        "AZURE_OPENAI_DEPLOYMENT_NAME_MAP",
    ):
        monkeypatch.delenv(name, raising=False)


def _model(base_url: str = "") -> Model:
    return Model(
        id="gpt-5",
        api="azure-openai-responses",
        provider="azure-openai-responses",
        base_url=base_url,
    )


def _options(env: Mapping[str, str] | None = None, **extra: str) -> StreamOptions:
    values: dict[str, object] = dict(extra)
    if env is not None:
        values["env"] = dict(env)
    return StreamOptions(api_key="k", extra=values)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("https://res.openai.azure.com", "https://res.openai.azure.com/openai/v1"),
        ("https://res.openai.azure.com/", "https://res.openai.azure.com/openai/v1"),
        ("https://res.openai.azure.com/openai", "https://res.openai.azure.com/openai/v1"),
        (
            "https://res.cognitiveservices.azure.com/openai/v1/responses?x=1",
            "https://res.cognitiveservices.azure.com/openai/v1",
        ),
        ("https://proj.services.ai.azure.com/", "https://proj.services.ai.azure.com/openai/v1"),
        ("https://res.openai.azure.com/custom/", "https://res.openai.azure.com/custom"),
        ("https://gateway.example.com/", "https://gateway.example.com"),
    ],
)
def test_an_azure_host_gets_openai_v1(given: str, expected: str) -> None:
    assert resolve_endpoint(_model(), _options(azure_base_url=given)) == (expected, "v1")


def test_the_endpoint_comes_from_options_then_env_then_the_resource_then_the_model() -> None:
    model = _model("https://model.openai.azure.com")
    env = {"AZURE_OPENAI_BASE_URL": "https://env.openai.azure.com"}
    assert resolve_endpoint(model, _options(env, azure_base_url="https://opt.example.com"))[0] == (
        "https://opt.example.com"
    )
    assert resolve_endpoint(model, _options(env))[0] == "https://env.openai.azure.com/openai/v1"
    by_resource = _options({"AZURE_OPENAI_RESOURCE_NAME": "myres"})
    assert resolve_endpoint(model, by_resource)[0] == "https://myres.openai.azure.com/openai/v1"
    assert resolve_endpoint(model, _options(azure_resource_name="optres"))[0] == (
        "https://optres.openai.azure.com/openai/v1"
    )
    assert resolve_endpoint(model, _options())[0] == "https://model.openai.azure.com/openai/v1"


def test_the_api_version_comes_from_options_then_env() -> None:
    env = {"AZURE_OPENAI_API_VERSION": "2025-04-01-preview"}
    model = _model("https://r.openai.azure.com")
    assert resolve_endpoint(model, _options(env))[1] == "2025-04-01-preview"
    assert resolve_endpoint(model, _options(env, azure_api_version="v2"))[1] == "v2"


def test_the_process_environment_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AZURE_OPENAI_RESOURCE_NAME", "procres")
    monkeypatch.setenv("AZURE_OPENAI_DEPLOYMENT_NAME_MAP", "gpt-5=proc-dep")
    request = build_request(_model(), Context(messages=(UserMessage(content="hi"),)), _options())
    assert request.url == "https://procres.openai.azure.com/openai/v1/responses?api-version=v1"
    assert request.body["model"] == "proc-dep"
    assert request.headers["api-key"] == "k"
    assert "Authorization" not in request.headers


def test_the_deployment_option_wins_over_the_map() -> None:
    env = {"AZURE_OPENAI_DEPLOYMENT_NAME_MAP": "gpt-5=mapped"}
    assert deployment_name(_model(), _options(env)) == "mapped"
    assert deployment_name(_model(), _options(env, azure_deployment_name="given")) == "given"
    assert deployment_name(_model(), _options({"AZURE_OPENAI_DEPLOYMENT_NAME_MAP": "=x,y="})) == (
        "gpt-5"
    )


def test_no_base_url_is_pi_ais_error() -> None:
    with pytest.raises(ProviderFailure, match=r"^Azure OpenAI base URL is required\. Set "):
        resolve_endpoint(_model(), _options())


def test_a_base_url_that_is_no_url_is_named() -> None:
    with pytest.raises(ProviderFailure, match=r"^Invalid Azure OpenAI base URL: not a url$"):
        resolve_endpoint(_model(), _options(azure_base_url="not a url"))


async def test_a_configuration_error_ends_the_stream_as_data() -> None:
    """No endpoint anywhere: an error event with pi-ai's text, no request."""
    assert get_api("azure-openai-responses") is not None
    async with httpx.AsyncClient() as client:
        stream = stream_simple(
            client, _model(), Context(messages=(UserMessage(content="hi"),)), _options()
        )
        async with stream:
            events = [event async for event in stream]
            result = await stream.result()
    assert [e.type for e in events] == ["error"]
    assert result.stop_reason == "error"
    assert result.error_message is not None
    assert result.error_message.startswith("Azure OpenAI base URL is required.")


async def test_a_json_answer_and_sampling_params() -> None:
    """A server that answers the streaming request with a whole response object (read as
    on openai-responses); ``sampling_params`` go last into the body; the service tier
    the response names leaves the cost alone."""
    sent: list[httpx.Request] = []
    answer = {
        "object": "response",
        "id": "resp_1",
        "status": "completed",
        "service_tier": "priority",
        "output": [
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "Hi there", "annotations": []}],
            }
        ],
        "usage": {"input_tokens": 10, "output_tokens": 1_000_000, "total_tokens": 1_000_010},
    }

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json=answer)

    model = attrs.evolve(
        _model("https://r.openai.azure.com"), cost=ModelCost(input=0.0, output=2.0)
    )
    options = StreamOptions(api_key="k", sampling_params={"top_p": 0.5, "store": True})
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        stream = stream_simple(
            client, model, Context(messages=(UserMessage(content="hi"),)), options
        )
        async with stream:
            events = [event async for event in stream]
            result = await stream.result()
    assert events[-1].type == "done"
    assert result.text == "Hi there"
    assert result.usage.cost.output == 2.0  # no priority multiplier on Azure
    body = json.loads(sent[0].content)
    assert body["top_p"] == 0.5
    assert body["store"] is True
    assert str(sent[0].url) == "https://r.openai.azure.com/openai/v1/responses?api-version=v1"
