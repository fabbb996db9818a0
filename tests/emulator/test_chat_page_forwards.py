"""The chat page's Forward… panel against the whole of aegis: forwards are built as Telegram
builds them, so each channel post is its own task and the same message forwarded twice is one
(issue 19)."""

from __future__ import annotations

from aegis.botapi.endpoint import EMULATOR_PREFIX, emulator_key
from tests.helpers.stack import OWNER_CHAT
from tests.helpers.task_chat import task_rows


async def forward(page, kind: str, name: str, text: str) -> str:
    """Forward ``text`` from the panel; the bot's answer to it."""
    from playwright.async_api import expect

    answers = page.locator("#log .msg.bot")
    before = await answers.count()
    await page.click("#fwd-toggle")
    await page.select_option("#fwd-type", kind)
    await page.fill("#fwd-name", name)
    await page.fill("#input", text)
    await page.press("#input", "Enter")
    await expect(answers).to_have_count(before + 1, timeout=15000)
    return await answers.last.locator(".text").inner_text()


async def test_forwards_are_captured_as_telegram_would_have_them(aegis, page) -> None:
    from playwright.async_api import expect

    address = f"{aegis.settings.web_url}{EMULATOR_PREFIX}/chat?key={emulator_key(aegis.settings)}"
    await page.goto(address)
    await expect(page.locator("#status")).to_have_text("online (emulated)")

    first = await forward(page, "user", "Ann", "call the bank")
    assert first.startswith("Captured as task 1")
    # The receipt answers the forward, and is drawn so: a quote of it, headed by its origin.
    newest_answer = page.locator("#log .msg.bot").last
    await expect(newest_answer.locator(".reply")).to_have_text("Anncall the bank")
    # Each post of a channel is its own message, and so is one of another channel whose title
    # is as long (the page once made a channel's id of its title's length, every post's id 1).
    assert (await forward(page, "channel", "News", "release 1.0")).startswith("Captured as task 2")
    await expect(newest_answer.locator(".reply")).to_have_text("Newsrelease 1.0")
    assert (await forward(page, "channel", "News", "release 1.1")).startswith("Captured as task 3")
    assert (await forward(page, "channel", "Blog", "hello there")).startswith("Captured as task 4")
    await page.reload()  # the channels and their posts outlive the page
    await expect(page.locator("#status")).to_have_text("online (emulated)")
    assert (await forward(page, "channel", "News", "release 1.2")).startswith("Captured as task 5")

    # The same messages again, a second later at least: a forward made without its original
    # date would carry a later one, and be taken for a new message.
    await page.wait_for_timeout(1100)
    again = await forward(page, "channel", "News", "release 1.0")
    assert again.startswith("Already captured as task 2")
    assert (await forward(page, "user", "Ann", "call the bank")).startswith(
        "Already captured as task 1"
    )
    assert len(await task_rows(aegis)) == 5

    # What reached aegis is what Telegram sends: a channel id of -100 and ten digits, the same
    # for each post of a channel, post ids counting up, and a user's message with its date.
    origins = [
        m["forward_origin"]
        for m in await aegis.emulator.messages(OWNER_CHAT)
        if not m["from_bot"] and m["forward_origin"]
    ]
    channels = [o for o in origins if o["type"] == "channel"]
    news = {o["chat"]["id"] for o in channels if o["chat"]["title"] == "News"}
    blog = {o["chat"]["id"] for o in channels if o["chat"]["title"] == "Blog"}
    assert len(news) == len(blog) == 1 and news != blog
    assert all(str(chat).startswith("-100") and len(str(chat)) == 14 for chat in news | blog)
    posts = [(o["chat"]["title"], o["message_id"]) for o in channels]
    assert posts == [("News", 1), ("News", 2), ("Blog", 1), ("News", 3), ("News", 1)]
    users = [o for o in origins if o["type"] == "user"]
    assert [o["sender_user"]["first_name"] for o in users] == ["Ann", "Ann"]
    assert (
        users[0]["date"] == users[1]["date"] and users[0]["sender_user"] == users[1]["sender_user"]
    )
