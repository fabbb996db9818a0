"""Retention: the tables that grow with every message are pruned of what nobody reads any more.

Five tables grow for ever otherwise: the outbox (a row per message sent), the update log (a row per
Telegram update), the job runs, the model calls (whose budgets look back a day) and the audit. A
scheduled job (``prune_old_rows``) deletes what is
older than the owner's settings (``AEGIS_KEEP_DAYS``, and ``AEGIS_KEEP_AUDIT_DAYS`` for the audit,
which is kept longer because it is the record of who approved what).

Pruning never takes the database from the platform: rows are picked in a read transaction and
deleted in write transactions of at most ``BATCH`` rows, each a moment long, with a pause between
them in which every other writer gets its turn. The longest of those moments is reported.

What is never pruned, however old:
- an outbox row still owed (pending or sending), and one a live thing will edit or answer: the card
  of an interaction still open, the progress message of a run not over, the card of an incident
  still open, a row an unsent edit or reply points at;
- an update that is not handled or failed yet. An update older than a day can never come again
  (Telegram keeps an update at most 24 hours), so forgetting it cannot let a duplicate in; the
  settings' floor of two days keeps that true.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, delete, literal_column, not_, or_, select

from bot.agents.agent_run import UNDER_WAY
from bot.chat.outgoing import OWED, OutboxStatus
from bot.chat.updates import UpdateStatus
from bot.interactions.interaction import OPEN
from bot.store.database import Store
from bot.store.tables import (
    agent_runs,
    audit_events,
    incidents,
    interaction_cards,
    interactions,
    model_calls,
    outbox,
    runs,
    updates,
)
from bot.timeutil import now

BATCH = 500  # rows per write transaction: a few milliseconds of the write lock
PAUSE = 0.02  # seconds between batches, in which the platform's own writes go first
BUDGET = 60.0  # seconds per job at most; the next one goes on where this one stopped
SETTLED_OUTBOX = (OutboxStatus.SENT, OutboxStatus.FAILED)
SETTLED_UPDATES = (UpdateStatus.HANDLED, UpdateStatus.FAILED)


@dataclass(frozen=True)
class Keep:
    """How long each kind of row is kept."""

    days: int  # delivered messages, handled updates, job runs
    audit_days: int

    def cutoff(self, moment: datetime) -> datetime:
        return moment - timedelta(days=self.days)

    def audit_cutoff(self, moment: datetime) -> datetime:
        return moment - timedelta(days=self.audit_days)


@dataclass
class Pruned:
    """What one pass removed, and the longest it held the write lock (milliseconds)."""

    rows: dict[str, int] = field(default_factory=dict)
    lock_ms: list[float] = field(default_factory=list)  # each batch's hold of the write lock
    finished: bool = True  # False: the time budget ran out first; the next pass goes on

    @property
    def batches(self) -> int:
        return len(self.lock_ms)

    @property
    def longest_lock_ms(self) -> float:
        return max(self.lock_ms, default=0.0)

    @property
    def median_lock_ms(self) -> float:
        return sorted(self.lock_ms)[len(self.lock_ms) // 2] if self.lock_ms else 0.0

    def summary(self) -> dict[str, Any]:
        return {
            **{f"{table}_pruned": count for table, count in self.rows.items()},
            "batches": self.batches,
            "longest_lock_ms": round(self.longest_lock_ms, 1),
            "median_lock_ms": round(self.median_lock_ms, 1),
            "finished": self.finished,
        }


Batches = Callable[[Store], AsyncIterator[list]]  # the keys to delete, a batch at a time
Delete = Callable[[Any, list], Awaitable[int]]  # (conn, keys) -> rows deleted


class Retention:
    def __init__(
        self,
        store: Store,
        keep: Keep,
        *,
        batch: int = BATCH,
        pause: float = PAUSE,
        budget: float = BUDGET,
    ) -> None:
        self.store = store
        self.keep = keep
        self.batch = batch
        self.pause = pause
        self.budget = budget

    async def prune(self, moment: datetime | None = None) -> Pruned:
        """One pass over the five tables, oldest rows first, within the time budget."""
        moment = moment or now()
        cutoff, audit_cutoff = self.keep.cutoff(moment), self.keep.audit_cutoff(moment)
        size = self.batch
        sweeps = {
            "outbox": (_outbox_batches(cutoff, size), _outbox_deleter(cutoff)),
            "updates": (_updates_batches(cutoff, size), _updates_deleter(cutoff)),
            "job_runs": (_older_batches(runs.c.started_at, cutoff, size), _by_id(runs)),
            "audit_events": (
                _older_batches(audit_events.c.at, audit_cutoff, size),
                _by_id(audit_events),
            ),
            # No index on ``at``: ids grow with time, so the oldest are found first by id.
            "model_calls": (
                _older_batches(model_calls.c.at, cutoff, size, order=model_calls.c.id),
                _by_id(model_calls),
            ),
        }
        pruned = Pruned()
        deadline = time.monotonic() + self.budget
        for name, (batches, remove) in sweeps.items():
            pruned.rows[name] = await self._sweep(batches, remove, pruned, deadline)
        return pruned

    async def _sweep(self, batches: Batches, remove: Delete, pruned: Pruned, deadline) -> int:
        total = 0
        keys_of = batches(self.store)
        try:
            async for keys in keys_of:
                if time.monotonic() > deadline:
                    pruned.finished = False
                    break
                async with self.store.write() as conn:
                    began = time.perf_counter()
                    total += await remove(conn, keys)
                pruned.lock_ms.append((time.perf_counter() - began) * 1000)  # with the commit
                await asyncio.sleep(self.pause)
        finally:
            await keys_of.aclose()
        return total


def _outbox_batches(cutoff: datetime, batch: int) -> Batches:
    """Settled rows older than the cutoff, walking the primary key (never a scan of the table).
    The walk ends at the first row queued after the cutoff: ids grow with time, the rest is
    younger. Rows kept (still owed, or in use) are walked past."""

    async def batches(store: Store) -> AsyncIterator[list[int]]:
        after = 0
        while True:
            query = (
                select(outbox.c.id, outbox.c.status, outbox.c.created_at)
                .where(outbox.c.id > after)
                .order_by(outbox.c.id)
                .limit(batch)
            )
            async with store.read() as conn:
                rows = (await conn.execute(query)).all()
            if not rows:
                return
            after = rows[-1].id
            old = [row for row in rows if row.created_at < cutoff]
            keys = [row.id for row in old if row.status in SETTLED_OUTBOX]
            if keys:
                yield keys
            if len(old) < len(rows):
                return

    return batches


def _outbox_deleter(cutoff: datetime) -> Delete:
    """Delete the picked rows, checking again inside the write transaction that each is still
    settled and old, and not one a live card, run, incident, edit or reply will use."""

    async def remove(conn, ids: list[int]) -> int:
        in_use = or_(
            outbox.c.id.in_(
                select(interaction_cards.c.outbox_id)
                .join(interactions, interactions.c.id == interaction_cards.c.interaction_id)
                .where(interaction_cards.c.outbox_id.in_(ids), interactions.c.status.in_(OPEN))
            ),
            # Found from the live side, through the indexes on status and closed_at: runs
            # under way and incidents open are few, every run and incident ever is not.
            outbox.c.id.in_(
                select(agent_runs.c.progress_outbox_id).where(agent_runs.c.status.in_(UNDER_WAY))
            ),
            outbox.c.id.in_(
                select(incidents.c.card_outbox_id).where(incidents.c.closed_at.is_(None))
            ),
            outbox.c.id.in_(_pointed_at_by_owed("edit_of")),
            outbox.c.id.in_(_pointed_at_by_owed("reply_to_outbox")),
        )
        gone = await conn.execute(
            delete(outbox).where(
                outbox.c.id.in_(ids),
                outbox.c.status.in_(SETTLED_OUTBOX),
                outbox.c.created_at < cutoff,
                not_(in_use),
            )
        )
        # A settled interaction's card whose message is gone is forgotten with it.
        await conn.execute(
            delete(interaction_cards).where(
                interaction_cards.c.outbox_id.in_(ids),
                interaction_cards.c.outbox_id.not_in(
                    select(outbox.c.id).where(outbox.c.id.in_(ids))
                ),
            )
        )
        return gone.rowcount

    return remove


def _pointed_at_by_owed(column: str):
    """The rows an owed edit or reply points at. The owed rows are read through
    ix_outbox_unsent (UNSENT repeated on the alias, word for word), so this reads few rows."""
    owed = outbox.alias("owed")
    return select(owed.c[column]).where(
        owed.c.status != literal_column("'sent'"),
        owed.c.status.in_(OWED),
        owed.c[column].is_not(None),
    )


def _updates_batches(cutoff: datetime, batch: int) -> Batches:
    """Settled updates received before the cutoff, through ix_updates_status: a settled update's
    ``retry_at`` is never before it was received, so ``retry_at < cutoff`` finds only old ones."""
    query = (
        select(updates.c.bot_id, updates.c.update_id)
        .where(updates.c.status.in_(SETTLED_UPDATES), updates.c.retry_at < cutoff)
        .limit(batch)
    )
    return _until_none_left(query)


def _updates_deleter(cutoff: datetime) -> Delete:
    async def remove(conn, keys: list) -> int:
        pairs = or_(*(and_(updates.c.bot_id == b, updates.c.update_id == u) for b, u in keys))
        gone = await conn.execute(
            delete(updates).where(
                pairs, updates.c.status.in_(SETTLED_UPDATES), updates.c.retry_at < cutoff
            )
        )
        return gone.rowcount

    return remove


def _older_batches(at, cutoff: datetime, batch: int, *, order=None) -> Batches:
    """Rows whose ``at`` is before the cutoff, oldest first, through the index on ``at``."""
    key = at.table.c.id
    return _until_none_left(
        select(key).where(at < cutoff).order_by(order if order is not None else at).limit(batch)
    )


def _until_none_left(query) -> Batches:
    """The query again and again, as each batch is deleted, until it finds none; a batch found
    twice (it could not be deleted) ends it rather than spin."""

    async def batches(store: Store) -> AsyncIterator[list]:
        last = None
        while True:
            async with store.read() as conn:
                rows = (await conn.execute(query)).all()
            keys = [tuple(row) if len(row) > 1 else row[0] for row in rows]
            if not keys or keys == last:
                return
            last = keys
            yield keys

    return batches


def _by_id(table) -> Delete:
    async def remove(conn, ids: list[int]) -> int:
        return (await conn.execute(delete(table).where(table.c.id.in_(ids)))).rowcount

    return remove
