"""``python -m pitrio``: the coding-agent CLI (see :mod:`pitrio._cli`)."""

from __future__ import annotations

from ._cli import run

if __name__ == "__main__":
    run()
