"""The subscription logins against a fake OAuth server on 127.0.0.1: each flow sends
pi-ai's endpoints, client ids, scopes and parameters, checks the callback's state, and
its refresh gives new tokens (pi-ai 0.85.0's ``auth/oauth/*.js``)."""

from __future__ import annotations

import base64
import hashlib
import json
import math
import urllib.parse
from collections.abc import AsyncIterator, Sequence

import httpx
import pytest
import trio

from pitrio.providers._auth._anthropic import AnthropicOAuth
from pitrio.providers._auth._codex import CodexOAuth, account_id
from pitrio.providers._auth._copilot import CopilotOAuth, copilot_base_url, parse_model_catalog
from pitrio.providers._auth._device import KimiOAuth, XaiOAuth
from pitrio.providers._auth._flow import parse_authorization_input
from pitrio.providers._auth._openrouter import OpenRouterOAuth
from pitrio.providers.auth import AuthEvent, AuthPrompt, LoginError, OAuthCredential

from ._fake_oauth import FakeOAuthServer, Request, browser_get


class Person:
    """A scripted person: answers prompts in order (``None``: never answer, as someone
    who lets the browser finish) and collects the login's events."""

    def __init__(self, answers: Sequence[str | None] = ()) -> None:
        self.answers = list(answers)
        self.prompts: list[AuthPrompt] = []
        self.events: list[AuthEvent] = []
        self._send, self._receive = trio.open_memory_channel[AuthEvent](math.inf)

    async def prompt(self, prompt: AuthPrompt) -> str:
        self.prompts.append(prompt)
        answer = self.answers.pop(0) if self.answers else None
        if answer is None:
            await trio.sleep_forever()
        await trio.lowlevel.checkpoint()
        assert answer is not None
        return answer

    def notify(self, event: AuthEvent) -> None:
        self.events.append(event)
        self._send.send_nowait(event)

    async def next_event(self, kind: str) -> AuthEvent:
        async for event in self._receive:
            if event.kind == kind:
                return event
        raise AssertionError(kind)


@pytest.fixture
async def server(nursery: trio.Nursery) -> FakeOAuthServer:
    fake = FakeOAuthServer()
    await nursery.start(fake.serve)
    return fake


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=None) as http:
        yield http


def jwt(claims: object) -> str:
    """An unsigned JWT carrying ``claims`` (the flows only read the payload)."""
    payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"eyJhbGciOiJub25lIn0.{payload}.sig"


def s256(verifier: str) -> str:
    digest = hashlib.sha256(verifier.encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def query_of(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in urllib.parse.parse_qs(urllib.parse.urlsplit(url).query).items()}


# -- Anthropic ------------------------------------------------------------------------


async def test_anthropic_login_checks_the_callback_state_then_exchanges_the_code(
    server: FakeOAuthServer, client: httpx.AsyncClient
) -> None:
    """The authorize URL has pi-ai's parameters; a callback with another state is
    refused (400, CSRF) and the login waits on; the right one is exchanged as JSON."""
    server.route(
        "POST",
        "/v1/oauth/token",
        lambda r: (
            200,
            {"access_token": "sk-ant-oat-1", "refresh_token": "r1", "expires_in": 3600},
        ),
    )
    flow = AnthropicOAuth(token_url=f"{server.url}/v1/oauth/token", callback_port=0)
    person = Person([None])
    result: list[OAuthCredential] = []
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                result.append(await flow.login(client, person))

            nursery.start_soon(run)
            event = await person.next_event("auth_url")
            assert event.url.startswith("https://claude.ai/oauth/authorize?")
            params = query_of(event.url)
            assert params["client_id"] == "9d1c250a-e61b-44d9-88ed-5944d1962f5e"
            assert params["scope"] == (
                "org:create_api_key user:profile user:inference user:sessions:claude_code "
                "user:mcp_servers user:file_upload"
            )
            assert params["code"] == "true"
            assert params["response_type"] == "code"
            assert params["code_challenge_method"] == "S256"
            state = params["state"]
            assert params["code_challenge"] == s256(state)  # the verifier is the state
            redirect = params["redirect_uri"]
            assert redirect.startswith("http://localhost:")
            assert redirect.endswith("/callback")
            local = redirect.replace("localhost", "127.0.0.1")
            status, page = await browser_get(f"{local}?code=evil&state=forged")
            assert status == 400
            assert "State mismatch." in page
            status, page = await browser_get(f"{local}?error=access_denied")
            assert status == 400
            assert "Error: access_denied" in page
            status, page = await browser_get(f"{local}?code=the-code&state={state}")
            assert status == 200
            assert "Anthropic authentication completed" in page
    (credential,) = result
    assert credential.access == "sk-ant-oat-1"
    assert credential.refresh == "r1"
    assert person.prompts[0].kind == "manual_code"
    (token,) = server.requests
    assert token.headers["content-type"] == "application/json"
    assert token.json() == {
        "grant_type": "authorization_code",
        "client_id": "9d1c250a-e61b-44d9-88ed-5944d1962f5e",
        "code": "the-code",
        "state": state,
        "redirect_uri": redirect,
        "code_verifier": state,
    }
    assert [e.kind for e in person.events] == ["auth_url", "progress"]


async def test_anthropic_login_takes_a_pasted_code_but_not_a_forged_state(
    server: FakeOAuthServer, client: httpx.AsyncClient
) -> None:
    """A pasted ``code#state`` works when the state is the login's; another state is
    ``OAuth state mismatch``."""
    server.route(
        "POST",
        "/v1/oauth/token",
        lambda r: (200, {"access_token": "a", "refresh_token": "r", "expires_in": 60}),
    )
    flow = AnthropicOAuth(token_url=f"{server.url}/v1/oauth/token", callback_port=0)
    with trio.fail_after(10):
        person = Person(["pasted-code#forged-state"])
        with pytest.raises(LoginError, match=r"^OAuth state mismatch$"):
            await flow.login(client, person)
        assert server.requests == []

        class Paster(Person):
            async def prompt(self, prompt: AuthPrompt) -> str:
                await trio.lowlevel.checkpoint()
                state = query_of(self.events[0].url)["state"]
                return f"http://localhost:53692/callback?code=pasted&state={state}"

        credential = await flow.login(client, Paster())
    assert server.requests[0].json()["code"] == "pasted"
    assert credential.access == "a"


async def test_anthropic_refresh_and_its_failure(
    server: FakeOAuthServer, client: httpx.AsyncClient
) -> None:
    """The refresh posts pi-ai's body; an HTTP error is pi-ai's text with the status."""
    answers = [
        (200, {"access_token": "new", "refresh_token": "r2", "expires_in": 3600}),
        (400, {"error": "invalid_grant"}),
    ]
    server.route("POST", "/v1/oauth/token", lambda r: answers.pop(0))
    flow = AnthropicOAuth(token_url=f"{server.url}/v1/oauth/token")
    old = OAuthCredential(access="old", refresh="r1", expires=0)
    fresh = await flow.refresh(client, old)
    assert (fresh.access, fresh.refresh) == ("new", "r2")
    assert server.requests[0].json() == {
        "grant_type": "refresh_token",
        "client_id": "9d1c250a-e61b-44d9-88ed-5944d1962f5e",
        "refresh_token": "r1",
    }
    with pytest.raises(LoginError, match=r"Anthropic token refresh request failed.*status=400"):
        await flow.refresh(client, fresh)
    assert flow.to_auth(fresh).api_key == "new"


# -- ChatGPT Codex --------------------------------------------------------------------

CODEX_ACCESS = jwt({"https://api.openai.com/auth": {"chatgpt_account_id": "acct-7"}})


def codex_tokens(request: Request) -> tuple[int, object]:
    return 200, {"access_token": CODEX_ACCESS, "refresh_token": "cr", "expires_in": 864000}


@pytest.mark.timeout(20)
async def test_codex_browser_login_refuses_a_forged_state(
    server: FakeOAuthServer, client: httpx.AsyncClient
) -> None:
    """Browser login: pi-ai's authorize parameters; the callback's state is checked; the
    code is exchanged form-encoded and the account id is read from the token."""
    server.route("POST", "/oauth/token", codex_tokens)
    flow = CodexOAuth(auth_base_url=server.url, callback_port=0)
    person = Person(["browser", None])
    result: list[OAuthCredential] = []
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                result.append(await flow.login(client, person))

            nursery.start_soon(run)
            event = await person.next_event("auth_url")
            assert event.url.startswith(f"{server.url}/oauth/authorize?")
            params = query_of(event.url)
            assert params["client_id"] == "app_EMoamEEZ73f0CkXaXp7hrann"
            assert params["scope"] == "openid profile email offline_access"
            assert params["id_token_add_organizations"] == "true"
            assert params["codex_cli_simplified_flow"] == "true"
            assert params["originator"] == "pi"
            assert len(params["state"]) == 32
            local = params["redirect_uri"].replace("localhost", "127.0.0.1")
            assert local.endswith("/auth/callback")
            # a connection that never sends (a browser's preconnect) holds nothing up
            port = int(urllib.parse.urlsplit(local).port or 0)
            silent = await trio.open_tcp_stream("127.0.0.1", port)
            status, page = await browser_get(f"{local}?code=x&state=forged")
            assert status == 400
            assert "State mismatch." in page
            status, _ = await browser_get(local.replace("/auth/callback", "/other"))
            assert status == 404
            status, _ = await browser_get(f"{local}?code=good&state={params['state']}")
            assert status == 200
            await silent.aclose()
    (credential,) = result
    assert credential.extra == {"accountId": "acct-7"}
    form = server.requests[0].form()
    assert form["grant_type"] == "authorization_code"
    assert form["code"] == "good"
    assert form["redirect_uri"] == params["redirect_uri"]
    assert s256(form["code_verifier"]) == params["code_challenge"]


async def test_codex_device_code_login_polls_until_authorised(
    server: FakeOAuthServer, client: httpx.AsyncClient, autojump_clock: trio.abc.Clock
) -> None:
    """Device login: 403 and ``deviceauth_authorization_pending`` mean wait, ``slow_down``
    waits 5 s more; the answer's code and verifier are exchanged with the device redirect."""
    server.route(
        "POST",
        "/api/accounts/deviceauth/usercode",
        lambda r: (200, {"device_auth_id": "dev-1", "user_code": "ABCD-1234", "interval": "2"}),
    )
    polls = [
        (403, {}),
        (400, {"error": {"code": "deviceauth_authorization_pending"}}),
        (400, {"error": "slow_down"}),
        (200, {"authorization_code": "ac", "code_verifier": "cv"}),
    ]
    times: list[float] = []

    def poll(request: Request) -> tuple[int, object]:
        times.append(trio.current_time())
        return polls.pop(0)

    server.route("POST", "/api/accounts/deviceauth/token", poll)
    server.route("POST", "/oauth/token", codex_tokens)
    person = Person(["device_code"])
    start = trio.current_time()
    credential = await CodexOAuth(auth_base_url=server.url).login(client, person)
    assert credential.extra["accountId"] == "acct-7"
    (event,) = person.events
    assert (event.kind, event.user_code, event.url) == (
        "device_code",
        "ABCD-1234",
        f"{server.url}/codex/device",
    )
    assert [round(t - start) for t in times] == [0, 2, 4, 11]
    assert server.requests[0].json() == {"client_id": "app_EMoamEEZ73f0CkXaXp7hrann"}
    assert server.requests[1].json() == {"device_auth_id": "dev-1", "user_code": "ABCD-1234"}
    exchange = server.requests[-1].form()
    assert exchange["redirect_uri"] == f"{server.url}/deviceauth/callback"
    assert (exchange["code"], exchange["code_verifier"]) == ("ac", "cv")


async def test_codex_refresh_needs_an_account_id(
    server: FakeOAuthServer, client: httpx.AsyncClient
) -> None:
    """The refresh is form-encoded; a token without the account claim is refused."""
    answers = [
        (200, {"access_token": CODEX_ACCESS, "refresh_token": "cr2", "expires_in": 10}),
        (200, {"access_token": "not-a-jwt", "refresh_token": "cr3", "expires_in": 10}),
        (401, {"error": "invalid_grant"}),
    ]
    server.route("POST", "/oauth/token", lambda r: answers.pop(0))
    flow = CodexOAuth(auth_base_url=server.url)
    old = OAuthCredential(access="x", refresh="cr1", expires=0)
    fresh = await flow.refresh(client, old)
    assert fresh.refresh == "cr2"
    assert server.requests[0].form() == {
        "grant_type": "refresh_token",
        "refresh_token": "cr1",
        "client_id": "app_EMoamEEZ73f0CkXaXp7hrann",
    }
    with pytest.raises(LoginError, match=r"^Failed to extract accountId from token$"):
        await flow.refresh(client, fresh)
    with pytest.raises(LoginError, match=r"^OpenAI Codex token refresh failed \(401\): "):
        await flow.refresh(client, fresh)
    assert account_id(jwt({})) is None


# -- GitHub Copilot -------------------------------------------------------------------

COPILOT_TOKEN = "tid=1;exp=99;proxy-ep=proxy.enterprise.githubcopilot.com;sku=x"


async def test_copilot_login_exchanges_the_github_token_and_enables_models(
    server: FakeOAuthServer, client: httpx.AsyncClient, autojump_clock: trio.abc.Clock
) -> None:
    """Device flow with ``read:user`` (after one interval), the GitHub token exchanged
    for a Copilot token with the editor headers, the models listed and the ``unconfigured``
    ones enabled; the request auth is the token and its ``proxy-ep`` endpoint."""
    server.route(
        "POST",
        "/login/device/code",
        lambda r: (
            200,
            {
                "device_code": "dc",
                "user_code": "WXYZ",
                "verification_uri": "https://github.com/login/device",
                "interval": 1,
                "expires_in": 900,
            },
        ),
    )
    polls = [(200, {"error": "authorization_pending"}), (200, {"access_token": "gho_1"})]
    server.route("POST", "/login/oauth/access_token", lambda r: polls.pop(0))
    server.route(
        "GET",
        "/copilot_internal/v2/token",
        lambda r: (200, {"token": COPILOT_TOKEN, "expires_at": 2_000_000_000}),
    )
    server.route(
        "GET",
        "/models",
        lambda r: (
            200,
            {
                "data": [
                    {"id": "gpt-4o", "model_picker_enabled": True, "policy": {"state": "enabled"}},
                    {
                        "id": "claude-sonnet-4.6",
                        "model_picker_enabled": True,
                        "policy": {"state": "unconfigured"},
                    },
                    {
                        "id": "no-tools",
                        "model_picker_enabled": True,
                        "capabilities": {"supports": {"tool_calls": False}},
                    },
                ]
            },
        ),
    )
    server.route("POST", "/models/claude-sonnet-4.6/policy", lambda r: (200, {}))
    flow = CopilotOAuth(github_url=server.url, api_url=server.url)
    person = Person([""])
    credential = await flow.login(client, person)
    assert credential.access == COPILOT_TOKEN
    assert credential.refresh == "gho_1"
    assert credential.expires == 2_000_000_000_000 - 300_000
    assert credential.extra["availableModelIds"] == ["gpt-4o", "claude-sonnet-4.6"]
    assert server.paths() == [
        "POST /login/device/code",
        "POST /login/oauth/access_token",
        "POST /login/oauth/access_token",
        "GET /copilot_internal/v2/token",
        "GET /models",
        "POST /models/claude-sonnet-4.6/policy",
    ]
    device, poll = server.requests[0], server.requests[1]
    assert device.form() == {"client_id": "Iv1.b507a08c87ecfe98", "scope": "read:user"}
    assert poll.form()["grant_type"] == "urn:ietf:params:oauth:grant-type:device_code"
    exchange = server.requests[3]
    assert exchange.headers["authorization"] == "Bearer gho_1"
    assert exchange.headers["editor-version"] == "vscode/1.107.0"
    assert exchange.headers["copilot-integration-id"] == "vscode-chat"
    assert server.requests[4].headers["x-github-api-version"] == "2026-06-01"
    assert server.requests[5].json() == {"state": "enabled"}
    assert [e.kind for e in person.events] == ["device_code", "progress"]
    assert person.events[0].url == "https://github.com/login/device"
    auth = CopilotOAuth().to_auth(credential)
    assert auth.base_url == "https://api.enterprise.githubcopilot.com"
    assert auth.api_key == COPILOT_TOKEN

    refreshed = await flow.refresh(client, credential)
    assert server.requests[-2].headers["authorization"] == "Bearer gho_1"
    assert refreshed.refresh == "gho_1"


async def test_copilot_refuses_an_untrusted_verification_uri(
    server: FakeOAuthServer, client: httpx.AsyncClient
) -> None:
    """A ``verification_uri`` that is not http(s) is never shown to be opened."""
    server.route(
        "POST",
        "/login/device/code",
        lambda r: (
            200,
            {
                "device_code": "d",
                "user_code": "u",
                "verification_uri": "file:///bin/sh",
                "expires_in": 9,
            },
        ),
    )
    person = Person([""])
    with pytest.raises(LoginError, match=r"^Untrusted verification_uri"):
        await CopilotOAuth(github_url=server.url).login(client, person)
    assert person.events == []
    with pytest.raises(LoginError, match=r"^Invalid GitHub Enterprise URL/domain$"):
        await CopilotOAuth(github_url=server.url).login(client, Person(["https://"]))


def test_copilot_base_url_and_model_catalog() -> None:
    """The endpoint comes from ``proxy-ep``, else the enterprise, else individual; the
    policy fallback applies only to the individual endpoint."""
    assert copilot_base_url("proxy-ep=proxy.x.com;") == "https://api.x.com"
    assert copilot_base_url("t", "ghe.example") == "https://copilot-api.ghe.example"
    assert copilot_base_url(None) == "https://api.individual.githubcopilot.com"
    raw = {"data": [{"id": "gpt-4o", "policy": {"state": "enabled"}}]}
    assert parse_model_catalog(raw, True) == (["gpt-4o"], [])
    assert parse_model_catalog(raw, False) == ([], [])
    with pytest.raises(LoginError, match="Invalid Copilot models response"):
        parse_model_catalog({}, True)


# -- xAI and Kimi Code ---------------------------------------------------------------


async def test_xai_device_login_and_refresh(
    server: FakeOAuthServer, client: httpx.AsyncClient, autojump_clock: trio.abc.Clock
) -> None:
    """xAI's device flow (scope, ``referrer: pi``), ``verification_uri_complete`` shown;
    a refresh without a new refresh token keeps the old one."""
    server.route(
        "POST",
        "/oauth2/device/code",
        lambda r: (
            200,
            {
                "device_code": "xd",
                "user_code": "XAI1",
                "verification_uri": "https://accounts.x.ai/device",
                "verification_uri_complete": "https://accounts.x.ai/device?code=XAI1",
                "expires_in": 600,
                "interval": 0,
            },
        ),
    )
    answers = [
        (400, {"error": "authorization_pending"}),
        (200, {"access_token": "xa", "refresh_token": "xr", "expires_in": 7200}),
        (200, {"access_token": "xa2"}),
        (400, {"error": "invalid_grant", "error_description": "expired"}),
    ]
    server.route("POST", "/oauth2/token", lambda r: answers.pop(0))
    flow = XaiOAuth(auth_url=server.url)
    person = Person()
    credential = await flow.login(client, person)
    assert (credential.access, credential.refresh) == ("xa", "xr")
    assert person.events[0].url == "https://accounts.x.ai/device?code=XAI1"
    assert server.requests[0].form() == {
        "client_id": "b1a00492-073a-47ea-816f-4c329264a828",
        "scope": "openid profile email offline_access grok-cli:access api:access",
        "referrer": "pi",
    }
    refreshed = await flow.refresh(client, credential)
    assert (refreshed.access, refreshed.refresh) == ("xa2", "xr")
    with pytest.raises(
        LoginError, match=r"^xAI OAuth token refresh failed \(HTTP 400\): invalid_grant: expired$"
    ):
        await flow.refresh(client, refreshed)


async def test_kimi_device_login_denied_and_refresh_retries(
    server: FakeOAuthServer, client: httpx.AsyncClient, autojump_clock: trio.abc.Clock
) -> None:
    """Kimi's device flow ends with pi-ai's text when denied; its refresh retries a 503
    and the token goes in a Bearer header."""
    server.route(
        "POST",
        "/api/oauth/device_authorization",
        lambda r: (
            200,
            {
                "device_code": "kd",
                "user_code": "K1",
                "verification_uri": "https://www.kimi.com/device",
                "verification_uri_complete": "https://www.kimi.com/device?c=K1",
            },
        ),
    )
    answers = [
        (400, {"error": "access_denied"}),
        (503, {}),
        (200, {"access_token": "ka", "refresh_token": "kr", "expires_in": 900}),
        (401, {"error": "invalid_grant"}),
    ]
    server.route("POST", "/api/oauth/token", lambda r: answers.pop(0))
    flow = KimiOAuth(auth_url=server.url)
    with pytest.raises(LoginError, match=r"^Kimi Code login was denied\.$"):
        await flow.login(client, Person())
    assert server.requests[0].form() == {"client_id": "17e5f671-d194-4dfb-9706-5516cb48c098"}
    fresh = await flow.refresh(client, OAuthCredential(access="o", refresh="kr0", expires=0))
    assert fresh.access == "ka"
    assert flow.to_auth(fresh).headers == {"Authorization": "Bearer ka"}
    with pytest.raises(LoginError, match=r"^Kimi Code token refresh unauthorized \(status 401\)"):
        await flow.refresh(client, fresh)


def test_pasted_authorization_input_forms() -> None:
    """A redirect URL, ``code#state``, a query string and a bare code are all read."""
    assert parse_authorization_input(" https://h/cb?code=c&state=s ") == ("c", "s")
    assert parse_authorization_input("c#s") == ("c", "s")
    assert parse_authorization_input("code=c&state=s") == ("c", "s")
    assert parse_authorization_input("bare") == ("bare", None)
    assert parse_authorization_input("  ") == (None, None)


# -- OpenRouter -----------------------------------------------------------------------


async def test_openrouter_callback_exchanges_the_code_for_a_key(
    server: FakeOAuthServer, client: httpx.AsyncClient
) -> None:
    """The callback URL is an ephemeral loopback port with a random path; the callback
    itself exchanges the code (with the verifier) and the key never expires."""
    server.route("POST", "/api/v1/auth/keys", lambda r: (200, {"key": "sk-or-v1-minted"}))
    flow = OpenRouterOAuth(
        authorize_url=f"{server.url}/auth", token_url=f"{server.url}/api/v1/auth/keys"
    )
    person = Person([None])
    result: list[OAuthCredential] = []
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                result.append(await flow.login(client, person))

            nursery.start_soon(run)
            event = await person.next_event("auth_url")
            params = query_of(event.url)
            assert params["code_challenge_method"] == "S256"
            callback = params["callback_url"]
            assert callback.startswith("http://127.0.0.1:")
            assert "/oauth/callback/" in callback
            status, _ = await browser_get(callback.rsplit("/", 1)[0] + "/guess?code=c")
            assert status == 404  # the path is the login's secret
            status, page = await browser_get(f"{callback}?code=the-code")
            assert status == 200
            assert "Signed in to OpenRouter" in page
    (credential,) = result
    assert (credential.access, credential.refresh, credential.expires) == (
        "sk-or-v1-minted",
        "",
        2**53 - 1,
    )
    body = server.requests[0].json()
    assert body["code"] == "the-code"
    assert body["code_challenge_method"] == "S256"
    assert s256(body["code_verifier"]) == params["code_challenge"]
    assert await flow.refresh(client, credential) is credential
    assert person.events[0].message.startswith("Listening for OpenRouter OAuth callback on ")


async def test_openrouter_denial_a_paste_and_a_failed_exchange(
    server: FakeOAuthServer, client: httpx.AsyncClient
) -> None:
    """A denied authorization fails the login with its description; a pasted URL is
    exchanged; a refused exchange names the status and OpenRouter's message."""
    answers: list[tuple[int, object]] = [
        (200, {"key": "k"}),
        (403, {"error": {"message": "no credits"}}),
        (200, {"nokey": 1}),
    ]
    server.route("POST", "/keys", lambda r: answers.pop(0))
    flow = OpenRouterOAuth(authorize_url=f"{server.url}/auth", token_url=f"{server.url}/keys")
    person = Person([None])
    failures: list[str] = []
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                try:
                    await flow.login(client, person)
                except LoginError as exc:
                    failures.append(str(exc))

            nursery.start_soon(run)
            event = await person.next_event("auth_url")
            callback = query_of(event.url)["callback_url"]
            status, page = await browser_get(f"{callback}?error=access_denied&error_description=No")
            assert status == 400
            assert "OpenRouter authorization was denied." in page
    assert failures == ["OpenRouter authorization failed: No"]
    pasted = await flow.login(client, Person(["https://x/cb?code=pasted"]))
    assert pasted.access == "k"
    with pytest.raises(
        LoginError, match=r"^OpenRouter OAuth key exchange failed \(HTTP 403\): no credits$"
    ):
        await flow.login(client, Person(["code=c2"]))
    with pytest.raises(LoginError, match=r'^OpenRouter OAuth response carries no "key"$'):
        await flow.login(client, Person(["c3"]))
    with pytest.raises(LoginError, match=r"^Missing authorization code$"):
        await flow.login(client, Person(["https://x/cb?nothing=1"]))
