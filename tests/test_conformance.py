"""Every scenario of the Pi 0.85.0 oracle corpus gives the oracle's trace on pitrio."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pitrio.testing._compare import trace_difference
from pitrio.testing.conformance import format_trace, play

DATA = Path(__file__).parent / "data" / "oracle"
SCENARIOS = sorted((DATA / "scenarios").glob("*.json"))


def test_corpus_is_present() -> None:
    """The copied corpus is complete: one expected trace per scenario."""
    assert len(SCENARIOS) >= 49
    for path in SCENARIOS:
        assert (DATA / "expected" / path.name).exists(), path.name


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario_matches_oracle(path: Path) -> None:
    """pitrio's trace equals Pi's, record for record (oracle comparison rules)."""
    scenario = json.loads(path.read_text(encoding="utf-8"))
    expected = json.loads((DATA / "expected" / path.name).read_text(encoding="utf-8"))
    records, problems = play(scenario)
    assert problems == []
    actual = json.loads(format_trace(records))
    assert trace_difference(expected, actual) is None, trace_difference(expected, actual)


def test_command_line_player_prints_the_trace() -> None:
    """`python -m pitrio.testing.conformance` prints the oracle-format trace and exits 0."""
    path = DATA / "scenarios" / "02-one-tool-then-answer.json"
    done = subprocess.run(
        [sys.executable, "-m", "pitrio.testing.conformance", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("[\n{")
    expected = json.loads((DATA / "expected" / path.name).read_text(encoding="utf-8"))
    assert trace_difference(expected, json.loads(done.stdout)) is None


def test_bad_scenario_exits_2(tmp_path: Path) -> None:
    """A scenario with an unknown key is rejected with exit status 2 and a message."""
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"mode": "agent", "modle": {}, "script": []}))
    done = subprocess.run(
        [sys.executable, "-m", "pitrio.testing.conformance", str(bad)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert 'unknown key "modle"' in done.stderr


def test_trace_difference_rules() -> None:
    """Numbers compare as JSON numbers, booleans never equal numbers, sides split."""
    assert trace_difference([{"a": 1}], [{"a": 1.0}]) is None
    assert trace_difference([{"a": True}], [{"a": 1}]) is not None
    assert trace_difference([{"a": None}], [{}]) is not None
    loop = {"type": "hook", "side": "loop"}
    main = {"type": "turn_start"}
    assert trace_difference([loop, main], [main, loop]) is None
    assert trace_difference([main], [main, main]) is not None


def _wake_order() -> list[int]:
    import trio
    import trio.testing

    order: list[int] = []

    async def main() -> None:
        lot = trio.lowlevel.ParkingLot()  # wakes its tasks in the order they parked

        async def waiter(i: int) -> None:
            order.append(i)  # tasks start in the order they were spawned...
            await lot.park()
            order.append(i)  # ...and wake in the order they parked

        async with trio.open_nursery() as nursery:
            for i in range(5):
                nursery.start_soon(waiter, i)
            await trio.testing.wait_all_tasks_blocked()
            lot.unpark_all()

    trio.run(main)
    return order


def test_fifo_scheduling_runs_tasks_in_wake_order_and_restores_trio() -> None:
    """Inside the block, tasks woken together run in order; after it, Trio's own
    scheduler state is back."""
    from trio._core import _run

    from pitrio.testing._fifo import fifo_scheduling

    saved = (_run._r, _run._ALLOW_DETERMINISTIC_SCHEDULING)
    with fifo_scheduling():
        assert all(_wake_order() == [0, 1, 2, 3, 4] * 2 for _ in range(10))
    assert (_run._r, _run._ALLOW_DETERMINISTIC_SCHEDULING) == saved


def test_fifo_scheduling_refuses_an_untested_trio(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Trio older than any tested one is refused with a message saying what to do."""
    import trio

    from pitrio.testing import _fifo

    monkeypatch.setattr(trio, "__version__", "0.20.0")
    with (
        pytest.raises(_fifo.FifoSchedulingUnavailable, match=r"trio 0\.20\.0 .*install"),
        _fifo.fifo_scheduling(),
    ):
        pass  # pragma: no cover


def test_fifo_scheduling_checks_that_the_patch_works(monkeypatch: pytest.MonkeyPatch) -> None:
    """If the patched scheduler does not come out first-in, first-out (Trio changed how
    it orders a batch), the player stops with a clear error instead of wrong traces."""
    from trio._core import _run

    from pitrio.testing import _fifo

    saved = _run._r
    monkeypatch.setattr(_fifo, "_checked", False)
    monkeypatch.setattr(_fifo._AlwaysReverse, "random", lambda self: 0.9)  # never reverses
    with (
        pytest.raises(_fifo.FifoSchedulingUnavailable, match=r"not 0-2 twice"),
        _fifo.fifo_scheduling(),
    ):
        pass  # pragma: no cover
    assert _run._r is saved
