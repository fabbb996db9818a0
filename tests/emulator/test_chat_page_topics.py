"""The chat page in a real browser shows a forum's topics, one topic's messages at a time, and
writes into the topic it shows."""

from __future__ import annotations

import telegram
from conftest import CONTROL_KEY

from emulator import DEFAULT_USER
from tests.helpers.chat_page import PHONE, bubble

FORUM = -1001234567890
ANN = {"id": 42, "first_name": "Ann"}


def chip(page, name: str):
    return page.locator("#topics button", has_text=name)


async def wait_for_tap(bot) -> telegram.CallbackQuery:
    """The first button tap the bot is sent, waiting for it as long polling does."""
    offset = None
    for _ in range(3):
        for update in await bot.get_updates(offset, timeout=5):
            offset = update.update_id + 1
            if update.callback_query:
                await bot.answer_callback_query(update.callback_query.id)
                return update.callback_query
    raise AssertionError("no tap reached the bot")


async def test_a_forums_topics_are_shown_switched_and_written_in(emulator, bot, page) -> None:
    from playwright.async_api import expect

    client = emulator.client
    await client.create_forum(FORUM, "Team")
    builds = (await bot.create_forum_topic(FORUM, "Builds")).message_thread_id
    deploys = (await bot.create_forum_topic(FORUM, "Deploys")).message_thread_id
    await bot.send_message(FORUM, "hello all")
    green = await bot.send_message(FORUM, "build 41 is green", message_thread_id=builds)
    await bot.send_message(FORUM, "details: 212 tests", reply_to_message_id=green.message_id)
    await bot.send_message(FORUM, "deployed v2", message_thread_id=deploys)
    await client.send_message("private hello")

    await page.goto(f"{emulator.url}/chat?key={CONTROL_KEY}")
    await expect(bubble(page, "private hello")).to_be_visible()
    await expect(page.locator("#topics")).to_be_hidden()  # the private chat stays as it was

    await page.select_option("#chat-pick", str(FORUM))
    await expect(page.locator("#title")).to_have_text("Team")
    await expect(page.locator("#topics button")).to_have_text(["General", "Builds", "Deploys"])
    await expect(chip(page, "General")).to_have_attribute("aria-pressed", "true")
    await expect(bubble(page, "hello all")).to_be_visible()
    await expect(bubble(page, "build 41 is green")).to_have_count(0)
    await expect(bubble(page, "private hello")).to_have_count(0)

    await chip(page, "Builds").click()
    await expect(chip(page, "Builds")).to_have_attribute("aria-pressed", "true")
    await expect(bubble(page, "build 41 is green")).to_be_visible()
    await expect(page.locator(".service")).to_have_text(["Aegis created the topic “Builds”"])
    reply = bubble(page, "details: 212 tests")
    await expect(reply.locator(".reply")).to_have_text("Aegisbuild 41 is green")
    # A plain message in a topic answers the topic's first message: Telegram quotes nothing.
    await expect(bubble(page, "build 41 is green").locator(".reply")).to_have_count(0)
    for elsewhere in ("hello all", "deployed v2"):
        await expect(bubble(page, elsewhere)).to_have_count(0)

    await page.fill("#input", "is it green?")
    await page.press("#input", "Enter")
    mine = bubble(page, "is it green?")
    await expect(mine).to_be_visible()
    await expect(mine).to_have_class("msg me")
    sent = (await client.messages(FORUM, message_thread_id=builds))[-1]
    assert (sent["text"], sent["from"]["id"]) == ("is it green?", DEFAULT_USER["id"])
    assert sent["message_thread_id"] == builds
    updates = await bot.get_updates()
    update = next(u for u in updates if u.message and u.message.text == "is it green?")
    assert update.message.is_topic_message and update.message.message_thread_id == builds
    assert update.message.chat.id == FORUM

    await chip(page, "Deploys").click()
    await expect(bubble(page, "deployed v2")).to_be_visible()
    await expect(bubble(page, "is it green?")).to_have_count(0)

    # What changes while the page is open shows without a reload: a new topic, a message of
    # someone else's (drawn on the left, with their name).
    alerts = (await bot.create_forum_topic(FORUM, "Alerts")).message_thread_id
    await expect(page.locator("#topics button")).to_have_count(4)
    await chip(page, "Alerts").click()
    await client.send_message("disk 91%", user=ANN, chat_id=FORUM, message_thread_id=alerts)
    await expect(bubble(page, "disk 91%").locator(".from")).to_have_text("Ann")
    await expect(bubble(page, "disk 91%")).to_have_class("msg other")

    # Readable on a phone: nothing is wider than the screen, and the last topic scrolls into reach.
    assert await page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    await expect(chip(page, "Alerts")).to_be_in_viewport()


async def test_general_takes_messages_without_a_thread(emulator, bot, page) -> None:
    from playwright.async_api import expect

    await emulator.client.create_forum(FORUM, "Team")
    builds = (await bot.create_forum_topic(FORUM, "Builds")).message_thread_id
    await page.goto(f"{emulator.url}/chat?key={CONTROL_KEY}#chat={FORUM}&topic={builds}")
    await expect(chip(page, "Builds")).to_have_attribute("aria-pressed", "true")

    await chip(page, "General").click()
    await page.fill("#input", "lunch?")
    await page.click("#send")
    await expect(bubble(page, "lunch?")).to_be_visible()
    sent = (await emulator.client.messages(FORUM))[-1]
    assert sent["text"] == "lunch?" and sent["message_thread_id"] is None
    assert await emulator.client.messages(FORUM, message_thread_id=builds) == [
        m for m in await emulator.client.messages(FORUM) if m["message_id"] == builds
    ]

    # A button in a topic is tapped in the forum, on its message.
    keyboard = telegram.InlineKeyboardMarkup.from_button(
        telegram.InlineKeyboardButton("Approve", callback_data="approve")
    )
    card = await bot.send_message(FORUM, "deploy?", message_thread_id=builds, reply_markup=keyboard)
    await chip(page, "Builds").click()
    await bubble(page, "deploy?").get_by_role("button", name="Approve").click()
    tapped = await wait_for_tap(bot)
    assert (tapped.data, tapped.message.chat.id) == ("approve", FORUM)
    assert tapped.message.message_id == card.message_id
    assert tapped.message.message_thread_id == builds

    await bot.delete_forum_topic(FORUM, builds)
    await expect(page.locator("#topics button")).to_have_text(["General"])


async def test_a_forum_is_made_from_the_page(emulator, page) -> None:
    from playwright.async_api import expect

    await page.goto(f"{emulator.url}/chat?key={CONTROL_KEY}")
    page.once("dialog", lambda dialog: dialog.accept("Ops"))
    await page.select_option("#chat-pick", "new-forum")
    await expect(page.locator("#title")).to_have_text("Ops")
    await expect(page.locator("#topics button")).to_have_text(["General"])
    (made,) = [c["chat"] for c in await emulator.client.chats() if c["chat"]["type"] != "private"]
    assert made["is_forum"] and made["title"] == "Ops" and str(made["id"]).startswith("-100")
    assert len(str(made["id"])) == len(str(FORUM))
