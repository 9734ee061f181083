from collections.abc import Callable
from typing import Any

import trio

from pitrio import (
    AbortSignal,
    Agent,
    AgentEvent,
    StreamFn,
    TextContent,
    Tool,
    ToolResult,
    ToolResultMessage,
    text_result,
)
from pitrio.testing import ScriptedModel, ScriptedResponse, check_trace, run_virtual


# --- the application under test ----------------------------------------------------------
async def fetch_report(
    call_id: str, params: Any, signal: AbortSignal, on_update: Callable[[ToolResult], None]
) -> ToolResult:
    with trio.move_on_after(30) as scope:  # a real service may hang: give up after 30 s
        await trio.sleep(params.get("takes", 1))
    if scope.cancelled_caught:
        raise TimeoutError("report service did not answer in 30 s")
    return text_result("report: all green")


def make_agent(stream_fn: StreamFn) -> Agent:
    """The application builds its agent from a stream function: a provider's in
    production, a ScriptedModel in tests."""
    return Agent(
        system_prompt="You summarise reports.",
        stream_fn=stream_fn,
        tools=[Tool(name="fetch_report", description="Fetch the report", execute=fetch_report,
                    parameters={"type": "object",
                                "properties": {"takes": {"type": "number"}}})],
    )


# --- its tests ----------------------------------------------------------------------------
async def test_the_model_sees_the_report() -> None:
    model = ScriptedModel([
        ScriptedResponse.tool_calls(("c1", "fetch_report", {})),
        ScriptedResponse.text("All green."),
    ])
    agent = make_agent(model)
    events: list[AgentEvent] = []
    agent.subscribe(lambda event, signal: events.append(event))
    await agent.prompt("How is the build?")

    assert check_trace(events) == []  # the ordering invariants of every run hold
    assert model.calls == 2
    sent = model.requests[1].messages[-1]  # what the model was sent on its second request
    assert isinstance(sent, ToolResultMessage)
    assert sent.content == (TextContent(text="report: all green"),)
    print("test_the_model_sees_the_report passed")


async def test_a_hanging_service_times_out() -> None:
    model = ScriptedModel([
        ScriptedResponse.tool_calls(("c1", "fetch_report", {"takes": 3600})),
        ScriptedResponse.text("The report service is down."),
    ])
    agent = make_agent(model)
    start = trio.current_time()
    await agent.prompt("How is the build?")
    # Virtual time: 30 "seconds" passed, and the test took none of them.
    assert trio.current_time() - start == 30
    result = agent.state.messages[-2]
    assert isinstance(result, ToolResultMessage)
    assert result.is_error
    assert result.content == (TextContent(text="report service did not answer in 30 s"),)
    print("test_a_hanging_service_times_out passed")


async def main() -> None:
    await test_the_model_sees_the_report()
    await test_a_hanging_service_times_out()


if __name__ == "__main__":
    run_virtual(main)  # trio.run on a MockClock: sleeps cost nothing
