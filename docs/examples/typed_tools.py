import dataclasses
import enum

import trio

from pitrio import Agent, Context, RunContext, ToolResultMessage, UsageLimits, tool
from pitrio.testing import ScriptedModel, ScriptedResponse


class Unit(enum.Enum):
    CELSIUS = "celsius"
    FAHRENHEIT = "fahrenheit"


@dataclasses.dataclass
class Place:
    city: str
    country: str = ""


@dataclasses.dataclass
class Stations:
    """What the tools may use: the run's dependencies."""

    readings: dict[str, float]


@tool
async def temperature(ctx: RunContext[Stations], place: Place, unit: Unit = Unit.CELSIUS) -> str:
    """Read the temperature at a place.

    Args:
        place: where to read it.
        unit: the unit of the answer.
    """
    celsius = ctx.deps.readings.get(place.city)
    if celsius is None:
        raise LookupError(f"No station in {place.city}.")
    value = celsius if unit is Unit.CELSIUS else celsius * 9 / 5 + 32
    return f"{value:.0f} degrees {unit.value} in {place.city}"


@dataclasses.dataclass
class Report:
    city: str
    warm: bool


def model_script(context: Context) -> ScriptedResponse:
    """A stand-in for a real model: it asks for a reading, then reports."""
    last = context.messages[-1]
    if not isinstance(last, ToolResultMessage):
        return ScriptedResponse.tool_calls(
            ("c1", "temperature", {"place": {"city": "Lisbon"}, "unit": "fahrenheit"})
        )
    return ScriptedResponse.tool_calls(("c2", "final_result", {"city": "Lisbon", "warm": True}))


async def main() -> None:
    print(temperature.parameters["properties"]["unit"])
    agent = Agent(stream_fn=ScriptedModel(model_script), tools=[temperature])
    result = await agent.run(
        "Is it warm in Lisbon?",
        deps=Stations(readings={"Lisbon": 24.0}),
        output_type=Report,
        limits=UsageLimits(max_requests=5, max_seconds=60),
    )
    print(result.messages[2].content[0].text)  # the tool's result
    print(result.output, result.requests)

    looping = Agent(stream_fn=ScriptedModel(model_script), tools=[temperature])
    capped = await looping.run("Again?", deps=Stations({}), limits=UsageLimits(max_requests=1))
    print(capped.stop_reason, capped.error_message)


if __name__ == "__main__":
    trio.run(main)
