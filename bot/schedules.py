"""Schedules are rows; the clock enqueues what is due and never runs the work itself.

A schedule that came due while nothing was running (downtime) runs once when the clock returns,
never a burst: the next run is set from the moment it was enqueued, not from when it was due.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import insert, select, update

from bot.store import Store
from bot.tables import schedules
from bot.timeutil import now


@dataclass(frozen=True)
class Schedule:
    name: str
    actor: str
    interval_seconds: int
    first_at_once: bool = True  # False: the first run is one interval after the schedule is added


# The platform's own upkeep; later, aegis.yaml adds the user's schedules to these.
BUILTIN_SCHEDULES = (
    Schedule("outbox-sweep", "sweep_outbox", 30),
    Schedule("interaction-sweep", "sweep_interactions", 30),
    Schedule("run-sweep", "sweep_runs", 30),
    Schedule("triage-sweep", "sweep_triage", 15 * 60),
    Schedule("weekly-review", "weekly_review", 7 * 24 * 3600, first_at_once=False),
)


class Schedules:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def seed(self, wanted: Iterable[Schedule]) -> None:
        """Add schedules that are missing; an existing row keeps its on/off switch."""
        async with self.store.write() as conn:
            existing = set((await conn.execute(select(schedules.c.name))).scalars())
            for schedule in wanted:
                if schedule.name in existing:
                    continue
                first = now()
                if not schedule.first_at_once:
                    first += timedelta(seconds=schedule.interval_seconds)
                await conn.execute(
                    insert(schedules).values(
                        name=schedule.name,
                        actor=schedule.actor,
                        interval_seconds=schedule.interval_seconds,
                        enabled=True,
                        next_run_at=first,
                    )
                )

    async def enqueue_due(self, enqueue: Callable[[str, str], Awaitable[None]]) -> list[str]:
        """Enqueue every schedule that is due, each at most once; returns their names.

        Each row is claimed by moving it to its next time only if it still holds the time we
        read (so a second clock by mistake cannot enqueue it too), committed, then enqueued
        outside the transaction; if the broker is down the row is put back to due.
        """
        moment = now()
        async with self.store.read() as conn:
            due = await conn.execute(
                select(schedules).where(schedules.c.enabled, schedules.c.next_run_at <= moment)
            )
            rows = due.all()
        enqueued = []
        for row in rows:
            if not await self._move(row.name, row.next_run_at, moment, row.interval_seconds):
                continue
            try:
                await enqueue(row.actor, row.name)
            except Exception:
                await self._move(row.name, None, row.next_run_at, 0)
                raise
            enqueued.append(row.name)
        return enqueued

    async def _move(self, name: str, expected, moment, interval_seconds: int) -> bool:
        condition = schedules.c.name == name
        if expected is not None:
            condition = condition & (schedules.c.next_run_at == expected)
        values = {"next_run_at": moment + timedelta(seconds=interval_seconds)}
        if interval_seconds:
            values["last_enqueued_at"] = moment
        async with self.store.write() as conn:
            moved = await conn.execute(update(schedules).where(condition).values(**values))
        return moved.rowcount == 1

    async def seconds_until_next(self, *, ceiling: float = 5.0) -> float:
        query = select(schedules.c.next_run_at).where(schedules.c.enabled)
        async with self.store.read() as conn:
            times = list((await conn.execute(query)).scalars())
        if not times:
            return ceiling
        return max(0.0, min(ceiling, (min(times) - now()).total_seconds()))
