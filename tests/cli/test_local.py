"""``--local``: a real tiny model (Gemma 3 270M in llama.cpp's server from the xllamacpp
wheel) started by the CLI itself, on loopback, with no key and no network."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from pitrio.cli._local import missing_packages


@pytest.mark.skipif(
    bool(missing_packages()),
    reason=f"--local needs {missing_packages()} (pip install -e '.[test]' installs them)",
)
def test_local_model_answers_and_the_server_stops(cli_env: dict[str, str], workdir: Path) -> None:
    """A one-shot prompt streams real tokens; the banner says how weak the model is;
    the server process is gone afterwards."""
    proc = subprocess.run(
        [sys.executable, "-m", "pitrio", "--local", "--no-session", "--cwd", str(workdir),
         "--system", "Answer in one short sentence.", "-p", "Say hello."],
        capture_output=True, text=True, env=cli_env, timeout=300, check=False,
        stdin=subprocess.DEVNULL,  # piped stdin would join the prompt, as in Pi
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "very weak" in proc.stderr
    # the usage line: a real response that streamed tokens (whatever the tiny model said;
    # it may be only whitespace or thinking, which -p into a pipe does not print, as pi)
    usage = re.search(r"tokens in (\d+) out (\d+) · context", proc.stderr)
    assert usage is not None, proc.stderr
    assert int(usage.group(2)) > 0
    # stdout is the answer's text, which the transcript on stderr shows too
    assert all(line.strip() in proc.stderr for line in proc.stdout.splitlines())
    port = re.search(r"\(server: http://127\.0\.0\.1:(\d+)/v1\)", proc.stderr)
    assert port is not None, proc.stderr
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True)
    assert f"pitrio.cli._local_server {port.group(1)}" not in ps.stdout


def test_local_is_refused_with_a_model(cli_env: dict[str, str], workdir: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pitrio", "--local", "--model", "openai/gpt-4.1", "-p", "x"],
        capture_output=True, text=True, env=cli_env, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "--local runs its own model" in proc.stderr
