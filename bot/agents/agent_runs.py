"""Agent runs: one row per run of an agent, from its request to a clear end.

A run is ``queued`` when asked for, ``running`` while a worker holds it (and beats its
heartbeat), ``parked`` while it waits for a card (or a process it asked aegis to watch), and
ends ``completed``, ``failed``, ``timed_out`` or ``cancelled``. Every move is one
compare-and-set on ``status``, so two workers (a redelivered message, the stale-run sweep)
never both hold a run: the first claim wins.

The row carries the harness's own state (jobs/harness.py), saved at each step, so a run that
was parked, or whose worker died, continues where it stopped instead of starting again.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from sqlalchemy import String, and_, cast, func, insert, literal, or_, select, update
from sqlalchemy.exc import IntegrityError

from bot.agents.agent_run import ACTIVE, ENDED, AgentRun, Beat, RunOrigin, RunState
from bot.chat.outbox import Outbox
from bot.chat.topics import Topics
from bot.errors import RunLost
from bot.interactions.interaction import OPEN
from bot.store.database import Store
from bot.store.tables import agent_runs, interactions, outbox, process_watches
from bot.timeutil import now


def _held(run: AgentRun):
    """The row is still this holder's: running, and not claimed again since (every claim
    adds one to ``attempts``), so a stalled holder can never write over its successor."""
    return and_(
        agent_runs.c.id == run.id,
        agent_runs.c.status == RunState.RUNNING,
        agent_runs.c.attempts == run.attempts,
    )


class AgentRuns:
    def __init__(
        self,
        store: Store,
        outbox: Outbox,
        render: Callable[[AgentRun], str],
        topics: Topics | None = None,
    ) -> None:
        self.store = store
        self.outbox = outbox
        self.render = render  # a run's message as it reads in chat (bot/chat/views/runs.py)
        self.topics = topics or Topics(store)  # a run talks in its agent's topic, if it has one

    async def create(
        self,
        agent: str,
        request: str,
        chat_id: int,
        *,
        origin: RunOrigin,
        deadline_seconds: int,
        task_id: int | None = None,
        schedule: str | None = None,
        key: str | None = None,
    ) -> tuple[AgentRun, bool]:
        """A queued run and its progress message, in one transaction; returns the run and
        whether it is new (a repeated ``key`` returns the run it made before)."""
        moment = now()
        values = {
            "agent": agent,
            "request": request,
            "origin": origin,
            "task_id": task_id,
            "schedule": schedule,
            "chat_id": chat_id,
            "idempotency_key": key,
            "status": RunState.QUEUED,
            "step": "queued",
            "state": {},
            "effects": {},
            "deadline_seconds": deadline_seconds,
            "attempts": 0,
            "cancel_requested": False,
            "created_at": moment,
        }
        try:
            async with self.store.write() as conn:
                place = await self.topics.place(chat_id, agent, conn)
                values.update(chat_id=place.chat_id, thread_id=place.thread_id)
                run_id = (
                    await conn.execute(
                        insert(agent_runs).values(**values).returning(agent_runs.c.id)
                    )
                ).scalar_one()
                run = AgentRun.from_row(
                    (await conn.execute(select(agent_runs).where(agent_runs.c.id == run_id))).one()
                )
                outbox_id = await self.outbox.add(
                    conn, place.chat_id, self.render(run), thread_id=place.thread_id
                )
                await conn.execute(
                    update(agent_runs)
                    .where(agent_runs.c.id == run_id)
                    .values(progress_outbox_id=outbox_id)
                )
        except IntegrityError:
            if key is None:
                raise
            async with self.store.read() as conn:
                row = (
                    await conn.execute(
                        select(agent_runs).where(agent_runs.c.idempotency_key == key)
                    )
                ).one()
            return AgentRun.from_row(row), False
        return await self.get(run_id), True

    async def claim(
        self,
        run_id: int,
        *,
        stale_after: timedelta,
        continuing: int | None = None,
        watched: int | None = None,
    ) -> AgentRun | None:
        """Take the run for this worker: a queued run, a running one whose worker stopped
        beating for ``stale_after``, or a run parked on that interaction (``continuing``) or
        that process watch (``watched``). None when someone else holds it or it is over."""
        moment = now()
        # the deadline starts now
        fresh_stretch = {"deadline_at": None, "waiting_on": None, "watching": None}
        if continuing is not None:
            condition = and_(
                agent_runs.c.status == RunState.PARKED, agent_runs.c.waiting_on == continuing
            )
        elif watched is not None:
            condition = and_(
                agent_runs.c.status == RunState.PARKED, agent_runs.c.watching == watched
            )
        else:
            condition = or_(
                agent_runs.c.status == RunState.QUEUED,
                and_(
                    agent_runs.c.status == RunState.RUNNING,
                    agent_runs.c.heartbeat_at < moment - stale_after,
                ),
            )
        async with self.store.write() as conn:
            claimed = await conn.execute(
                update(agent_runs)
                .where(agent_runs.c.id == run_id, condition)
                .values(
                    status=RunState.RUNNING,
                    attempts=agent_runs.c.attempts + 1,
                    heartbeat_at=moment,
                    started_at=func.coalesce(agent_runs.c.started_at, moment),
                )
            )
            if claimed.rowcount != 1:
                return None
            run = AgentRun.from_row(
                (await conn.execute(select(agent_runs).where(agent_runs.c.id == run_id))).one()
            )
            if run.deadline_at is None or continuing is not None or watched is not None:
                # A new stretch of work (first start, or back from a card) gets the whole
                # deadline; a run taken over from a dead worker keeps the one it had.
                fresh_stretch["deadline_at"] = moment + timedelta(seconds=run.deadline_seconds)
                await conn.execute(
                    update(agent_runs).where(agent_runs.c.id == run_id).values(**fresh_stretch)
                )
                run = AgentRun.from_row(
                    (await conn.execute(select(agent_runs).where(agent_runs.c.id == run_id))).one()
                )
        return run

    async def beat(self, run: AgentRun) -> Beat:
        """The holder is alive. Says whether a cancel was asked for, or whether the run is no
        longer this holder's (taken over, cancelled while queued): then it must stop at once."""
        async with self.store.write() as conn:
            result = await conn.execute(
                update(agent_runs)
                .where(_held(run))
                .values(heartbeat_at=now())
                .returning(agent_runs.c.cancel_requested)
            )
            row = result.first()
        if row is None:
            return Beat.LOST
        return Beat.CANCEL if row.cancel_requested else Beat.GO_ON

    async def checkpoint(
        self, run: AgentRun, *, state: dict, effects: dict, step: str | None = None
    ) -> None:
        """Save the harness's state; raises RunLost when the run is no longer this holder's,
        so a stale holder stops instead of writing over the one that took the run over."""
        values: dict[str, Any] = {"state": state, "effects": effects, "heartbeat_at": now()}
        if step is not None:
            values["step"] = step[:200]
        async with self.store.write() as conn:
            saved = await conn.execute(update(agent_runs).where(_held(run)).values(**values))
        if saved.rowcount != 1:
            raise RunLost(f"run #{run.id} is no longer held by attempt {run.attempts}")

    async def park(
        self,
        run: AgentRun,
        interaction_id: int | None,
        *,
        state: dict,
        effects: dict,
        step: str,
        watch_id: int | None = None,
    ) -> AgentRun | None:
        """Wait for a card (or a process watch, ``watch_id``); None when the holder lost the
        run or a cancel was asked for (a cancelled run must not wake up and make the call
        once the card is approved)."""
        return await self._move(
            run,
            RunState.PARKED,
            agent_runs.c.cancel_requested.is_(False),
            state=state,
            effects=effects,
            step=step[:200],
            waiting_on=interaction_id,
            watching=watch_id,
        )

    async def show_step(self, run_id: int, step: str) -> AgentRun | None:
        """A running run's step, set from outside its harness (the MCP server, holding one of
        its calls on a card); None when it is not running or already says so."""
        return await self._show(
            run_id,
            step,
            agent_runs.c.status == RunState.RUNNING,
            agent_runs.c.step != step[:200],
        )

    async def show_waiting(self, run_id: int, watch_id: int, step: str) -> AgentRun | None:
        """A parked run's step, as the process watch it waits on goes (its progress)."""
        return await self._show(
            run_id,
            step,
            agent_runs.c.status == RunState.PARKED,
            agent_runs.c.watching == watch_id,
        )

    async def _show(self, run_id: int, step: str, *where) -> AgentRun | None:
        """Set the run's step where ``where`` holds; the run as it is then, or None."""
        async with self.store.write() as conn:
            moved = await conn.execute(
                update(agent_runs).where(agent_runs.c.id == run_id, *where).values(step=step[:200])
            )
            if moved.rowcount != 1:
                return None
            row = (await conn.execute(select(agent_runs).where(agent_runs.c.id == run_id))).one()
        return AgentRun.from_row(row)

    async def finish(
        self,
        run: AgentRun,
        status: RunState,
        *,
        effects: dict,
        state: dict | None = None,
        result: str | None = None,
        error: str | None = None,
    ) -> AgentRun | None:
        values: dict[str, Any] = {
            "effects": effects,
            "result": result,
            "error": error and error[:2000],
            "finished_at": now(),
            "step": status.value.replace("_", " "),
        }
        if state is not None:
            values["state"] = state
        return await self._move(run, status, **values)

    async def _move(self, run: AgentRun, status: RunState, *also, **values) -> AgentRun | None:
        async with self.store.write() as conn:
            moved = await conn.execute(
                update(agent_runs).where(_held(run), *also).values(status=status, **values)
            )
            if moved.rowcount != 1:
                return None
            row = (await conn.execute(select(agent_runs).where(agent_runs.c.id == run.id))).one()
        return AgentRun.from_row(row)

    async def hand_back(self, run: AgentRun) -> bool:
        """A worker shutting down gives the run back as queued; the next one goes on from its
        last checkpoint, within the deadline it already had (or ends it, if a cancel was
        asked for meanwhile)."""
        async with self.store.write() as conn:
            moved = await conn.execute(
                update(agent_runs)
                .where(_held(run))
                .values(status=RunState.QUEUED, step="handed back by a stopping worker")
            )
        return moved.rowcount == 1

    async def cancel(self, run_id: int) -> AgentRun | None:
        """Stop a run: a queued or parked one ends here; a running one is asked to stop (its
        worker sees the flag within a second and kills what it started). None: no such run."""
        moment = now()
        async with self.store.write() as conn:
            await conn.execute(
                update(agent_runs)
                .where(
                    agent_runs.c.id == run_id,
                    agent_runs.c.status.in_((RunState.QUEUED, RunState.PARKED)),
                )
                .values(
                    status=RunState.CANCELLED,
                    finished_at=moment,
                    step="cancelled",
                    error="cancelled by the owner before it ran on",
                )
            )
            await conn.execute(
                update(agent_runs)
                .where(agent_runs.c.id == run_id, agent_runs.c.status == RunState.RUNNING)
                .values(cancel_requested=True)
            )
            row = (await conn.execute(select(agent_runs).where(agent_runs.c.id == run_id))).first()
        return AgentRun.from_row(row) if row else None

    # Reading

    async def get(self, run_id: int) -> AgentRun | None:
        async with self.store.read() as conn:
            row = (await conn.execute(select(agent_runs).where(agent_runs.c.id == run_id))).first()
        return AgentRun.from_row(row) if row else None

    async def recent(self, *, limit: int = 10, agent: str | None = None) -> list[AgentRun]:
        query = select(agent_runs).order_by(agent_runs.c.id.desc()).limit(limit)
        if agent is not None:
            query = query.where(agent_runs.c.agent == agent)
        async with self.store.read() as conn:
            rows = (await conn.execute(query)).all()
        return [AgentRun.from_row(row) for row in rows]

    async def adrift(self, *, stale_after: timedelta, queued_for: timedelta) -> list[int]:
        """Runs nobody is working on: running without a heartbeat for ``stale_after`` (a
        killed worker), handed back by a stopping worker, or queued for ``queued_for`` (a lost
        message)."""
        moment = now()
        query = (
            select(agent_runs.c.id)
            .where(
                or_(
                    and_(
                        agent_runs.c.status == RunState.RUNNING,
                        agent_runs.c.heartbeat_at < moment - stale_after,
                    ),
                    and_(
                        agent_runs.c.status == RunState.QUEUED,
                        or_(
                            agent_runs.c.attempts > 0,  # handed back by a stopping worker
                            agent_runs.c.created_at < moment - queued_for,
                        ),
                    ),
                )
            )
            .order_by(agent_runs.c.id)
            .limit(100)
        )
        async with self.store.read() as conn:
            return list((await conn.execute(query)).scalars())

    async def parked_on(self, interaction_id: int) -> list[int]:
        query = select(agent_runs.c.id).where(
            agent_runs.c.status == RunState.PARKED, agent_runs.c.waiting_on == interaction_id
        )
        async with self.store.read() as conn:
            return list((await conn.execute(query.order_by(agent_runs.c.id))).scalars())

    async def parked_on_settled_cards(self, *, settled_for: timedelta) -> list[tuple[int, int]]:
        """(run, card) for runs still parked on a card settled ``settled_for`` ago: their
        wake-up was lost (a worker died between settling and waking them)."""
        moment = now()
        query = (
            select(agent_runs.c.id, agent_runs.c.waiting_on)
            .join(interactions, interactions.c.id == agent_runs.c.waiting_on)
            .where(
                agent_runs.c.status == RunState.PARKED,
                interactions.c.status.not_in(OPEN),
                interactions.c.resolved_at < moment - settled_for,
            )
            .order_by(agent_runs.c.id)
            .limit(100)
        )
        async with self.store.read() as conn:
            return [(row.id, row.waiting_on) for row in (await conn.execute(query)).all()]

    async def parked_on_ended_watches(self, *, ended_for: timedelta) -> list[tuple[int, int]]:
        """(run, watch) for runs still parked on a process watch that ended ``ended_for``
        ago: their wake-up was lost."""
        query = (
            select(agent_runs.c.id, agent_runs.c.watching)
            .join(process_watches, process_watches.c.id == agent_runs.c.watching)
            .where(
                agent_runs.c.status == RunState.PARKED,
                process_watches.c.ended_at < now() - ended_for,
            )
            .order_by(agent_runs.c.id)
            .limit(100)
        )
        async with self.store.read() as conn:
            return [(row.id, row.watching) for row in (await conn.execute(query)).all()]

    async def ended_untold(self, *, ended_for: timedelta, within: timedelta = timedelta(days=1)):
        """Runs that ended (``ended_for`` ago, within the last ``within``) but whose last word
        was never queued: their worker died between ending them and telling the owner."""
        moment = now()
        told = select(outbox.c.id).where(
            outbox.c.idempotency_key == literal("run:") + cast(agent_runs.c.id, String) + ":end"
        )
        query = (
            select(agent_runs)
            .where(
                agent_runs.c.status.in_(tuple(ENDED)),
                agent_runs.c.finished_at < moment - ended_for,
                agent_runs.c.finished_at > moment - within,
                ~told.exists(),
            )
            .order_by(agent_runs.c.id)
            .limit(100)
        )
        async with self.store.read() as conn:
            return [AgentRun.from_row(row) for row in (await conn.execute(query)).all()]

    async def active_for_schedule(self, schedule: str) -> int:
        query = select(func.count()).where(
            agent_runs.c.schedule == schedule,
            agent_runs.c.status.in_((*ACTIVE, RunState.PARKED)),
        )
        async with self.store.read() as conn:
            return (await conn.execute(query)).scalar_one()

    async def by_agent(self) -> dict[str, dict[str, Any]]:
        """Per agent: how many runs are active or parked, and its last run."""
        counts = (
            select(agent_runs.c.agent, agent_runs.c.status, func.count())
            .where(agent_runs.c.status.in_((*ACTIVE, RunState.PARKED)))
            .group_by(agent_runs.c.agent, agent_runs.c.status)
        )
        last = select(func.max(agent_runs.c.id)).group_by(agent_runs.c.agent)
        async with self.store.read() as conn:
            summary: dict[str, dict[str, Any]] = {}
            for agent, status, count in (await conn.execute(counts)).all():
                summary.setdefault(agent, {})[status] = count
            rows = (await conn.execute(select(agent_runs).where(agent_runs.c.id.in_(last)))).all()
        for row in rows:
            summary.setdefault(row.agent, {})["last"] = AgentRun.from_row(row)
        return summary
