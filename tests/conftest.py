"""Shared test configuration: Hypothesis profiles, and the per-test time limit for Trio.

``dev`` is the default; ``ci`` is selected when the ``CI`` environment variable is set
(or explicitly with ``--hypothesis-profile=ci``). Both disable the per-example deadline:
the tests run in Trio's virtual time, so wall-clock duration says nothing about them.

The time limit (``timeout`` in ``pyproject.toml``, pytest-timeout) raises in whatever
code runs when it expires. In a Trio test that is usually Trio's own scheduler, waiting
for I/O: the exception would wreck that ``trio.run`` and every later test would fail with
"Attempted to call run() from inside a run()". So a Trio test's limit is delivered the
Trio way: the test runs in a cancel scope, the alarm only asks Trio to cancel it
(``TrioToken.run_sync_soon`` is safe in a signal handler), and the test then fails. If the
test is stuck in code that never reaches a checkpoint, pytest-timeout's own failure
follows after :data:`GRACE` seconds.
"""

from __future__ import annotations

import functools
import os
import signal
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Final

import pytest
import trio
from hypothesis import HealthCheck, settings

# real PostgreSQL and Redis servers for the tests that ask for them (postgres_server,
# postgres_url, redis_server, redis_url)
pytest_plugins = ("_services",)

settings.register_profile("dev", deadline=None, max_examples=50)
settings.register_profile(
    "ci",
    deadline=None,
    max_examples=100,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

GRACE: Final = 10.0
"""Seconds a Trio test has to unwind after its time limit before it is failed in place."""

_expire: dict[str, Callable[[], None]] = {}  # node id -> cancel the running Trio test


@pytest.hookimpl(trylast=True)  # after pytest-trio has marked the async tests
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if (
            isinstance(item, pytest.Function)
            and item.get_closest_marker("trio") is not None
            and not hasattr(item.obj, "hypothesis")  # sync: its examples run trio.run
        ):
            item.obj = _time_limited(item.nodeid, item.obj)


def _time_limited(
    nodeid: str, test: Callable[..., Awaitable[None]]
) -> Callable[..., Awaitable[None]]:
    """``test`` in a cancel scope that the time limit's alarm cancels (then it fails)."""

    @functools.wraps(test)
    async def limited(**kwargs: Any) -> None:
        token = trio.lowlevel.current_trio_token()
        with trio.CancelScope() as scope:
            _expire[nodeid] = lambda: token.run_sync_soon(scope.cancel)
            try:
                await test(**kwargs)
            finally:
                del _expire[nodeid]
        if scope.cancelled_caught:
            pytest.fail(
                "Timeout from pytest-timeout: the test ran past its time limit (timeout in "
                "pyproject.toml, or its pytest.mark.timeout) and was cancelled"
            )

    return limited


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> bool | None:
    """A Trio test's alarm: first the Trio way, then (after :data:`GRACE`) in place."""
    if (
        settings.method != "signal"
        or item.get_closest_marker("trio") is None
        or threading.current_thread() is not threading.main_thread()
    ):
        return None  # pytest-timeout's own timer
    from pytest_timeout import timeout_sigalrm  # type: ignore[import-untyped]  # no stubs

    asked = False

    def handler(signum: int, frame: object) -> None:
        nonlocal asked
        expire = _expire.get(item.nodeid)
        if expire is None or asked:
            timeout_sigalrm(item, settings)  # dumps the stacks and fails the test here
            return
        asked = True
        expire()
        signal.setitimer(signal.ITIMER_REAL, GRACE)

    def cancel() -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)

    item.cancel_timeout = cancel  # type: ignore[attr-defined]  # pytest-timeout calls it
    signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, settings.timeout)
    return True
