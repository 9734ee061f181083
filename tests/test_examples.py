"""The runnable examples in docs/examples/ run as written, and the README shows them verbatim.

Each example is executed as a script would be (``runpy``, ``__name__ != "__main__"``), then its
``main()`` runs in virtual time, so the example's real-time sleeps cost nothing here.
"""

from __future__ import annotations

import inspect
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
    "pi_style_tool.py": ["agent_start", "tool_execution_end", "agent_end", "2 + 3 = 5"],
    "steer_and_abort.py": ["Done, and the public API is unchanged.", "aborted"],
    # the guides (docs/loop.md, docs/harness.md)
    "agent_loop.py": [
        "agent_start",
        "tool_execution_end",
        "agent_end",
        "['user', 'assistant', 'toolResult', 'assistant']",
    ],
    "harness_quickstart.py": [
        "settled",
        "You are in /srv/project.",
        "user",
        "assistant",
        "toolResult",
        "assistant",
    ],
    "harness_recovery.py": [
        "first process: killed",
        "interrupted at: tools",
        "  recovery_start",
        "  recovery_end",
        "  settled",
        "status: all green",
        "deploy: [Tool execution was interrupted. The preceding output is the latest durable"
        " progress snapshot; newer live output may be missing, and the external outcome is"
        " unknown.]",
        "status ran 2 time(s)",
        "deploy ran 1 time(s)",
        "answer: Status is green; the deploy was cut off.",
    ],
    # the tutorial's chapters (docs/tutorial/)
    "structured_output.py": [
        "  - country: must have required properties country",
        "City(name='Paris', country='France', population_millions=None) 2",
    ],
    "typed_tools.py": [
        "{'enum': ['celsius', 'fahrenheit'], 'type': 'string', 'description': 'the unit of the"
        " answer.', 'default': 'celsius'}",
        "75 degrees fahrenheit in Lisbon",
        "Report(city='Lisbon', warm=True) 2",
        "aborted Usage limit exceeded: the next request would exceed max_requests=1",
    ],
    "writing_tools.py": [
        'weather error: Validation failed for tool "weather":',
        "  - days: must be integer",
        "  progress: fetched day 3 of 3",
        "weather ok: Lisbon: sunny for 3 day(s)",
        "weather error: No weather station in Atlantis.",
        "append_log ok: log has 2 line(s)",
        "['first', 'second']",
        "Lisbon is sunny; Atlantis has no station.",
    ],
    "streaming_ui.py": [
        "[search running]",
        "[search: searching...]",
        "[search done: 3 results]",
        "delta: 'Trio i'",
        "delta: 'ncy.'",
        "Trio is a library for async concurrency.",
    ],
    "queues_and_abort.py": [
        "user: work",
        "slow_step: step done",
        "user: use tabs, not spaces",
        "assistant: ok: use tabs, not spaces",
        "user: and then summarise",
        "assistant: ok: and then summarise",
        "after abort: Operation aborted",
        "after deadline: aborted",
        "shielded: ['draft'] saved draft",
    ],
    "sessions.py": [
        "  save_point",
        "  settled",
        "You have told me 2 thing(s): my name is Ada / I like Trio",
        "found session True",
        "You have told me 3 thing(s): my name is Ada / I like Trio / what do you know?",
        "fork: ['user', 'assistant']",
    ],
    "local_model.py": [
        "POST /v1/chat/completions tools: ['clock']",
        "stop It is 14:05.",
        'error 404: {"message":"model llama3.1 not found"}',
    ],
    "testing_your_agent.py": [
        "test_the_model_sees_the_report passed",
        "test_a_hanging_service_times_out passed",
    ],
    "testing_with_hypothesis.py": [
        "test_any_script_ends_in_a_settled_run passed",
        "test_the_status_line_follows_any_run_so_far passed",
    ],
    # MCP (docs/mcp.md): a real server process, so main() runs in real time
    "mcp_agent.py": [
        "tools: ['mcp__weather__forecast']",
        "toolResult: Lisbon: sunny, 24°C",
        "assistant: It is sunny in Lisbon.",
        "direct: Porto: sunny, 24°C (ok)",
    ],
    # telemetry (docs/telemetry.md): Pi's spans in memory, then OpenTelemetry's
    "telemetry_spans.py": [
        "1 None pi.harness.run",
        "5 2 pi.harness.tool",
        "7 6 pi.ai.request",
        "invoke_agent",
        "  chat demo-model [demo-model]",  # the GenAI shape: no turn spans
        "  execute_tool lookup [c1]",
        "  execute_tool lookup [c2]",
        "gen_ai.client.operation.duration s",
        "gen_ai.client.token.usage {token}",
    ],
    # the recipes (docs/recipes/)
    "agent_service.py": [
        "/c/bob 200 echo: hi (1 messages so far)",
        "/c/alice 200 echo: again (3 messages so far)",
        "/c/bob 409 Agent is already processing a prompt. Use steer() or follow_up() to queue"
        " messages, or wait for completion.",
        "/c/bob/abort 202 aborting",
        "/c/bob 200 [aborted] Request was aborted",
        "2 agents",
    ],
}
# the examples the README shows verbatim (the tutorial's are shown on the docs site)
README_EXAMPLES = {"first_agent.py", "pi_style_tool.py", "steer_and_abort.py"}


def run_example(name: str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    namespace = runpy.run_path(str(EXAMPLES / name), run_name="example")
    main: Callable[[], Coroutine[Any, Any, None] | None] = namespace["main"]
    if inspect.iscoroutinefunction(main):
        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    else:
        main()  # a sync main (Hypothesis tests run their own virtual time)
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
    assert shown >= README_EXAMPLES


def test_every_example_file_is_run() -> None:
    files = {path.name for path in EXAMPLES.glob("*.py")}
    assert files == set(EXPECTED_OUTPUT), (
        f"docs/examples/ files not run here: {sorted(files - set(EXPECTED_OUTPUT))};"
        f" names here without a file: {sorted(set(EXPECTED_OUTPUT) - files)}"
    )

