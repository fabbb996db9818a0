"""The README's tour, tapped through at a phone's size in a real browser against the whole of
aegis (issue 19): messages drawn from Telegram's HTML, commands that a tap sends, a capture and
its receipt edited by a tap, the same forward twice as one task, /status refreshed in place, and
the demo's approval card settled by Approve. Every button's label must fit its button.

The README's pictures are taken here, so they show what the product does today:
``AEGIS_TEST_SCREENSHOTS=docs/screenshots python -m pytest tests/emulator/test_chat_page_tour.py``
writes them there; without it they go to the test's own directory.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from aegis.botapi.endpoint import EMULATOR_PREFIX, emulator_key
from bot.chat.outgoing import OutboxKind
from tests.helpers.chat_page import bubble
from tests.helpers.stack import eventually
from tests.helpers.task_chat import task_rows
from tests.helpers.transport import drained, outbox_rows

# JavaScript: the labels of the page's buttons whose text does not fit (cut with an ellipsis).
CLIPPED = """() => [...document.querySelectorAll('.kbd button, .kbd a')]
    .filter((b) => b.scrollWidth > b.clientWidth + 1).map((b) => b.textContent)"""


@pytest.fixture
def pictures(tmp_path) -> Path:
    """Where the tour's screenshots go: the README's folder when asked, else the test's own."""
    chosen = os.environ.get("AEGIS_TEST_SCREENSHOTS")
    folder = Path(chosen) if chosen else tmp_path / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


async def test_the_tour_at_phone_size(aegis, page, pictures) -> None:
    from playwright.async_api import expect

    address = f"{aegis.settings.web_url}{EMULATOR_PREFIX}/chat?key={emulator_key(aegis.settings)}"
    await page.goto(address)
    await expect(page.locator("#status")).to_have_text("online (emulated)")
    answers = page.locator("#log .msg.bot")

    # /start: a short hello with a bold first line, and commands that a tap sends.
    await say(page, "/start")
    hello = answers.filter(has_text="Hello! I am aegis.")
    await expect(hello.locator("b", has_text="Hello! I am aegis.")).to_be_visible()
    await page.screenshot(path=pictures / "start.png")
    await hello.locator("a.cmd", has_text="/help").click()
    helped = answers.filter(has_text="Every message I send goes through a durable outbox")
    await expect(helped.locator("b", has_text="Capture")).to_be_visible()
    assert await helped.locator("a.cmd").count() >= 20  # every command in /help can be tapped

    # Capture: the receipt's buttons fit, and a tap edits the receipt to say what was chosen.
    await say(page, "call the bank about <the mortgage> & the car")
    receipt = answers.filter(has_text="Captured as task 1")
    await expect(receipt).to_contain_text("<the mortgage> & the car")  # written, never a tag
    assert await page.evaluate(CLIPPED) == []
    await receipt.get_by_role("button", name="@next").click()
    await expect(receipt).to_contain_text("@next")
    await expect(receipt.get_by_role("button", name="@next")).to_have_count(0)

    # The same message forwarded twice is one task.
    for _ in range(2):
        await page.click("#fwd-toggle")
        await page.select_option("#fwd-type", "user")
        await page.fill("#fwd-name", "Ann")
        await say(page, "renew the passport")
    await expect(answers.filter(has_text="Already captured as task 2")).to_have_count(1)
    assert len(await task_rows(aegis)) == 2

    # /status: Refresh edits the message it is under instead of sending another.
    await say(page, "/status")
    status = answers.filter(has_text="aegis status")
    await expect(status.locator("b", has_text="Recent work")).to_be_visible()
    sent_before, edits_before = len(await aegis.bot_messages()), await edits(aegis)
    await status.get_by_role("button", name="Refresh").click()
    await eventually(lambda: _more(edits(aegis), edits_before))  # the refresh is queued
    await drained(aegis)  # and sent: a second message, had it been one, is out too
    assert len(await aegis.bot_messages()) == sent_before
    await expect(status).to_have_count(1)

    # The gate: the demo's approval card, its heading bold and its arguments a block; Approve
    # edits it in place to say who approved it.
    await say(page, "/demo")
    card = answers.filter(has_text="Approval needed")
    await expect(card.locator("pre")).to_contain_text('"name"')
    assert await page.evaluate(CLIPPED) == []
    await card.scroll_into_view_if_needed()
    await card.screenshot(path=pictures / "approval-card.png")
    await card.get_by_role("button", name="Approve").click()
    settled = answers.filter(has_text=re.compile("Approved by"))
    await expect(settled.locator("b", has_text="Approved by")).to_be_visible()
    await expect(settled.get_by_role("button")).to_have_count(0)
    await expect(page.locator("#toast.show")).to_have_count(0, timeout=5000)
    await settled.evaluate("(card) => card.scrollIntoView({block: 'end'})")
    await page.screenshot(path=pictures / "chat.png")


async def edits(aegis) -> int:
    """How many edits the outbox has queued."""
    return sum(row.kind == OutboxKind.EDIT for row in await outbox_rows(aegis.store))


async def _more(count, than: int) -> bool:
    return await count > than


async def say(page, text: str) -> None:
    """Type ``text`` and send it, then wait until the page shows it sent."""
    from playwright.async_api import expect

    await page.fill("#input", text)
    await page.press("#input", "Enter")
    await expect(bubble(page, text).last).to_be_visible()
