"""pitrio.testing: fakes and checkers for testing code built on pitrio (public, like trio.testing).

- :class:`ScriptedModel`: a stream function that plays scripted responses (no network).
- :func:`check_trace`: the event-ordering invariants every run must satisfy.
- :func:`run_virtual`: run an async function in Trio's virtual time.
- Hypothesis strategies (with ``pip install 'pitrio[testing]'``): :func:`scripted_responses`,
  :func:`scripted_runs` (scripts for a :class:`ScriptedModel`), :func:`agent_event_traces`,
  :func:`event_stream_prefixes` (valid event streams for what consumes them).
- ``python -m pitrio.testing.conformance SCENARIO.json``: the Pi oracle's scenario player.
- ``python -m pitrio.testing.provider_conformance FIXTURE.json``: the provider fixture player.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._check import check_trace as check_trace
from ._scripted import ScriptedModel as ScriptedModel, ScriptedResponse as ScriptedResponse
from ._virtual import run_virtual as run_virtual

if TYPE_CHECKING:
    from ._strategies import (
        agent_event_traces as agent_event_traces,
        event_stream_prefixes as event_stream_prefixes,
        scripted_responses as scripted_responses,
        scripted_runs as scripted_runs,
    )

__all__ = [
    "ScriptedModel",
    "ScriptedResponse",
    "agent_event_traces",
    "check_trace",
    "event_stream_prefixes",
    "run_virtual",
    "scripted_responses",
    "scripted_runs",
]

_STRATEGIES = frozenset(
    {"agent_event_traces", "event_stream_prefixes", "scripted_responses", "scripted_runs"}
)


def __getattr__(name: str) -> Any:
    # The strategies import Hypothesis, an optional dependency: only when asked for.
    if name in _STRATEGIES:
        from . import _strategies

        return getattr(_strategies, name)
    msg = f"module 'pitrio.testing' has no attribute {name!r}"
    raise AttributeError(msg)


def __dir__() -> list[str]:
    return sorted({*globals(), *_STRATEGIES})
