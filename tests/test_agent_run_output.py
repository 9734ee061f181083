"""``Agent.run(..., output_type=T)``: the final_result tool, its validation and retries."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

import pytest

from pitrio import Agent, Context, ToolResultMessage, UsageError, UserMessage, tool
from pitrio.testing import ScriptedModel, ScriptedResponse


class Mood(enum.Enum):
    GOOD = "good"
    BAD = "bad"


@dataclasses.dataclass
class Review:
    """A short review."""

    title: str
    stars: int
    mood: Mood = Mood.GOOD


def final(call_id: str, arguments: dict[str, Any]) -> ScriptedResponse:
    return ScriptedResponse.tool_calls((call_id, "final_result", arguments))


async def test_a_valid_final_result_ends_the_run_with_the_typed_value() -> None:
    """The model's final_result call becomes result.output, typed; the run stops there."""
    model = ScriptedModel([final("c1", {"title": "Fine", "stars": "4"})])
    agent = Agent(stream_fn=model)
    result = await agent.run("review it", output_type=Review)
    assert result.output == Review(title="Fine", stars=4, mood=Mood.GOOD)
    assert result.requests == 1
    assert result.error_message is None
    (request,) = model.requests
    (offered,) = request.tools
    assert offered.name == "final_result"
    assert offered.description == (
        "The final response which ends this conversation: A short review."
    )
    assert offered.parameters == {
        "type": "object",
        "properties": {
            "title": {"type": "string"},
            "stars": {"type": "integer"},
            "mood": {"enum": ["good", "bad"], "type": "string", "default": "good"},
        },
        "required": ["title", "stars"],
    }
    assert agent.state.tools == []  # the tool was the run's only


async def test_an_invalid_final_result_is_sent_back_and_retried() -> None:
    """A failing call gets Pi's validation error as its result; the model tries again."""
    model = ScriptedModel(
        [final("c1", {"title": "Fine"}), final("c2", {"title": "Fine", "stars": 5})]
    )
    result = await Agent(stream_fn=model).run("review it", output_type=Review)
    assert result.output == Review(title="Fine", stars=5)
    first = result.messages[2]
    assert isinstance(first, ToolResultMessage)
    assert first.is_error
    assert first.content[0].text.startswith(  # type: ignore[union-attr]  # a text block
        'Validation failed for tool "final_result":\n  - stars: must have required'
    )


async def test_a_scalar_output_is_wrapped_in_a_response_field() -> None:
    """A non-object output type is asked for as {"response": ...}."""
    model = ScriptedModel([final("c1", {"response": [1, "2", 3]})])
    result = await Agent(stream_fn=model).run("numbers", output_type=list[int])
    assert result.output == [1, 2, 3]
    assert model.requests[0].tools[0].parameters == {
        "type": "object",
        "properties": {"response": {"type": "array", "items": {"type": "integer"}}},
        "required": ["response"],
        "additionalProperties": False,
    }


async def test_a_text_answer_gets_a_follow_up_asking_for_the_tool() -> None:
    """A plain text answer is answered with a request to call final_result."""

    def respond(context: Context) -> ScriptedResponse:
        last = context.messages[-1]
        if isinstance(last, UserMessage) and "final_result" in str(last.content):
            return final("c1", {"response": 42})
        return ScriptedResponse.text("It is 42.")

    result = await Agent(stream_fn=ScriptedModel(respond)).run("answer?", output_type=int)
    assert result.output == 42
    assert [m.role for m in result.messages] == [
        "user", "assistant", "user", "assistant", "toolResult",
    ]  # fmt: skip


async def test_retries_run_out_as_data() -> None:
    """After output_retries failures the run is aborted; output is None and it says why."""
    model = ScriptedModel([final(f"c{i}", {"title": 1}) for i in range(5)])
    result = await Agent(stream_fn=model).run("review", output_type=Review, output_retries=2)
    assert result.output is None
    assert result.requests == 3
    assert result.stop_reason == "aborted"
    assert result.error_message == (
        "Output validation failed: the final_result arguments were invalid "
        "(after 3 attempts; output_retries=2)"
    )


async def test_text_only_answers_run_out_too() -> None:
    """A model that never calls the tool ends with output None after the retries."""
    model = ScriptedModel([ScriptedResponse.text("no") for _ in range(3)])
    result = await Agent(stream_fn=model).run("x", output_type=int, output_retries=1)
    assert (result.output, result.requests) == (None, 2)
    assert result.error_message is not None
    assert "answered without calling final_result" in result.error_message


async def test_output_type_mistakes_are_usage_errors() -> None:
    """A clash with a final_result tool, a bad retry count or type fail before the run."""

    @tool
    async def final_result(x: int) -> str:
        return ""

    agent = Agent(stream_fn=ScriptedModel([]), tools=[final_result])
    with pytest.raises(UsageError, match="already has one; rename that tool"):
        await agent.run("x", output_type=int)
    plain = Agent(stream_fn=ScriptedModel([]))
    with pytest.raises(UsageError, match=r"^output_retries must be an int of at least 0"):
        await plain.run("x", output_type=int, output_retries=-1)
    with pytest.raises(UsageError, match="complex has no JSON schema"):
        await plain.run("x", output_type=complex)
    assert plain.state.messages == []
