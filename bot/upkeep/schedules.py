"""Schedules are rows; the clock enqueues what is due and never runs the work itself.

Two kinds of rows: the platform's own upkeep (``BUILTIN_SCHEDULES``, seeded once, never touched
again by the file) and the schedules ``aegis.yaml`` declares (``source = "file"``), which the
clock reconciles whenever the file changes. Either kind is switched on or off from
``/schedules``; after the first seed that switch is the owner's, and the file's ``enabled`` no
longer decides.

A schedule runs every so long or at times of day in the owner's zone (bot/upkeep/timing.py, with
its daylight-saving rules). One that came due while nothing was running (downtime) runs once when
the clock returns, never a burst: the next run is set from the moment it was enqueued, not from
when it was due, and the times it missed are counted for /schedules. A file schedule whose
previous run is still going (queued, running or parked on a card) is not enqueued again: the due
time is skipped, counted, and the next one set, one skip per due time.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import delete, func, insert, or_, select, update

from bot.agents.agent_run import ACTIVE, RunState
from bot.agents.profiles import ScheduleSpec
from bot.errors import ScheduleRefused
from bot.store.database import Store, serialize_on
from bot.store.tables import agent_runs, schedules
from bot.timeutil import now
from bot.upkeep.due import Due, Soonest
from bot.upkeep.timing import LATE_AFTER, Timing, at_cron

logger = logging.getLogger(__name__)

FILE = "file"  # rows that aegis.yaml declares
CHAT = "chat"  # rows made with /every in chat
BUILTIN = "builtin"  # the platform's own; a row from before sources were recorded has None
FILE_ACTOR = "scheduled_run"  # runs an agent for a file schedule (jobs/schedules.py)


@dataclass(frozen=True)
class Schedule:
    name: str
    actor: str
    interval_seconds: int
    first_at_once: bool = True  # False: the first run is one interval after the schedule is added
    cron: str | None = None  # at these times (the owner's zone) instead of every interval

    @property
    def timing(self) -> Timing:
        return Timing(self.interval_seconds, self.cron)


BRIEFING_AT = "08:00"  # AEGIS_BRIEFING_AT's default
WEEKLY_REVIEW_AT = "fri 17:00"  # AEGIS_WEEKLY_REVIEW_AT's default


def builtin_schedules(
    briefing_at: str = BRIEFING_AT, weekly_review_at: str = WEEKLY_REVIEW_AT
) -> tuple[Schedule, ...]:
    """The platform's own upkeep; aegis.yaml adds the user's schedules to these. The briefing
    and the weekly review run at times of day the owner sets; the rest every so often."""
    return (
        Schedule("outbox-sweep", "sweep_outbox", 30),
        Schedule("interaction-sweep", "sweep_interactions", 30),
        Schedule("run-sweep", "sweep_runs", 30),
        Schedule("peer-sweep", "sweep_peer_requests", 30),
        Schedule("triage-sweep", "sweep_triage", 15 * 60),
        Schedule("assigned-sweep", "sweep_assigned", 15 * 60),
        Schedule("retention", "prune_old_rows", 3600, first_at_once=False),
        Schedule("weekly-review", "weekly_review", 0, False, at_cron("review", weekly_review_at)),
        Schedule("daily-briefing", "daily_briefing", 0, False, at_cron("briefing", briefing_at)),
    )


BUILTIN_SCHEDULES = builtin_schedules()
# The sweeps that keep the platform's promises: a lost message is sent again, a card expires
# and its asker is told, a run whose worker died is noticed, a request to a peer that was down
# goes out once it is back. No switch turns them off (a tap on
# an old "Turn off" button included), and one found off is turned back on at the clock's start.
ALWAYS_ON = frozenset({"outbox-sweep", "interaction-sweep", "run-sweep", "peer-sweep"})


@dataclass(frozen=True)
class ScheduleRow:
    """One row of ``schedules``, as /schedules and /status read it."""

    name: str
    actor: str
    interval_seconds: int
    enabled: bool
    next_run_at: datetime
    last_enqueued_at: datetime | None
    kwargs: dict[str, Any]
    source: str
    skipped: int
    last_skipped_at: datetime | None
    cron: str | None = None
    missed: int = 0  # times it fell due while nothing ran (aegis was down)
    last_missed_at: datetime | None = None

    @classmethod
    def from_row(cls, row: Any) -> ScheduleRow:
        values = dict(row._mapping)
        values["kwargs"] = values["kwargs"] or {}
        values["source"] = values["source"] or BUILTIN
        return cls(**values)

    @property
    def from_file(self) -> bool:
        return self.source == FILE

    @property
    def always_on(self) -> bool:
        return self.source == BUILTIN and self.name in ALWAYS_ON

    @property
    def runs_agent(self) -> bool:
        """An owner's schedule (from the file or the chat), run by ``scheduled_run``."""
        return self.source in (FILE, CHAT)

    @property
    def timing(self) -> Timing:
        return Timing(self.interval_seconds, self.cron)

    @property
    def agent(self) -> str | None:
        return self.kwargs.get("agent")

    @property
    def capability(self) -> str | None:
        return self.kwargs.get("capability")

    @property
    def request(self) -> str:
        return self.kwargs.get("request", "")


@dataclass
class Reconciled:
    """What a reconcile changed, by schedule name."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # a name a built-in schedule already has

    @property
    def changed(self) -> bool:
        return bool(self.added or self.updated or self.removed)


def file_kwargs(spec: ScheduleSpec) -> dict[str, Any]:
    """What ``scheduled_run`` reads from the row: who runs it and what it is asked."""
    who = {"agent": spec.agent} if spec.agent is not None else {"capability": spec.capability}
    return {**who, "request": spec.request}


class Schedules:
    def __init__(self, store: Store, zone: ZoneInfo | None = None) -> None:
        self.store = store
        self.zone = zone  # the owner's time zone (AEGIS_TIMEZONE); None: UTC

    async def seed(self, wanted: Iterable[Schedule]) -> None:
        """Add schedules that are missing; an existing row keeps its on/off switch, and takes
        the timing wanted now (AEGIS_BRIEFING_AT changed: the briefing moves)."""
        moment = now()
        async with self.store.write() as conn:
            # Two clocks starting at once (by mistake, on two machines): one seeds, the other
            # then finds the rows, instead of failing on the second insert.
            await serialize_on(conn, "schedules:seed")
            existing = {
                row.name: (row.interval_seconds, row.cron)
                for row in (await conn.execute(select(schedules))).all()
            }
            for schedule in wanted:
                later = schedule.timing.next_after(moment, self.zone)
                if schedule.name not in existing:
                    await conn.execute(
                        insert(schedules).values(
                            name=schedule.name,
                            actor=schedule.actor,
                            interval_seconds=schedule.interval_seconds,
                            cron=schedule.cron,
                            enabled=True,
                            next_run_at=moment if schedule.first_at_once else later,
                            source=BUILTIN,
                        )
                    )
                    continue
                if schedule.name in ALWAYS_ON:  # switched off before it could not be
                    await conn.execute(
                        update(schedules)
                        .where(schedules.c.name == schedule.name, ~schedules.c.enabled)
                        .values(enabled=True)
                    )
                if existing[schedule.name] != (schedule.interval_seconds, schedule.cron):
                    await conn.execute(
                        update(schedules)
                        .where(schedules.c.name == schedule.name)
                        .values(
                            interval_seconds=schedule.interval_seconds,
                            cron=schedule.cron,
                            next_run_at=later,
                        )
                    )

    async def reconcile(self, specs: Iterable[ScheduleSpec]) -> Reconciled:
        """Make the file's rows what the file says, in one transaction.

        A new schedule is added (on or off as the file says, due at once); a known one takes
        the file's interval, agent and request but keeps its switch (the owner's choice on
        /schedules wins over ``enabled`` after the first seed); a file row the file no longer
        declares is removed. Built-in rows are never touched, and a file schedule that takes a
        built-in's name is refused (logged), so it cannot switch the platform's upkeep.
        """
        done = Reconciled()
        moment = now()
        async with self.store.write() as conn:
            rows = {
                row.name: ScheduleRow.from_row(row)
                for row in (await conn.execute(select(schedules))).all()
            }
            wanted = {spec.name: spec for spec in specs}
            for name, spec in wanted.items():
                row = rows.get(name)
                if row is None:
                    await conn.execute(insert(schedules).values(**_new_file_row(spec, moment)))
                    done.added.append(name)
                elif not row.from_file:
                    done.refused.append(name)
                elif (changes := _file_changes(row, spec, moment, self.zone)) is not None:
                    await conn.execute(
                        update(schedules).where(schedules.c.name == name).values(**changes)
                    )
                    done.updated.append(name)
            gone = [name for name, row in rows.items() if row.from_file and name not in wanted]
            if gone:
                await conn.execute(delete(schedules).where(schedules.c.name.in_(gone)))
                done.removed.extend(gone)
        for name in done.refused:
            logger.warning(
                "aegis.yaml schedules.%s: a built-in schedule or one made in chat has this name; "
                "rename it",
                name,
            )
        return done

    async def enqueue_due(self, enqueue: Callable[..., Awaitable[None]]) -> list[str]:
        """Enqueue every schedule that is due, each at most once; returns their names.

        Each row is claimed by moving it to its next time only if it still holds the time we
        read (so a second clock by mistake cannot enqueue it too), committed, then enqueued
        outside the transaction; if the broker is down the row is put back to due. A file
        schedule is given its due time too, which keys the run it starts (a redelivered message
        starts it once).
        """
        moment = now()
        async with self.store.read() as conn:
            due = await conn.execute(
                select(schedules).where(schedules.c.enabled, schedules.c.next_run_at <= moment)
            )
            rows = [ScheduleRow.from_row(row) for row in due.all()]
        enqueued = []
        for row in rows:
            if row.runs_agent and await self.still_running(row.name):
                await self._skip(row, moment)
                continue
            late = moment - row.next_run_at > LATE_AFTER
            missed = row.timing.missed_between(row.next_run_at, moment, self.zone) if late else 0
            following = row.timing.next_after(moment, self.zone)
            if not await self._claim(row, following, moment, missed):
                continue
            args = (row.name, row.next_run_at.isoformat()) if row.runs_agent else (row.name,)
            try:
                await enqueue(row.actor, *args)
            except Exception:
                await self._give_back(row)
                raise
            if late:
                logger.info(
                    "schedule %s ran late (due %s, nothing ran then)%s",
                    row.name,
                    row.next_run_at.isoformat(timespec="seconds"),
                    f"; {missed} later time(s) missed, run once now" if missed else "",
                )
            enqueued.append(row.name)
        return enqueued

    async def still_running(self, name: str, *, other_than: str | None = None) -> bool:
        """Whether a run of this schedule is queued, running or parked on a card; a run keyed
        ``other_than`` does not count (a redelivered message finds the run it started)."""
        query = select(func.count()).where(
            agent_runs.c.schedule == name,
            agent_runs.c.status.in_((*ACTIVE, RunState.PARKED)),
        )
        if other_than is not None:
            query = query.where(
                or_(
                    agent_runs.c.idempotency_key.is_(None),
                    agent_runs.c.idempotency_key != other_than,
                )
            )
        async with self.store.read() as conn:
            return (await conn.execute(query)).scalar_one() > 0

    async def note_skip(self, name: str) -> None:
        """Count a run that was not started because the previous one is still going."""
        async with self.store.write() as conn:
            await conn.execute(
                update(schedules)
                .where(schedules.c.name == name)
                .values(skipped=schedules.c.skipped + 1, last_skipped_at=now())
            )

    async def _skip(self, row: ScheduleRow, moment: datetime) -> bool:
        """Skip this due time: the same compare-and-set as a claim, so it is counted once."""
        async with self.store.write() as conn:
            moved = await conn.execute(
                update(schedules)
                .where(schedules.c.name == row.name, schedules.c.next_run_at == row.next_run_at)
                .values(
                    next_run_at=row.timing.next_after(moment, self.zone),
                    skipped=schedules.c.skipped + 1,
                    last_skipped_at=moment,
                )
            )
        if moved.rowcount == 1:
            logger.info("schedule %s skipped: its previous run is still going", row.name)
        return moved.rowcount == 1

    async def _claim(self, row: ScheduleRow, following, moment, missed: int) -> bool:
        """Move the row to its next time if it still holds the time we read (one claimer)."""
        values: dict[str, Any] = {"next_run_at": following, "last_enqueued_at": moment}
        if missed:
            values.update(missed=schedules.c.missed + missed, last_missed_at=moment)
        async with self.store.write() as conn:
            moved = await conn.execute(
                update(schedules)
                .where(schedules.c.name == row.name, schedules.c.next_run_at == row.next_run_at)
                .values(**values)
            )
        return moved.rowcount == 1

    async def _give_back(self, row: ScheduleRow) -> None:
        """The broker refused the message: due again at once, as it was."""
        async with self.store.write() as conn:
            await conn.execute(
                update(schedules)
                .where(schedules.c.name == row.name)
                .values(next_run_at=row.next_run_at, last_enqueued_at=row.last_enqueued_at)
            )

    async def switch(self, name: str, enabled: bool) -> ScheduleRow | None:
        """Turn a schedule on or off (the clock reads the switch at every tick); None: no
        such schedule. A schedule turned back on after its time runs once, at the next tick.
        Raises ScheduleRefused for one of the sweeps that stay on (``ALWAYS_ON``)."""
        current = await self.get(name)
        if current is not None and current.always_on and not enabled:
            raise ScheduleRefused(
                f"{name} is built in and stays on: it keeps aegis's promises. Nothing was changed."
            )
        async with self.store.write() as conn:
            await conn.execute(
                update(schedules).where(schedules.c.name == name).values(enabled=enabled)
            )
            row = (await conn.execute(select(schedules).where(schedules.c.name == name))).first()
        return ScheduleRow.from_row(row) if row else None

    async def add_from_chat(
        self, timing: Timing, agent: str, request: str, *, moment: datetime | None = None
    ) -> ScheduleRow:
        """A schedule made with /every: named ``<agent>-<n>``, first due at its next time."""
        moment = moment or now()
        async with self.store.write() as conn:
            await serialize_on(conn, "schedules:chat")
            taken = set((await conn.execute(select(schedules.c.name))).scalars())
            number = 1
            while f"{agent}-{number}" in taken:
                number += 1
            name = f"{agent}-{number}"
            await conn.execute(
                insert(schedules).values(
                    name=name,
                    actor=FILE_ACTOR,
                    interval_seconds=timing.interval_seconds,
                    cron=timing.cron,
                    enabled=True,
                    next_run_at=timing.next_after(moment, self.zone),
                    kwargs={"agent": agent, "request": request},
                    source=CHAT,
                )
            )
            row = (await conn.execute(select(schedules).where(schedules.c.name == name))).one()
        return ScheduleRow.from_row(row)

    async def delete_from_chat(self, name: str) -> bool:
        """Delete a schedule made in chat; False for any other (the file's are the file's)."""
        async with self.store.write() as conn:
            gone = await conn.execute(
                delete(schedules).where(schedules.c.name == name, schedules.c.source == CHAT)
            )
        return gone.rowcount == 1

    async def run_now(self, name: str, enqueue: Callable[..., Awaitable[None]]) -> bool:
        """Enqueue it once now, out of turn; its next time stays. False: no such schedule."""
        row = await self.get(name)
        if row is None:
            return False
        moment = now()
        args = (row.name, moment.isoformat()) if row.runs_agent else (row.name,)
        await enqueue(row.actor, *args)
        return True

    async def get(self, name: str) -> ScheduleRow | None:
        async with self.store.read() as conn:
            row = (await conn.execute(select(schedules).where(schedules.c.name == name))).first()
        return ScheduleRow.from_row(row) if row else None

    async def all(self) -> list[ScheduleRow]:
        """Every schedule: the owner's first (the file's and the chat's), then the platform's,
        each by name."""
        async with self.store.read() as conn:
            rows = [ScheduleRow.from_row(r) for r in (await conn.execute(select(schedules))).all()]
        return sorted(rows, key=lambda row: (not row.runs_agent, row.name))

    def due(self) -> Due:
        """The clock's part: the soonest enabled schedule, and ``enqueue_due``."""
        soonest = select(func.min(schedules.c.next_run_at)).where(schedules.c.enabled)
        return Due("schedules", (Soonest(soonest),), self.enqueue_due)


def _new_file_row(spec: ScheduleSpec, moment: datetime) -> dict[str, Any]:
    return {
        "name": spec.name,
        "actor": FILE_ACTOR,
        "interval_seconds": spec.interval_seconds,
        "cron": spec.cron,
        "enabled": spec.enabled,
        "next_run_at": moment,  # a schedule just added runs at once: you see that it works
        "kwargs": file_kwargs(spec),
        "source": FILE,
    }


def _file_changes(
    row: ScheduleRow, spec: ScheduleSpec, moment: datetime, zone: ZoneInfo | None
) -> dict | None:
    """What to update in a known file row, or None; never its switch."""
    changes: dict[str, Any] = {}
    if row.kwargs != file_kwargs(spec) or row.actor != FILE_ACTOR:
        changes.update(kwargs=file_kwargs(spec), actor=FILE_ACTOR)
    if (row.interval_seconds, row.cron) != (spec.interval_seconds, spec.cron):
        changes.update(interval_seconds=spec.interval_seconds, cron=spec.cron)
        # An interval counts from the last run (a shorter one may make it due now); a time of
        # day is the next one to come.
        base = (row.last_enqueued_at or moment) if spec.cron is None else moment
        changes["next_run_at"] = Timing(spec.interval_seconds, spec.cron).next_after(base, zone)
    return changes or None
