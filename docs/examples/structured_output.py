import dataclasses
import json

import trio

from pitrio import Agent, AssistantMessageEventStream, Context, Model, StreamOptions
from pitrio.testing import ScriptedModel, ScriptedResponse


@dataclasses.dataclass
class City:
    """A city and its country."""

    name: str
    country: str
    population_millions: float | None = None


async def main() -> None:
    # A stand-in for a real model: its first answer misses a field, its second is right.
    answers = ScriptedModel(
        [
            ScriptedResponse.text('{"name": "Paris"}'),
            ScriptedResponse.text('{"name": "Paris", "country": "France"}'),
        ]
    )

    def stream_fn(
        model: Model, context: Context, options: StreamOptions
    ) -> AssistantMessageEventStream:
        """Show what the provider is asked for, then answer as the scripted model."""
        if options.response_format is not None:
            print("response_format:", json.dumps(options.response_format)[:72], "...")
        return answers(model, context, options)

    # On openai-completions the run asks for the API's json_schema response format.
    agent = Agent(model=Model(id="gpt-4.1", api="openai-completions"), stream_fn=stream_fn)
    result = await agent.run("The capital of France?", output_type=City)
    print(result.messages[2].content[0].text)  # the errors sent back after the first answer
    print(result.output, result.requests)


if __name__ == "__main__":
    trio.run(main)
