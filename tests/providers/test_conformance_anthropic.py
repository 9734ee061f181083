"""anthropic-messages against the provider oracle: every ``anth-*`` trace, event for event.

Two corpora are played through :mod:`pitrio.testing.provider_conformance` (a real local
HTTP server, the provider through the API registry):

- the oracle's own ``anth-*`` fixtures (``tests/data/providers``);
- ``tests/providers/data/anthropic``: extra fixtures for behaviour the oracle corpus
  holds out or does not cover (refusal, unknown stop reasons, a last event without a
  line break, retry-after caps, timeouts, resets, OAuth, adaptive thinking, tool
  references, strict tools, odd wire indexes...). Their expected traces were produced
  by the oracle (``providers/run``) with pi-ai 0.85.0.

Two corpus fixtures pin pi-ai bugs that pitrio fixes (``docs/deviations-providers-
anthropic.md``); for them the test asserts pitrio's better trace explicitly and checks
that it differs from pi-ai's.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from pitrio.testing.provider_conformance import (
    check_fixture,
    compare_traces,
    expected_path,
    fixture_paths,
    run_fixture,
)

EXTRA_DIR = Path(__file__).parent / "data" / "anthropic"

CRLF_SPLIT = "anth-18-crlf-split-across-chunks"
INPUT_IN_BLOCK_START = "anth-20-tool-input-in-block-start"
DEVIATIONS = {CRLF_SPLIT, INPUT_IN_BLOCK_START}


def _cases() -> list[tuple[Path, Path]]:
    cases = [(path, expected_path(path)) for path in fixture_paths("anth-")]
    cases += [(path, expected_path(path, EXTRA_DIR)) for path in fixture_paths("anth-", EXTRA_DIR)]
    return [(f, e) for f, e in cases if f.stem not in DEVIATIONS]


def _load(path: Path) -> Any:
    return json.loads(path.read_text("utf-8"))


def test_corpus_is_there() -> None:
    """The oracle ships 18 anth-* fixtures (anth-15, -16 and -21 are held out); the
    extra corpus has one expected trace per fixture."""
    names = {path.stem for path in fixture_paths("anth-")}
    assert len(names) == 18
    assert names >= DEVIATIONS
    extra = fixture_paths("anth-", EXTRA_DIR)
    assert len(extra) == 44
    for path in extra:
        assert expected_path(path, EXTRA_DIR).exists(), path.name


@pytest.mark.parametrize(("fixture", "expected"), _cases(), ids=lambda p: p.stem)
async def test_trace_matches_oracle(fixture: Path, expected: Path) -> None:
    """pitrio's trace equals pi-ai's, record for record (oracle comparison rules)."""
    problem = await check_fixture(fixture, expected)
    assert problem is None, problem


async def test_crlf_split_across_reads_is_one_line_break() -> None:
    """anth-18: 'event: message_start\\r' | '\\n' is one line break, so the event parses.

    pi-ai dispatches the half-built event at the lone '\\n' and fails with 'Could not
    parse Anthropic SSE event message_start: ...; data=; raw=event: message_start'.
    pitrio reads both events; as the stream has no message_delta, it then ends with
    pi-ai's own 'Anthropic stream ended without a stop reason', usage from message_start.
    """
    path = fixture_paths(CRLF_SPLIT)[0]
    fixture = _load(path)
    del fixture["errorMessagePattern"]  # it describes pi-ai's parse error
    expected = _load(expected_path(path))
    trace = await run_fixture(fixture)

    better = copy.deepcopy(expected)
    usage = {
        "input": 3,
        "output": 1,
        "cacheRead": 0,
        "cacheWrite": 0,
        "cacheWrite1h": 0,
        "totalTokens": 4,
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
    }
    for record in better:
        message = record.get("error") or record.get("message")
        if record["type"] in ("error", "result"):
            assert message["errorMessage"].startswith("Could not parse Anthropic SSE event")
            message["errorMessage"] = "Anthropic stream ended without a stop reason"
            message["usage"] = usage
    assert [r["type"] for r in better] == ["request", "start", "error", "result"]
    assert compare_traces(fixture, better, trace) is None
    assert compare_traces(fixture, expected, trace) is not None


async def test_tool_input_in_block_start_survives_block_stop() -> None:
    """anth-20: an ``input`` given whole in content_block_start, with no input_json_delta,
    stays the call's arguments (pi-ai re-parses the empty JSON text and ends with {})."""
    path = fixture_paths(INPUT_IN_BLOCK_START)[0]
    expected = _load(expected_path(path))
    trace = await run_fixture(path)

    better = copy.deepcopy(expected)
    changed = 0
    for record in better:
        if record["type"] == "toolcall_end":
            assert record["toolCall"]["arguments"] == {}
            record["toolCall"]["arguments"] = {"city": "Paris"}
            record["partial"]["content"][0]["arguments"] = {"city": "Paris"}
            changed += 1
        elif record["type"] in ("done", "result"):
            message = record["message"]
            assert message["content"][0]["arguments"] == {}
            message["content"][0]["arguments"] = {"city": "Paris"}
            changed += 1
    assert changed == 3
    assert compare_traces(path, better, trace) is None
    assert compare_traces(path, expected, trace) is not None
    done = next(r for r in trace if r["type"] == "done")
    assert done["message"]["content"][0]["arguments"] == {"city": "Paris"}
