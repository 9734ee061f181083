"""``python -m pitrio.testing.provider_conformance FIXTURE.json``: the provider fixture player.

Serves the fixture's scripted HTTP responses from a local Trio server, runs pitrio's
provider for the fixture's ``api`` (through the provider registry), and prints the
trace in the provider oracle's format (``PROVIDERS.md`` §2-3). Exit status as the
oracle's ``run``: 0 ok; 2 bad usage or bad fixture; 3 the fixture ran but misbehaved
(the trace so far is still printed).

For tests, the same in-process::

    from pitrio.testing.provider_conformance import check_fixture, fixture_paths

    @pytest.mark.parametrize("path", fixture_paths("chat-"), ids=lambda p: p.stem)
    async def test_fixture(path):
        assert await check_fixture(path) is None

:func:`run_fixture` returns a trace; :func:`compare_traces` compares one with the
oracle's expected trace (a port of the oracle's ``compare.py``).
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import httpx
import trio

from ._errors import ConformanceError, FixtureError, PlayerError
from ._provider_player import PlayResult, play_fixture
from ._provider_trace import format_trace

__all__ = [
    "DATA_DIR",
    "ConformanceError",
    "FixtureError",
    "PlayResult",
    "PlayerError",
    "check_fixture",
    "compare_traces",
    "expected_path",
    "fixture_paths",
    "format_trace",
    "main",
    "play_fixture",
    "run_fixture",
]

DATA_DIR: Final = Path(__file__).resolve().parents[2] / "tests" / "data" / "providers"
"""The copied oracle corpus: ``fixtures/*.json`` and ``expected/*.json``."""


def _load(path: str | Path) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


async def run_fixture(
    path: str | Path | Mapping[str, Any], *, client: httpx.AsyncClient | None = None
) -> list[dict[str, Any]]:
    """Play a fixture (a path or the decoded JSON) and return its trace records,
    normalized as the oracle prints them (reload them with ``json.loads`` of
    :func:`format_trace` for a byte-exact comparison; :func:`compare_traces` accepts
    either).

    Raises:
        FixtureError: the fixture is malformed.
        ConformanceError: the run misbehaved.
    """
    fixture = path if isinstance(path, Mapping) else _load(path)
    result = await play_fixture(fixture, client=client)
    records: list[dict[str, Any]] = json.loads(format_trace(result.records))
    if result.problems:
        raise ConformanceError(result.problems, records)
    return records


def _norm(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, list):
        return [_norm(x) for x in value]
    if isinstance(value, dict):
        return {k: _norm(x) for k, x in value.items()}
    return value


def _same_number(a: Any, b: Any) -> bool:
    na, nb = _norm(a), _norm(b)
    if isinstance(na, float) and isinstance(nb, float) and math.isnan(na) and math.isnan(nb):
        return True
    return bool(na == nb)


def _dump(value: Any) -> str:
    return json.dumps(value)[:200]


def _eq(a: Any, b: Any, pattern: str | None, path: str = "$") -> str | None:
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return f"{path}: keys differ: expected {sorted(a)} got {sorted(b)}"
        for key in a:
            if pattern and key == "errorMessage" and isinstance(b[key], str):
                if not re.search(pattern, b[key]):
                    return f"{path}.{key}: {b[key]!r} does not match {pattern!r}"
                continue
            problem = _eq(a[key], b[key], pattern, f"{path}.{key}")
            if problem:
                return problem
        return None
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            problem = _eq(x, y, pattern, f"{path}[{i}]")
            if problem:
                return problem
        if len(a) != len(b):
            return f"{path}: length differs: expected {len(a)} got {len(b)}"
        return None
    if not _same_number(a, b):
        return f"{path}: expected {_dump(a)} got {_dump(b)}"
    return None


def compare_traces(
    fixture: str | Path | Mapping[str, Any],
    expected: str | Path | Sequence[Any],
    actual: str | Path | Sequence[Any],
) -> str | None:
    """Compare a trace with the oracle's expected trace (the oracle's ``compare.py``).

    Each argument is a path or the decoded JSON. Returns ``None`` when equal, else the
    first difference (``$[3].partial.content: ...``). ``errorMessage`` fields are matched
    with the fixture's ``errorMessagePattern`` (``re.search``) when it has one.
    """
    fixture_json = fixture if isinstance(fixture, Mapping) else _load(fixture)
    expected_json = expected if not isinstance(expected, str | Path) else _load(expected)
    actual_json = actual if not isinstance(actual, str | Path) else _load(actual)
    return _eq(list(expected_json), list(actual_json), fixture_json.get("errorMessagePattern"))


def fixture_paths(prefix: str = "", data_dir: Path = DATA_DIR) -> list[Path]:
    """The corpus fixtures whose file name starts with ``prefix``, sorted."""
    return sorted((data_dir / "fixtures").glob(f"{prefix}*.json"))


def expected_path(fixture: Path, data_dir: Path = DATA_DIR) -> Path:
    """The expected trace that belongs to a corpus fixture."""
    return data_dir / "expected" / fixture.name


async def check_fixture(
    fixture: Path, expected: Path | None = None, *, client: httpx.AsyncClient | None = None
) -> str | None:
    """Run a fixture and compare it with its expected trace; ``None`` when identical,
    else a description of the first difference (or of the run's problems)."""
    try:
        trace = await run_fixture(fixture, client=client)
    except ConformanceError as exc:
        return f"run misbehaved: {exc}\n{format_trace(exc.trace)}"
    expected = expected or expected_path(fixture)
    problem = compare_traces(fixture, expected, trace)
    if problem is None:
        return None
    return f"{problem}\nactual trace:\n{format_trace(trace)}"


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: play one fixture, print its trace; the oracle's exit codes."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        sys.stderr.write("usage: python -m pitrio.testing.provider_conformance FIXTURE.json\n")
        return 2
    path = args[0]
    try:
        fixture = _load(path)
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"provider-conformance: cannot read fixture {path}: {exc}\n")
        return 2
    try:
        result = trio.run(play_fixture, fixture)
    except FixtureError as exc:
        sys.stderr.write(f"provider-conformance: bad fixture {path}: {exc}\n")
        return 2
    sys.stdout.write(format_trace(result.records))
    for problem in result.problems:
        sys.stderr.write(f"provider-conformance: {path}: {problem}\n")
    return 3 if result.problems else 0


if __name__ == "__main__":
    sys.exit(main())
