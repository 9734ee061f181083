from collections.abc import Callable
from typing import Any

import trio

from pitrio import AbortSignal, Agent, Tool, ToolResult, text_result
from pitrio.testing import ScriptedModel, ScriptedResponse


async def add(
    call_id: str, params: Any, signal: AbortSignal, on_update: Callable[[ToolResult], None]
) -> ToolResult:
    return text_result(str(params["a"] + params["b"]))


add_tool = Tool(name="add", description="Add two numbers", execute=add, parameters={
    "type": "object",
    "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
    "required": ["a", "b"],
})
model = ScriptedModel([
    ScriptedResponse.tool_calls(("c1", "add", {"a": 2, "b": 3})),
    ScriptedResponse.text("2 + 3 = 5"),
])
agent = Agent(system_prompt="You add numbers.", stream_fn=model, tools=[add_tool])


async def main() -> None:
    agent.subscribe(lambda event, signal: print(event.type))
    await agent.prompt("What is 2 + 3?")
    print(agent.state.messages[-1].text)


if __name__ == "__main__":
    trio.run(main)
