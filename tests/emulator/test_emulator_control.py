"""The control API, the chat page, forwards, mounting, and a full PTB Application."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
import telegram
from aiohttp import web
from conftest import CONTROL_KEY, TOKEN, start_site
from telegram import (
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    MessageOriginChannel,
    MessageOriginChat,
    MessageOriginHiddenUser,
    MessageOriginUser,
)
from telegram.ext import Application, CallbackQueryHandler, CommandHandler

from emulator import DEFAULT_USER, EmulatorState, create_emulator_app
from emulator.client import EmulatorClient, EmulatorClientError

CHAT = DEFAULT_USER["id"]


async def test_control_key_is_required(emulator) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{emulator.url}/_emulator/stats") as resp:
            assert resp.status == 403
        async with http.get(f"{emulator.url}/_emulator/stats", params={"key": "nope"}) as resp:
            assert resp.status == 403
        async with http.get(f"{emulator.url}/_emulator/stats", params={"key": CONTROL_KEY}) as r:
            assert r.status == 200
    with pytest.raises(EmulatorClientError) as caught:
        await EmulatorClient(emulator.url, "wrong").send_message("hi")
    assert caught.value.status == 403


async def test_chat_page_is_served(emulator) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{emulator.url}/chat?key=x") as resp:
            html = await resp.text()
            assert resp.status == 200 and resp.content_type == "text/html"
            assert resp.headers["Referrer-Policy"] == "no-referrer"
        async with http.get(f"{emulator.url}/?key=abc", allow_redirects=False) as resp:
            assert resp.status == 302 and resp.headers["Location"] == "/chat?key=abc"
    assert "<textarea" in html and "/_emulator/" in html and "http://" not in html


ORIGINS = [
    ({"type": "user", "sender_user": {"id": 77, "first_name": "Eve"}}, MessageOriginUser),
    ({"type": "hidden_user", "sender_user_name": "Ghost"}, MessageOriginHiddenUser),
    (
        {
            "type": "channel",
            "chat": {"id": -1001234, "type": "channel", "title": "News"},
            "message_id": 5,
        },
        MessageOriginChannel,
    ),
    (
        {"type": "chat", "sender_chat": {"id": -1005678, "type": "supergroup", "title": "Grp"}},
        MessageOriginChat,
    ),
]


@pytest.mark.parametrize(("origin", "expected"), ORIGINS)
async def test_forward_origins_parse_in_ptb(emulator, bot, origin, expected) -> None:
    await emulator.client.send_message("look at this", forward_origin=origin)
    (update,) = await bot.get_updates()
    parsed = update.message.forward_origin
    assert isinstance(parsed, expected)
    assert parsed.date.timestamp() > 0


async def test_invalid_forward_origin_is_refused(emulator) -> None:
    with pytest.raises(EmulatorClientError) as caught:
        await emulator.client.send_message("x", forward_origin={"type": "martian"})
    assert caught.value.status == 400


async def test_user_edit_and_reply(emulator, bot) -> None:
    sent = await emulator.client.send_message("typo")
    mid = sent["message"]["message_id"]
    await emulator.client.edit_message(CHAT, mid, "fixed")
    reply = await emulator.client.send_message("also", reply_to_message_id=mid)
    first, second, third = await bot.get_updates()
    assert second.edited_message.text == "fixed"
    assert third.message.reply_to_message.message_id == mid
    assert reply["message"]["reply_to_message"]["text"] == "fixed"


async def test_raw_updates_are_queued_verbatim(emulator, bot) -> None:
    result = await emulator.client.inject_update({"mystery_update": {"x": 1}})
    await emulator.client.inject_update({"update_id": 500, "message": {"garbage": True}})
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{emulator.url}/bot{TOKEN}/getUpdates") as resp:
            updates = (await resp.json())["result"]
    assert updates[0] == {"update_id": result["update_id"], "mystery_update": {"x": 1}}
    assert updates[1]["update_id"] == 500


async def test_transcript_long_poll_wakes_on_edit(emulator, bot) -> None:
    await emulator.client.send_message("hi")
    sent = await bot.send_message(CHAT, "draft")
    chat = await emulator.client.chat(CHAT)
    waiting = asyncio.create_task(emulator.client.chat(CHAT, version=chat["version"], wait=10))
    await asyncio.sleep(0.2)
    assert not waiting.done()
    await bot.edit_message_text("final", CHAT, sent.message_id)
    result = await asyncio.wait_for(waiting, 3)
    assert result["version"] > chat["version"]
    assert result["messages"][-1]["text"] == "final" and result["messages"][-1]["edited"]


async def test_wait_for_bot_messages(emulator, bot) -> None:
    await emulator.client.send_message("hi")

    async def reply_later() -> None:
        await asyncio.sleep(0.3)
        await bot.send_message(CHAT, "one")
        await bot.send_message(CHAT, "two")

    task = asyncio.create_task(reply_later())
    found = await emulator.client.wait_for_bot_messages(CHAT, 2, timeout=5)
    await task
    assert [m["text"] for m in found] == ["one", "two"]
    with pytest.raises(asyncio.TimeoutError):
        await emulator.client.wait_for_bot_messages(CHAT, 3, timeout=0.5)


async def test_stats_count_activity(emulator, bot) -> None:
    await emulator.client.send_message("hi")
    await bot.get_updates()
    await bot.send_message(CHAT, "hello")
    stats = await emulator.client.stats()
    assert stats["updates_injected"] == 1 and stats["updates_delivered"] == 1
    assert stats["messages_sent_by_bot"] == 1 and stats["rate_limited"] == 0


async def test_mounted_under_prefix() -> None:
    state = EmulatorState()
    parent = web_parent(create_emulator_app(state, token=TOKEN, control_key=CONTROL_KEY))
    runner, url = await start_site(parent)
    try:
        client = EmulatorClient(f"{url}/emulator", CONTROL_KEY)
        await client.send_message("/start")
        async with telegram.Bot(TOKEN, base_url=f"{url}/emulator/bot") as bot:
            (update,) = await bot.get_updates()
            await bot.send_message(update.message.chat.id, "mounted")
        assert (await client.wait_for_bot_messages(CHAT, 1))[0]["text"] == "mounted"
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{url}/emulator/?key=k", allow_redirects=False) as resp:
                assert resp.headers["Location"] == "/emulator/chat?key=k"
            async with http.get(f"{url}/emulator/chat") as resp:
                assert resp.status == 200
    finally:
        await runner.cleanup()


def web_parent(emulator_app: web.Application) -> web.Application:
    parent = web.Application()
    parent.add_subapp("/emulator", emulator_app)
    return parent


async def test_ptb_application_end_to_end(emulator) -> None:
    """A real PTB Application polls the emulator, replies, and answers a button tap."""

    async def start(update, context) -> None:
        markup = InlineKeyboardMarkup([[InlineKeyboardButton("Approve", callback_data="ok")]])
        await update.message.reply_text("Approve?", reply_markup=markup)

    async def button(update, context) -> None:
        await update.callback_query.answer("Approved")
        await update.callback_query.edit_message_text("Approved ✅")

    app = Application.builder().token(TOKEN).base_url(emulator.bot_base_url).build()
    app.add_handler(CommandHandler("start", start))
    app.add_handler(CallbackQueryHandler(button))
    client = emulator.client
    async with app:
        await app.start()
        await app.updater.start_polling(poll_interval=0, timeout=5)
        try:
            await client.send_message("/start")
            (prompt,) = await client.wait_for_bot_messages(CHAT, 1)
            tap = await client.tap(CHAT, prompt["message_id"], "ok")
            for _ in range(50):
                answer = await client.callback_answer(tap["callback_query_id"])
                if answer:
                    break
                await asyncio.sleep(0.1)
            assert answer["text"] == "Approved"
            view = await client.chat(CHAT)
            for _ in range(50):
                if view["messages"][-1]["text"] == "Approved ✅":
                    break
                view = await client.chat(CHAT, version=view["version"], wait=2)
            assert view["messages"][-1]["edited"] and view["messages"][-1]["reply_markup"] is None
        finally:
            await app.updater.stop()
            await app.stop()


async def test_user_document_and_group_chat(emulator, bot) -> None:
    body = {"text": "report", "document": {"file_name": "r.pdf", "file_size": 12}}
    await emulator.client.inject_message(body)
    group = {"chat_id": -100123, "chat": {"type": "supergroup", "title": "Team"}, "text": "hi"}
    await emulator.client.inject_message(group)
    first, second = await bot.get_updates()
    assert first.message.document.file_name == "r.pdf" and first.message.caption == "report"
    assert second.message.chat.type == "supergroup" and second.message.chat.title == "Team"
    sent = await bot.send_message(-100123, "hello team")
    assert sent.message_id == 2
