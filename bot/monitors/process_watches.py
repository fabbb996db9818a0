"""Process watches: the rows (bot/monitors/process_watch.py), their looks and how they end.

The clock claims the looks that are due (``enqueue_due``, rows read locked like the monitors'
slots, so a second clock by mistake claims none twice) and sends one message per watch; a worker
looks and hands what it found to ``record``. Ending a watch is a compare-and-set on its status,
so two looks racing can end it once; the look that ended it wakes the run parked on it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Select, delete, func, insert, select, update

from bot.errors import MonitorRefused
from bot.monitors.process_watch import (
    Look,
    ProcessWatch,
    ProcessWatchSpec,
    WatchStatus,
    ended,
    outcome,
)
from bot.store.database import Store, serialize_on
from bot.store.tables import process_watches
from bot.timeutil import now
from bot.upkeep.due import Due, Enqueue, Soonest

logger = logging.getLogger(__name__)
CHECK_ACTOR = "check_process"


@dataclass(frozen=True)
class Recorded:
    """A look, recorded: the watch as it is now, and whether this look ended it."""

    watch: ProcessWatch
    ended_it: bool
    progress_changed: bool


class ProcessWatches:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def start(
        self,
        spec: ProcessWatchSpec,
        *,
        agent: str,
        run_id: int | None,
        chat_id: int,
        moment: datetime | None = None,
    ) -> ProcessWatch:
        """Watch for a run, looked at once. A run waits on one watch at a time."""
        if run_id is None:
            raise MonitorRefused(
                "run",
                "only a run aegis started can be continued when the process ends; ask for the "
                "watch from within a run (/run)",
            )
        moment = moment or now()
        async with self.store.write() as conn:
            await serialize_on(conn, f"process-watch-run:{run_id}")  # two calls: one watch
            busy = await conn.execute(
                select(process_watches.c.id).where(
                    process_watches.c.run_id == run_id,
                    process_watches.c.status == WatchStatus.WATCHING,
                )
            )
            other = busy.scalar_one_or_none()
            if other is not None:
                raise MonitorRefused(
                    "run", f"run #{run_id} already waits on process watch #{other}; one at a time"
                )
            made = await conn.execute(
                insert(process_watches)
                .values(
                    agent=agent,
                    run_id=run_id,
                    chat_id=chat_id,
                    spec=spec.to_json(),
                    status=WatchStatus.WATCHING,
                    checks=0,
                    next_check_at=moment,
                    deadline_at=moment + timedelta(seconds=spec.deadline_seconds),
                    created_at=moment,
                )
                .returning(process_watches.c.id)
            )
            return await self._get_in(conn, made.scalar_one())

    # The clock's part

    def due(self) -> Due:
        """The clock's part: the soonest look due, and ``enqueue_due``."""
        return Due("process watches", (Soonest(_soonest_query()),), self.enqueue_due)

    async def enqueue_due(self, enqueue: Enqueue, moment: datetime | None = None) -> int:
        """Claim every look that is due and enqueue it; returns how many."""
        moment = moment or now()
        claimed = []
        async with self.store.write() as conn:
            due = await conn.execute(
                select(process_watches)
                .where(
                    process_watches.c.status == WatchStatus.WATCHING,
                    process_watches.c.next_check_at <= moment,
                )
                .with_for_update()
            )
            for row in due.all():
                watch = ProcessWatch.from_row(row)
                await conn.execute(
                    update(process_watches)
                    .where(process_watches.c.id == watch.id)
                    .values(next_check_at=watch.next_look(moment))
                )
                claimed.append(watch.id)
        for watch_id in claimed:
            await enqueue(CHECK_ACTOR, watch_id)
        return len(claimed)

    # A look's result

    async def record(
        self, watch_id: int, look: Look, moment: datetime | None = None
    ) -> Recorded | None:
        """What one look found; None when the watch is over already (another look ended it)."""
        moment = moment or now()
        async with self.store.write() as conn:
            watch = await self._get_in(conn, watch_id)
            if watch is None or watch.status.is_over:
                return None
            values: dict = {"checks": process_watches.c.checks + 1}
            if look.progress is not None:
                values["progress"] = look.progress
            end = ended(watch, look, moment)
            if end is not None:
                values.update(status=end[0], outcome=end[1], ended_at=moment)
            changed = await conn.execute(
                update(process_watches)
                .where(
                    process_watches.c.id == watch_id,
                    process_watches.c.status == WatchStatus.WATCHING,
                )
                .values(**values)
            )
            if changed.rowcount != 1:
                return None
            now_watch = await self._get_in(conn, watch_id)
        return Recorded(
            now_watch,
            ended_it=end is not None,
            progress_changed=look.progress is not None and look.progress != watch.progress,
        )

    async def abandon(self, watch_id: int) -> ProcessWatch | None:
        """Its run ended meanwhile (cancelled): stop looking."""
        status = WatchStatus.ABANDONED
        moment = now()
        async with self.store.write() as conn:
            watch = await self._get_in(conn, watch_id)
            if watch is None or watch.status.is_over:
                return None
            ended = await conn.execute(
                update(process_watches)
                .where(
                    process_watches.c.id == watch_id,
                    process_watches.c.status == WatchStatus.WATCHING,
                )
                .values(
                    status=status,
                    outcome=outcome(watch, status, Look(status), moment),
                    ended_at=moment,
                )
            )
            return await self._get_in(conn, watch_id) if ended.rowcount == 1 else None

    async def abandon_for_run(self, run_id: int) -> int:
        """Stop looking at every process its run was waiting on (the run was cancelled)."""
        query = select(process_watches.c.id).where(
            process_watches.c.run_id == run_id, process_watches.c.status == WatchStatus.WATCHING
        )
        async with self.store.read() as conn:
            ids = list((await conn.execute(query)).scalars())
        return sum([await self.abandon(watch_id) is not None for watch_id in ids])

    async def prune(self, ended_before: datetime, *, limit: int) -> int:
        """Forget at most ``limit`` watches that ended before ``ended_before``."""
        query = (
            select(process_watches.c.id)
            .where(process_watches.c.ended_at < ended_before)
            .order_by(process_watches.c.id)
            .limit(limit)
        )
        async with self.store.write() as conn:
            ids = list((await conn.execute(query)).scalars())
            if ids:
                await conn.execute(delete(process_watches).where(process_watches.c.id.in_(ids)))
        return len(ids)

    # Reading

    async def get(self, watch_id: int) -> ProcessWatch | None:
        async with self.store.read() as conn:
            return await self._get_in(conn, watch_id)

    async def owed(self, run_id: int, *, after: int = 0) -> list[ProcessWatch]:
        """The watches this run asked for and has not yet been given the outcome of (ids above
        ``after``, the last one it was given), ended or not, oldest first."""
        query = (
            select(process_watches)
            .where(process_watches.c.run_id == run_id, process_watches.c.id > after)
            .order_by(process_watches.c.id)
        )
        async with self.store.read() as conn:
            rows = (await conn.execute(query)).all()
        return [ProcessWatch.from_row(row) for row in rows]

    async def waiting_for(self, run_id: int) -> ProcessWatch | None:
        """The watch this run has running, if any (a run has one at a time)."""
        query = select(process_watches).where(
            process_watches.c.run_id == run_id, process_watches.c.status == WatchStatus.WATCHING
        )
        async with self.store.read() as conn:
            row = (await conn.execute(query)).first()
        return ProcessWatch.from_row(row) if row else None

    async def watching(self, limit: int = 100) -> list[ProcessWatch]:
        query = select(process_watches).where(process_watches.c.status == WatchStatus.WATCHING)
        async with self.store.read() as conn:
            rows = (await conn.execute(query.order_by(process_watches.c.id).limit(limit))).all()
        return [ProcessWatch.from_row(row) for row in rows]

    async def _get_in(self, conn, watch_id: int) -> ProcessWatch | None:
        query = select(process_watches).where(process_watches.c.id == watch_id)
        row = (await conn.execute(query)).first()
        return ProcessWatch.from_row(row) if row else None


def _soonest_query() -> Select:
    return select(func.min(process_watches.c.next_check_at)).where(
        process_watches.c.status == WatchStatus.WATCHING
    )
