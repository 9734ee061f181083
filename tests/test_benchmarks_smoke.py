"""Smoke test of the benchmark harness: every workload, tiny, checked for correctness only.

No timing is asserted (timings come from the real clock and mean nothing here); what
is checked is that each workload does the work it claims: the final answer, the
exact number of tool calls, the text deltas a subscriber sees.
"""

from __future__ import annotations

import json

import pytest
import trio
import trio.testing

from benchmarks.bench_loop import (
    BenchmarkError,
    Workload,
    main,
    measure_batch,
    measure_concurrent,
    measure_memory,
    measure_stream,
    measure_tool,
    measure_turn,
    run_many,
    run_once,
    stream_once,
)
from pitrio import Agent


async def test_run_once_checks_answer_and_tool_calls() -> None:
    w = Workload(turns=3, k=2)
    agent = await run_once(w)
    assert w.calls == 6
    roles = [m.role for m in agent.state.messages]
    # user, then 3 x (assistant + 2 tool results), then the final answer.
    assert roles == ["user", *(["assistant", "toolResult", "toolResult"] * 3), "assistant"]
    assert agent.state.messages[-1].text == "done"
    ids = [m.tool_call_id for m in agent.state.messages if m.role == "toolResult"]
    assert ids == [f"c{t}_{j}" for t in range(3) for j in range(2)]


async def test_minimal_model_runs_the_same_script() -> None:
    scripted = await run_once(Workload(turns=2, k=3))
    minimal = await run_once(Workload(turns=2, k=3, model="minimal"))

    def shape(agent: Agent) -> list[tuple[str, str]]:
        return [
            (m.role, m.tool_call_id if m.role == "toolResult" else m.stop_reason)
            for m in agent.state.messages[1:]
        ]

    assert shape(minimal) == shape(scripted)
    assert len(minimal.state.messages) == 1 + 2 * (1 + 3) + 1


async def test_run_once_detects_a_wrong_tool_call_count() -> None:
    class Miscounting(Workload):
        def agent(self) -> Agent:
            agent = super().agent()
            self.calls -= 1  # one call "lost"
            return agent

    with pytest.raises(BenchmarkError, match="executed 3 tool calls, expected 4"):
        await run_once(Miscounting(turns=2, k=2))


async def test_run_many_counts_every_run() -> None:
    w = Workload(turns=2, k=3)
    assert await run_many(w, 7) == 7
    assert w.calls == 7 * 2 * 3


async def test_stream_once_sees_every_delta() -> None:
    assert await stream_once(50) == 50
    assert await stream_once(50, "minimal") == 50


async def test_measure_turn_and_tool() -> None:
    turn = await measure_turn(turns=2, k=2, reps=2, warmups=1)
    assert turn["tool_calls_per_run"] == 4
    assert turn["us_per_turn"] > 0
    tool = await measure_tool(turns=2, reps=2, warmups=1)
    assert tool["k8_ms"] > 0
    assert tool["k1_ms"] > 0


async def test_measure_concurrent() -> None:
    res = await measure_concurrent(runs=5, turns=2, k=2, reps=1, model="minimal")
    assert "error" not in res
    assert res["runs"] == 5
    assert res["runs_per_s"] > 0


async def test_measure_batch_runs_tools_in_parallel(
    autojump_clock: trio.testing.MockClock,
) -> None:
    start = trio.current_time()
    res = await measure_batch(k=4, sleep=10.0, reps=2)
    # Three runs (one warm-up) of four 10 s tools: 30 s of virtual time if the tools
    # of a batch overlap, 120 s if they ran one after another.
    assert trio.current_time() - start == pytest.approx(30.0, abs=1.0)
    assert res["k"] == 4


async def test_measure_stream() -> None:
    res = await measure_stream(deltas=30, reps=1)
    assert "error" not in res
    assert res["delta_events_seen"] == 30


async def test_measure_memory() -> None:
    res = await measure_memory(agents=5)
    assert res["agents"] == 5
    assert res["bytes_per_idle_agent"] > res["bytes_per_empty_agent"] > 0


def test_cli_json(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["turn", "--json", "--turns", "1", "--k", "2", "--reps", "1"]
    assert main(argv) == 0
    (line,) = capsys.readouterr().out.splitlines()
    res = json.loads(line)
    assert res["metric"] == "turn"
    assert res["tool_calls_per_run"] == 2


def test_cli_minimal_model(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["tool", "--json", "--model", "minimal", "--turns", "1", "--reps", "1"]
    assert main(argv) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["model"] == "minimal"
    assert res["k8_ms"] > 0


def test_cli_human(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stream", "--deltas", "20", "--reps", "1"]) == 0
    assert "text-delta events/s" in capsys.readouterr().out


def test_scaling_benchmark_rows(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import bench_scaling

    argv = ["--json", "--text", "5,20", "--toolargs", "300", "--sse-mb", "0.01", "--runs", "1"]
    assert bench_scaling.main(argv) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    apis = list(bench_scaling.APIS)
    expected = [
        (workload, api, size)
        for api in apis
        for workload, size in (("text", 5), ("text", 20), ("toolargs", 300))
    ]
    assert [(r["workload"], r["api"], r["size"]) for r in rows] == [*expected, ("sse", "-", 0.01)]
    assert all(r["value"] is not None and r["value"] > 0 for r in rows)


async def test_scaling_benchmark_checks_the_tool_call(monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks import bench_scaling

    body = bench_scaling.sse_body(
        "anthropic-messages", bench_scaling.anthropic_tool_events('{"path": "x", "content": "y"}')
    )
    message, events, _ = await bench_scaling.stream_once("anthropic-messages", body)
    assert message.tool_calls[0].arguments == {"path": "x", "content": "y"}
    assert events == 6  # start, toolcall start, 2 deltas, toolcall end, done
    # Arguments that the stream does not deliver are caught.
    monkeypatch.setitem(
        bench_scaling.TOOL_EVENT_BUILDERS,
        "anthropic-messages",
        lambda text: bench_scaling.anthropic_tool_events(text[:-2] + "}"),
    )
    with pytest.raises(bench_scaling.BenchmarkError, match="bad tool call"):
        await bench_scaling.measure_toolargs("anthropic-messages", 300)
