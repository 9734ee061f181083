"""Bedrock's credentials, region, endpoint and SigV4 signing (``_bedrock_converse_stream._auth``).

Everything is resolved from temporary files and environments (no network): the
variables of ``options.extra["env"]`` before the process's, the shared credentials and
config files, bearer tokens, botocore's chain (``credential_process``). The signatures
are compared with the AWS SDK for JavaScript's own signer (``@smithy/signature-v4``, under
pi-ai's Bedrock client): ``data/bedrock/signatures.json`` was printed by
``node/bedrock_sign.mjs``, and :func:`test_recorded_signatures_are_what_the_sdk_signs_now`
signs again with Node at hand.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from pitrio import Model, StreamOptions

pytest.importorskip("botocore", reason="the bedrock extra (pip install 'pitrio[bedrock]')")

from pitrio.providers._bedrock_converse_stream._auth import (
    AwsCredentials,
    CredentialsError,
    load_profile,
    resolve_auth,
    resolve_endpoint,
    resolve_region,
    sign_sigv4,
)

from ._pi_ai import run_pi_scripts

DATA = Path(__file__).parent / "data" / "bedrock"
SIGNER = Path(__file__).parent / "node" / "bedrock_sign.mjs"
STANDARD = "https://bedrock-runtime.us-east-1.amazonaws.com"


@pytest.fixture(autouse=True)
def aws_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No AWS variable of the machine counts; the shared files are the test's own."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # botocore: no IMDS calls
    return tmp_path


def _model(
    model_id: str = "anthropic.claude-sonnet-4-5-20250929-v1:0", base_url: str = STANDARD
) -> Model:
    return Model(
        id=model_id,
        name=model_id,
        api="bedrock-converse-stream",
        provider="amazon-bedrock",
        base_url=base_url,
    )


def _options(api_key: str | None = None, **extra: Any) -> StreamOptions:
    return StreamOptions(api_key=api_key, extra=extra)


# -- signing --------------------------------------------------------------------------


def _sign_case(case: dict[str, Any]) -> dict[str, str]:
    creds = case["credentials"]
    when = datetime.datetime.fromisoformat(case["date"].replace("Z", "+00:00")).replace(tzinfo=None)
    with mock.patch("botocore.auth.get_current_datetime", return_value=when):
        return sign_sigv4(
            "POST",
            case["url"],
            case["headers"],
            case["body"].encode(),
            AwsCredentials(
                creds["accessKeyId"], creds["secretAccessKey"], creds.get("sessionToken")
            ),
            case["region"],
        )


def test_signatures_match_the_sdk() -> None:
    """pitrio's SigV4 (botocore, with the JavaScript SDK's signed headers) gives the SDK's
    own ``authorization`` for an escaped model id, an ARN, a session token and a header
    with runs of spaces."""
    cases = json.loads((DATA / "signatures.json").read_text("utf-8"))
    assert len(cases) == 2
    for case in cases:
        headers = {
            **case["headers"],
            "x-amz-content-sha256": case["signed"]["x-amz-content-sha256"],
        }
        signed = _sign_case({**case, "headers": headers})
        assert signed["authorization"] == case["signed"]["authorization"], case["name"]
        assert signed["x-amz-date"] == case["signed"]["x-amz-date"]
        assert signed.get("x-amz-security-token") == case["signed"].get("x-amz-security-token")


def test_recorded_signatures_are_what_the_sdk_signs_now(tmp_path: Path) -> None:
    """Sign the cases again with ``@smithy/signature-v4`` (Node and the oracle needed)."""
    recorded = json.loads((DATA / "signatures.json").read_text("utf-8"))
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps([{k: v for k, v in c.items() if k != "signed"} for c in recorded]))
    (done,) = run_pi_scripts(SIGNER, [cases], timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == recorded


# -- credentials ------------------------------------------------------------------------


async def test_iam_keys_from_the_environment_with_a_session_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDPROCESS")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "process-secret")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "process-token")
    auth = await resolve_auth(_model(), _options())
    assert auth.kind == "sigv4"
    assert auth.credentials == AwsCredentials("AKIDPROCESS", "process-secret", "process-token")
    assert (auth.region, auth.endpoint) == ("us-east-1", STANDARD)
    assert "process-secret" not in repr(auth.credentials)


async def test_scoped_env_comes_before_the_process_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDPROCESS")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "process-secret")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    env = {
        "AWS_ACCESS_KEY_ID": "AKIDSCOPED",
        "AWS_SECRET_ACCESS_KEY": "scoped",
        "AWS_REGION": "ap-south-1",
    }
    auth = await resolve_auth(_model(), _options(env=env))
    assert auth.credentials == AwsCredentials("AKIDSCOPED", "scoped")
    assert auth.region == "ap-south-1"
    # A configured region moves a standard catalog endpoint to that region's.
    assert auth.endpoint == "https://bedrock-runtime.ap-south-1.amazonaws.com"


async def test_a_profile_from_the_shared_files(
    monkeypatch: pytest.MonkeyPatch, aws_home: Path
) -> None:
    """``AWS_PROFILE``: its keys from the credentials file (which wins over the config
    file), its region from the config file (``[profile NAME]``)."""
    (aws_home / "config").write_text(
        "[default]\nregion = us-west-1\n\n[profile work]\nregion = eu-north-1\n"
        "aws_access_key_id = AKIDCONFIG\naws_secret_access_key = config-secret\n"
    )
    (aws_home / "credentials").write_text(
        "[work]\naws_access_key_id = AKIDWORK\naws_secret_access_key = work-secret\n"
        "aws_session_token = work-token\n"
    )
    monkeypatch.setenv("AWS_PROFILE", "work")
    auth = await resolve_auth(_model(), _options())
    assert auth.credentials == AwsCredentials("AKIDWORK", "work-secret", "work-token")
    assert auth.region == "eu-north-1"
    assert auth.endpoint == "https://bedrock-runtime.eu-north-1.amazonaws.com"
    assert load_profile("default", _options()) == (None, "us-west-1")


async def test_a_profile_chosen_for_the_request_beats_ambient_keys(
    monkeypatch: pytest.MonkeyPatch, aws_home: Path
) -> None:
    """pi-ai's #6957: ``AWS_PROFILE`` in the request's env wins over ``AWS_ACCESS_KEY_ID``."""
    (aws_home / "credentials").write_text(
        "[chosen]\naws_access_key_id = AKIDCHOSEN\naws_secret_access_key = chosen\n"
    )
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDAMBIENT")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "ambient")
    auth = await resolve_auth(_model(), _options(env={"AWS_PROFILE": "chosen"}))
    assert auth.credentials == AwsCredentials("AKIDCHOSEN", "chosen")
    auth = await resolve_auth(_model(), _options(profile="chosen"))
    assert auth.credentials == AwsCredentials("AKIDCHOSEN", "chosen")


async def test_botocores_chain_runs_a_credential_process(
    monkeypatch: pytest.MonkeyPatch, aws_home: Path
) -> None:
    """A profile without static keys: botocore's chain (here ``credential_process``),
    run once for two requests (the credentials are kept, without an expiry)."""
    script = aws_home / "creds.py"
    runs = aws_home / "runs"
    script.write_text(
        f"import json\nopen({str(runs)!r}, 'a').write('run\\n')\n"
        "print(json.dumps({'Version': 1, 'AccessKeyId': 'AKIDPROC', "
        "'SecretAccessKey': 'proc-secret', 'SessionToken': 'proc-token'}))\n"
    )
    (aws_home / "config").write_text(
        f"[profile proc]\nregion = us-east-2\ncredential_process = {sys.executable} {script}\n"
    )
    monkeypatch.setenv("AWS_PROFILE", "proc")
    auth = await resolve_auth(_model(), _options())
    assert auth.credentials == AwsCredentials("AKIDPROC", "proc-secret", "proc-token")
    assert auth.region == "us-east-2"
    again = await resolve_auth(_model(), _options())
    assert again.credentials == auth.credentials
    assert runs.read_text().splitlines() == ["run"]


async def test_no_credentials_at_all_is_a_clear_error() -> None:
    with pytest.raises(CredentialsError, match="Could not load credentials from any providers"):
        await resolve_auth(_model(), _options())


async def test_bearer_tokens_and_the_authenticated_marker(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Bedrock API key (the request's key, ``extra["bearerToken"]`` or
    ``AWS_BEARER_TOKEN_BEDROCK``) is a bearer token; pi-ai's ``<authenticated>`` marker is
    not; ``AWS_BEDROCK_SKIP_AUTH=1`` signs with dummy keys instead."""
    auth = await resolve_auth(_model(), _options("bedrock-key"))
    assert (auth.kind, auth.token) == ("bearer", "bedrock-key")
    auth = await resolve_auth(_model(), _options("bedrock-key", bearerToken="explicit"))
    assert auth.token == "explicit"
    monkeypatch.setenv("AWS_BEARER_TOKEN_BEDROCK", "from-env")
    auth = await resolve_auth(_model(), _options("<authenticated>"))
    assert (auth.kind, auth.token) == ("bearer", "from-env")
    auth = await resolve_auth(_model(), _options("bedrock-key", env={"AWS_BEDROCK_SKIP_AUTH": "1"}))
    assert auth.kind == "sigv4"
    assert auth.credentials == AwsCredentials("dummy-access-key", "dummy-secret-key")


# -- region and endpoint ----------------------------------------------------------------


def test_region_order(monkeypatch: pytest.MonkeyPatch, aws_home: Path) -> None:
    arn = "arn:aws:bedrock:ap-northeast-1:123456789012:application-inference-profile/x"
    assert resolve_region(_model(arn), _options(region="eu-west-3")) == "ap-northeast-1"
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-west-2")
    assert resolve_region(_model(), _options()) == "us-west-2"
    monkeypatch.setenv("AWS_REGION", "eu-west-2")
    assert resolve_region(_model(), _options()) == "eu-west-2"
    assert resolve_region(_model(), _options(region="eu-west-3")) == "eu-west-3"
    monkeypatch.delenv("AWS_REGION")
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    # The standard endpoint's own region, else us-east-1.
    fips = _model(base_url="https://bedrock-runtime-fips.ca-central-1.amazonaws.com")
    assert resolve_region(fips, _options()) == "ca-central-1"
    assert resolve_region(_model(base_url="http://127.0.0.1:9/proxy"), _options()) == "us-east-1"
    # An ambient AWS_PROFILE: the profile's region, or none.
    monkeypatch.setenv("AWS_PROFILE", "bare")
    with pytest.raises(CredentialsError, match="Region is missing"):
        resolve_region(_model(), _options())
    (aws_home / "config").write_text("[profile bare]\nregion = sa-east-1\n")
    assert resolve_region(_model(), _options()) == "sa-east-1"


def test_endpoint_choice() -> None:
    proxy = _model(base_url="http://127.0.0.1:9/proxy/")
    assert (
        resolve_endpoint(proxy, _options(region="eu-west-1"), "eu-west-1")
        == "http://127.0.0.1:9/proxy"
    )
    assert resolve_endpoint(_model(), _options(), "us-east-1") == STANDARD
    moved = resolve_endpoint(_model(), _options(region="cn-north-1"), "cn-north-1")
    assert moved == "https://bedrock-runtime.cn-north-1.amazonaws.com.cn"
    unset = resolve_endpoint(_model(base_url=""), _options(), "eu-west-1")
    assert unset == "https://bedrock-runtime.eu-west-1.amazonaws.com"
