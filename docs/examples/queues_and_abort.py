from collections.abc import Callable
from typing import Any

import trio

from pitrio import (
    AbortSignal,
    Agent,
    AssistantMessage,
    Context,
    TextContent,
    Tool,
    ToolResult,
    ToolResultMessage,
    UserMessage,
    text_result,
)
from pitrio.testing import ScriptedModel, ScriptedResponse

saved: list[str] = []


async def slow_step(
    call_id: str, params: Any, signal: AbortSignal, on_update: Callable[[ToolResult], None]
) -> ToolResult:
    await trio.sleep(2.0)  # cancelled at this checkpoint by an abort
    return text_result("step done")


async def save(
    call_id: str, params: Any, signal: AbortSignal, on_update: Callable[[ToolResult], None]
) -> ToolResult:
    # Some work must not be cut in half: shield it from the run's cancel scope.
    with trio.CancelScope(shield=True):
        await trio.sleep(2.0)
        saved.append(params["name"])
    return text_result(f"saved {params['name']}")


def text_of(message: UserMessage | ToolResultMessage) -> str:
    """The text of a message (its content may also hold images)."""
    if isinstance(message.content, str):
        return message.content
    return "".join(block.text for block in message.content if isinstance(block, TextContent))


def model(context: Context) -> ScriptedResponse:
    """Answers the last message: a stand-in for a model that follows instructions."""
    last = context.messages[-1]
    if isinstance(last, ToolResultMessage):
        return ScriptedResponse.text(f"({last.tool_name}: {text_of(last)})")
    assert isinstance(last, UserMessage)
    said = text_of(last)
    if said == "work":
        return ScriptedResponse.tool_calls(("c1", "slow_step", {}))
    if said == "save":
        return ScriptedResponse.tool_calls(("c2", "save", {"name": "draft"}))
    return ScriptedResponse.text(f"ok: {said}")


agent = Agent(
    stream_fn=ScriptedModel(model),
    tools=[
        Tool(name="slow_step", description="A slow step", execute=slow_step),
        Tool(name="save", description="Save a file", execute=save),
    ],
)


def transcript() -> None:
    for message in agent.state.messages:
        if isinstance(message, UserMessage):
            print("user:", text_of(message))
        elif isinstance(message, AssistantMessage) and message.text:
            print("assistant:", message.text)
        elif isinstance(message, ToolResultMessage):
            print(f"{message.tool_name}:", text_of(message))


async def main() -> None:
    # Steering lands after the running tool, before the model is asked again.
    # A follow-up waits until the agent would otherwise stop.
    async with trio.open_nursery() as nursery:
        await nursery.start(agent.prompt, "work")
        agent.follow_up("and then summarise")
        await trio.sleep(0.5)  # the tool is running now
        agent.steer("use tabs, not spaces")
    transcript()

    # abort() cancels the run's scope: the running tool gets "Operation aborted".
    agent.reset()
    async with trio.open_nursery() as nursery:
        await nursery.start(agent.prompt, "work")
        await trio.sleep(0.5)
        agent.abort()
    print("after abort:", agent.state.messages[-2].content[0].text)

    # A deadline of your own is a cancel scope too: the run settles as aborted, then the
    # scope catches its Cancelled.
    agent.reset()
    with trio.move_on_after(0.5):
        await agent.prompt("work")
    print("after deadline:", agent.state.messages[-1].stop_reason)

    # A shielded tool finishes its work even when the run is aborted, and its result is used.
    agent.reset()
    async with trio.open_nursery() as nursery:
        await nursery.start(agent.prompt, "save")
        await trio.sleep(0.5)
        agent.abort()
    print("shielded:", saved, agent.state.messages[-2].content[0].text)


if __name__ == "__main__":
    trio.run(main)
