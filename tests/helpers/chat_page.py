"""The chat page in a real browser: Debian's Chromium at a phone's size, driven by Playwright.

Skipped with the reason where Chromium or playwright is missing; under CI=true they must be here
(`.ci/run` installs Chromium), so there it fails instead. Playwright never downloads a browser of
its own: it drives /usr/bin/chromium.
"""

from __future__ import annotations

import contextlib
import importlib.util
import re
from collections.abc import AsyncIterator
from pathlib import Path

from tests.conftest import require

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PHONE = {"width": 390, "height": 844}


@contextlib.asynccontextmanager
async def phone_page() -> AsyncIterator:
    """A phone-sized page of Chromium, closed with its browser afterwards."""
    if not CHROMIUM.exists():
        require(f"Chromium at {CHROMIUM}", "not installed: apt-get install chromium")
    if importlib.util.find_spec("playwright") is None:
        require("the playwright package", "not installed: pip install -e '.[dev]'")
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            context = await browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
            yield await context.new_page()
        finally:
            await browser.close()


def bubble(page, text: str):
    """The message whose own text is ``text`` (not one quoting it)."""
    own_text = page.locator(".text", has_text=re.compile(f"^{re.escape(text)}$"))
    return page.locator("#log .msg").filter(has=own_text)
