"""When each part the clock drives may next have work, read in one statement a turn.

The clock (aegis/clock.py) enqueues what the schedules, the reminders, the monitors' slots and
the process watches have due. Each describes itself as a ``Due``: the scalar queries whose least
value, each plus its delay, is the soonest moment it may have work; how far ahead of that moment
it starts; and the work. All of them are read in one statement, so a turn with nothing due is one
read of one row: before, each part read for itself, twice for some, six transactions a second
that were most of what an idle aegis spent (bench/idle.py).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Select, select

from bot.errors import BrokerError, StoreError
from bot.store.database import Store
from bot.timeutil import now

logger = logging.getLogger(__name__)

Enqueue = Callable[..., Awaitable[None]]


@dataclass(frozen=True)
class Soonest:
    """A query of one scalar, a moment or NULL (nothing), and how long after it work is due."""

    query: Select
    after: timedelta = timedelta(0)


@dataclass(frozen=True)
class Due:
    """A part of the clock's turn: it has work once its soonest moment less ``ahead`` has come,
    and ``work`` enqueues what is due (each part re-reads its own rows, claiming them)."""

    name: str
    soonest: tuple[Soonest, ...]
    work: Callable[[Enqueue], Awaitable[object]]
    ahead: timedelta = timedelta(0)

    def is_due(self, at: datetime | None, moment: datetime) -> bool:
        return at is not None and at - self.ahead <= moment

    def seconds_until(self, at: datetime | None, moment: datetime, ceiling: float) -> float:
        """How long the clock may sleep for this part: until it is due, at most ``ceiling``."""
        if at is None:
            return ceiling
        return max(0.0, min(ceiling, (at - self.ahead - moment).total_seconds()))


async def soonest(store: Store, parts: Sequence[Due]) -> list[datetime | None]:
    """Each part's soonest moment (None: nothing ahead), all read in one statement."""
    columns = [each.query.scalar_subquery() for part in parts for each in part.soonest]
    if not columns:
        return []
    async with store.read() as conn:
        values = iter((await conn.execute(select(*columns))).one())
    found: list[datetime | None] = []
    for part in parts:
        moments = [value + each.after for each in part.soonest if (value := next(values))]
        found.append(min(moments, default=None))
    return found


async def turn(store: Store, parts: Sequence[Due], enqueue: Enqueue, *, ceiling: float) -> float:
    """One turn of the clock over ``parts``: the work of each that is due, then how long the
    clock may sleep until one may be (at most ``ceiling``). A part whose work meets an outage
    is skipped and tried again a whole ``ceiling`` later, not at once (its rows are still due:
    the clock would spin, logging, for as long as Redis is away); the others go on."""
    found = await soonest(store, parts)
    moment = now()
    due = [part for part, at in zip(parts, found, strict=True) if part.is_due(at, moment)]
    failed = set()
    for part in due:
        try:
            await part.work(enqueue)
        except (StoreError, BrokerError) as exc:
            logger.warning("clock: %s skipped this turn: %s", part.name, exc)
            failed.add(part.name)
    if due:  # what comes next has moved: read it again
        found, moment = await soonest(store, parts), now()
    waits = [
        ceiling if part.name in failed else part.seconds_until(at, moment, ceiling)
        for part, at in zip(parts, found, strict=True)
    ]
    return min(waits, default=ceiling)
