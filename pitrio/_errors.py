"""The exceptions pitrio raises, in one tree.

```
PitrioError
├── UsageError (ValueError)                   the caller misused a public call
│   ├── ArgumentTypeError (TypeError)         an argument of the wrong type
│   ├── InvalidStateError (RuntimeError)      a call the object's state does not allow
│   │   └── AgentBusyError                    prompt(), resume() or reset() while running
│   └── UnknownApiError (LookupError)         no implementation registered for an API name
├── IncompleteStreamError (RuntimeError)      a stream ended without its final result
├── WireFormatError (ValueError)              a wire-form (JSON) value pitrio cannot read
├── ToolArgumentsError                        a tool call's arguments fail its schema
├── ToolSchemaError                           a tool's schema cannot be used
├── ValidationAborted                         the abort signal stopped a validation
├── ProviderError                             a provider request failed
│   ├── APIError                              an HTTP error status (``status``) or an API error
│   │   └── APIConnectionError                no response: the connection failed
│   │       └── APIConnectionTimeoutError     no response headers in time
│   ├── ProviderProtocolError (ValueError)    a response pitrio cannot read
│   │   └── SSEEventTooLargeError             an SSE event over ``max_event_size``
│   ├── AuthError                             stored credentials unusable (a failed OAuth refresh)
│   │   ├── CredentialStoreError              auth.json cannot be read, written or locked
│   │   └── LoginError                        a subscription login did not complete
│   ├── MissingApiKeyError                    no API key and no authorization header
│   ├── RetryDelayTooLongError                the server asked to wait too long
│   └── DeferredError                         fetching or cancelling a deferred response
├── HarnessError                              the harness (pitrio.harness) failed
│   ├── SessionError                          a session store operation failed
│   │   ├── SessionClosedError                the session was closed
│   │   ├── SessionExistsError                the session id is taken
│   │   ├── SessionFormatError (ValueError)   a session file pitrio cannot read
│   │   ├── SessionLockedError                another process holds the session
│   │   └── SessionNotFoundError (LookupError) no such session
│   ├── HookError                             a hook raised or returned a bad value
│   ├── CompactionError                       summarising for compaction failed
│   ├── BranchSummaryError                    summarising a branch failed
│   ├── ReplayFileError (ValueError)          a recording pitrio cannot read
│   ├── ReplayMismatchError                   a request differs from the recorded one
│   └── ReplayedRaiseError (RuntimeError)     the recorded stream function raised here
├── PlayerError                               a conformance player (pitrio.testing) failed
│   ├── ScenarioError (ValueError)            a Pi oracle scenario it cannot play
│   ├── FixtureError (ValueError)             a provider fixture it cannot play
│   ├── RunProblem                            a scenario misbehaved past recording
│   ├── ConformanceError                      a provider fixture run misbehaved
│   └── FifoSchedulingUnavailable (RuntimeError) Trio changed under the FIFO patch
├── CodingToolError                           a coding tool (read, write, edit, bash...) failed
├── McpError                                  an MCP server cannot be used (pitrio.mcp)
│   └── McpConfigError (ValueError)           an MCP server configuration it cannot use
├── WorkerError                               a worker cannot reach Redis (pitrio.worker)
└── CliError                                  ``python -m pitrio`` cannot go on (exit status 1)
    ├── CliUsageError (ValueError)            a bad argument or file it names (exit status 2)
    │   ├── PolicyError                       a ``--policy`` file it cannot use
    │   └── SessionFileError                  ``--session FILE`` is no usable session file
    └── RpcCommandError                       an ``--mode rpc`` command it cannot carry out
```

A class in parentheses is a second base: existing code that catches the builtin keeps
working (``except ValueError`` still catches a :class:`UsageError`).

Where they live: the classes defined here are exported from :mod:`pitrio`;
``ToolArgumentsError``, ``ToolSchemaError`` and ``ValidationAborted`` are defined in
:mod:`pitrio._validation` (exported from :mod:`pitrio`); ``UnknownApiError`` is also
exported from :mod:`pitrio.providers`; the concrete provider errors live in
``pitrio.providers._http``, ``_sse`` and ``_deferred`` (a run never raises them:
they become an assistant message with ``stop_reason="error"``); the harness errors in
:mod:`pitrio.harness`; ``CodingToolError`` in :mod:`pitrio.coding`; the MCP errors in
:mod:`pitrio.mcp` (``McpConfigError`` is a :class:`UsageError` too); ``WorkerError`` in
:mod:`pitrio.worker`; the command line's
in :mod:`pitrio.cli` (``SessionFileError`` is a ``SessionError`` too; ``python -m
pitrio`` shows them as one line and exits with their ``exit_status``); the conformance
players' errors in ``pitrio/testing/_errors.py`` (exported from
``pitrio.testing.conformance`` and ``pitrio.testing.provider_conformance``). The test
kit's helpers (``ScriptedModel``, ``check_trace``...) raise the usage errors above.
The login and credential errors (``AuthError`` and below) are exported from
:mod:`pitrio.providers.auth`.

Failures *inside* a run are not exceptions: a provider failure ends as an assistant
message with ``stop_reason="error"``, a tool failure as an error tool result, an abort
as ``stop_reason="aborted"`` (there is no "aborted" exception: an abort is a cancel
scope, and its result is data). Texts copied from Pi are kept verbatim; where Pi's text
names its JavaScript API, pitrio's names the Python one, and the conformance player
translates (``docs/conformance.md``).
"""

from __future__ import annotations

__all__ = [
    "AgentBusyError",
    "ArgumentTypeError",
    "HarnessError",
    "IncompleteStreamError",
    "InvalidStateError",
    "PitrioError",
    "ProviderError",
    "ProviderProtocolError",
    "UnknownApiError",
    "UsageError",
    "WireFormatError",
]


class PitrioError(Exception):
    """Base class of pitrio's own exceptions (the whole tree: :ref:`error-tree`)."""


class UsageError(PitrioError, ValueError):
    """The caller used the API in a way it does not allow; the message says how to fix it."""


class ArgumentTypeError(UsageError, TypeError):
    """An argument of a public call has the wrong type; the message names the type expected."""


class InvalidStateError(UsageError, RuntimeError):
    """A call the object's current state does not allow (a stream opened twice,
    :class:`pitrio.providers.Models` used outside ``async with``, no stream function)."""


class AgentBusyError(InvalidStateError):
    """The agent is running; queue with ``steer()``/``follow_up()`` or ``wait_for_idle()``."""


class UnknownApiError(UsageError, LookupError):
    """No implementation is registered (or importable) for an API name."""


class IncompleteStreamError(PitrioError, RuntimeError):
    """An event stream ended without its final result (a stream function that ended
    its stream with no ``done``/``error`` event and no result)."""


class WireFormatError(PitrioError, ValueError):
    """A wire-form (Pi's JSON) value cannot be read: an unknown type tag or a missing field."""


class ProviderError(PitrioError):
    """A provider request failed. Inside a run this never escapes: the run's last
    assistant message has ``stop_reason="error"`` and the text as ``error_message``."""


class ProviderProtocolError(ProviderError, ValueError):
    """A provider's response cannot be read (a malformed or oversized event)."""


class HarnessError(PitrioError):
    """Base class of :mod:`pitrio.harness`'s exceptions (sessions, hooks, compaction, replay)."""
