import trio

from pitrio import Agent, Tool, text_result
from pitrio.testing import ScriptedModel, ScriptedResponse

saved = []


async def slow_step(call_id, params, signal, on_update):
    await trio.sleep(2.0)  # cancelled at this checkpoint by an abort
    return text_result("step done")


async def save(call_id, params, signal, on_update):
    # Some work must not be cut in half: shield it from the run's cancel scope.
    with trio.CancelScope(shield=True):
        await trio.sleep(2.0)
        saved.append(params["name"])
    return text_result(f"saved {params['name']}")


def model(context):
    """Answers the last message: a stand-in for a model that follows instructions."""
    last = context.messages[-1]
    if last.role == "toolResult":
        return ScriptedResponse.text(f"({last.tool_name}: {last.content[0].text})")
    said = last.content if isinstance(last.content, str) else last.content[0].text
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


def transcript():
    for message in agent.state.messages:
        if message.role == "user":
            text = message.content if isinstance(message.content, str) else message.content[0].text
            print("user:", text)
        elif message.role == "assistant" and message.text:
            print("assistant:", message.text)
        elif message.role == "toolResult":
            print(f"{message.tool_name}:", message.content[0].text)


async def main():
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
