"""The command line's errors: :class:`CliError` and its subclasses (in pitrio's tree,
drawn in :mod:`pitrio._errors`).

``python -m pitrio`` shows one of these as one line, ``pitrio: <message>`` on stderr
(no traceback), and exits with its :attr:`CliError.exit_status`: 2 for what the person
can fix in the command or a file it names, 1 for a failure while starting.
"""

from __future__ import annotations

from typing import ClassVar

from pitrio import PitrioError
from pitrio.harness import SessionError

__all__ = ["CliError", "CliUsageError", "PolicyError", "RpcCommandError", "SessionFileError"]


class CliError(PitrioError):
    """The command line cannot go on (e.g. the ``--local`` model server did not start)."""

    exit_status: ClassVar[int] = 1


class CliUsageError(CliError, ValueError):
    """An argument, or a file an argument names, cannot be used; the text says how to
    fix it (exit status 2)."""

    exit_status: ClassVar[int] = 2


class PolicyError(CliUsageError):
    """A policy file (``--policy``) that cannot be used; the text says what and where."""


class SessionFileError(CliUsageError, SessionError):
    """``--session FILE`` names a file that is not a session file, or a path in a missing
    directory (a :class:`~pitrio.harness.SessionError` too, as the store's own errors)."""


class RpcCommandError(CliError):
    """An ``--mode rpc`` command that cannot be carried out; it is answered with
    ``success: false`` and this text, and the session goes on."""
