"""Webhook delivery: secret header, ordering, retries, and switching back to polling."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web
from conftest import start_site
from telegram.error import Conflict

from emulator import DEFAULT_USER


class Receiver:
    """A tiny webhook endpoint that fails its first ``fail_first`` requests."""

    def __init__(self, fail_first: int = 0) -> None:
        self.fail_first = fail_first
        self.received: list[tuple[dict[str, Any], str | None]] = []
        self.attempts = 0
        self.arrived = asyncio.Event()

    async def handle(self, request: web.Request) -> web.Response:
        self.attempts += 1
        if self.attempts <= self.fail_first:
            return web.Response(status=500)
        body = await request.json()
        self.received.append((body, request.headers.get("X-Telegram-Bot-Api-Secret-Token")))
        self.arrived.set()
        return web.Response(text="ok")

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/hook", self.handle)
        return app


async def wait_for(predicate, seconds: float = 5.0) -> None:
    """Poll a cheap in-memory predicate (the receiver's list, the emulator's stats)."""
    for _ in range(int(seconds / 0.02)):
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not reached in time")


async def test_webhook_delivery_with_secret_retry_and_order(emulator, bot) -> None:
    receiver = Receiver(fail_first=2)
    runner, url = await start_site(receiver.app())
    try:
        await bot.set_webhook(f"{url}/hook", secret_token="s3cret-Token_1")
        await emulator.client.send_message("first")
        await emulator.client.send_message("second")
        await wait_for(lambda: len(receiver.received) == 2)
        texts = [body["message"]["text"] for body, _ in receiver.received]
        assert texts == ["first", "second"]
        assert {secret for _, secret in receiver.received} == {"s3cret-Token_1"}
        stats = await emulator.client.stats()
        assert stats["webhook_failures"] == 2 and stats["webhook_deliveries"] == 2
        assert stats["pending_updates"] == 0
        info = await bot.get_webhook_info()
        assert info.pending_update_count == 0 and info.last_error_message
    finally:
        await runner.cleanup()


async def test_no_secret_header_when_unset_and_back_to_polling(emulator, bot) -> None:
    receiver = Receiver()
    runner, url = await start_site(receiver.app())
    try:
        await bot.set_webhook(f"{url}/hook")
        await emulator.client.send_message("via hook")
        await wait_for(lambda: receiver.received)
        assert receiver.received[0][1] is None
        try:
            await bot.get_updates()
            raise AssertionError("getUpdates must conflict while a webhook is set")
        except Conflict:
            pass
        await bot.delete_webhook()
        await emulator.client.send_message("via polling")
        (update,) = await bot.get_updates()
        assert update.message.text == "via polling"
        assert update.message.chat.id == DEFAULT_USER["id"]
    finally:
        await runner.cleanup()


async def test_unreachable_webhook_keeps_updates_pending(emulator, bot) -> None:
    await bot.set_webhook("http://127.0.0.1:9/unreachable")
    await emulator.client.send_message("stuck")
    await wait_for(lambda: emulator.state.stats.webhook_failures >= 1)
    await bot.delete_webhook()
    (update,) = await bot.get_updates()
    assert update.message.text == "stuck"


async def test_delete_webhook_can_drop_pending(emulator, bot) -> None:
    await bot.set_webhook("http://127.0.0.1:9/unreachable")
    await emulator.client.send_message("dropped")
    await bot.delete_webhook(drop_pending_updates=True)
    assert await bot.get_updates() == ()
