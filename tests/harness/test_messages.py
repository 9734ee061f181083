"""The harness's message roles: Pi's wire form and what the model sees of them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, strategies as st

from pitrio import (
    AssistantMessage,
    CustomMessage,
    ImageContent,
    TextContent,
    ToolResultMessage,
    UserMessage,
    wire,
)
from pitrio.harness._messages import (
    AppMessage,
    BashExecutionMessage,
    BranchSummaryMessage,
    CompactionSummaryMessage,
    bash_execution_to_text,
    convert_to_llm,
    timestamp_ms,
)

texts = st.text(max_size=20)
timestamps = st.integers(0, 2**41)
harness_messages = st.one_of(
    st.builds(
        CompactionSummaryMessage,
        summary=texts,
        tokens_before=st.integers(0, 10**6),
        timestamp=timestamps,
    ),
    st.builds(BranchSummaryMessage, summary=texts, from_id=st.none() | texts, timestamp=timestamps),
    st.builds(
        BashExecutionMessage,
        command=texts,
        output=texts,
        exit_code=st.none() | st.integers(-1, 255),
        cancelled=st.booleans(),
        truncated=st.booleans(),
        full_output_path=st.none() | texts,
        timestamp=timestamps,
        exclude_from_context=st.none() | st.booleans(),
    ),
    st.builds(
        AppMessage,
        custom_type=texts,
        content=texts | st.lists(st.builds(TextContent, text=texts), max_size=2).map(tuple),
        display=st.booleans(),
        details=st.none() | st.dictionaries(texts, st.integers(), max_size=2),
        timestamp=timestamps,
    ),
)


@given(harness_messages)
def test_harness_roles_round_trip_through_json(message: Any) -> None:
    """Each role writes Pi's JSON and reads back to the same value."""
    data = json.loads(json.dumps(wire.unstructure(message)))
    assert data["role"] == message.role
    assert wire.structure_message(data) == message


def test_wire_form_is_pis() -> None:
    """Field names and presence as Pi's harness/messages.ts declares them."""
    assert wire.unstructure(
        CompactionSummaryMessage(summary="s", tokens_before=5, timestamp=1)
    ) == {
        "role": "compactionSummary",
        "summary": "s",
        "tokensBefore": 5,
        "timestamp": 1,
    }
    # fromId is ``string | null``: a null is written, not left out.
    assert wire.unstructure(BranchSummaryMessage(summary="s", from_id=None, timestamp=2)) == {
        "role": "branchSummary",
        "summary": "s",
        "fromId": None,
        "timestamp": 2,
    }
    bash = {
        "role": "bashExecution",
        "command": "ls",
        "output": "a",
        "exitCode": 0,
        "cancelled": False,
        "truncated": True,
        "fullOutputPath": "/tmp/out",
        "timestamp": 3,
    }
    assert wire.unstructure(wire.structure_message(bash)) == bash
    custom = {
        "role": "custom",
        "customType": "note",
        "content": [{"type": "text", "text": "x"}],
        "display": False,
        "details": {"k": 1},
        "timestamp": 4,
    }
    message = wire.structure_message(custom)
    assert message == AppMessage(
        custom_type="note",
        content=(TextContent(text="x"),),
        display=False,
        details={"k": 1},
        timestamp=4,
    )
    assert wire.unstructure(message) == custom


def test_a_missing_field_is_named() -> None:
    with pytest.raises(ValueError, match="'compactionSummary' message: the field 'tokensBefore'"):
        wire.structure_message({"role": "compactionSummary", "summary": "s", "timestamp": 0})


def _text(message: Any) -> str:
    assert isinstance(message, UserMessage)
    assert not isinstance(message.content, str)
    (block,) = message.content
    assert isinstance(block, TextContent)
    return block.text


def test_summaries_are_wrapped_in_pis_texts() -> None:
    (compaction, branch) = convert_to_llm(
        [
            CompactionSummaryMessage(summary="did A", tokens_before=9, timestamp=7),
            BranchSummaryMessage(summary="tried B", from_id="e1", timestamp=8),
        ]
    )
    assert _text(compaction) == (
        "The conversation history before this point was compacted into the following "
        "summary:\n\n<summary>\ndid A\n</summary>"
    )
    assert compaction.timestamp == 7
    # Pi's branch suffix has no newline before </summary>.
    assert _text(branch) == (
        "The following is a summary of a branch that this conversation came back from:"
        "\n\n<summary>\ntried B</summary>"
    )
    assert branch.timestamp == 8


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"output": "hi"}, "Ran `echo hi`\n```\nhi\n```"),
        ({"output": ""}, "Ran `echo hi`\n(no output)"),
        ({"output": "x", "exit_code": 0}, "Ran `echo hi`\n```\nx\n```"),
        (
            {"output": "x", "exit_code": 3},
            "Ran `echo hi`\n```\nx\n```\n\nCommand exited with code 3",
        ),
        (
            {"output": "x", "exit_code": 3, "cancelled": True},
            "Ran `echo hi`\n```\nx\n```\n\n(command cancelled)",
        ),
        (
            {"output": "x", "truncated": True, "full_output_path": "/t/f"},
            "Ran `echo hi`\n```\nx\n```\n\n[Output truncated. Full output: /t/f]",
        ),
        ({"output": "x", "truncated": True}, "Ran `echo hi`\n```\nx\n```"),
    ],
)
def test_bash_executions_read_as_pi_writes_them(kwargs: dict[str, Any], expected: str) -> None:
    message = BashExecutionMessage(command="echo hi", **kwargs)
    assert bash_execution_to_text(message) == expected
    assert [_text(m) for m in convert_to_llm([message])] == [expected]


def test_conversion_keeps_llm_roles_and_drops_the_rest() -> None:
    user = UserMessage(content="q", timestamp=1)
    assistant = AssistantMessage(content=(TextContent(text="a"),))
    result = ToolResultMessage(tool_call_id="t", tool_name="x")
    hidden = BashExecutionMessage(command="ls", output="", exclude_from_context=True)
    image = ImageContent(data="AA==", mime_type="image/png")
    app = AppMessage(custom_type="k", content=(image,), timestamp=5)
    app_text = AppMessage(custom_type="k", content="plain", timestamp=6)
    unknown = CustomMessage(role="note", fields={"x": 1})
    out = convert_to_llm([user, hidden, assistant, unknown, result, app, app_text])
    assert out[:3] == [user, assistant, result]
    assert out[3] == UserMessage(content=(image,), timestamp=5)
    assert out[4] == UserMessage(content=(TextContent(text="plain"),), timestamp=6)
    assert len(out) == 5


def test_unregistered_copies_of_harness_roles_convert_too() -> None:
    """A CustomMessage carrying a harness role (made before registration) still converts."""
    raw = CustomMessage(role="compactionSummary", fields={"summary": "s", "tokensBefore": 1})
    (message,) = convert_to_llm([raw])
    assert _text(message).endswith("<summary>\ns\n</summary>")


def test_timestamps_from_iso_strings_or_numbers() -> None:
    assert timestamp_ms(1234) == 1234
    assert timestamp_ms("1970-01-01T00:00:01.500Z") == 1500
    assert timestamp_ms("2024-01-01T00:00:00+00:00") == 1704067200000
    with pytest.raises(ValueError, match="neither milliseconds nor an ISO-8601 date"):
        timestamp_ms("yesterday")


def test_conversion_matches_pi_for_every_variant() -> None:
    """Pi's own convertToLlm (run by node/compaction_pin.mjs) on every harness role."""
    from pathlib import Path

    pinned = json.loads(
        (Path(__file__).parent / "data" / "compaction_pi.json").read_text(encoding="utf-8")
    )["convert"]
    messages = [wire.structure_message(m) for m in pinned["input"]]
    assert [wire.unstructure(m) for m in convert_to_llm(messages)] == pinned["output"]
