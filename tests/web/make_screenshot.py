"""Take docs/web-ui.png: the offline replay's demo in ``pitrio serve``, in headless chromium.

python -m tests.web.make_screenshot [PATH]
"""

from __future__ import annotations

import sys

import trio

from ._cdp import ensure_chromium, open_browser
from .test_web import offline_demo


async def main(path: str) -> None:
    async with open_browser() as page, trio.open_nursery() as nursery:
        await offline_demo(page, nursery)
        # Show the middle of the run: the failing check, the edit and the passing check.
        await page.evaluate(
            "(() => { const t = [...document.querySelectorAll('#log .item.tool')];"
            " t[3].scrollIntoView({block: 'start'}); })()"
        )
        await trio.sleep(0.3)
        await page.screenshot(path)
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    problem = ensure_chromium()
    if problem is not None:
        sys.exit(problem)
    trio.run(main, sys.argv[1] if len(sys.argv) > 1 else "docs/web-ui.png")
