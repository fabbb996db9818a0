"""Background webhook delivery: POST each pending update, in order, until acknowledged.

Telegram keeps an update queued until the receiver answers 2xx and retries failures
with a growing delay, never skipping ahead; the loop below does the same with shorter
delays so tests stay fast.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from aiohttp import web

from emulator.keys import RUNTIME_KEY, STATE_KEY, TOKEN_KEY
from emulator.models import BotState
from emulator.state import EmulatorState

log = logging.getLogger(__name__)

RETRY_DELAYS = (0.1, 0.25, 0.5, 1.0, 2.0)
DELIVERY_TIMEOUT = aiohttp.ClientTimeout(total=10)


async def webhook_context(app: web.Application) -> AsyncIterator[None]:
    """cleanup_ctx: own the HTTP session and the delivery task for the app's lifetime."""
    runtime = app[RUNTIME_KEY]
    state = app[STATE_KEY]
    bot = state.register_bot(app[TOKEN_KEY])
    async with aiohttp.ClientSession(timeout=DELIVERY_TIMEOUT) as session:
        runtime.session = session
        runtime.delivery_task = asyncio.create_task(
            deliver_forever(state, bot, session, runtime.closing)
        )
        yield
        runtime.closing.set()
        bot.signal.notify()
        runtime.delivery_task.cancel()
        await asyncio.gather(runtime.delivery_task, return_exceptions=True)


async def wake_long_polls(app: web.Application) -> None:
    """on_shutdown: let pending long polls answer now instead of delaying shutdown."""
    app[RUNTIME_KEY].closing.set()
    for bot in app[STATE_KEY].bots.values():
        bot.signal.notify()
    app[STATE_KEY].chat_signal.notify()


async def deliver_forever(
    state: EmulatorState, bot: BotState, session: aiohttp.ClientSession, closing: asyncio.Event
) -> None:
    """Deliver the queue head whenever a webhook is set; otherwise sleep until woken."""
    failures = 0
    while not closing.is_set():
        if bot.webhook is None or not bot.updates:
            await bot.signal.wait(60)
            continue
        if await _post_head(state, bot, session):
            failures = 0
            continue
        delay = RETRY_DELAYS[min(failures, len(RETRY_DELAYS) - 1)]
        failures += 1
        await _sleep_unless_changed(bot, delay)


async def _post_head(state: EmulatorState, bot: BotState, session: aiohttp.ClientSession) -> bool:
    """POST the oldest pending update; True when the receiver acknowledged it."""
    hook = bot.webhook
    assert hook is not None
    update = {k: v for k, v in bot.updates[0].items() if not k.startswith("_emulator")}
    headers = {"X-Telegram-Bot-Api-Secret-Token": hook.secret_token} if hook.secret_token else {}
    try:
        async with session.post(hook.url, json=update, headers=headers) as response:
            if 200 <= response.status < 300:
                state.webhook_delivered(bot, _id_of(update))
                return True
            error = f"Wrong response from the webhook: {response.status} {response.reason}"
    except (aiohttp.ClientError, TimeoutError) as exc:
        error = f"Connection failed: {exc.__class__.__name__}"
    log.debug("webhook delivery to %s failed: %s", hook.url, error)
    state.webhook_failed(bot, error)
    return False


async def _sleep_unless_changed(bot: BotState, delay: float) -> None:
    """Back off, but wake early if the webhook is changed or removed meanwhile."""
    hook = bot.webhook
    loop = asyncio.get_running_loop()
    deadline = loop.time() + delay
    while bot.webhook is hook and (remaining := deadline - loop.time()) > 0:
        await bot.signal.wait(remaining)


def _id_of(update: dict[str, Any]) -> int:
    value = update.get("update_id")
    return value if isinstance(value, int) else 0
