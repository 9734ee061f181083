"""Fixtures for the web UI tests: Debian's chromium (installed on first use) and a page."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

pytest.importorskip("trio_websocket", reason="the web UI tests need pip install 'pitrio[web]'")

from ._cdp import Page, ensure_chromium, open_browser


@pytest.fixture(scope="session")
def chromium() -> None:
    problem = ensure_chromium()
    if problem is not None:
        pytest.skip(f"SKIPPED WEB UI TESTS: {problem}")


@pytest.fixture
async def page(chromium: None) -> AsyncIterator[Page]:
    async with open_browser() as opened:
        yield opened
