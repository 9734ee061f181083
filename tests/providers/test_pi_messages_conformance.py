"""pi-messages against pi-ai 0.85.0: every ``pi-*`` trace, event for event.

``tests/providers/data/pi-messages`` holds fixtures in the provider oracle's format
and the traces pi-ai 0.85.0 printed for them (``tests/providers/node/google_trace.mjs``
ran pi-ai's own ``streamSimple`` against the scripted backend). Here the same fixtures
are played through pitrio's provider and the traces compared with the oracle's rules.

What differs by runtime, not by behaviour, is normalized on both sides:

- ``user-agent``: pi-ai sets none, so Node's ``fetch`` sends ``node`` and httpx
  ``python-httpx/<version>``;
- pi-ai passes the backend's events on with every field they carry, so its
  ``text_end``/``thinking_end`` records show the backend's ``contentSignature`` and
  ``redacted`` and its ``toolcall_start`` the call's ``id`` and ``toolName``; pitrio's
  events are typed and carry what pi-ai's own providers push (the same values are in
  the partial message of the event, which is compared);
- a response-failure diagnostic holds a JavaScript stack, the time and the URL with
  the scripted server's port.

The abort and invalid-JSON fixtures compare the error text by ``errorMessagePattern``
(pitrio's texts are its own: ``docs/deviations.md``).
"""

from __future__ import annotations

import copy
import json
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
from .test_google_generative_ai_conformance import RUNNER

DATA = Path(__file__).parent / "data" / "pi-messages"
FIXTURES = fixture_paths("pi-", DATA)

_RUNTIME_AGENT = re.compile(r"^(node|python-httpx/\S+)$")
_PASSED_ON: dict[str, tuple[str, ...]] = {
    "text_end": ("contentSignature",),
    "thinking_end": ("contentSignature", "redacted"),
    "toolcall_start": ("id", "toolName"),
}
_PORT = re.compile(r"^http://127\.0\.0\.1:\d+/")


def _load(path: Path) -> Any:
    return json.loads(path.read_text("utf-8"))


def _normalize_message(message: dict[str, Any]) -> None:
    for diagnostic in message.get("diagnostics") or ():
        error = diagnostic.get("error")
        if isinstance(error, dict):
            error.pop("stack", None)
        details = diagnostic.get("details")
        if isinstance(details, dict) and "timestampMs" in details:
            details["timestampMs"] = "<time>"
            details["url"] = _PORT.sub("http://127.0.0.1:<port>/", details["url"])


def _normalize(trace: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The trace with the runtime's differences generalized (see the module docstring)."""
    out = copy.deepcopy(trace)
    for record in out:
        kind = record["type"]
        if kind == "request":
            agent = record["headers"].get("user-agent", "")
            assert _RUNTIME_AGENT.match(agent), agent
            record["headers"]["user-agent"] = "<runtime>"
        for key in _PASSED_ON.get(kind, ()):
            record.pop(key, None)
        for key in ("partial", "message", "error"):
            if isinstance(record.get(key), dict):
                _normalize_message(record[key])
    return out


def test_corpus_is_there() -> None:
    """15 fixtures, each with pi-ai's expected trace."""
    assert len(FIXTURES) == 15
    check_corpus(FIXTURES, DATA)


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.stem)
async def test_trace_matches_pi(fixture: Path) -> None:
    """pitrio's trace equals pi-ai's, record for record (oracle comparison rules)."""
    trace = await run_fixture(fixture)
    expected = _load(expected_path(fixture, DATA))
    problem = compare_traces(fixture, _normalize(expected), _normalize(trace))
    assert problem is None, f"{problem}\n{format_trace(trace)}"


async def test_a_failure_diagnostic_names_the_request() -> None:
    """An HTTP error's diagnostic has the status, the backend's error object and the
    request's URL, but no JavaScript stack."""
    trace = await run_fixture(DATA / "fixtures" / "pi-05-http-401-json.json")
    (diagnostic,) = trace[-1]["message"]["diagnostics"]
    assert diagnostic["error"] == {
        "name": "PiMessagesResponseError",
        "message": "401 Unauthorized: Invalid API key (invalid_api_key)",
        "code": "invalid_api_key",
    }
    details = diagnostic["details"]
    assert details["status"] == 401
    assert details["error"]["code"] == "invalid_api_key"
    assert re.match(r"^http://127\.0\.0\.1:\d+/v1/messages$", details["url"])


@pytest.mark.timeout(600)
def test_recorded_traces_are_what_pi_prints_now() -> None:
    """Re-run pi-ai on every fixture and compare with the committed traces."""
    check_pi_prints_now(RUNNER, FIXTURES, DATA, _normalize)
