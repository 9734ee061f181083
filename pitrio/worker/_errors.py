"""The worker's exception (drawn in the tree of ``pitrio/_errors.py``)."""

from __future__ import annotations

from pitrio import PitrioError

__all__ = ["WorkerError"]


class WorkerError(PitrioError):
    """A worker cannot reach its event stream (Redis), or a job it was given is unusable."""
