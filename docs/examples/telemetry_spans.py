"""A harness's run as spans: Pi's vocabulary in memory, then OpenTelemetry's GenAI spans.

Needs the ``otel`` extra and the OpenTelemetry SDK (``pip install 'pitrio[otel]'
opentelemetry-sdk``). Run it: ``python docs/examples/telemetry_spans.py``.
"""

from __future__ import annotations

from typing import Any

import trio
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from pitrio import Model, Tool, ToolResult, Usage, text_result
from pitrio.harness import Harness
from pitrio.telemetry import (
    InMemoryTelemetryContext,
    OpenTelemetryContext,
    TelemetryContext,
    instrument,
)
from pitrio.testing import ScriptedModel, ScriptedResponse

MODEL = Model(id="demo-model", api="scripted", provider="scripted")


async def lookup(call_id: str, params: Any, signal: Any, on_update: Any) -> ToolResult:
    await trio.sleep(0.1)
    return text_result(f"{params['city']}: sunny")


LOOKUP = Tool(
    name="lookup",
    description="Weather of a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
    execute=lookup,
)


async def run(telemetry: TelemetryContext) -> None:
    """One prompt: two parallel tool calls, then the answer."""
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(
                ("c1", "lookup", {"city": "Lisbon"}),
                ("c2", "lookup", {"city": "Porto"}),
                usage=Usage(input=50, output=12),
            ),
            ScriptedResponse.text("Sunny in both.", usage=Usage(input=80, output=5)),
        ]
    )
    harness = Harness(model=MODEL, stream_fn=model, tools=[LOOKUP])
    instrument(harness, telemetry)
    await harness.prompt("Weather in Lisbon and Porto?")


def show(spans: list[ReadableSpan]) -> None:
    """Print the span tree, children in start order."""
    ids = {s.context.span_id: s for s in spans if s.context is not None}

    def depth(span: ReadableSpan) -> int:
        parent = span.parent
        return 0 if parent is None or parent.span_id not in ids else 1 + depth(ids[parent.span_id])

    for span in sorted(spans, key=lambda s: s.start_time or 0):
        attributes = span.attributes or {}
        model = attributes.get("gen_ai.request.model") or attributes.get("gen_ai.tool.call.id")
        print(f"{'  ' * depth(span)}{span.name}" + (f" [{model}]" if model else ""))


async def main() -> None:
    # Pi's contract, recorded in memory (tests, local diagnostics).
    memory = InMemoryTelemetryContext()
    await run(memory)
    for span in memory.get_spans():
        print(span.id, span.parent_id, span.name)

    # The same run on the OpenTelemetry SDK (swap the exporter for OTLP in production).
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    otel = OpenTelemetryContext(
        tracer_provider=tracer_provider,
        meter_provider=MeterProvider(metric_readers=[reader]),
        latest_conventions=True,
    )
    await run(otel)
    show(list(exporter.get_finished_spans()))
    data = reader.get_metrics_data()
    assert data is not None
    for metric in data.resource_metrics[0].scope_metrics[0].metrics:
        print(metric.name, metric.unit)


if __name__ == "__main__":
    trio.run(main)
