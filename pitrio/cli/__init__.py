"""``python -m pitrio``: the coding agent in the terminal (and ``pitrio serve``, the web UI).

:func:`main` runs the command line and returns the exit status; :func:`run` is the
``pitrio`` console script. Everything else here is private.
"""

from __future__ import annotations

from ._main import main as main, run as run

__all__: list[str] = ["main", "run"]
