"""Smoke test of the benchmark harness: every workload, tiny, checked for correctness only.

No timing is asserted (timings come from the real clock and mean nothing here); what
is checked is that each workload does the work it claims: the final answer, the
exact number of tool calls, the text deltas a subscriber sees.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

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

ROOT = Path(__file__).resolve().parent.parent


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


# --------------------------------------------------------------------------------------
# python -m benchmarks (the harness): workloads in-process, pure helpers, one quick run


async def test_abort_workload_settles_every_case() -> None:
    from benchmarks._workloads import measure_abort

    res = await measure_abort(reps=2)
    for case in ("tool_cooperative", "tool_ignores_signal", "provider"):
        assert 0 < res[f"{case}_p50_ms"] <= res[f"{case}_p99_ms"]
    assert res["p99_ms_max"] == max(res[k] for k in res if k.endswith("_p99_ms"))


async def test_transcript_workload_runs_one_turn_per_length() -> None:
    from benchmarks._workloads import measure_transcript

    res = await measure_transcript(lengths=(0, 3, 20), reps=2)
    assert res["lengths"] == [0, 3, 20]
    assert all(res[f"us_per_turn_{n}"] > 0 for n in (0, 3, 20))


def _measurement(subject: str, metric: str, value: float, rss: float = 50.0) -> Any:
    from benchmarks._harness import HEADLINES, Measurement

    return Measurement(subject, metric, 1, {HEADLINES[metric].key: value}, rss, 1.0)


def test_ratios_point_the_right_way() -> None:
    from benchmarks._harness import ratios, summarise

    ms = [
        _measurement("pitrio", "turn", 100.0),
        _measurement("pi_node", "turn", 50.0),
        _measurement("pitrio", "concurrent", 600.0, rss=40.0),
        _measurement("pi_py_port", "concurrent", 300.0, rss=80.0),
        _measurement("pitrio", "turn", 300.0),  # a second round: the median is 200
    ]
    summary = summarise(ms)
    assert summary["turn"]["pitrio"]["median"] == 200.0
    assert summary["turn"]["pitrio"]["n"] == 2
    got = {(r["metric"], r["peer"]): r["pitrio_advantage"] for r in ratios(summary)}
    assert got == {
        ("turn", "pi_node"): 0.25,  # lower is better: pitrio 4x slower
        ("concurrent", "pi_py_port"): 2.0,  # higher is better
        ("concurrent_rss", "pi_py_port"): 2.0,  # half the RSS
    }


def test_no_ratio_of_a_negative_difference() -> None:
    from benchmarks._harness import ratios, summarise

    # per-tool-call cost is a difference of two medians: noise can make it negative
    ms = [_measurement("pitrio", "tool", 50.0), _measurement("pi_node", "tool", -13.6)]
    assert ratios(summarise(ms)) == []


def test_targets_marked_met_not_met_or_not_measured() -> None:
    from benchmarks._harness import summarise, targets

    ms = [
        _measurement("pitrio", "concurrent", 700.0, rss=40.0),
        _measurement("pi_py_port", "concurrent", 300.0, rss=30.0),
    ]
    marks = {t["target"]: t["met"] for t in targets(summarise(ms), ms, None)}
    assert len(marks) == 13

    def mark(start: str) -> bool | None:
        found: list[bool | None] = [m for t, m in marks.items() if t.startswith(start)]
        assert len(found) == 1, start
        return found[0]

    assert mark("1,000 concurrent runs: ≥ 2x") is True
    assert mark("1,000 concurrent runs: peak RSS") is False
    assert mark("from pitrio import Agent ≤ 100 ms") is None
    assert mark("from pitrio import Agent ≤ 1.1x import trio") is None
    assert mark("≥ 2x fewer instructions than pi-ai-python for a one-turn prompt") is None
    assert mark("concurrent: ≥ Pi on Node's runs/s") is None


_INSTR: Any = {
    "turns": 20,
    "reps": 11,
    "pitrio": {
        "per_turn_k4": 500_000.0, "per_turn_k1": 200_000.0, "per_tool_call": 100_000.0,
        "one_turn_prompt": 300_000.0, "prompt_extra": 150_000.0,
        "import": 10_000_000.0, "import_agent": 480_000_000.0, "import_trio": 400_000_000.0,
    },
    "pi_py_port": {
        "per_turn_k4": 1_200_000.0, "per_turn_k1": 400_000.0, "per_tool_call": 200_000.0,
        "one_turn_prompt": 630_000.0, "prompt_extra": 190_000.0,
    },
}  # fmt: skip


def test_issue_21_targets_from_instructions_and_node_in_one_sitting() -> None:
    from benchmarks._harness import summarise, targets

    ms = [
        _measurement("pitrio", "concurrent", 1500.0),
        _measurement("pi_node", "concurrent", 1600.0),
        _measurement("pitrio", "stream", 700_000.0),
        _measurement("pi_node", "stream", 600_000.0),
    ]
    found = {t["target"]: t for t in targets(summarise(ms), ms, _INSTR)}
    prompt = found["≥ 2x fewer instructions than pi-ai-python for a one-turn prompt"]
    assert prompt["met"] is True
    assert "300,000 vs 630,000 instructions (2.10x" in prompt["figure"]
    assert "on top of the turn 150,000 vs 190,000" in prompt["figure"]
    start = found["from pitrio import Agent ≤ 1.1x import trio (instructions)"]
    assert start["met"] is False
    assert "480,000,000 vs 400,000,000 instructions (1.20x)" in start["figure"]
    assert found["concurrent: ≥ Pi on Node's runs/s in the same sitting"]["met"] is False
    assert found["stream: ≥ Pi on Node's deltas/s in the same sitting"]["met"] is True


def test_markdown_has_the_prompt_and_import_rows() -> None:
    from benchmarks._harness import build_report, markdown

    meta = {
        "date": "2026-12-02T02:00:00+00:00", "command": "python -m benchmarks",
        "commit": "abc", "rounds": 1, "machine": "x86_64", "loadavg": "1.00",
    }  # fmt: skip
    report = build_report(meta, [_measurement("pitrio", "turn", 100.0)], _INSTR)
    text = markdown(report)
    assert "a process running the workload 11 times minus one running it once" in text
    assert "| one-turn prompt (a new agent, `prompt()`, T=0) | 300,000 | 630,000 |" in text
    assert "| the prompt on top of its turn | 150,000 | 190,000 |" in text
    assert "| `import trio` | 400,000,000 |  |" in text
    assert "| `import pitrio` | 10,000,000 |  |" in text
    assert "`from pitrio import Agent` is 1.20x `import trio`" in text
    by = {r["metric"]: r["pitrio_advantage"] for r in report["ratios"]}
    assert by["instr_prompt"] == pytest.approx(2.1)


def test_update_markdown_replaces_only_its_section(tmp_path: Path) -> None:
    from benchmarks._harness import MD_BEGIN, MD_END, update_markdown

    path = tmp_path / "results.md"
    path.write_text("# Results\n\n## Scaling\n\nkept\n")
    update_markdown(path, f"{MD_BEGIN}\nfirst\n{MD_END}\n")
    update_markdown(path, f"{MD_BEGIN}\nsecond\n{MD_END}\n")
    text = path.read_text()
    assert "second" in text
    assert "first" not in text
    assert text.count(MD_BEGIN) == 1
    assert text.startswith("# Results\n")
    assert text.endswith("## Scaling\n\nkept\n")


def test_harness_missing_peers_dir_is_a_clear_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--peers", "--peers-dir",
         str(tmp_path / "nowhere"), "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert "no peers-bench at" in done.stderr
    assert "--peers-dir" in done.stderr


def test_harness_quick_run_covers_every_workload(tmp_path: Path) -> None:
    from benchmarks._harness import METRICS

    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((tmp_path / "latest.json").read_text())
    ms = report["measurements"]
    assert not [m for m in ms if m["error"]]
    assert sorted({m["metric"] for m in ms if m["subject"] == "pitrio"}) == sorted(METRICS)
    has_openai = importlib.util.find_spec("openai") is not None  # the `bench` extra
    assert {(m["subject"], m["metric"]) for m in ms if m["subject"] != "pitrio"} == (
        {("openai_sdk", "sse")} if has_openai else set()
    )
    for metric in METRICS:
        cell = report["summary"][metric]["pitrio"]
        assert cell["n"] == 1, metric
        assert cell["median"] > 0, metric
    by = {(m["subject"], m["metric"]): m for m in ms}
    assert by["pitrio", "concurrent"]["peak_rss_mb"] > 5  # the child's RSS, from wait4
    assert by["pitrio", "turn"]["result"]["tool_calls_per_run"] == 2 * 2
    assert by["pitrio", "stream"]["result"]["delta_events_seen"] == 200
    assert by["pitrio", "transcript"]["result"]["lengths"] == [2, 10]
    assert by["pitrio", "import"]["result"]["help_process_ms"] > 0
    assert by["pitrio", "sse"]["result"]["client"] == "pitrio"
    if has_openai:
        assert by["openai_sdk", "sse"]["result"]["client"] == "openai"
    assert [r["peer"] for r in report["ratios"]] == (["openai_sdk"] if has_openai else [])
    assert len(report["targets"]) == 13
    assert {t["met"] for t in report["targets"]} <= {True, False, None}
    # the same sitting, rebuilt from its record: the same summary and targets
    again = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--from-json", str(tmp_path / "latest.json"),
         "--out", str(tmp_path / "again")],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-2000:]
    rebuilt = json.loads((tmp_path / "again" / "latest.json").read_text())
    assert rebuilt["summary"] == report["summary"]
    assert rebuilt["targets"] == report["targets"]
    if importlib.util.find_spec("matplotlib") is not None:
        assert (tmp_path / "ratios.png").stat().st_size > 1000
        assert (tmp_path / "ratios.svg").read_text().lstrip().startswith("<?xml")


@pytest.mark.parametrize("subject", ["agent", "harness", "jsonl", "pi", "sqlite", "memory"])
async def test_bench_harness_runs_do_their_work(subject: str, tmp_path: Path) -> None:
    from benchmarks.bench_harness import run_subject

    entries = await run_subject(subject, turns=2, k=2, runs=2, where=tmp_path)
    # Each run's session holds its 8 messages: the prompt, 2 x (tool call + 2 results), done.
    assert entries == (0 if subject in ("agent", "harness") else 2 * 8)


async def test_bench_harness_refuses_an_unknown_subject(tmp_path: Path) -> None:
    from benchmarks.bench_harness import run_subject

    with pytest.raises(BenchmarkError, match="unknown subject 'nope'; pick one of agent"):
        await run_subject("nope", turns=1, k=1, runs=1, where=tmp_path)
