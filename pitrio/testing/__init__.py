"""pitrio.testing: fakes and checkers for testing code built on pitrio (public, like trio.testing).

- :class:`ScriptedModel`: a stream function that plays scripted responses (no network).
- :func:`check_trace`: the event-ordering invariants every run must satisfy.
- :func:`run_virtual`: run an async function in Trio's virtual time.
- ``python -m pitrio.testing.conformance SCENARIO.json``: the Pi oracle's scenario player.
- ``python -m pitrio.testing.provider_conformance FIXTURE.json``: the provider fixture player.
"""

from __future__ import annotations

from ._check import check_trace as check_trace
from ._scripted import ScriptedModel as ScriptedModel, ScriptedResponse as ScriptedResponse
from ._virtual import run_virtual as run_virtual

__all__ = ["ScriptedModel", "ScriptedResponse", "check_trace", "run_virtual"]
