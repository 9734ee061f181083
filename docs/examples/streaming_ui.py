import trio

from pitrio import Agent, Tool, text_result
from pitrio.testing import ScriptedModel, ScriptedResponse


async def search(call_id, params, signal, on_update):
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


class ChatView:
    """A stand-in for a real UI: bubbles that are appended, grown by deltas and replaced."""

    def __init__(self):
        self.bubbles = []

    def render(self, event):
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
            print(f"[{event.tool_name}: {event.partial_result.content[0].text}]")
        elif event.type == "tool_execution_end":
            print(f"[{event.tool_name} done: {event.result.content[0].text}]")


async def main():
    view = ChatView()
    # Listeners are awaited in order, inside the run: a slow listener slows the run. A UI that
    # draws at its own pace reads the events from a channel in its own task instead.
    send, receive = trio.open_memory_channel(100)

    async def forward(event, signal):
        await send.send(event)  # waits when the UI is 100 events behind (backpressure)

    async def ui():
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
