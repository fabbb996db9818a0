"""What actors need in this worker process: the core services (``.platform``), a Bot, and the
broker's Redis on the worker's loop.

Settings arrive once, from the process that starts the worker (``use_settings``). The
loop-bound objects are created lazily inside the worker's event loop, the one Dramatiq's AsyncIO
middleware runs, never at import time and never on another loop.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import dramatiq
import redis.asyncio
from telegram import Bot
from telegram.error import NetworkError

from aegis.botapi.endpoint import make_bot
from bot.config.secrets import SecretFiles, callback_signer
from bot.config.settings import Settings
from bot.core import Platform
from bot.store.database import Store
from federation import client as federation_client
from jobs.monitors import probe
from jobs.worker.enqueue import make_enqueue
from jobs.worker.redis_client import loop_client

logger = logging.getLogger(__name__)


@dataclass
class Resources:
    """The core services, and what only actors use: the Bot (deliveries) and Redis."""

    platform: Platform
    bot: Bot
    redis: redis.asyncio.Redis  # the broker's Redis, on this loop (the delivery's send windows)


_settings: Settings | None = None
_resources: Resources | None = None
_lock: asyncio.Lock | None = None


def use_settings(settings: Settings) -> None:
    global _settings, _resources, _lock
    _settings, _resources, _lock = settings, None, None


async def resources() -> Resources:
    global _resources, _lock
    if _resources is not None:
        return _resources
    if _settings is None:
        raise RuntimeError("jobs.worker.resources.use_settings() was not called in this process")
    _lock = _lock or asyncio.Lock()
    async with _lock:
        if _resources is None:
            _resources = await _create(_settings)
    return _resources


async def close_resources() -> None:
    global _resources, _lock
    _lock = None  # bound to this loop; a worker started later in this process has its own
    if _resources is None:
        return
    current, _resources = _resources, None
    try:
        await probe.close()  # the monitors' pooled connections
        await current.bot.shutdown()
    finally:
        try:
            await current.redis.aclose()
        finally:
            await current.platform.store.close()


async def _create(settings: Settings) -> Resources:
    store = Store(settings.effective_database_url)
    bot = make_bot(settings)
    try:
        await bot.initialize()
    except NetworkError as exc:
        # The Bot API may be down, or not up yet (``aegis up`` starts the worker before the web
        # server that hosts the emulator). The store must still serve heartbeats and job runs; the
        # Bot's connections are ready, and a send that fails is retried like any network error.
        logger.warning("the Bot API is unreachable for now: %s", exc.message)
    signer = callback_signer(SecretFiles(settings.data_dir))
    platform = Platform.build(settings, store, signer, make_enqueue(dramatiq.get_broker()))
    federation_client.plug_into(platform)  # peers.status, for the runs' agents
    redis_client = loop_client()
    return Resources(platform, bot, redis_client)
