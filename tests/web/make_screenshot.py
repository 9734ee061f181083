"""Take the screenshots of docs/web.md: ``pitrio serve`` in headless chromium.

python -m tests.web.make_screenshot [PATH]          # docs/web-ui.png
python -m tests.web.make_screenshot --answers [DIR]  # docs/web-answer-*.png

The server runs on a copy of the CLI's sample project with a scripted stand-in model
(``pitrio.testing.ScriptedModel``, not a language model); the tools are real.

* web-ui.png: the model offers three models, as in tests/web/test_web_commands.py. The page
  picks a model and a thinking level in the header, runs a prompt template (``/check
  world``) whose answer thinks, calls the real ``bash`` tool and answers; the input shows the
  command hint for ``/c``.
* web-answer-*.png (:func:`answer_scene`): the model runs the failing check, fixes greet.py
  with ``edit`` (its diff), runs the check again and answers in markdown (headings, bold, a
  list, a table, a highlighted code block), at 1280 px (light and dark) and 400 px (a
  phone, device metrics emulation: light, on the diff; dark, at the end of the answer).
"""

from __future__ import annotations

import io
import os
import sys
import tempfile

import trio

from pitrio import Context, Model, TextContent, ThinkingContent, ToolResultMessage
from pitrio.cli._offline import copy_sample_project
from pitrio.testing import ScriptedModel, ScriptedResponse
from pitrio.web._serve import ServerInfo, serve

from ._cdp import Page, ensure_chromium, open_browser
from .test_page_markdown import RICH
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


PROMPT = "check_greet.py fails. Find out why and fix greet.py so it passes."
FIX = {
    "path": "greet.py",
    "oldText": 'return "Hello " + name',
    "newText": 'return f"Hello, {name}!"',
}


def fixer(context: Context) -> ScriptedResponse:
    """Run the check, fix greet.py, run it again, explain (by how many tool results)."""
    done = sum(isinstance(m, ToolResultMessage) for m in context.messages)
    check = {"command": "python3 check_greet.py"}
    if done == 0:
        return ScriptedResponse(
            content=(
                ThinkingContent(thinking="Run the check first to see how it fails."),
                TextContent(text="Let me run the check first."),
                *ScriptedResponse.tool_calls(("c1", "bash", check)).content,
            ),
            chunk_size=6,
        )
    if done == 1:
        return ScriptedResponse.tool_calls(("c2", "edit", FIX))
    if done == 2:
        return ScriptedResponse.tool_calls(("c3", "bash", check))
    return ScriptedResponse.text(RICH, chunk_size=24)


async def set_width(page: Page, width: int, height: int, *, dark: bool = False) -> None:
    """Emulate a screen ``width`` px wide (a phone's, touch and all, under 700 px)."""
    mobile = width < 700
    await page.send(
        "Emulation.setDeviceMetricsOverride",
        width=width,
        height=height,
        deviceScaleFactor=2 if mobile else 1,
        mobile=mobile,
    )
    await page.send("Emulation.setTouchEmulationEnabled", enabled=mobile)
    scheme = {"name": "prefers-color-scheme", "value": "dark" if dark else "light"}
    await page.send("Emulation.setEmulatedMedia", features=[scheme])
    await trio.sleep(0.2)


async def answer_scene(page: Page, nursery: trio.Nursery, temp: str) -> ServerInfo:
    """Serve the sample project (scripted model, ``--yes``) and run :data:`PROMPT` to its
    markdown answer in the page."""
    project = copy_sample_project(os.path.join(temp, "greet"))
    env = {"PITRIO_SESSIONS_DIR": os.path.join(temp, "sessions"), "HOME": temp}
    argv = ["--port", "0", "--cwd", project, "--model", "scripted/small", "--yes"]
    info: ServerInfo = await nursery.start(
        lambda task_status: serve(
            argv,
            stream_fn=paced(ScriptedModel(fixer), 0.005),
            models=MODELS[:1],
            env=env,
            out=io.StringIO(),
            task_status=task_status,
        )
    )
    await page.goto(info.url)
    await page.wait_for("document.getElementById('conn').textContent === ''")
    await send(page, PROMPT)
    await page.wait_for("document.body.classList.contains('working')")
    await wait_idle(page)
    await page.evaluate("document.activeElement.blur()")
    return info


SHOTS = (  # width, height, dark, scrolled to: the diff at the top, or the end
    (1280, 1000, False, "diff"),
    (1280, 1000, True, "diff"),
    (400, 860, False, "diff"),
    (400, 860, True, "end"),
)


async def answers(folder: str) -> None:
    with tempfile.TemporaryDirectory(prefix="pitrio-screenshot-") as temp:
        async with open_browser() as page, trio.open_nursery() as nursery:
            await set_width(page, 1280, 900)
            await answer_scene(page, nursery, temp)
            for width, height, dark, scroll in SHOTS:
                await set_width(page, width, height, dark=dark)
                if scroll == "diff":  # the edit's diff at the top, the answer below
                    await page.evaluate(
                        "(() => { const log = document.getElementById('log');"
                        " const diff = document.querySelector('#log .item.tool .diff');"
                        " log.scrollTop += diff.closest('.item').getBoundingClientRect().top"
                        " - log.getBoundingClientRect().top - 8; })()"
                    )
                else:
                    await page.evaluate("document.getElementById('log').scrollTop = 1e9")
                await trio.sleep(0.2)
                name = f"web-answer-{width}{'-dark' if dark else ''}.png"
                await page.screenshot(os.path.join(folder, name))
            nursery.cancel_scope.cancel()


if __name__ == "__main__":
    problem = ensure_chromium()
    if problem is not None:
        sys.exit(problem)
    if sys.argv[1:2] == ["--answers"]:
        trio.run(answers, sys.argv[2] if len(sys.argv) > 2 else "docs")
    else:
        trio.run(main, sys.argv[1] if len(sys.argv) > 1 else "docs/web-ui.png")
