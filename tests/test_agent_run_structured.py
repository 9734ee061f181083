"""Native structured output of ``Agent.run(output_type=...)`` on the three wire APIs.

Each test runs an Agent over the real provider code against a scripted HTTP server on
127.0.0.1 (pitrio.testing's provider server): the request must carry the schema the
API's way (``response_format``, ``text.format``, a forced strict tool), the answer
comes back typed, and a failing answer is sent back with the validation errors.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, TypedDict

import attrs
import pytest
import trio

from pitrio import (
    Agent,
    Context,
    Model,
    StreamOptions,
    TextContent,
    ToolResultMessage,
    UsageError,
    UserMessage,
    tool,
)
from pitrio.providers import Models, openai_compatible
from pitrio.providers._transform import resolve_response_format
from pitrio.testing import ScriptedModel, ScriptedResponse
from pitrio.testing._provider_server import ScriptedServer


class Mood(enum.Enum):
    GOOD = "good"
    BAD = "bad"


@dataclasses.dataclass
class Review:
    """A short review."""

    title: str
    stars: int
    mood: Mood = Mood.GOOD


@attrs.frozen
class Point:
    x: float
    y: float


class Person(TypedDict):
    name: str
    age: int


REVIEW_SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "stars": {"type": "integer"},
        "mood": {"enum": ["good", "bad"], "type": "string", "default": "good"},
    },
    "required": ["title", "stars"],
}
# The strict subset: every property required, the optional one nullable.
STRICT_REVIEW_SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "stars": {"type": "integer"},
        "mood": {"anyOf": [{"enum": ["good", "bad"], "type": "string", "default": "good"},
                           {"type": "null"}]},
    },
    "required": ["title", "stars", "mood"],
    "additionalProperties": False,
}  # fmt: skip


@attrs.define
class Served:
    url: str
    records: list[dict[str, Any]]
    problems: list[str]

    def bodies(self) -> list[dict[str, Any]]:
        return [r["body"] for r in self.records]


async def _serve(nursery: trio.Nursery, responses: Sequence[Mapping[str, Any]]) -> Served:
    records: list[dict[str, Any]] = []
    problems: list[str] = []
    server = ScriptedServer(responses, records, problems, lambda n: None)
    listeners = await nursery.start(
        functools.partial(trio.serve_tcp, server.handle, 0, host="127.0.0.1")
    )
    port = listeners[0].socket.getsockname()[1]
    return Served(f"http://127.0.0.1:{port}", records, problems)


@pytest.fixture
async def models() -> AsyncIterator[Models]:
    async with Models(get_api_key=lambda provider: "sk-test", builtin=False, env={}) as m:
        yield m


# -- scripted answers, one per API ------------------------------------------------------


def chat_text(text: str) -> dict[str, Any]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return {"data": {"id": "c1", "model": "m", "choices": [choice]}}

    first = chunk({"role": "assistant", "content": text})
    return {"body": [first, chunk({}, "stop"), "data: [DONE]\n\n"]}


def responses_text(text: str) -> dict[str, Any]:
    item = {"id": "msg_1", "type": "message", "role": "assistant", "content": []}
    done = {**item, "status": "completed", "content": [{"type": "output_text", "text": text}]}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}},
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {"type": "response.output_text.delta", "output_index": 0, "delta": text},
        {"type": "response.output_item.done", "output_index": 0, "item": done},
        {"type": "response.completed",
         "response": {"id": "resp_1", "status": "completed", "output": []}},
    ]  # fmt: skip
    return {"body": [{"event": e["type"], "data": e} for e in events]}


def anthropic_tool_use(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
            "content": [], "stop_reason": None,
            "usage": {"input_tokens": 10, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0,
         "content_block": {"type": "tool_use", "id": call_id, "name": name, "input": {}}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "input_json_delta", "partial_json": json.dumps(arguments)}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"},
         "usage": {"output_tokens": 5}},
        {"type": "message_stop"},
    ]  # fmt: skip
    return {"body": [{"event": e["type"], "data": e} for e in events]}


def chat_model(served: Served, **compat: Any) -> Model:
    model = openai_compatible(f"{served.url}/v1", "m", provider="vllm")
    return attrs.evolve(model, compat={**(model.compat or {}), **compat})


def responses_model(served: Served) -> Model:
    return Model(id="gpt-x", api="openai-responses", provider="openai",
                 base_url=f"{served.url}/v1", compat={"supportsStrictMode": True})  # fmt: skip


def anthropic_model(served: Served, **fields: Any) -> Model:
    return Model(id="claude-x", api="anthropic-messages", provider="anthropic-test",
                 base_url=served.url, compat={"supportsStrictTools": True}, **fields)  # fmt: skip


# -- openai-completions: response_format ------------------------------------------------


async def test_completions_sends_a_strict_response_format_and_returns_the_dataclass(
    nursery: trio.Nursery, models: Models
) -> None:
    """The request carries response_format json_schema (strict); the JSON answer, with a
    null for the optional field, comes back as the dataclass with its default."""
    served = await _serve(nursery, [chat_text('{"title": "Fine", "stars": 4, "mood": null}')])
    agent = Agent(model=chat_model(served), stream_fn=models.stream_fn)
    with trio.fail_after(10):
        result = await agent.run("review it", output_type=Review)
    assert result.output == Review(title="Fine", stars=4, mood=Mood.GOOD)
    assert (result.requests, result.error_message, served.problems) == (1, None, [])
    (body,) = served.bodies()
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {
            "name": "final_result",
            "schema": STRICT_REVIEW_SCHEMA,
            "strict": True,
            "description": "A short review.",
        },
    }
    assert "tools" not in body
    assert "tool_choice" not in body


async def test_completions_sends_an_invalid_answer_back_with_the_errors(
    nursery: trio.Nursery, models: Models
) -> None:
    """An answer missing a field is answered with Pi's validation error; the second
    answer is the output."""
    served = await _serve(
        nursery, [chat_text('{"title": "Fine"}'), chat_text('{"title": "Fine", "stars": 2}')]
    )
    agent = Agent(model=chat_model(served), stream_fn=models.stream_fn)
    with trio.fail_after(10):
        result = await agent.run("review it", output_type=Review)
    assert result.output == Review(title="Fine", stars=2)
    assert result.requests == 2
    expected = (
        "The answer does not match the output schema:\n"
        "  - stars: must have required properties stars\n\n"
        "Fix the errors and answer again with only the JSON value."
    )
    retry = result.messages[2]
    assert isinstance(retry, UserMessage)
    assert retry.content == (TextContent(text=expected),)
    second = served.bodies()[1]
    assert second["messages"][-1] == {
        "role": "user",
        "content": [{"type": "text", "text": expected}],
    }
    assert second["response_format"] == served.bodies()[0]["response_format"]


@pytest.mark.parametrize(
    ("output_type", "answer", "expected", "schema", "strict"),
    [
        (Point, '{"x": 1, "y": 2.5}', Point(1.0, 2.5),
         {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
          "required": ["x", "y"], "additionalProperties": False}, True),
        (Person, '{"name": "Ada", "age": "36"}', {"name": "Ada", "age": 36},
         {"type": "object", "properties": {"name": {"type": "string"},
                                           "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}, True),
        (int, '{"response": 42}', 42,
         {"type": "object", "properties": {"response": {"type": "integer"}},
          "required": ["response"], "additionalProperties": False}, True),
        (int | str, '{"response": "many"}', "many",
         {"type": "object",
          "properties": {"response": {"anyOf": [{"type": "integer"}, {"type": "string"}]}},
          "required": ["response"], "additionalProperties": False}, True),
        # An object in a union has no strict form: sent as it is, strict false.
        (Point | None, '```json\n{"response": {"x": 0, "y": 0}}\n```', Point(0.0, 0.0),
         None, False),
    ],
)  # fmt: skip
async def test_completions_output_types(
    nursery: trio.Nursery,
    models: Models,
    output_type: Any,
    answer: str,
    expected: object,
    schema: dict[str, Any] | None,
    strict: bool,
) -> None:
    """attrs classes, TypedDicts, scalars and unions: the schema sent, the value back."""
    served = await _serve(nursery, [chat_text(answer)])
    agent = Agent(model=chat_model(served), stream_fn=models.stream_fn)
    with trio.fail_after(10):
        result = await agent.run("go", output_type=output_type)
    assert result.output == expected
    assert type(result.output) is type(expected)
    sent = served.bodies()[0]["response_format"]["json_schema"]
    assert sent["strict"] is strict
    if schema is not None:
        assert sent["schema"] == schema


async def test_a_model_without_json_schema_output_gets_the_final_result_tool(
    nursery: trio.Nursery, models: Models
) -> None:
    """compat supportsJsonSchemaOutput=False: no response_format, the strict tool instead."""
    served = await _serve(nursery, [chat_text("no tool"), chat_text('{"response": 1}')])
    agent = Agent(
        model=chat_model(served, supportsJsonSchemaOutput=False), stream_fn=models.stream_fn
    )
    with trio.fail_after(10):
        result = await agent.run("go", output_type=int, output_retries=1)
    first, second = served.bodies()
    assert "response_format" not in first
    assert [t["function"]["name"] for t in first["tools"]] == ["final_result"]
    assert first["tools"][0]["function"]["strict"] is True
    assert "final_result" in second["messages"][-1]["content"][0]["text"]  # asked for it
    assert result.output is None  # text answers only: the retries ran out
    assert result.error_message is not None
    assert "answered without calling final_result" in result.error_message


async def test_native_retries_run_out_as_data(nursery: trio.Nursery, models: Models) -> None:
    """Answers that are never valid JSON end the run with output None and the reason."""
    served = await _serve(nursery, [chat_text("not json"), chat_text("still not")])
    agent = Agent(model=chat_model(served), stream_fn=models.stream_fn)
    with trio.fail_after(10):
        result = await agent.run("go", output_type=Review, output_retries=1)
    assert (result.output, result.requests) == (None, 2)
    assert result.error_message == (
        "Output validation failed: the answer did not match the output schema "
        "(after 2 attempts; output_retries=1)"
    )
    retry = result.messages[2]
    assert isinstance(retry, UserMessage)
    assert isinstance(retry.content[0], TextContent)
    assert retry.content[0].text.startswith("The answer is not valid JSON (Expecting value")


# -- openai-responses: text.format ------------------------------------------------------


async def test_responses_sends_text_format_and_returns_the_attrs_value(
    nursery: trio.Nursery, models: Models
) -> None:
    """The Responses request carries text.format json_schema; the answer is typed."""
    served = await _serve(
        nursery, [responses_text('{"x": "oops"}'), responses_text('{"x": 3, "y": 4}')]
    )
    agent = Agent(model=responses_model(served), stream_fn=models.stream_fn)
    with trio.fail_after(10):
        result = await agent.run("where?", output_type=Point)
    assert result.output == Point(3.0, 4.0)
    first, second = served.bodies()
    assert first["text"] == {
        "format": {
            "type": "json_schema",
            "name": "final_result",
            "schema": {
                "type": "object",
                "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                "required": ["x", "y"],
                "additionalProperties": False,
            },
            "strict": True,
        }
    }
    assert "tools" not in first
    retry = second["input"][-1]
    assert retry["role"] == "user"
    assert "  - x: must be number" in json.dumps(retry)


# -- anthropic-messages: a forced strict tool -------------------------------------------


async def test_anthropic_forces_the_strict_final_result_tool(
    nursery: trio.Nursery, models: Models
) -> None:
    """tool_choice names final_result, which is strict; an invalid call gets the error
    as its tool result and the second call is the TypedDict output."""
    served = await _serve(
        nursery,
        [
            anthropic_tool_use("toolu_1", "final_result", {"name": "Ada"}),
            anthropic_tool_use("toolu_2", "final_result", {"name": "Ada", "age": 36}),
        ],
    )
    agent = Agent(model=anthropic_model(served), stream_fn=models.stream_fn)
    with trio.fail_after(10):
        result = await agent.run("who?", output_type=Person)
    assert result.output == {"name": "Ada", "age": 36}
    assert served.problems == []
    first, second = served.bodies()
    assert first["tool_choice"] == {"type": "tool", "name": "final_result"}
    (offered,) = first["tools"]
    assert offered["name"] == "final_result"
    assert offered["strict"] is True
    assert offered["input_schema"]["required"] == ["name", "age"]
    assert "response_format" not in first
    error = result.messages[2]
    assert isinstance(error, ToolResultMessage)
    assert error.is_error
    result_block = second["messages"][-1]["content"][0]
    assert result_block["type"] == "tool_result"
    assert result_block["is_error"] is True
    assert result_block["content"].startswith('Validation failed for tool "final_result"')


async def test_anthropic_with_other_tools_forces_any_tool(
    nursery: trio.Nursery, models: Models
) -> None:
    """With the agent's own tools too, tool_choice is "any": the model may use them."""

    @tool
    async def lookup(name: str) -> str:
        """Look a person up."""
        return f"{name} is 36"

    served = await _serve(
        nursery,
        [
            anthropic_tool_use("toolu_1", "lookup", {"name": "Ada"}),
            anthropic_tool_use("toolu_2", "final_result", {"name": "Ada", "age": 36}),
        ],
    )
    agent = Agent(model=anthropic_model(served), stream_fn=models.stream_fn, tools=[lookup])
    with trio.fail_after(10):
        result = await agent.run("who?", output_type=Person)
    assert result.output == {"name": "Ada", "age": 36}
    bodies = served.bodies()
    assert [b["tool_choice"] for b in bodies] == [{"type": "any"}, {"type": "any"}]
    assert [t["name"] for t in bodies[0]["tools"]] == ["lookup", "final_result"]


# -- choosing the way -------------------------------------------------------------------


def _options_of(model: Model, **run: Any) -> tuple[StreamOptions, list[str]]:
    """The stream options and tool names of a run's first request, with no server."""
    seen: list[tuple[StreamOptions, list[str]]] = []

    def stream_fn(m: Model, context: Any, options: StreamOptions) -> Any:
        seen.append((options, [t.name for t in context.tools]))
        return ScriptedModel([ScriptedResponse.text('{"response": 1}')])(m, context, options)

    agent = Agent(model=model, stream_fn=stream_fn, thinking_level=run.pop("thinking", "off"))
    trio.run(lambda: agent.run("go", output_type=int, output_retries=0, **run))
    return seen[0]


def test_how_each_api_is_asked() -> None:
    """auto: OpenAI APIs native, Anthropic forced (not while thinking), others the tool."""
    chat = Model(id="m", api="openai-completions")
    options, tools = _options_of(chat)
    assert (options.response_format is not None, options.tool_choice, tools) == (True, None, [])
    options, tools = _options_of(chat, output_mode="tool")
    assert (options.response_format, options.tool_choice, tools) == (None, None, ["final_result"])
    claude = Model(id="c", api="anthropic-messages", reasoning=True)
    options, tools = _options_of(claude)
    assert (options.response_format, tools) == (None, ["final_result"])
    assert options.tool_choice == {"type": "tool", "name": "final_result"}
    options, tools = _options_of(claude, thinking="high")
    assert (options.tool_choice, tools) == (None, ["final_result"])
    gemini = Model(id="g", api="google-generative-ai")
    options, tools = _options_of(gemini)
    assert (options.response_format, options.tool_choice, tools) == (None, None, ["final_result"])


async def test_output_mode_mistakes_are_usage_errors() -> None:
    """native on an API without it, or an unknown mode, fail before the run."""
    agent = Agent(model=Model(id="g", api="google-generative-ai"), stream_fn=ScriptedModel([]))
    with pytest.raises(UsageError, match=r"^output_mode='native': the model's API 'google"):
        await agent.run("x", output_type=int, output_mode="native")
    with pytest.raises(UsageError, match=r"^output_mode must be 'auto', 'native' or 'tool'"):
        await agent.run("x", output_type=int, output_mode="json")  # type: ignore[call-overload]  # wrong on purpose
    assert agent.state.messages == []


def test_response_format_resolution() -> None:
    """Strict only where the server has strict mode and the schema a strict form;
    other formats pass through."""
    fmt: dict[str, Any] = {
        "type": "json_schema",
        "json_schema": {"name": "r", "schema": REVIEW_SCHEMA, "strict": True},
    }
    strict = resolve_response_format(fmt, True)
    assert strict["json_schema"] == {"name": "r", "schema": STRICT_REVIEW_SCHEMA, "strict": True}
    loose = resolve_response_format(fmt, False)
    assert loose["json_schema"] == {"name": "r", "schema": REVIEW_SCHEMA, "strict": False}
    assert fmt["json_schema"]["schema"] == REVIEW_SCHEMA  # not changed in place
    assert resolve_response_format({"type": "json_object"}, True) == {"type": "json_object"}


async def test_an_answer_cut_off_says_there_is_no_output() -> None:
    """A native answer that stops at max_tokens is not checked; the result says why."""
    model = ScriptedModel([ScriptedResponse.text('{"title": "Fi', stop_reason="length")])
    agent = Agent(model=Model(id="m", api="openai-completions"), stream_fn=model)
    result = await agent.run("review it", output_type=Review)
    assert (result.output, result.stop_reason) == (None, "length")
    assert result.error_message == (
        "No output: the run ended (stop_reason 'length') before the model gave a valid one"
    )


@dataclasses.dataclass
class Rating:
    stars: int

    def __post_init__(self) -> None:
        if not 1 <= self.stars <= 5:
            msg = f"stars must be from 1 to 5, not {self.stars}"
            raise ValueError(msg)


@pytest.mark.parametrize("api", ["openai-completions", "google-generative-ai"])
async def test_a_type_that_refuses_the_value_is_a_validation_error(api: str) -> None:
    """The type's own check (here __post_init__) fails the answer like the schema does,
    natively (a follow-up) and through the tool (its error result)."""
    if api == "openai-completions":
        answers = [ScriptedResponse.text('{"stars": 9}'), ScriptedResponse.text('{"stars": 4}')]
    else:
        answers = [
            ScriptedResponse.tool_calls(("c1", "final_result", {"stars": 9})),
            ScriptedResponse.tool_calls(("c2", "final_result", {"stars": 4})),
        ]
    agent = Agent(model=Model(id="m", api=api), stream_fn=ScriptedModel(answers))
    result = await agent.run("rate it", output_type=Rating)
    assert result.output == Rating(stars=4)
    feedback = result.messages[2]
    assert isinstance(feedback, UserMessage | ToolResultMessage)
    assert isinstance(feedback.content[0], TextContent)
    assert feedback.content[0].text.startswith(
        "The answer does not match the output schema: stars must be from 1 to 5, not 9"
        if api == "openai-completions"
        else "Invalid final_result arguments: stars must be from 1 to 5, not 9"
    )


def test_a_recording_keeps_the_response_format() -> None:
    """The harness's replay compares the schema a request asked for, as it does tool_choice."""
    from pitrio.harness._replay import request_to_wire

    fmt: dict[str, Any] = {"type": "json_object"}
    wire = request_to_wire(Model(id="m"), Context(), StreamOptions(response_format=fmt))
    assert wire["options"] == {"responseFormat": {"type": "json_object"}}


def test_responses_text_format_forms() -> None:
    """json_object passes through; without strict mode a json_schema goes strict false."""
    from pitrio.providers._openai_responses._payload import build_body

    context = Context(messages=[UserMessage(content="hi")])
    plain = Model(id="gpt-x", api="openai-responses", provider="openai")
    body = build_body(plain, context, StreamOptions(response_format={"type": "json_object"}))
    assert body["text"] == {"format": {"type": "json_object"}}
    fmt: dict[str, Any] = {
        "type": "json_schema",
        "json_schema": {"name": "r", "schema": REVIEW_SCHEMA, "strict": True},
    }
    body = build_body(plain, context, StreamOptions(response_format=fmt))
    assert body["text"] == {
        "format": {"type": "json_schema", "name": "r", "schema": REVIEW_SCHEMA, "strict": False}
    }
