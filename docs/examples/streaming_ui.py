from collections.abc import Callable
from typing import Any

import trio

from pitrio import AbortSignal, Agent, AgentEvent, TextContent, Tool, ToolResult, text_result
from pitrio.testing import ScriptedModel, ScriptedResponse


async def search(
    call_id: str, params: Any, signal: AbortSignal, on_update: Callable[[ToolResult], None]
) -> ToolResult:
    on_update(text_result("searching..."))
    await trio.sleep(0.5)
    return text_result("3 results")


model = ScriptedModel([
    ScriptedResponse.tool_calls(("c1", "search", {"q": "trio"})),
    ScriptedResponse.text("Trio is a library for async concurrency.", chunk_size=6),
])
agent = Agent(
    stream_fn=model,
    tools=[Tool(name="search", description="Search the docs", execute=search,
                parameters={"type": "object", "properties": {"q": {"type": "string"}}})],
)


def text_of(result: ToolResult) -> str:
    """The text of a tool result (its content may also hold images)."""
    return "".join(block.text for block in result.content if isinstance(block, TextContent))


class ChatView:
    """A stand-in for a real UI: bubbles that are appended, grown by deltas and replaced."""

    def __init__(self) -> None:
        self.bubbles: list[str] = []

    def render(self, event: AgentEvent) -> None:
        if event.type == "message_start" and event.message.role == "assistant":
            self.bubbles.append("")  # a new, still-working assistant bubble
        elif event.type == "message_update":
            update = event.assistant_message_event
            if update.type == "text_delta":
                self.bubbles[-1] += update.delta
                print("delta:", repr(update.delta))
        elif event.type == "message_end" and event.message.role == "assistant":
            self.bubbles[-1] = event.message.text  # the final text replaces the streamed one
        elif event.type == "tool_execution_start":
            print(f"[{event.tool_name} running]")
        elif event.type == "tool_execution_update":
            print(f"[{event.tool_name}: {text_of(event.partial_result)}]")
        elif event.type == "tool_execution_end":
            print(f"[{event.tool_name} done: {text_of(event.result)}]")


async def main() -> None:
    view = ChatView()
    # Listeners are awaited in order, inside the run: a slow listener slows the run. A UI that
    # draws at its own pace reads the events from a channel in its own task instead.
    send, receive = trio.open_memory_channel[AgentEvent](100)

    async def forward(event: AgentEvent, signal: AbortSignal) -> None:
        await send.send(event)  # waits when the UI is 100 events behind (backpressure)

    async def ui() -> None:
        async with receive:
            async for event in receive:
                view.render(event)

    agent.subscribe(forward)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ui)
        await agent.prompt("What is Trio?")
        await send.aclose()  # the UI task ends after the last event
    print(view.bubbles[-1])


if __name__ == "__main__":
    trio.run(main)
