"""A session writer's hop to a worker thread, at half the cost of ``to_thread``.

A session's writes are blocking file or database calls, which must not run on the
event loop's thread (STYLE.md); each awaited write is done when the call returns (the
session's durability contract). :func:`trio.to_thread.run_sync` does both, but a hop
through it costs about 265,000 instructions (a capacity limiter, a placeholder task, the
context copy and the thread-local set-up of ``trio.from_thread``), about half an agent
turn; a harness turn with a session makes three. :func:`run_sync` hands the call to a
thread of Trio's own thread cache (:func:`trio.lowlevel.start_thread_soon`, the threads
``to_thread`` uses) and sleeps until the thread hands back its outcome through the
run's token: about 140,000 instructions (cachegrind, 1,100 hops minus 100), most of it
Trio's wake-up.

The semantics are ``to_thread.run_sync``'s for a call the caller must wait for: a
cancelled caller stops before the call starts; once started, the call is not abandoned
(the cancellation waits for it), and its exception is raised in the caller. The writers'
calls never call back into Trio (no ``trio.from_thread``), so they need no token of
their own, and they are few at a time (one per open session), so they need no limiter.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import outcome
import trio

__all__ = ["run_sync"]

T = TypeVar("T")


def _no_abort(_: object) -> trio.lowlevel.Abort:
    return trio.lowlevel.Abort.FAILED  # the call has started: wait for it


async def run_sync(fn: Callable[..., T], *args: object) -> T:
    """``fn(*args)`` in a worker thread; its result or exception once it returns."""
    await trio.lowlevel.checkpoint_if_cancelled()
    task = trio.lowlevel.current_task()
    token = trio.lowlevel.current_trio_token()

    def deliver(result: outcome.Outcome[T]) -> None:
        # In the worker thread: wake the task in the run's thread.
        token.run_sync_soon(trio.lowlevel.reschedule, task, result)

    trio.lowlevel.start_thread_soon(functools.partial(fn, *args), deliver)
    value: T = await trio.lowlevel.wait_task_rescheduled(_no_abort)
    return value
