from collections.abc import Callable
from typing import Any

import trio

from pitrio import (
    AbortSignal,
    AgentContext,
    LoopConfig,
    Model,
    Tool,
    ToolResult,
    agent_loop,
    text_result,
    user_text,
)
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


async def main() -> None:
    # The loop keeps no state: the context (transcript and tools) and the configuration
    # (model and hooks) are arguments. The Agent builds these same two objects for you.
    context = AgentContext(system_prompt="You add numbers.", tools=[add_tool])
    config = LoopConfig(model=Model(id="scripted", provider="scripted"))
    signal = AbortSignal()  # signal.abort() from another task ends the run as "aborted"

    async with agent_loop([user_text("What is 2 + 3?")], context, config, signal,
                          stream_fn=model) as events:
        async for event in events:
            print(event.type)
    new_messages = await events.result()  # the prompt and everything the run added
    print([message.role for message in new_messages])


if __name__ == "__main__":
    trio.run(main)
