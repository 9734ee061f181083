"""The harness factory the Celery workers of ``test_jobs.py`` load
(``PITRIO_HARNESS_FACTORY=_factory:make_harness``): a scripted model that calls the tool
``slow`` once, then answers. ``slow`` writes its process id to ``$PITRIO_TEST_PID_FILE``
and, while ``$PITRIO_TEST_BLOCK_FILE`` exists, blocks (so a test can kill it mid-run)."""

from __future__ import annotations

import os
from typing import Any

import trio

from pitrio import Context, Model, Tool, ToolResultMessage, text_result
from pitrio.harness import Harness, Session
from pitrio.testing import ScriptedModel, ScriptedResponse

MODEL = Model(id="scripted", api="scripted", provider="local", context_window=200_000)


async def _slow(call_id: str, params: Any, signal: Any, on_update: Any) -> Any:
    await trio.Path(os.environ["PITRIO_TEST_PID_FILE"]).write_text(str(os.getpid()))
    while await trio.Path(os.environ["PITRIO_TEST_BLOCK_FILE"]).exists():  # noqa: ASYNC110
        await trio.sleep(0.05)
    return text_result("slow is done")


def _script(context: Context) -> ScriptedResponse:
    """``slow`` once, then the answer (a recovered run already has the tool's result)."""
    if any(isinstance(m, ToolResultMessage) for m in context.messages):
        return ScriptedResponse.text("finished")
    return ScriptedResponse.tool_calls(("call_1", "slow", {}))


def make_harness(session: Session) -> Harness:
    stream = ScriptedModel(_script)
    tool = Tool(name="slow", description="slow", execute=_slow, parameters={"type": "object"})
    return Harness(model=MODEL, stream_fn=stream, session=session, tools=[tool])
