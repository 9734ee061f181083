"""docs/examples/harness_quickstart.py runs as written (in virtual time) and does what
docs/harness.md says it does."""

from __future__ import annotations

import runpy
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

ROOT = Path(__file__).resolve().parent.parent.parent
EXAMPLE = ROOT / "docs" / "examples" / "harness_quickstart.py"


def test_quickstart_runs(capsys: pytest.CaptureFixture[str]) -> None:
    namespace = runpy.run_path(str(EXAMPLE), run_name="example")
    main: Callable[[], Coroutine[Any, Any, None]] = namespace["main"]
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    lines = capsys.readouterr().out.splitlines()
    # The 503 is retried once, then the tool turn and the answer follow.
    assert lines.count("auto_retry_start") == 1
    assert lines.count("auto_retry_end") == 1
    assert lines.count("save_point") == lines.count("turn_end") == 3
    assert lines.index("auto_retry_start") < lines.index("tool_execution_end")
    settled = lines.index("settled")
    assert lines[settled - 1] == "agent_end"
    assert lines[settled + 1] == "You are in /srv/project."
    # The reopened session: the prompt, the tool turn and the answer (the failed
    # response is kept as history but is not part of the model's context).
    assert lines[settled + 2 :] == ["user", "assistant", "toolResult", "assistant"]
    scripted = namespace["model"]
    first, second = scripted.requests[1], scripted.requests[2]
    assert first.system_prompt == "You are a helpful agent on scripted-1. Tools: where."
    assert second.messages[-1].content[0].text == "you are in /srv/project"


def test_quickstart_is_shown_in_the_docs() -> None:
    """docs/harness.md includes the file itself (so what it shows is what runs here)."""
    docs = (ROOT / "docs" / "harness.md").read_text(encoding="utf-8")
    assert "```{literalinclude} examples/harness_quickstart.py\n" in docs
