"""Radius, Pi's ``pi-messages`` gateway: its login and its catalog (pi-ai's
``oauth/radius.js``, ``providers/radius.js`` and ``providers/radius-config.js``, same
client id, scope, endpoints and parameters).

The login is OAuth against the gateway itself (``/v1/oauth/token``, ``/v1/oauth/device``;
only the browser's authorization endpoint is discovered, from ``/v1/oauth``): in the
browser with PKCE and a loopback callback on ``127.0.0.1:1456``, or by device code. The
models are not built in: ``GET /v1/config`` (with the token) gives the gateway's
``baseUrl`` and models, which are kept, as the coding agent keeps them, in
``models-store.json`` beside ``auth.json`` (``{"radius": {"models": [...],
"checkedAt": ms}}``), and :class:`~pitrio.providers.Models` registers them from there.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import uuid
from collections.abc import Mapping
from typing import Any, Final, final

import attrs
import httpx
import trio

from ..._messages import JSONValue
from ..._model import Model, ModelCost
from ._errors import AuthError, LoginError
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
    error_html,
    form,
    generate_pkce,
    json_object,
    now_ms,
    poll_device_code,
    success_html,
    trusted_http_url,
)
from ._store import OAuthCredential

__all__ = [
    "DEFAULT_GATEWAY",
    "GatewayConfig",
    "RadiusOAuth",
    "load_gateway_config",
    "model_from_json",
    "models_store_path",
    "normalize_gateway_url",
    "read_stored_models",
    "refresh_gateway_models",
    "write_stored_models",
]

DEFAULT_GATEWAY: Final = "https://radius.pi.dev"
GATEWAY_ENV: Final = "PI_RADIUS_GATEWAY"
CALLBACK_HOST: Final = "127.0.0.1"
CALLBACK_PORT: Final = 1456
CALLBACK_PATH: Final = "/oauth/callback"
CLIENT_ID: Final = "pi-gateway"
SCOPE: Final = "gateway offline_access"
_DEVICE_GRANT: Final = "urn:ietf:params:oauth:grant-type:device_code"
_SKEW_MS: Final = 60_000
_TIMEOUT: Final = 30.0
_FORM: Final = {"accept": "application/json", "content-type": "application/x-www-form-urlencoded"}
BROWSER: Final = "browser"
DEVICE_CODE: Final = "device-code"


def normalize_gateway_url(value: str) -> str:
    """pi-ai's ``normalizeRadiusGatewayUrl``: ``https://`` when no scheme is given, no
    trailing slash."""
    with_scheme = value if re.match(r"^https?://", value, re.IGNORECASE) else f"https://{value}"
    return with_scheme.rstrip("/")


def default_gateway(env: Mapping[str, str] | None = None) -> str:
    """``$PI_RADIUS_GATEWAY`` (the coding agent's variable for its Radius relay), default
    ``https://radius.pi.dev``."""
    environ = os.environ if env is None else env
    return normalize_gateway_url(environ.get(GATEWAY_ENV) or DEFAULT_GATEWAY)


def _oauth_failure(response: httpx.Response, message: str) -> tuple[str | None, str]:
    """``(error code, text)`` of a failed OAuth answer (pi-ai's ``OAuthResponseError``)."""
    text = response.text
    error: str | None = None
    description: str | None = None
    if text:
        try:
            data = json.loads(text)
        except ValueError:
            description = text
        else:
            if isinstance(data, dict):
                error = data["error"] if isinstance(data.get("error"), str) else None
                found = data.get("error_description")
                description = found if isinstance(found, str) else None
    if error:
        detail = f"{error}: {description}" if description else error
    else:
        detail = description or str(response.status_code)
    return error, f"{message}: {detail}"


@final
@attrs.frozen
class _OAuthAnswerError(Exception):
    code: str | None
    text: str


@final
@attrs.frozen(kw_only=True)
class RadiusOAuth:
    """pi-ai's ``createRadiusOAuth``. ``gateway`` defaults to ``$PI_RADIUS_GATEWAY`` or
    ``https://radius.pi.dev``; ``callback_port`` (pi-ai's fixed ``1456``) may be ``0``
    in tests (any free port)."""

    name: str = "Radius"
    gateway: str | None = None
    callback_port: int = CALLBACK_PORT

    def url(self) -> str:
        """The gateway's root URL."""
        return normalize_gateway_url(self.gateway) if self.gateway else default_gateway()

    async def _post(
        self, client: httpx.AsyncClient, path: str, fields: Mapping[str, str]
    ) -> httpx.Response:
        try:
            return await client.post(
                f"{self.url()}{path}", content=form(fields), headers=_FORM, timeout=_TIMEOUT
            )
        except httpx.HTTPError as exc:
            msg = f"{type(exc).__name__}: {exc}"
            raise LoginError(msg, provider="radius") from None

    async def _token(self, client: httpx.AsyncClient, fields: Mapping[str, str]) -> OAuthCredential:
        """pi-ai's ``requestOAuthToken``; a refused answer raises :class:`_OAuthAnswerError`."""
        response = await self._post(client, "/v1/oauth/token", fields)
        if response.is_error:
            code, text = _oauth_failure(response, "Radius OAuth token request failed")
            raise _OAuthAnswerError(code, text)
        data = json_object(response)
        access = data.get("access_token") if data is not None else None
        refresh = data.get("refresh_token") if data is not None else None
        expires_in = data.get("expires_in") if data is not None else None
        if (
            data is None
            or not isinstance(access, str)
            or not access
            or not isinstance(refresh, str)
            or isinstance(expires_in, bool)
            or not isinstance(expires_in, int | float)
        ):
            msg = f"Radius OAuth token response is missing required fields: {response.text}"
            raise LoginError(msg, provider="radius")
        scope = data.get("scope")
        extra: dict[str, JSONValue] = {"scope": scope} if isinstance(scope, str) else {}
        expires = now_ms() + int(expires_in * 1000) - _SKEW_MS
        return OAuthCredential(access=access, refresh=refresh, expires=expires, extra=extra)

    async def login(
        self, client: httpx.AsyncClient, interaction: LoginInteraction
    ) -> OAuthCredential:
        """Ask browser or device code, then run that login."""
        method = await interaction.prompt(
            AuthPrompt(
                kind="select",
                message=f"Sign in to {self.name}:",
                options=(
                    (BROWSER, "Sign in with browser (recommended)"),
                    (DEVICE_CODE, "Sign in with device code (when signing in from another device)"),
                ),
            )
        )
        if method == DEVICE_CODE:
            return await self._device_login(client, interaction)
        if method == BROWSER:
            endpoint = await self._discover(client)
            return await self._browser_login(client, endpoint, interaction)
        msg = f"Unknown {self.name} sign-in method: {method}"
        raise LoginError(msg, provider="radius")

    async def _discover(self, client: httpx.AsyncClient) -> str:
        gateway = self.url()
        try:
            response = await client.get(
                f"{gateway}/v1/oauth", headers={"accept": "application/json"}, timeout=_TIMEOUT
            )
        except httpx.HTTPError as exc:
            msg = f"{type(exc).__name__}: {exc}"
            raise LoginError(msg, provider="radius") from None
        if response.is_error:
            msg = (
                f"Could not load Radius OAuth config from {gateway}: "
                f"{response.status_code} {response.text}"
            )
            raise LoginError(msg, provider="radius")
        data = json_object(response)
        endpoint = trusted_http_url(data.get("authorizationEndpoint") if data else None)
        if endpoint is None:
            msg = f"Invalid Radius OAuth config from {gateway}"
            raise LoginError(msg, provider="radius")
        return endpoint

    async def _browser_login(
        self, client: httpx.AsyncClient, endpoint: str, interaction: LoginInteraction
    ) -> OAuthCredential:
        verifier, challenge = generate_pkce()
        state = str(uuid.uuid4())

        def check(path: str, query: Mapping[str, str]) -> CallbackAnswer:
            if path != CALLBACK_PATH:
                return 404, error_html("Callback route not found."), None
            if query.get("state") != state:
                return 400, error_html("OAuth state mismatch."), None
            error = query.get("error")
            if error:
                return 400, error_html(query.get("error_description") or error), query
            if not query.get("code"):
                return 400, error_html("Missing authorization code."), None
            message = "Signed in to Radius. You may now close this page."
            return 200, success_html(message), query

        server = await CallbackServer.open(CALLBACK_HOST, self.callback_port, check)
        redirect = f"http://{CALLBACK_HOST}:{server.port}{CALLBACK_PATH}"
        try:
            params = {
                "response_type": "code",
                "client_id": CLIENT_ID,
                "redirect_uri": redirect,
                "scope": SCOPE,
                "code_challenge": challenge,
                "code_challenge_method": "S256",
                "handoff": "url",
                "state": state,
            }
            interaction.notify(
                AuthEvent(kind="progress", message=f"Listening for OAuth callback on {redirect}")
            )
            base, _, _ = endpoint.partition("?")
            interaction.notify(
                AuthEvent(
                    kind="auth_url",
                    url=f"{base}?{form(params)}",
                    instructions="Continue in your browser.",
                )
            )
            query = await server.wait()
        finally:
            await server.aclose()
        code = query.get("code")
        if query.get("error") or not code:
            msg = "OAuth callback did not complete."
            raise LoginError(msg, provider="radius")
        fields = {
            "grant_type": "authorization_code",
            "client_id": CLIENT_ID,
            "redirect_uri": redirect,
            "code": code,
            "code_verifier": verifier,
        }
        try:
            return await self._token(client, fields)
        except _OAuthAnswerError as exc:
            raise LoginError(exc.text, provider="radius") from None

    async def _device_login(
        self, client: httpx.AsyncClient, interaction: LoginInteraction
    ) -> OAuthCredential:
        response = await self._post(
            client, "/v1/oauth/device", {"client_id": CLIENT_ID, "scope": SCOPE}
        )
        if response.is_error:
            _, text = _oauth_failure(response, "Radius OAuth device authorization failed")
            raise LoginError(text, provider="radius")
        data = json_object(response) or {}
        device_code, user_code = data.get("device_code"), data.get("user_code")
        expires_in, interval = data.get("expires_in"), data.get("interval")
        if (
            not isinstance(device_code, str)
            or not device_code
            or not isinstance(user_code, str)
            or not user_code
            or not data.get("verification_uri")
            or isinstance(expires_in, bool)
            or not isinstance(expires_in, int | float)
            or not expires_in
        ):
            msg = "Radius OAuth device authorization response is missing required fields"
            raise LoginError(msg, provider="radius")
        uri = trusted_http_url(data.get("verification_uri"))
        if uri is None:
            msg = "Untrusted verification URI in Radius OAuth response"
            raise LoginError(msg, provider="radius")
        step = (
            float(interval)
            if isinstance(interval, int | float) and not isinstance(interval, bool)
            else None
        )
        interaction.notify(
            AuthEvent(
                kind="device_code",
                user_code=user_code,
                url=uri,
                interval_seconds=step,
                expires_in_seconds=float(expires_in),
            )
        )
        fields = {"grant_type": _DEVICE_GRANT, "client_id": CLIENT_ID, "device_code": device_code}

        async def poll() -> PollResult[OAuthCredential]:
            try:
                return Complete(await self._token(client, fields))
            except _OAuthAnswerError as exc:
                if exc.code == "authorization_pending":
                    return Pending()
                if exc.code == "slow_down":
                    return SlowDown()
                if exc.code == "expired_token":
                    return Failed("Device authorization expired.")
                if exc.code == "access_denied":
                    return Failed("Device authorization was denied.")
                raise LoginError(exc.text, provider="radius") from None

        return await poll_device_code(poll, interval=step, expires_in=float(expires_in))

    async def refresh(
        self, client: httpx.AsyncClient, credential: OAuthCredential
    ) -> OAuthCredential:
        """Exchange the refresh token."""
        fields = {
            "grant_type": "refresh_token",
            "client_id": CLIENT_ID,
            "refresh_token": credential.refresh,
        }
        try:
            return await self._token(client, fields)
        except _OAuthAnswerError as exc:
            raise LoginError(exc.text, provider="radius") from None

    def to_auth(self, credential: OAuthCredential) -> ModelAuth:
        """The access token is the API key."""
        return ModelAuth(api_key=credential.access)


# -- the gateway's catalog -------------------------------------------------------------


@final
@attrs.frozen(kw_only=True)
class GatewayConfig:
    """What ``GET /v1/config`` gives: the ``pi-messages`` base URL and the models (each
    in pi-ai's JSON form)."""

    base_url: str
    models: tuple[Mapping[str, Any], ...]

    def model_entries(self, provider: str = "radius") -> list[dict[str, Any]]:
        """pi-ai's ``getRadiusModelsFromConfig``: each model with ``api``
        ``"pi-messages"``, the provider and the gateway's ``baseUrl``."""
        return [
            {**model, "api": "pi-messages", "provider": provider, "baseUrl": self.base_url}
            for model in self.models
        ]


def _is_gateway_model(value: object) -> bool:
    # pi-ai's isRadiusGatewayModel
    if not isinstance(value, dict):
        return False
    numbers = (value.get("contextWindow"), value.get("maxTokens"))
    return (
        isinstance(value.get("id"), str)
        and isinstance(value.get("name"), str)
        and isinstance(value.get("reasoning"), bool)
        and isinstance(value.get("input"), list)
        and isinstance(value.get("cost"), dict)
        and all(isinstance(n, int | float) and not isinstance(n, bool) for n in numbers)
    )


def _sanitize(config: object) -> GatewayConfig | None:
    if not isinstance(config, dict):
        return None
    base_url, models = config.get("baseUrl"), config.get("models")
    if not isinstance(base_url, str) or not isinstance(models, list):
        return None
    return GatewayConfig(
        base_url=base_url, models=tuple(dict(m) for m in models if _is_gateway_model(m))
    )


async def load_gateway_config(
    client: httpx.AsyncClient, gateway: str, api_key: str | None
) -> GatewayConfig:
    """pi-ai's ``loadRadiusGatewayConfig``: ``GET {gateway}/v1/config``.

    Raises:
        AuthError: the gateway cannot be reached or answers with an error or a body that
            is not a config (the text names the gateway).
    """
    gateway = normalize_gateway_url(gateway)
    headers = {"accept": "application/json"}
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    try:
        response = await client.get(f"{gateway}/v1/config", headers=headers, timeout=_TIMEOUT)
    except httpx.HTTPError as exc:
        msg = f"Could not load Radius config from {gateway}: {type(exc).__name__}: {exc}"
        raise AuthError(msg, provider="radius") from None
    if response.is_error:
        body = response.text.strip()
        body = f"{body[:512]}…" if len(body) > 512 else body
        msg = f"Could not load Radius config from {gateway}: {response.status_code}: {body}"
        raise AuthError(msg, provider="radius")
    try:
        config = _sanitize(json.loads(response.content or b"null"))
    except ValueError:
        config = None
    if config is None:
        msg = f"Invalid Radius config from {gateway}"
        raise AuthError(msg, provider="radius")
    return config


def model_from_json(entry: Mapping[str, Any]) -> Model:
    """A :class:`Model` from pi-ai's JSON form of one (``contextWindow``, ``cost.cacheRead``...)."""
    cost = entry.get("cost") if isinstance(entry.get("cost"), dict) else {}
    assert isinstance(cost, dict)

    def rate(name: str) -> float:
        value = cost.get(name)
        return float(value) if isinstance(value, int | float) else 0.0

    levels = entry.get("thinkingLevelMap")
    compat = entry.get("compat")
    headers = entry.get("headers")
    return Model(
        id=str(entry["id"]),
        name=str(entry.get("name") or entry["id"]),
        api=str(entry.get("api") or "pi-messages"),
        provider=str(entry.get("provider") or "radius"),
        base_url=str(entry.get("baseUrl") or ""),
        reasoning=bool(entry.get("reasoning")),
        input=tuple(str(i) for i in entry.get("input") or ("text",)),
        cost=ModelCost(
            input=rate("input"),
            output=rate("output"),
            cache_read=rate("cacheRead"),
            cache_write=rate("cacheWrite"),
        ),
        context_window=int(entry.get("contextWindow") or 128_000),
        max_tokens=int(entry.get("maxTokens") or 16_384),
        thinking_level_map=dict(levels) if isinstance(levels, dict) else None,
        compat=dict(compat) if isinstance(compat, dict) else None,
        headers={str(k): str(v) for k, v in headers.items()} if isinstance(headers, dict) else None,
    )


# -- models-store.json ----------------------------------------------------------------


def models_store_path(auth_path: str) -> str:
    """The coding agent's ``models-store.json``, beside ``auth.json``."""
    return os.path.join(os.path.dirname(auth_path), "models-store.json")


def read_stored_models(path: str, provider: str = "radius") -> list[Model]:
    """The models kept for ``provider`` in ``models-store.json`` (blocking; none when
    the file is missing or unreadable, and entries that are not models are skipped: a
    broken cache never stops a start, the next login writes it again)."""
    try:
        with open(path, encoding="utf-8-sig") as f:
            data = json.loads(f.read() or "{}")
    except (OSError, ValueError):
        return []
    entry = data.get(provider) if isinstance(data, dict) else None
    rows = entry.get("models") if isinstance(entry, dict) else None
    models = []
    for row in rows if isinstance(rows, list) else ():
        if isinstance(row, dict) and row.get("provider") == provider and _is_gateway_model(row):
            with contextlib.suppress(TypeError, ValueError):
                models.append(model_from_json(row))
    return models


async def write_stored_models(
    path: str, provider: str, entries: list[dict[str, Any]], *, checked_at: int | None = None
) -> None:
    """Keep ``entries`` (pi-ai JSON models) as ``provider``'s in ``models-store.json``,
    under the coding agent's lock (``models-store.json.lock``, as ``auth.json``'s), as
    ``{"models": [...], "checkedAt": ms}``. Checkpoints.

    Raises:
        CredentialStoreError: the file cannot be locked or written.
    """
    from ._store import AuthFile

    store = AuthFile(path)  # the same lock and atomic 0600 write as auth.json
    async with store._locked():

        def update() -> None:
            try:
                current = store._load()
            except AuthError:
                current = {}
            current[provider] = {
                "models": entries,
                "checkedAt": checked_at if checked_at is not None else now_ms(),
            }
            store._write(current)

        await trio.to_thread.run_sync(update)


async def refresh_gateway_models(
    client: httpx.AsyncClient,
    api_key: str,
    path: str,
    *,
    gateway: str | None = None,
    provider: str = "radius",
) -> list[Model]:
    """Fetch the gateway's config with ``api_key`` (a login's access token or
    ``RADIUS_API_KEY``), keep its models in ``models-store.json`` at ``path`` and return
    them (pi-ai's ``refreshModels`` with the network allowed).

    Raises:
        AuthError: the config cannot be loaded, or the file written.
    """
    config = await load_gateway_config(client, gateway or default_gateway(), api_key)
    entries = config.model_entries(provider)
    await write_stored_models(path, provider, entries)
    return [model_from_json(e) for e in entries]
