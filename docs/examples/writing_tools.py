from collections.abc import Callable
from typing import Any

import trio

from pitrio import AbortSignal, Agent, AgentEvent, TextContent, Tool, ToolResult, text_result
from pitrio.testing import ScriptedModel, ScriptedResponse

# 1. A schema: JSON Schema for the arguments. The loop validates every call against it
#    before your function runs; a call that does not fit never reaches your code.
WEATHER_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "City name, e.g. Lisbon"},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city"],
}


async def weather(
    call_id: str, params: Any, signal: AbortSignal, on_update: Callable[[ToolResult], None]
) -> ToolResult:
    days = params.get("days", 1)
    for day in range(1, days + 1):
        await trio.sleep(0.2)  # a slow lookup, one day at a time
        # 2. Progress: each on_update becomes a tool_execution_update event for your UI.
        #    The model never sees these; it sees only the value you return.
        on_update(text_result(f"fetched day {day} of {days}"))
    if params["city"] == "Atlantis":
        # 3. A failure: raise. The run goes on; the model gets the message as an error result.
        raise LookupError("No weather station in Atlantis.")
    return text_result(f"{params['city']}: sunny for {days} day(s)", details={"days": days})


log: list[str] = []


async def append_log(
    call_id: str, params: Any, signal: AbortSignal, on_update: Callable[[ToolResult], None]
) -> ToolResult:
    log.append(params["line"])
    return text_result(f"log has {len(log)} line(s)")


# 4. Sequential tools: a batch containing one runs its calls one after another, in order.
append_tool = Tool(
    name="append_log", description="Append a line to the log", execute=append_log,
    parameters={"type": "object", "properties": {"line": {"type": "string"}},
                "required": ["line"]},
    execution_mode="sequential",
)
weather_tool = Tool(name="weather", description="Weather forecast", execute=weather,
                    parameters=WEATHER_SCHEMA)

model = ScriptedModel([
    # The model gets the arguments wrong: days must be an integer.
    ScriptedResponse.tool_calls(("c1", "weather", {"city": "Lisbon", "days": "three"})),
    # It reads the validation error and tries again.
    ScriptedResponse.tool_calls(("c2", "weather", {"city": "Lisbon", "days": 3})),
    ScriptedResponse.tool_calls(("c3", "weather", {"city": "Atlantis"})),
    ScriptedResponse.tool_calls(("c4", "append_log", {"line": "first"}),
                                ("c5", "append_log", {"line": "second"})),
    ScriptedResponse.text("Lisbon is sunny; Atlantis has no station."),
])
agent = Agent(stream_fn=model, tools=[weather_tool, append_tool])


def text_of(result: ToolResult) -> str:
    """The text of a tool result (its content may also hold images)."""
    return "".join(block.text for block in result.content if isinstance(block, TextContent))


def show(event: AgentEvent, signal: AbortSignal) -> None:
    if event.type == "tool_execution_update":
        print("  progress:", text_of(event.partial_result))
    elif event.type == "tool_execution_end":
        status = "error" if event.is_error else "ok"
        print(f"{event.tool_name} {status}: {text_of(event.result)}")


async def main() -> None:
    agent.subscribe(show)
    await agent.prompt("Weather in Lisbon for three days, and in Atlantis?")
    print(log)
    print(agent.state.messages[-1].text)


if __name__ == "__main__":
    trio.run(main)
