"""The exceptions of pitrio's test kit (their place in the tree: :mod:`pitrio._errors`).

The conformance players (``python -m pitrio.testing.conformance``,
``python -m pitrio.testing.provider_conformance``) raise :class:`PlayerError`
subclasses: the input cannot be played (:class:`ScenarioError`, :class:`FixtureError`),
a run went wrong in a way the player cannot record as a problem (:class:`RunProblem`,
:class:`ConformanceError`), or Trio's scheduler changed under the FIFO patch
(:class:`FifoSchedulingUnavailable`). Bad arguments to :class:`~pitrio.testing.ScriptedModel`,
:class:`~pitrio.testing.ScriptedResponse` and :func:`~pitrio.testing.check_trace` are
pitrio's ordinary :class:`~pitrio.UsageError` / :class:`~pitrio.ArgumentTypeError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._errors import PitrioError

__all__ = [
    "ConformanceError",
    "FifoSchedulingUnavailable",
    "FixtureError",
    "PlayerError",
    "RunProblem",
    "ScenarioError",
]


class PlayerError(PitrioError):
    """Base class of the conformance players' exceptions."""


class ScenarioError(PlayerError, ValueError):
    """A Pi oracle scenario is not valid (the player's exit status 2); the text names
    the key and what it must be."""


class FixtureError(PlayerError, ValueError):
    """A provider fixture is malformed (the oracle's exit status 2); the text names the
    JSON path and what it must be."""


class RunProblem(PlayerError):
    """A scenario misbehaved in a way that stops it (exit status 3): an action run from a
    listener tried to block."""


class ConformanceError(PlayerError):
    """A fixture run misbehaved (the oracle's exit status 3).

    Attributes:
        problems: what went wrong.
        trace: the records collected so far.
    """

    def __init__(self, problems: Sequence[str], trace: list[dict[str, Any]]) -> None:
        super().__init__("; ".join(problems))
        self.problems = list(problems)
        self.trace = trace


class FifoSchedulingUnavailable(PlayerError, RuntimeError):
    """Trio changed the private scheduler details the conformance player patches
    (``pitrio/testing/_fifo.py``); the text says what changed and how to go on."""
