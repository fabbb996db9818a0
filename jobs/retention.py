"""Retention (bot/upkeep/retention.py): the hourly pruning of old messages, updates, job runs and
audit events, in short batches that leave the database to the platform between them."""

from __future__ import annotations

import logging

import dramatiq

from bot.upkeep.retention import Keep, Retention
from jobs.worker.broker import require_broker
from jobs.worker.resources import resources

require_broker()
logger = logging.getLogger(__name__)


@dramatiq.actor(queue_name="default", max_retries=0)  # the next hour's pass goes on from here
async def prune_old_rows(schedule: str = "") -> dict:
    platform = (await resources()).platform
    settings = platform.settings
    keep = Keep(days=settings.keep_days, audit_days=settings.keep_audit_days)
    pruned = await Retention(platform.store, keep).prune()
    if any(pruned.rows.values()):
        logger.info(
            "pruned %s (the write lock held at most %.0f ms at a time)%s",
            ", ".join(f"{count} {table}" for table, count in pruned.rows.items() if count),
            pruned.longest_lock_ms,
            "" if pruned.finished else "; more next hour",
        )
    return pruned.summary()
