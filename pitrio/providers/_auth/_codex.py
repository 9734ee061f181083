"""ChatGPT Plus/Pro (OpenAI Codex) login: PKCE authorization code with a callback on
``127.0.0.1:1455``, or OpenAI's device-code login for headless machines (pi-ai's
``oauth/openai-codex.js``, same client id, URLs, scope and parameters)."""

from __future__ import annotations

import base64
import json
import secrets
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
    Complete,
    Failed,
    LoginInteraction,
    ModelAuth,
    Pending,
    PollResult,
    SlowDown,
    callback_host,
    error_html,
    form,
    generate_pkce,
    json_object,
    now_ms,
    number_field,
    parse_authorization_input,
    poll_device_code,
    race_callback,
    string_field,
    success_html,
)
from ._store import OAuthCredential

__all__ = ["CodexOAuth", "account_id"]

CLIENT_ID: Final = "app_EMoamEEZ73f0CkXaXp7hrann"
AUTH_BASE_URL: Final = "https://auth.openai.com"
CALLBACK_PORT: Final = 1455
CALLBACK_PATH: Final = "/auth/callback"
SCOPE: Final = "openid profile email offline_access"
JWT_CLAIM_PATH: Final = "https://api.openai.com/auth"
DEVICE_CODE_TIMEOUT: Final = 15 * 60.0
_FORM: Final = {"Content-Type": "application/x-www-form-urlencoded"}
_JSON: Final = {"Content-Type": "application/json"}


def account_id(access_token: str) -> str | None:
    """The ChatGPT account id in the access token's JWT claims
    (``https://api.openai.com/auth`` -> ``chatgpt_account_id``), or ``None``."""
    parts = access_token.split(".")
    if len(parts) != 3:
        return None
    try:
        payload = parts[1] + "=" * (-len(parts[1]) % 4)
        claims = json.loads(base64.urlsafe_b64decode(payload))
        found = claims[JWT_CLAIM_PATH]["chatgpt_account_id"]
    except (ValueError, TypeError, KeyError):
        return None
    return found if isinstance(found, str) and found else None


@final
@attrs.frozen(kw_only=True)
class CodexOAuth:
    """pi-ai's ``openaiCodexOAuth``; ``auth_base_url`` and ``callback_port`` are fields
    so that tests can point it at a local server."""

    name: str = "OpenAI (ChatGPT Plus/Pro)"
    auth_base_url: str = AUTH_BASE_URL
    callback_port: int = CALLBACK_PORT
    originator: str = "pi"

    def redirect_uri(self, port: int) -> str:
        """``http://localhost:PORT/auth/callback``."""
        return f"http://localhost:{port}{CALLBACK_PATH}"

    async def login(
        self, client: httpx.AsyncClient, interaction: LoginInteraction
    ) -> OAuthCredential:
        """Ask for the method (browser or device code) and run it."""
        method = await interaction.prompt(
            AuthPrompt(
                kind="select",
                message="Select OpenAI Codex login method:",
                options=(
                    ("browser", "Browser login (default)"),
                    ("device_code", "Device code login (headless)"),
                ),
            )
        )
        if method == "device_code":
            return await self.login_device_code(client, interaction)
        if method != "browser":
            msg = f"Unknown OpenAI Codex login method: {method}"
            raise LoginError(msg, provider="openai-codex")
        return await self.login_browser(client, interaction)

    async def login_browser(
        self, client: httpx.AsyncClient, interaction: LoginInteraction
    ) -> OAuthCredential:
        """The browser login: the callback server raced with a pasted code."""
        verifier, challenge = generate_pkce()
        state = secrets.token_hex(16)

        def check(path: str, query: Mapping[str, str]) -> CallbackAnswer:
            if path != CALLBACK_PATH:
                return 404, error_html("Callback route not found."), None
            if query.get("state") != state:
                return 400, error_html("State mismatch."), None
            if not query.get("code"):
                return 400, error_html("Missing authorization code."), None
            message = "OpenAI authentication completed. You can close this window."
            return 200, success_html(message), query

        try:
            server: CallbackServer | None = await CallbackServer.open(
                callback_host(), self.callback_port, check
            )
        except OSError:
            server = None  # pi-ai goes on with the pasted code only
        port = server.port if server is not None else self.callback_port
        redirect_uri = self.redirect_uri(port)
        params = {
            "response_type": "code",
            "client_id": CLIENT_ID,
            "redirect_uri": redirect_uri,
            "scope": SCOPE,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "state": state,
            "id_token_add_organizations": "true",
            "codex_cli_simplified_flow": "true",
            "originator": self.originator,
        }
        interaction.notify(
            AuthEvent(
                kind="auth_url",
                url=f"{self.auth_base_url}/oauth/authorize?{form(params)}",
                instructions="A browser window should open. Complete login to finish.",
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
        try:
            query, pasted = await race_callback(server, interaction, prompt)
        finally:
            if server is not None:
                await server.aclose()
        if query is not None:
            code = query.get("code")
        else:
            code, pasted_state = parse_authorization_input(pasted or "")
            if pasted_state and pasted_state != state:
                msg = "State mismatch"
                raise LoginError(msg, provider="openai-codex")
        if not code:
            msg = "Missing authorization code"
            raise LoginError(msg, provider="openai-codex")
        return await self._exchange(client, code, verifier, redirect_uri)

    async def login_device_code(
        self, client: httpx.AsyncClient, interaction: LoginInteraction
    ) -> OAuthCredential:
        """OpenAI's device-code login (``/api/accounts/deviceauth/...``)."""
        base = self.auth_base_url
        response = await _send(
            client, "POST", f"{base}/api/accounts/deviceauth/usercode", {"client_id": CLIENT_ID}
        )
        if response.is_error:
            if response.status_code == 404:
                msg = (
                    "OpenAI Codex device code login is not enabled for this server. Use "
                    "browser login or verify the server URL."
                )
                raise LoginError(msg, provider="openai-codex")
            suffix = f": {response.text}" if response.text else ""
            msg = f"OpenAI Codex device code request failed with status {response.status_code}"
            raise LoginError(msg + suffix, provider="openai-codex")
        data = json_object(response)
        raw_interval = data.get("interval") if data is not None else None
        interval: float | None
        if isinstance(raw_interval, str):
            try:
                interval = float(raw_interval.strip())
            except ValueError:
                interval = None
        else:
            interval = number_field(data, "interval")
        device_id, user_code = string_field(data, "device_auth_id"), string_field(data, "user_code")
        if device_id is None or user_code is None or interval is None or interval < 0:
            msg = f"Invalid OpenAI Codex device code response: {response.text}"
            raise LoginError(msg, provider="openai-codex")
        interaction.notify(
            AuthEvent(
                kind="device_code",
                user_code=user_code,
                url=f"{base}/codex/device",
                interval_seconds=interval,
                expires_in_seconds=DEVICE_CODE_TIMEOUT,
            )
        )

        async def poll() -> PollResult[tuple[str, str]]:
            answer = await _send(
                client,
                "POST",
                f"{base}/api/accounts/deviceauth/token",
                {"device_auth_id": device_id, "user_code": user_code},
            )
            if answer.is_success:
                body = json_object(answer)
                code, verifier = (
                    string_field(body, "authorization_code"),
                    string_field(body, "code_verifier"),
                )
                if code is None or verifier is None:
                    text = f"Invalid OpenAI Codex device auth token response: {answer.text}"
                    return Failed(text)
                return Complete((code, verifier))
            if answer.status_code in (403, 404):
                return Pending()
            body = json_object(answer)
            error = body.get("error") if body is not None else None
            error_code = error.get("code") if isinstance(error, dict) else error
            if error_code == "deviceauth_authorization_pending":
                return Pending()
            if error_code == "slow_down":
                return SlowDown()
            suffix = f": {answer.text}" if answer.text else ""
            return Failed(
                f"OpenAI Codex device auth failed with status {answer.status_code}{suffix}"
            )

        code, verifier = await poll_device_code(
            poll, interval=interval, expires_in=DEVICE_CODE_TIMEOUT
        )
        return await self._exchange(client, code, verifier, f"{base}/deviceauth/callback")

    async def refresh(
        self, client: httpx.AsyncClient, credential: OAuthCredential
    ) -> OAuthCredential:
        """Exchange the refresh token (form-encoded, as pi-ai sends it)."""
        fields = {
            "grant_type": "refresh_token",
            "refresh_token": credential.refresh,
            "client_id": CLIENT_ID,
        }
        try:
            response = await client.post(
                f"{self.auth_base_url}/oauth/token", content=form(fields), headers=_FORM
            )
        except httpx.HTTPError as exc:
            msg = f"OpenAI Codex token refresh error: {exc}"
            raise LoginError(msg, provider="openai-codex") from None
        return _credential(response, "refresh")

    def to_auth(self, credential: OAuthCredential) -> ModelAuth:
        """The access token is the API key (the Codex stream reads the account id)."""
        return ModelAuth(api_key=credential.access)

    async def _exchange(
        self, client: httpx.AsyncClient, code: str, verifier: str, redirect_uri: str
    ) -> OAuthCredential:
        fields = {
            "grant_type": "authorization_code",
            "client_id": CLIENT_ID,
            "code": code,
            "code_verifier": verifier,
            "redirect_uri": redirect_uri,
        }
        response = await _send(
            client, "POST", f"{self.auth_base_url}/oauth/token", form(fields), _FORM
        )
        return _credential(response, "exchange")


async def _send(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    body: Mapping[str, str] | str,
    headers: Mapping[str, str] = _JSON,
) -> httpx.Response:
    content = body if isinstance(body, str) else json.dumps(body, separators=(",", ":"))
    try:
        return await client.request(method, url, content=content, headers=headers)
    except httpx.HTTPError as exc:
        msg = f"{type(exc).__name__}: {exc}"
        raise LoginError(msg, provider="openai-codex") from None


def _credential(response: httpx.Response, operation: str) -> OAuthCredential:
    if response.is_error:
        text = response.text or response.reason_phrase
        msg = f"OpenAI Codex token {operation} failed ({response.status_code}): {text}"
        raise LoginError(msg, provider="openai-codex")
    data = json_object(response)
    access, refresh = string_field(data, "access_token"), string_field(data, "refresh_token")
    expires_in = number_field(data, "expires_in")
    if access is None or refresh is None or expires_in is None:
        msg = f"OpenAI Codex token {operation} response missing fields: {response.text}"
        raise LoginError(msg, provider="openai-codex")
    found = account_id(access)
    if found is None:
        msg_0 = "Failed to extract accountId from token"
        raise LoginError(msg_0, provider="openai-codex")
    return OAuthCredential(
        access=access,
        refresh=refresh,
        expires=now_ms() + int(expires_in * 1000),
        extra={"accountId": found},
    )
