"""What a check's result changes: the verdict moved on the row, and the incident opened,
reminded about or closed, with the messages in the outbox of the same transaction.

Most checks change nothing anyone is told about; they are written together, many rows in one
statement. The rest are judged one by one, on rows read locked, so two checks of one monitor
racing never both open (or both close) an incident.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from bot.chat.views import monitors as views
from bot.monitors.incident import FLAP_LIMIT, FLAP_WINDOW, STABLE_AFTER, IncidentKind
from bot.monitors.incidents import Asked, Incidents
from bot.monitors.monitor import Change, CheckResult, Monitor, MonitorState, Verdict, judge
from bot.store.database import Store
from bot.store.tables import monitor_hours, monitors

Check = tuple[int, CheckResult, datetime]  # a monitor's id, what its check found, and when
# Many rows moved at once (executemany): its SET is the parameters' keys but the id.
MOVE_MANY = update(monitors).where(monitors.c.id == bindparam("monitor_id"))


# A success of a steady monitor: its last check, one more success in a row (executemany).
STEADY_MANY = (
    update(monitors)
    .where(monitors.c.id == bindparam("monitor_id"))
    .values(
        last_check_at=bindparam("checked_at"),
        last_latency_ms=bindparam("latency_ms"),
        successes=monitors.c.successes + 1,
    )
)


async def _steady_in(conn, ids: list[int]) -> set[int]:
    """Which of these monitors are steady: up, their last check a success, not flapping and
    not paused. Their rows are locked as read, like the rows judged whole."""
    if not ids:
        return set()
    query = select(monitors.c.id).where(
        monitors.c.id.in_(ids),
        monitors.c.state == MonitorState.UP,
        monitors.c.last_ok.is_(True),
        monitors.c.flapping_since.is_(None),
        monitors.c.paused.is_(False),
    )
    return set((await conn.execute(query.with_for_update())).scalars())


def _steady(check: Check) -> dict[str, Any]:
    monitor_id, result, moment = check
    return {"monitor_id": monitor_id, "checked_at": moment, "latency_ms": result.latency_ms}


@dataclass(frozen=True)
class Flapping:
    """Whether this check starts or ends a stretch of flapping."""

    since: datetime | None
    starts: bool = False
    ends: bool = False
    changes: int = 0  # within the last hour


class Checks:
    def __init__(self, store: Store, incidents: Incidents) -> None:
        self.store = store
        self.incidents = incidents

    async def record(
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
        counters: one opens the incident, the other finds it open.

        A success of a steady monitor (up, its last check a success, not flapping) changes only
        its last check and its run of successes: those are written without reading the row
        whole. Every other check is judged on the whole row."""
        steady = await _steady_in(conn, [check[0] for check in checks if check[1].ok])
        counted = [check for check in checks if check[0] in steady]
        if counted:
            await conn.execute(STEADY_MANY, [_steady(check) for check in counted])
            summary["checks_ok"] += len(counted)
        others = [check for check in checks if check[0] not in steady]
        if others:
            counted += await self._judge_in(conn, others, chat_id, agents, asked, summary)
        await _count_in(conn, counted)

    async def _judge_in(self, conn, checks, chat_id, agents, asked, summary) -> list[Check]:
        """Judge these checks on their rows, read whole; returns those of monitors still
        watched (a paused or removed monitor's check is dropped)."""
        query = select(monitors).where(monitors.c.id.in_([check[0] for check in checks]))
        rows = await conn.execute(query.with_for_update())
        current = {row.id: Monitor.from_row(row) for row in rows.all()}
        quiet: list[dict[str, Any]] = []
        counted: list[Check] = []
        for check in checks:
            monitor_id, result, moment = check
            monitor = current.get(monitor_id)
            if monitor is None or monitor.paused:
                summary["checks_dropped"] += 1
                continue
            counted.append(check)
            verdict = judge(monitor.spec, monitor.counters, result)
            flips = _flips(monitor, result.ok, moment)
            flapping = _flapping(monitor, flips, moment)
            if flapping.ends:
                flips = []  # what came before the calm no longer counts towards the next
            values = _moved(monitor, verdict, flips, flapping, result, moment)
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
            await conn.execute(MOVE_MANY, quiet)
        return counted

    async def _alert_in(
        self, conn, monitor, verdict, flapping, result, chat_id, agents, moment, asked
    ) -> dict[str, int]:
        summary: dict[str, int] = {}
        if chat_id is None:
            return {"alerts_without_owner_chat": int(verdict.change is not Change.NONE)}
        down_subject, flap_subject = subjects(monitor.id)
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
        title = f"{self.monitor.name} is down"
        remind = self.monitor.spec.remind_every
        return await self._open(IncidentKind.DOWN, title, error, remind_every=remind)

    async def flapping(self, changes: int, error: str | None) -> bool:
        detail = f"{changes} changes in the last hour"
        detail = f"{detail}; last error: {error}" if error else detail
        return await self._open(IncidentKind.FLAPPING, f"{self.monitor.name} is flapping", detail)

    async def _open(self, kind: IncidentKind, title: str, detail, remind_every=None) -> bool:
        down, flapping = subjects(self.monitor.id)
        opened = await self.incidents.open_in(
            self.conn,
            subject=down if kind is IncidentKind.DOWN else flapping,
            kind=kind,
            chat_id=self.chat_id,
            title=title,
            detail=detail,
            moment=self.moment,
            asked=self.asked,
            monitor_id=self.monitor.id,
            agents=self.agents,
            remind_every=remind_every,
        )
        return opened is not None


async def _count_in(conn, checks: list[Check]) -> None:
    """Add these checks to their monitors' hourly counts, for uptime (one row per monitor and
    hour, however many checks)."""
    rows: dict[tuple[int, datetime], dict[str, Any]] = {}
    for monitor_id, result, moment in checks:
        hour = _hour(moment)
        row = rows.setdefault(
            (monitor_id, hour), {"monitor_id": monitor_id, "hour": hour, "checks": 0, "ups": 0}
        )
        row["checks"] += 1
        row["ups"] += int(result.ok)
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


def subjects(monitor_id: int) -> tuple[str, str]:
    """The subjects of a monitor's incidents: down, and flapping."""
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
