"""The page from a 360 px phone to a 1920 px screen, in headless chromium.

Device metrics emulation (a phone's, with touch, under 700 px) on the conversation of the
docs' screenshots (a failing check, an edit's diff, a markdown answer) plus an answer with
a wide table, a long code line and a long URL, a long consent request and the Stop button
showing. At each width: no page-level horizontal overflow, every control of the header,
the composer and the consent card inside the viewport, wide blocks scrolling inside their
message.
"""

from __future__ import annotations

import json
import tempfile
from typing import Any

import pytest
import trio

from ._cdp import Page
from .make_screenshot import answer_scene, set_width

WIDE = (
    "A wide table, a long line and a long link:\n\n"
    "| " + " | ".join(f"column {i}" for i in range(14)) + " |\n"
    "| " + " | ".join("---" for _ in range(14)) + " |\n"
    "| " + " | ".join(f"`value_{i}_{'x' * 8}`" for i in range(14)) + " |\n\n"
    "```python\nprint('" + "a long line " * 40 + "')\n```\n\n"
    "https://example.com/" + "a-very-long-path-segment/" * 12 + "\n\n"
    "averyveryverylongwordwithoutanyspaces" * 6 + "\n"
)

CONSENT = {
    "type": "consent",
    "id": "c99",
    "tool": "bash",
    "title": "bash for f in …",
    "arguments": {"command": "for f in *.py; do\n  " + "echo " + "word " * 200 + "\ndone\n" * 30},
}

MEASURE = """(() => {
  const inside = (e) => { const r = e.getBoundingClientRect();
    return r.width > 0 && r.height > 0 && r.left >= -0.5 && r.top >= -0.5
      && r.right <= innerWidth + 0.5 && r.bottom <= innerHeight + 0.5; };
  const name = (e) => e.id || e.textContent.trim() || e.tagName;
  const controls = [...document.querySelectorAll(
    'header button, header select, #send, #stop, #consent button')];
  const blocks = [...document.querySelectorAll(
    '#log pre.code, #log .table-wrap, #log .output.diff')];
  const log = document.getElementById('log').getBoundingClientRect();
  const header = document.querySelector('header');
  return {
    innerWidth, scrollWidth: document.documentElement.scrollWidth,
    bodyScrollWidth: document.body.scrollWidth,
    headerClipped: header.scrollWidth > header.clientWidth + 0.5,
    controls: controls.map(name),
    outside: controls.filter((e) => !inside(e)).map(name),
    blocks: blocks.length,
    blocksOutside: blocks.filter((e) => e.getBoundingClientRect().right > log.right + 0.5).length,
    scrolling: blocks.filter((e) => e.scrollWidth > e.clientWidth).length,
    consentArgs: (() => { const r = document.getElementById('consent-args')
      .getBoundingClientRect();
      return r.right <= innerWidth + 0.5 && r.height <= innerHeight * 0.45; })(),
  };
})()"""


async def measure(page: Page) -> dict[str, Any]:
    await page.evaluate("new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))")
    data: dict[str, Any] = await page.evaluate(MEASURE)
    return data


@pytest.mark.parametrize("dark", [False, True])
async def test_the_page_fits_every_width_from_a_phone_to_a_wide_screen(
    page: Page, dark: bool
) -> None:
    with tempfile.TemporaryDirectory(prefix="pitrio-layout-") as temp:
        async with trio.open_nursery() as nursery:
            with trio.fail_after(90):
                await set_width(page, 1280, 900, dark=dark)
                await answer_scene(page, nursery, temp)
                wide = {"type": "replace", "id": "w1", "text": WIDE, "state": "done"}
                await page.evaluate(
                    "(() => { handle({type: 'append', id: 'w1', kind: 'assistant', working: true});"
                    f" handle({json.dumps(wide)}); handle({json.dumps(CONSENT)});"
                    " handle({type: 'status', working: true}); })()"
                )
                seen = {}
                for width in (360, 400, 1280, 1920):
                    await set_width(page, width, 780, dark=dark)
                    shown = await measure(page)
                    seen[width] = shown
                    # The layout viewport is the device's width (the page has a viewport
                    # meta), and nothing makes the page wider than it.
                    assert shown["innerWidth"] == width
                    assert shown["scrollWidth"] <= width, shown
                    assert shown["bodyScrollWidth"] <= width, shown
                    assert shown["headerClipped"] is False, shown
                    assert shown["outside"] == [], (width, shown)
                    # Code blocks, tables and the diff scroll inside their message.
                    assert shown["blocks"] >= 4
                    assert shown["blocksOutside"] == 0, shown
                    assert shown["consentArgs"] is True, shown
                # Every control is there, Stop included (the agent "works").
                assert seen[360]["controls"] == [
                    "model",
                    "thinking",
                    "sessions-toggle",
                    "new-session",
                    "Yes",
                    "Always",
                    "No",
                    "send",
                    "stop",
                ]
                # The wide table and the long code line are wider than a phone: they scroll.
                assert seen[360]["scrolling"] >= 2
                # The sessions panel opens inside the phone's screen.
                await set_width(page, 360, 780, dark=dark)
                await page.click("#sessions-toggle")
                await page.wait_for("!document.getElementById('sessions').hidden")
                panel = await page.evaluate(
                    "(() => { const r = document.getElementById('sessions')"
                    ".getBoundingClientRect(); return [r.left, r.right, innerWidth,"
                    " document.documentElement.scrollWidth]; })()"
                )
                left, right, width, scroll_width = panel
                assert left >= 0
                assert right <= width
                assert scroll_width <= width
            nursery.cancel_scope.cancel()
