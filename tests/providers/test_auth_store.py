"""Pi's ``auth.json`` (0600 in a 0700 directory, replaced atomically, Pi's format), the
key resolution order, the locked OAuth refresh (two real processes racing refresh
once), and ``Models`` using stored credentials."""

from __future__ import annotations

import functools
import json
import os
import stat
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import httpx
import pytest
import trio

from pitrio import Context, Model, UserMessage
from pitrio.providers import Models
from pitrio.providers._auth import set_oauth_flow
from pitrio.providers._auth._anthropic import AnthropicOAuth
from pitrio.providers._auth._copilot import CopilotOAuth
from pitrio.providers.auth import (
    ApiKeyCredential,
    AuthError,
    AuthFile,
    Credential,
    CredentialStoreError,
    MemoryCredentialStore,
    OAuthCredential,
    default_auth_path,
    login,
    logout,
    oauth_providers,
    resolve_auth,
)

from ._fake_oauth import FakeOAuthServer, Request, read_line

HOUR_MS = 3600 * 1000


def now_ms() -> int:
    import time

    return int(time.time() * 1000)


@pytest.fixture
async def server(nursery: trio.Nursery) -> FakeOAuthServer:
    fake = FakeOAuthServer()
    await nursery.start(fake.serve)
    return fake


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=None) as http:
        yield http


@pytest.fixture
def anthropic_at(server: FakeOAuthServer) -> Iterator[None]:
    previous = set_oauth_flow(
        "anthropic", AnthropicOAuth(token_url=f"{server.url}/v1/oauth/token", callback_port=0)
    )
    yield None
    set_oauth_flow("anthropic", previous)


# -- the file ---------------------------------------------------------------------


def test_the_default_path_is_pis(tmp_path: Path) -> None:
    """``$PI_CODING_AGENT_DIR/auth.json`` (``~`` expanded), else ``~/.pi/agent``."""
    home = str(tmp_path)
    assert default_auth_path({"HOME": home}) == f"{home}/.pi/agent/auth.json"
    assert default_auth_path({"HOME": home, "PI_CODING_AGENT_DIR": "~/agent"}) == (
        f"{home}/agent/auth.json"
    )


async def test_writes_are_0600_in_a_0700_directory_and_keep_other_entries(
    tmp_path: Path,
) -> None:
    """A new file is made 0600 in a new 0700 directory, replaced (no temporary file
    left), written as Pi writes it; other providers' entries and a flow's extra
    fields survive a write."""
    path = tmp_path / "agent" / "auth.json"
    store = AuthFile(path)
    await store.modify("openai", _const(ApiKeyCredential(key="sk-1")))
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    path.write_text(
        json.dumps(
            {
                "openai": {"type": "api_key", "key": "sk-1"},
                "openai-codex": {
                    "type": "oauth",
                    "access": "a",
                    "refresh": "r",
                    "expires": 5,
                    "accountId": "acct",
                },
                "custom": {"type": "something-pi-adds", "x": 1},
            }
        )
    )
    os.chmod(path, 0o644)
    await store.modify("anthropic", _const(ApiKeyCredential(key="$KEY", env={"KEY": "v"})))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert sorted(os.listdir(path.parent)) == ["auth.json"]  # the lock and temp file gone
    text = path.read_text()
    data = json.loads(text)
    assert text == json.dumps(data, indent=2)  # JSON.stringify(data, null, 2)
    assert data["custom"] == {"type": "something-pi-adds", "x": 1}
    assert data["anthropic"] == {"type": "api_key", "key": "$KEY", "env": {"KEY": "v"}}
    codex = await store.read("openai-codex")
    assert codex == OAuthCredential(access="a", refresh="r", expires=5, extra={"accountId": "acct"})
    assert await store.list() == {
        "openai": "api_key",
        "openai-codex": "oauth",
        "custom": "something-pi-adds",
        "anthropic": "api_key",
    }
    assert await logout("openai", store) is True
    assert await logout("openai", store) is False
    assert "openai" not in json.loads(path.read_text())


async def test_bad_files_and_entries_are_named(tmp_path: Path) -> None:
    """Broken JSON, a non-object and a bad entry are errors naming the file."""
    path = tmp_path / "auth.json"
    store = AuthFile(path)
    assert await store.read("x") is None  # no file: no credentials
    path.write_text("{nope")
    with pytest.raises(CredentialStoreError, match=r"Failed to read auth.json \(.*auth.json\)"):
        await store.read("x")
    path.write_text("[]")
    with pytest.raises(CredentialStoreError, match="expected an object"):
        await store.list()
    path.write_text('{"anthropic": {"type": "oauth", "access": 1}}')
    with pytest.raises(
        CredentialStoreError, match=r'^Invalid auth.json credential for provider "anthropic" in'
    ):
        await store.read("anthropic")


def _const(
    credential: Credential,
) -> Callable[[Credential | None], Awaitable[Credential | None]]:
    async def put(_: Credential | None) -> Credential | None:
        await trio.lowlevel.checkpoint()
        return credential

    return put


async def test_a_stale_lock_is_broken_and_a_held_one_waits(tmp_path: Path) -> None:
    """A lock directory older than 30 s (its holder died) is taken over, as
    proper-lockfile does; a fresh one makes the writer wait until it goes."""
    path = tmp_path / "auth.json"
    store = AuthFile(path)
    lock = tmp_path / "auth.json.lock"
    lock.mkdir()
    os.utime(lock, (0, 0))
    with trio.fail_after(10):
        await store.modify("a", _const(ApiKeyCredential(key="k")))
    assert not lock.exists()
    lock.mkdir()
    done = trio.Event()

    async def write() -> None:
        await store.modify("b", _const(ApiKeyCredential(key="k2")))
        done.set()

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(write)
            await trio.sleep(0.2)
            assert not done.is_set()
            lock.rmdir()
    assert (await store.read("b")) == ApiKeyCredential(key="k2")


# -- resolution ---------------------------------------------------------------------


async def test_resolution_order_is_override_then_stored_then_environment(
    client: httpx.AsyncClient,
) -> None:
    """A request's key wins, then the stored key (its ``$VAR`` read by the caller's
    resolver with the credential's ``env``), then the environment."""
    store = MemoryCredentialStore({"openai": ApiKeyCredential(key="$K", env={"K": "from-env"})})

    def env_key(provider: str) -> tuple[str, str] | None:
        return ("env-key", "OPENAI_API_KEY") if provider in ("openai", "groq") else None

    def resolve_value(value: str, env: object) -> str | None:
        assert isinstance(env, dict)
        return env.get(value[1:]) if value.startswith("$") else value

    resolve = functools.partial(
        resolve_auth, store=store, client=client, env_key=env_key, resolve_value=resolve_value
    )
    over = await resolve("openai", api_key="given")
    assert over is not None
    assert (over.auth.api_key, over.source) == ("given", "--api-key")
    stored = await resolve("openai")
    assert stored is not None
    assert (stored.auth.api_key, stored.source) == (
        "from-env",
        "stored credential",
    )
    env = await resolve("groq")
    assert env is not None
    assert (env.auth.api_key, env.source) == ("env-key", "OPENAI_API_KEY")
    assert await resolve("mistral") is None
    await store.modify("unknown", _const(OAuthCredential(access="a", refresh="r", expires=0)))
    assert await resolve("unknown") is None
    assert "anthropic" in oauth_providers()
    assert "github-copilot" in oauth_providers()


async def test_an_expired_token_is_refreshed_and_stored(
    tmp_path: Path, server: FakeOAuthServer, client: httpx.AsyncClient, anthropic_at: None
) -> None:
    """Tokens within five minutes of expiry are refreshed once and written back; valid
    ones are used as they are."""
    server.route(
        "POST",
        "/v1/oauth/token",
        lambda r: (200, {"access_token": "fresh", "refresh_token": "r2", "expires_in": 3600}),
    )
    store = AuthFile(tmp_path / "auth.json")
    soon = now_ms() + 60_000
    await store.modify(
        "anthropic", _const(OAuthCredential(access="old", refresh="r1", expires=soon))
    )
    resolved = await resolve_auth("anthropic", store=store, client=client)
    assert resolved is not None
    assert (resolved.auth.api_key, resolved.source) == ("fresh", "OAuth")
    stored = await store.read("anthropic")
    assert isinstance(stored, OAuthCredential)
    assert stored.refresh == "r2"
    assert stored.expires > now_ms() + 50 * 60 * 1000
    again = await resolve_auth("anthropic", store=store, client=client)
    assert again is not None
    assert again.auth.api_key == "fresh"
    assert len(server.requests) == 1


async def test_a_failed_refresh_says_to_run_login_and_does_not_fall_back(
    tmp_path: Path, server: FakeOAuthServer, client: httpx.AsyncClient, anthropic_at: None
) -> None:
    """A refused refresh is an ``AuthError`` naming ``/login``; the stored tokens are
    kept, and the environment's key is not used instead (pi-ai's rule)."""
    server.route("POST", "/v1/oauth/token", lambda r: (400, {"error": "invalid_grant"}))
    store = AuthFile(tmp_path / "auth.json")
    await store.modify("anthropic", _const(OAuthCredential(access="old", refresh="r1", expires=0)))
    with pytest.raises(AuthError) as caught:
        await resolve_auth(
            "anthropic", store=store, client=client, env_key=lambda p: ("env", "ANTHROPIC_API_KEY")
        )
    assert str(caught.value).startswith("OAuth refresh failed for anthropic: Anthropic token")
    assert str(caught.value).endswith("Run '/login anthropic' to re-authenticate.")
    assert "status=400" in str(caught.value)
    assert (await store.read("anthropic")) == OAuthCredential(access="old", refresh="r1", expires=0)


_RACER = textwrap.dedent(
    """
    import sys, httpx, trio
    from pitrio.providers._auth import set_oauth_flow
    from pitrio.providers._auth._anthropic import AnthropicOAuth
    from pitrio.providers.auth import AuthFile, resolve_auth

    async def main() -> None:
        set_oauth_flow("anthropic", AnthropicOAuth(token_url=sys.argv[2]))
        async with httpx.AsyncClient(timeout=None) as client:
            print("ready", flush=True)
            sys.stdin.readline()  # both go at once
            got = await resolve_auth("anthropic", store=AuthFile(sys.argv[1]), client=client)
        print(got.auth.api_key if got else None, flush=True)

    trio.run(main)
    """
)


@pytest.mark.timeout(60)
async def test_two_processes_refresh_an_expired_token_once(
    tmp_path: Path, server: FakeOAuthServer
) -> None:
    """Two real processes find the token expired at the same moment: one refreshes
    (the server answers slowly, so the other is sure to find the lock held), the other
    waits for the lock, reads the file again and uses the new token: one refresh, one
    rotation of the refresh token."""
    rotations: list[str] = []

    async def refresh(request: Request) -> tuple[int, object]:
        rotations.append(request.json()["refresh_token"])
        await trio.sleep(0.5)
        n = len(rotations)
        return 200, {"access_token": f"fresh-{n}", "refresh_token": f"r-{n}", "expires_in": 3600}

    server.route("POST", "/v1/oauth/token", refresh)
    path = tmp_path / "auth.json"
    await AuthFile(path).modify(
        "anthropic", _const(OAuthCredential(access="old", refresh="r-0", expires=0))
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    command = [sys.executable, "-c", _RACER, str(path), f"{server.url}/v1/oauth/token"]
    outputs: list[str] = []
    with trio.fail_after(50):
        racers = [
            await trio.lowlevel.open_process(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
            )
            for _ in range(2)
        ]
        try:
            for racer in racers:
                assert racer.stdout is not None
                assert await read_line(racer.stdout) == "ready"
            for racer in racers:
                assert racer.stdin is not None
                await racer.stdin.send_all(b"go\n")
            for racer in racers:
                assert racer.stdout is not None
                outputs.append(await read_line(racer.stdout))
                assert await racer.wait() == 0
        finally:
            for racer in racers:
                if racer.returncode is None:
                    racer.kill()
                    await racer.wait()
    assert rotations == ["r-0"]
    assert outputs == ["fresh-1", "fresh-1"]
    stored = await AuthFile(path).read("anthropic")
    assert isinstance(stored, OAuthCredential)
    assert stored.refresh == "r-1"


# -- login and Models ---------------------------------------------------------------


async def test_login_stores_and_models_use_the_copilot_endpoint(
    tmp_path: Path, server: FakeOAuthServer, client: httpx.AsyncClient
) -> None:
    """A stored Copilot credential gives the request its token and its account's base
    URL; a Models without a stored credential falls back to the environment."""
    seen: list[Request] = []

    def chat(request: Request) -> tuple[int, object]:
        seen.append(request)
        return 500, {"error": {"message": "stop here"}}

    server.route("POST", "/chat/completions", chat)
    previous = set_oauth_flow("github-copilot", CopilotOAuth(api_url=server.url))
    try:
        store = AuthFile(tmp_path / "auth.json")
        token = OAuthCredential(access="cop-tok", refresh="gho", expires=now_ms() + HOUR_MS)
        await store.modify("github-copilot", _const(token))
        async with Models(credentials=store, env={}) as models:
            model = next(m for m in models.list("github-copilot") if m.api == "openai-completions")
            context = Context(messages=(UserMessage(content="hi", timestamp=0),))
            stream = models.stream_simple(model, context)
            async with stream:
                async for _ in stream:
                    pass
            message = await stream.result()
    finally:
        set_oauth_flow("github-copilot", previous)
    assert message.stop_reason == "error"
    (request,) = seen
    assert request.headers["authorization"] == "Bearer cop-tok"


async def test_a_failed_refresh_ends_the_request_with_the_login_hint(
    tmp_path: Path, server: FakeOAuthServer, anthropic_at: None
) -> None:
    """Inside a run the refresh failure is data: the stream's error message."""
    server.route("POST", "/v1/oauth/token", lambda r: (401, {"error": "invalid_grant"}))
    store = AuthFile(tmp_path / "auth.json")
    await store.modify("anthropic", _const(OAuthCredential(access="o", refresh="r", expires=0)))
    model = Model(id="claude-x", api="anthropic-messages", provider="anthropic")
    async with Models(credentials=store, builtin=False, env={}) as models:
        stream = models.stream_simple(model, Context(messages=()))
        async with stream:
            async for _ in stream:
                pass
        message = await stream.result()
    assert message.stop_reason == "error"
    assert message.error_message is not None
    assert message.error_message.endswith("Run '/login anthropic' to re-authenticate.")


async def test_login_runs_the_flow_and_stores_its_credential(
    tmp_path: Path, client: httpx.AsyncClient
) -> None:
    """``login`` stores what the flow returns; an unknown provider lists the logins."""

    class Flow:
        name = "Fake"

        async def login(self, client: object, interaction: object) -> OAuthCredential:
            await trio.lowlevel.checkpoint()
            return OAuthCredential(access="a", refresh="r", expires=1)

    previous = set_oauth_flow("xai", Flow())  # type: ignore[arg-type]
    try:
        store = AuthFile(tmp_path / "auth.json")
        await login("xai", store, client, object())  # type: ignore[arg-type]
        assert await store.read("xai") == OAuthCredential(access="a", refresh="r", expires=1)
        with pytest.raises(AuthError, match=r"^no subscription login for provider 'nope'; "):
            await login("nope", store, client, object())  # type: ignore[arg-type]
    finally:
        set_oauth_flow("xai", previous)


async def test_snapshot_memory_store_and_unwritable_files(tmp_path: Path) -> None:
    """``snapshot`` skips entries it cannot read; the memory store is a store; a path
    that cannot be read or written is an error naming it."""
    path = tmp_path / "auth.json"
    path.write_text(json.dumps({"ok": {"type": "api_key"}, "bad": {"type": "oauth"}}))
    store = AuthFile(path)
    assert store.snapshot() == {"ok": ApiKeyCredential()}
    assert repr(store) == f"AuthFile({str(path)!r})"
    kept = await store.modify("ok", _keep)
    assert kept == ApiKeyCredential()
    assert json.loads(path.read_text())["ok"] == {"type": "api_key"}

    memory = MemoryCredentialStore()
    assert await memory.modify("p", _keep) is None
    await memory.modify("p", _const(ApiKeyCredential(key="k")))
    assert await memory.list() == {"p": "api_key"}
    await memory.delete("p")
    assert await memory.read("p") is None

    folder = tmp_path / "is-a-dir"
    folder.mkdir()
    with pytest.raises(CredentialStoreError, match=r"^Failed to read auth.json"):
        await AuthFile(folder).read("x")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(CredentialStoreError, match=r"^Cannot lock auth.json"):
        await AuthFile(blocker / "auth.json").delete("x")
    locked = tmp_path / "ro"
    locked.mkdir()
    (locked / "auth.json").write_text("{}")
    if os.geteuid() != 0:  # root writes anywhere
        locked.chmod(0o500)
        try:
            with pytest.raises(CredentialStoreError):
                await AuthFile(locked / "auth.json").modify("p", _const(ApiKeyCredential()))
        finally:
            locked.chmod(0o700)


async def _keep(current: Credential | None) -> Credential | None:
    await trio.lowlevel.checkpoint()
    return None


async def test_a_cancelled_modify_writes_nothing_and_frees_the_lock(tmp_path: Path) -> None:
    """Cancelled while ``fn`` runs (a refresh cut off): the file is as it was, the lock
    directory is gone, and the next write goes through."""
    path = tmp_path / "auth.json"
    store = AuthFile(path)
    await store.modify("a", _const(ApiKeyCredential(key="before")))
    started = trio.Event()

    async def hang(current: Credential | None) -> Credential | None:
        started.set()
        await trio.sleep_forever()
        raise AssertionError

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(store.modify, "a", hang)
            await started.wait()
            nursery.cancel_scope.cancel()
        assert not (tmp_path / "auth.json.lock").exists()
        assert await store.read("a") == ApiKeyCredential(key="before")
        await store.modify("a", _const(ApiKeyCredential(key="after")))
    assert await store.read("a") == ApiKeyCredential(key="after")
