"""An agent whose tools come from an MCP server: here one this same file starts.

``python mcp_agent.py`` starts ``python mcp_agent.py serve`` (a weather server written with
the official ``mcp`` SDK) as a child process, gives its tools to a harness, runs one
prompt with a scripted model, and stops the server when the block ends.
"""

from __future__ import annotations

import sys

import trio

from pitrio import AssistantMessage, Model, TextContent, ToolResultMessage
from pitrio.harness import Harness
from pitrio.mcp import McpToolset, StdioServer, connect
from pitrio.testing import ScriptedModel, ScriptedResponse


def serve() -> None:
    """The MCP server: one tool, on stdin/stdout."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("weather", log_level="ERROR")

    @server.tool(description="Today's weather in a city.")
    def forecast(city: str) -> str:
        return f"{city}: sunny, 24°C"

    server.run()


async def ask() -> None:
    weather = StdioServer(name="weather", command=sys.executable, args=[__file__, "serve"])
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("c1", "mcp__weather__forecast", {"city": "Lisbon"})),
            ScriptedResponse.text("It is sunny in Lisbon."),
        ]
    )
    async with McpToolset([weather]) as toolset:
        (server,) = toolset.servers
        print("tools:", [tool.name for tool in server.tools])
        harness = Harness(
            model=Model(id="m", api="scripted", provider="scripted"),
            stream_fn=model,
            tools=[toolset],
        )
        await harness.prompt("What is the weather in Lisbon?")
    # the server has stopped here; the transcript stays
    for message in harness.messages:
        if isinstance(message, ToolResultMessage | AssistantMessage):
            text = "".join(b.text for b in message.content if isinstance(b, TextContent))
            if text:
                print(f"{message.role}: {text}")


async def call_directly() -> None:
    weather = StdioServer(name="weather", command=sys.executable, args=[__file__, "serve"])
    with trio.fail_after(30):  # the caller owns the timeout
        async with connect(weather) as server:
            result, is_error = await server.call_tool("forecast", {"city": "Porto"})
    (block,) = result.content
    assert isinstance(block, TextContent)
    print("direct:", block.text, "(an error)" if is_error else "(ok)")


def main() -> None:
    trio.run(ask)  # in real time: the server is a real process
    trio.run(call_directly)


if __name__ == "__main__":
    if sys.argv[1:] == ["serve"]:
        serve()
    else:
        main()
