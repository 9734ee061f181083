"""Delivering events to the harness's listeners.

:class:`EventBus` calls each listener of :meth:`~pitrio.harness.Harness.subscribe` in
the order they subscribed, awaiting a listener that returns an awaitable before calling
the next one. When every listener is a plain function nothing is awaited: delivery
returns ``None`` and costs no checkpoint (the Agent's listeners take the same fast
path). Subscribing or unsubscribing while an event is delivered affects the next event.

Plays the part of Pi's ``HarnessEventBus`` (pi-agent-core 0.85.0, ``harness/events.js``:
``on`` and ``emit``, listeners awaited in turn), without its watchers and batches.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeAlias, final

from ._events import HarnessEvent

__all__ = ["EventBus", "HarnessListener"]

HarnessListener: TypeAlias = Callable[[HarnessEvent], "Awaitable[None] | None"]
"""``(event)``; a plain or async function, awaited in order."""


@final
class EventBus:
    """The listeners of one harness."""

    __slots__ = ("_listeners",)

    def __init__(self) -> None:
        self._listeners: list[HarnessListener] = []

    def subscribe(self, listener: HarnessListener) -> Callable[[], None]:
        """Add ``listener``; returns a function removing it."""
        self._listeners = [*self._listeners, listener]

        def unsubscribe() -> None:
            self._listeners = [x for x in self._listeners if x is not listener]

        return unsubscribe

    def deliver(self, event: HarnessEvent) -> Awaitable[None] | None:
        """Call the listeners; returns what is left to await (a sync fast path)."""
        listeners = self._listeners
        for index, listener in enumerate(listeners):
            result = listener(event)
            if result is not None and hasattr(type(result), "__await__"):
                return _finish(result, listeners[index + 1 :], event)
        return None

    async def emit(self, event: HarnessEvent) -> None:
        """Deliver ``event`` and wait for the listeners that are async."""
        pending = self.deliver(event)
        if pending is not None:
            await pending


async def _finish(
    pending: Awaitable[object], rest: list[HarnessListener], event: HarnessEvent
) -> None:
    await pending
    for listener in rest:
        result = listener(event)
        if result is not None and hasattr(type(result), "__await__"):
            await result
