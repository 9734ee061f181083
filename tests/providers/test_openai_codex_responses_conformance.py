"""openai-codex-responses against pi-ai 0.85.0: every ``codex-*`` and ``codexws-*`` trace.

``tests/providers/data/codex`` holds fixtures in the provider oracle's format
(``/work/shared/oracle/providers/PROVIDERS.md``) and the traces pi-ai 0.85.0 printed
for them: ``tests/providers/node/google_trace.mjs`` (the oracle's ``trace.mjs`` with
this API added) ran pi-ai's own ``streamSimple`` against the scripted responses, over
SSE (``fixtures/``, ``options.transport: "sse"``) and over its WebSocket transport
(``websocket/``: Node 20 with ``--experimental-websocket``, the scripted server
answering the upgrade and sending each body part as one message). Here the same
fixtures are played through pitrio's provider (the same scripted server in
``pitrio.testing``, the API registry) and the traces compared with the oracle's rules.
With Node and the oracle's install at hand, the ``..._what_pi_prints_now`` tests
re-record every trace live.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest

from pitrio.providers._openai_codex_responses._websocket import reset_sse_fallback
from pitrio.testing.provider_conformance import (
    compare_traces,
    expected_path,
    fixture_paths,
    format_trace,
    run_fixture,
)

from ._pi_ai import check_corpus, check_pi_prints_now, load
from .test_google_generative_ai_conformance import RUNNER

DATA = Path(__file__).parent / "data" / "codex"
FIXTURES = fixture_paths("codex-", DATA)
WS_DATA = DATA / "websocket"
WS_FIXTURES = fixture_paths("codexws-", WS_DATA)

# What each WebSocket client adds to its handshake (Node's undici, trio-websocket), and
# the handshake's random key: not the provider's.
_WS_PROTOCOL_HEADERS = frozenset(
    {
        "accept",
        "cache-control",
        "pragma",
        "upgrade",
        "sec-websocket-extensions",
        "sec-websocket-key",
        "sec-websocket-version",
    }
)
_UUID7 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
_DIAGNOSTIC_TEXT_DIFFERS = {"codexws-06-refused-falls-back"}
"""Fixtures whose transport diagnostic holds the runtime's own text (Node's WebSocket:
``Received network error or non-101 status code.``)."""
_PI_BUG = {"codexws-09-incomplete"}
"""pi-ai records a transport failure where there is none (``docs/deviations.md``)."""


def _normalize_ws(trace: list[dict[str, Any]], name: str = "") -> list[dict[str, Any]]:
    """Handshake headers without the clients' protocol headers, a fresh request id as
    ``<uuid7>``, the diagnostics' error without the JavaScript ``stack`` (and without
    the runtime's text where it is the runtime's)."""
    out = copy.deepcopy(trace)
    for record in out:
        if record["type"] == "websocket":
            headers = {k: v for k, v in record["headers"].items() if k not in _WS_PROTOCOL_HEADERS}
            for key in ("session-id", "x-client-request-id"):
                if _UUID7.match(headers.get(key, "")):
                    headers[key] = "<uuid7>"
            record["headers"] = headers
        for key in ("partial", "message", "error"):
            message = record.get(key)
            if not isinstance(message, dict) or "diagnostics" not in message:
                continue
            for diagnostic in message["diagnostics"]:
                diagnostic["error"].pop("stack", None)
                if name in _DIAGNOSTIC_TEXT_DIFFERS:
                    diagnostic["error"].pop("message", None)
    return out


def test_corpus_is_there() -> None:
    """20 fixtures, each with pi-ai's expected trace: a request for every scripted
    response, a result record last."""
    check_corpus(FIXTURES, DATA, 20)


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.stem)
async def test_trace_matches_pi(fixture: Path) -> None:
    """pitrio's trace equals pi-ai's, record for record (oracle comparison rules)."""
    trace = await run_fixture(fixture)
    problem = compare_traces(fixture, load(expected_path(fixture, DATA)), trace)
    assert problem is None, f"{problem}\n{format_trace(trace)}"


@pytest.mark.timeout(600)
def test_recorded_traces_are_what_pi_prints_now() -> None:
    """Re-run pi-ai on every fixture (Node and the oracle's install needed) and compare
    with the committed traces."""
    check_pi_prints_now(RUNNER, FIXTURES, DATA)


def test_websocket_corpus_is_there() -> None:
    """9 WebSocket fixtures, each with pi-ai's trace (Node's ``--experimental-websocket``)."""
    check_corpus(WS_FIXTURES, WS_DATA, 9, request_types=("request", "websocket"))


@pytest.mark.parametrize("fixture", WS_FIXTURES, ids=lambda p: p.stem)
async def test_websocket_trace_matches_pi(fixture: Path) -> None:
    """Over the WebSocket too, pitrio's trace equals pi-ai's, record for record: the
    handshake's headers, the ``response.create`` message, the events, the fallback."""
    reset_sse_fallback()  # each pi-ai run is a process of its own
    trace = await run_fixture(fixture)
    expected = load(expected_path(fixture, WS_DATA))
    if fixture.stem in _PI_BUG:
        for record in expected:
            for key in ("partial", "message", "error"):
                if isinstance(record.get(key), dict):
                    record[key].pop("diagnostics", None)
    name = fixture.stem
    problem = compare_traces(fixture, _normalize_ws(expected, name), _normalize_ws(trace, name))
    assert problem is None, f"{problem}\n{format_trace(trace)}"


@pytest.mark.timeout(600)
def test_recorded_websocket_traces_are_what_pi_prints_now() -> None:
    """Re-run pi-ai's WebSocket fixtures (Node 20 with ``--experimental-websocket``)."""
    check_pi_prints_now(
        RUNNER, WS_FIXTURES, WS_DATA, _normalize_ws, node_options="--experimental-websocket"
    )
