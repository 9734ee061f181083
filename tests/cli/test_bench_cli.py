"""``benchmarks.bench_cli``: the scripted server's answers, and one pitrio run measured
(the same run against the real ``pi`` where it is installed)."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from benchmarks.bench_cli import PI, Server, answer, commands, oracle_path, run_one

from . import _pi_oracle as oracle
from ._pi import require_oracle


def _events(body: bytes) -> list[dict[str, Any]]:
    lines = body.decode().split("\n\n")
    return [json.loads(line[6:]) for line in lines if line.startswith("data: {")]


def test_the_tools_prompt_calls_read_until_enough_results() -> None:
    """``tools 2``: a read call per request until two tool results are back, then Done."""
    ask = {"role": "user", "content": "tools 2"}
    first = _events(answer({"messages": [ask]}))
    call = first[1]["choices"][0]["delta"]["tool_calls"][0]
    assert call["function"]["name"] == "read"
    assert json.loads(call["function"]["arguments"]) == {"path": "notes.txt"}
    one = [ask, {"role": "assistant"}, {"role": "tool", "content": "x"}]
    assert _events(answer({"messages": one}))[1]["choices"][0]["delta"]["tool_calls"]
    two = [*one, {"role": "assistant"}, {"role": "tool", "content": "x"}]
    texts = [e["choices"][0]["delta"].get("content") for e in _events(answer({"messages": two}))]
    assert "".join(t for t in texts if t) == "Done."


def test_the_chunks_prompt_streams_that_many_deltas() -> None:
    """``chunks 5``: five text deltas, the last one ``end.``."""
    events = _events(answer({"messages": [{"role": "user", "content": "chunks 5"}]}))
    texts = [e["choices"][0]["delta"].get("content") for e in events[1:-1]]
    assert texts == ["w0 ", "w1 ", "w2 ", "w3 ", "end."]


@pytest.mark.timeout(120)
def test_a_pitrio_tool_run_is_measured() -> None:
    """Two tool turns through ``python -m pitrio --mode json``: status 0, the answer's
    end printed (run_one checks both), a session written, CPU and RSS read."""
    with Server() as server:
        command = [sys.executable, "-m", "pitrio", "--provider", "local", "--model"]
        command += ["scripted", "--base-url", server.url, "--yes"]
        found = run_one("pitrio", command, "turn", deltas=10, url=server.url)
    assert found["session_bytes"] > 0
    assert found["stdout_bytes"] > 0
    assert found["cpu_ms"] > 0
    assert found["peak_rss_mb"] > 10


@pytest.mark.timeout(300)
def test_pi_runs_the_same_workload() -> None:
    """The real ``pi`` answers the 10k-delta workload's prompt (smaller) from the same
    server, so the two CLIs' rows measure the same work."""
    if not oracle.pi_available():
        require_oracle()  # skips locally, fails under CI, naming what is missing
    with Server() as server:
        pi = commands(oracle_path(PI), server.url)["pi"]
        found = run_one("pi", pi, "deltas", deltas=50, url=server.url)
    assert found["session_bytes"] > 0
    assert found["stdout_bytes"] > 0
