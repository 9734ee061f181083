"""Bedrock's credentials, region, endpoint and request signing (pi-ai 0.85.0 with the
AWS SDK for JavaScript v3 under it).

What ``bedrock-converse-stream.js`` configures on its ``BedrockRuntimeClient``, and what
the SDK then resolves, in pi-ai's order:

- **Bearer token** (Bedrock API keys): ``extra["bearerToken"]``, else the API key, else
  ``AWS_BEARER_TOKEN_BEDROCK``; sent as ``Authorization: Bearer`` instead of SigV4, unless
  ``AWS_BEDROCK_SKIP_AUTH=1``. pi-ai's ``"<authenticated>"`` marker is not a key.
- **SigV4 credentials**: ``AWS_BEDROCK_SKIP_AUTH=1`` signs with dummy keys (proxies that
  do not check); ``AWS_ACCESS_KEY_ID`` + ``AWS_SECRET_ACCESS_KEY`` (+
  ``AWS_SESSION_TOKEN``) unless a profile was chosen for this request
  (``extra["profile"]`` or ``AWS_PROFILE`` in ``extra["env"]``); then the profile
  (that one, ``AWS_PROFILE``, else ``default``) from the shared files
  (``AWS_SHARED_CREDENTIALS_FILE`` / ``~/.aws/credentials``, ``AWS_CONFIG_FILE`` /
  ``~/.aws/config``); then botocore's own credential chain for what needs more than a
  file (SSO, assumed roles, ``credential_process``, ECS and EC2 roles, web identity).
- **Region**: the one in an inference-profile ARN, else ``extra["region"]``,
  ``AWS_REGION``, ``AWS_DEFAULT_REGION``, else the model's standard endpoint's region
  when that endpoint is used, else ``us-east-1`` unless ``AWS_PROFILE`` is set, else
  the profile's ``region``.
- **Endpoint**: ``model.base_url`` unless it is a standard
  ``bedrock-runtime.<region>.amazonaws.com`` URL and a region or ``AWS_PROFILE`` is
  configured, in which case the region's standard endpoint.

Every variable is read from ``extra["env"]`` first, then the process environment
(pi-ai's ``getProviderEnvValue``). Signing is botocore's ``SigV4Auth`` (service
``bedrock``), over the same headers the JavaScript SDK signs.
"""

from __future__ import annotations

import configparser
import os
import re
from collections.abc import Mapping
from typing import Any, Final, Literal, final
from urllib.parse import urlsplit

import attrs
import trio

from ..._messages import JSONValue
from ..._model import Model, StreamOptions

__all__ = [
    "AUTHENTICATED",
    "AwsCredentials",
    "BedrockAuth",
    "CredentialsError",
    "env_value",
    "load_profile",
    "resolve_auth",
    "resolve_endpoint",
    "resolve_region",
    "sign_sigv4",
]

AUTHENTICATED: Final = "<authenticated>"
"""pi-ai's marker key for ambient credentials (``env_api_key``): never a bearer token."""

_ARN_REGION: Final = re.compile(r"^arn:aws(?:-[a-z0-9-]+)?:bedrock:([a-z0-9-]+):")
_STANDARD_ENDPOINT: Final = re.compile(
    r"^bedrock-runtime(?:-fips)?\.([a-z0-9-]+)\.amazonaws\.com(?:\.cn)?$"
)


class CredentialsError(Exception):
    """No AWS credentials or region could be resolved (the text is the SDK's)."""


@final
@attrs.frozen(repr=False)
class AwsCredentials:
    """An access key pair, with the session token of temporary credentials."""

    access_key_id: str
    secret_access_key: str
    session_token: str | None = None

    def __repr__(self) -> str:
        return f"AwsCredentials(access_key_id={self.access_key_id!r}, ...)"


@final
@attrs.frozen(kw_only=True)
class BedrockAuth:
    """How one request authenticates, where it goes and which region signs it."""

    kind: Literal["sigv4", "bearer"]
    region: str
    endpoint: str
    credentials: AwsCredentials | None = attrs.field(default=None, repr=False)
    token: str | None = attrs.field(default=None, repr=False)


def _scoped_env(options: StreamOptions) -> Mapping[str, JSONValue]:
    env = options.extra.get("env")
    return env if isinstance(env, Mapping) else {}


def env_value(name: str, options: StreamOptions) -> str | None:
    """``name`` from ``options.extra["env"]``, else the process environment (pi-ai's
    ``getProviderEnvValue``); empty values count as unset."""
    scoped = _scoped_env(options).get(name)
    if isinstance(scoped, str) and scoped:
        return scoped
    return os.environ.get(name) or None


def _extra_str(options: StreamOptions, key: str) -> str | None:
    value = options.extra.get(key)
    return value if isinstance(value, str) and value else None


def _configured_region(options: StreamOptions) -> str | None:
    return (
        _extra_str(options, "region")
        or env_value("AWS_REGION", options)
        or env_value("AWS_DEFAULT_REGION", options)
    )


def _endpoint_region(base_url: str) -> str | None:
    try:
        host = urlsplit(base_url).hostname or ""
    except ValueError:
        return None
    match = _STANDARD_ENDPOINT.match(host.lower())
    return match.group(1) if match else None


def _use_explicit_endpoint(model: Model, options: StreamOptions) -> bool:
    if _endpoint_region(model.base_url) is None:
        return True
    return not _configured_region(options) and not os.environ.get("AWS_PROFILE")


def _profile_name(options: StreamOptions) -> str | None:
    return _extra_str(options, "profile") or env_value("AWS_PROFILE", options)


def resolve_region(model: Model, options: StreamOptions) -> str:
    """The signing region (see the module docstring for the order).

    Raises:
        CredentialsError: ``AWS_PROFILE`` is set and neither it nor anything else
            names a region.
    """
    arn = _ARN_REGION.match(model.id)
    if arn:
        return arn.group(1)
    configured = _configured_region(options)
    if configured:
        return configured
    endpoint_region = _endpoint_region(model.base_url)
    if endpoint_region and _use_explicit_endpoint(model, options):
        return endpoint_region
    if not os.environ.get("AWS_PROFILE"):
        return "us-east-1"
    _, region = load_profile(_profile_name(options) or "default", options)
    if region:
        return region
    msg = "Region is missing"
    raise CredentialsError(msg)


def resolve_endpoint(model: Model, options: StreamOptions, region: str) -> str:
    """The URL the ``/model/<id>/converse-stream`` path is appended to (no base URL: the
    region's standard endpoint, as the SDK ignores an empty one)."""
    if model.base_url and _use_explicit_endpoint(model, options):
        return model.base_url.rstrip("/")
    suffix = ".cn" if region.startswith("cn-") else ""
    return f"https://bedrock-runtime.{region}.amazonaws.com{suffix}"


def _shared_file(options: StreamOptions, variable: str, default: str) -> str:
    given = env_value(variable, options)
    if given:
        return os.path.expanduser(given)
    home = env_value("HOME", options) or os.path.expanduser("~")
    return os.path.join(home, ".aws", default)


def _read_ini(path: str) -> configparser.RawConfigParser:
    parser = configparser.RawConfigParser(default_section="\x00none")
    try:
        parser.read(path, encoding="utf-8")
    except (configparser.Error, UnicodeDecodeError):
        return configparser.RawConfigParser()
    return parser


def load_profile(profile: str, options: StreamOptions) -> tuple[AwsCredentials | None, str | None]:
    """The static keys and the region of ``profile`` in the shared files (the SDK's
    ``fromIni``: the credentials file wins over the config file for the same key).

    The config file names a profile ``[profile NAME]`` (``[default]`` for the default
    one), the credentials file ``[NAME]``. Either part is ``None`` when not there."""
    values: dict[str, str] = {}
    config = _read_ini(_shared_file(options, "AWS_CONFIG_FILE", "config"))
    for section in (
        (f"profile {profile}", profile) if profile == "default" else (f"profile {profile}",)
    ):
        if config.has_section(section):
            values.update(config.items(section))
            break
    credentials_file = _read_ini(
        _shared_file(options, "AWS_SHARED_CREDENTIALS_FILE", "credentials")
    )
    if credentials_file.has_section(profile):
        values.update(credentials_file.items(profile))
    key_id = values.get("aws_access_key_id", "").strip()
    secret = values.get("aws_secret_access_key", "").strip()
    token = values.get("aws_session_token", "").strip() or None
    credentials = AwsCredentials(key_id, secret, token) if key_id and secret else None
    return credentials, values.get("region", "").strip() or None


_CHAINS: dict[tuple[str | None, str | None, str | None], Any] = {}
"""botocore's credentials per profile and shared files, kept across requests: a role's or
SSO's temporary credentials are refreshed by botocore when they expire, not fetched anew
for every request."""


def _botocore_chain(profile: str | None) -> AwsCredentials | None:
    # Runs in a worker thread: botocore's providers may read files, run a
    # credential_process or call the container/instance metadata endpoints.
    import botocore.exceptions
    import botocore.session

    key = (
        profile,
        os.environ.get("AWS_CONFIG_FILE"),
        os.environ.get("AWS_SHARED_CREDENTIALS_FILE"),
    )
    try:
        found: Any = _CHAINS.get(key)
        if found is None:
            found = botocore.session.Session(profile=profile).get_credentials()
            if found is None:
                return None
            _CHAINS[key] = found
        frozen = found.get_frozen_credentials()
    except botocore.exceptions.BotoCoreError as exc:
        raise CredentialsError(str(exc)) from None
    return AwsCredentials(frozen.access_key, frozen.secret_key, frozen.token or None)


async def _sigv4_credentials(options: StreamOptions) -> AwsCredentials:
    if env_value("AWS_BEDROCK_SKIP_AUTH", options) == "1":
        return AwsCredentials("dummy-access-key", "dummy-secret-key")
    chosen_profile = _extra_str(options, "profile") or (
        _scoped_env(options).get("AWS_PROFILE") or None
    )
    key_id = env_value("AWS_ACCESS_KEY_ID", options)
    secret = env_value("AWS_SECRET_ACCESS_KEY", options)
    if key_id and secret and not chosen_profile:
        return AwsCredentials(key_id, secret, env_value("AWS_SESSION_TOKEN", options))
    profile = _profile_name(options)
    credentials, _ = load_profile(profile or "default", options)
    if credentials is not None:
        return credentials
    found = await trio.to_thread.run_sync(_botocore_chain, profile)
    if found is None:
        msg = (
            "Could not load credentials from any providers (set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or AWS_BEARER_TOKEN_BEDROCK)"
        )
        raise CredentialsError(msg)
    return found


async def resolve_auth(model: Model, options: StreamOptions) -> BedrockAuth:
    """Resolve the request's authentication, region and endpoint.

    Raises:
        CredentialsError: no credentials (or no region) could be found.
    """
    region = resolve_region(model, options)
    endpoint = resolve_endpoint(model, options, region)
    skip = env_value("AWS_BEDROCK_SKIP_AUTH", options) == "1"
    api_key = options.api_key if options.api_key != AUTHENTICATED else None
    token = (
        _extra_str(options, "bearerToken")
        or api_key
        or env_value("AWS_BEARER_TOKEN_BEDROCK", options)
    )
    if token and not skip:
        return BedrockAuth(kind="bearer", region=region, endpoint=endpoint, token=token)
    credentials = await _sigv4_credentials(options)
    return BedrockAuth(kind="sigv4", region=region, endpoint=endpoint, credentials=credentials)


def sign_sigv4(
    method: str,
    url: str,
    headers: Mapping[str, str],
    body: bytes,
    credentials: AwsCredentials,
    region: str,
) -> dict[str, str]:
    """``headers`` plus ``x-amz-date``, ``x-amz-security-token`` (temporary
    credentials) and ``authorization``: botocore's SigV4 for service ``bedrock``.

    Every header given is signed (``host`` is taken from ``url``); the caller adds
    ``x-amz-content-sha256`` and ``content-length`` first, as the JavaScript SDK signs
    them."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    request = AWSRequest(method=method, url=url, headers=dict(headers), data=body)
    signer = SigV4Auth(
        Credentials(
            credentials.access_key_id, credentials.secret_access_key, credentials.session_token
        ),
        "bedrock",
        region,
    )
    signer.add_auth(request)
    return {name.lower(): str(value) for name, value in request.headers.items()}
