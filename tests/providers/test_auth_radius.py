"""Radius against a fake gateway on 127.0.0.1: the browser and device-code logins send
pi-ai's client id, scope and parameters (``oauth/radius.js``), ``/v1/config`` gives the
models, which are kept in ``models-store.json`` and registered by ``Models`` as
``radius/<id>`` speaking ``pi-messages``, and a request carries the stored token."""

from __future__ import annotations

import json
import os
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from pitrio import Context, UserMessage
from pitrio.providers import Models
from pitrio.providers._auth._radius import (
    GatewayConfig,
    RadiusOAuth,
    load_gateway_config,
    model_from_json,
    normalize_gateway_url,
    read_stored_models,
    refresh_gateway_models,
)
from pitrio.providers._auth._resolve import oauth_providers, set_oauth_flow
from pitrio.providers.auth import AuthError, AuthFile, LoginError, OAuthCredential, login

from ._fake_oauth import FakeOAuthServer, Request, browser_get
from .test_auth_flows import Person, s256

MODEL = {
    "id": "claude-x",
    "name": "Claude X",
    "reasoning": True,
    "input": ["text", "image"],
    "cost": {"input": 3, "output": 15, "cacheRead": 0.3, "cacheWrite": 3.75},
    "contextWindow": 200000,
    "maxTokens": 64000,
    "thinkingLevelMap": {"off": None},
}


@pytest.fixture
async def server(nursery: trio.Nursery) -> FakeOAuthServer:
    fake = FakeOAuthServer()
    await nursery.start(fake.serve)
    return fake


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=None) as http:
        yield http


def _tokens(access: str = "at-1") -> dict[str, Any]:
    return {"access_token": access, "refresh_token": "rt-1", "expires_in": 3600, "scope": "gateway"}


def _gateway(server: FakeOAuthServer, seen: list[str]) -> None:
    def config(request: Request) -> tuple[int, object]:
        seen.append(request.headers.get("authorization", ""))
        if request.headers.get("authorization") != "Bearer at-1":
            return 401, {"error": "unauthorized"}
        bad = {"id": "no-window", "name": "x", "reasoning": False, "input": [], "cost": {}}
        return 200, {"baseUrl": f"{server.url}/v1", "models": [MODEL, bad, "junk"]}

    def messages(request: Request) -> tuple[int, object]:
        seen.append(request.headers.get("authorization", ""))
        seen.append(json.dumps(request.json()["model"]))
        events = [
            {"type": "start"},
            {"type": "text_start", "contentIndex": 0},
            {"type": "text_delta", "contentIndex": 0, "delta": "hi"},
            {"type": "text_end", "contentIndex": 0, "content": "hi"},
            {"type": "done", "reason": "stop", "usage": {"input": 1, "output": 1}},
        ]
        return 200, b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events)

    server.route("GET", "/v1/config", config)
    server.route("POST", "/v1/messages", messages)


async def test_browser_login_then_the_gateways_models_serve_a_request(
    server: FakeOAuthServer, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    """Discovery, the authorize URL with pi-ai's parameters, a forged state refused,
    the code exchanged with the PKCE verifier; then ``/v1/config`` with the token, the
    models kept and registered, and a ``pi-messages`` request with the stored token."""
    seen: list[str] = []
    _gateway(server, seen)
    server.route("GET", "/v1/oauth", lambda _: (200, {"authorizationEndpoint": f"{server.url}/ui"}))
    server.route("POST", "/v1/oauth/token", lambda _: (200, _tokens()))
    flow = RadiusOAuth(gateway=server.url, callback_port=0)
    person = Person(["browser"])
    store = AuthFile(tmp_path / "auth.json")
    previous = set_oauth_flow("radius", flow)
    try:
        async with trio.open_nursery() as nursery:
            result: list[OAuthCredential] = []

            async def run() -> None:
                result.append(await login("radius", store, client, person))

            nursery.start_soon(run)
            shown = await person.next_event("auth_url")
            parts = urllib.parse.urlsplit(shown.url)
            params = dict(urllib.parse.parse_qsl(parts.query))
            assert shown.url.startswith(f"{server.url}/ui?")
            assert shown.instructions == "Continue in your browser."
            redirect = params["redirect_uri"]
            assert redirect.startswith("http://127.0.0.1:")
            assert redirect.endswith("/oauth/callback")
            assert params["client_id"] == "pi-gateway"
            assert params["scope"] == "gateway offline_access"
            assert params["response_type"] == "code"
            assert params["handoff"] == "url"
            assert params["code_challenge_method"] == "S256"
            status, page = await browser_get(f"{redirect}?code=c&state=forged")
            assert status == 400
            assert "state mismatch" in page
            status, _ = await browser_get(f"{redirect}?code=c&state={params['state']}")
            assert status == 200
        assert person.prompts[0].kind == "select"
        assert [o for o, _ in person.prompts[0].options] == ["browser", "device-code"]
        exchange = server.requests[-1].form()
        assert exchange["grant_type"] == "authorization_code"
        assert exchange["redirect_uri"] == redirect
        assert exchange["code"] == "c"
        assert s256(exchange["code_verifier"]) == params["code_challenge"]
        credential = result[0]
        assert credential.access == "at-1"
        assert credential.extra == {"scope": "gateway"}
        stored = json.loads((tmp_path / "auth.json").read_text())["radius"]
        assert stored["type"] == "oauth"
        assert stored["access"] == "at-1"

        path = str(tmp_path / "models-store.json")
        models = await refresh_gateway_models(client, credential.access, path, gateway=server.url)
        assert [m.id for m in models] == ["claude-x"]  # the entries that are not models: out
        kept = json.loads(await trio.Path(path).read_text())["radius"]
        assert kept["models"][0]["api"] == "pi-messages"
        assert kept["models"][0]["baseUrl"] == f"{server.url}/v1"
        assert isinstance(kept["checkedAt"], int)
        assert os.stat(path).st_mode & 0o777 == 0o600

        env = {"PI_CODING_AGENT_DIR": str(tmp_path), "HOME": str(tmp_path)}
        async with Models(env=env, credentials=store, client=client) as registry:
            model = registry.get("radius", "claude-x")
            assert model is not None
            assert model.api == "pi-messages"
            assert model.cost.cache_write == 3.75
            assert model.context_window == 200000
            assert [m.id for m in registry.list("radius")] == ["claude-x"]
            context = Context(messages=[UserMessage(content="hello")])
            stream = registry.stream_simple(model, context)
            async with stream:
                async for _ in stream:
                    pass
            message = await stream.result()
        assert message.stop_reason == "stop", message.error_message
        assert seen == ["Bearer at-1", "Bearer at-1", '"claude-x"']
    finally:
        set_oauth_flow("radius", previous)


async def test_device_code_login_polls_and_refresh_exchanges_the_token(
    server: FakeOAuthServer, client: httpx.AsyncClient, autojump_clock: trio.abc.Clock
) -> None:
    """Device authorization with pi-ai's client id and scope, pending then slow_down
    then tokens; the refresh grant; a refused refresh is pi-ai's text."""
    answers = [
        (400, {"error": "authorization_pending"}),
        (400, {"error": "slow_down"}),
        (200, _tokens("at-2")),
    ]
    server.route(
        "POST",
        "/v1/oauth/device",
        lambda _: (
            200,
            {
                "device_code": "dc",
                "user_code": "ABCD",
                "verification_uri": f"{server.url}/device",
                "expires_in": 600,
                "interval": 2,
            },
        ),
    )
    server.route("POST", "/v1/oauth/token", lambda _: answers.pop(0))
    flow = RadiusOAuth(gateway=server.url)
    person = Person(["device-code"])
    credential = await flow.login(client, person)
    assert credential.access == "at-2"
    event = next(e for e in person.events if e.kind == "device_code")
    assert (event.user_code, event.url, event.interval_seconds) == (
        "ABCD",
        f"{server.url}/device",
        2,
    )
    device = server.requests[0].form()
    assert device == {"client_id": "pi-gateway", "scope": "gateway offline_access"}
    polls = [r.form() for r in server.requests[1:]]
    assert all(p["grant_type"] == "urn:ietf:params:oauth:grant-type:device_code" for p in polls)
    assert all(p["device_code"] == "dc" for p in polls)
    assert len(polls) == 3

    answers.append((200, _tokens("at-3")))
    refreshed = await flow.refresh(client, credential)
    assert refreshed.access == "at-3"
    assert server.requests[-1].form() == {
        "grant_type": "refresh_token",
        "client_id": "pi-gateway",
        "refresh_token": "rt-1",
    }
    answers.append((400, {"error": "invalid_grant", "error_description": "revoked"}))
    with pytest.raises(LoginError, match=r"token request failed: invalid_grant: revoked"):
        await flow.refresh(client, credential)
    answers.append((400, {"error": "access_denied"}))
    with pytest.raises(LoginError, match="Device authorization was denied"):
        await flow.login(client, Person(["device-code"]))


async def test_bad_answers_are_clear_errors(
    server: FakeOAuthServer, client: httpx.AsyncClient
) -> None:
    """A device answer with a ``file:`` URL, a discovery without an endpoint, a
    config that is not one, an unknown sign-in method: each a named error."""
    server.route(
        "POST",
        "/v1/oauth/device",
        lambda _: (
            200,
            {
                "device_code": "d",
                "user_code": "u",
                "verification_uri": "file:///x",
                "expires_in": 5,
            },
        ),
    )
    server.route("GET", "/v1/oauth", lambda _: (200, {"authorizationEndpoint": 3}))
    server.route("GET", "/v1/config", lambda _: (200, {"models": []}))
    flow = RadiusOAuth(gateway=server.url, callback_port=0)
    with pytest.raises(LoginError, match="Untrusted verification URI"):
        await flow.login(client, Person(["device-code"]))
    with pytest.raises(LoginError, match=f"Invalid Radius OAuth config from {server.url}"):
        await flow.login(client, Person(["browser"]))
    with pytest.raises(LoginError, match="Unknown Radius sign-in method: other"):
        await flow.login(client, Person(["other"]))
    with pytest.raises(AuthError, match=f"Invalid Radius config from {server.url}"):
        await load_gateway_config(client, server.url, None)
    server.route("GET", "/v1/config", lambda _: (503, b"down"))
    with pytest.raises(AuthError, match=r"Could not load Radius config from .*: 503: down"):
        await load_gateway_config(client, server.url, "k")


async def test_login_error_callback_ends_the_login(
    server: FakeOAuthServer, client: httpx.AsyncClient
) -> None:
    """The browser says ``error=access_denied``: the page shows it and the login ends
    with pi-ai's text."""
    server.route("GET", "/v1/oauth", lambda _: (200, {"authorizationEndpoint": f"{server.url}/ui"}))
    flow = RadiusOAuth(gateway=server.url, callback_port=0)
    person = Person(["browser"])
    failures: list[str] = []
    async with trio.open_nursery() as nursery:

        async def deny() -> None:
            shown = await person.next_event("auth_url")
            params = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(shown.url).query))
            status, page = await browser_get(
                f"{params['redirect_uri']}?error=access_denied&state={params['state']}"
            )
            assert status == 400
            assert "access_denied" in page

        nursery.start_soon(deny)
        try:
            await flow.login(client, person)
        except LoginError as exc:
            failures.append(str(exc))
    assert failures == ["OAuth callback did not complete."]


def test_stored_models_and_names(tmp_path: Path) -> None:
    """A broken or foreign ``models-store.json`` registers nothing; URLs are normalised
    as pi-ai does; Radius is among the logins."""
    path = tmp_path / "models-store.json"
    assert read_stored_models(str(path)) == []
    path.write_text("{not json")
    assert read_stored_models(str(path)) == []
    entry = {**MODEL, "api": "pi-messages", "provider": "radius", "baseUrl": "https://g/v1"}
    other = {**entry, "provider": "elsewhere"}
    path.write_text(json.dumps({"radius": {"models": [entry, other, 5], "checkedAt": 1}}))
    [model] = read_stored_models(str(path))
    assert (model.provider, model.base_url, model.reasoning) == ("radius", "https://g/v1", True)
    assert model.thinking_level_map == {"off": None}
    assert normalize_gateway_url("radius.example/") == "https://radius.example"
    assert normalize_gateway_url("HTTP://a:1//") == "HTTP://a:1"
    config = GatewayConfig(base_url="https://b", models=(MODEL,))
    assert model_from_json(config.model_entries("mine")[0]).provider == "mine"
    assert oauth_providers()["radius"] == "Radius"


async def test_failures_of_the_gateway_are_named(tmp_path: Path) -> None:
    """Unreachable, a non-JSON refusal, a token answer without tokens, a device answer
    without its fields, a callback on another path or without a code, a long error
    body cut, a config that is not JSON, a broken models-store replaced on write."""
    answers: list[httpx.Response | Exception] = []

    def answer(request: httpx.Request) -> httpx.Response:
        nxt = answers.pop(0)
        if isinstance(nxt, Exception):
            raise nxt
        return nxt

    flow = RadiusOAuth(gateway="gw.example/", callback_port=0)
    assert flow.url() == "https://gw.example"
    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        answers.append(httpx.ConnectError("refused"))
        with pytest.raises(LoginError, match="ConnectError: refused"):
            await flow.refresh(client, OAuthCredential(access="a", refresh="r", expires=0))
        answers.append(httpx.Response(500, text="gateway down"))
        with pytest.raises(LoginError, match=r"token request failed: gateway down$"):
            await flow.refresh(client, OAuthCredential(access="a", refresh="r", expires=0))
        answers.append(httpx.Response(500))
        with pytest.raises(LoginError, match=r"token request failed: 500$"):
            await flow.refresh(client, OAuthCredential(access="a", refresh="r", expires=0))
        answers.append(httpx.Response(200, json={"access_token": "a"}))
        with pytest.raises(LoginError, match="missing required fields"):
            await flow.refresh(client, OAuthCredential(access="a", refresh="r", expires=0))
        answers.append(httpx.Response(200, json={"device_code": "d"}))
        with pytest.raises(LoginError, match="device authorization response is missing"):
            await flow.login(client, Person(["device-code"]))
        answers.append(httpx.Response(404, text="no"))
        with pytest.raises(LoginError, match=r"Could not load Radius OAuth config .*: 404 no"):
            await flow.login(client, Person(["browser"]))
        answers.append(httpx.ConnectError("dns"))
        with pytest.raises(LoginError, match="ConnectError: dns"):
            await flow.login(client, Person(["browser"]))
        answers.append(httpx.ConnectError("dns"))
        with pytest.raises(AuthError, match=r"Could not load Radius config .*ConnectError: dns"):
            await load_gateway_config(client, "gw.example", None)
        answers.append(httpx.Response(502, text="x" * 600))
        with pytest.raises(AuthError, match=r": 502: x{512}…$"):
            await load_gateway_config(client, "gw.example", None)
        answers.append(httpx.Response(200, text="<html>"))
        with pytest.raises(AuthError, match="Invalid Radius config"):
            await load_gateway_config(client, "gw.example", None)
        answers.append(httpx.Response(200, json={"authorizationEndpoint": "https://gw.example/ui"}))
        person = Person(["browser"])
        async with trio.open_nursery() as nursery:
            nursery.start_soon(flow.login, client, person)
            shown = await person.next_event("auth_url")
            params = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(shown.url).query))
            redirect = params["redirect_uri"]
            assert (await browser_get(redirect.replace("/oauth/callback", "/x")))[0] == 404
            missing = await browser_get(f"{redirect}?state={params['state']}")
            assert missing[0] == 400
            assert "Missing authorization code" in missing[1]
            nursery.cancel_scope.cancel()
    path = tmp_path / "models-store.json"
    path.write_text("[broken")
    from pitrio.providers._auth._radius import write_stored_models

    await write_stored_models(str(path), "radius", [], checked_at=5)
    assert json.loads(path.read_text()) == {"radius": {"models": [], "checkedAt": 5}}
