"""The coding tools: read, bash, edit, write, grep, find and ls, confined to one directory.

These are the tools of Pi's coding agent 0.85.0, rebuilt on Trio::

    from pitrio.coding import DEFAULT_TOOL_NAMES, coding_tools

    agent = Agent(tools=coding_tools("/path/to/project", DEFAULT_TOOL_NAMES), ...)

Every path a tool is given is resolved (symlinks followed) against the working
directory and refused when it lands outside it. ``bash`` runs *in* the directory but is
not a sandbox.
"""

from __future__ import annotations

from ._errors import CodingToolError as CodingToolError
from ._tools import (
    DEFAULT_MAX_BYTES as DEFAULT_MAX_BYTES,
    DEFAULT_MAX_LINES as DEFAULT_MAX_LINES,
    DEFAULT_TOOL_NAMES as DEFAULT_TOOL_NAMES,
    TOOL_NAMES as TOOL_NAMES,
    Workspace as Workspace,
    coding_tools as coding_tools,
)

__all__: list[str] = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_LINES",
    "DEFAULT_TOOL_NAMES",
    "TOOL_NAMES",
    "CodingToolError",
    "Workspace",
    "coding_tools",
]
