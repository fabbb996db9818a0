"""Monitors: the rows, what declares them (chat, aegis.yaml, an agent), their slots, and what
the owner's buttons do to them.

The clock claims the slots due within the next half minute (its part, ``due()``: rows read
locked so a second clock by mistake claims none twice) and sends them to the workers with their
specs; a worker probes and hands the results to ``record_many``, which bot/monitors/checks.py
carries out: the verdict (bot/monitors/monitor.py), and the incident it opens, reminds about or
closes (bot/monitors/incidents.py).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Select, Text, and_, cast, delete, func, insert, or_, select, update

from bot.chat.views import monitors as views
from bot.errors import MonitorRefused
from bot.monitors.checks import MOVE_MANY, Check, Checks, subjects
from bot.monitors.incidents import Asked, Incidents
from bot.monitors.monitor import (
    STALE_AFTER_INTERVALS,
    STALE_GRACE,
    CheckResult,
    Monitor,
    MonitorSpec,
    MonitorState,
    next_slot,
)
from bot.monitors.process_watches import ProcessWatches
from bot.store.database import Store
from bot.store.tables import monitor_hours, monitors
from bot.timeutil import now
from bot.upkeep.due import Due, Enqueue, Soonest

logger = logging.getLogger(__name__)
CHAT, FILE = "chat", "file"
CHECKS_PER_MESSAGE = 250  # the due slots of one claim go to the workers in messages this big
# The clock claims slots once the soonest is WAKE_AHEAD away, and then every slot due within
# CLAIM_AHEAD: a transaction, a message to the workers and a read more every half a minute
# rather than every second, which was most of what a check cost beyond its request
# (bench/monitors.py). The worker waits for each slot to the millisecond, so lateness does not
# change. What it costs: a worker lost loses at most those seconds of checks (the next slots
# check again), and a monitor changed or removed may be checked once more as it was.
WAKE_AHEAD = timedelta(seconds=1)
CLAIM_AHEAD = timedelta(seconds=30)  # with RECORD_EVERY, in STALE_GRACE of bot/monitors/monitor.py
KEEP_HOURS = timedelta(days=8)  # uptime rows: the 7 days /monitors shows, and a day's margin
KEEP_WATCHES = timedelta(days=30)  # process watches, once over
PRUNE_BATCH = 1000  # process watches a pass forgets at most


@dataclass
class Reconciled:
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.added or self.updated or self.removed)


class Monitors:
    def __init__(self, store: Store, incidents: Incidents) -> None:
        self.store = store
        self.incidents = incidents
        self.checks = Checks(store, incidents)
        self.processes = ProcessWatches(store)  # long processes watched for agents' runs

    # Declaring

    async def watch(self, spec: MonitorSpec, source: str = CHAT) -> tuple[Monitor, bool]:
        """Add a monitor, checked at once; an existing watch of the same target is returned
        instead (False). A chat name that is taken gets a number; a file's is refused."""
        moment = now()
        async with self.store.write() as conn:
            existing = await self._by_identity_in(conn, spec)
            if existing is not None:
                return existing, False
            name = await self._free_name_in(conn, spec.name, renumber=source == CHAT)
            spec = dataclasses.replace(spec, name=name)
            result = await conn.execute(
                insert(monitors).values(**_new_row(spec, source, moment)).returning(monitors.c.id)
            )
            return await self._get_in(conn, result.scalar_one()), True

    async def reconcile(self, specs: Iterable[MonitorSpec]) -> Reconciled:
        """Make the file's monitors what ``aegis.yaml`` says; chat and agent monitors are never
        touched, and a file monitor that would clash with one of them is refused (logged)."""
        done = Reconciled()
        wanted = {spec.name: spec for spec in specs}
        async with self.store.write() as conn:
            rows = {m.name: m for m in await self._all_in(conn)}
            for name, spec in wanted.items():
                await self._reconcile_one_in(conn, rows.get(name), spec, done)
            for name, row in rows.items():
                if row.source == FILE and name not in wanted:
                    await self._remove_in(conn, row, [])
                    done.removed.append(name)
        for name in done.refused:
            logger.warning("aegis.yaml monitors.%s: clashes with a monitor made in chat", name)
        return done

    async def _reconcile_one_in(self, conn, row: Monitor | None, spec: MonitorSpec, done) -> None:
        same_target = await self._by_identity_in(conn, spec)
        if row is not None and row.source != FILE:
            done.refused.append(spec.name)
        elif same_target is not None and (row is None or same_target.id != row.id):
            done.refused.append(spec.name)
        elif row is None:
            await conn.execute(insert(monitors).values(**_new_row(spec, FILE, now())))
            done.added.append(spec.name)
        elif row.spec != spec:
            await conn.execute(
                update(monitors)
                .where(monitors.c.id == row.id)
                .values(spec=spec.to_json(), kind=spec.kind, identity_hash=spec.identity_hash)
            )
            done.updated.append(spec.name)

    # The owner's buttons

    async def pause(self, monitor_id: int, paused: bool) -> Monitor | None:
        values: dict[str, Any] = {"paused": paused}
        if not paused:
            values["next_check_at"] = now()  # resumed: checked at once
        async with self.store.write() as conn:
            await conn.execute(update(monitors).where(monitors.c.id == monitor_id).values(**values))
            return await self._get_in(conn, monitor_id)

    async def check_now(self, monitor_id: int) -> Monitor | None:
        """Due at the clock's next tick; later slots stay where they were."""
        async with self.store.write() as conn:
            await conn.execute(
                update(monitors)
                .where(monitors.c.id == monitor_id, monitors.c.paused.is_(False))
                .values(next_check_at=now())
            )
            return await self._get_in(conn, monitor_id)

    async def remove(self, monitor_id: int) -> Monitor | None:
        asked: Asked = []
        async with self.store.write() as conn:
            monitor = await self._get_in(conn, monitor_id)
            if monitor is not None:
                await self._remove_in(conn, monitor, asked)
        await self.incidents.deliver(asked)
        return monitor

    async def _remove_in(self, conn, monitor: Monitor, asked: Asked) -> None:
        moment = now()
        for subject in subjects(monitor.id):
            incident = await self.incidents.open_for_in(conn, subject)
            if incident is not None:
                await self.incidents.close_in(conn, incident, "no longer watched", moment, asked)
        await conn.execute(delete(monitor_hours).where(monitor_hours.c.monitor_id == monitor.id))
        await conn.execute(delete(monitors).where(monitors.c.id == monitor.id))

    # The clock's part

    def due(self) -> Due:
        """The clock's part: once the soonest slot is ``WAKE_AHEAD`` away, claim the slots due
        within ``CLAIM_AHEAD`` (``enqueue_due`` without reading the soonest again)."""
        return Due(
            "monitors",
            (Soonest(_soonest_query()),),
            lambda enqueue: self._claim(enqueue, now()),
            ahead=WAKE_AHEAD,
        )

    async def enqueue_due(self, enqueue: Enqueue, moment: datetime | None = None) -> int:
        """Once the soonest slot is within ``WAKE_AHEAD``, claim every slot due within
        ``CLAIM_AHEAD`` and enqueue their checks; returns how many."""
        moment = moment or now()
        due = self.due().is_due(await self._soonest(), moment)
        return await self._claim(enqueue, moment) if due else 0

    async def _claim(self, enqueue: Enqueue, moment: datetime) -> int:
        """Claim every slot due within ``CLAIM_AHEAD`` and enqueue their checks, a message per
        ``CHECKS_PER_MESSAGE``, each slot with its monitor's spec (as the row's JSON text: the
        clock has no use for it read) and state. The worker waits for each slot to the
        millisecond, so the clock need not wake for every one. A claimed slot moves to the next
        slot ahead, so after downtime a monitor gets one check, never a burst."""
        claimed, moves = [], []
        interval = monitors.c.spec["interval_seconds"].as_integer()
        async with self.store.write() as conn:
            # Locked as read (FOR UPDATE on Postgres; SQLite has one writer): a second clock by
            # mistake waits, then finds these slots moved on and claims none of them twice.
            due = await conn.execute(
                select(
                    monitors.c.id,
                    interval,
                    cast(monitors.c.spec, Text),
                    monitors.c.next_check_at,
                    monitors.c.state,
                )
                .where(
                    monitors.c.paused.is_(False),
                    monitors.c.next_check_at <= moment + CLAIM_AHEAD,
                )
                .with_for_update()
            )
            for monitor_id, seconds, spec, slot, state in due.all():
                following = next_slot(monitor_id, seconds, max(slot, moment))
                moves.append({"monitor_id": monitor_id, "next_check_at": following})
                claimed.append([monitor_id, slot.isoformat(), spec, state])
            if moves:
                await conn.execute(MOVE_MANY, moves)
        for start in range(0, len(claimed), CHECKS_PER_MESSAGE):
            await enqueue("check_monitors", claimed[start : start + CHECKS_PER_MESSAGE])
        return len(claimed)

    async def _soonest(self) -> datetime | None:
        async with self.store.read() as conn:
            return (await conn.execute(_soonest_query())).scalar_one_or_none()

    # What a check's result changes

    async def record(
        self,
        monitor_id: int,
        result: CheckResult,
        *,
        chat_id: int | None,
        agents: tuple[str, ...] = (),
        moment: datetime | None = None,
    ) -> dict[str, int]:
        """Judge one check and act on it; returns the job's summary of what changed."""
        check = (monitor_id, result, moment or now())
        return await self.checks.record([check], chat_id=chat_id, agents=agents)

    async def record_many(
        self, checks: list[Check], *, chat_id: int | None, agents: tuple[str, ...] = ()
    ) -> dict[str, int]:
        """Judge many checks (bot/monitors/checks.py); returns what they changed."""
        return await self.checks.record(checks, chat_id=chat_id, agents=agents)

    # Upkeep

    async def prune(self, moment: datetime | None = None) -> dict[str, int]:
        """Forget hourly uptime older than the week /monitors shows (an hour's worth of rows a
        pass, once caught up), and process watches over for a month, in bounded batches."""
        moment = moment or now()
        hour = moment.replace(minute=0, second=0, microsecond=0)
        async with self.store.write() as conn:
            hours = await conn.execute(
                delete(monitor_hours).where(monitor_hours.c.hour < hour - KEEP_HOURS)
            )
        watches = await self.processes.prune(moment - KEEP_WATCHES, limit=PRUNE_BATCH)
        return {"uptime_hours_pruned": hours.rowcount, "process_watches_pruned": watches}

    # Reading

    async def all(self) -> list[Monitor]:
        async with self.store.read() as conn:
            return await self._all_in(conn)

    async def get(self, monitor_id: int) -> Monitor | None:
        async with self.store.read() as conn:
            return await self._get_in(conn, monitor_id)

    async def stale(self, moment: datetime) -> list[Monitor]:
        """The monitors gone stale (``Monitor.is_stale``). The watchdog asks every minute and
        most are not, so the database picks them, interval by interval (there are few), and
        only they are read whole."""
        since = func.coalesce(monitors.c.last_check_at, monitors.c.created_at)
        interval = monitors.c.spec["interval_seconds"].as_integer()
        watched = monitors.c.paused.is_(False)
        async with self.store.read() as conn:
            intervals = (await conn.execute(select(interval).where(watched).distinct())).scalars()
            late = [
                and_(
                    interval == seconds,
                    since
                    < moment - timedelta(seconds=seconds * STALE_AFTER_INTERVALS) - STALE_GRACE,
                )
                for seconds in intervals.all()
            ]
            if not late:
                return []
            rows = await conn.execute(select(monitors).where(watched, or_(*late)))
            found = [Monitor.from_row(row) for row in rows.all()]
        return [monitor for monitor in found if monitor.is_stale(moment)]

    async def uptimes(self, moment: datetime | None = None) -> dict[int, views.Uptime]:
        moment = moment or now()
        day = await self._shares(moment - timedelta(hours=24))
        week = await self._shares(moment - timedelta(days=7))
        return {key: views.Uptime(day.get(key), share) for key, share in week.items()}

    async def _shares(self, since: datetime) -> dict[int, float]:
        query = (
            select(
                monitor_hours.c.monitor_id,
                func.sum(monitor_hours.c.ups),
                func.sum(monitor_hours.c.checks),
            )
            .where(monitor_hours.c.hour >= since.replace(minute=0, second=0, microsecond=0))
            .group_by(monitor_hours.c.monitor_id)
        )
        async with self.store.read() as conn:
            rows = (await conn.execute(query)).all()
        return {monitor_id: ups / checks for monitor_id, ups, checks in rows if checks}

    async def _all_in(self, conn) -> list[Monitor]:
        rows = await conn.execute(select(monitors).order_by(monitors.c.id))
        return [Monitor.from_row(row) for row in rows.all()]

    async def _get_in(self, conn, monitor_id: int) -> Monitor | None:
        row = (await conn.execute(select(monitors).where(monitors.c.id == monitor_id))).first()
        return Monitor.from_row(row) if row else None

    async def _by_identity_in(self, conn, spec: MonitorSpec) -> Monitor | None:
        query = select(monitors).where(monitors.c.identity_hash == spec.identity_hash)
        row = (await conn.execute(query)).first()
        return Monitor.from_row(row) if row else None

    async def _free_name_in(self, conn, name: str, *, renumber: bool) -> str:
        taken = set((await conn.execute(select(monitors.c.name))).scalars())
        if name not in taken:
            return name
        if not renumber:
            raise MonitorRefused("name", f"{name!r} is taken by another monitor")
        number = 2
        while f"{name[:56]}-{number}" in taken:
            number += 1
        return f"{name[:56]}-{number}"


def _new_row(spec: MonitorSpec, source: str, moment: datetime) -> dict[str, Any]:
    return {
        "name": spec.name,
        "kind": spec.kind,
        "identity_hash": spec.identity_hash,
        "spec": spec.to_json(),
        "source": source,
        "paused": False,
        "state": MonitorState.PENDING,
        "failures": 0,
        "successes": 0,
        "flips": [],
        "next_check_at": moment,  # checked at once: you see at once that it works
        "created_at": moment,
    }


def _soonest_query() -> Select:
    return select(func.min(monitors.c.next_check_at)).where(monitors.c.paused.is_(False))
