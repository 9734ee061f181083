"""google-generative-ai against pi-ai 0.85.0: every ``google-*`` trace, event for event.

``tests/providers/data/google`` holds fixtures in the provider oracle's format
(``/work/shared/oracle/providers/PROVIDERS.md``) and the traces pi-ai 0.85.0 printed
for them: ``tests/providers/node/google_trace.mjs`` (the oracle's ``trace.mjs`` with the
google-generative-ai API added) ran pi-ai's own ``streamSimple`` (through
``@google/genai`` 1.52.0) against the scripted HTTP responses. Here the same fixtures
are played through pitrio's provider (a real local HTTP server, the API registry) and
the traces compared with the oracle's rules.

Two things differ by runtime, not by behaviour, and are normalized on both sides:
``x-goog-api-client`` names the language runtime (``gl-node/v20.20.2`` for the SDK,
``gl-python/3.x`` for pitrio), and a function call the server sent without an id gets
``<name>_<Date.now()>_<counter>``. With Node and the oracle's install at hand,
:func:`test_recorded_traces_are_what_pi_prints_now` re-records every trace live.
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

from ._rerecord import assert_corpus, assert_rerecorded

DATA = Path(__file__).parent / "data" / "google"
FIXTURES = fixture_paths("google-", DATA)

_API_CLIENT = re.compile(r"^(google-genai-sdk/\d+\.\d+\.\d+) gl-(node|python)/\S+$")
_MADE_ID = re.compile(r"^(.*)_\d{13}_\d+$")


def _load(path: Path) -> Any:
    return json.loads(path.read_text("utf-8"))


def _normalize(trace: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The trace with the runtime's name and pi-ai's time-based call ids generalized."""
    out = copy.deepcopy(trace)

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            if value.get("type") == "toolCall" and isinstance(value.get("id"), str):
                value["id"] = _MADE_ID.sub(r"\1_<time>_<n>", value["id"])
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    for record in out:
        headers = record.get("headers")
        if record["type"] == "request" and isinstance(headers, dict):
            client = headers.get("x-goog-api-client", "")
            match = _API_CLIENT.match(client)
            assert match is not None, client
            headers["x-goog-api-client"] = f"{match.group(1)} gl-<runtime>"
    return [walk(r) for r in out]


def test_corpus_is_there() -> None:
    """25 fixtures, each with pi-ai's expected trace."""
    assert_corpus(FIXTURES, DATA, 25)


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.stem)
async def test_trace_matches_pi(fixture: Path) -> None:
    """pitrio's trace equals pi-ai's, record for record (oracle comparison rules)."""
    trace = await run_fixture(fixture)
    expected = _load(expected_path(fixture, DATA))
    problem = compare_traces(fixture, _normalize(expected), _normalize(trace))
    assert problem is None, f"{problem}\n{format_trace(trace)}"


async def test_the_header_names_python() -> None:
    """pitrio's ``x-goog-api-client`` names the Python runtime, not Node."""
    trace = await run_fixture(DATA / "fixtures" / "google-01-plain-text.json")
    client = trace[0]["headers"]["x-goog-api-client"]
    assert client.startswith("google-genai-sdk/1.52.0 gl-python/")


async def test_a_call_without_id_gets_a_fresh_one() -> None:
    """A function call sent without an id gets ``<name>_<ms>_<n>``, as in pi-ai."""
    trace = await run_fixture(DATA / "fixtures" / "google-04-tool-call-without-id.json")
    done = next(r for r in trace if r["type"] == "done")
    call = done["message"]["content"][1]
    assert call["name"] == "read"
    assert _MADE_ID.match(call["id"]) is not None
    assert call["id"].startswith("read_")


@pytest.mark.timeout(600)
def test_recorded_traces_are_what_pi_prints_now() -> None:
    """Re-run pi-ai on every fixture (Node and the oracle's install needed) and compare
    with the committed traces."""
    assert_rerecorded(FIXTURES, DATA, _normalize)
