"""The test kit's errors: bad arguments to ScriptedModel, ScriptedResponse and check_trace
are pitrio's usage errors, and the conformance players raise PlayerError subclasses, each
naming what was wrong and how to fix it."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from pitrio import (
    AgentStart,
    ArgumentTypeError,
    ImageContent,
    PitrioError,
    TextContent,
    UsageError,
    wire,
)
from pitrio.testing import ScriptedModel, ScriptedResponse, check_trace
from pitrio.testing.conformance import (
    FifoSchedulingUnavailable,
    PlayerError,
    RunProblem,
    ScenarioError,
    play,
)
from pitrio.testing.provider_conformance import (
    ConformanceError,
    FixtureError,
    play_fixture,
    run_fixture,
)


def test_scripted_response_content_must_be_blocks() -> None:
    with pytest.raises(ArgumentTypeError, match=r"not a str; for a text answer write"):
        ScriptedResponse(content="hello")  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError, match=r"content\[1\] is a ImageContent; a model"):
        ScriptedResponse(
            content=(TextContent(text="a"), ImageContent(data="", mime_type="image/png"))  # type: ignore[arg-type]
        )
    # A list of blocks is fine (the kit's own tests pass tuples, users often lists).
    blocks: Any = [TextContent(text="a")]
    assert list(ScriptedResponse(content=blocks).content) == [TextContent(text="a")]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"stop_reason": "end_turn"}, r"stop_reason='end_turn'\): must be one of stop, toolUse"),
        ({"chunk_size": 0}, r"chunk_size=0\): must be an int >= 1 \(or None"),
        ({"chunk_size": True}, r"chunk_size=True\)"),
        ({"delay": -1}, r"delay=-1\): must be a number of seconds >= 0"),
        ({"delay": float("nan")}, r"delay=nan\)"),
        ({"pending_fetches": -2}, r"pending_fetches=-2\): must be an int >= 0"),
    ],
)
def test_scripted_response_field_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message) as info:
        ScriptedResponse.text("hi", **kwargs)
    assert not isinstance(info.value, ArgumentTypeError)


def test_scripted_model_responses_must_be_scripted_responses() -> None:
    with pytest.raises(ArgumentTypeError, match=r"got str"):
        ScriptedModel("hello")  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError, match=r"responses\[1\] is a str, not a ScriptedResponse"):
        ScriptedModel([ScriptedResponse.text("a"), "b"])  # type: ignore[list-item]
    assert ScriptedModel(lambda context: ScriptedResponse.text("ok")).calls == 0


def test_check_trace_rejects_what_is_not_agent_events() -> None:
    with pytest.raises(ArgumentTypeError, match=r"events\[0\] is a dict.*structure_event"):
        check_trace([{"type": "agent_start"}])  # type: ignore[list-item]
    with pytest.raises(ArgumentTypeError, match=r"got generator.*agent\.subscribe"):
        check_trace(e for e in [AgentStart()])  # type: ignore[arg-type]
    # The wire dicts, read back, are checked as events.
    problems = check_trace([wire.structure_event({"type": "agent_start"})])
    assert problems
    assert all(isinstance(p, str) for p in problems)


def test_player_errors_share_one_base() -> None:
    for cls in (ScenarioError, RunProblem, FixtureError, ConformanceError):
        assert issubclass(cls, PlayerError)
    assert issubclass(FifoSchedulingUnavailable, RuntimeError)
    assert issubclass(PlayerError, PitrioError)
    assert issubclass(ScenarioError, ValueError)
    assert issubclass(FixtureError, ValueError)


def test_a_bad_scenario_is_a_scenario_error() -> None:
    with pytest.raises(ScenarioError, match=r'unknown key "modle"') as info:
        play({"mode": "agent", "modle": {}, "script": []})
    assert isinstance(info.value, ValueError)
    with pytest.raises(ScenarioError, match=r"scenario\.script: must be a non-empty array"):
        play({"mode": "agent", "model": {"responses": []}, "script": []})


def test_an_action_that_blocks_in_a_listener_is_a_run_problem() -> None:
    """A triggered ``sleep`` run from the loop's synchronous emit would block: the player
    stops and reports it as a problem (exit status 3), keeping the trace so far."""
    scenario = {
        "mode": "loop",
        "loopApi": "run",
        "model": {"responses": [{"text": "hi"}]},
        "script": [{"op": "loop", "text": "go"}],
        "actions": [{"on": {"type": "turn_start"}, "do": [{"op": "sleep", "ms": 5}]}],
    }
    records, problems = play(scenario)
    assert problems == [
        "an action run from a listener tried to block; only non-blocking ops are allowed there"
    ]
    assert [r["type"] for r in records][:2] == ["action", "agent_start"]


def test_a_bad_fixture_is_a_fixture_error() -> None:
    with pytest.raises(FixtureError, match=r"fixture\.api: must be one of openai-completions"):
        trio.run(play_fixture, {"api": "nope", "responses": []})


def test_a_misbehaving_fixture_run_is_a_conformance_error() -> None:
    fixture = {
        "api": "openai-completions",
        "context": {"messages": [{"role": "user", "text": "hi"}]},
        "responses": [],
    }
    with pytest.raises(ConformanceError, match=r"only 0 response\(s\) are scripted") as info:
        trio.run(run_fixture, fixture)
    assert info.value.trace[0]["type"] == "request"
