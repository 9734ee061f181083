"""``python -m pitrio``: the coding-agent CLI (see :mod:`pitrio.cli`)."""

from __future__ import annotations

from .cli import run

if __name__ == "__main__":
    run()
