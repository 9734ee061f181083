"""What the logins say when an OAuth server answers wrong, a login times out, a lock
is never released or a refresh hangs: pi-ai's texts, as errors (never a hang)."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import trio

from pitrio.providers._auth import set_oauth_flow
from pitrio.providers._auth._anthropic import AnthropicOAuth
from pitrio.providers._auth._codex import CodexOAuth
from pitrio.providers._auth._copilot import CopilotOAuth
from pitrio.providers._auth._device import KimiOAuth, XaiOAuth, kimi_auth_url
from pitrio.providers._auth._flow import (
    Complete,
    Pending,
    PollResult,
    SlowDown,
    callback_host,
    poll_device_code,
)
from pitrio.providers.auth import (
    AuthError,
    AuthFile,
    CredentialStoreError,
    LoginError,
    MemoryCredentialStore,
    OAuthCredential,
    login,
    resolve_auth,
)

from ._fake_oauth import FakeOAuthServer, browser_get
from .test_auth_flows import Person, query_of


@pytest.fixture
async def server(nursery: trio.Nursery) -> FakeOAuthServer:
    fake = FakeOAuthServer()
    await nursery.start(fake.serve)
    return fake


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=None) as http:
        yield http


OLD = OAuthCredential(access="a", refresh="r", expires=0)


async def test_device_polls_time_out_with_pi_ais_texts(autojump_clock: trio.abc.Clock) -> None:
    """No answer before ``expires_in``: ``Device flow timed out``, and the clock-drift
    text when the server asked to slow down."""

    async def pending() -> PollResult[str]:
        await trio.lowlevel.checkpoint()
        return Pending()

    async def slow() -> PollResult[str]:
        await trio.lowlevel.checkpoint()
        return SlowDown()

    with pytest.raises(LoginError, match=r"^Device flow timed out$"):
        await poll_device_code(pending, interval=None, expires_in=12)
    with pytest.raises(LoginError, match=r"^Device flow timed out after one or more slow_down"):
        await poll_device_code(slow, interval=1, expires_in=30, wait_before_first_poll=True)

    async def done() -> PollResult[str]:
        await trio.lowlevel.checkpoint()
        return Complete("ok")

    assert await poll_device_code(done, interval=0, expires_in=None) == "ok"


async def test_anthropic_callback_pages_and_a_failed_exchange(
    server: FakeOAuthServer, client: httpx.AsyncClient
) -> None:
    """Other paths are 404, a callback without code or state is 400 (the login waits
    on); a refused exchange is pi-ai's ``Token exchange request failed`` text."""
    server.route("POST", "/t", lambda r: (500, {"error": "boom"}))
    flow = AnthropicOAuth(token_url=f"{server.url}/t", callback_port=0)
    person = Person([None])
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            failures: list[str] = []

            async def run() -> None:
                try:
                    await flow.login(client, person)
                except LoginError as exc:
                    failures.append(str(exc))

            nursery.start_soon(run)
            event = await person.next_event("auth_url")
            local = query_of(event.url)["redirect_uri"].replace("localhost", "127.0.0.1")
            assert (await browser_get(local.replace("/callback", "/x")))[0] == 404
            assert (await browser_get(f"{local}?code=c"))[0] == 400
            state = query_of(event.url)["state"]
            assert (await browser_get(f"{local}?code=c&state={state}"))[0] == 200
    (failure,) = failures
    assert failure.startswith(f"Token exchange request failed. url={server.url}/t; redirect_uri=")
    assert "status=500" in failure


async def test_anthropic_invalid_json_and_a_blank_paste(
    server: FakeOAuthServer, client: httpx.AsyncClient
) -> None:
    """A token answer that is not JSON, or lacks the tokens, is named; a blank paste is
    ``Missing authorization code``."""
    answers: list[tuple[int, object]] = [(200, b"not json"), (200, {"access_token": 1})]
    server.route("POST", "/t", lambda r: answers.pop(0))
    flow = AnthropicOAuth(token_url=f"{server.url}/t", callback_port=0)
    with pytest.raises(LoginError, match=r"^Anthropic token refresh returned invalid JSON"):
        await flow.refresh(client, OLD)
    with pytest.raises(LoginError, match=r"^Anthropic token refresh returned invalid JSON"):
        await flow.refresh(client, OLD)
    with pytest.raises(LoginError, match=r"^Missing authorization code$"):
        await flow.login(client, Person(["  "]))
    unreachable = AnthropicOAuth(token_url="http://127.0.0.1:9/t")
    with pytest.raises(LoginError, match=r"^Anthropic token refresh request failed"):
        await unreachable.refresh(client, OLD)


async def test_codex_answers_it_cannot_use(
    server: FakeOAuthServer, client: httpx.AsyncClient
) -> None:
    """Device login off (404), a failed or invalid device answer, an unknown method, a
    pasted state that is not the login's."""
    answers: list[tuple[int, object]] = [
        (404, {}),
        (500, {"x": 1}),
        (200, {"device_auth_id": "d"}),
    ]
    server.route("POST", "/api/accounts/deviceauth/usercode", lambda r: answers.pop(0))
    flow = CodexOAuth(auth_base_url=server.url, callback_port=0)
    with pytest.raises(LoginError, match=r"device code login is not enabled for this server"):
        await flow.login(client, Person(["device_code"]))
    with pytest.raises(LoginError, match=r"device code request failed with status 500: "):
        await flow.login(client, Person(["device_code"]))
    with pytest.raises(LoginError, match=r"^Invalid OpenAI Codex device code response: "):
        await flow.login(client, Person(["device_code"]))
    with pytest.raises(LoginError, match=r"^Unknown OpenAI Codex login method: sms$"):
        await flow.login(client, Person(["sms"]))
    with pytest.raises(LoginError, match=r"^State mismatch$"):
        await flow.login(client, Person(["browser", "http://localhost/cb?code=c&state=x"]))
    with pytest.raises(LoginError, match=r"^Missing authorization code$"):
        await flow.login(client, Person(["browser", ""]))


async def test_codex_falls_back_to_the_pasted_code_when_its_port_is_taken(
    server: FakeOAuthServer, client: httpx.AsyncClient
) -> None:
    """pi-ai goes on without its callback server when the port is in use: the pasted
    code is exchanged; a device poll's unknown error fails the login."""
    server.route("POST", "/oauth/token", lambda r: (400, {"error": "invalid_grant"}))
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        flow = CodexOAuth(auth_base_url=server.url, callback_port=taken.getsockname()[1])
        with pytest.raises(LoginError, match=r"^OpenAI Codex token exchange failed \(400\)"):
            await flow.login(client, Person(["browser", "pasted-code"]))
    finally:
        taken.close()
    assert server.requests[-1].form()["code"] == "pasted-code"


async def test_codex_device_poll_failures(
    server: FakeOAuthServer, client: httpx.AsyncClient, autojump_clock: trio.abc.Clock
) -> None:
    """A poll answered with an unknown error, or a success without the code, fails."""
    server.route(
        "POST",
        "/api/accounts/deviceauth/usercode",
        lambda r: (200, {"device_auth_id": "d", "user_code": "u", "interval": 1}),
    )
    polls: list[tuple[int, object]] = [
        (500, {"error": "weird"}),
        (200, {"authorization_code": "x"}),
    ]
    server.route("POST", "/api/accounts/deviceauth/token", lambda r: polls.pop(0))
    flow = CodexOAuth(auth_base_url=server.url)
    with pytest.raises(LoginError, match=r"^OpenAI Codex device auth failed with status 500"):
        await flow.login(client, Person(["device_code"]))
    with pytest.raises(LoginError, match=r"^Invalid OpenAI Codex device auth token response"):
        await flow.login(client, Person(["device_code"]))


async def test_copilot_answers_it_cannot_use(
    server: FakeOAuthServer, client: httpx.AsyncClient, autojump_clock: trio.abc.Clock
) -> None:
    """Bad device fields, a denied device flow, a bad Copilot token, a failed model
    list: each with pi-ai's text."""
    devices: list[tuple[int, object]] = [
        (200, {"device_code": "d"}),
        (200, [1]),
        (503, b"down"),
    ]
    devices += [
        (200, {"device_code": "d", "user_code": "u", "verification_uri": "https://g/d",
               "expires_in": 60, "interval": 1})
    ] * 3  # fmt: skip
    server.route("POST", "/login/device/code", lambda r: devices.pop(0))
    polls: list[tuple[int, object]] = [
        (200, {"error": "access_denied", "error_description": "no"}),
        (200, {"error": "slow_down", "interval": 2}),
        (200, {"weird": 1}),
        (200, {"access_token": "gho"}),
    ]
    server.route("POST", "/login/oauth/access_token", lambda r: polls.pop(0))
    server.route("GET", "/copilot_internal/v2/token", lambda r: (200, {"token": 5}))
    flow = CopilotOAuth(github_url=server.url, api_url=server.url)
    with pytest.raises(LoginError, match=r"^Invalid device code response fields$"):
        await flow.login(client, Person([""]))
    with pytest.raises(LoginError, match=r"^Invalid device code response$"):
        await flow.login(client, Person(["ghe.example.com"]))
    with pytest.raises(LoginError, match=r"^503 Service Unavailable: down$"):
        await flow.login(client, Person([""]))
    with pytest.raises(LoginError, match=r"^Device flow failed: access_denied: no$"):
        await flow.login(client, Person([""]))
    with pytest.raises(LoginError, match=r"^Invalid device token response$"):
        await flow.login(client, Person([""]))
    with pytest.raises(LoginError, match=r"^Invalid Copilot token response fields$"):
        await flow.login(client, Person([""]))
    server.route(
        "GET", "/copilot_internal/v2/token", lambda r: (200, {"token": "t", "expires_at": 1})
    )
    server.route("GET", "/models", lambda r: (500, b"no models"))
    with pytest.raises(LoginError, match=r"^500 Internal Server Error: no models$"):
        await flow.refresh(client, OAuthCredential(access="x", refresh="gho", expires=0))


async def test_copilot_rate_limits_are_retried_then_stop_enabling(
    server: FakeOAuthServer, client: httpx.AsyncClient, autojump_clock: trio.abc.Clock
) -> None:
    """A 429 is retried after ``Retry-After``; a 429 that stays stops enabling models."""
    models = [
        (429, {}),
        (
            200,
            {"data": [{"id": i, "model_picker_enabled": True, "policy": {"state": "unconfigured"}}
                      for i in ("claude-haiku-4.5", "grok-4.5")]},
        ),
    ]  # fmt: skip
    server.route("GET", "/models", lambda r: models.pop(0))
    server.route(
        "GET", "/copilot_internal/v2/token", lambda r: (200, {"token": "t", "expires_at": 9})
    )
    server.route("POST", "/models/claude-haiku-4.5/policy", lambda r: (429, {}))
    server.route("POST", "/models/grok-4.5/policy", lambda r: (200, {}))
    server.route(
        "POST",
        "/login/device/code",
        lambda r: (200, {"device_code": "d", "user_code": "u",
                         "verification_uri": "https://g/d", "expires_in": 60}),
    )  # fmt: skip
    server.route("POST", "/login/oauth/access_token", lambda r: (200, {"access_token": "gho"}))
    credential = await CopilotOAuth(github_url=server.url, api_url=server.url).login(
        client, Person(["https://ghe.example.com/"])
    )
    assert credential.extra["availableModelIds"] == ["claude-haiku-4.5", "grok-4.5"]
    assert server.paths().count("GET /models") == 2
    assert credential.extra["enterpriseUrl"] == "ghe.example.com"
    assert server.paths().count("POST /models/claude-haiku-4.5/policy") == 3
    assert "POST /models/grok-4.5/policy" not in server.paths()


async def test_xai_and_kimi_answers_they_cannot_use(
    server: FakeOAuthServer, client: httpx.AsyncClient, autojump_clock: trio.abc.Clock
) -> None:
    """xAI: an error answer, bad JSON, a missing field, a plain-http URL, a denial, an
    expired code. Kimi: a failed device request, a bad one, 5xx while polling, expiry."""
    xai_device: list[tuple[int, object]] = [
        (400, {"error": "invalid_client"}),
        (200, b"<html>"),
        (200, {"device_code": "d"}),
        (
            200,
            {
                "device_code": "d",
                "user_code": "u",
                "verification_uri": "http://x/d",
                "expires_in": 9,
            },
        ),
    ]
    xai_device += [
        (200, {"device_code": "d", "user_code": "u", "verification_uri": "https://x/d",
               "expires_in": 60})
    ] * 2  # fmt: skip
    server.route("POST", "/oauth2/device/code", lambda r: xai_device.pop(0))
    xai_polls: list[tuple[int, object]] = [
        (400, {"error": "access_denied"}),
        (400, {"error": "slow_down"}),
        (400, {"error": "expired_token"}),
    ]
    server.route("POST", "/oauth2/token", lambda r: xai_polls.pop(0))
    xai = XaiOAuth(auth_url=server.url)
    with pytest.raises(LoginError, match=r"^xAI OAuth device authorization failed \(HTTP 400\)"):
        await xai.login(client, Person())
    with pytest.raises(LoginError, match=r"^xAI OAuth returned invalid JSON \(HTTP 200\)$"):
        await xai.login(client, Person())
    with pytest.raises(LoginError, match=r"^Invalid xAI OAuth response field: user_code$"):
        await xai.login(client, Person())
    with pytest.raises(LoginError, match=r"^Untrusted verification URI in xAI OAuth response$"):
        await xai.login(client, Person())
    with pytest.raises(LoginError, match=r"^xAI device authorization was denied$"):
        await xai.login(client, Person())
    with pytest.raises(LoginError, match=r"^xAI device code expired$"):
        await xai.login(client, Person())

    kimi_device: list[tuple[int, object]] = [
        (403, b"nope"),
        (200, {"device_code": "d", "user_code": "u", "verification_uri": "file:///x"}),
    ]
    kimi_device += [
        (200, {"device_code": "d", "user_code": "u", "verification_uri": "https://k/d",
               "verification_uri_complete": "https://k/d?u", "interval": 1})
    ] * 2  # fmt: skip
    server.route("POST", "/api/oauth/device_authorization", lambda r: kimi_device.pop(0))
    kimi_polls: list[tuple[int, object]] = [
        (502, b"bad gateway"),
        (400, {"error": "slow_down", "interval": 1}),
        (400, {"error": "expired_token"}),
    ]
    server.route("POST", "/api/oauth/token", lambda r: kimi_polls.pop(0))
    kimi = KimiOAuth(auth_url=server.url)
    with pytest.raises(LoginError, match=r"^Kimi Code device authorization failed with status 403"):
        await kimi.login(client, Person())
    with pytest.raises(LoginError, match=r"^Invalid Kimi Code device authorization response"):
        await kimi.login(client, Person())
    with pytest.raises(LoginError, match=r"^Kimi Code device token request failed with status 502"):
        await kimi.login(client, Person())
    with pytest.raises(LoginError, match=r"^Kimi Code device authorization expired"):
        await kimi.login(client, Person())
    assert kimi_auth_url({"KIMI_OAUTH_HOST": "https://k.example/"}) == "https://k.example"
    assert callback_host({"PI_OAUTH_CALLBACK_HOST": "0.0.0.0"}) == "0.0.0.0"


async def test_kimi_refresh_gives_up_after_its_retries(
    server: FakeOAuthServer, client: httpx.AsyncClient, autojump_clock: trio.abc.Clock
) -> None:
    """Four 503s (the first try and three retries, 1, 2 and 4 s apart) fail the refresh."""
    server.route("POST", "/api/oauth/token", lambda r: (503, {"error": "busy"}))
    start = trio.current_time()
    with pytest.raises(LoginError, match=r"^Kimi Code token refresh failed with status 503"):
        await KimiOAuth(auth_url=server.url).refresh(client, OLD)
    assert len(server.requests) == 4
    assert trio.current_time() - start == pytest.approx(7, abs=0.5)


async def test_a_lock_that_stays_is_an_error_naming_it(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    """A fresh lock that is never released: after the stale time the writer gives up
    with a text naming the lock directory."""
    store = AuthFile(tmp_path / "auth.json")
    lock = tmp_path / "auth.json.lock"
    lock.mkdir()

    async def keep_fresh() -> None:
        while True:
            lock.touch()
            await trio.sleep(1)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(keep_fresh)
        with pytest.raises(CredentialStoreError, match=r"auth.json is locked \(.*auth.json.lock\)"):
            await store.delete("x")
        nursery.cancel_scope.cancel()


async def test_a_hanging_refresh_times_out_after_15_seconds(
    client: httpx.AsyncClient, autojump_clock: trio.abc.Clock
) -> None:
    """pi-ai bounds a refresh by 15 s; then the request fails naming ``/login``."""

    class Hangs:
        name = "Hangs"

        async def refresh(self, client: object, credential: object) -> OAuthCredential:
            await trio.sleep_forever()
            raise AssertionError

    previous = set_oauth_flow("xai", Hangs())  # type: ignore[arg-type]
    try:
        store = MemoryCredentialStore({"xai": OLD})
        start = trio.current_time()
        with pytest.raises(
            AuthError, match=r"^OAuth refresh failed for xai: timed out\. Run '/login xai'"
        ):
            await resolve_auth("xai", store=store, client=client)
        assert trio.current_time() - start == 15
    finally:
        set_oauth_flow("xai", previous)


async def test_a_login_error_names_its_provider(client: httpx.AsyncClient) -> None:
    """A flow's error without a provider gets the login's."""

    class Fails:
        name = "Fails"

        async def login(self, client: object, interaction: object) -> OAuthCredential:
            await trio.lowlevel.checkpoint()
            raise LoginError("Login cancelled", provider="")

    previous = set_oauth_flow("kimi-coding", Fails())  # type: ignore[arg-type]
    try:
        with pytest.raises(LoginError) as caught:
            await login("kimi-coding", MemoryCredentialStore(), client, Person())
        assert caught.value.provider == "kimi-coding"
    finally:
        set_oauth_flow("kimi-coding", previous)


async def test_xai_refresh_answers_and_kimi_poll_success(
    server: FakeOAuthServer, client: httpx.AsyncClient, autojump_clock: trio.abc.Clock
) -> None:
    """xAI's refresh names a bad field or bad JSON; Kimi's poll completes after
    ``authorization_pending``, and a refresh without the fields is refused."""
    answers: list[tuple[int, object]] = [
        (200, {"refresh_token": "r"}),
        (200, {"access_token": "a", "refresh_token": "r", "expires_in": -1}),
        (500, b"oops"),
        (200, {"access_token": "a", "refresh_token": 7}),
    ]
    server.route("POST", "/oauth2/token", lambda r: answers.pop(0))
    xai = XaiOAuth(auth_url=server.url)
    with pytest.raises(LoginError, match=r"^Invalid xAI OAuth response field: access_token$"):
        await xai.refresh(client, OLD)
    with pytest.raises(LoginError, match=r"^Invalid xAI OAuth response field: expires_in$"):
        await xai.refresh(client, OLD)
    with pytest.raises(LoginError, match=r"^xAI OAuth returned invalid JSON \(HTTP 500\)$"):
        await xai.refresh(client, OLD)
    with pytest.raises(LoginError, match=r"^Invalid xAI OAuth response field: refresh_token$"):
        await xai.refresh(client, OLD)
    with pytest.raises(LoginError, match=r"^ConnectError"):
        await XaiOAuth(auth_url="http://127.0.0.1:9").refresh(client, OLD)

    server.route(
        "POST",
        "/api/oauth/device_authorization",
        lambda r: (200, {"device_code": "d", "user_code": "u", "verification_uri": "https://k/d",
                         "verification_uri_complete": "https://k/d?u", "expires_in": 60}),
    )  # fmt: skip
    polls: list[tuple[int, object]] = [
        (400, {"error": "authorization_pending"}),
        (200, {"access_token": "ka", "refresh_token": "kr", "expires_in": 60}),
        (200, {"access_token": "ka"}),
        (400, {"error": "invalid_grant", "error_description": "gone"}),
        (418, {"error": "teapot"}),
    ]
    server.route("POST", "/api/oauth/token", lambda r: polls.pop(0))
    kimi = KimiOAuth(auth_url=server.url)
    person = Person()
    credential = await kimi.login(client, person)
    assert credential.access == "ka"
    assert person.events[0].url == "https://k/d?u"
    with pytest.raises(LoginError, match=r"^Kimi Code token refresh response missing fields"):
        await kimi.refresh(client, credential)
    with pytest.raises(
        LoginError, match=r"^Kimi Code token refresh unauthorized \(status 400\): gone$"
    ):
        await kimi.refresh(client, credential)
    with pytest.raises(LoginError, match=r"^Kimi Code token refresh failed with status 418"):
        await kimi.refresh(client, credential)
