"""Bounded work: how a long validation gets off the event loop and stops when cancelled.

Validation is plain synchronous Python, and its cost grows with the arguments a model
sends: a 1,000,000-item array takes seconds, during which nothing else on the Trio
event loop runs (an abort could not get in). The walks over the value (clone and
coercion, TypeBox's check, its error walk) report the size of every array and object
they visit to :func:`tick`. Outside :func:`budget` that costs one thread-local look-up
per container and does nothing else. Inside it, the units are counted:

- on the event loop, :meth:`Validator.validate_async` validates inline with a budget of
  :data:`INLINE_UNITS`; past it, ``_OverBudget`` abandons the inline attempt (no state
  is kept: the arguments are never mutated) and the validation starts again in a
  worker thread, so the event loop keeps running;
- in the worker, every :data:`CHECK_UNITS` units it looks at a stop flag that the
  waiting task sets when it is cancelled or aborted, and ``_Stopped`` ends the work.

Both exceptions derive from :class:`BaseException` so that no ``except Exception`` in
the validation code swallows them. The granularity is a container: a flat array is one
tick of its length, so a worker notices the stop flag between passes over it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Final, final

INLINE_UNITS: Final = 20_000
"""Array items and object properties validated on the event loop before the validation
moves to a worker thread (about 10-40 ms of work)."""

CHECK_UNITS: Final = 20_000
"""Units of work between two looks at the stop flag in a worker thread."""

class _Local(threading.local):
    budget: _Budget | None = None  # a class default: reading it never raises


_local: Final = _Local()


class _OverBudget(BaseException):
    """The inline validation passed :data:`INLINE_UNITS`: move it to a thread."""


class _Stopped(BaseException):
    """The task waiting for this worker's validation went away: stop working."""


@final
class _Budget:
    __slots__ = ("left", "step", "stop")

    def __init__(self, step: int, stop: threading.Event | None) -> None:
        self.left = step
        self.step = step
        self.stop = stop

    def exhausted(self) -> None:
        if self.stop is None:
            raise _OverBudget
        if self.stop.is_set():
            raise _Stopped
        self.left = self.step


def tick(units: int) -> None:
    """Count ``units`` of work (the length of a container about to be walked)."""
    current = _local.budget
    if current is not None:
        current.left -= units
        if current.left < 0:
            current.exhausted()


@contextlib.contextmanager
def budget(units: int, stop: threading.Event | None = None) -> Iterator[None]:
    """Count this thread's work: raise ``_OverBudget`` past ``units`` (``stop`` None),
    or look at ``stop`` every ``units`` and raise ``_Stopped`` once it is set."""
    previous = _local.budget
    _local.budget = _Budget(units, stop)
    try:
        yield
    finally:
        _local.budget = previous
