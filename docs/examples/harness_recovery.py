"""A run killed mid-tool, resumed by a fresh process (docs/harness.md, "Operations")."""

from __future__ import annotations

import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

import trio

from pitrio import Model, Tool, ToolResult, text_result
from pitrio.harness import Harness, JsonlSessionStore
from pitrio.testing import ScriptedModel, ScriptedResponse

MODEL = Model(id="scripted", api="scripted", provider="local")


def tools(workdir: Path, *, crash: bool) -> list[Tool]:
    def count(name: str) -> None:
        with (workdir / name).open("a") as f:
            f.write("ran\n")

    async def status(call_id: str, params: Any, signal_: Any, on_update: Any) -> ToolResult:
        count("status")  # reads only: safe to run again
        return text_result("all green")

    async def deploy(call_id: str, params: Any, signal_: Any, on_update: Any) -> ToolResult:
        count("deploy")  # changes the world: must not run twice
        if crash:  # the process dies after the effect, before its outcome is recorded
            os.kill(os.getpid(), signal.SIGKILL)
        return text_result("deployed")

    return [
        Tool(name="status", execute=status, replay="safe"),
        Tool(name="deploy", execute=deploy),  # replay="never", the default
    ]


async def first_process(workdir: Path) -> None:
    """Runs in a child process, which its deploy tool kills."""
    session = await JsonlSessionStore(workdir).create(session_id="release")
    calls = ScriptedResponse.tool_calls(("c1", "status", {}), ("c2", "deploy", {}))
    script = ScriptedModel([calls])
    harness = Harness(
        model=MODEL, stream_fn=script, session=session, tools=tools(workdir, crash=True)
    )
    await harness.prompt("check, then deploy")


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        killed = await trio.run_process(
            [sys.executable, __file__, "--first-process", tmp], check=False
        )
        print("first process:", "killed" if killed.returncode == -signal.SIGKILL else "ended")

        # A fresh process: the session says where the run was.
        session = await JsonlSessionStore(workdir).open("release")
        script = ScriptedModel([ScriptedResponse.text("Status is green; the deploy was cut off.")])
        harness = Harness(
            model=MODEL, stream_fn=script, session=session, tools=tools(workdir, crash=False)
        )
        interrupted = harness.interrupted
        assert interrupted is not None
        print("interrupted at:", interrupted.at)
        harness.subscribe(lambda event: print(" ", event.type))
        await harness.resume()  # settles the tool batch, then the run goes on

        for message in session.build_context().messages:
            if message.role == "toolResult":
                print(f"{message.tool_name}: {message.content[0].text}")
        for name in ("status", "deploy"):
            runs = len((workdir / name).read_text().splitlines())
            print(f"{name} ran {runs} time(s)")
        answer = harness.messages[-1]
        assert answer.role == "assistant"
        print("answer:", answer.content[0].text)
        await session.close()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--first-process"]:
        trio.run(first_process, Path(sys.argv[2]))
    else:
        trio.run(main)
