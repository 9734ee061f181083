"""The coding tools: read, write, edit, ls, grep and bash, confined to one directory.

These are the tools of Pi's coding agent, rebuilt on Trio::

    from pitrio.coding import coding_tools

    agent = Agent(tools=coding_tools("/path/to/project"), ...)

Every path a tool is given is resolved (symlinks followed) against the working
directory and refused when it lands outside it. ``bash`` runs *in* the directory but is
not a sandbox.
"""

from __future__ import annotations

from ._tools import (
    DEFAULT_MAX_BYTES as DEFAULT_MAX_BYTES,
    DEFAULT_MAX_LINES as DEFAULT_MAX_LINES,
    CodingToolError as CodingToolError,
    Workspace as Workspace,
    coding_tools as coding_tools,
)

__all__: list[str] = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_LINES",
    "CodingToolError",
    "Workspace",
    "coding_tools",
]
