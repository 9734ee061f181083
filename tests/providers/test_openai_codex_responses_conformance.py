"""openai-codex-responses against pi-ai 0.85.0: every ``codex-*`` trace, event for event.

``tests/providers/data/codex`` holds fixtures in the provider oracle's format
(``/work/shared/oracle/providers/PROVIDERS.md``) and the traces pi-ai 0.85.0 printed
for them: ``tests/providers/node/google_trace.mjs`` (the oracle's ``trace.mjs`` with
this API added) ran pi-ai's own ``streamSimple`` against the scripted HTTP responses,
over SSE (``options.transport: "sse"``; the WebSocket transport is checked in
``test_openai_codex_websocket.py``). Here the same fixtures are played through pitrio's
provider (a real local HTTP server, the API registry) and the traces compared with the
oracle's rules. With Node and the oracle's install at hand,
:func:`test_recorded_traces_are_what_pi_prints_now` re-records every trace live.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pitrio.testing.provider_conformance import (
    compare_traces,
    expected_path,
    fixture_paths,
    format_trace,
    run_fixture,
)

from ._pi_traces import check_corpus, check_pi_prints_them, load

DATA = Path(__file__).parent / "data" / "codex"
FIXTURES = fixture_paths("codex-", DATA)


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
    check_pi_prints_them(FIXTURES, DATA)
