"""``python -m pitrio --mode json`` writes the lines ``pi --mode json`` writes.

The same scripted server answers both CLIs; pitrio's lines are compared field by field
(after normalizing ids, times and paths) with Pi's, recorded in
``tests/cli/data/json_pi.json`` (``python tests/cli/_pi_oracle.py record``), and with
the real CLI's when it is installed.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from . import _pi_oracle as oracle
from ._pi import require_oracle
from .test_rpc_client import differences

FIXTURE = oracle.DATA / "json_pi.json"
SCENARIOS: dict[str, tuple[str, list[str]]] = {
    "text": ("hello", []),
    "tool": ("read notes.txt", []),
    # An image read for a model without image input (the scripted model's): Pi's note.
    "image": ("read pixel.png", []),
    "error": ("fail", []),
    "retry": ("flaky json", []),
    "chunks": ("chunks 40", []),
    "no-session": ("hello", ["--no-session"]),
    # Over the compaction threshold after the answer: nothing older than what a
    # compaction keeps (no compaction), then a long answer (its prompt is summarised).
    "crowded": ("crowded 30", []),
    "crowded-long": ("crowded 90000", []),
    "overflow": ("overflow", []),  # nothing to summarise: the error stands
    # A compaction between two requests of a run, whose summary fails: the run goes on.
    "mid-run-compaction-fails": ("twice nosummary", []),
}


def run(who: str, server: oracle.OracleServer, root: Path, scenario: str) -> tuple[int, str]:
    prompt, extra = SCENARIOS[scenario]
    work = oracle.workspace(root)
    server.reset()
    if who == "pi":
        return oracle.run_json(
            [*oracle.pi_command(), *extra], oracle.pi_home(root, server.url), work, prompt
        )
    command = [*oracle.pitrio_command(server.url), *extra]
    return oracle.run_json(command, oracle.pitrio_env(root), work, prompt)


def normalize(stdout: str, root: Path) -> list[dict[str, Any]]:
    normalizer = oracle.Normalizer(root)
    return [normalizer(json.loads(line)) for line in stdout.splitlines()]


def comparable(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What must be equal. Left out: ``message_update.usage`` and an assistant
    ``message_start``'s ``content`` and ``responseId`` (Pi serializes them after the
    stream has moved on: they show whatever the first network read held), and the
    retry's ``delayMs`` (pitrio's jitter), and ``tool_execution_update`` (a command's
    output comes in as many updates as the pipe's reads return)."""
    view = []
    for line in lines:
        line = json.loads(json.dumps(line))
        if line["type"] == "tool_execution_update":
            continue
        if line["type"] == "message_update":
            line.pop("usage")
        if line["type"] == "message_start" and line["message"]["role"] == "assistant":
            line["message"]["content"] = []
            line["message"].pop("responseId", None)
        if line["type"] == "auto_retry_start":
            line["delayMs"] = 0
        view.append(line)
    return view


def record(server: oracle.OracleServer) -> None:
    """Record Pi's lines for every scenario into ``json_pi.json``."""

    def record_one(root: Path, scenario: str) -> dict[str, Any]:
        status, stdout = run("pi", server, root, scenario)
        return {
            "status": status,
            "bytes": len(stdout.encode()) - len(str(root).encode()) * stdout.count(str(root)),
            "lines": normalize(stdout, root),
        }

    data = {"recordedFrom": "pi --mode json (Pi's coding agent 0.85.0)"}
    oracle.write_fixture(FIXTURE, {**data, **oracle.record_each(SCENARIOS, record_one)})


@pytest.fixture(scope="module")
def server() -> Any:
    with oracle.OracleServer() as running:
        yield running


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    return oracle.read_fixture(FIXTURE)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_json_lines_are_pis(
    scenario: str, server: oracle.OracleServer, recorded: dict[str, Any], tmp_path: Path
) -> None:
    status, stdout = run("pitrio", server, tmp_path, scenario)
    expected = recorded[scenario]
    assert status == expected["status"]  # 0 also when the run ended in an error
    ours = normalize(stdout, tmp_path)
    found = differences(comparable(expected["lines"]), comparable(ours))
    assert not found, "\n".join(found[:40])


def test_the_recording_is_what_pi_writes_now(
    server: oracle.OracleServer, recorded: dict[str, Any], tmp_path: Path
) -> None:
    if not oracle.pi_available():
        require_oracle()  # skips locally, fails under CI, naming what is missing
    status, stdout = run("pi", server, tmp_path, "tool")
    assert status == recorded["tool"]["status"]
    found = differences(
        comparable(recorded["tool"]["lines"]), comparable(normalize(stdout, tmp_path))
    )
    assert not found, "\n".join(found[:40])


def test_a_message_update_costs_its_delta(
    server: oracle.OracleServer, recorded: dict[str, Any], tmp_path: Path
) -> None:
    """No snapshot per update: a 40-chunk answer is within 5% of Pi's bytes, and every
    ``message_update`` line is small whatever the answer's length so far."""
    _, stdout = run("pitrio", server, tmp_path, "chunks")
    size = len(stdout.encode()) - len(str(tmp_path).encode()) * stdout.count(str(tmp_path))
    assert size <= recorded["chunks"]["bytes"] * 1.05
    updates = [line for line in stdout.splitlines() if '"message_update"' in line]
    assert len(updates) == 42  # text_start, 40 deltas, text_end
    assert max(len(u) for u in updates[:-1]) < 400
    header = json.loads(stdout.splitlines()[0])
    assert header["type"] == "session"
    assert header["version"] == 3


def test_message_start_carries_the_response_id(server: oracle.OracleServer, tmp_path: Path) -> None:
    _, stdout = run("pitrio", server, tmp_path, "text")
    starts = [json.loads(line) for line in stdout.splitlines() if '"message_start"' in line]
    assistant = [s for s in starts if s["message"]["role"] == "assistant"]
    assert assistant
    assert assistant[0]["message"]["responseId"] == "chatcmpl-scripted"


def test_an_interrupt_ends_the_run_as_aborted(server: oracle.OracleServer, tmp_path: Path) -> None:
    """Ctrl-C mid-answer: the aborted message and the closing events, exit status 130
    (Pi's json mode has no SIGINT handler: it dies with the signal, writing nothing more;
    docs/deviations.md)."""
    work = oracle.workspace(tmp_path)
    server.reset()
    command = [*oracle.pitrio_command(server.url), "--mode", "json", "-p", "hang"]
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, text=True, env=oracle.pitrio_env(tmp_path), cwd=work
    )
    assert proc.stdout is not None
    lines = []
    with proc:
        for raw in proc.stdout:
            lines.append(json.loads(raw))
            if lines[-1].get("assistantMessageEvent", {}).get("type") == "text_delta":
                proc.send_signal(signal.SIGINT)
                break
        lines += [json.loads(raw) for raw in proc.stdout]
        assert proc.wait(timeout=30) == 130
    assert [line["type"] for line in lines[-4:]] == [
        "message_end",
        "turn_end",
        "agent_end",
        "agent_settled",
    ]
    assert lines[-4]["message"]["stopReason"] == "aborted"
    assert lines[-4]["message"]["content"] == [{"type": "text", "text": "Start"}]


def test_numbers_are_written_as_javascript_writes_them() -> None:
    from pitrio.cli._json_mode import dumps

    value = {"a": 0.0, "b": 1e-05, "c": 1.5, "d": [2.5e-7, 1e21, "é"], "e": 123456789.0}
    assert dumps(value) == '{"a":0,"b":0.00001,"c":1.5,"d":[2.5e-7,1e+21,"é"],"e":123456789}'


@pytest.mark.parametrize(
    ("reason", "text"),
    [
        ("threshold", "Auto-compaction failed: Summarization failed: overloaded"),
        ("overflow", "Context overflow recovery failed: Summarization failed: overloaded"),
    ],
)
def test_a_failed_automatic_compaction_says_what_pis_coding_agent_says(
    reason: str, text: str
) -> None:
    """``compaction_end`` of a compaction the agent started itself carries Pi's
    ``Auto-compaction failed: …`` / ``Context overflow recovery failed: …``
    (``agent-session.js``), the harness's error after it."""
    from pitrio.cli._json_mode import PiEvents
    from pitrio.harness import CompactionEnd

    lines: list[dict[str, Any]] = []
    events = PiEvents(lines.append, harness=lambda: None, session=lambda: None)  # type: ignore[arg-type,return-value]
    events(
        CompactionEnd(
            reason=reason,  # type: ignore[arg-type]
            status="failed",
            error_message="Summarization failed: overloaded",
        )
    )
    assert lines == [
        {
            "type": "compaction_end",
            "reason": reason,
            "aborted": False,
            "willRetry": False,
            "errorMessage": text,
        }
    ]
