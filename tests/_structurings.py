"""Which threads structure a session's entries while a test runs: a resumed session
structures the active branch's at the open (in the store's worker thread), and the others
when they are read, which must not be on the event loop's thread."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from pitrio.harness import _session_state


def record_structurings(monkeypatch: pytest.MonkeyPatch) -> list[threading.Thread]:
    """The thread of each entry structured from now on (until ``monkeypatch`` undoes it)."""
    threads: list[threading.Thread] = []
    structure = _session_state.entry_from_wire  # type: ignore[attr-defined]

    def counted(write: Any) -> Any:
        threads.append(threading.current_thread())
        return structure(write)

    monkeypatch.setattr(_session_state, "entry_from_wire", counted)
    return threads
