"""Shared test configuration: Hypothesis profiles.

``dev`` is the default; ``ci`` is selected when the ``CI`` environment variable is set
(or explicitly with ``--hypothesis-profile=ci``). Both disable the per-example deadline:
the tests run in Trio's virtual time, so wall-clock duration says nothing about them.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile("dev", deadline=None, max_examples=50)
settings.register_profile(
    "ci",
    deadline=None,
    max_examples=100,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("ci" if os.environ.get("CI") else "dev")
