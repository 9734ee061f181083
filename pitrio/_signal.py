"""AbortSignal: a sticky, run-wide abort request that cancels scopes.

Pi passes a JavaScript ``AbortSignal`` to everything a run touches. In pitrio the
signal is the thing an application flips (``abort()``); what it *does* is cancel the
Trio cancel scopes that the loop opens around interruptible work (a provider stream,
a tool call). Work that starts after the abort gets an already-cancelled scope, so an
aborted run cannot start anything new that would block, yet still emits its closing
events (``message_end``, ``turn_end``, ``agent_end``) as Pi does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import final

import trio

__all__ = ["AbortSignal"]


@final
class AbortSignal:
    """An abort request shared by everything one run does.

    ``abort()`` is synchronous and idempotent. Callbacks registered with
    :meth:`add_callback` run synchronously inside ``abort()``, in registration
    order (as JavaScript's abort listeners do).
    """

    __slots__ = ("_callbacks", "_event", "_next_key", "aborted", "reason")

    def __init__(self) -> None:
        self.aborted = False
        self.reason: object = None
        # Made at the first callback: many runs never register one.
        self._callbacks: dict[int, Callable[[], object]] | None = None
        self._event: trio.Event | None = None
        self._next_key = 0

    def abort(self, reason: object = None) -> None:
        """Request the abort. Later calls do nothing."""
        if self.aborted:
            return
        self.aborted = True
        self.reason = reason
        if self._callbacks:
            callbacks = list(self._callbacks.values())
            self._callbacks.clear()
            for callback in callbacks:
                callback()
        if self._event is not None:
            self._event.set()

    def add_callback(self, callback: Callable[[], object]) -> Callable[[], object]:
        """Call ``callback`` on abort (at once if already aborted); returns a remover
        (call it to forget the callback; what it returns means nothing)."""
        if self.aborted:
            callback()
            return _noop
        callbacks = self._callbacks
        if callbacks is None:
            callbacks = self._callbacks = {}
        key = self._next_key
        self._next_key = key + 1
        callbacks[key] = callback
        return partial(callbacks.pop, key, None)

    @contextmanager
    def cancel_scope(self) -> Iterator[trio.CancelScope]:
        """A cancel scope that the abort cancels (already cancelled if aborted)."""
        scope = trio.CancelScope()
        if self.aborted:
            scope.cancel()
            with scope:
                yield scope
            return
        remove = self.add_callback(scope.cancel)
        try:
            with scope:
                yield scope
        finally:
            remove()

    async def wait(self) -> None:
        """Block until aborted. Checkpoints."""
        if self.aborted:
            await trio.lowlevel.checkpoint()
            return
        if self._event is None:
            self._event = trio.Event()
        await self._event.wait()


def _noop() -> None:
    return None
