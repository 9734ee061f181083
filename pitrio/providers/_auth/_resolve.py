"""Which credential a request uses (pi-ai's ``resolveProviderAuth``), the OAuth
providers (pi-ai's providers with ``auth.oauth``), and login / logout.

The order is pi-ai's and the coding agent's (``docs/providers.md``, "Resolution Order"):
a key given for the request, then the stored credential (an API key, or OAuth tokens,
refreshed under the store's lock when they expire within five minutes), then the
environment. A stored credential owns its provider: after a failed refresh the
environment is not tried.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Final, final

import attrs
import httpx
import trio

from ._errors import AuthError, LoginError
from ._flow import LoginInteraction, ModelAuth, OAuthFlow, now_ms
from ._store import ApiKeyCredential, Credential, CredentialStore, OAuthCredential

__all__ = ["ResolvedAuth", "login", "logout", "oauth_flow", "oauth_providers", "resolve_auth"]


@functools.cache
def _flows() -> dict[str, OAuthFlow]:
    """Provider -> login, imported at the first use of one: a request with an API key
    (stored, given or from the environment) loads none of the seven."""
    from ._anthropic import AnthropicOAuth
    from ._codex import CodexOAuth
    from ._copilot import CopilotOAuth
    from ._device import KimiOAuth, XaiOAuth
    from ._openrouter import OpenRouterOAuth
    from ._radius import RadiusOAuth

    return {
        "anthropic": AnthropicOAuth(),
        "openai-codex": CodexOAuth(),
        "github-copilot": CopilotOAuth(),
        "xai": XaiOAuth(),
        "openrouter": OpenRouterOAuth(),
        "kimi-coding": KimiOAuth(),
        "radius": RadiusOAuth(),
    }


_MINIMUM_VALIDITY_MS: Final = 5 * 60 * 1000
_REFRESH_TIMEOUT: Final = 15.0


def oauth_providers() -> dict[str, str]:
    """Provider id -> display name of every subscription login, in pi-ai's order."""
    return {provider: flow.name for provider, flow in _flows().items()}


def oauth_flow(provider: str) -> OAuthFlow:
    """The login of ``provider``.

    Raises:
        AuthError: ``provider`` has no subscription login (the text lists those there are).
    """
    found = _flows().get(provider)
    if found is None:
        known = ", ".join(_flows())
        msg = f"no subscription login for provider {provider!r}; there are: {known}"
        raise AuthError(msg, provider=provider)
    return found


def set_oauth_flow(provider: str, flow: OAuthFlow | None) -> OAuthFlow | None:
    """Replace (``None``: remove) ``provider``'s login; returns the one it had. For
    tests, which point a flow at a local server."""
    flows = _flows()
    previous = flows.get(provider)
    if flow is None:
        flows.pop(provider, None)
    else:
        flows[provider] = flow
    return previous


@final
@attrs.frozen(kw_only=True)
class ResolvedAuth:
    """A request's credential: the :class:`ModelAuth` and where it came from
    (``"--api-key"``, ``"stored credential"``, ``"OAuth"``, or the variable's name)."""

    auth: ModelAuth
    source: str


async def resolve_auth(
    provider: str,
    *,
    store: CredentialStore | None,
    client: httpx.AsyncClient,
    api_key: str | None = None,
    env_key: Callable[[str], tuple[str, str] | None] | None = None,
    resolve_value: Callable[[str, Mapping[str, str]], str | None] | None = None,
) -> ResolvedAuth | None:
    """The credential a request to ``provider`` uses, or ``None`` when there is none.

    Args:
        store: the stored credentials (``None``: none).
        client: the HTTP client a refresh uses.
        api_key: a key given for this request (``--api-key``); it wins.
        env_key: ``provider -> (key, variable)`` from the environment, asked last.
        resolve_value: how a stored ``key`` is read (``$VAR``, ``!command``); default:
            taken as written.

    Raises:
        AuthError: the stored tokens expired and the refresh failed (the text says to
            run ``/login``), or the store cannot be read.
    """
    if api_key:
        await trio.lowlevel.checkpoint()
        return ResolvedAuth(auth=ModelAuth(api_key=api_key), source="--api-key")
    stored = await store.read(provider) if store is not None else None
    if isinstance(stored, OAuthCredential):
        flow = _flows().get(provider)
        if flow is None:
            return None  # pi-ai: no handler for the stored type, no silent env fallback
        assert store is not None
        credential = await _fresh(provider, flow, store, client, stored)
        return (
            None
            if credential is None
            else ResolvedAuth(auth=flow.to_auth(credential), source="OAuth")
        )
    if isinstance(stored, ApiKeyCredential):
        key = stored.key
        if key is not None and resolve_value is not None:
            key = resolve_value(key, stored.env or {})
        if key:
            return ResolvedAuth(auth=ModelAuth(api_key=key), source="stored credential")
    found = env_key(provider) if env_key is not None else None
    if found is not None:
        return ResolvedAuth(auth=ModelAuth(api_key=found[0]), source=found[1])
    return None


def _expires_soon(credential: Credential | None) -> bool:
    assert isinstance(credential, OAuthCredential)
    return now_ms() + _MINIMUM_VALIDITY_MS >= credential.expires


async def _fresh(
    provider: str,
    flow: OAuthFlow,
    store: CredentialStore,
    client: httpx.AsyncClient,
    stored: OAuthCredential,
) -> OAuthCredential | None:
    """``stored``, or (expiring within five minutes) a refreshed credential: the expiry
    is checked again under the lock, so a refresh another process made is used instead
    of making a second one (pi-ai's double-checked ``resolveStoredOAuth``)."""
    if not _expires_soon(stored):
        return stored

    async def refresh(current: Credential | None) -> Credential | None:
        if not isinstance(current, OAuthCredential):
            return None  # logged out meanwhile
        if not _expires_soon(current):
            return None  # refreshed by another process or request
        try:
            with trio.fail_after(_REFRESH_TIMEOUT):
                return await flow.refresh(client, current)
        except (LoginError, trio.TooSlowError) as exc:
            detail = str(exc) or "timed out"
            msg = (
                f"OAuth refresh failed for {provider}: {detail}. Run '/login {provider}' "
                "to re-authenticate."
            )
            raise AuthError(msg, provider=provider) from None

    after = await store.modify(provider, refresh)
    return after if isinstance(after, OAuthCredential) else None


async def login(
    provider: str,
    store: CredentialStore,
    client: httpx.AsyncClient,
    interaction: LoginInteraction,
) -> OAuthCredential:
    """Run ``provider``'s subscription login and store the credential (replacing any
    other of that provider). Checkpoints; cancelling it stores nothing.

    Raises:
        AuthError: no such login; :class:`LoginError` when it does not complete.
    """
    flow = oauth_flow(provider)
    try:
        credential = await flow.login(client, interaction)
    except LoginError as exc:
        if exc.provider:
            raise
        raise LoginError(str(exc), provider=provider) from None

    async def put(_: Credential | None) -> Credential:
        return credential

    await store.modify(provider, put)
    return credential


async def logout(provider: str, store: CredentialStore) -> bool:
    """Remove ``provider``'s stored credential; whether there was one. Checkpoints."""
    had = await store.read(provider) is not None
    await store.delete(provider)
    return had
