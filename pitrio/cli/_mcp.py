"""MCP in the command line: the servers of ``mcp.json`` as tools, ``/mcp``, and
``python -m pitrio mcp`` (pitrio's agent as an MCP server over stdio).

Configuration is Pi's MCP adapter's (and Claude Desktop's, Cursor's): a file
``{"mcpServers": {NAME: {"command": ..., "args": [...], "env": {...}} | {"url": ...,
"headers": {...}}}}``, read from ``mcp.json`` in Pi's agent directory
(``~/.pi/agent/mcp.json``) and then, in a trusted project, ``.pi/mcp.json`` (its
servers replace the global ones of the same name). Nothing of MCP is imported when
neither file exists.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TextIO

import trio

from pitrio import AssistantMessage, TextContent

from ._errors import CliUsageError
from ._resources import CONFIG_DIR, CodingResources, agent_dir
from ._sanitize import one_line

if TYPE_CHECKING:
    from pitrio.mcp import McpToolset

    from ._app import App

__all__ = ["describe_mcp", "mcp_config_paths", "open_mcp", "serve_mcp"]

MCP_FILE = "mcp.json"


def mcp_config_paths(cwd: str, env: Mapping[str, str], *, trusted: bool) -> list[str]:
    """Where the CLI reads MCP servers from, in order (later files win)."""
    paths = [os.path.join(agent_dir(env), MCP_FILE)]
    if trusted:
        paths.append(os.path.join(cwd, CONFIG_DIR, MCP_FILE))
    return paths


async def open_mcp(
    stack: contextlib.AsyncExitStack,
    cwd: str,
    env: Mapping[str, str],
    resources: CodingResources,
    err: TextIO,
    *,
    quiet: bool = False,
) -> McpToolset | None:
    """Start the configured MCP servers for the rest of ``stack`` (``None`` when none is
    configured); a server that fails to start is a warning on ``err``. The servers'
    stderr is pitrio's, or (``quiet``) thrown away.

    Raises:
        CliUsageError: a configuration file cannot be used, or the ``mcp`` package is
            missing.
    """
    paths = mcp_config_paths(cwd, env, trusted=resources.trusted)
    present = await trio.to_thread.run_sync(lambda: [p for p in paths if os.path.exists(p)])
    if not present:
        return None
    try:
        from pitrio.mcp import McpConfigError, McpToolset, read_mcp_config
    except ImportError:
        msg = (
            f"MCP servers are configured in {present[0]}, but the mcp package is not "
            "installed: pip install 'pitrio[mcp]' (or remove the file)"
        )
        raise CliUsageError(msg) from None
    try:
        servers = await trio.to_thread.run_sync(read_mcp_config, present)
    except McpConfigError as exc:
        raise CliUsageError(str(exc)) from None
    if not servers:
        return None
    errlog: TextIO = sys.stderr
    if quiet:
        errlog = stack.enter_context(await trio.to_thread.run_sync(_devnull))
    toolset = await stack.enter_async_context(McpToolset(servers, errlog=errlog))
    for name, why in toolset.failures.items():
        print(f"pitrio: warning: MCP server {one_line(name)}: {one_line(why)}", file=err)
    return toolset


def _devnull() -> TextIO:
    return open(os.devnull, "w")  # the caller closes it (on its exit stack)


def describe_mcp(toolset: McpToolset | None) -> str:
    """What ``/mcp`` shows: each server, how it is reached, its tools and resources."""
    if toolset is None:
        return (
            "no MCP servers: add them to ~/.pi/agent/mcp.json or the project's .pi/mcp.json "
            '({"mcpServers": {"name": {"command": "...", "args": []}}})'
        )
    from pitrio.mcp import StdioServer

    lines = ["MCP servers:"]
    for server in toolset.servers:
        config = server.config
        where = (
            " ".join([config.command, *config.args])
            if isinstance(config, StdioServer)
            else config.url
        )
        state = "closed (it exited)" if server.closed else f"{len(server.tools)} tools"
        lines.append(f"  {one_line(server.name)}  {one_line(where)}  ({state})")
        if not server.closed:
            for tool, listed in zip(server.tools, server.mcp_tools, strict=True):
                first = (listed.description or "").strip().split("\n")[0][:80]
                lines.append(f"    {one_line(tool.name)}  {one_line(first)}")
            for resource in server.resources:
                about = (resource.description or resource.name or "").strip().split("\n")[0]
                lines.append(f"    resource {one_line(str(resource.uri))}  {one_line(about[:80])}")
    for name, why in toolset.failures.items():
        lines.append(f"  {one_line(name)}  failed: {one_line(why)}")
    return "\n".join(lines)


# -- python -m pitrio mcp -------------------------------------------------------------


def _answer(messages: Sequence[Any]) -> AssistantMessage | None:
    for message in reversed(messages):
        if isinstance(message, AssistantMessage):
            return message
    return None


async def serve_mcp(app: App) -> int:
    """Serve ``app``'s agent over MCP on stdin/stdout until stdin closes.

    One tool, ``prompt``: it runs one prompt in the conversation (one at a time; a
    cancelled request aborts the run) and answers with the assistant's text, or an
    error result with the error. Tools that need consent are refused unless ``--yes``
    (or a policy file) allows them, as in ``-p`` mode.
    """
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    app.consent.mode_hint = "python -m pitrio mcp"
    lock = trio.Lock()
    server = MCPServer(
        "pitrio",
        instructions=(
            "A coding agent working in "
            f"{app.cwd}: give it a task with the prompt tool; it keeps the conversation."
        ),
        log_level="ERROR",
    )

    @server.tool(
        name="prompt",
        description=(
            "Send one prompt to the pitrio coding agent and get its answer. The agent can "
            "read files and, when allowed, run commands and edit files in its working "
            "directory; the conversation continues across calls."
        ),
    )
    async def prompt(text: str) -> str:
        async with lock:
            harness = app.harness
            before = len(harness.messages)
            try:
                await harness.prompt(app.expand(text))
            except trio.Cancelled:
                harness.abort()
                raise
            answer = _answer(harness.messages[before:])
        if answer is None:
            msg = "the agent gave no answer"
            raise ToolError(msg)
        if answer.stop_reason in ("error", "aborted"):
            msg = f"the run ended with {answer.stop_reason}: {answer.error_message or ''}"
            raise ToolError(msg.rstrip(": "))
        return "".join(b.text for b in answer.content if isinstance(b, TextContent))

    del prompt  # registered on the server
    await server.run_stdio_async()
    return 0
