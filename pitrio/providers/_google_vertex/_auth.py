"""Google application default credentials (ADC): an OAuth access token for Vertex AI.

What ``google-auth-library`` (10.9.1, under ``@google/genai``) does for pi-ai when no API
key is given: find the credentials file (``GOOGLE_APPLICATION_CREDENTIALS``, else
gcloud's ``application_default_credentials.json``), and trade it for an access token
at Google's token endpoint, then send ``Authorization: Bearer <token>`` (and
``x-goog-user-project`` for a quota project):

- ``authorized_user`` (``gcloud auth application-default login``): a
  ``refresh_token`` grant with the file's client id and secret;
- ``service_account``: a JWT-bearer grant, the assertion an RS256-signed JWT
  (``iss`` the client email, ``scope`` cloud-platform, one hour) signed with the
  file's private key by ``google-auth``'s ``RSASigner`` (the ``vertex`` extra: pitrio
  has no RSA code of its own). google-auth's own refresh is synchronous; the token request
  here goes through the shared ``httpx`` client on Trio, so it is cancelled with the
  stream.

Tokens are kept per credentials file (its path and contents) until five minutes before
they expire. The token request is bounded by ``options.timeout`` (default 600 s). The
token endpoint is the file's ``token_uri`` when it has one, else
``https://oauth2.googleapis.com/token``.
"""

from __future__ import annotations

import base64
import json
import os
import platform
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlencode

import attrs
import httpx

from ..._model import StreamOptions
from .._http import pi_user_agent
from .._options import provider_env
from .._request import ProviderFailure

__all__ = ["AccessToken", "adc_path", "clear_token_cache", "fetch_access_token"]

TOKEN_URL: Final = "https://oauth2.googleapis.com/token"
SCOPE: Final = "https://www.googleapis.com/auth/cloud-platform"
_JWT_GRANT: Final = "urn:ietf:params:oauth:grant-type:jwt-bearer"
_EXPIRY_MARGIN: Final = 300.0
_DEFAULT_TIMEOUT: Final = 600.0
"""Seconds the token request may take (``StreamOptions.timeout`` when given)."""
_NOT_FOUND: Final = (
    "Could not load the default credentials. Browse to "
    "https://cloud.google.com/docs/authentication/getting-started for more information."
)


@attrs.frozen(kw_only=True)
class AccessToken:
    """An access token and the headers it is sent in."""

    token: str
    expires_at: float
    quota_project: str | None = None

    def headers(self) -> dict[str, str]:
        """``Authorization`` (and ``x-goog-user-project`` for a quota project)."""
        headers = {"Authorization": f"Bearer {self.token}"}
        if self.quota_project:
            headers["x-goog-user-project"] = self.quota_project
        return headers


_cache: dict[tuple[str, str], AccessToken] = {}


def clear_token_cache() -> None:
    """Forget every cached access token."""
    _cache.clear()


def adc_path(options: StreamOptions) -> Path:
    """The credentials file: ``GOOGLE_APPLICATION_CREDENTIALS``, else gcloud's
    (``%APPDATA%/gcloud`` on Windows, ``~/.config/gcloud`` elsewhere)."""
    explicit = provider_env("GOOGLE_APPLICATION_CREDENTIALS", options)
    if explicit:
        return Path(explicit).expanduser()
    if os.name == "nt" and os.environ.get("APPDATA"):
        return Path(os.environ["APPDATA"]) / "gcloud" / "application_default_credentials.json"
    return Path.home() / ".config" / "gcloud" / "application_default_credentials.json"


async def fetch_access_token(client: httpx.AsyncClient, options: StreamOptions) -> AccessToken:
    """A valid access token for the application default credentials.

    Raises:
        ProviderFailure: no credentials file, one pitrio cannot use, or a token
            endpoint that refused (its error and description in the text).
    """
    path = adc_path(options)
    try:
        text = path.read_text("utf-8")
    except OSError as exc:
        if not provider_env("GOOGLE_APPLICATION_CREDENTIALS", options):
            raise ProviderFailure(_NOT_FOUND) from None  # no gcloud file either
        msg = f"The credentials file {path} cannot be read: {exc.strerror or exc}"
        raise ProviderFailure(msg) from None
    key = (str(path), text)
    cached = _cache.get(key)
    if cached is not None and cached.expires_at - _EXPIRY_MARGIN > time.time():
        return cached
    try:
        info = json.loads(text)
    except ValueError as exc:
        msg = f"The credentials file {path} is not JSON: {exc}"
        raise ProviderFailure(msg) from None
    if not isinstance(info, dict):
        msg = f"The credentials file {path} is not a JSON object"
        raise ProviderFailure(msg)
    kind = info.get("type")
    accept = "application/json"
    if kind == "authorized_user":
        accept = "*/*"
        form = {
            "refresh_token": _field(info, "refresh_token", path),
            "client_id": _field(info, "client_id", path),
            "client_secret": _field(info, "client_secret", path),
            "grant_type": "refresh_token",
        }
    elif kind == "service_account":
        form = {"grant_type": _JWT_GRANT, "assertion": _service_account_assertion(info, path)}
    else:
        msg = (
            f"Unsupported credentials type {kind!r} in {path}: pitrio reads authorized_user "
            "(gcloud auth application-default login) and service_account files"
        )
        raise ProviderFailure(msg)
    token_url = info.get("token_uri") if isinstance(info.get("token_uri"), str) else TOKEN_URL
    limit = options.timeout if options.timeout is not None else _DEFAULT_TIMEOUT
    token = await _token_request(client, token_url or TOKEN_URL, form, accept, limit)
    quota = info.get("quota_project_id")
    token = attrs.evolve(token, quota_project=quota if isinstance(quota, str) else None)
    _cache[key] = token
    return token


def _field(info: Mapping[str, Any], name: str, path: Path) -> str:
    value = info.get(name)
    if not isinstance(value, str) or not value:
        msg = f"The credentials file {path} has no {name} field"
        raise ProviderFailure(msg)
    return value


def _service_account_assertion(info: Mapping[str, Any], path: Path) -> str:
    try:
        from google.auth import crypt
    except ImportError:
        msg = (
            "Service account credentials need the google-auth package: pip install 'pitrio[vertex]'"
        )
        raise ProviderFailure(msg) from None
    email = _field(info, "client_email", path)
    _field(info, "private_key", path)
    try:
        signer = crypt.RSASigner.from_service_account_info(info)  # type: ignore[no-untyped-call]  # google-auth's mixin is untyped
    except ValueError as exc:
        msg = f"The private key of {path} cannot be read: {exc}"
        raise ProviderFailure(msg) from None
    now = int(time.time())
    token_url = info.get("token_uri") if isinstance(info.get("token_uri"), str) else TOKEN_URL
    payload = {
        "iss": email,
        "scope": SCOPE,
        "aud": token_url or TOKEN_URL,
        "exp": now + 3600,
        "iat": now,
    }
    # As the jws package signs for google-auth-library: the header is only {"alg"}.
    signing_input = f"{_segment({'alg': 'RS256'})}.{_segment(payload)}"
    signature = base64.urlsafe_b64encode(signer.sign(signing_input)).rstrip(b"=")
    return f"{signing_input}.{signature.decode('ascii')}"


def _refusal_text(status: int, body: Any, body_text: str) -> str:
    """gaxios's message for a refused token request: the OAuth ``error`` code
    (``invalid_grant``) or a Google error's ``message``, as pi-ai reports it; other
    bodies are named with their status."""
    problem = body.get("error") if isinstance(body, dict) else None
    if isinstance(problem, str) and problem:
        return problem
    if isinstance(problem, dict) and isinstance(problem.get("message"), str):
        return str(problem["message"])
    return f"Google token endpoint error ({status}): {body_text[:200]}"


def _segment(value: Mapping[str, Any]) -> str:
    raw = json.dumps(value, separators=(",", ":")).encode("utf-8")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


async def _token_request(
    client: httpx.AsyncClient, url: str, form: Mapping[str, str], accept: str, limit: float
) -> AccessToken:
    headers = {
        "Accept": accept,
        "Content-Type": "application/x-www-form-urlencoded;charset=UTF-8",
        "User-Agent": pi_user_agent(),
        "x-goog-api-client": f"gl-python/{platform.python_version()}",
    }
    try:
        response = await client.post(
            url, content=urlencode(form).encode("ascii"), headers=headers, timeout=limit
        )
        body_text = response.text
    except httpx.HTTPError as exc:
        msg = f"Request to the Google token endpoint failed: {exc}"
        raise ProviderFailure(msg) from exc
    try:
        body = json.loads(body_text) if body_text else None
    except ValueError:
        body = None
    if response.status_code >= 400 or not isinstance(body, dict):
        raise ProviderFailure(_refusal_text(response.status_code, body, body_text))
    token = body.get("access_token")
    if not isinstance(token, str) or not token:
        msg = "Google token endpoint answered without an access_token"
        raise ProviderFailure(msg)
    expires_in = body.get("expires_in")
    lifetime = float(expires_in) if isinstance(expires_in, int | float) else 3600.0
    return AccessToken(token=token, expires_at=time.time() + lifetime)
