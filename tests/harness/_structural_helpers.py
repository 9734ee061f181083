"""What the structural tests share: an operation (``compact()``, ``navigate_tree()``, a
``prompt()`` that compacts) run until its summary request (or its hook) is out, then acted
on (``test_compaction_ops.py``, ``test_navigation.py``, ``test_compaction_in_run.py``,
``test_structural_hooks.py``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import trio

from pitrio.harness import restore_lane


class Hanging:
    """A stream function whose requests never answer; ``started`` is set once one is out."""

    def __init__(self) -> None:
        self.started = trio.Event()

    async def __call__(self, model: Any, context: Any, options: Any) -> Any:
        self.started.set()
        await trio.sleep_forever()


async def while_out(
    operation: Callable[[], Awaitable[Any]],
    started: trio.Event,
    act: Callable[[], Awaitable[object] | object] | None = None,
) -> Any:
    """Run ``operation`` in a nursery; once ``started`` is set (its summary request, or
    the hook it waits in, is out), call ``act`` (plain or async; ``None``: cancel the
    nursery, the caller's own cancellation). Returns what ``operation`` returned (``None``
    when cancelled). Bounded: a summary that never starts fails the test."""
    returned: list[Any] = []

    async def run() -> None:
        returned.append(await operation())

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            await started.wait()
            if act is None:
                nursery.cancel_scope.cancel()
            else:
                done = act()
                if isinstance(done, Awaitable):
                    await done
    return returned[0] if returned else None


def last_result(session: Any) -> dict[str, Any]:
    """The ``pi.result`` of the lane's last operation, which must be over."""
    lane = restore_lane(session)
    assert lane.operation is None
    result = session.get_value("pi.result", str(lane.last_operation_id))
    assert isinstance(result, dict)
    return result
