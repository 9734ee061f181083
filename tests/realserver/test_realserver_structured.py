"""Structured output from a real model: llama.cpp's server running Gemma 3 270M.

``Agent.run(output_type=...)`` on openai-completions sends the output schema as
``response_format`` (``json_schema``); llama.cpp compiles it into a grammar, so even a
270M base model answers with JSON of the schema's shape, which comes back validated
and typed. Each run is one short request (about a second on one thread).
"""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any

import trio

from pitrio import Agent, AssistantMessage, Model, StreamOptions
from pitrio.cli._local_server import MODEL_ALIAS, N_CTX
from pitrio.providers import Models, openai_compatible

from .conftest import LlamaServer


class Mood(enum.Enum):
    HAPPY = "happy"
    SAD = "sad"


@dataclasses.dataclass
class Verdict:
    """How the sentence feels."""

    mood: Mood
    sure: bool


async def test_response_format_json_schema_gives_a_typed_value(llama_server: LlamaServer) -> None:
    """The request carries the schema; the grammar-constrained answer is a Verdict."""
    sent: list[Any] = []

    def on_payload(body: object, model: Model) -> None:
        sent.append(body)

    async with Models(
        get_api_key=lambda provider: llama_server.api_key, builtin=False, env={}
    ) as models:
        agent = Agent(
            model=openai_compatible(
                f"{llama_server.url}/v1", MODEL_ALIAS, provider="llama-cpp", context_window=N_CTX
            ),
            stream_fn=models.stream_fn,
            stream_options=StreamOptions(max_tokens=60, on_payload=on_payload),
        )
        with trio.fail_after(60):
            result = await agent.run("I love sunny days!", output_type=Verdict)
    assert result.error_message is None, result.messages
    assert isinstance(result.output, Verdict)
    assert isinstance(result.output.mood, Mood)
    assert isinstance(result.output.sure, bool)
    (answer,) = [m for m in result.messages if isinstance(m, AssistantMessage)]
    assert answer.stop_reason == "stop"
    # The model's own text is the JSON value (the grammar allowed nothing else).
    assert json.loads(answer.text) == {
        "mood": result.output.mood.value,
        "sure": result.output.sure,
    }
    (body,) = sent
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {
            "name": "final_result",
            "schema": {
                "type": "object",
                "properties": {
                    "mood": {"enum": ["happy", "sad"], "type": "string"},
                    "sure": {"type": "boolean"},
                },
                "required": ["mood", "sure"],
                "additionalProperties": False,
            },
            "strict": True,
            "description": "How the sentence feels.",
        },
    }
    assert result.usage.output > 0
