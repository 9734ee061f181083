"""FIFO scheduling for the conformance player: the one place that patches Trio's internals.

Trio deliberately runs the tasks that became runnable together in a random order (it
reverses each scheduling batch with probability 1/2, or shuffles it under Hypothesis).
JavaScript's event loop runs them in order, and some of Pi's traces depend on that (two
tools that wake at the same instant). The conformance player (and only it: pitrio itself
never relies on an order Trio does not promise) replays Pi's scenarios under
:func:`fifo_scheduling`, which swaps the random generator of ``trio._core._run`` for one
that always reverses the batch; the scheduler pops from the end, so the batch runs
first-in, first-out.

This depends on two private names of Trio's scheduler, so it is checked before use: the
Trio version must be one this was tested with (or newer, if the names are still there),
and a tiny run must then actually come out first-in, first-out. Otherwise
:class:`FifoSchedulingUnavailable` says what changed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any, Final

import trio
import trio.testing

from ._errors import FifoSchedulingUnavailable

__all__ = ["FifoSchedulingUnavailable", "fifo_scheduling"]

TESTED_TRIO: Final = ((0, 31), (0, 35))
"""The Trio versions (major, minor), inclusive, whose scheduler this patch was checked on."""


@contextmanager
def fifo_scheduling() -> Iterator[None]:
    """Within the block, Trio runs each scheduling batch in the order its tasks woke.

    Raises:
        FifoSchedulingUnavailable: this Trio's scheduler is not one the patch works on.
    """
    run_module = _scheduler_module()
    saved = {name: vars(run_module)[name] for name in ("_ALLOW_DETERMINISTIC_SCHEDULING", "_r")}
    _patch(run_module, _ALLOW_DETERMINISTIC_SCHEDULING=False, _r=_AlwaysReverse())
    try:
        _check_fifo()
        yield
    finally:
        _patch(run_module, **saved)


def _scheduler_module() -> ModuleType:
    version = _version(trio.__version__)
    try:
        from trio._core import _run
    except ImportError as exc:  # pragma: no cover  # depends on the Trio release
        raise FifoSchedulingUnavailable(_explain("trio._core._run is gone")) from exc
    missing = [n for n in ("_ALLOW_DETERMINISTIC_SCHEDULING", "_r") if n not in vars(_run)]
    if missing:  # pragma: no cover  # depends on the Trio release
        raise FifoSchedulingUnavailable(_explain(f"trio._core._run has no {', '.join(missing)}"))
    if version < TESTED_TRIO[0]:  # pragma: no cover  # depends on the Trio release
        raise FifoSchedulingUnavailable(_explain("this Trio is older than any tested"))
    return _run


def _patch(module: ModuleType, **names: Any) -> None:
    # Assigning through the module's namespace: these are private (and Final) in Trio.
    vars(module).update(names)


_checked = False


def _check_fifo() -> None:
    """Once per process: three tasks spawned together, then woken together, must run in
    the order they were spawned, then in the order they parked."""
    global _checked
    if _checked:
        return
    order: list[int] = []

    async def main() -> None:
        lot = trio.lowlevel.ParkingLot()  # wakes its tasks in the order they parked

        async def waiter(i: int) -> None:
            order.append(i)  # tasks start in the order they were spawned...
            await lot.park()
            order.append(i)  # ...and wake in the order they parked

        async with trio.open_nursery() as nursery:
            for i in range(3):
                nursery.start_soon(waiter, i)
            await trio.testing.wait_all_tasks_blocked()
            lot.unpark_all()

    for _ in range(4):  # unpatched, four runs in a row in order have odds of 1/16 or less
        order.clear()
        trio.run(main)
        if order != [0, 1, 2, 0, 1, 2]:
            msg = f"tasks spawned, then woken, together ran in the order {order}, not 0-2 twice"
            raise FifoSchedulingUnavailable(_explain(msg))
    _checked = True


def _version(text: str) -> tuple[int, int]:
    parts = text.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):  # pragma: no cover  # a development build
        return TESTED_TRIO[1]


def _explain(what: str) -> str:
    low, high = (".".join(map(str, v)) for v in TESTED_TRIO)
    return (
        f"the conformance player's FIFO scheduling does not work with trio {trio.__version__} "
        f"({what}). It patches trio._core._run (tested with trio {low} to {high}); install "
        f"a tested trio, or update pitrio/testing/_fifo.py for this one."
    )


class _AlwaysReverse:
    """``random()`` below 0.5 makes Trio reverse each batch, and it pops from the end:
    so tasks run first-in, first-out."""

    def random(self) -> float:
        return 0.0

    def uniform(self, a: float, b: float) -> float:
        return (a + b) / 2
