"""Monitors: the rows, their slots, and what each check's result changes.

The clock claims each due slot (a compare-and-set on ``next_check_at``) and enqueues one check
per monitor; a worker probes and hands the result to ``record``, which in one transaction judges
it (bot/monitors/monitor.py), moves the counters with a compare-and-set (two checks of one
monitor racing cannot both open or both close an incident), and opens, reminds or closes the
incident with its messages in the outbox (bot/monitors/incidents.py).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, delete, func, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from bot.chat.views import monitors as views
from bot.errors import MonitorRefused
from bot.monitors.incident import FLAP_LIMIT, FLAP_WINDOW, STABLE_AFTER, IncidentKind
from bot.monitors.incidents import Asked, Incidents
from bot.monitors.monitor import (
    Change,
    CheckResult,
    Counters,
    Monitor,
    MonitorSpec,
    MonitorState,
    Verdict,
    judge,
    next_slot,
)
from bot.store.database import Store
from bot.store.tables import monitor_hours, monitors
from bot.timeutil import now

logger = logging.getLogger(__name__)
CHAT, FILE = "chat", "file"
Enqueue = Callable[..., Awaitable[None]]
Check = tuple[int, CheckResult, datetime]  # a monitor's id, what its check found, and when
CHECKS_PER_MESSAGE = 100  # the due slots of one tick go to the workers in messages this big
LOOKAHEAD = timedelta(seconds=1)  # slots claimed this long before they are due
# Many rows moved at once (executemany): its SET is the parameters' keys but the id.
QUIET_MOVE = update(monitors).where(monitors.c.id == bindparam("monitor_id"))


@dataclass
class Reconciled:
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.added or self.updated or self.removed)


@dataclass(frozen=True)
class Flapping:
    """Whether this check starts or ends a stretch of flapping."""

    since: datetime | None
    starts: bool = False
    ends: bool = False
    changes: int = 0  # within the last hour


class Monitors:
    def __init__(self, store: Store, incidents: Incidents) -> None:
        self.store = store
        self.incidents = incidents

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
            spec = MonitorSpec.from_json({**spec.to_json(), "name": name})
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
        for subject in _subjects(monitor.id):
            incident = await self.incidents.open_for_in(conn, subject)
            if incident is not None:
                await self.incidents.close_in(conn, incident, "no longer watched", moment, asked)
        await conn.execute(delete(monitor_hours).where(monitor_hours.c.monitor_id == monitor.id))
        await conn.execute(delete(monitors).where(monitors.c.id == monitor.id))

    # The clock's part

    async def enqueue_due(self, enqueue: Enqueue, moment: datetime | None = None) -> int:
        """Claim every slot due within ``LOOKAHEAD`` and enqueue their checks, a message per
        hundred, each slot with its monitor's spec; returns how many. The worker waits for each
        slot to the millisecond, so the clock need not wake for every one. A claimed slot moves
        to the next slot ahead, so after downtime a monitor gets one check, never a burst."""
        moment = moment or now()
        claimed, moves = [], []
        async with self.store.write() as conn:
            # Locked as read (FOR UPDATE on Postgres; SQLite has one writer): a second clock by
            # mistake waits, then finds these slots moved on and claims none of them twice.
            due = await conn.execute(
                select(monitors.c.id, monitors.c.spec, monitors.c.next_check_at)
                .where(
                    monitors.c.paused.is_(False),
                    monitors.c.next_check_at <= moment + LOOKAHEAD,
                )
                .with_for_update()
            )
            for monitor_id, spec, slot in due.all():
                following = next_slot(monitor_id, spec["interval_seconds"], max(slot, moment))
                moves.append({"monitor_id": monitor_id, "next_check_at": following})
                claimed.append([monitor_id, slot.isoformat(), spec])
            if moves:
                await conn.execute(QUIET_MOVE, moves)
        for start in range(0, len(claimed), CHECKS_PER_MESSAGE):
            await enqueue("check_monitors", claimed[start : start + CHECKS_PER_MESSAGE])
        return len(claimed)

    async def seconds_until_next(self, *, ceiling: float) -> float:
        """How long the clock may sleep: until the soonest slot comes within ``LOOKAHEAD``."""
        query = select(func.min(monitors.c.next_check_at)).where(monitors.c.paused.is_(False))
        async with self.store.read() as conn:
            soonest = (await conn.execute(query)).scalar_one_or_none()
        if soonest is None:
            return ceiling
        return max(0.0, min(ceiling, (soonest - LOOKAHEAD - now()).total_seconds()))

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
        return await self.record_many([check], chat_id=chat_id, agents=agents)

    async def record_many(
        self, checks: list[Check], *, chat_id: int | None, agents: tuple[str, ...] = ()
    ) -> dict[str, int]:
        """Judge many checks, one transaction a round (a monitor checked twice in the batch is
        judged again in the next round, on what the first check left)."""
        summary: Counter[str] = Counter()
        asked: Asked = []
        while checks:
            first, checks = _first_of_each(checks)
            async with self.store.write() as conn:
                await self._record_in(conn, first, chat_id, agents, asked, summary)
        await self.incidents.deliver(asked)
        return dict(summary)

    async def _record_in(self, conn, checks, chat_id, agents, asked, summary) -> None:
        """The rows are read locked (FOR UPDATE on Postgres; SQLite has one writer), so two
        checks of one monitor racing are judged one after the other, never on the same
        counters: one opens the incident, the other finds it open."""
        query = select(monitors).where(monitors.c.id.in_([check[0] for check in checks]))
        rows = await conn.execute(query.with_for_update())
        current = {row.id: _from_row(row) for row in rows.all()}
        quiet: list[dict[str, Any]] = []
        hours: Counter[tuple[int, datetime, str]] = Counter()
        for monitor_id, result, moment in checks:
            monitor = current.get(monitor_id)
            if monitor is None or monitor.paused:
                summary["checks_dropped"] += 1
                continue
            verdict = judge(monitor.spec, monitor.counters, result)
            flips = _flips(monitor, result.ok, moment)
            flapping = _flapping(monitor, flips, moment)
            if flapping.ends:
                flips = []  # what came before the calm no longer counts towards the next
            values = _moved(monitor, verdict, flips, flapping, result, moment)
            hours[(monitor_id, _hour(moment), "checks")] += 1
            hours[(monitor_id, _hour(moment), "ups")] += int(result.ok)
            summary["checks_ok" if result.ok else "checks_failed"] += 1
            if _quiet(verdict, flapping):  # most checks: nothing to tell anyone
                quiet.append({"monitor_id": monitor_id, **values})
                continue
            await conn.execute(update(monitors).where(monitors.c.id == monitor_id).values(**values))
            summary.update(
                await self._alert_in(
                    conn, monitor, verdict, flapping, result, chat_id, agents, moment, asked
                )
            )
        if quiet:
            await conn.execute(QUIET_MOVE, quiet)
        await self._count_in(conn, hours)

    async def _alert_in(
        self, conn, monitor, verdict, flapping, result, chat_id, agents, moment, asked
    ) -> dict[str, int]:
        summary: dict[str, int] = {}
        if chat_id is None:
            return {"alerts_without_owner_chat": int(verdict.change is not Change.NONE)}
        down_subject, flap_subject = _subjects(monitor.id)
        down = await self.incidents.open_for_in(conn, down_subject)
        opener = _Opener(self.incidents, conn, monitor, chat_id, agents, moment, asked)
        if flapping.starts:
            if down is not None:
                await self.incidents.close_in(conn, down, "now flapping", moment, asked)
            await opener.flapping(flapping.changes, result.error)
            return {**summary, "flapping_started": 1}
        if flapping.ends:
            flap = await self.incidents.open_for_in(conn, flap_subject)
            state = verdict.counters.state
            if flap is not None:
                await self.incidents.close_in(conn, flap, f"stable again, {state}", moment, asked)
            if state is MonitorState.DOWN:
                await opener.down(result.error)
            return {**summary, "flapping_ended": 1}
        if flapping.since is not None:
            return summary  # one card while it flaps
        return {**summary, **await self._down_or_up_in(conn, down, verdict, result, opener)}

    async def _down_or_up_in(self, conn, down, verdict, result, opener) -> dict[str, int]:
        moment, asked, monitor = opener.moment, opener.asked, opener.monitor
        if verdict.change is Change.RECOVERED:
            if down is None:
                return {}
            note = views.recovered_note(down.opened_at, moment)
            closed = await self.incidents.close_in(conn, down, note, moment, asked)
            return {"incidents_closed": int(closed)}
        if verdict.counters.state is not MonitorState.DOWN:
            return {}
        if down is None:  # went down now (or its incident was closed by flapping)
            opened = await opener.down(result.error)
            return {"incidents_opened": int(opened)}
        if result.error:
            await self.incidents.note_error_in(conn, down, result.error)
        text = views.still_down(down, moment, after_restart=down.restart_notice)
        reminded = await self.incidents.remind_in(
            conn, down, monitor.spec.remind_every, text, moment, asked
        )
        return {"reminders_sent": int(reminded)}

    async def _count_in(self, conn, hours: Counter) -> None:
        rows: dict[tuple[int, datetime], dict[str, Any]] = {}
        for (monitor_id, hour, counted), count in hours.items():
            row = rows.setdefault((monitor_id, hour), {"monitor_id": monitor_id, "hour": hour})
            row[counted] = count
        if not rows:
            return
        dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
        statement = dialect.insert(monitor_hours)
        statement = statement.on_conflict_do_update(
            index_elements=["monitor_id", "hour"],
            set_={
                "checks": monitor_hours.c.checks + statement.excluded.checks,
                "ups": monitor_hours.c.ups + statement.excluded.ups,
            },
        )
        await conn.execute(statement, list(rows.values()))

    # Reading

    async def all(self) -> list[Monitor]:
        async with self.store.read() as conn:
            return await self._all_in(conn)

    async def get(self, monitor_id: int) -> Monitor | None:
        async with self.store.read() as conn:
            return await self._get_in(conn, monitor_id)

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
        return [_from_row(row) for row in rows.all()]

    async def _get_in(self, conn, monitor_id: int) -> Monitor | None:
        row = (await conn.execute(select(monitors).where(monitors.c.id == monitor_id))).first()
        return _from_row(row) if row else None

    async def _by_identity_in(self, conn, spec: MonitorSpec) -> Monitor | None:
        query = select(monitors).where(monitors.c.identity_hash == spec.identity_hash)
        row = (await conn.execute(query)).first()
        return _from_row(row) if row else None

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


@dataclass
class _Opener:
    """Opens this monitor's incidents with what every one of them needs."""

    incidents: Incidents
    conn: AsyncConnection
    monitor: Monitor
    chat_id: int
    agents: tuple[str, ...]
    moment: datetime
    asked: Asked

    async def down(self, error: str | None) -> bool:
        opened = await self.incidents.open_in(
            self.conn,
            subject=f"monitor:{self.monitor.id}",
            kind=IncidentKind.DOWN,
            chat_id=self.chat_id,
            title=f"{self.monitor.name} is down",
            detail=error,
            moment=self.moment,
            asked=self.asked,
            monitor_id=self.monitor.id,
            agents=self.agents,
            remind_every=self.monitor.spec.remind_every,
        )
        return opened is not None

    async def flapping(self, changes: int, error: str | None) -> bool:
        detail = f"{changes} changes in the last hour"
        opened = await self.incidents.open_in(
            self.conn,
            subject=f"flapping:{self.monitor.id}",
            kind=IncidentKind.FLAPPING,
            chat_id=self.chat_id,
            title=f"{self.monitor.name} is flapping",
            detail=f"{detail}; last error: {error}" if error else detail,
            moment=self.moment,
            asked=self.asked,
            monitor_id=self.monitor.id,
            agents=self.agents,
        )
        return opened is not None


def _moved(monitor, verdict: Verdict, flips, flapping: Flapping, result, moment) -> dict:
    """The row after this check."""
    return {
        "state": verdict.counters.state,
        "failures": verdict.counters.failures,
        "successes": verdict.counters.successes,
        "flips": [flip.isoformat() for flip in flips],
        "flapping_since": flapping.since,
        "last_check_at": moment,
        "last_ok": result.ok,
        "last_latency_ms": result.latency_ms,
        "last_error": result.error if not result.ok else monitor.last_error,
        "state_since": moment if verdict.change is not Change.NONE else monitor.state_since,
    }


def _quiet(verdict: Verdict, flapping: Flapping) -> bool:
    """A check that changes nothing anyone is told about: no verdict, no flapping begun or
    ended, and not down (a down monitor's checks may owe a reminder)."""
    return (
        verdict.change is Change.NONE
        and not (flapping.starts or flapping.ends)
        and verdict.counters.state is not MonitorState.DOWN
    )


def _first_of_each(checks: list[Check]) -> tuple[list[Check], list[Check]]:
    """The first check of each monitor, and the rest for the next round."""
    seen: set[int] = set()
    first, rest = [], []
    for check in checks:
        (rest if check[0] in seen else first).append(check)
        seen.add(check[0])
    return first, rest


def _hour(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def _subjects(monitor_id: int) -> tuple[str, str]:
    return f"monitor:{monitor_id}", f"flapping:{monitor_id}"


def _flips(monitor: Monitor, ok: bool, moment: datetime) -> list[datetime]:
    """When a check disagreed with the one before, over the last hour, this one included."""
    recent = [flip for flip in monitor.flips if moment - flip < FLAP_WINDOW]
    if monitor.last_ok is not None and monitor.last_ok != ok:
        recent.append(moment)
    return recent


def _flapping(monitor: Monitor, flips: list[datetime], moment: datetime) -> Flapping:
    """More than ``FLAP_LIMIT`` disagreements within the hour start it; none for
    ``STABLE_AFTER`` ends it."""
    since = monitor.flapping_since
    if since is None:
        if len(flips) > FLAP_LIMIT:
            return Flapping(moment, starts=True, changes=len(flips))
        return Flapping(None)
    if not flips or moment - flips[-1] >= STABLE_AFTER:
        return Flapping(None, ends=True)
    return Flapping(since)


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


def _from_row(row: Any) -> Monitor:
    return Monitor(
        id=row.id,
        spec=MonitorSpec.from_json(row.spec),
        source=row.source,
        paused=row.paused,
        counters=Counters(MonitorState(row.state), row.failures, row.successes),
        next_check_at=row.next_check_at,
        last_check_at=row.last_check_at,
        last_ok=row.last_ok,
        last_latency_ms=row.last_latency_ms,
        last_error=row.last_error,
        state_since=row.state_since,
        created_at=row.created_at,
        flips=tuple(datetime.fromisoformat(flip) for flip in row.flips or ()),
        flapping_since=row.flapping_since,
    )
