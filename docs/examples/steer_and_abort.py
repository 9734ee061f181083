from collections.abc import Callable
from typing import Any

import trio

from pitrio import (
    AbortSignal,
    Agent,
    Context,
    TextContent,
    Tool,
    ToolResult,
    UserMessage,
    text_result,
)
from pitrio.testing import ScriptedModel, ScriptedResponse


async def refactor(
    call_id: str, params: Any, signal: AbortSignal, on_update: Callable[[ToolResult], None]
) -> ToolResult:
    await trio.sleep(1.0)  # a slow tool: the run stays busy for a second
    return text_result("parser refactored")


def model(context: Context) -> ScriptedResponse:
    """A stand-in for a real model: it answers the last message it was sent."""
    last = context.messages[-1]
    if not isinstance(last, UserMessage):  # the tool's result
        return ScriptedResponse.text("Done.")
    said = "".join(block.text for block in last.content if isinstance(block, TextContent))
    if said.startswith("refactor"):
        return ScriptedResponse.tool_calls(("c1", "refactor", {}))
    if said.startswith("and keep"):
        return ScriptedResponse.text("Done, and the public API is unchanged.")
    return ScriptedResponse.text("Rewriting everything... " * 50, chunk_size=8, delay=60.0)


agent = Agent(
    stream_fn=ScriptedModel(model),
    tools=[Tool(name="refactor", description="Refactor the parser", execute=refactor,
                parameters={"type": "object", "properties": {}})],
)


async def main() -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(agent.prompt, "refactor the parser")  # returns once the run is active
        agent.steer("and keep the public API unchanged")  # lands after the running tool
    print(agent.state.messages[-1].text)  # Done, and the public API is unchanged.

    async with trio.open_nursery() as nursery:
        await nursery.start(agent.prompt, "now rewrite everything")
        await trio.sleep(0.5)
        agent.abort()  # the run settles: agent_end is still emitted
    await agent.wait_for_idle()
    print(agent.state.messages[-1].stop_reason)  # aborted


if __name__ == "__main__":
    trio.run(main)
