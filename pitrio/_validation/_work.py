"""Bounded work: how a long validation gets off the event loop and stops when cancelled.

Validation is plain synchronous Python, and its cost grows with the arguments a model
sends: a 1,000,000-item array takes seconds, during which nothing else on the Trio
event loop runs (an abort could not get in). So :meth:`Validator.validate_async` first
measures the arguments (:func:`exceeds`: array items, object properties and string
length, stopping as soon as it passes :data:`INLINE_UNITS`, so it costs little for
any size). Normal arguments are validated inline, as before. Bigger ones are validated
in a worker thread, so the event loop keeps running, and the worker can be stopped:
the walks over the value (clone and coercion, TypeBox's check, its error walk) report
the length of every array and object they are about to visit to the worker's budget
(:data:`current_work`, a context variable; None outside a worker, which costs one
look-up per container), and every :data:`CHECK_UNITS` units the budget looks at a
stop flag that the waiting task sets when it is cancelled or aborted; ``_Stopped``
then ends the work. It derives from :class:`BaseException` so that no
``except Exception`` in the validation code swallows it. The unit is a container's
length, counted when the walk enters it: a worker notices the stop flag between
containers, so in a single flat array it may finish the pass it is in.

The inline decision looks at the arguments only: a schema that multiplies the work per
item (many ``anyOf`` branches, say) makes an inline validation proportionally longer.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Iterator
from typing import Final, final

INLINE_UNITS: Final = 20_000
"""Arguments up to this size (array items + object properties + string characters / 64)
are validated inline, on the event loop (up to about 10-40 ms of work); bigger ones in
a worker thread."""

CHECK_UNITS: Final = 20_000
"""Units of work between two looks at the stop flag in a worker thread."""


def exceeds(value: object, units: int) -> bool:
    """Whether ``value`` is bigger than ``units`` (array items, object properties,
    and string characters / 64). Stops as soon as it knows: the cost is bounded by
    ``units`` whatever the size of ``value``."""
    if type(value) is dict and len(value) <= 64:
        # The common case, once per tool call: a small object of scalars and strings.
        for x in value.values():
            t = type(x)
            if t is dict or t is list or (t is str and len(x) > 4096):
                break
        else:
            return False
    left = units
    stack = [value]
    while stack:
        v = stack.pop()
        if type(v) is dict:
            left -= len(v)
            if left < 0:
                return True
            stack.extend(v.values())
        elif type(v) is list:
            left -= len(v)
            if left < 0:
                return True
            stack.extend(v)
        elif type(v) is str:
            left -= len(v) >> 6
            if left < 0:
                return True
    return False


class _Stopped(BaseException):
    """The task waiting for this worker's validation went away: stop working."""


@final
class _Budget:
    __slots__ = ("left", "step", "stop")

    def __init__(self, step: int, stop: threading.Event) -> None:
        self.left = step
        self.step = step
        self.stop = stop

    def spend(self, units: int) -> None:
        self.left -= units
        if self.left < 0:
            if self.stop.is_set():
                raise _Stopped
            self.left = self.step


_current: Final[contextvars.ContextVar[_Budget | None]] = contextvars.ContextVar(
    "pitrio_validation_budget", default=None
)

current_work: Final = _current.get
"""The budget counting this validation's work, or None. A walk about to visit a
container of ``n`` items calls ``current_work()`` and, when it is not None,
``.spend(n)`` (written out at each site: a function call per container costs more
than the check)."""


@contextlib.contextmanager
def budget(units: int, stop: threading.Event) -> Iterator[None]:
    """Count the work of validations in this context, and every ``units`` units look at
    ``stop``: raise ``_Stopped`` once it is set."""
    token = _current.set(_Budget(units, stop))
    try:
        yield
    finally:
        _current.reset(token)
