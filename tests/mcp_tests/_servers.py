"""MCP servers for the tests, written with the official SDK (``MCPServer``, once FastMCP).

Run as ``python _servers.py KIND [--http PORT]``: ``tools`` (a few tools, a prompt, a tool
list that changes), ``crash`` (exits in the middle of a call), ``hang`` (a call that never
answers and ignores cancellation), ``errors`` (tools that fail in each way a server can).
"""

from __future__ import annotations

import base64
import os
import sys

import anyio
import anyio.abc
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import (
    EmbeddedResource,
    ImageContent,
    TextContent,
    TextResourceContents,
)

# A 1x1 PNG
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)

CANCELLED: list[str] = []
BACKGROUND: list[anyio.abc.TaskGroup] = []  # the stdio server's task group, for grow_soon


def tools_server() -> MCPServer:
    server = MCPServer(
        "pitrio-test-tools", instructions="Tools for pitrio's tests.", log_level="CRITICAL"
    )

    @server.tool(description="Add two integers.")
    def add(a: int, b: int) -> int:
        return a + b

    @server.tool(description="Echo the text back.")
    def echo(text: str) -> str:
        return f"echo: {text}"

    @server.tool(description="Sleep for a long time (to be cancelled).")
    async def slow(ctx: Context, seconds: float = 3600) -> str:
        await ctx.report_progress(0, 1, "sleeping")
        try:
            await anyio.sleep(seconds)
        except anyio.get_cancelled_exc_class():
            CANCELLED.append("slow")
            raise
        return "slept"

    @server.tool(description="How many calls the client cancelled.")
    def cancelled() -> str:
        return ",".join(CANCELLED) or "none"

    @server.tool(description="A one-pixel image.")
    def image() -> list[ImageContent | TextContent]:
        return [
            TextContent(type="text", text="a pixel"),
            ImageContent(type="image", data=base64.b64encode(PNG).decode(), mime_type="image/png"),
        ]

    @server.tool(description="A document as an embedded resource.")
    def resource() -> EmbeddedResource:
        return EmbeddedResource(
            type="resource",
            resource=TextResourceContents(
                uri="file:///notes.txt", mime_type="text/plain", text="the notes"
            ),
        )

    @server.tool(description="Fails.")
    def boom() -> str:
        raise ValueError("boom went the tool")

    @server.tool(description="A tool with structured output.")
    def point(x: int, y: int) -> dict[str, int]:
        return {"x": x, "y": y}

    @server.tool(description="Adds a tool named 'extra' and tells the client.")
    async def grow(ctx: Context) -> str:
        def extra() -> str:
            return "extra!"

        server.add_tool(extra, name="extra", description="A tool added at run time.")
        await ctx.session.send_tool_list_changed()
        return "grown"

    @server.tool(description="Adds a tool named 'later' a moment after it returns.")
    async def grow_soon(ctx: Context) -> str:
        session = ctx.session

        async def later() -> None:
            await anyio.sleep(0.2)

            def late() -> str:
                return "late!"

            server.add_tool(late, name="later", description="Added after a call ended.")
            await session.send_tool_list_changed()

        BACKGROUND[0].start_soon(later)
        return "soon"

    @server.resource(
        "notes://readme",
        name="readme",
        description="The project's notes.",
        mime_type="text/markdown",
    )
    def readme() -> str:
        return "# Notes\nRemember the milk."

    @server.resource("pics://dot", name="dot", mime_type="image/png")
    def dot() -> bytes:
        return PNG

    @server.prompt(description="Review a file.")
    def review(path: str, focus: str = "bugs") -> str:
        return f"Review {path}, looking for {focus}."

    return server


def crash_server() -> MCPServer:
    server = MCPServer("pitrio-test-crash", log_level="CRITICAL")

    @server.tool(description="Exits the server in the middle of the call.")
    def die() -> str:
        sys.stdout.flush()
        os._exit(3)

    return server


def hang_server() -> MCPServer:
    server = MCPServer("pitrio-test-hang", log_level="CRITICAL")

    @server.tool(description="Never answers and cannot be cancelled.")
    async def hang() -> str:
        with anyio.CancelScope(shield=True):
            await anyio.sleep(3600)
        return "never"

    return server


def errors_server() -> MCPServer:
    server = MCPServer("pitrio-test-errors", log_level="CRITICAL")

    @server.tool(description="Returns an error result.")
    def refuse(reason: str) -> str:
        raise ToolError(f"refused: {reason}")

    return server


SERVERS = {
    "tools": tools_server,
    "crash": crash_server,
    "hang": hang_server,
    "errors": errors_server,
}


if __name__ == "__main__":
    kind = sys.argv[1]
    server = SERVERS[kind]()
    if "--http" in sys.argv:
        port = int(sys.argv[sys.argv.index("--http") + 1])
        server.run("streamable-http", host="127.0.0.1", port=port)
    else:

        async def run_stdio() -> None:
            async with anyio.create_task_group() as group:
                BACKGROUND.append(group)
                await server.run_stdio_async()
                group.cancel_scope.cancel()

        anyio.run(run_stdio)
