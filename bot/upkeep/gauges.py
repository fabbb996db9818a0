"""The platform's numbers as they are now, read for ``/metrics`` (aegis/metrics.py).

Every read is bounded, whatever the age of the install: the outbox through its index of unsent
rows, cards and runs under way through the indexes on their status, how runs ended among the
latest ``RUNS_READ``, the models seen among the latest ``CALLS_READ`` calls (then one index seek
each for its last success), one row per schedule and per live process. Nothing here walks every
message ever sent, every run or every model call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import func, select

from bot.agents.agent_run import UNDER_WAY, RunState, completed_with_no_effect
from bot.agents.ledger import OK
from bot.chat.outbox_statements import UNSENT
from bot.chat.outgoing import OWED
from bot.interactions.interaction import OPEN
from bot.store.database import Store
from bot.store.tables import agent_runs, interactions, model_calls, outbox, schedules
from bot.timeutil import now
from bot.upkeep.heartbeats import Heartbeats, Process

RUNS_READ = 500  # the latest runs, read for how runs end
CALLS_READ = 5000  # the latest model calls, read for which models are in use


@dataclass(frozen=True)
class Gauges:
    outbox: dict[str, int]  # rows not yet sent, by status
    oldest_owed_seconds: float  # how long the oldest row still to send has waited (0: none)
    cards_pending: int
    runs_under_way: dict[str, int]  # queued, running, parked (0 where none)
    recent_endings: dict[str, int]  # of the latest RUNS_READ runs, the ended ones by state
    recent_no_effect: int  # of those, the ones that completed with zero effect
    schedule_lag: dict[str, float]  # enabled schedules: seconds past due (0: not due yet)
    model_last_ok: dict[tuple[str, str], datetime] = field(default_factory=dict)
    processes: list[Process] = field(default_factory=list)


async def read_gauges(store: Store) -> Gauges:
    moment = now()
    async with store.read() as conn:
        unsent = dict(
            (
                await conn.execute(
                    select(outbox.c.status, func.count()).where(UNSENT).group_by(outbox.c.status)
                )
            ).all()
        )
        oldest = (
            await conn.execute(
                select(func.min(outbox.c.created_at)).where(UNSENT, outbox.c.status.in_(OWED))
            )
        ).scalar()
        cards = (
            await conn.execute(select(func.count()).where(interactions.c.status.in_(OPEN)))
        ).scalar_one()
        under_way = dict(
            (
                await conn.execute(
                    select(agent_runs.c.status, func.count())
                    .where(agent_runs.c.status.in_(UNDER_WAY))
                    .group_by(agent_runs.c.status)
                )
            ).all()
        )
        endings, no_effect = await _recent_endings(conn)
        lag = {
            name: max(0.0, (moment - due).total_seconds())
            for name, due in (
                await conn.execute(
                    select(schedules.c.name, schedules.c.next_run_at).where(schedules.c.enabled)
                )
            ).all()
        }
        last_ok = await _last_success(conn)
    return Gauges(
        outbox=unsent,
        oldest_owed_seconds=max(0.0, (moment - oldest).total_seconds()) if oldest else 0.0,
        cards_pending=cards,
        runs_under_way={state.value: under_way.get(state.value, 0) for state in UNDER_WAY},
        recent_endings=endings,
        recent_no_effect=no_effect,
        schedule_lag=lag,
        model_last_ok=last_ok,
        processes=await Heartbeats(store).alive(),
    )


async def _recent_endings(conn) -> tuple[dict[str, int], int]:
    """How the latest RUNS_READ runs ended (every ended state present), and how many of them
    completed with zero effect; read by primary key, newest first."""
    query = (
        select(agent_runs.c.status, agent_runs.c.effects)
        .order_by(agent_runs.c.id.desc())
        .limit(RUNS_READ)
    )
    endings = {state.value: 0 for state in RunState if state.is_over}
    no_effect = 0
    for status, effects in (await conn.execute(query)).all():
        if status in endings:
            endings[status] += 1
            no_effect += completed_with_no_effect(status, effects)
    return endings, no_effect


async def _last_success(conn) -> dict[tuple[str, str], datetime]:
    """Each model seen among the latest CALLS_READ calls, and when it last answered (an index
    seek per model on ix_model_calls_model); a model that never answered is left out."""
    c = model_calls.c
    latest = select(c.provider, c.model).order_by(c.id.desc()).limit(CALLS_READ).subquery()
    seen = (await conn.execute(select(latest.c.provider, latest.c.model).distinct())).all()
    last_ok = {}
    for provider, model in seen:
        at = (
            await conn.execute(
                select(func.max(c.at)).where(
                    c.provider == provider, c.model == model, c.status == OK
                )
            )
        ).scalar()
        if at is not None:
            last_ok[(provider, model)] = at
    return last_ok
