"""Exceptions pitrio raises.

```
PitrioError
├── UsageError                 the caller misused the API
│   └── AgentBusyError         prompt(), resume() or reset() while a run is active
├── ToolArgumentsError         a tool call's arguments fail its schema (Pi's message)
└── ToolSchemaError            a tool's schema cannot be used (Pi's thrown text)
```

(The last two live in :mod:`pitrio._validation`; the loop turns both into error results.)

Failures *inside* a run are not exceptions: a provider failure ends as an assistant
message with ``stop_reason="error"``, a tool failure as an error tool result, an abort
as ``stop_reason="aborted"``. Texts copied from Pi are kept verbatim.
"""

from __future__ import annotations

__all__ = ["AgentBusyError", "PitrioError", "UsageError"]


class PitrioError(Exception):
    """Base class of pitrio's own exceptions."""


class UsageError(PitrioError, ValueError):
    """The caller used the API in a way it does not allow; the message says how to fix it."""


class AgentBusyError(UsageError):
    """The agent is running; queue with ``steer()``/``follow_up()`` or ``wait_for_idle()``."""
