"""The harness's own exceptions: the session and summary errors.

They sit under :class:`pitrio.HarnessError` in pitrio's one error tree (drawn in
the docstring of ``pitrio/_errors.py``)::

    HarnessError
    ├── SessionError                          a session store operation failed
    │   ├── SessionClosedError                the session was closed
    │   ├── SessionExistsError                the session id is taken
    │   ├── SessionFormatError (ValueError)   stored data pitrio cannot read
    │   ├── SessionLockedError                another store or process holds the session
    │   └── SessionNotFoundError (LookupError) no such session (or entry)
    ├── CompactionError                       summarising for compaction failed
    └── BranchSummaryError                    summarising a branch failed

Pi throws plain ``Error`` subclasses for these (``session/session.js``'s
``SessionInvariantError`` and friends; ``compaction/*.js`` ``"Summarization failed: …"``).
:class:`~pitrio.harness.HookError` lives beside the hooks (``_hooks``) and the replay
errors beside record/replay (``_replay``).
"""

from __future__ import annotations

from typing import Literal

from pitrio import HarnessError

__all__ = [
    "BranchSummaryError",
    "CompactionError",
    "SessionClosedError",
    "SessionError",
    "SessionExistsError",
    "SessionFormatError",
    "SessionLockedError",
    "SessionNotFoundError",
]


class SessionError(HarnessError):
    """Base class of the session errors."""


class SessionNotFoundError(SessionError, LookupError):
    """No session with that id (or no entry with that id) exists."""


class SessionExistsError(SessionError):
    """A session with that id exists already."""


class SessionLockedError(SessionError):
    """The session is open for writing elsewhere (another store or process)."""


class SessionClosedError(SessionError):
    """The session was closed; open it again from its store."""


class SessionFormatError(SessionError, ValueError):
    """Stored session data is not in a format pitrio can read (the message says where)."""


class CompactionError(HarnessError):
    """The summary request failed (``reason="summarization_failed"``) or was aborted
    (``reason="aborted"``); the message is Pi's."""

    def __init__(self, message: str, *, reason: Literal["aborted", "summarization_failed"]) -> None:
        self.reason = reason
        super().__init__(message)


class BranchSummaryError(HarnessError):
    """The branch-summary request failed or was aborted (``reason`` as in
    :class:`CompactionError`)."""

    def __init__(self, message: str, *, reason: Literal["aborted", "summarization_failed"]) -> None:
        self.reason = reason
        super().__init__(message)
