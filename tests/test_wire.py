"""Pi's JSON wire form: lossless round trips, tags, camelCase, custom roles."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import attrs
import pytest
from hypothesis import given, strategies as st

from pitrio import (
    AssistantMessage,
    Cost,
    CustomMessage,
    ImageContent,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
    register_message_role,
    wire,
)
from pitrio._messages import STOP_REASONS

json_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
json_objects = st.dictionaries(st.text(max_size=6), json_values, max_size=4)
opt_text = st.none() | st.text(max_size=10)

text_blocks = st.builds(TextContent, text=st.text(max_size=20), text_signature=opt_text)
image_blocks = st.builds(
    ImageContent, data=st.text(max_size=12), mime_type=st.sampled_from(["image/png", "image/jpeg"])
)
thinking_blocks = st.builds(
    ThinkingContent,
    thinking=st.text(max_size=20),
    thinking_signature=opt_text,
    redacted=st.none() | st.booleans(),
)
tool_calls = st.builds(
    ToolCall,
    id=st.text(min_size=1, max_size=6),
    name=st.text(min_size=1, max_size=6),
    arguments=json_objects,
    thought_signature=opt_text,
)
costs = st.builds(
    Cost,
    input=st.floats(0, 10),
    output=st.floats(0, 10),
    cache_read=st.floats(0, 10),
    cache_write=st.floats(0, 10),
    total=st.floats(0, 40),
)
usages = st.builds(
    Usage,
    input=st.integers(0, 10**6),
    output=st.integers(0, 10**6),
    cache_read=st.integers(0, 10**6),
    cache_write=st.integers(0, 10**6),
    total_tokens=st.integers(0, 10**7),
    cost=costs,
    cache_write_1h=st.none() | st.integers(0, 100),
    reasoning=st.none() | st.integers(0, 100),
)
user_messages = st.builds(
    UserMessage,
    content=st.text(max_size=10)
    | st.tuples(text_blocks)
    | st.lists(text_blocks | image_blocks, max_size=3).map(tuple),
    timestamp=st.integers(0, 2**41),
)
assistant_messages = st.builds(
    AssistantMessage,
    content=st.lists(text_blocks | thinking_blocks | tool_calls, max_size=4).map(tuple),
    api=st.text(max_size=8),
    provider=st.text(max_size=8),
    model=st.text(max_size=8),
    usage=usages,
    stop_reason=st.sampled_from(STOP_REASONS),
    error_message=opt_text,
    timestamp=st.integers(0, 2**41),
    response_id=opt_text,
)
tool_result_messages = st.builds(
    ToolResultMessage,
    tool_call_id=st.text(min_size=1, max_size=6),
    tool_name=st.text(min_size=1, max_size=6),
    content=st.lists(text_blocks | image_blocks, max_size=3).map(tuple),
    details=st.none() | json_objects,
    usage=st.none() | usages,
    added_tool_names=st.none() | st.lists(st.text(max_size=4), min_size=1, max_size=3).map(tuple),
    is_error=st.booleans(),
    timestamp=st.integers(0, 2**41),
)
custom_messages = st.builds(
    CustomMessage,
    role=st.sampled_from(["note", "appSummary", "appMarker"]),
    fields=json_objects.filter(lambda d: "role" not in d),
)
messages = user_messages | assistant_messages | tool_result_messages | custom_messages


@given(messages)
def test_messages_round_trip_losslessly(message: Any) -> None:
    """unstructure then structure gives the same value, also through JSON text."""
    data = wire.unstructure(message)
    assert wire.structure_message(data) == message
    assert wire.structure_message(json.loads(json.dumps(data))) == message


@given(assistant_messages)
def test_wire_names_are_camel_case_with_tags(message: AssistantMessage) -> None:
    """Fields are camelCase, blocks carry their type tag, absent optionals are omitted."""
    data = wire.unstructure(message)
    assert data["role"] == "assistant"
    assert "stopReason" in data
    assert "stop_reason" not in data
    assert ("errorMessage" in data) is (message.error_message is not None)
    for block, raw in zip(message.content, data["content"], strict=True):
        assert raw["type"] == block.type
    assert "totalTokens" in data["usage"]


def test_pi_transcripts_from_the_oracle_read_back_identically() -> None:
    """Every message in the oracle's traces structures into pitrio and writes back the same."""
    expected = Path(__file__).parent / "data" / "oracle" / "expected"
    count = 0
    for path in sorted(expected.glob("*.json")):
        for record in json.loads(path.read_text(encoding="utf-8")):
            for key in ("message",):
                message = record.get(key)
                if isinstance(message, dict) and "role" in message:
                    back = wire.unstructure(wire.structure_message(message))
                    back.pop("timestamp", None)
                    for dropped in ("api", "provider", "model", "usage"):
                        if dropped not in message:
                            back.pop(dropped, None)
                    assert back == message, path.name
                    count += 1
    assert count > 500


@register_message_role
@attrs.frozen(kw_only=True)
class BashExecution:
    """A custom message role an application registers (like Pi's coding agent)."""

    role: ClassVar[str] = "shellRun"
    command: str
    output: str
    exit_code: int | None = None
    timestamp: int = 0


def test_registered_custom_roles_are_typed_and_camel_cased() -> None:
    """A registered role structures into its class, written in camelCase."""
    message = BashExecution(command="ls", output="a\nb", exit_code=0)
    data = wire.unstructure(message)
    assert data == {
        "role": "shellRun",
        "command": "ls",
        "output": "a\nb",
        "exitCode": 0,
        "timestamp": 0,
    }
    assert wire.structure_message(data) == message


def test_unknown_roles_stay_lossless_custom_messages() -> None:
    """An unregistered role becomes CustomMessage with every field kept."""
    data = {"role": "appSummary", "summary": "did x", "fromId": "abc"}
    message = wire.structure_message(data)
    assert isinstance(message, CustomMessage)
    assert message["summary"] == "did x"
    assert wire.unstructure(message) == data


def test_bad_input_names_what_is_wrong() -> None:
    """Missing roles, built-in role names and unknown block types give clear errors."""
    with pytest.raises(ValueError, match="needs a string 'role'"):
        wire.structure_message({"content": "x"})
    with pytest.raises(ValueError, match="unknown content block type 'video'"):
        wire.structure_message({"role": "user", "content": [{"type": "video"}], "timestamp": 0})

    @attrs.frozen
    class Clash:
        role: ClassVar[str] = "user"

    with pytest.raises(ValueError, match="is built in"):
        register_message_role(Clash)
    with pytest.raises(TypeError, match="needs an attrs class"):
        register_message_role(int)
    with pytest.raises(ValueError, match="'shellRun' message: the field 'command' is missing"):
        wire.structure_message({"role": "shellRun", "output": ""})


async def test_every_event_of_a_run_round_trips_in_pis_wire_form() -> None:
    """Agent events and the provider events inside them have Pi's JSON form and read back."""
    from pitrio import AbortSignal, Agent, Model, Tool, text_result
    from pitrio.testing import ScriptedModel, ScriptedResponse

    async def echo(call_id: str, params: Any, signal: AbortSignal, on_update: Any) -> Any:
        on_update(text_result("working"))
        return text_result("done", details={"n": 1})

    agent = Agent(
        model=Model(id="m"),
        tools=[Tool(name="echo", execute=echo)],
        stream_fn=ScriptedModel(
            [
                ScriptedResponse(
                    content=(ThinkingContent(thinking="hmm"), ToolCall(id="c", name="echo")),
                    chunk_size=2,
                ),
                ScriptedResponse.text("bye", chunk_size=1),
            ]
        ),
    )
    events: list[Any] = []
    agent.subscribe(lambda event, signal: events.append(event))
    await agent.prompt("hi")
    kinds = set()
    for event in events:
        data = json.loads(json.dumps(wire.unstructure(event)))
        assert data["type"] == event.type
        kinds.add(data["type"])
        assert wire.structure_event(data) == event
    assert {"message_update", "tool_execution_update", "turn_end", "agent_end"} <= kinds
    update = next(wire.unstructure(e) for e in events if e.type == "message_update")
    assert set(update) == {"type", "message", "assistantMessageEvent"}


def test_the_event_tag_table_is_the_event_unions() -> None:
    """Every class of AgentEvent and AssistantMessageEvent is on the wire under its own
    tag, and nothing else is: the table is built from the unions."""
    from typing import get_args

    from pitrio import _events, _wire

    classes = [*get_args(_events.AssistantMessageEvent), *get_args(_events.AgentEvent)]
    assert len(classes) == 22
    assert {cls.type: cls for cls in classes} == _wire._EVENT_TYPES
    for cls in classes:
        assert _wire.structure_event({"type": cls.type, **_minimal_fields(cls)}).__class__ is cls
    with pytest.raises(ValueError, match="unknown event type None"):
        _wire.structure_event({})


def _minimal_fields(cls: type[Any]) -> dict[str, Any]:
    """Wire fields that make a valid event of ``cls`` (the message fields are assistant
    messages, the rest the simplest value of its type)."""
    message = {"role": "assistant", "content": [], "stopReason": "stop"}
    values: dict[str, Any] = {
        "partial": message,
        "message": message,
        "error": message,
        "messages": [message],
        "toolResults": [],
        "contentIndex": 0,
        "delta": "",
        "content": "",
        "toolCall": {"type": "toolCall", "id": "c", "name": "t", "arguments": {}},
        "reason": "stop" if cls.type == "done" else "error",
        "toolCallId": "c",
        "toolName": "t",
        "args": {},
        "partialResult": {"content": []},
        "result": {"content": []},
        "isError": False,
        "assistantMessageEvent": {
            "type": "text_delta",
            "contentIndex": 0,
            "delta": "",
            "partial": message,
        },
    }
    fields = [f.name for f in attrs.fields(cls)]
    return {k: v for k, v in values.items() if _snake(k) in fields}


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name)


def test_a_role_registered_after_the_converter_cached_its_class_is_written_as_a_role() -> None:
    """The converter is built lazily and caches per-class functions: a class converted
    once before it was registered is still written (and read) as a role afterwards."""

    @attrs.frozen(kw_only=True)
    class LateNote:
        role: ClassVar[str] = "lateNote"
        note_text: str
        timestamp: int = 0

    before = wire.unstructure(LateNote(note_text="x"))
    assert before == {"note_text": "x", "timestamp": 0}  # plain attrs, before registering
    register_message_role(LateNote)
    data = wire.unstructure(LateNote(note_text="x"))
    assert data == {"role": "lateNote", "noteText": "x", "timestamp": 0}
    assert wire.structure_message(data) == LateNote(note_text="x")
