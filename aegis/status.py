"""``aegis status``: what /status shows in chat, from the shell of the machine aegis runs on.

It reads; it starts nothing: no embedded Redis (an embedded one that is not running is reported
as such), no migration, and a data dir where aegis never ran is said to be one.
"""

from __future__ import annotations

import asyncio

import redis

from aegis import instance
from aegis.embedded_redis import EmbeddedRedis, describe_redis_url
from bot.chat.outbox import Outbox
from bot.chat.text import plain
from bot.chat.topics import Topics
from bot.chat.views.status import gather_status
from bot.config.settings import Settings
from bot.errors import StoreError
from bot.store.database import Store
from bot.upkeep.heartbeats import Heartbeats
from bot.upkeep.job_runs import JobRuns
from bot.upkeep.schedules import Schedules
from jobs.worker.broker import NAMESPACE, QUEUES


def run_status(settings: Settings, out) -> int:
    text, code = asyncio.run(status_text(settings))
    out.write(text + "\n")
    return code


async def status_text(settings: Settings) -> tuple[str, int]:
    if settings.database_url is None and not settings.sqlite_path.exists():
        return (
            f"aegis has not run on the data dir {settings.data_dir.resolve()} yet: nothing to "
            "show. Start it with `aegis up`.",
            1,
        )
    running = instance.holder(settings, "web")
    head = f"aegis runs here: {running}." if running else "No aegis web process runs here."
    depths, broker = await asyncio.to_thread(_queues, settings)
    store = Store(settings.effective_database_url)
    try:
        report = await gather_status(
            Heartbeats(store),
            Outbox(store),
            JobRuns(store),
            queue_depths=depths,
            database=store.describe(),
            broker=broker,
            schedules=Schedules(store),
            transcribe_url=settings.transcribe_url,
            topics=Topics(store),
        )
    except StoreError as exc:
        return f"{head}\nThe database cannot be read: {exc}", 1
    finally:
        await store.close()
    return f"{head}\n\n{plain(report.render())}", 0


def _queues(settings: Settings) -> tuple[dict[str, int] | None, str]:
    """Messages waiting per queue, and the broker in words; None when it cannot be reached."""
    if settings.redis_url:
        url, described = settings.redis_url, describe_redis_url(settings.redis_url)
    else:
        embedded = EmbeddedRedis(settings.data_dir)
        if not embedded.is_running():
            return None, "the embedded Redis, not running"
        url, described = embedded.url, "the embedded Redis"
    try:
        client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        with client:
            depths = {
                queue: client.llen(f"{NAMESPACE}:{queue}") + client.llen(f"{NAMESPACE}:{queue}.DQ")
                for queue in QUEUES
            }
    except (redis.RedisError, OSError):
        return None, f"{described}, unreachable"
    return depths, described
