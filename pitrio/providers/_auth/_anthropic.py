"""Anthropic's subscription login (Claude Pro/Max): PKCE authorization code with a
callback on ``127.0.0.1:53692`` (pi-ai's ``oauth/anthropic.js``, same client id, URLs,
scopes and parameters)."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Final, final

import attrs
import httpx

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
    generate_pkce,
    now_ms,
    parse_authorization_input,
    race_callback,
    success_html,
)
from ._store import OAuthCredential

__all__ = ["AnthropicOAuth"]

CLIENT_ID: Final = base64.b64decode("OWQxYzI1MGEtZTYxYi00NGQ5LTg4ZWQtNTk0NGQxOTYyZjVl").decode()
AUTHORIZE_URL: Final = "https://claude.ai/oauth/authorize"
TOKEN_URL: Final = "https://platform.claude.com/v1/oauth/token"
CALLBACK_PORT: Final = 53692
CALLBACK_PATH: Final = "/callback"
SCOPES: Final = (
    "org:create_api_key user:profile user:inference user:sessions:claude_code "
    "user:mcp_servers user:file_upload"
)
_SKEW_MS: Final = 5 * 60 * 1000


@final
@attrs.frozen(kw_only=True)
class AnthropicOAuth:
    """pi-ai's ``anthropicOAuth``. The URLs and the port are fields so that tests can
    point the flow at a local server; the defaults are Anthropic's."""

    name: str = "Anthropic (Claude Pro/Max)"
    authorize_url: str = AUTHORIZE_URL
    token_url: str = TOKEN_URL
    callback_port: int = CALLBACK_PORT

    def redirect_uri(self, port: int) -> str:
        """``http://localhost:PORT/callback`` (Anthropic's registered redirect)."""
        return f"http://localhost:{port}{CALLBACK_PATH}"

    async def login(
        self, client: httpx.AsyncClient, interaction: LoginInteraction
    ) -> OAuthCredential:
        """Open the authorize URL, wait for the callback (or a pasted code), exchange
        the code. The PKCE verifier is also the ``state`` (as pi-ai sends it)."""
        verifier, challenge = generate_pkce()

        def check(path: str, query: Mapping[str, str]) -> CallbackAnswer:
            if path != CALLBACK_PATH:
                return 404, error_html("Callback route not found."), None
            code, state, error = query.get("code"), query.get("state"), query.get("error")
            if error:
                detail = f"Error: {error}"
                return 400, error_html("Anthropic authentication did not complete.", detail), None
            if not code or not state:
                return 400, error_html("Missing code or state parameter."), None
            if state != verifier:
                return 400, error_html("State mismatch."), None
            message = "Anthropic authentication completed. You can close this window."
            return 200, success_html(message), query

        server = await CallbackServer.open(callback_host(), self.callback_port, check)
        redirect_uri = self.redirect_uri(server.port)
        try:
            params = {
                "code": "true",
                "client_id": CLIENT_ID,
                "response_type": "code",
                "redirect_uri": redirect_uri,
                "scope": SCOPES,
                "code_challenge": challenge,
                "code_challenge_method": "S256",
                "state": verifier,
            }
            interaction.notify(
                AuthEvent(
                    kind="auth_url",
                    url=f"{self.authorize_url}?{httpx.QueryParams(params)}",
                    instructions=(
                        "Complete login in your browser. If the browser is on another "
                        "machine, paste the final redirect URL here."
                    ),
                )
            )
            prompt = AuthPrompt(
                kind="manual_code",
                message=(
                    "Complete login in your browser, or paste the authorization code / "
                    "redirect URL here:"
                ),
                placeholder=redirect_uri,
            )
            query, pasted = await race_callback(server, interaction, prompt)
        finally:
            await server.aclose()
        if query is not None:
            code, state = query.get("code"), query.get("state")
        else:
            code, state = parse_authorization_input(pasted or "")
            if state and state != verifier:
                msg = "OAuth state mismatch"
                raise LoginError(msg, provider="anthropic")
            state = state or verifier
        if not code:
            msg = "Missing authorization code"
            raise LoginError(msg, provider="anthropic")
        interaction.notify(
            AuthEvent(kind="progress", message="Exchanging authorization code for tokens...")
        )
        body = {
            "grant_type": "authorization_code",
            "client_id": CLIENT_ID,
            "code": code,
            "state": state or verifier,
            "redirect_uri": redirect_uri,
            "code_verifier": verifier,
        }
        try:
            text = await self._post(client, body)
        except LoginError as exc:
            msg = (
                f"Token exchange request failed. url={self.token_url}; redirect_uri="
                f"{redirect_uri}; response_type=authorization_code; details={exc}"
            )
            raise LoginError(msg, provider="anthropic") from None
        return self._credential(text, "Token exchange returned invalid JSON")

    async def refresh(
        self, client: httpx.AsyncClient, credential: OAuthCredential
    ) -> OAuthCredential:
        """Exchange the refresh token (pi-ai's ``refreshAnthropicToken``)."""
        body = {
            "grant_type": "refresh_token",
            "client_id": CLIENT_ID,
            "refresh_token": credential.refresh,
        }
        try:
            text = await self._post(client, body)
        except LoginError as exc:
            msg = f"Anthropic token refresh request failed. url={self.token_url}; details={exc}"
            raise LoginError(msg, provider="anthropic") from None
        return self._credential(text, "Anthropic token refresh returned invalid JSON")

    def to_auth(self, credential: OAuthCredential) -> ModelAuth:
        """The access token is the API key."""
        return ModelAuth(api_key=credential.access)

    async def _post(self, client: httpx.AsyncClient, body: Mapping[str, str]) -> str:
        try:
            response = await client.post(
                self.token_url,
                content=json.dumps(body, separators=(",", ":")),
                headers={"Content-Type": "application/json", "Accept": "application/json"},
                timeout=30,
            )
        except httpx.HTTPError as exc:
            msg = f"{type(exc).__name__}: {exc}"
            raise LoginError(msg, provider="anthropic") from None
        if response.is_error:
            msg = (  # pi-ai's formatErrorDetails: "Error: <message>" (its stack left out)
                f"Error: HTTP request failed. status={response.status_code}; "
                f"url={self.token_url}; body={response.text}"
            )
            raise LoginError(msg, provider="anthropic")
        return response.text

    def _credential(self, text: str, invalid: str) -> OAuthCredential:
        try:
            data = json.loads(text)
            access, refresh = data["access_token"], data["refresh_token"]
            expires = now_ms() + int(data["expires_in"] * 1000) - _SKEW_MS
        except (ValueError, TypeError, KeyError) as exc:
            msg = f"{invalid}. url={self.token_url}; body={text}; details={exc}"
            raise LoginError(msg, provider="anthropic") from None
        if not isinstance(access, str) or not isinstance(refresh, str):
            msg = f"{invalid}. url={self.token_url}; body={text}"
            raise LoginError(msg, provider="anthropic")
        return OAuthCredential(access=access, refresh=refresh, expires=expires)
