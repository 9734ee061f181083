"""The device-code logins of xAI (SuperGrok / X Premium) and Kimi Code (pi-ai's
``oauth/xai.js`` and ``oauth/kimi-coding.js``, same client ids, URLs, scopes and
parameters): RFC 8628 against the provider's server, form-encoded, JSON answers."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final, final

import attrs
import httpx
import trio

from ..._messages import JSONValue
from ._errors import LoginError
from ._flow import (
    AuthEvent,
    Complete,
    Failed,
    LoginInteraction,
    ModelAuth,
    Pending,
    PollResult,
    SlowDown,
    form,
    json_object,
    now_ms,
    number_field,
    poll_device_code,
    string_field,
    trusted_http_url,
)
from ._store import OAuthCredential

__all__ = ["KimiOAuth", "XaiOAuth"]

_FORM: Final = {"Accept": "application/json", "Content-Type": "application/x-www-form-urlencoded"}
_DEVICE_GRANT: Final = "urn:ietf:params:oauth:grant-type:device_code"

XAI_CLIENT_ID: Final = "b1a00492-073a-47ea-816f-4c329264a828"
XAI_SCOPE: Final = "openid profile email offline_access grok-cli:access api:access"
XAI_AUTH_URL: Final = "https://auth.x.ai"
_XAI_SKEW_MS: Final = 5 * 60 * 1000
_XAI_DEFAULT_LIFETIME: Final = 3600.0


async def _post(
    client: httpx.AsyncClient, url: str, fields: Mapping[str, str], provider: str
) -> tuple[httpx.Response, dict[str, JSONValue] | None]:
    try:
        response = await client.post(url, content=form(fields), headers=_FORM, timeout=30)
    except httpx.HTTPError as exc:
        msg = f"{type(exc).__name__}: {exc}"
        raise LoginError(msg, provider=provider) from None
    return response, json_object(response)


@final
@attrs.frozen(kw_only=True)
class XaiOAuth:
    """pi-ai's ``xaiOAuth``; ``auth_url`` replaces ``https://auth.x.ai`` for tests."""

    name: str = "xAI (Grok/X subscription)"
    login_label: str = "Sign in with SuperGrok or X Premium"
    auth_url: str = XAI_AUTH_URL

    def _failure(self, action: str, response: httpx.Response, body: object) -> LoginError:
        data = body if isinstance(body, dict) else {}
        detail = ": ".join(
            str(v) for v in (data.get("error"), data.get("error_description")) if isinstance(v, str)
        )
        suffix = f": {detail}" if detail else ""
        msg = f"xAI OAuth {action} failed (HTTP {response.status_code}){suffix}"
        return LoginError(msg, provider="xai")

    def _credential(
        self, response: httpx.Response, body: dict[str, JSONValue] | None, previous: str | None
    ) -> OAuthCredential:
        if body is None:
            msg = f"xAI OAuth returned invalid JSON (HTTP {response.status_code})"
            raise LoginError(msg, provider="xai")
        access = string_field(body, "access_token")
        if access is None:
            msg_0 = "Invalid xAI OAuth response field: access_token"
            raise LoginError(msg_0, provider="xai")
        refresh = string_field(body, "refresh_token")
        if "refresh_token" not in body and previous:
            refresh = previous  # xAI may not rotate the refresh token
        if refresh is None:
            msg_0 = "Invalid xAI OAuth response field: refresh_token"
            raise LoginError(msg_0, provider="xai")
        lifetime = _XAI_DEFAULT_LIFETIME
        if "expires_in" in body:
            found = number_field(body, "expires_in")
            if found is None or found <= 0:
                msg_0 = "Invalid xAI OAuth response field: expires_in"
                raise LoginError(msg_0, provider="xai")
            lifetime = found
        expires = now_ms() + int(lifetime * 1000) - _XAI_SKEW_MS
        return OAuthCredential(access=access, refresh=refresh, expires=expires)

    async def login(
        self, client: httpx.AsyncClient, interaction: LoginInteraction
    ) -> OAuthCredential:
        """The device flow: show the code, poll the token endpoint."""
        fields = {"client_id": XAI_CLIENT_ID, "scope": XAI_SCOPE, "referrer": "pi"}
        response, body = await _post(client, f"{self.auth_url}/oauth2/device/code", fields, "xai")
        if body is None:
            msg = f"xAI OAuth returned invalid JSON (HTTP {response.status_code})"
            raise LoginError(msg, provider="xai")
        if response.is_error:
            msg_0 = "device authorization"
            raise self._failure(msg_0, response, body)
        for name in ("device_code", "user_code", "verification_uri"):
            if string_field(body, name) is None:
                msg_0 = f"Invalid xAI OAuth response field: {name}"
                raise LoginError(msg_0, provider="xai")
        expires_in = number_field(body, "expires_in")
        if expires_in is None or expires_in <= 0:
            msg_0 = "Invalid xAI OAuth response field: expires_in"
            raise LoginError(msg_0, provider="xai")
        uri = trusted_http_url(body["verification_uri"], https_only=True)
        complete = body.get("verification_uri_complete")
        complete_uri = (
            trusted_http_url(complete, https_only=True)
            if isinstance(complete, str) and complete
            else None
        )
        if uri is None or (isinstance(complete, str) and complete and complete_uri is None):
            msg_0 = "Untrusted verification URI in xAI OAuth response"
            raise LoginError(msg_0, provider="xai")
        interval = number_field(body, "interval")
        interval = interval if interval is not None and interval > 0 else None
        device_code, user_code = str(body["device_code"]), str(body["user_code"])
        interaction.notify(
            AuthEvent(
                kind="device_code",
                user_code=user_code,
                url=complete_uri or uri,
                interval_seconds=interval,
                expires_in_seconds=expires_in,
            )
        )

        async def poll() -> PollResult[OAuthCredential]:
            fields = {
                "grant_type": _DEVICE_GRANT,
                "client_id": XAI_CLIENT_ID,
                "device_code": device_code,
            }
            answer, data = await _post(client, f"{self.auth_url}/oauth2/token", fields, "xai")
            if data is None:
                msg = f"xAI OAuth returned invalid JSON (HTTP {answer.status_code})"
                raise LoginError(msg, provider="xai")
            if answer.is_success:
                return Complete(self._credential(answer, data, None))
            error = data.get("error")
            if error == "authorization_pending":
                return Pending()
            if error == "slow_down":
                return SlowDown(number_field(data, "interval"))
            if error in ("access_denied", "authorization_denied"):
                return Failed("xAI device authorization was denied")
            if error == "expired_token":
                return Failed("xAI device code expired")
            return Failed(str(self._failure("device token polling", answer, data)))

        return await poll_device_code(
            poll, interval=interval, expires_in=expires_in, wait_before_first_poll=True
        )

    async def refresh(
        self, client: httpx.AsyncClient, credential: OAuthCredential
    ) -> OAuthCredential:
        """Exchange the refresh token (kept when xAI does not rotate it)."""
        fields = {
            "grant_type": "refresh_token",
            "client_id": XAI_CLIENT_ID,
            "refresh_token": credential.refresh,
        }
        response, body = await _post(client, f"{self.auth_url}/oauth2/token", fields, "xai")
        if body is None:
            msg = f"xAI OAuth returned invalid JSON (HTTP {response.status_code})"
            raise LoginError(msg, provider="xai")
        if response.is_error:
            msg_0 = "token refresh"
            raise self._failure(msg_0, response, body)
        return self._credential(response, body, credential.refresh)

    def to_auth(self, credential: OAuthCredential) -> ModelAuth:
        """The access token is the API key."""
        return ModelAuth(api_key=credential.access)


KIMI_CLIENT_ID: Final = "17e5f671-d194-4dfb-9706-5516cb48c098"
KIMI_AUTH_URL: Final = "https://auth.kimi.com"
_KIMI_DEVICE_TIMEOUT: Final = 15 * 60.0
_KIMI_POLL_INTERVAL: Final = 5.0
_KIMI_REFRESH_RETRIES: Final = 3


def kimi_auth_url(env: Mapping[str, str] | None = None) -> str:
    """``$KIMI_CODE_OAUTH_HOST`` or ``$KIMI_OAUTH_HOST`` (pi-ai honours both), default
    ``https://auth.kimi.com``."""
    environ = os.environ if env is None else env
    found = environ.get("KIMI_CODE_OAUTH_HOST") or environ.get("KIMI_OAUTH_HOST")
    return (found or KIMI_AUTH_URL).rstrip("/")


@final
@attrs.frozen(kw_only=True)
class KimiOAuth:
    """pi-ai's ``kimiCodingOAuth``; the access token goes in an ``Authorization``
    header. ``auth_url`` (default: :func:`kimi_auth_url`) is the OAuth host."""

    name: str = "Kimi Code (subscription)"
    login_label: str = "Sign in with Kimi Code"
    auth_url: str | None = None

    def _host(self) -> str:
        return self.auth_url or kimi_auth_url()

    def _token(self, body: dict[str, JSONValue] | None, operation: str) -> OAuthCredential:
        access, refresh = string_field(body, "access_token"), string_field(body, "refresh_token")
        expires_in = number_field(body, "expires_in")
        if access is None or refresh is None or expires_in is None or expires_in <= 0:
            msg = f"Kimi Code token {operation} response missing fields: {body}"
            raise LoginError(msg, provider="kimi-coding")
        return OAuthCredential(
            access=access, refresh=refresh, expires=now_ms() + int(expires_in * 1000)
        )

    async def login(
        self, client: httpx.AsyncClient, interaction: LoginInteraction
    ) -> OAuthCredential:
        """The device flow against ``/api/oauth/device_authorization``."""
        host = self._host()
        response, body = await _post(
            client,
            f"{host}/api/oauth/device_authorization",
            {"client_id": KIMI_CLIENT_ID},
            "kimi-coding",
        )
        if response.is_error:
            suffix = f": {response.text}" if response.text else ""
            msg = f"Kimi Code device authorization failed with status {response.status_code}"
            raise LoginError(msg + suffix, provider="kimi-coding")
        device_code, user_code = string_field(body, "device_code"), string_field(body, "user_code")
        uri = trusted_http_url(body.get("verification_uri") if body else None)
        complete = trusted_http_url(body.get("verification_uri_complete") if body else None)
        if device_code is None or user_code is None or uri is None or complete is None:
            msg = f"Invalid Kimi Code device authorization response: {response.text}"
            raise LoginError(msg, provider="kimi-coding")
        interval = number_field(body, "interval")
        interval = interval if interval is not None and interval > 0 else _KIMI_POLL_INTERVAL
        expires_in = number_field(body, "expires_in")
        expires_in = expires_in if expires_in is not None and expires_in > 0 else None
        expires_in = expires_in or _KIMI_DEVICE_TIMEOUT
        interaction.notify(
            AuthEvent(
                kind="device_code",
                user_code=user_code,
                url=complete,
                interval_seconds=interval,
                expires_in_seconds=expires_in,
            )
        )

        async def poll() -> PollResult[OAuthCredential]:
            fields = {
                "client_id": KIMI_CLIENT_ID,
                "device_code": device_code,
                "grant_type": _DEVICE_GRANT,
            }
            answer, data = await _post(client, f"{host}/api/oauth/token", fields, "kimi-coding")
            if answer.status_code >= 500:
                suffix = f": {answer.text}" if answer.text else ""
                return Failed(
                    f"Kimi Code device token request failed with status {answer.status_code}"
                    + suffix
                )
            if answer.is_success and string_field(data, "access_token") is not None:
                try:
                    return Complete(self._token(data, "poll"))
                except LoginError as exc:
                    return Failed(str(exc))
            error = data.get("error") if data is not None else None
            if error == "authorization_pending":
                return Pending()
            if error == "slow_down":
                return SlowDown(number_field(data, "interval"))
            if error == "expired_token":
                return Failed("Kimi Code device authorization expired. Please restart login.")
            if error == "access_denied":
                return Failed("Kimi Code login was denied.")
            description = data.get("error_description") if data is not None else None
            detail = f": {error}" if isinstance(error, str) else ""
            if detail and isinstance(description, str):
                detail += f": {description}"
            return Failed(
                f"Kimi Code device token request failed (status {answer.status_code}){detail}"
            )

        return await poll_device_code(
            poll, interval=interval, expires_in=expires_in, wait_before_first_poll=True
        )

    async def refresh(
        self, client: httpx.AsyncClient, credential: OAuthCredential
    ) -> OAuthCredential:
        """Exchange the refresh token, retrying 429 and 5xx answers (1, 2, 4 s)."""
        host = self._host()
        fields = {
            "client_id": KIMI_CLIENT_ID,
            "grant_type": "refresh_token",
            "refresh_token": credential.refresh,
        }
        last: LoginError | None = None
        for attempt in range(_KIMI_REFRESH_RETRIES + 1):
            if attempt:
                await trio.sleep(2 ** (attempt - 1))
            try:
                response, body = await _post(
                    client, f"{host}/api/oauth/token", fields, "kimi-coding"
                )
            except LoginError as exc:
                last = exc
                continue
            if response.is_success:
                return self._token(body, "refresh")
            status = response.status_code
            if status in (401, 403) or (body is not None and body.get("error") == "invalid_grant"):
                description = body.get("error_description") if body is not None else None
                suffix = f": {description}" if isinstance(description, str) else ""
                msg = f"Kimi Code token refresh unauthorized (status {status}){suffix}"
                raise LoginError(msg, provider="kimi-coding")
            if (status == 429 or status >= 500) and attempt < _KIMI_REFRESH_RETRIES:
                last = LoginError(
                    f"Kimi Code token refresh failed with status {status}", provider="kimi-coding"
                )
                continue
            msg = f"Kimi Code token refresh failed with status {status}: {response.text}"
            raise LoginError(msg, provider="kimi-coding")
        raise last or LoginError("Kimi Code token refresh failed", provider="kimi-coding")

    def to_auth(self, credential: OAuthCredential) -> ModelAuth:
        """The access token as ``Authorization: Bearer`` (no API key)."""
        return ModelAuth(headers={"Authorization": f"Bearer {credential.access}"})
