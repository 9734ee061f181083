"""azure-openai-responses against pi-ai 0.85.0: every ``azure-*`` trace, event for event.

``tests/providers/data/azure`` holds fixtures in the provider oracle's format
(``/work/shared/oracle/providers/PROVIDERS.md``; most are the oracle's ``resp-*``
fixtures moved to Azure, the rest Azure's own: the endpoint, API version and deployment
from the scoped environment, no key, a text error) and the traces pi-ai 0.85.0 printed
for them: ``tests/providers/node/google_trace.mjs`` ran pi-ai's own ``streamSimple``
(through the OpenAI SDK's ``AzureOpenAI`` 6.40.0) against the scripted HTTP responses.
Here the same fixtures are played through pitrio's provider (a real local HTTP server,
the API registry) and the traces compared with the oracle's rules. With Node and the
oracle's install at hand, :func:`test_recorded_traces_are_what_pi_prints_now` re-records
every trace live.
"""

from __future__ import annotations

import json
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
from .test_conformance_responses import _with_abort_text
from .test_google_generative_ai_conformance import RUNNER

DATA = Path(__file__).parent / "data" / "azure"
FIXTURES = fixture_paths("azure-", DATA)
ABORT_DEVIATION = "azure-11-abort-mid-stream"
"""pitrio says ``Request was aborted`` here, where pi-ai blames a missing terminal event
(as on openai-responses: ``docs/deviations-providers-responses.md``)."""
AZURE_ENV = (
    "AZURE_OPENAI_BASE_URL",
    "AZURE_OPENAI_RESOURCE_NAME",
    "AZURE_OPENAI_API_VERSION",
    "AZURE_OPENAI_DEPLOYMENT_NAME_MAP",
)


@pytest.fixture(autouse=True)
def _no_azure_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # The fixtures give the environment they need (options.env); pi-ai ran without any.
    for name in AZURE_ENV:
        monkeypatch.delenv(name, raising=False)


def _load(path: Path) -> Any:
    return json.loads(path.read_text("utf-8"))


def test_corpus_is_there() -> None:
    """16 fixtures, each with pi-ai's expected trace."""
    check_corpus(FIXTURES, DATA, 16)


@pytest.mark.parametrize(
    "fixture", [f for f in FIXTURES if f.stem != ABORT_DEVIATION], ids=lambda p: p.stem
)
async def test_trace_matches_pi(fixture: Path) -> None:
    """pitrio's trace equals pi-ai's, record for record (oracle comparison rules)."""
    trace = await run_fixture(fixture)
    expected = _load(expected_path(fixture, DATA))
    problem = compare_traces(fixture, expected, trace)
    assert problem is None, f"{problem}\n{format_trace(trace)}"


async def test_an_abort_after_the_headers_says_request_was_aborted() -> None:
    """pi-ai's trace, but for the abort's text (the shared Responses deviation)."""
    fixture = DATA / "fixtures" / f"{ABORT_DEVIATION}.json"
    expected = _load(expected_path(fixture, DATA))
    trace = await run_fixture(fixture)
    assert compare_traces(fixture, _with_abort_text(expected, "Request was aborted"), trace) is None
    assert compare_traces(fixture, expected, trace) is not None


@pytest.mark.timeout(600)
def test_recorded_traces_are_what_pi_prints_now() -> None:
    """Re-run pi-ai on every fixture (Node and the oracle's install needed) and compare
    with the committed traces."""
    check_pi_prints_now(RUNNER, FIXTURES, DATA, lambda trace: trace)
