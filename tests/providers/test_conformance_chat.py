"""openai-completions against the provider oracle: every ``chat-*`` trace, event for event.

Each fixture is played through :mod:`pitrio.testing.provider_conformance`: a local Trio
HTTP server serves the scripted bytes, pitrio's provider (found through the API
registry) streams them, and the trace is compared with the one pi-ai 0.85.0 produced.

Three sets:

- the oracle corpus's ``chat-*`` fixtures (``tests/data/providers``);
- ``tests/data/providers/extra``: fixtures for behaviour the corpus holds out
  (``content_filter``, ``retry-after`` above ``maxRetryDelayMs``, a last event without
  its blank line) or covers thinly; their expected traces come from the oracle;
- ``chat-23``, where pitrio keeps the error body that pi-ai loses: compared with
  ``tests/data/providers/deviations`` (see ``docs/deviations-providers-chat.md``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pitrio.testing.provider_conformance import (
    DATA_DIR,
    check_fixture,
    compare_traces,
    expected_path,
    fixture_paths,
    run_fixture,
)

EXTRA_DIR = DATA_DIR / "extra"
DEVIATIONS_DIR = DATA_DIR / "deviations"
DEVIATIONS = {p.stem for p in DEVIATIONS_DIR.glob("chat-*.json")}

CORPUS = [p for p in fixture_paths("chat-") if p.stem not in DEVIATIONS]
EXTRA = fixture_paths("chat-", EXTRA_DIR)


def test_the_corpus_is_all_there() -> None:
    assert len(CORPUS) + len(DEVIATIONS) == 22
    assert sorted(DEVIATIONS) == ["chat-23-http-400-no-error-key"]


@pytest.mark.parametrize("fixture", CORPUS, ids=lambda p: p.stem)
async def test_oracle_fixture(fixture: Path) -> None:
    problem = await check_fixture(fixture)
    assert problem is None, problem


@pytest.mark.parametrize("fixture", EXTRA, ids=lambda p: p.stem)
async def test_extra_fixture(fixture: Path) -> None:
    problem = await check_fixture(fixture, expected_path(fixture, EXTRA_DIR))
    assert problem is None, problem


async def test_http_error_without_error_member_keeps_the_body() -> None:
    fixture = DATA_DIR / "fixtures" / "chat-23-http-400-no-error-key.json"
    trace = await run_fixture(fixture)
    # pi-ai loses the message; pitrio keeps it ...
    assert compare_traces(fixture, expected_path(fixture), trace) is not None
    problem = compare_traces(fixture, DEVIATIONS_DIR / fixture.name, trace)
    assert problem is None, problem
    message = trace[-1]["message"]["errorMessage"]
    assert message.startswith('400: {"object":"error","message":"This model\'s maximum context')
    # ... and differs from the oracle's trace in that text only.
    expected = json.loads(expected_path(fixture).read_text())
    for record in (expected[-1]["message"], expected[-2]["error"]):
        record["errorMessage"] = message
    assert compare_traces(fixture, expected, trace) is None
