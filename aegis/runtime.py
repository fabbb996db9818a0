"""Wiring shared by every process: logging, Redis, the broker and its actors, the store."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from dramatiq.brokers.redis import RedisBroker

from aegis.embedded_redis import EmbeddedRedis, describe_redis_url
from bot.config.settings import Settings
from bot.store import migrate
from bot.store.database import Store, wait_for
from jobs import load_actors
from jobs.broker import queue_depths

# Libraries that would print a URL with the bot token in it, or the emulator key, at INFO.
QUIET_LOGGERS = ("httpx", "httpcore", "aiohttp.access", "telegram.Bot", "telegram.ext", "alembic")


def setup_logging(settings: Settings) -> None:
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


@dataclass
class RedisTarget:
    url: str
    embedded: EmbeddedRedis | None
    started_here: bool

    @property
    def description(self) -> str:
        where = describe_redis_url(self.url)
        return f"embedded {where}" if self.embedded else where


def resolve_redis(settings: Settings) -> RedisTarget:
    """AEGIS_REDIS_URL, or the embedded Redis in the data dir (started if it is not running)."""
    if settings.redis_url:
        return RedisTarget(settings.redis_url, None, False)
    embedded = EmbeddedRedis(settings.ensure_data_dir())
    started = embedded.ensure_running()
    return RedisTarget(embedded.url, embedded, started)


def open_broker(settings: Settings, target: RedisTarget) -> RedisBroker:
    return load_actors(settings, target.url)


async def open_store(settings: Settings) -> Store:
    """Connect, wait for the database if it is still starting, and apply migrations."""
    settings.ensure_data_dir()
    store = Store(settings.effective_database_url)
    await wait_for(store, attempts=15)
    applied = await migrate.upgrade(store)
    if applied:
        logging.getLogger(__name__).info("applied migrations: %s", ", ".join(applied))
    return store


def make_queue_depths(broker: RedisBroker):
    async def depths() -> dict[str, int]:
        return await asyncio.to_thread(queue_depths, broker)

    return depths
