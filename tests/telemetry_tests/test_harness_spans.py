"""instrument(): a harness's runs as Pi's spans (the in-memory reference adapter).

Each test runs a scripted harness in virtual time and compares the whole span tree: names,
parents, the attributes that carry the outcome, statuses and the order spans ended in.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio.testing

from pitrio.telemetry import InMemoryTelemetryContext, RecordedTelemetrySpan, SpanStatus

from ._scenarios import abort_in_a_tool, compactions, parallel_batch, retry_once

KEYS = (
    "pi.operation.kind",
    "pi.operation.outcome",
    "pi.turn.id",
    "pi.ai.model",
    "pi.ai.response.stop_reason",
    "pi.ai.usage.input_tokens",
    "pi.ai.usage.output_tokens",
    "pi.ai.error.type",
    "pi.tool.name",
    "pi.tool.call_id",
    "pi.tool.is_error",
    "pi.sleep.delay_ms",
    "pi.sleep.outcome",
    "pi.step.kind",
    "pi.compaction.reason",
    "pi.step.outcome",
)


def tree(spans: list[RecordedTelemetrySpan]) -> list[Any]:
    """The spans as nested ``[name, key attributes, status, children]``, in start order."""

    def node(span: RecordedTelemetrySpan) -> list[Any]:
        attributes = {k: span.attributes[k] for k in KEYS if k in span.attributes}
        if span.name != "pi.harness.turn":  # the tools' copy is checked once, below
            attributes.pop("pi.turn.id", None)
        children = [node(s) for s in spans if s.parent_id == span.id]
        return [span.name, attributes, span.status.status, children]

    assert all(s.settled for s in spans), "every span ends"
    return [node(s) for s in spans if s.parent_id is None]


def ended(spans: list[RecordedTelemetrySpan]) -> list[str]:
    """Span names (with the tool's) in the order they ended."""
    order = sorted(spans, key=lambda s: s.end_sequence or 0)
    return [f"{s.name}:{s.attributes['pi.tool.name']}" if "pi.tool.name" in s.attributes
            else s.name for s in order]  # fmt: skip


def _request(
    stop: str, tokens: tuple[int, int] = (0, 0), error: str | None = None
) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "pi.ai.model": "m",
        "pi.ai.response.stop_reason": stop,
        "pi.ai.usage.input_tokens": tokens[0],
        "pi.ai.usage.output_tokens": tokens[1],
    }
    if error is not None:
        attributes["pi.ai.error.type"] = error
    return attributes


def _tool(name: str, call_id: str, error: bool = False) -> dict[str, Any]:
    return {"pi.tool.name": name, "pi.tool.call_id": call_id, "pi.tool.is_error": error}


RUN = {"pi.operation.kind": "run", "pi.operation.outcome": "completed"}


async def test_a_parallel_batch_gives_sibling_tool_spans(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Parallel tool spans are siblings under the turn and end when their tool ends."""
    telemetry = InMemoryTelemetryContext()
    await parallel_batch(telemetry)
    spans = telemetry.get_spans()
    assert tree(spans) == [
        ["pi.harness.run", RUN, "ok", [
            ["pi.harness.turn", {"pi.turn.id": "turn-1"}, "ok", [
                ["pi.ai.request", _request("tool_use", (10, 5)), "ok", []],
                ["pi.harness.tool", _tool("slow", "c1"), "ok", []],
                ["pi.harness.tool", _tool("fast", "c2"), "ok", []],
            ]],
            ["pi.harness.turn", {"pi.turn.id": "turn-2"}, "ok", [
                ["pi.ai.request", _request("stop", (30, 2)), "ok", []],
            ]],
        ]],
    ]  # fmt: skip
    assert ended(spans) == [
        "pi.ai.request",
        "pi.harness.tool:fast",  # 1 s: ends first though it started second
        "pi.harness.tool:slow",
        "pi.harness.turn",
        "pi.ai.request",
        "pi.harness.turn",
        "pi.harness.run",
    ]
    run = spans[0].attributes
    assert (run["pi.lane.name"], run["pi.operation.id"], run["pi.operation.recovery"]) == (
        "main",
        "op-1",
        False,
    )
    assert {spans[3].attributes["pi.turn.id"], spans[4].attributes["pi.turn.id"]} == {"turn-1"}
    assert spans[2].attributes["pi.ai.stream.chunk_count"] == 4  # start, two calls' deltas, end
    assert "pi.ai.input.messages" not in spans[2].attributes  # content only on opt-in


async def test_an_abort_marks_the_cut_off_tool_and_the_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The stalled tool ends as an error ("Operation aborted"), the run as aborted."""
    telemetry = InMemoryTelemetryContext()
    await abort_in_a_tool(telemetry)
    spans = telemetry.get_spans()
    assert tree(spans) == [
        ["pi.harness.run", {"pi.operation.kind": "run", "pi.operation.outcome": "aborted"}, "ok", [
            ["pi.harness.turn", {"pi.turn.id": "turn-1"}, "ok", [
                ["pi.ai.request", _request("tool_use"), "ok", []],
                ["pi.harness.tool", _tool("fast", "f1"), "ok", []],
                ["pi.harness.tool", _tool("stall", "s1", error=True), "error", []],
            ]],
            # Pi's loop still asks once more after an aborted batch; that request is aborted.
            ["pi.harness.turn", {"pi.turn.id": "turn-2"}, "ok", [
                ["pi.ai.request", _request("aborted", error="AbortError"),
                 "error", []],
            ]],
        ]],
    ]  # fmt: skip
    stall = spans[4]
    assert stall.status == SpanStatus(
        status="error", error_name="ToolError", error_message="Operation aborted"
    )
    assert ended(spans)[:3] == ["pi.ai.request", "pi.harness.tool:fast", "pi.harness.tool:stall"]


async def test_a_retry_is_a_sleep_between_two_turns_of_one_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The failed request is an error span, the back-off a sleep span, the run completes."""
    telemetry = InMemoryTelemetryContext()
    await retry_once(telemetry)
    spans = telemetry.get_spans()
    assert tree(spans) == [
        ["pi.harness.run", RUN, "ok", [
            ["pi.harness.turn", {"pi.turn.id": "turn-1"}, "ok", [
                ["pi.ai.request", _request("error", error="ProviderError"),
                 "error", []],
            ]],
            ["pi.harness.sleep", {"pi.sleep.delay_ms": 2000.0, "pi.sleep.outcome": "elapsed"},
             "ok", []],
            ["pi.harness.turn", {"pi.turn.id": "turn-2"}, "ok", [
                ["pi.ai.request", _request("stop", (7, 3)), "ok", []],
            ]],
        ]],
    ]  # fmt: skip
    assert spans[2].status.error_message == "overloaded_error"
    events = [(e.name, dict(e.attributes)) for e in spans[0].events]
    assert events == [
        ("pi.harness.retry_scheduled", {"pi.step.attempt": 1, "pi.sleep.delay_ms": 2000.0}),
        ("pi.harness.retry_end", {"pi.step.attempt": 1, "pi.retry.success": True}),
    ]


async def test_compactions_are_a_step_of_a_run_or_a_root_operation(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A threshold compaction is a step under its run (after its last answer, or before
    its first request); a manual compact() is its own root."""
    telemetry = InMemoryTelemetryContext()
    harness = await compactions(telemetry)
    assert harness.session is not None
    spans = telemetry.get_spans()

    def run(tokens: int, *steps: list[Any]) -> list[Any]:
        turn = ["pi.harness.turn", {}, "ok", [
            ["pi.ai.request", _request("stop", (tokens, 10)), "ok", []],
        ]]  # fmt: skip
        return ["pi.harness.run", RUN, "ok", [turn, *steps]]

    threshold = {
        "pi.step.kind": "compaction",
        "pi.compaction.reason": "threshold",
        "pi.step.outcome": "succeeded",
    }
    trees = tree(spans)
    for node in trees:  # turn ids count across runs; compared separately below
        for child in node[3]:
            child[1].pop("pi.turn.id", None)
    assert trees == [
        run(300),
        run(900, ["pi.harness.step", threshold, "ok", []]),  # after its answer
        run(100, ["pi.harness.step", threshold, "ok", []]),  # before its first request
        [
            "pi.harness.compaction",
            {"pi.operation.kind": "compaction", "pi.operation.outcome": "completed"},
            "ok",
            [],
        ],
    ]
    turns = [s.attributes["pi.turn.id"] for s in spans if s.name == "pi.harness.turn"]
    assert turns == ["turn-1", "turn-2", "turn-3"]
    roots = [s for s in spans if s.parent_id is None]
    assert [s.attributes["pi.operation.id"] for s in roots] == ["op-1", "op-2", "op-3", "op-4"]
    assert {s.attributes["pi.session.id"] for s in roots} == {harness.session.id}


@pytest.mark.parametrize("how", ["argument", "environment"])
async def test_content_is_captured_on_opt_in(
    how: str, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """capture_content=True (or the OpenTelemetry variable) adds messages, arguments, results."""
    telemetry = InMemoryTelemetryContext()
    if how == "argument":
        await parallel_batch(telemetry, capture_content=True)
    else:
        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
        await parallel_batch(telemetry)
    spans = telemetry.get_spans()
    first, slow = spans[2].attributes, spans[3].attributes
    assert json.loads(str(first["pi.ai.input.messages"])) == [
        {"role": "user", "parts": [{"type": "text", "content": "go"}]}
    ]
    assert json.loads(str(first["pi.ai.output.messages"])) == [
        {
            "role": "assistant",
            "parts": [
                {"type": "tool_call", "id": "c1", "name": "slow", "arguments": {"n": 1}},
                {"type": "tool_call", "id": "c2", "name": "fast", "arguments": {}},
            ],
            "finish_reason": "tool_call",
        }
    ]
    assert json.loads(str(slow["pi.tool.arguments"])) == {"n": 1}
    assert json.loads(str(slow["pi.tool.result"])) == [{"type": "text", "content": "done"}]
    second = json.loads(str(spans[6].attributes["pi.ai.input.messages"]))
    assert [m["role"] for m in second] == ["user", "assistant", "tool", "tool"]


async def test_stopping_the_instrumentation_records_no_more(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The function instrument() returns unsubscribes its listener."""
    from pitrio.harness import Harness
    from pitrio.telemetry import instrument
    from pitrio.testing import ScriptedModel, ScriptedResponse

    from ._scenarios import ROOMY

    harness = Harness(
        model=ROOMY,
        stream_fn=ScriptedModel([ScriptedResponse.text("a"), ScriptedResponse.text("b")]),
    )
    telemetry = InMemoryTelemetryContext()
    stop = instrument(harness, telemetry)
    await harness.prompt("one")
    stop()
    await harness.prompt("two")
    assert [s.name for s in telemetry.get_spans()] == [
        "pi.harness.run",
        "pi.harness.turn",
        "pi.ai.request",
    ]


class _Broken:
    """A context whose backend fails on every span."""

    def start_span(self, name: str, attributes: Any = None) -> Any:
        msg = "backend down"
        raise RuntimeError(msg)


async def test_a_failing_adapter_does_not_change_the_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Recording is passive: the run ends as it would without telemetry."""
    harness = await parallel_batch(_Broken())
    assert [m.role for m in harness.messages] == [
        "user",
        "assistant",
        "toolResult",
        "toolResult",
        "assistant",
    ]
    assert harness.messages[-1].stop_reason == "stop"


async def test_the_noop_context_subscribes_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """instrument() with telemetry off adds no listener (it costs the run nothing)."""
    from pitrio.harness import Harness
    from pitrio.telemetry import NOOP_TELEMETRY_CONTEXT, instrument
    from pitrio.testing import ScriptedModel, ScriptedResponse

    from ._scenarios import ROOMY

    harness = Harness(model=ROOMY, stream_fn=ScriptedModel([ScriptedResponse.text("a")]))
    subscribed: list[object] = []
    real = harness.subscribe

    def counting(listener: Any) -> Any:
        subscribed.append(listener)
        return real(listener)

    harness.subscribe = counting  # type: ignore[method-assign]
    stop = instrument(harness, NOOP_TELEMETRY_CONTEXT)
    assert subscribed == []
    stop()
    instrument(harness, InMemoryTelemetryContext())
    assert len(subscribed) == 1
    await harness.prompt("one")
    assert harness.messages[-1].text == "a"
