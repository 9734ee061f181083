"""GitHub Copilot login: GitHub's device flow, then the exchange of the GitHub token for
a Copilot token (``/copilot_internal/v2/token``), which is also the refresh; the
account's models are listed and the ones that need it enabled (pi-ai's
``oauth/github-copilot.js``, same client id, headers, URLs and parameters)."""

from __future__ import annotations

import base64
import json
import re
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Final, cast, final

import attrs
import httpx
import trio

from ..._messages import JSONValue
from ._errors import LoginError
from ._flow import (
    AuthEvent,
    AuthPrompt,
    Complete,
    Failed,
    LoginInteraction,
    ModelAuth,
    Pending,
    PollResult,
    SlowDown,
    form,
    json_object,
    number_field,
    poll_device_code,
    string_field,
    trusted_http_url,
)
from ._store import OAuthCredential

__all__ = ["CopilotOAuth", "copilot_base_url"]

CLIENT_ID: Final = base64.b64decode("SXYxLmI1MDdhMDhjODdlY2ZlOTg=").decode()
COPILOT_HEADERS: Final[Mapping[str, str]] = {
    "User-Agent": "GitHubCopilotChat/0.35.0",
    "Editor-Version": "vscode/1.107.0",
    "Editor-Plugin-Version": "copilot-chat/0.35.0",
    "Copilot-Integration-Id": "vscode-chat",
}
COPILOT_API_VERSION: Final = "2026-06-01"
INDIVIDUAL_API: Final = "https://api.individual.githubcopilot.com"
_GITHUB_FORM: Final = {
    "Accept": "application/json",
    "Content-Type": "application/x-www-form-urlencoded",
    "User-Agent": "GitHubCopilotChat/0.35.0",
}
_SKEW_MS: Final = 5 * 60 * 1000


def normalize_domain(value: str) -> str | None:
    """The host name of a GitHub Enterprise URL or domain, or ``None``."""
    value = value.strip()
    if not value:
        return None
    parts = urllib.parse.urlsplit(value if "://" in value else f"https://{value}")
    return parts.hostname or None


def copilot_base_url(token: str | None, enterprise_domain: str | None = None) -> str:
    """The Copilot API for a token: its ``proxy-ep`` with ``proxy.`` made ``api.``, else
    ``https://copilot-api.<enterprise>``, else the individual endpoint."""
    if token:
        found = re.search(r"proxy-ep=([^;]+)", token)
        if found:
            return "https://" + re.sub(r"^proxy\.", "api.", found[1])
    if enterprise_domain:
        return f"https://copilot-api.{enterprise_domain}"
    return INDIVIDUAL_API


def _catalog_ids() -> frozenset[str]:
    from .._catalog import builtin_models

    return frozenset(m.id for m in builtin_models() if m.provider == "github-copilot")


def parse_model_catalog(raw: object, allow_policy_fallback: bool) -> tuple[list[str], list[str]]:
    """``(available, to_enable)`` model ids of a ``/models`` answer (pi-ai's
    ``parseGitHubCopilotModelCatalog``)."""
    data = raw.get("data") if isinstance(raw, dict) else None
    if not isinstance(data, list):
        msg = "Invalid Copilot models response"
        raise LoginError(msg, provider="github-copilot")
    models: list[tuple[str, bool, object]] = []
    for item in data:
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            continue
        capabilities = item.get("capabilities")
        supports = capabilities.get("supports") if isinstance(capabilities, dict) else None
        if isinstance(supports, dict) and supports.get("tool_calls") is False:
            continue
        policy = item.get("policy")
        state = policy.get("state") if isinstance(policy, dict) else None
        models.append((item["id"], item.get("model_picker_enabled") is True, state))
    picker = [i for i, enabled, state in models if enabled and state != "disabled"]
    use_fallback = allow_policy_fallback and not picker
    available = (
        picker
        if picker or not allow_policy_fallback
        else [i for i, _, state in models if state == "enabled"]
    )
    known = _catalog_ids()
    to_enable = [
        i
        for i, enabled, state in models
        if state == "unconfigured" and i in known and (enabled or use_fallback)
    ]
    return available, to_enable


@final
@attrs.frozen(kw_only=True)
class CopilotOAuth:
    """pi-ai's ``githubCopilotOAuth``. ``github_url`` and ``api_url`` replace
    ``https://<domain>``, ``https://api.<domain>`` and the Copilot API for tests."""

    name: str = "GitHub Copilot"
    github_url: str | None = None
    api_url: str | None = None

    def _urls(self, domain: str) -> tuple[str, str, str]:
        github = self.github_url or f"https://{domain}"
        api = self.github_url or f"https://api.{domain}"
        return (
            f"{github}/login/device/code",
            f"{github}/login/oauth/access_token",
            f"{api}/copilot_internal/v2/token",
        )

    def _api(self, token: str, enterprise: str | None) -> str:
        return self.api_url or copilot_base_url(token, enterprise)

    async def login(
        self, client: httpx.AsyncClient, interaction: LoginInteraction
    ) -> OAuthCredential:
        """Ask for a GitHub Enterprise domain (blank: github.com), run the device flow,
        exchange the token, list (and enable) the account's models."""
        answer = await interaction.prompt(
            AuthPrompt(
                kind="text",
                message="GitHub Enterprise URL/domain (blank for github.com)",
                placeholder="company.ghe.com",
            )
        )
        enterprise = normalize_domain(answer)
        if answer.strip() and enterprise is None:
            msg = "Invalid GitHub Enterprise URL/domain"
            raise LoginError(msg, provider="github-copilot")
        domain = enterprise or "github.com"
        device_url, token_url, _ = self._urls(domain)
        device = await _json(
            client,
            "POST",
            device_url,
            headers=_GITHUB_FORM,
            content=form({"client_id": CLIENT_ID, "scope": "read:user"}),
        )
        if not isinstance(device, dict):
            msg = "Invalid device code response"
            raise LoginError(msg, provider="github-copilot")
        device_code, user_code = (
            string_field(device, "device_code"),
            string_field(device, "user_code"),
        )
        verification = device.get("verification_uri")
        raw_interval = device.get("interval")
        interval = number_field(device, "interval")
        expires_in = number_field(device, "expires_in")
        if (
            device_code is None
            or user_code is None
            or not isinstance(verification, str)
            or (raw_interval is not None and interval is None)
            or expires_in is None
        ):
            msg = "Invalid device code response fields"
            raise LoginError(msg, provider="github-copilot")
        verification_uri = trusted_http_url(verification)
        if verification_uri is None:
            msg = "Untrusted verification_uri in device code response"
            raise LoginError(msg, provider="github-copilot")
        interaction.notify(
            AuthEvent(
                kind="device_code",
                user_code=user_code,
                url=verification_uri,
                interval_seconds=interval,
                expires_in_seconds=expires_in,
            )
        )

        async def poll() -> PollResult[str]:
            raw = await _json(
                client,
                "POST",
                token_url,
                headers=_GITHUB_FORM,
                content=form(
                    {
                        "client_id": CLIENT_ID,
                        "device_code": device_code,
                        "grant_type": "urn:ietf:params:oauth:grant-type:device_code",
                    }
                ),
            )
            if isinstance(raw, dict) and isinstance(raw.get("access_token"), str):
                return Complete(str(raw["access_token"]))
            if isinstance(raw, dict) and isinstance(raw.get("error"), str):
                error = raw["error"]
                if error == "authorization_pending":
                    return Pending()
                if error == "slow_down":
                    return SlowDown(number_field(raw, "interval"))
                description = raw.get("error_description")
                suffix = f": {description}" if description else ""
                return Failed(f"Device flow failed: {error}{suffix}")
            return Failed("Invalid device token response")

        github_token = await poll_device_code(
            poll, interval=interval, expires_in=expires_in, wait_before_first_poll=True
        )
        credential = await self._copilot_token(client, github_token, enterprise)
        available, to_enable = await self._models(client, credential.access, enterprise)
        enabled: list[str] = []
        if to_enable:
            interaction.notify(AuthEvent(kind="progress", message="Enabling models..."))
            enabled = await self._enable(client, credential.access, to_enable, enterprise)
        ids: list[JSONValue] = list(dict.fromkeys([*available, *enabled]))
        return attrs.evolve(credential, extra={**credential.extra, "availableModelIds": ids})

    async def refresh(
        self, client: httpx.AsyncClient, credential: OAuthCredential
    ) -> OAuthCredential:
        """A new Copilot token from the GitHub token (the ``refresh`` field), and the
        account's models again."""
        enterprise = _enterprise(credential)
        fresh = await self._copilot_token(client, credential.refresh, enterprise)
        available, _ = await self._models(client, fresh.access, enterprise, retries=0)
        ids: list[JSONValue] = list(available)
        return attrs.evolve(fresh, extra={**fresh.extra, "availableModelIds": ids})

    def to_auth(self, credential: OAuthCredential) -> ModelAuth:
        """The Copilot token, and the account's endpoint as the base URL."""
        return ModelAuth(
            api_key=credential.access,
            base_url=self._api(credential.access, _enterprise(credential)),
        )

    async def _copilot_token(
        self, client: httpx.AsyncClient, github_token: str, enterprise: str | None
    ) -> OAuthCredential:
        _, _, url = self._urls(enterprise or "github.com")
        raw = await _json(
            client,
            "GET",
            url,
            headers={
                "Accept": "application/json",
                "Authorization": f"Bearer {github_token}",
                **COPILOT_HEADERS,
            },
        )
        if not isinstance(raw, dict):
            msg = "Invalid Copilot token response"
            raise LoginError(msg, provider="github-copilot")
        token, expires_at = raw.get("token"), number_field(raw, "expires_at")
        if not isinstance(token, str) or expires_at is None:
            msg = "Invalid Copilot token response fields"
            raise LoginError(msg, provider="github-copilot")
        extra: dict[str, JSONValue] = {}
        if enterprise is not None:
            extra["enterpriseUrl"] = enterprise
        return OAuthCredential(
            refresh=github_token,
            access=token,
            expires=int(expires_at * 1000) - _SKEW_MS,
            extra=extra,
        )

    async def _models(
        self, client: httpx.AsyncClient, token: str, enterprise: str | None, *, retries: int = 2
    ) -> tuple[list[str], list[str]]:
        base = self._api(token, enterprise)
        response = await _with_rate_limit_retry(
            client,
            "GET",
            f"{base}/models",
            headers={
                "Accept": "application/json",
                "Authorization": f"Bearer {token}",
                **COPILOT_HEADERS,
                "X-GitHub-Api-Version": COPILOT_API_VERSION,
            },
            retries=retries,
        )
        if response.is_error:
            msg = f"{response.status_code} {response.reason_phrase}: {response.text}"
            raise LoginError(msg, provider="github-copilot")
        return parse_model_catalog(json_object(response), base == INDIVIDUAL_API)

    async def _enable(
        self, client: httpx.AsyncClient, token: str, ids: Sequence[str], enterprise: str | None
    ) -> list[str]:
        # best effort, as pi-ai: a failure skips the model, exhausted rate limits stop
        base = self._api(token, enterprise)
        enabled: list[str] = []
        for model_id in ids:
            try:
                response = await _with_rate_limit_retry(
                    client,
                    "POST",
                    f"{base}/models/{model_id}/policy",
                    headers={
                        "Content-Type": "application/json",
                        "Authorization": f"Bearer {token}",
                        **COPILOT_HEADERS,
                        "openai-intent": "chat-policy",
                        "x-interaction-type": "chat-policy",
                    },
                    content=json.dumps({"state": "enabled"}),
                    retries=2,
                )
            except LoginError:
                continue
            if response.status_code == 429:
                break
            if response.is_success:
                enabled.append(model_id)
        return enabled


def _enterprise(credential: OAuthCredential) -> str | None:
    value = credential.extra.get("enterpriseUrl")
    return normalize_domain(value) if isinstance(value, str) and value else None


async def _json(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    headers: Mapping[str, str],
    content: str | None = None,
) -> JSONValue:
    try:
        response = await client.request(method, url, headers=headers, content=content)
    except httpx.HTTPError as exc:
        msg = f"{type(exc).__name__}: {exc}"
        raise LoginError(msg, provider="github-copilot") from None
    if response.is_error:
        msg = f"{response.status_code} {response.reason_phrase}: {response.text}"
        raise LoginError(msg, provider="github-copilot")
    try:
        return cast("JSONValue", json.loads(response.content))
    except ValueError:
        msg = f"Invalid JSON from {url}: {response.text[:200]}"
        raise LoginError(msg, provider="github-copilot") from None


async def _with_rate_limit_retry(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    headers: Mapping[str, str],
    retries: int,
    content: str | None = None,
) -> httpx.Response:
    """pi-ai's ``fetchWithRateLimitRetry``: a 429 is retried ``retries`` times after its
    ``Retry-After`` (else 0.5 s doubling), within 5 seconds in all."""
    deadline = trio.current_time() + 5.0
    retry = 0
    while True:
        try:
            response = await client.request(
                method, url, headers=headers, content=content, timeout=5
            )
        except httpx.HTTPError as exc:
            msg = f"{type(exc).__name__}: {exc}"
            raise LoginError(msg, provider="github-copilot") from None
        if response.status_code != 429 or retry >= retries:
            return response
        delay = 0.5 * 2**retry
        after = response.headers.get("retry-after")
        if after:
            try:
                delay = float(after)
            except ValueError:
                return response
        delay = max(0.0, delay)
        if delay >= deadline - trio.current_time():
            return response
        retry += 1
        await trio.sleep(delay)
