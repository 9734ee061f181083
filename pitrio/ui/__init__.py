"""A chat view for any UI: Agent and Harness events as webview protocol messages.

:class:`UiAdapter` turns each event into ``append`` / ``appendDelta`` / ``replace``
messages (plus ``status``), :class:`Transcript` folds those messages into the view they
build (to bring a newly connected client up to date). Both are pure: no I/O, no Trio.
``python -m pitrio serve`` (the web UI) is built on them; see docs/web.md.
"""

from __future__ import annotations

from ._adapter import (
    Transcript as Transcript,
    UiAdapter as UiAdapter,
    tool_summary as tool_summary,
    tool_title as tool_title,
)
from ._protocol import (
    Append as Append,
    AppendDelta as AppendDelta,
    ItemKind as ItemKind,
    ItemState as ItemState,
    Replace as Replace,
    Status as Status,
    UiMessage as UiMessage,
)

__all__: list[str] = [
    "Append",
    "AppendDelta",
    "ItemKind",
    "ItemState",
    "Replace",
    "Status",
    "Transcript",
    "UiAdapter",
    "UiMessage",
    "tool_summary",
    "tool_title",
]
