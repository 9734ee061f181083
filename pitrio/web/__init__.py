"""``python -m pitrio serve``: the coding agent in the browser, beside :mod:`pitrio.ui`
(the adapter from agent events to the page's messages), which it serves.

An HTTP + WebSocket server on Trio (the ``web`` extra: trio-websocket) around the CLI's
core (:class:`~pitrio.cli._app.App`: the harness, the coding tools, the session):
:mod:`pitrio.web._serve` holds the entry points and the protocol, :mod:`pitrio.web._http`
the transport, :mod:`pitrio.web._pages` the session every page shares and
:mod:`pitrio.web._commands` the slash commands. The command line reaches it only through
``pitrio serve`` (:mod:`pitrio.cli._main` imports it then). Everything here is private;
importing this package loads nothing else.
"""

from __future__ import annotations

__all__: list[str] = []
