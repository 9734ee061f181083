"""bedrock-converse-stream against pi-ai 0.85.0: every ``bedrock-*`` trace, event for event.

``tests/providers/data/bedrock`` holds fixtures in the provider oracle's format
(``/work/shared/oracle/providers/PROVIDERS.md``, with the two additions its README
describes: ``options.env`` and binary event-stream body parts) and the traces pi-ai
0.85.0 printed for them: ``tests/providers/node/google_trace.mjs`` ran pi-ai's own
``streamSimple`` (through ``@aws-sdk/client-bedrock-runtime`` 3.1048.0) against the
scripted HTTP responses. Here the same fixtures are played through pitrio's provider (a
real local HTTP server, the API registry) and the traces compared with the oracle's rules.

What differs by runtime or by clock, not by behaviour, is normalized on both sides: the
SigV4 date and signature (``x-amz-date``, the ``authorization`` header's date and
``Signature``; :func:`test_pitrio_signs_pi_ais_requests_alike` checks the signatures
themselves), ``amz-sdk-invocation-id`` (a fresh UUID per call) and the SDK's
``user-agent`` / ``x-amz-user-agent`` (``aws-sdk-js/...`` for pi-ai, ``pitrio/...`` for
pitrio). With Node and the oracle's install at hand,
:func:`test_recorded_traces_are_what_pi_prints_now` re-records every trace live.
"""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from pitrio.testing.provider_conformance import (
    compare_traces,
    expected_path,
    fixture_paths,
    format_trace,
    run_fixture,
)

from ._pi_ai import check_corpus, check_pi_prints_now

pytest.importorskip("botocore", reason="the bedrock extra (pip install 'pitrio[bedrock]')")

DATA = Path(__file__).parent / "data" / "bedrock"
RUNNER = Path(__file__).parent / "node" / "google_trace.mjs"
FIXTURES = fixture_paths("bedrock-", DATA)

_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
_AUTHORIZATION = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=([^/]+)/\d{8}/([^/]+)/bedrock/aws4_request, "
    r"SignedHeaders=([a-z0-9;-]+), Signature=[0-9a-f]{64}$"
)
_DATE = re.compile(r"^\d{8}T\d{6}Z$")

_PLAIN_500 = "500: upstream exploded"
DEVIATIONS: dict[str, str] = {
    "bedrock-21-http-500-text-retried": (
        "an error body that is not JSON reads '<status>: <body>' (pi-ai: the SDK's JSON "
        "parse error of the body; docs/deviations.md)"
    ),
}
"""Fixtures whose trace differs from pi-ai's on purpose (docs/deviations.md)."""


def _load(path: Path) -> Any:
    return json.loads(path.read_text("utf-8"))


def _normalize(trace: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The trace with the clock's and the runtime's parts of the request generalized
    (each checked for its form first)."""
    out = copy.deepcopy(trace)
    for record in out:
        headers = record.get("headers")
        if record["type"] != "request" or not isinstance(headers, dict):
            continue
        assert _UUID.match(headers.pop("amz-sdk-invocation-id")), headers
        for name in ("user-agent", "x-amz-user-agent"):
            assert headers.pop(name).startswith(("aws-sdk-js/3.1048.0", "pitrio/")), headers
        if "x-amz-date" in headers:
            assert _DATE.match(headers.pop("x-amz-date")), headers
        authorization = headers.get("authorization", "")
        match = _AUTHORIZATION.match(authorization)
        if match is not None:
            headers["authorization"] = (
                f"AWS4-HMAC-SHA256 Credential={match.group(1)}/<date>/{match.group(2)}/"
                f"bedrock/aws4_request, SignedHeaders={match.group(3)}, Signature=<signature>"
            )
        else:
            assert authorization.startswith("Bearer "), authorization
    return out


@pytest.fixture(autouse=True)
def _no_ambient_aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The fixtures give their AWS variables in ``options.env``; the machine's own (and
    its ``~/.aws`` files) must not count. Retries do not wait (the SDK's jitter)."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setattr("random.random", lambda: 0.0)


def test_corpus_is_there() -> None:
    """Every fixture has pi-ai's expected trace: a request for every scripted response,
    a result record last."""
    assert len(FIXTURES) == 23
    check_corpus(FIXTURES, DATA)


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.stem)
async def test_trace_matches_pi(fixture: Path) -> None:
    """pitrio's trace equals pi-ai's, record for record (oracle comparison rules)."""
    trace = await run_fixture(fixture)
    expected = _load(expected_path(fixture, DATA))
    problem = compare_traces(fixture, _normalize(expected), _normalize(trace))
    if fixture.stem in DEVIATIONS:
        assert problem is not None
        pytest.xfail(DEVIATIONS[fixture.stem])
    assert problem is None, f"{problem}\n{format_trace(trace)}"


async def test_an_error_body_that_is_not_json_reads_status_and_body() -> None:
    """The deviation of ``bedrock-21``: pi-ai's trace but for the error text, which is
    ``<status>: <body>`` (what pi-ai's ``formatBedrockError`` means to show)."""
    fixture = DATA / "fixtures" / "bedrock-21-http-500-text-retried.json"
    trace = await run_fixture(fixture)
    expected = _load(expected_path(fixture, DATA))
    assert expected[-1]["message"]["errorMessage"].startswith("Unexpected token")
    for record in expected[-2:]:
        key = "error" if record["type"] == "error" else "message"
        record[key]["errorMessage"] = _PLAIN_500
    problem = compare_traces(fixture, _normalize(expected), _normalize(trace))
    assert problem is None, f"{problem}\n{format_trace(trace)}"


@pytest.mark.timeout(600)
def test_recorded_traces_are_what_pi_prints_now() -> None:
    """Re-run pi-ai on every fixture (Node and the oracle's install needed) and compare
    with the committed traces."""
    check_pi_prints_now(RUNNER, FIXTURES, DATA, _normalize)
