"""``python -m pitrio``: the coding agent in the terminal (and ``pitrio serve``, the web UI
of ``pitrio.web``, which it dispatches to).

:func:`main` runs the command line and returns the exit status; :func:`run` is the
``pitrio`` console script. The error classes are the command line's branch of pitrio's
error tree (:mod:`pitrio._errors`): ``main`` shows them as one line and returns their
``exit_status``, it does not raise them. Everything else here is private.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._main import main as main, run as run

if TYPE_CHECKING:
    from ._errors import (
        CliError as CliError,
        CliUsageError as CliUsageError,
        PolicyError as PolicyError,
        RpcCommandError as RpcCommandError,
        SessionFileError as SessionFileError,
    )

__all__: list[str] = [
    "CliError",
    "CliUsageError",
    "PolicyError",
    "RpcCommandError",
    "SessionFileError",
    "main",
    "run",
]


def __getattr__(name: str) -> Any:
    # The error classes derive from the harness's: imported on first use, so that
    # ``python -m pitrio --help`` does not load the harness.
    if name in __all__:
        from . import _errors

        return getattr(_errors, name)
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)
