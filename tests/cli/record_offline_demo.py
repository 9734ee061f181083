"""Record the offline demo's session: ``python tests/cli/record_offline_demo.py``.

Writes ``pitrio/cli/_sample/demo.replay.jsonl``: a scripted model
(:class:`pitrio.testing.ScriptedModel`, not a language model) works through the sample
project as a coding agent would (list, read, run the check, edit, run it again,
answer), driven through the CLI's own harness and tools on a temporary copy, and
:class:`pitrio.harness.RecordingStreamFn` records what it streamed.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

import trio

from pitrio import (
    AssistantMessage,
    Context,
    Cost,
    TextContent,
    ToolCall,
    ToolResultMessage,
    Usage,
)
from pitrio.cli._app import default_system_prompt, tools_for
from pitrio.cli._offline import DEMO_PROMPT, OFFLINE_MODEL, copy_sample_project, recording_path
from pitrio.harness import Harness, RecordingStreamFn
from pitrio.testing import ScriptedModel, ScriptedResponse

STEPS: list[tuple[str, list[tuple[str, dict[str, Any]]]]] = [
    ("I'll start by looking at the project.", [("bash", {"command": "ls"})]),
    (
        "Let me read the check and the module it checks.",
        [("read", {"path": "check_greet.py"}), ("read", {"path": "greet.py"})],
    ),
    ("Now run the check to see the failure.", [("bash", {"command": "python3 check_greet.py"})]),
    (
        'The check expects `"Hello, world!"` but `greet()` returns `"Hello world"`: '
        "the comma and the exclamation mark are missing. One exact edit fixes it.",
        [
            (
                "edit",
                {
                    "path": "greet.py",
                    "edits": [
                        {
                            "oldText": 'return "Hello " + name',
                            "newText": 'return f"Hello, {name}!"',
                        }
                    ],
                },
            )
        ],
    ),
    ("Run the check again.", [("bash", {"command": "python3 check_greet.py"})]),
]

ANSWER = """Fixed. **`greet.py`** built the greeting without the comma and the exclamation mark:

```diff
-    return "Hello " + name
+    return f"Hello, {name}!"
```

`python3 check_greet.py` now prints `all checks passed`.

*(This answer is part of pitrio's offline replay: a scripted session, not a language model.)*"""


def _progress(messages: Sequence[Any]) -> int:
    step = 0
    for message in reversed(messages):
        if isinstance(message, AssistantMessage):
            step += 1
        elif not isinstance(message, ToolResultMessage):
            break
    return step


def _usage(step: int) -> Usage:
    # Plausible numbers so the usage line has something to show; labelled scripted.
    input_tokens = 1200 + 350 * step
    return Usage(
        input=input_tokens,
        output=60,
        total_tokens=input_tokens + 60,
        cost=Cost(input=input_tokens * 3e-6, output=60 * 15e-6, total=input_tokens * 3e-6 + 9e-4),
    )


def scripted() -> ScriptedModel:
    counter = 0

    def respond(context: Context) -> ScriptedResponse:
        nonlocal counter
        step = _progress(context.messages)
        options: dict[str, Any] = {"chunk_size": 5, "usage": _usage(step)}
        if step < len(STEPS):
            text, calls = STEPS[step]
            blocks: list[Any] = [TextContent(text=text)]
            for name, args in calls:
                counter += 1
                blocks.append(ToolCall(id=f"call_{counter}", name=name, arguments=args))
            return ScriptedResponse(content=tuple(blocks), **options)
        return ScriptedResponse.text(ANSWER, **options)

    return ScriptedModel(respond, record_requests=False)


async def record(path: str) -> None:
    with tempfile.TemporaryDirectory() as temp:
        cwd = copy_sample_project(os.path.join(temp, "greet"))
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)  # a one-off script
        harness = Harness(
            model=OFFLINE_MODEL,
            stream_fn=RecordingStreamFn(scripted(), path),
            tools=[tools_for],
            system_prompt=default_system_prompt(cwd),
            cwd=cwd,
        )
        await harness.prompt(DEMO_PROMPT)
        last = harness.messages[-1]
        assert isinstance(last, AssistantMessage), last
        assert last.stop_reason == "stop", last


if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else recording_path()
    trio.run(record, target)
    print(f"recorded {target}")
