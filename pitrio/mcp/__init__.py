"""MCP (the Model Context Protocol): servers' tools as pitrio tools.

``async with connect(StdioServer(name=..., command=...)) as server:`` starts one
server (or reaches one over streamable HTTP, :class:`HttpServer`) and gives its tools
as :class:`pitrio.Tool` values that go through the agent's usual pipeline (argument
validation against the tool's ``inputSchema``, hooks, abort); :class:`McpToolset`
does the same for several servers as a harness tool factory. Built on the official
``mcp`` SDK (``pip install 'pitrio[mcp]'``), which runs on Trio through anyio.
``import pitrio`` does not load this package.
"""

from __future__ import annotations

from ._client import (
    TOOL_PREFIX as TOOL_PREFIX,
    McpServer as McpServer,
    connect as connect,
    convert_result as convert_result,
    tool_name as tool_name,
)
from ._config import (
    HttpServer as HttpServer,
    McpConfigError as McpConfigError,
    McpError as McpError,
    McpServerConfig as McpServerConfig,
    StdioServer as StdioServer,
    parse_mcp_servers as parse_mcp_servers,
    read_mcp_config as read_mcp_config,
)
from ._toolset import McpToolset as McpToolset

__all__ = [
    "TOOL_PREFIX",
    "HttpServer",
    "McpConfigError",
    "McpError",
    "McpServer",
    "McpServerConfig",
    "McpToolset",
    "StdioServer",
    "connect",
    "convert_result",
    "parse_mcp_servers",
    "read_mcp_config",
    "tool_name",
]
