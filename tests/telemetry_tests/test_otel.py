"""OpenTelemetryContext: the GenAI semantic conventions, checked with the SDK's memory.

Golden span trees from ``InMemorySpanExporter`` (names, kinds, parents, gen_ai.*
attributes, statuses) and the two GenAI histograms from ``InMemoryMetricReader``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
import trio.testing
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from pitrio.telemetry import OpenTelemetryContext

from ._scenarios import abort_in_a_tool, compactions, parallel_batch, retry_once


@attrs.define
class Otel:
    """An SDK tracer and meter provider whose output stays in memory."""

    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader
    tracer_provider: TracerProvider
    meter_provider: MeterProvider

    def context(self, **kwargs: Any) -> OpenTelemetryContext:
        return OpenTelemetryContext(
            tracer_provider=self.tracer_provider, meter_provider=self.meter_provider, **kwargs
        )

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def histogram(self, name: str) -> list[HistogramDataPoint]:
        data = self.metrics.get_metrics_data()
        points: list[HistogramDataPoint] = []
        assert data is not None
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        points.extend(p for p in metric.data.data_points
                                      if isinstance(p, HistogramDataPoint))  # fmt: skip
        return points


@pytest.fixture
def otel() -> Iterator[Otel]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    yield Otel(exporter, reader, tracer_provider, meter_provider)
    tracer_provider.shutdown()
    meter_provider.shutdown()


GENAI_KEYS = (
    "gen_ai.operation.name",
    "gen_ai.provider.name",
    "gen_ai.system",
    "gen_ai.request.model",
    "gen_ai.response.model",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.response.finish_reasons",
    "gen_ai.tool.name",
    "gen_ai.tool.call.id",
    "error.type",
)


def tree(spans: list[ReadableSpan]) -> list[Any]:
    """Nested ``[name, kind, gen_ai attributes, status, children]``, children by start."""
    by_parent: dict[int | None, list[ReadableSpan]] = {}
    for span in sorted(spans, key=lambda s: s.start_time or 0):
        parent = span.parent.span_id if span.parent is not None else None
        by_parent.setdefault(parent, []).append(span)

    def node(span: ReadableSpan) -> list[Any]:
        attributes = span.attributes or {}
        chosen = {k: attributes[k] for k in GENAI_KEYS if k in attributes}
        if "gen_ai.response.finish_reasons" in chosen:
            chosen["gen_ai.response.finish_reasons"] = list(
                chosen["gen_ai.response.finish_reasons"]  # type: ignore[arg-type]  # a tuple
            )
        assert span.context is not None
        children = [node(s) for s in by_parent.get(span.context.span_id, [])]
        status = span.status.status_code.name
        return [span.name, span.kind.name, chosen, status, children]

    return [node(s) for s in by_parent.get(None, [])]


INVOKE = {"gen_ai.operation.name": "invoke_agent"}


def _chat(
    finish: str, tokens: tuple[int, int] = (0, 0), error: str | None = None
) -> dict[str, Any]:
    extra = {"error.type": error} if error is not None else {}
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "scripted",
        "gen_ai.request.model": "m",
        "gen_ai.response.model": "m",
        "gen_ai.usage.input_tokens": tokens[0],
        "gen_ai.usage.output_tokens": tokens[1],
        "gen_ai.response.finish_reasons": [finish],
        **extra,
    }


def _tool(name: str, call_id: str, error: str | None = None) -> dict[str, Any]:
    extra = {"error.type": error} if error is not None else {}
    return {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": call_id,
        **extra,
    }


async def test_a_parallel_batch_as_genai_spans_and_metrics(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    """invoke_agent > turn > chat m + two sibling execute_tool spans; the two histograms."""
    await parallel_batch(otel.context(latest_conventions=True, turn_spans=True))
    spans = otel.finished()
    assert tree(spans) == [
        ["invoke_agent", "INTERNAL", INVOKE, "UNSET", [
            ["pi.harness.turn", "INTERNAL", {}, "UNSET", [
                ["chat m", "CLIENT", _chat("tool_call", (10, 5)), "UNSET", []],
                ["execute_tool slow", "INTERNAL", _tool("slow", "c1"), "UNSET", []],
                ["execute_tool fast", "INTERNAL", _tool("fast", "c2"), "UNSET", []],
            ]],
            ["pi.harness.turn", "INTERNAL", {}, "UNSET", [
                ["chat m", "CLIENT", _chat("stop", (30, 2)), "UNSET", []],
            ]],
        ]],
    ]  # fmt: skip
    # Finished in the order they ended: the fast tool first, each before its turn.
    assert [s.name for s in spans][:4] == [
        "chat m",
        "execute_tool fast",
        "execute_tool slow",
        "pi.harness.turn",
    ]
    (duration,) = otel.histogram("gen_ai.client.operation.duration")
    assert duration.count == 2
    assert dict(duration.attributes or {}) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "scripted",
        "gen_ai.request.model": "m",
        "gen_ai.response.model": "m",
    }
    tokens = {
        dict(p.attributes or {})["gen_ai.token.type"]: (p.count, p.sum)
        for p in otel.histogram("gen_ai.client.token.usage")
    }
    assert tokens == {"input": (2, 40), "output": (2, 7)}
    assert not any("gen_ai.input.messages" in (s.attributes or {}) for s in spans)
    # Renamed, not doubled; Pi's constant bookkeeping left out; the rest kept.
    chat = next(s for s in spans if s.name == "chat m").attributes or {}
    assert "pi.ai.model" not in chat
    assert "pi.lane.name" not in chat
    assert "pi.ai.streaming" not in chat
    assert chat["pi.ai.stream.chunk_count"] == 4


async def test_by_default_a_turn_has_no_span_and_its_id_is_on_its_spans(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    """The GenAI shape: chat and execute_tool spans right under invoke_agent, each with its
    turn's pi.turn.id (Pi's turn span only with turn_spans=True)."""
    await parallel_batch(otel.context(latest_conventions=True))
    spans = otel.finished()
    assert tree(spans) == [
        ["invoke_agent", "INTERNAL", INVOKE, "UNSET", [
            ["chat m", "CLIENT", _chat("tool_call", (10, 5)), "UNSET", []],
            ["execute_tool slow", "INTERNAL", _tool("slow", "c1"), "UNSET", []],
            ["execute_tool fast", "INTERNAL", _tool("fast", "c2"), "UNSET", []],
            ["chat m", "CLIENT", _chat("stop", (30, 2)), "UNSET", []],
        ]],
    ]  # fmt: skip
    turns = [(s.name, (s.attributes or {}).get("pi.turn.id")) for s in spans]
    assert turns == [
        ("chat m", "turn-1"),
        ("execute_tool fast", "turn-1"),
        ("execute_tool slow", "turn-1"),
        ("chat m", "turn-2"),
        ("invoke_agent", None),
    ]
    assert len(otel.histogram("gen_ai.client.token.usage")) == 2


async def test_an_abort_sets_error_types(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    """The cut-off tool and the aborted request are errors with error.type."""
    await abort_in_a_tool(otel.context(latest_conventions=True, turn_spans=True))
    assert tree(otel.finished()) == [
        ["invoke_agent", "INTERNAL", INVOKE, "UNSET", [
            ["pi.harness.turn", "INTERNAL", {}, "UNSET", [
                ["chat m", "CLIENT", _chat("tool_call"), "UNSET", []],
                ["execute_tool fast", "INTERNAL", _tool("fast", "f1"), "UNSET", []],
                ["execute_tool stall", "INTERNAL", _tool("stall", "s1", "ToolError"),
                 "ERROR", []],
            ]],
            ["pi.harness.turn", "INTERNAL", {}, "UNSET", [
                ["chat m", "CLIENT", _chat("aborted", error="AbortError"), "ERROR", []],
            ]],
        ]],
    ]  # fmt: skip
    stall = next(s for s in otel.finished() if s.name == "execute_tool stall")
    assert stall.status.description == "Operation aborted"
    errors = [
        dict(p.attributes or {}).get("error.type")
        for p in otel.histogram("gen_ai.client.operation.duration")
    ]
    assert sorted(map(str, errors)) == ["AbortError", "None"]


async def test_a_retry_under_one_invoke_agent(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    """The failed chat is an ERROR span; the back-off and the second chat follow it."""
    await retry_once(otel.context(latest_conventions=True, turn_spans=True))
    spans = otel.finished()
    assert tree(spans) == [
        ["invoke_agent", "INTERNAL", INVOKE, "UNSET", [
            ["pi.harness.turn", "INTERNAL", {}, "UNSET", [
                ["chat m", "CLIENT", _chat("error", error="ProviderError"), "ERROR", []],
            ]],
            ["pi.harness.sleep", "INTERNAL", {}, "UNSET", []],
            ["pi.harness.turn", "INTERNAL", {}, "UNSET", [
                ["chat m", "CLIENT", _chat("stop", (7, 3)), "UNSET", []],
            ]],
        ]],
    ]  # fmt: skip
    invoke = next(s for s in spans if s.name == "invoke_agent")
    assert [e.name for e in invoke.events] == ["pi.harness.retry_scheduled", "pi.harness.retry_end"]
    failed = next(s for s in spans if s.status.status_code is StatusCode.ERROR)
    assert failed.status.description == "overloaded_error"


async def test_compaction_spans_keep_pis_names(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    """A threshold compaction is a step of its invoke_agent; a manual one is a root."""
    harness = await compactions(otel.context(turn_spans=True))
    roots = list(tree(otel.finished()))
    assert [r[0] for r in roots] == [
        "invoke_agent",
        "invoke_agent",
        "invoke_agent",
        "pi.harness.compaction",
    ]
    assert [c[0] for c in roots[1][4]] == ["pi.harness.turn", "pi.harness.step"]
    assert harness.session is not None
    conversation = {
        (s.attributes or {}).get("gen_ai.conversation.id")
        for s in otel.finished()
        if s.parent is None
    }
    assert conversation == {harness.session.id}


async def test_the_older_conventions_without_the_opt_in(
    otel: Otel, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without gen_ai_latest_experimental: gen_ai.system, and content as span events."""
    monkeypatch.delenv("OTEL_SEMCONV_STABILITY_OPT_IN", raising=False)
    await parallel_batch(otel.context(), capture_content=True)
    chat = next(s for s in otel.finished() if s.name == "chat m")
    attributes = chat.attributes or {}
    assert attributes["gen_ai.system"] == "scripted"
    assert "gen_ai.provider.name" not in attributes
    assert "gen_ai.input.messages" not in attributes
    assert [e.name for e in chat.events] == ["gen_ai.content.prompt", "gen_ai.content.completion"]
    prompt = chat.events[0].attributes or {}
    assert json.loads(str(prompt["gen_ai.prompt"]))[0]["role"] == "user"


async def test_the_latest_conventions_by_the_environment_with_content(
    otel: Otel, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OTEL_SEMCONV_STABILITY_OPT_IN and the capture variable: content in gen_ai.* attributes."""
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "http, gen_ai_latest_experimental")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
    await parallel_batch(otel.context())
    spans = otel.finished()
    chat = next(s for s in spans if s.name == "chat m")
    attributes = chat.attributes or {}
    assert attributes["gen_ai.provider.name"] == "scripted"
    messages = json.loads(str(attributes["gen_ai.input.messages"]))
    assert messages == [{"role": "user", "parts": [{"type": "text", "content": "go"}]}]
    assert "pi.ai.input.messages" not in attributes  # one copy of the content
    slow = next(s for s in spans if s.name == "execute_tool slow")
    assert json.loads(str((slow.attributes or {})["gen_ai.tool.call.arguments"])) == {"n": 1}


async def test_root_spans_join_the_applications_current_span(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    """invoke_agent is a child of the span the application has open around the prompt."""
    tracer = otel.tracer_provider.get_tracer("app")
    with tracer.start_as_current_span("request", kind=SpanKind.SERVER):
        await retry_once(otel.context())
    spans = otel.finished()
    app = next(s for s in spans if s.name == "request")
    invoke = next(s for s in spans if s.name == "invoke_agent")
    assert app.context is not None
    assert invoke.parent is not None
    assert invoke.parent.span_id == app.context.span_id
    assert trace.get_current_span() is trace.INVALID_SPAN  # nothing left attached
