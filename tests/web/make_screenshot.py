"""Take docs/web-ui.png: ``pitrio serve`` in headless chromium, with the model and thinking
switches and slash commands in use.

python -m tests.web.make_screenshot [PATH]

The server runs on a copy of the CLI's sample project with a scripted stand-in model
(``pitrio.testing.ScriptedModel``, not a language model) offering three models, as in
tests/web/test_web_commands.py. The page picks a model and a thinking level in the header,
runs a prompt template (``/check world``) whose answer thinks, calls the real ``bash``
tool and answers; the input shows the command hint for ``/c``.
"""

from __future__ import annotations

import io
import os
import sys
import tempfile

import trio

from pitrio import Context, Model, TextContent, ThinkingContent, ToolResultMessage
from pitrio.cli._offline import copy_sample_project
from pitrio.cli._serve import ServerInfo, serve
from pitrio.testing import ScriptedModel, ScriptedResponse

from ._cdp import ensure_chromium, open_browser
from .test_web import paced, send, wait_idle
from .test_web_commands import open_page, select

MODELS = (
    Model(id="small", name="Small", api="scripted", provider="scripted"),
    Model(id="thinker", name="Thinker", api="scripted", provider="scripted", reasoning=True),
    Model(id="fast", name="Fast", api="scripted", provider="scripted"),
)
TEMPLATE = (
    "---\ndescription: Try a function and explain its output\n---\n"
    "Call greet() with $1 and explain what it returns.\n"
)
CALL = "python3 -c 'from greet import greet; print(greet(\"world\"))'"


def answer(context: Context) -> ScriptedResponse:
    last = context.messages[-1]
    if isinstance(last, ToolResultMessage):
        output = "".join(b.text for b in last.content if isinstance(b, TextContent)).strip()
        return ScriptedResponse.text(
            f"It returns `{output}`: `greet()` joins the greeting and the name with a "
            "space, without the comma and `!` that check_greet.py expects.",
            chunk_size=6,
        )
    return ScriptedResponse(
        content=(
            ThinkingContent(thinking="They want greet()'s result for 'world': run it first."),
            TextContent(text="Let me run it."),
            *ScriptedResponse.tool_calls(("c1", "bash", {"command": CALL})).content,
        ),
        chunk_size=4,
    )


async def main(path: str) -> None:
    with tempfile.TemporaryDirectory(prefix="pitrio-screenshot-") as temp:
        project = copy_sample_project(os.path.join(temp, "greet"))
        prompts = os.path.join(project, ".pitrio", "prompts")
        os.makedirs(prompts)
        await trio.Path(prompts, "check.md").write_text(TEMPLATE)
        env = {"PITRIO_SESSIONS_DIR": os.path.join(temp, "sessions"), "HOME": temp}
        argv = ["--port", "0", "--cwd", project, "--model", "scripted/small", "--yes"]
        async with open_browser() as page, trio.open_nursery() as nursery:
            info: ServerInfo = await nursery.start(
                lambda task_status: serve(
                    argv,
                    stream_fn=paced(ScriptedModel(answer), 0.01),
                    models=MODELS,
                    env=env,
                    out=io.StringIO(),
                    task_status=task_status,
                )
            )
            await open_page(page, info)
            await select(page, "#model", "scripted/thinker")
            await page.wait_for("document.getElementById('thinking').options.length > 1")
            await select(page, "#thinking", "medium")
            await page.wait_for("document.querySelectorAll('#log .item.output').length === 2")
            await send(page, "/check world")
            await page.wait_for(
                "document.querySelector('#log .item.tool[data-state=done]') !== null"
            )
            await wait_idle(page)
            await page.type_text("#input", "/c")
            await page.wait_for("!document.getElementById('hint').hidden")
            await trio.sleep(0.3)
            await page.screenshot(path)
            nursery.cancel_scope.cancel()


if __name__ == "__main__":
    problem = ensure_chromium()
    if problem is not None:
        sys.exit(problem)
    trio.run(main, sys.argv[1] if len(sys.argv) > 1 else "docs/web-ui.png")
