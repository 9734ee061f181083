import trio

from pitrio import Agent, tool
from pitrio.testing import ScriptedModel, ScriptedResponse


@tool
async def add(a: float, b: float) -> str:
    """Add two numbers."""
    return str(a + b)


model = ScriptedModel([
    ScriptedResponse.tool_calls(("c1", "add", {"a": 2, "b": 3})),
    ScriptedResponse.text("2 + 3 = 5"),
])
agent = Agent(system_prompt="You add numbers.", stream_fn=model, tools=[add])


async def main() -> None:
    agent.subscribe(lambda event, signal: print(event.type))
    result = await agent.run("What is 2 + 3?")
    print(result.output)


if __name__ == "__main__":
    trio.run(main)
