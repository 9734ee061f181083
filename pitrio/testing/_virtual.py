"""Virtual time, and the FIFO scheduling the conformance player needs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import trio
import trio.testing

__all__ = ["fifo_scheduling", "run_virtual"]

T = TypeVar("T")


def run_virtual(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """``trio.run(fn, *args)`` on a :class:`trio.testing.MockClock` that jumps ahead
    whenever every task is blocked, so sleeps cost nothing and orderings are exact."""
    return trio.run(fn, *args, clock=trio.testing.MockClock(autojump_threshold=0))


@contextmanager
def fifo_scheduling() -> Iterator[None]:
    """Make Trio run the tasks of each scheduling batch in the order they became runnable.

    Trio deliberately shuffles tasks that become runnable together. JavaScript's event
    loop does not, and Pi's traces depend on that order (for example, two tools that
    wake at the same instant). The conformance player runs Pi's scenarios under this
    context manager. It patches a private detail of trio's scheduler (the batch
    shuffle), so it belongs in tests only; pitrio itself never relies on it.
    """
    from trio._core import _run

    saved_flag = _run._ALLOW_DETERMINISTIC_SCHEDULING
    saved_random = _run._r
    try:
        _run._ALLOW_DETERMINISTIC_SCHEDULING = False  # type: ignore[misc]  # Final in trio
        _run._r = _AlwaysReverse()  # type: ignore[assignment]  # duck-typed stand-in
        yield
    finally:
        _run._ALLOW_DETERMINISTIC_SCHEDULING = saved_flag  # type: ignore[misc]  # Final in trio
        _run._r = saved_random


class _AlwaysReverse:
    """``random()`` below 0.5 makes trio reverse each batch, and it pops from the end:
    so tasks run first-in, first-out."""

    def random(self) -> float:
        return 0.0

    def uniform(self, a: float, b: float) -> float:
        return (a + b) / 2
