"""openai-responses against the provider oracle: every ``resp-*`` trace, event for event.

Two corpora are played through :mod:`pitrio.testing.provider_conformance` (a real local
HTTP server, the provider through the API registry):

- the oracle's own ``resp-*`` fixtures (``tests/data/providers``);
- ``tests/providers/data/responses``: extra fixtures for behaviour the oracle corpus holds
  out or does not cover (retries, ``response.failed``, ``content_filter``, ``[DONE]``,
  HTTP error texts, timeouts, resets, request conversion corners). Their expected traces
  were produced by the oracle (``providers/run``) with pi-ai 0.85.0.

Where pitrio deliberately differs from pi-ai (an abort after the response headers), the
test asserts pitrio's trace explicitly: the oracle's trace with that one change.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from pitrio.testing.provider_conformance import (
    DATA_DIR,
    check_fixture,
    compare_traces,
    expected_path,
    fixture_paths,
    run_fixture,
)

EXTRA_DIR = Path(__file__).parent / "data" / "responses"

PI_AI_ABORT_TEXT = "OpenAI Responses stream ended before a terminal response event"
"""What pi-ai 0.85.0 reports for an abort after the headers (the SDK ends quietly)."""

ABORT_DEVIATIONS = {
    "resp-14-abort-mid-stream": DATA_DIR,
    "resp-x22-abort-after-headers-before-events": EXTRA_DIR,
}
"""Fixtures where pitrio says ``Request was aborted`` instead (see
docs/deviations-providers-responses.md), and the corpus each lives in."""


def _cases() -> list[Any]:
    cases = [(path, expected_path(path)) for path in fixture_paths("resp-")]
    cases += [(path, expected_path(path, EXTRA_DIR)) for path in fixture_paths("resp-", EXTRA_DIR)]
    return [pytest.param(f, e, id=f.stem) for f, e in cases if f.stem not in ABORT_DEVIATIONS]


def test_corpus_is_there() -> None:
    names = {path.stem for path in fixture_paths("resp-")}
    # The oracle ships 14 resp-* fixtures (resp-09, -12 and -16 are held out).
    assert len(names) == 14
    assert "resp-14-abort-mid-stream" in names
    assert len(fixture_paths("resp-", EXTRA_DIR)) == 23


@pytest.mark.parametrize(("fixture", "expected"), _cases())
async def test_trace_matches_oracle(fixture: Path, expected: Path) -> None:
    problem = await check_fixture(fixture, expected)
    assert problem is None, problem


def _with_abort_text(expected: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    """The oracle's trace with the final message's ``errorMessage`` replaced."""
    better = copy.deepcopy(expected)
    for record in better:
        if record["type"] == "error":
            assert record["error"]["errorMessage"] == PI_AI_ABORT_TEXT
            record["error"]["errorMessage"] = text
        elif record["type"] == "result":
            assert record["message"]["errorMessage"] == PI_AI_ABORT_TEXT
            record["message"]["errorMessage"] = text
    return better


@pytest.mark.parametrize("name", sorted(ABORT_DEVIATIONS))
async def test_abort_after_headers_says_request_was_aborted(name: str) -> None:
    data_dir = ABORT_DEVIATIONS[name]
    fixture = data_dir / "fixtures" / f"{name}.json"
    expected = json.loads((data_dir / "expected" / f"{name}.json").read_text("utf-8"))
    trace = await run_fixture(fixture)

    # pitrio's trace is the oracle's, except for the abort text...
    better = _with_abort_text(expected, "Request was aborted")
    assert compare_traces(fixture, better, trace) is None
    # ...which pi-ai gets wrong: it blames a missing terminal event.
    assert compare_traces(fixture, expected, trace) is not None

    error = next(r for r in trace if r["type"] == "error")
    assert error["reason"] == "aborted"
    assert error["error"]["stopReason"] == "aborted"
    assert error["error"]["errorMessage"] == "Request was aborted"
    # Still no *_end events for blocks open at the abort (as in pi-ai).
    after_abort = [r["type"] for r in trace[[r["type"] for r in trace].index("abort") :]]
    assert after_abort == ["abort", "error", "result"]
