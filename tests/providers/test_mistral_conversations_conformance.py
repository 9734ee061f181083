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
import os
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
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

from .test_google_generative_ai_conformance import RUNNER, _pi_node_modules

DATA = Path(__file__).parent / "data" / "mistral"
FIXTURES = fixture_paths("mistral-", DATA)

Normalize = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]


def _load(path: Path) -> Any:
    return json.loads(path.read_text("utf-8"))


def _same(trace: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return trace


def check_corpus(fixtures: list[Path], data: Path) -> None:
    """Each fixture has pi-ai's expected trace: a request for every scripted response,
    a result record last."""
    for path in fixtures:
        expected = _load(expected_path(path, data))
        requests = [r for r in expected if r["type"] == "request"]
        assert len(requests) == len(_load(path)["responses"]), path.name
        assert expected[-1]["type"] == "result", path.name


def rerecord(fixtures: list[Path], data: Path, normalize: Normalize) -> None:
    """Run pi-ai on every fixture (Node and the oracle's install needed) and compare
    with the committed traces."""
    from _node import node_executable

    node = node_executable()
    node_modules = _pi_node_modules()
    if node_modules is None:
        reason = "re-recording needs the oracle's node_modules (@earendil-works/pi-ai 0.85.0)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    env = {"PATH": os.environ.get("PATH", ""), "PITRIO_PI_NODE_MODULES": str(node_modules)}

    def run(path: Path) -> subprocess.CompletedProcess[str]:
        command = [node, str(RUNNER), str(path)]
        return subprocess.run(
            command, capture_output=True, text=True, timeout=120, env=env, check=False
        )

    # Two at a time: most of a run is Node starting and loading pi-ai.
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = list(pool.map(run, fixtures))
    for path, done in zip(fixtures, runs, strict=True):
        assert done.returncode == 0, f"{path.name}: {done.stderr}"
        live = json.loads(done.stdout)
        recorded = _load(expected_path(path, data))
        problem = compare_traces(path, normalize(recorded), normalize(live))
        assert problem is None, f"{path.name}: {problem}"


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
    rerecord(FIXTURES, DATA, _same)
