"""The run's dependencies, in a context variable (read by tools that take a ``RunContext``).

Its own module so that the Agent can set it without importing the typed-tools machinery:
:class:`pitrio.Agent` sets it for each run, and Trio copies it into every task the run
starts, so a tool needs no reference to its agent.
"""

from __future__ import annotations

from contextvars import ContextVar

__all__ = ["RUN_DEPS"]

RUN_DEPS: ContextVar[object] = ContextVar("pitrio_run_deps", default=None)
"""The dependencies of the run the current task belongs to (``None`` outside a run)."""
