"""``python -m pitrio -p`` into a pipe writes to stdout what ``pi -p`` writes there.

Pi's print mode (``print-mode.js``) writes the last answer's text parts once the run is
over, and a failed run's error to stderr with exit status 1. pitrio writes the same
stdout; its transcript (which ``pi -p`` does not show) goes to stderr, after which the
error line Pi writes is found there too. Pi's output is recorded in
``tests/cli/data/print_pi.json`` (``python tests/cli/_pi_oracle.py record``) and checked
against the real CLI when it is installed.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from . import _pi_oracle as oracle
from ._pi import require_oracle

FIXTURE = oracle.DATA / "print_pi.json"
SCENARIOS: dict[str, str] = {
    "text": "hello",
    "tool": "read notes.txt",  # the answer after the tool: "Done."
    "error": "fail",
    "retry": "flaky print",
    "chunks": "chunks 12",
    "unicode": "héllo\ttab — ünïcode",
}


def run(who: str, server: oracle.OracleServer, root: Path, scenario: str) -> dict[str, Any]:
    """One ``-p`` run into pipes: its status, stdout and stderr (paths as ``ROOT``)."""
    work = oracle.workspace(root)
    server.reset()
    if who == "pi":
        command, env = oracle.pi_command(), oracle.pi_home(root, server.url)
    else:
        command, env = oracle.pitrio_command(server.url), oracle.pitrio_env(root)
    proc = subprocess.run(
        [*command, "-p", SCENARIOS[scenario]],
        capture_output=True,
        text=True,
        env=env,
        cwd=work,
        stdin=subprocess.DEVNULL,
        timeout=120,
        check=False,
    )
    return {
        "status": proc.returncode,
        "stdout": proc.stdout.replace(str(root), "ROOT"),
        "stderr": proc.stderr.replace(str(root), "ROOT"),
    }


def record(server: oracle.OracleServer) -> None:
    """Record Pi's status, stdout and stderr for every scenario into ``print_pi.json``."""
    data = {"recordedFrom": "pi -p into a pipe (Pi's coding agent 0.85.0)"}
    recorded = oracle.record_each(SCENARIOS, lambda root, name: run("pi", server, root, name))
    oracle.write_fixture(FIXTURE, {**data, **recorded})


@pytest.fixture(scope="module")
def pipe_server() -> Any:
    with oracle.OracleServer() as running:
        yield running


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_stdout_and_status_are_pis(
    scenario: str, pipe_server: oracle.OracleServer, tmp_path: Path
) -> None:
    ours = run("pitrio", pipe_server, tmp_path, scenario)
    expected = oracle.read_fixture(FIXTURE)[scenario]
    assert ours["status"] == expected["status"], ours["stderr"]
    assert ours["stdout"] == expected["stdout"]
    for line in expected["stderr"].splitlines():  # Pi's error line, in pitrio's transcript
        assert line in ours["stderr"]


def test_a_failed_run_writes_no_answer() -> None:
    """The recording itself: ``pi -p`` writes nothing to stdout for a failed request,
    and says why on stderr (what the test above holds pitrio to)."""
    data = oracle.read_fixture(FIXTURE)
    assert data["error"]["status"] == 1
    assert data["error"]["stdout"] == ""
    assert "scripted failure" in data["error"]["stderr"]
    assert data["tool"]["stdout"] == "Done.\n"  # the last answer only, not the tool's


def test_the_recording_is_what_pi_writes_now(
    pipe_server: oracle.OracleServer, tmp_path: Path
) -> None:
    if not oracle.pi_available():
        require_oracle()  # skips locally, fails under CI, naming what is missing
    assert run("pi", pipe_server, tmp_path, "tool") == oracle.read_fixture(FIXTURE)["tool"]
