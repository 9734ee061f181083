"""Extra adversarial scenarios, checked against traces recorded from the Pi 0.85.0 oracle.

Two rounds, each in its own folder under ``tests/data``:

- ``oracle-extra``: every op in both modes, hooks with every rule kind, aborts at every kind
  of record, queue modes, validation corners, stream shapes;
- ``oracle-extra-2``: long multi-turn runs mixing steering, follow-ups, ``prepareNextTurn``,
  ``shouldStopAfterTurn`` and ``terminate``; both loop APIs for every hook kind and
  ``loopContinue`` from every tail; ``continue()`` after aborted, failed and thrown runs;
  actions on ``hook``, ``model_call``, ``action``, ``error`` and ``state`` records; JSON
  nulls in specs;
- ``oracle-extra-3``: listeners that fail (at ``turn_end``, at ``agent_end``, once and during
  the failure tail too, and at a tool's update in a parallel batch), recorded with one more
  triggered op, ``fail``, patched into the oracle (see its ``README.md``).

Each scenario was run through the oracle at two time scales with identical traces;
``expected/`` holds the oracle's trace. The scenarios where pitrio differs are marked
``xfail(strict=True)``; ``docs/deviations.md`` explains each difference (remove the mark
when fixing it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pitrio.testing._compare import trace_difference
from pitrio.testing.conformance import format_trace, play

DATA = Path(__file__).parent / "data"
# round -> how many scenarios it holds at least
ROUNDS = {"oracle-extra": 40, "oracle-extra-2": 40, "oracle-extra-3": 8}
SCENARIOS = sorted(p for r in ROUNDS for p in (DATA / r / "scenarios").glob("*.json"))

# "round/stem" -> the difference it shows (see docs/deviations.md).
DIFFERS: dict[str, str] = {
    "oracle-extra/h01-extra-keys-in-content-blocks": "unknown keys of content blocks are dropped",
    "oracle-extra/h01b-extra-keys-in-tool-content": "unknown keys of content blocks are dropped",
    "oracle-extra/h01c-extra-keys-in-assistant-spec": "unknown keys of content blocks are dropped",
    "oracle-extra/h07-unknown-block-type": "an unknown content block type is rejected",
    "oracle-extra/h08-non-object-arguments": "tool-call arguments that are not objects",
    "oracle-extra-2/x06-assistant-spec-nulls": "errorMessage null reads as absent",
    "oracle-extra-2/x07-thinking-signature-null": "null signatures read as absent",
}


def _key(path: Path) -> str:
    return f"{path.parent.parent.name}/{path.stem}"


def _param(path: Path) -> Any:
    reason = DIFFERS.get(_key(path))
    marks = (
        ()
        if reason is None
        else pytest.mark.xfail(strict=True, reason=f"differs from Pi: {reason}")
    )
    return pytest.param(path, id=_key(path), marks=marks)


def test_extra_corpus_is_present() -> None:
    """Every scenario has the oracle's trace, and every marked scenario exists."""
    for round_, count in ROUNDS.items():
        assert len(list((DATA / round_ / "scenarios").glob("*.json"))) >= count, round_
    for path in SCENARIOS:
        assert (path.parent.parent / "expected" / path.name).exists(), _key(path)
    assert set(DIFFERS) <= {_key(p) for p in SCENARIOS}


@pytest.mark.parametrize("path", [_param(p) for p in SCENARIOS])
def test_extra_scenario_matches_oracle(path: Path) -> None:
    """pitrio's trace equals Pi's, record for record (oracle comparison rules)."""
    scenario = json.loads(path.read_text(encoding="utf-8"))
    expected_path = path.parent.parent / "expected" / path.name
    expected = json.loads(expected_path.read_text(encoding="utf-8"))
    records, problems = play(scenario)
    assert problems == []
    actual = json.loads(format_trace(records))
    difference = trace_difference(expected, actual)
    assert difference is None, difference
