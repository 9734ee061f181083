"""google-vertex: the endpoints and credentials the scripted fixtures cannot reach (Google's
own hosts, the project path), the credentials file's failures, and the token cache, over a
local fake token endpoint (no network)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest

from pitrio import Context, Model, StreamOptions, UserMessage
from pitrio.providers import stream_simple
from pitrio.providers._google_vertex._auth import (
    TOKEN_URL,
    adc_path,
    clear_token_cache,
    fetch_access_token,
)
from pitrio.providers._google_vertex._payload import build_request, resolve_api_key, stream_url
from pitrio.providers._request import ProviderFailure

CATALOG_BASE = "https://{location}-aiplatform.googleapis.com"


@pytest.fixture(autouse=True)
def _no_vertex_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in (
        "GOOGLE_APPLICATION_CREDENTIALS",
        "GOOGLE_CLOUD_PROJECT",
        "GCLOUD_PROJECT",
        "GOOGLE_CLOUD_LOCATION",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    clear_token_cache()


def _model(base_url: str = CATALOG_BASE, model_id: str = "gemini-2.5-pro") -> Model:
    return Model(id=model_id, api="google-vertex", provider="google-vertex", base_url=base_url)


def _options(api_key: str | None = None, **env: str) -> StreamOptions:
    return StreamOptions(api_key=api_key, extra={"env": dict(env)})


def _context() -> Context:
    return Context(messages=(UserMessage(content="hi"),))


@pytest.mark.parametrize(
    ("api_key", "location", "url"),
    [
        ("k", "", "https://aiplatform.googleapis.com/v1/publishers/google/models/m"),
        (
            None,
            "us-central1",
            "https://us-central1-aiplatform.googleapis.com/v1/projects/p/locations/us-central1"
            "/publishers/google/models/m",
        ),
        (
            None,
            "global",
            "https://aiplatform.googleapis.com/v1/projects/p/locations/global"
            "/publishers/google/models/m",
        ),
        (
            None,
            "eu",
            "https://aiplatform.eu.rep.googleapis.com/v1/projects/p/locations/eu"
            "/publishers/google/models/m",
        ),
    ],
)
def test_the_sdks_endpoints(api_key: str | None, location: str, url: str) -> None:
    model = _model(model_id="m")
    assert stream_url(model, api_key, "p", location) == f"{url}:streamGenerateContent?alt=sse"


def test_model_ids_and_custom_base_urls() -> None:
    assert stream_url(_model("http://h/v1beta1/", "projects/x/m"), "k", "", "").startswith(
        "http://h/v1beta1/projects/x/m:"
    )
    assert stream_url(_model("http://h/api", "anthropic/claude"), None, "p", "l").startswith(
        "http://h/api/v1/publishers/anthropic/models/claude:"
    )
    tuned = stream_url(_model(model_id="projects/p/locations/l/endpoints/e"), None, "p", "l")
    assert tuned.startswith("https://l-aiplatform.googleapis.com/v1/projects/p/locations/l/end")
    with pytest.raises(ValueError, match="invalid model parameter"):
        stream_url(_model(model_id="../x"), "k", "", "")


def test_placeholder_keys_mean_adc() -> None:
    assert resolve_api_key(_options(" key ")) == "key"
    for marker in (None, "", "  ", "gcp-vertex-credentials", "<authenticated>"):
        assert resolve_api_key(_options(marker)) is None


def test_project_and_location_from_options_then_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GCLOUD_PROJECT", "proc-project")
    monkeypatch.setenv("GOOGLE_CLOUD_LOCATION", "proc-loc")
    request = build_request(_model(), _context(), _options())
    assert request.adc
    assert "/projects/proc-project/locations/proc-loc/" in request.url
    assert "x-goog-api-key" not in request.headers
    scoped = StreamOptions(
        extra={"env": {"GOOGLE_CLOUD_PROJECT": "env-p"}, "location": "opt-l", "project": ""}
    )
    assert "/projects/env-p/locations/opt-l/" in build_request(_model(), _context(), scoped).url
    with_key = build_request(_model(), _context(), _options("k"))
    assert not with_key.adc
    assert with_key.headers["x-goog-api-key"] == "k"


def test_no_project_is_pi_ais_error() -> None:
    with pytest.raises(ProviderFailure, match=r"^Vertex AI requires a project ID\."):
        build_request(_model(), _context(), _options(GOOGLE_CLOUD_LOCATION="l"))


def test_the_default_credentials_file_is_gclouds(tmp_path: Path) -> None:
    expected = tmp_path / "home" / ".config" / "gcloud" / "application_default_credentials.json"
    assert adc_path(_options()) == expected
    assert adc_path(_options(GOOGLE_APPLICATION_CREDENTIALS="/x/sa.json")) == Path("/x/sa.json")


class _TokenServer:
    """A fake OAuth token endpoint (an httpx mock transport: no network)."""

    def __init__(self, *responses: httpx.Response) -> None:
        self.responses = list(responses)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.responses.pop(0)


def _token(token: str = "ya29.t", expires_in: int = 3600) -> httpx.Response:
    return httpx.Response(200, json={"access_token": token, "expires_in": expires_in})


def _write(tmp_path: Path, content: Mapping[str, Any] | str) -> StreamOptions:
    path = tmp_path / "adc.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content), "utf-8")
    return _options(GOOGLE_APPLICATION_CREDENTIALS=str(path))


USER = {"type": "authorized_user", "client_id": "c", "client_secret": "s", "refresh_token": "r"}


async def test_an_authorized_user_token_is_fetched_once_and_kept(tmp_path: Path) -> None:
    server = _TokenServer(_token("first"), _token("second"))
    options = _write(tmp_path, USER)
    async with httpx.AsyncClient(transport=httpx.MockTransport(server)) as client:
        first = await fetch_access_token(client, options)
        again = await fetch_access_token(client, options)
    assert first.headers() == {"Authorization": "Bearer first"}
    assert again is first
    assert len(server.requests) == 1
    request = server.requests[0]
    assert str(request.url) == TOKEN_URL
    assert (
        request.content == b"refresh_token=r&client_id=c&client_secret=s&grant_type=refresh_token"
    )
    assert request.extensions["timeout"]["read"] == 600.0  # StreamOptions.timeout's default


async def test_the_token_request_takes_the_streams_timeout(tmp_path: Path) -> None:
    server = _TokenServer(_token())
    options = attrs.evolve(_write(tmp_path, USER), timeout=7.5)
    async with httpx.AsyncClient(transport=httpx.MockTransport(server)) as client:
        await fetch_access_token(client, options)
    assert server.requests[0].extensions["timeout"] == {
        "connect": 7.5,
        "read": 7.5,
        "write": 7.5,
        "pool": 7.5,
    }


async def test_a_token_about_to_expire_is_fetched_again(tmp_path: Path) -> None:
    server = _TokenServer(_token("short", expires_in=60), _token("fresh"))
    options = _write(tmp_path, USER)
    async with httpx.AsyncClient(transport=httpx.MockTransport(server)) as client:
        await fetch_access_token(client, options)
        token = await fetch_access_token(client, options)
    assert token.token == "fresh"
    assert len(server.requests) == 2


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, r"^The credentials file .*missing\.json cannot be read: No such file"),
        ("gcloud", r"^Could not load the default credentials\."),
        ("{nope", r"is not JSON"),
        ("[1]", r"is not a JSON object"),
        ({"type": "external_account"}, r"^Unsupported credentials type 'external_account'"),
        ({"type": "authorized_user", "client_id": "c"}, r"has no refresh_token field"),
        (
            {"type": "service_account", "client_email": "e", "private_key": "junk"},
            r"^The private key of .* cannot be read",
        ),
    ],
)
async def test_unusable_credentials_are_named(
    tmp_path: Path, content: Mapping[str, Any] | str | None, message: str
) -> None:
    if content is None:
        options = _options(GOOGLE_APPLICATION_CREDENTIALS=str(tmp_path / "missing.json"))
    elif content == "gcloud":  # no variable, and no file at gcloud's place under $HOME
        options = _options()
    else:
        options = _write(tmp_path, content)
    async with httpx.AsyncClient(transport=httpx.MockTransport(_TokenServer())) as client:
        with pytest.raises(ProviderFailure, match=message):
            await fetch_access_token(client, options)


@pytest.mark.parametrize(
    ("response", "message"),
    [
        (
            httpx.Response(400, json={"error": "invalid_grant", "error_description": "Bad"}),
            r"^invalid_grant$",
        ),
        (
            httpx.Response(401, json={"error": {"code": 401, "message": "bad key"}}),
            r"^bad key$",
        ),
        (httpx.Response(502, text="gateway down"), r"\(502\): gateway down$"),
        (httpx.Response(200, json={"token_type": "Bearer"}), r"without an access_token$"),
    ],
)
async def test_a_token_endpoint_refusal_is_named(
    tmp_path: Path, response: httpx.Response, message: str
) -> None:
    options = _write(tmp_path, USER)
    async with httpx.AsyncClient(transport=httpx.MockTransport(_TokenServer(response))) as client:
        with pytest.raises(ProviderFailure, match=message):
            await fetch_access_token(client, options)


async def test_an_unreachable_token_endpoint_ends_the_stream_as_data(tmp_path: Path) -> None:
    """The token request fails before the stream request: one error event, no start."""

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    options = _write(tmp_path, {**USER, "token_uri": "http://127.0.0.1:9/token"})
    options.extra["env"] = {
        **options.extra["env"],
        "GOOGLE_CLOUD_PROJECT": "p",
        "GOOGLE_CLOUD_LOCATION": "l",
    }
    async with httpx.AsyncClient(transport=httpx.MockTransport(refuse)) as client:
        stream = stream_simple(client, _model(), _context(), options)
        async with stream:
            events = [event async for event in stream]
            result = await stream.result()
    assert [e.type for e in events] == ["error"]
    assert result.stop_reason == "error"
    assert (result.error_message or "").startswith("Request to the Google token endpoint failed")
