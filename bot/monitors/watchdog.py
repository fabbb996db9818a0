"""The watchdog over aegis itself: what would otherwise fail in silence, raised as incident
cards like a monitor's (bot/monitors/incidents.py), and closed when it is over.

It looks for: schedules that have not run by ``max(2 × interval, interval + 15 min)`` (a
stopped clock); an agent whose last three runs completed with zero effect (the completed no-op,
a finding and not a success); outbox rows unsent for 15 minutes; cards undelivered for an hour;
a model with failed calls and no success for a day (a silent provider outage); monitors gone
stale (one card for all of them). It reads the numbers, never a status alone. Each pass also
prunes what the monitors no longer need (``Monitors.prune``). It runs in the web process
(aegis/web.py), apart from the clock and the broker, so a dead clock or worker is still seen.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, func, select

from bot.agents.agent_run import ENDED, completed_with_no_effect
from bot.agents.ledger import OK
from bot.chat.outbox_statements import UNSENT
from bot.chat.outgoing import OWED
from bot.interactions.interaction import OPEN
from bot.monitors.incident import Incident, IncidentKind
from bot.monitors.incidents import Asked
from bot.monitors.monitor import Monitor
from bot.monitors.monitors import Monitors
from bot.store.tables import (
    agent_runs,
    incidents,
    interaction_cards,
    interactions,
    model_calls,
    outbox,
    schedules,
)
from bot.timeutil import now, short_time

LATE_GRACE = timedelta(minutes=15)
UNSENT_FOR = timedelta(minutes=15)
UNDELIVERED_CARD_FOR = timedelta(hours=1)
MODEL_SILENT_FOR = timedelta(days=1)
NO_EFFECT_RUNS = 3
RUNS_READ = 500  # the latest ended runs read for the zero-effect streaks
STALE_NAMES_SHOWN = 10  # of the stale monitors, by name, in their one card


@dataclass(frozen=True)
class Finding:
    key: str  # one open incident per key: "schedules", "no-effect:scout", "monitors-stale" …
    title: str
    detail: str


class Watchdog:
    def __init__(self, monitors: Monitors) -> None:
        self.monitors = monitors
        self.store = monitors.store
        self.incidents = monitors.incidents

    async def watch(self, chat_id: int | None, moment: datetime | None = None) -> dict[str, int]:
        """One pass: open a card for each new finding, close those that are over; returns the
        pass's summary (a job run's)."""
        moment = moment or now()
        findings = {finding.key: finding for finding in await self.look(moment)}
        summary = {"findings": len(findings), "incidents_opened": 0, "incidents_closed": 0}
        summary.update(await self.monitors.prune(moment))
        if chat_id is None:
            return summary
        asked: Asked = []
        async with self.store.write() as conn:
            for finding in findings.values():
                opened = await self.incidents.open_in(
                    conn,
                    subject=f"watchdog:{finding.key}",
                    kind=IncidentKind.WATCHDOG,
                    chat_id=chat_id,
                    title=finding.title,
                    detail=finding.detail,
                    moment=moment,
                    asked=asked,
                )
                summary["incidents_opened"] += opened is not None
            for incident in await self._open_in(conn):
                if incident.subject.removeprefix("watchdog:") not in findings:
                    closed = await self.incidents.close_in(conn, incident, "over", moment, asked)
                    summary["incidents_closed"] += closed
        await self.incidents.deliver(asked)
        return summary

    async def look(self, moment: datetime) -> list[Finding]:
        async with self.store.read() as conn:
            found = [
                *await _late_schedules(conn, moment),
                *await _no_effect_agents(conn),
                *await _unsent(conn, moment),
                *await _undelivered_cards(conn, moment),
                *await _silent_models(conn, moment),
            ]
        return found + _stale(await self.monitors.stale(moment))

    async def _open_in(self, conn) -> list[Incident]:
        query = select(incidents).where(
            incidents.c.kind == IncidentKind.WATCHDOG, incidents.c.closed_at.is_(None)
        )
        return [Incident.from_row(row) for row in (await conn.execute(query)).all()]


def _stale(monitors: list[Monitor]) -> list[Finding]:
    """One finding for every stale monitor at once: what stops them all (a stopped worker or
    clock) would otherwise send a card per monitor, hundreds at a second's pace."""
    if not monitors:
        return []
    oldest = min(monitor.last_check_at or monitor.created_at for monitor in monitors)
    since = f"not checked since {short_time(oldest)}"
    if len(monitors) == 1:
        return [Finding("monitors-stale", f"Monitor {monitors[0].name} is stale", since)]
    names = sorted(monitor.name for monitor in monitors)
    shown = ", ".join(names[:STALE_NAMES_SHOWN])
    if len(names) > STALE_NAMES_SHOWN:
        shown += f" and {len(names) - STALE_NAMES_SHOWN} more"
    detail = f"{shown}: {since}. Are aegis clock and worker running?"
    return [Finding("monitors-stale", f"{len(names)} monitors are stale", detail)]


async def _late_schedules(conn, moment: datetime) -> list[Finding]:
    rows = (await conn.execute(select(schedules).where(schedules.c.enabled))).all()
    late = [
        row
        for row in rows
        if moment - row.next_run_at > max(timedelta(seconds=row.interval_seconds), LATE_GRACE)
    ]
    if not late:
        return []
    names = ", ".join(sorted(row.name for row in late))
    last = [row.last_enqueued_at for row in late if row.last_enqueued_at is not None]
    since = f"nothing enqueued since {short_time(max(last))}" if last else "never run"
    detail = f"{names}: {since}. Is aegis clock running?"
    return [Finding("schedules", "Schedules have not run on time", detail)]


async def _no_effect_agents(conn) -> list[Finding]:
    query = (
        select(agent_runs.c.agent, agent_runs.c.status, agent_runs.c.effects)
        .where(agent_runs.c.status.in_(ENDED))
        .order_by(agent_runs.c.id.desc())
        .limit(RUNS_READ)
    )
    latest: dict[str, list[Any]] = defaultdict(list)
    for agent, status, effects in (await conn.execute(query)).all():
        if len(latest[agent]) < NO_EFFECT_RUNS:
            latest[agent].append((status, effects))
    return [
        Finding(
            f"no-effect:{agent}",
            f"{agent} completed {NO_EFFECT_RUNS} runs in a row that changed nothing",
            "a completed run with zero effect is a finding, not a success: see /runs",
        )
        for agent, runs in sorted(latest.items())
        if len(runs) == NO_EFFECT_RUNS and all(completed_with_no_effect(*run) for run in runs)
    ]


async def _unsent(conn, moment: datetime) -> list[Finding]:
    query = select(func.count(), func.min(outbox.c.created_at)).where(
        UNSENT, outbox.c.status.in_(OWED), outbox.c.created_at < moment - UNSENT_FOR
    )
    count, oldest = (await conn.execute(query)).one()
    if not count:
        return []
    detail = f"{count} unsent for over 15 min, the oldest from {short_time(oldest)}"
    return [Finding("outbox", "Messages are stuck in the outbox", detail)]


async def _undelivered_cards(conn, moment: datetime) -> list[Finding]:
    query = (
        select(func.count(func.distinct(interactions.c.id)))
        .select_from(
            interactions.join(
                interaction_cards, interaction_cards.c.interaction_id == interactions.c.id
            ).join(outbox, outbox.c.id == interaction_cards.c.outbox_id)
        )
        .where(
            interactions.c.status.in_(OPEN),
            UNSENT,
            outbox.c.created_at < moment - UNDELIVERED_CARD_FOR,
        )
    )
    count = (await conn.execute(query)).scalar_one()
    if not count:
        return []
    detail = f"{count} card(s) asked over an hour ago have not reached you; /pending resends them"
    return [Finding("cards", "Cards have not been delivered", detail)]


async def _silent_models(conn, moment: datetime) -> list[Finding]:
    since = moment - MODEL_SILENT_FOR
    query = (
        select(model_calls.c.provider, model_calls.c.model, func.count())
        .where(model_calls.c.at >= since, model_calls.c.status != OK)
        .group_by(model_calls.c.provider, model_calls.c.model)
    )
    return [
        Finding(
            f"model:{provider}/{model}",
            f"Model {model} has not answered for a day",
            f"{failed} failed calls to {provider} since {short_time(since)}, none answered",
        )
        for provider, model, failed in (await conn.execute(query)).all()
        if not await _answered_since(conn, provider, model, since)
    ]


async def _answered_since(conn, provider: str, model: str, since: datetime) -> bool:
    query = select(func.count()).where(
        and_(
            model_calls.c.provider == provider,
            model_calls.c.model == model,
            model_calls.c.status == OK,
            model_calls.c.at >= since,
        )
    )
    return (await conn.execute(query)).scalar_one() > 0
