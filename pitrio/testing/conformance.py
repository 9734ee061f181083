"""``python -m pitrio.testing.conformance SCENARIO.json``: play a Pi oracle scenario on pitrio.

Prints the trace in the oracle's format (a JSON array, one record per line). Exit
status as the oracle's ``run``: 0 ok; 2 bad usage or bad scenario; 3 the scenario ran
but misbehaved (the trace so far is still printed).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from ._errors import FifoSchedulingUnavailable, PlayerError, RunProblem, ScenarioError
from ._player import Player, play
from ._trace import format_trace

__all__ = [
    "FifoSchedulingUnavailable",
    "Player",
    "PlayerError",
    "RunProblem",
    "ScenarioError",
    "format_trace",
    "main",
    "play",
]


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        sys.stderr.write("usage: python -m pitrio.testing.conformance SCENARIO.json\n")
        return 2
    path = args[0]
    try:
        with open(path, encoding="utf-8") as f:
            scenario = json.load(f)
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"conformance: cannot read scenario {path}: {exc}\n")
        return 2
    try:
        records, problems = play(scenario)
    except ScenarioError as exc:
        sys.stderr.write(f"conformance: bad scenario {path}: {exc}\n")
        return 2
    sys.stdout.write(format_trace(records))
    for problem in problems:
        sys.stderr.write(f"conformance: {path}: {problem}\n")
    return 3 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
