"""MCP tool calls as spans: golden trees with a real MCP server, Pi's vocabulary and the
OpenTelemetry conventions (``execute_tool`` with MCP's ``mcp.method.name``,
``mcp.session.id`` and ``network.transport``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import trio
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from pitrio import Model
from pitrio.harness import Harness
from pitrio.mcp import HttpServer, McpToolset, tool_name
from pitrio.telemetry import InMemoryTelemetryContext, OpenTelemetryContext, instrument
from pitrio.testing import ScriptedModel, ScriptedResponse

from .conftest import stdio

pytestmark = [
    pytest.mark.filterwarnings("ignore:Async generator 'httpx2:ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

MODEL = Model(id="m", api="scripted", provider="scripted")
LIMIT = 60


def _script(server: str) -> ScriptedModel:
    """One turn calling add and the error tool in parallel, a resource read, an answer."""
    return ScriptedModel(
        [
            ScriptedResponse.tool_calls(
                ("c1", tool_name(server, "add"), {"a": 1, "b": 2}),
                ("c2", tool_name(server, "boom"), {}),
            ),
            ScriptedResponse.tool_calls(
                ("c3", "mcp__read_resource", {"server": server, "uri": "notes://readme"})
            ),
            ScriptedResponse.text("done"),
        ]
    )


async def _run(config: Any, telemetry: Any) -> None:
    async with McpToolset([config]) as toolset:
        (server,) = toolset.servers
        harness = Harness(model=MODEL, stream_fn=_script(server.name), tools=[toolset])
        instrument(harness, telemetry)
        await harness.prompt("go")


@pytest.fixture
def exporter() -> Iterator[tuple[InMemorySpanExporter, TracerProvider]]:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    yield spans, provider
    provider.shutdown()


MCP_KEYS = (
    "gen_ai.operation.name",
    "gen_ai.tool.name",
    "gen_ai.tool.call.id",
    "mcp.method.name",
    "mcp.protocol.version",
    "network.transport",
    "network.protocol.name",
    "pi.mcp.server",
    "pi.mcp.tool",
    "error.type",
)


def _tools(spans: list[ReadableSpan]) -> dict[str, Any]:
    """The execute_tool spans by call id: [name, MCP attributes, status, parent name]."""
    by_id = {s.context.span_id: s for s in spans if s.context is not None}
    out: dict[str, Any] = {}
    for span in spans:
        attributes = dict(span.attributes or {})
        if attributes.get("gen_ai.operation.name") != "execute_tool":
            continue
        chosen = {k: attributes[k] for k in MCP_KEYS if k in attributes}
        parent = by_id[span.parent.span_id].name if span.parent is not None else None
        out[str(attributes["gen_ai.tool.call.id"])] = [
            span.name,
            chosen,
            span.status.status_code.name,
            parent,
            "mcp.session.id" in attributes,
        ]
    return out


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_mcp_calls_as_genai_spans(
    transport: str,
    exporter: tuple[InMemorySpanExporter, TracerProvider],
    http_server: Callable[[str], HttpServer],
) -> None:
    """Each MCP call is an execute_tool span under invoke_agent with MCP's attributes; the
    error result is an ERROR span; a resource read says resources/read."""
    spans, provider = exporter
    config = stdio("tools") if transport == "stdio" else http_server("tools")
    with trio.fail_after(LIMIT):
        await _run(config, OpenTelemetryContext(tracer_provider=provider, latest_conventions=True))
    finished = list(spans.get_finished_spans())
    assert [s.name for s in finished if s.parent is None] == ["invoke_agent"]
    name = config.name
    version = next(
        str(s.attributes["mcp.protocol.version"])
        for s in finished
        if s.attributes and "mcp.protocol.version" in s.attributes
    )
    wire = (
        {"network.transport": "pipe"}
        if transport == "stdio"
        else {"network.transport": "tcp", "network.protocol.name": "http"}
    )
    common = {"gen_ai.operation.name": "execute_tool"}
    assert _tools(finished) == {
        "c1": [
            f"execute_tool {tool_name(name, 'add')}",
            {**common, "gen_ai.tool.name": tool_name(name, "add"), "gen_ai.tool.call.id": "c1",
             "mcp.method.name": "tools/call", "mcp.protocol.version": version, **wire,
             "pi.mcp.server": name, "pi.mcp.tool": "add"},
            "UNSET", "invoke_agent", transport == "http",
        ],
        "c2": [
            f"execute_tool {tool_name(name, 'boom')}",
            {**common, "gen_ai.tool.name": tool_name(name, "boom"), "gen_ai.tool.call.id": "c2",
             "mcp.method.name": "tools/call", "error.type": "ToolError"},
            "ERROR", "invoke_agent", False,
        ],
        "c3": [
            "execute_tool mcp__read_resource",
            {**common, "gen_ai.tool.name": "mcp__read_resource", "gen_ai.tool.call.id": "c3",
             "mcp.method.name": "resources/read", "mcp.protocol.version": version, **wire,
             "pi.mcp.server": name},
            "UNSET", "invoke_agent", transport == "http",
        ],
    }  # fmt: skip


async def test_mcp_calls_in_pis_vocabulary() -> None:
    """The reference adapter sees the same calls as pi.harness.tool spans with pi.mcp.*."""
    memory = InMemoryTelemetryContext()
    with trio.fail_after(LIMIT):
        await _run(stdio("tools"), memory)
    tools = {
        s.attributes["pi.tool.call_id"]: s
        for s in memory.get_spans()
        if s.name == "pi.harness.tool"
    }
    assert set(tools) == {"c1", "c2", "c3"}
    add = tools["c1"].attributes
    assert add["pi.mcp.method"] == "tools/call"
    assert add["pi.mcp.server"] == "tools"
    assert add["pi.mcp.tool"] == "add"
    assert add["pi.mcp.transport"] == "stdio"
    assert tools["c2"].attributes["pi.tool.is_error"] is True
    assert tools["c2"].status.status == "error"
    assert tools["c3"].attributes["pi.mcp.method"] == "resources/read"
