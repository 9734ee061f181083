"""OpenRouter's PKCE login: the authorization code is exchanged for a permanent API key
(not a token pair), by the callback server itself on an ephemeral loopback port, or
from a pasted redirect URL (pi-ai's ``oauth/openrouter.js``, same URLs and parameters)."""

from __future__ import annotations

import json
import urllib.parse
import uuid
from collections.abc import Mapping
from typing import Final, final

import attrs
import httpx
import trio

from ._errors import LoginError
from ._flow import (
    AuthEvent,
    AuthPrompt,
    CallbackAnswer,
    CallbackServer,
    LoginInteraction,
    ModelAuth,
    callback_host,
    error_html,
    form,
    generate_pkce,
    json_object,
    race_callback,
    success_html,
)
from ._store import OAuthCredential

__all__ = ["OpenRouterOAuth"]

AUTHORIZE_URL: Final = "https://openrouter.ai/auth"
TOKEN_URL: Final = "https://openrouter.ai/api/v1/auth/keys"
LOGIN_TIMEOUT: Final = 5 * 60.0
EXCHANGE_TIMEOUT: Final = 30.0
NEVER_EXPIRES: Final = 2**53 - 1
"""``Number.MAX_SAFE_INTEGER``: the minted key does not expire."""


def parse_code(value: str) -> str | None:
    """The code in a pasted redirect URL, query string, or the bare code (OpenRouter's
    ``parseAuthorizationInput``: no ``code#state`` form)."""
    value = value.strip()
    if not value:
        return None
    parts = urllib.parse.urlsplit(value)
    if parts.scheme and parts.netloc:
        found = urllib.parse.parse_qs(parts.query).get("code")
        return found[0] if found else None
    if "code=" in value:
        found = urllib.parse.parse_qs(value).get("code")
        return found[0] if found else None
    return value


def _detail(body: Mapping[str, object]) -> str | None:
    for name in ("error_description", "message", "error"):
        if isinstance(body.get(name), str):
            return str(body[name])
    error = body.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    return None


@final
@attrs.frozen(kw_only=True)
class OpenRouterOAuth:
    """pi-ai's ``openRouterOAuth``; ``authorize_url`` and ``token_url`` are fields so
    that tests can point it at a local server."""

    name: str = "OpenRouter OAuth"
    login_label: str = "Sign in with OpenRouter"
    authorize_url: str = AUTHORIZE_URL
    token_url: str = TOKEN_URL

    async def exchange(
        self, client: httpx.AsyncClient, code: str, verifier: str
    ) -> OAuthCredential:
        """The code and verifier for an API key."""
        body = {"code": code, "code_verifier": verifier, "code_challenge_method": "S256"}
        try:
            with trio.fail_after(EXCHANGE_TIMEOUT):
                response = await client.post(
                    self.token_url,
                    content=json.dumps(body, separators=(",", ":")),
                    headers={"accept": "application/json", "content-type": "application/json"},
                )
        except trio.TooSlowError:
            msg = "OpenRouter OAuth token exchange timed out"
            raise LoginError(msg, provider="openrouter") from None
        except httpx.HTTPError as exc:
            msg = f"{type(exc).__name__}: {exc}"
            raise LoginError(msg, provider="openrouter") from None
        data = json_object(response)
        if data is None and response.is_success:
            msg = "OpenRouter OAuth returned invalid JSON"
            raise LoginError(msg, provider="openrouter")
        if response.is_error:
            detail = _detail(data or {})
            suffix = f": {detail}" if detail else ""
            msg = f"OpenRouter OAuth key exchange failed (HTTP {response.status_code}){suffix}"
            raise LoginError(msg, provider="openrouter")
        key = data.get("key") if data is not None else None
        if not isinstance(key, str) or not key:
            msg = 'OpenRouter OAuth response carries no "key"'
            raise LoginError(msg, provider="openrouter")
        return OAuthCredential(access=key, refresh="", expires=NEVER_EXPIRES)

    async def login(
        self, client: httpx.AsyncClient, interaction: LoginInteraction
    ) -> OAuthCredential:
        """The callback server (exchanging the code as it comes) raced with a pasted
        redirect URL, within five minutes."""
        verifier, challenge = generate_pkce()
        path = f"/oauth/callback/{uuid.uuid4()}"
        outcome: list[OAuthCredential | LoginError] = []
        claimed = False

        async def check(got: str, query: Mapping[str, str]) -> CallbackAnswer:
            nonlocal claimed
            if got != path:
                return 404, error_html("OAuth callback route not found."), None
            if claimed or outcome:
                return 409, error_html("This OAuth callback has already been used."), None
            error = query.get("error")
            if error:
                description = query.get("error_description") or error
                page = error_html("OpenRouter authorization was denied.", description)
                failure = f"OpenRouter authorization failed: {description}"
                outcome.append(LoginError(failure, provider="openrouter"))
                return 400, page, query
            code = query.get("code")
            if not code:
                return 400, error_html("OpenRouter returned no authorization code."), None
            claimed = True  # this callback's exchange settles the login
            try:
                outcome.append(await self.exchange(client, code, verifier))
            except LoginError as exc:
                outcome.append(exc)
                return 502, error_html("OpenRouter key exchange failed.", str(exc)), query
            message = "Signed in to OpenRouter. You may now close this page."
            return 200, success_html(message), query

        server = await CallbackServer.open(callback_host(), 0, check)
        callback_url = f"http://{callback_host()}:{server.port}{path}"
        try:
            params = {
                "callback_url": callback_url,
                "code_challenge": challenge,
                "code_challenge_method": "S256",
            }
            interaction.notify(
                AuthEvent(
                    kind="progress",
                    message=f"Listening for OpenRouter OAuth callback on {callback_url}",
                )
            )
            interaction.notify(
                AuthEvent(
                    kind="auth_url",
                    url=f"{self.authorize_url}?{form(params)}",
                    instructions=(
                        "Complete sign-in in your browser. If the browser is on another "
                        "machine, paste the final redirect URL here."
                    ),
                )
            )
            prompt = AuthPrompt(
                kind="manual_code",
                message=(
                    "Complete sign-in in your browser, or paste the authorization code / "
                    "redirect URL here:"
                ),
                placeholder=callback_url,
            )
            with trio.move_on_after(LOGIN_TIMEOUT) as timer:
                _, pasted = await race_callback(server, interaction, prompt)
        finally:
            await server.aclose()
        if timer.cancelled_caught:
            msg = "OpenRouter OAuth login timed out"
            raise LoginError(msg, provider="openrouter")
        if outcome:
            result = outcome[0]
            if isinstance(result, LoginError):
                raise result
            return result
        code = parse_code(pasted or "")
        if not code:
            msg = "Missing authorization code"
            raise LoginError(msg, provider="openrouter")
        interaction.notify(
            AuthEvent(kind="progress", message="Exchanging authorization code for an API key...")
        )
        return await self.exchange(client, code, verifier)

    async def refresh(
        self, client: httpx.AsyncClient, credential: OAuthCredential
    ) -> OAuthCredential:
        """The key does not expire: the credential as it is."""
        await trio.lowlevel.checkpoint()
        return credential

    def to_auth(self, credential: OAuthCredential) -> ModelAuth:
        """The minted key is the API key."""
        return ModelAuth(api_key=credential.access)
