"""The chat page in a real browser, in the private chat with the bot: where it scrolls, what it
says of its connection, and replies drawn as replies (issue 19)."""

from __future__ import annotations

from conftest import CONTROL_KEY

from emulator import DEFAULT_USER
from tests.helpers.chat_page import bubble

ME = DEFAULT_USER["id"]
AT_BOTTOM = "(log) => log.scrollHeight - log.scrollTop - log.clientHeight < 2"


async def test_your_own_message_scrolls_down_and_news_below_is_marked(emulator, bot, page) -> None:
    from playwright.async_api import expect

    await emulator.client.send_message("/start")
    for n in range(30):
        await bot.send_message(ME, f"line {n}")
    await page.goto(f"{emulator.url}/chat?key={CONTROL_KEY}")
    await expect(bubble(page, "line 29")).to_be_in_viewport()
    log = page.locator("#log")

    # Scrolled up to read, the page keeps its place when the bot writes, and says so below.
    await log.evaluate("(log) => { log.scrollTop = 0; }")
    await bot.send_message(ME, "news while away")
    jump = page.locator("#jump")
    await expect(jump).to_be_visible()
    await expect(jump).to_have_text("New messages ↓")
    await expect(bubble(page, "line 0")).to_be_in_viewport()
    await expect(bubble(page, "news while away")).not_to_be_in_viewport()

    await jump.click()
    await expect(bubble(page, "news while away")).to_be_in_viewport()
    await expect(jump).to_be_hidden()
    assert await log.evaluate(AT_BOTTOM)

    # What you write yourself is always shown, wherever you were.
    await log.evaluate("(log) => { log.scrollTop = 0; }")
    await page.fill("#input", "my own words")
    await page.press("#input", "Enter")
    await expect(bubble(page, "my own words")).to_be_in_viewport()
    assert await log.evaluate(AT_BOTTOM)
    await expect(jump).to_be_hidden()

    # Scrolling down by hand takes the marker away too.
    await log.evaluate("(log) => { log.scrollTop = 0; }")
    await bot.send_message(ME, "more news")
    await expect(jump).to_be_visible()
    await log.evaluate("(log) => { log.scrollTop = log.scrollHeight; }")
    await expect(jump).to_be_hidden()


async def test_a_fresh_chat_is_online_at_once(emulator, page) -> None:
    """No chat yet: the first long poll waits for news, but the page is online before it ends."""
    from playwright.async_api import expect

    await page.goto(f"{emulator.url}/chat?key={CONTROL_KEY}")
    await expect(page.locator("#status")).to_have_text("online (emulated)", timeout=5000)
    await expect(page.locator("#banner")).to_be_hidden()


async def test_a_wrong_key_says_where_the_right_one_is(emulator, page) -> None:
    from playwright.async_api import expect

    for address in (f"{emulator.url}/chat?key=not-the-key", f"{emulator.url}/chat"):
        await page.goto(address)
        await expect(page.locator("#status")).to_have_text("wrong key")
        banner = page.locator("#banner")
        await expect(banner).to_contain_text("aegis up")
        await expect(banner).to_contain_text("aegis open")
        await expect(banner).to_contain_text("secrets/emulator-key")
        await page.wait_for_timeout(2500)  # a retry, if the page still made one, is done by now
        await expect(page.locator("#status")).to_have_text("wrong key")


async def test_a_reply_quotes_what_it_answers(emulator, bot, page) -> None:
    from playwright.async_api import expect

    asked = (await emulator.client.send_message("what is on today?\nand tomorrow?"))["message"]
    await bot.send_message(ME, "two meetings", reply_to_message_id=asked["message_id"])
    await page.goto(f"{emulator.url}/chat?key={CONTROL_KEY}")
    answer = bubble(page, "two meetings")
    quote = answer.locator(".reply")
    await expect(quote).to_have_text("Youwhat is on today?")
    question = bubble(page, "what is on today?\nand tomorrow?")
    await expect(question.locator(".reply")).to_have_count(0)
    # The quote (its first line) sits above the reply's own text, as in Telegram.
    boxes = [await quote.bounding_box(), await answer.locator(".text").bounding_box()]
    assert boxes[0]["y"] + boxes[0]["height"] <= boxes[1]["y"]
