"""The runnable examples in docs/examples/ run as written, and the README shows them verbatim.

Each example is executed as a script would be (``runpy``, ``__name__ != "__main__"``), then its
``main()`` runs in virtual time, so the example's real-time sleeps cost nothing here.
"""

from __future__ import annotations

import re
import runpy
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "docs" / "examples"

# example file -> lines its main() must print, in order (other lines may come between)
EXPECTED_OUTPUT = {
    "first_agent.py": ["agent_start", "tool_execution_end", "agent_end", "2 + 3 = 5"],
    "steer_and_abort.py": ["Done, and the public API is unchanged.", "aborted"],
}


def run_example(name: str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    namespace = runpy.run_path(str(EXAMPLES / name), run_name="example")
    main: Callable[[], Coroutine[Any, Any, None]] = namespace["main"]
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("name", sorted(EXPECTED_OUTPUT))
def test_example_runs_and_prints(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    lines = iter(run_example(name, capsys))
    for wanted in EXPECTED_OUTPUT[name]:
        assert any(line == wanted for line in lines), f"{name} did not print {wanted!r}"


def test_readme_python_blocks_are_the_example_files() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.DOTALL)
    examples = {path.read_text(encoding="utf-8"): path.name for path in EXAMPLES.glob("*.py")}
    assert blocks, "the README shows no Python example"
    for block in blocks:
        assert block in examples, f"README block is not a file of docs/examples:\n{block[:200]}"
    shown = {examples[block] for block in blocks}
    assert set(EXPECTED_OUTPUT) <= shown
