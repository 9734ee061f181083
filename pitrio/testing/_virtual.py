"""Virtual time for tests (the conformance player's FIFO scheduling is in ``_fifo``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio
import trio.testing

__all__ = ["run_virtual"]

T = TypeVar("T")


def run_virtual(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """``trio.run(fn, *args)`` on a :class:`trio.testing.MockClock` that jumps ahead
    whenever every task is blocked, so sleeps cost nothing and orderings are exact."""
    return trio.run(fn, *args, clock=trio.testing.MockClock(autojump_threshold=0))
