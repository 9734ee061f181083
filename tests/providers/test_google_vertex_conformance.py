"""google-vertex against pi-ai 0.85.0: every ``vertex-*`` trace, event for event.

``tests/providers/data/vertex`` holds fixtures in the provider oracle's format
(``/work/shared/oracle/providers/PROVIDERS.md``): twelve of the ``google-*`` fixtures on
Vertex with an API key, and Vertex's own (application default credentials from an
``authorized_user`` and a ``service_account`` file, traded for a token at the scripted
server, and a refused refresh; a missing location; the thinking budgets where pi-ai's
Vertex API differs from its Gemini API), with the traces pi-ai 0.85.0 printed for them:
``tests/providers/node/google_trace.mjs`` ran pi-ai's own ``streamSimple`` (through
``@google/genai`` 1.52.0 and ``google-auth-library`` 10.9.1, whose token requests it
sends to the scripted server) against the scripted HTTP responses.

Besides the runtime names of :mod:`.test_google_generative_ai_conformance`, the token
request's ``User-Agent`` and ``x-goog-api-client`` name the runtime (normalized), and a
service account's JWT assertion holds the time it was made: the trace keeps its decoded
header and claims without the times (``iat``, ``exp``) and the audience, and
:func:`test_the_service_account_assertion_is_signed_with_the_files_key` checks the
signature and the one-hour lifetime.
"""

from __future__ import annotations

import base64
import copy
import json
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

import pytest

from pitrio.providers._google_vertex._auth import clear_token_cache
from pitrio.testing.provider_conformance import (
    compare_traces,
    expected_path,
    fixture_paths,
    format_trace,
    run_fixture,
)

from ._pi_ai import check_corpus, check_pi_prints_now
from .test_google_generative_ai_conformance import RUNNER, _normalize as _normalize_google

DATA = Path(__file__).parent / "data" / "vertex"
FIXTURES = fixture_paths("vertex-", DATA)
VERTEX_ENV = (
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_CLOUD_PROJECT",
    "GCLOUD_PROJECT",
    "GOOGLE_CLOUD_LOCATION",
    "GOOGLE_CLOUD_API_KEY",
)


@pytest.fixture(autouse=True)
def _no_vertex_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # The fixtures give the environment they need (options.env); pi-ai ran without any.
    for name in VERTEX_ENV:
        monkeypatch.delenv(name, raising=False)
    clear_token_cache()


def _load(path: Path) -> Any:
    return json.loads(path.read_text("utf-8"))


def _claims(segment: str) -> Any:
    return json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))


def _normalize(trace: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = copy.deepcopy(trace)
    for record in out:
        if record["type"] != "request" or record["path"] != "/token":
            continue
        headers = record["headers"]
        headers["user-agent"] = "<runtime>"
        headers["x-goog-api-client"] = "<runtime>"
        form = dict(parse_qsl(record["bodyText"]))
        if "assertion" in form:
            header, claims, _signature = form["assertion"].split(".")
            kept = {k: v for k, v in _claims(claims).items() if k not in ("iat", "exp", "aud")}
            form["assertion"] = json.dumps([_claims(header), kept], sort_keys=True)
        record["bodyText"] = urlencode(form)
    # The rest as on google-generative-ai (the stream request's SDK label, made ids).
    is_token = [r["type"] == "request" and r["path"] == "/token" for r in out]
    rest = iter(_normalize_google([r for r, token in zip(out, is_token, strict=True) if not token]))
    return [r if token else next(rest) for r, token in zip(out, is_token, strict=True)]


def test_corpus_is_there() -> None:
    """18 fixtures, each with pi-ai's expected trace."""
    check_corpus(FIXTURES, DATA, 18)


FLASH_LITE_FIX = "vertex-16-flash-lite-minimal-budget"
"""pi-ai sends Gemini 2.5 Flash-Lite a 128-token budget at ``minimal`` on Vertex (its
Vertex API lacks the Flash-Lite row of its Gemini API); pitrio sends 512, Flash-Lite's
floor (``docs/deviations.md``, "google-vertex")."""


@pytest.mark.parametrize(
    "fixture", [f for f in FIXTURES if f.stem != FLASH_LITE_FIX], ids=lambda p: p.stem
)
async def test_trace_matches_pi(fixture: Path) -> None:
    """pitrio's trace equals pi-ai's, record for record (oracle comparison rules)."""
    trace = await run_fixture(fixture)
    expected = _load(expected_path(fixture, DATA))
    problem = compare_traces(fixture, _normalize(expected), _normalize(trace))
    assert problem is None, f"{problem}\n{format_trace(trace)}"


async def test_flash_lite_gets_its_own_budget_on_vertex_too() -> None:
    """pi-ai's trace, but for the budget: 512 (as pi-ai's Gemini API), not 128."""
    fixture = DATA / "fixtures" / f"{FLASH_LITE_FIX}.json"
    expected = _load(expected_path(fixture, DATA))
    config = expected[0]["body"]["generationConfig"]["thinkingConfig"]
    assert config == {"includeThoughts": True, "thinkingBudget": 128}
    fixed = copy.deepcopy(expected)
    fixed[0]["body"]["generationConfig"]["thinkingConfig"]["thinkingBudget"] = 512
    trace = await run_fixture(fixture)
    assert compare_traces(fixture, _normalize(fixed), _normalize(trace)) is None


async def test_the_service_account_assertion_is_signed_with_the_files_key() -> None:
    """The JWT pitrio sends is RS256 over the file's key, valid for one hour from now."""
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding, rsa

    fixture = DATA / "fixtures" / "vertex-14-adc-service-account.json"
    before = int(time.time())
    trace = await run_fixture(fixture)
    form = dict(parse_qsl(trace[0]["bodyText"]))
    assert form["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer"
    header, claims, signature = form["assertion"].split(".")
    assert _claims(header)["alg"] == "RS256"
    payload = _claims(claims)
    assert before <= payload["iat"] <= int(time.time())
    assert payload["exp"] - payload["iat"] == 3600
    assert payload["aud"].endswith("/token")
    pem = _load(fixture)["files"]["sa.json"]["private_key"].encode()
    key = serialization.load_pem_private_key(pem, password=None)
    assert isinstance(key, rsa.RSAPrivateKey)
    key.public_key().verify(  # raises InvalidSignature if it is not the file's key's
        base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4)),
        f"{header}.{claims}".encode(),
        padding.PKCS1v15(),
        hashes.SHA256(),
    )


@pytest.mark.timeout(600)
def test_recorded_traces_are_what_pi_prints_now() -> None:
    """Re-run pi-ai on every fixture (Node and the oracle's install needed) and compare
    with the committed traces."""
    check_pi_prints_now(RUNNER, FIXTURES, DATA, _normalize)
