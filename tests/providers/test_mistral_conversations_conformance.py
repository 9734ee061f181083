"""mistral-conversations against pi-ai 0.85.0: every ``mistral-*`` trace, event for event.

``tests/providers/data/mistral`` holds fixtures in the provider oracle's format
(``/work/shared/oracle/providers/PROVIDERS.md``) and the traces pi-ai 0.85.0 printed
for them: ``tests/providers/node/google_trace.mjs`` (the oracle's ``trace.mjs`` with
pi-ai's other wire APIs added) ran pi-ai's own ``streamSimple`` (its own ``fetch`` of
``/v1/chat/completions``: pi-ai 0.85.0 does not call the ``@mistralai`` SDK) against
the scripted HTTP responses. Here the same fixtures are played through pitrio's
provider (a real local HTTP server, the API registry) and the traces compared with
the oracle's rules; nothing needs normalizing. The abort fixtures compare the error
text by ``errorMessagePattern``: pitrio says ``Request aborted``/``Request was aborted``
where pi-ai shows Node's ``This operation was aborted`` (``docs/deviations.md``). With
Node and the oracle's install at hand, :func:`test_recorded_traces_are_what_pi_prints_now`
re-records every trace live.
"""

from __future__ import annotations

import json
from collections.abc import Callable
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

DATA = Path(__file__).parent / "data" / "mistral"
FIXTURES = fixture_paths("mistral-", DATA)

Normalize = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]


def _load(path: Path) -> Any:
    return json.loads(path.read_text("utf-8"))


def _same(trace: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return trace


def test_corpus_is_there() -> None:
    """20 fixtures, each with pi-ai's expected trace."""
    assert len(FIXTURES) == 20
    check_corpus(FIXTURES, DATA)


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.stem)
async def test_trace_matches_pi(fixture: Path) -> None:
    """pitrio's trace equals pi-ai's, record for record (oracle comparison rules)."""
    trace = await run_fixture(fixture)
    expected = _load(expected_path(fixture, DATA))
    problem = compare_traces(fixture, expected, trace)
    assert problem is None, f"{problem}\n{format_trace(trace)}"


@pytest.mark.timeout(600)
def test_recorded_traces_are_what_pi_prints_now() -> None:
    """Re-run pi-ai on every fixture and compare with the committed traces."""
    check_pi_prints_now(RUNNER, FIXTURES, DATA, _same)
