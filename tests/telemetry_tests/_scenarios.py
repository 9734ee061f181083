"""Harness runs shared by the span-tree tests (scripted model, virtual time)."""

from __future__ import annotations

from typing import Any

import trio

from pitrio import Model, Tool, ToolResult, Usage, text_result
from pitrio.harness import CompactionSettings, Harness, InMemorySessionStore
from pitrio.telemetry import TelemetryContext, instrument
from pitrio.testing import ScriptedModel, ScriptedResponse

ROOMY = Model(id="m", api="scripted", provider="scripted", context_window=200_000)
SMALL_WINDOW = Model(id="m", api="scripted", provider="scripted", context_window=1000)


def sleeper(name: str, seconds: float | None, text: str = "done") -> Tool:
    """A tool that sleeps ``seconds`` (``None``: until cancelled) and answers ``text``."""

    async def execute(call_id: str, params: Any, signal: Any, on_update: Any) -> ToolResult:
        if seconds is None:
            await trio.sleep_forever()
        await trio.sleep(seconds)
        return text_result(text)

    return Tool(name=name, description=name, execute=execute, parameters={"type": "object"})


def _usage(input: int, output: int) -> Usage:
    return Usage(input=input, output=output, total_tokens=input + output)


async def parallel_batch(telemetry: TelemetryContext, **kwargs: Any) -> Harness:
    """Two tools in one parallel batch: ``slow`` (2 s) starts first, ``fast`` (1 s) ends first."""
    scripted = ScriptedModel(
        [
            ScriptedResponse.tool_calls(
                ("c1", "slow", {"n": 1}), ("c2", "fast", {}), usage=_usage(10, 5)
            ),
            ScriptedResponse.text("done", usage=_usage(30, 2)),
        ]
    )
    harness = Harness(
        model=ROOMY, stream_fn=scripted, tools=[sleeper("slow", 2), sleeper("fast", 1)]
    )
    instrument(harness, telemetry, **kwargs)
    await harness.prompt("go")
    return harness


async def abort_in_a_tool(telemetry: TelemetryContext) -> Harness:
    """A batch where ``fast`` finishes and ``stall`` is cut off by abort()."""
    scripted = ScriptedModel([ScriptedResponse.tool_calls(("f1", "fast", {}), ("s1", "stall", {}))])
    harness = Harness(
        model=ROOMY, stream_fn=scripted, tools=[sleeper("fast", 1), sleeper("stall", None)]
    )
    instrument(harness, telemetry)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(harness.prompt, "go")
        await trio.sleep(5)
        harness.abort()
    return harness


async def retry_once(telemetry: TelemetryContext) -> Harness:
    """An overloaded error, an automatic retry after 2 s (Pi's base delay), an answer."""
    scripted = ScriptedModel(
        [
            ScriptedResponse(stop_reason="error", error_message="overloaded_error"),
            ScriptedResponse.text("ok", usage=_usage(7, 3)),
        ]
    )
    harness = Harness(model=ROOMY, stream_fn=scripted, random=lambda: 0.0)
    instrument(harness, telemetry)
    await harness.prompt("go")
    return harness


async def compactions(telemetry: TelemetryContext) -> Harness:
    """A prompt whose run ends over the threshold (compacted after its answer); a prompt
    whose context is still over it (the kept answer's usage: compacted before its first
    request, as Pi's harness checks every checkpoint); a manual compact()."""
    session = await InMemorySessionStore().create(cwd="/tmp")
    answers = [
        ScriptedResponse.text("a" * 400, usage=_usage(300, 10)),
        ScriptedResponse.text("b" * 400, usage=_usage(900, 10)),
        ScriptedResponse.text("c", usage=_usage(100, 10)),
    ]

    def respond(context: Any) -> ScriptedResponse:
        if context.system_prompt.startswith("You are a context summarization assistant"):
            return ScriptedResponse.text("SUMMARY")  # each summary and turn prefix asked
        return answers.pop(0)

    scripted = ScriptedModel(respond)
    harness = Harness(
        model=SMALL_WINDOW,
        stream_fn=scripted,
        session=session,
        compaction=CompactionSettings(reserve_tokens=200, keep_recent_tokens=50),
    )
    instrument(harness, telemetry)
    await harness.prompt("one " * 100)
    await harness.prompt("two " * 100)  # over the threshold: compacted after the run
    await harness.prompt("three " * 100)  # the compaction summarises the kept answer
    await harness.compact()
    return harness
