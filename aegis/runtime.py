"""Wiring shared by every process: logging, Redis, the broker and its actors, the store."""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from logging.handlers import RotatingFileHandler

from dramatiq.brokers.redis import RedisBroker

from aegis.embedded_redis import EmbeddedRedis, describe_redis_url
from bot.config.settings import Settings
from bot.store import migrate
from bot.store.database import Store, wait_for
from jobs import load_actors
from jobs.worker.broker import queue_depths

# Libraries that would print a URL with the bot token in it, or the emulator key, at INFO.
QUIET_LOGGERS = ("httpx", "httpcore", "aiohttp.access", "telegram.Bot", "telegram.ext", "alembic")


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LOG_FILE = "aegis.log"  # in the data dir, written by `aegis up`
LOG_BYTES = 5 * 1024 * 1024  # rotated at this size, keeping LOG_KEEP older files
LOG_KEEP = 3


def setup_logging(settings: Settings, *, to_file: bool = False) -> None:
    """Log to stderr; ``to_file`` (``aegis up``, which often outlives its terminal) also to a
    rotated file in the data dir, mode 0600, that ``aegis logs`` reads. The Procfile's processes
    log to stderr only: their process manager keeps it (and one file cannot be rotated safely
    by several processes)."""
    logging.basicConfig(level=settings.log_level.upper(), format=LOG_FORMAT)
    if to_file:
        path = settings.ensure_data_dir() / LOG_FILE
        handler = _PrivateRotatingFile(path, maxBytes=LOG_BYTES, backupCount=LOG_KEEP)
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        logging.getLogger().addHandler(handler)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


class _PrivateRotatingFile(RotatingFileHandler):
    """A rotated log file readable by its owner alone, the first file and every later one."""

    def _open(self):
        return open(  # noqa: SIM115 (the handler keeps it open)
            self.baseFilename,
            self.mode,
            encoding=self.encoding,
            errors=self.errors,
            opener=lambda path, flags: os.open(path, flags, 0o600),
        )


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
