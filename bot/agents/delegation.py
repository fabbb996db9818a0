"""Delegation: tasks assigned to an agent are handed to it, a few per sweep, never guessed.

A task is eligible when it is open, has an assignee, carries a state a person is not holding
(not ``inbox``, ``@waiting`` or ``@reference``), and no run of it is under way (queued, running,
parked) or was started within the cooldown. The sweep takes the oldest eligible tasks, at most
its quota per tick, and keeps the fleet under the cap on expensive runs; each task is then
started on its own (``start``), which looks again, because the task may have changed since.

What the agent is asked is chosen by where the task came from: the first of the assignee's
``tasks:`` entries (aegis.yaml) whose ``when`` matches the task's origin and labels, its
``do`` template filled in. No entry, no harness, no such agent: the task gets a comment saying
exactly that and what to declare, and is parked in ``@waiting``, which is what keeps the next
sweep from asking again. A run that starts settles its task when it ends (jobs/agent_runs.py):
completed closes it as done; anything else, a card included, parks it in ``@waiting``.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import and_, func, or_, select, union_all

from bot.agents.agent_run import ACTIVE, AgentRun, RunOrigin, RunState
from bot.agents.profiles import AgentProfile, HarnessKind, TaskHandler
from bot.core import Platform
from bot.errors import RunRefused, TaskRefused
from bot.store.tables import agent_runs, tasks
from bot.tasks.task import State, Task
from bot.timeutil import now

HELD = (State.INBOX, State.WAITING, State.REFERENCE)  # a person holds these; never delegated
ELIGIBLE_STATES = tuple(state for state in State if state not in HELD)
UNDER_WAY = (*ACTIVE, RunState.PARKED)
PARKED_BY = "delegation"
# One pass over the template: a title holding "{text}" stays as typed, never filled in again.
PLACEHOLDER = re.compile(r"\{(title|text|link|labels|id)\}")
# What a handler's ``origin:`` may name: a capture's own kind (bot/tasks/capture.py), and the two
# plain words aegis.yaml documents, ``forward`` (anything forwarded) and ``message`` (written
# to the bot).
FORWARDED = "forward"
WRITTEN = "message"


@dataclass(frozen=True)
class Limits:
    """How much one sweep may start: the settings ``delegation_*``."""

    per_tick: int = 5
    cooldown: timedelta = timedelta(hours=1)
    expensive_cap: int = 2

    @classmethod
    def from_settings(cls, settings) -> Limits:
        return cls(
            per_tick=settings.delegation_per_tick,
            cooldown=timedelta(seconds=settings.delegation_cooldown_seconds),
            expensive_cap=settings.delegation_expensive_cap,
        )


@dataclass(frozen=True)
class Pick:
    """What one sweep hands out: task ids, oldest first."""

    task_ids: list[int]
    over_cap: int = 0  # expensive tasks the quota had room for, left for a later tick


@dataclass(frozen=True)
class Executor:
    agent: AgentProfile
    request: str


class DelegationStep(enum.StrEnum):
    """How ``start`` ended for one task (the child's summary counts these)."""

    STARTED = "started"  # a run is queued (or was already, for this same tick)
    PARKED = "parked"  # no executor, or no run could start: commented, moved to @waiting
    SKIPPED = "skipped"  # no longer eligible (closed, moved, reassigned, a run under way)
    OVER_CAP = "over_cap"  # an expensive agent, and the fleet is at the cap: a later tick


@dataclass(frozen=True)
class Started:
    step: DelegationStep
    run: AgentRun | None = None
    why: str | None = None


class Delegation:
    def __init__(self, platform: Platform, limits: Limits, owner_ids: Iterable[int] = ()) -> None:
        self.platform = platform
        self.store = platform.tasks.store
        self.limits = limits
        self.owner_ids = sorted(owner_ids)

    async def pick(self) -> Pick:
        """The oldest eligible tasks, at most ``per_tick``, with expensive runs kept under the
        cap as counted now."""
        expensive = self._expensive_agents()
        budget = self.limits.expensive_cap - await self._expensive_under_way(expensive)
        quota = self.limits.per_tick
        query = oldest_eligible(now(), self.limits, expensive)
        async with self.store.read() as conn:
            rows = sorted((await conn.execute(query)).all(), key=lambda row: row.id)
        picked, over_cap = [], 0
        for row in rows:
            if len(picked) == quota:
                break
            if row.assignee in expensive:
                if budget <= 0:
                    over_cap += 1
                    continue
                budget -= 1
            picked.append(row.id)
        return Pick(picked, over_cap)

    async def start(self, task_id: int) -> Started:
        """Look at the task again and start its run, or park it saying why."""
        latest = (
            select(func.max(agent_runs.c.id))
            .where(agent_runs.c.task_id == tasks.c.id)
            .scalar_subquery()
            .label("latest_run")
        )
        query = select(tasks, latest).where(
            tasks.c.id == task_id, eligible(now(), self.limits.cooldown)
        )
        # One statement: whether it is eligible and which run came last are read together, so
        # two deliveries racing for one task build the same key and make one run.
        async with self.store.read() as conn:
            row = (await conn.execute(query)).first()
        if row is None:
            return Started(DelegationStep.SKIPPED, why="no longer eligible")
        task = Task.from_row(row)
        executor = executor_for(task, self.platform.agents)
        if isinstance(executor, str):
            return await self._park(task, executor)
        agent = executor.agent
        if agent.expensive and await self._over_cap():
            return Started(DelegationStep.OVER_CAP, why="the fleet is at its cap on expensive runs")
        chat_id = task.chat_id or (self.owner_ids[0] if self.owner_ids else None)
        if chat_id is None:
            why = (
                f"No run: task {task.id} was captured in no chat and no owner is configured "
                "(AEGIS_OWNER_IDS), so a run would have nowhere to report."
            )
            return await self._park(task, why)
        try:
            run = await self.platform.start_run(
                agent.slug,
                executor.request,
                chat_id,
                origin=RunOrigin.TASK,
                task_id=task.id,
                key=f"task:{task.id}:after:{row.latest_run or 0}",
            )
        except RunRefused as exc:
            return await self._park(task, f"No run: {agent.slug} could not start: {exc}")
        return Started(DelegationStep.STARTED, run)

    async def _park(self, task: Task, why: str) -> Started:
        try:
            await self.platform.tasks.move(task.id, State.WAITING, PARKED_BY)
        except TaskRefused:  # closed meanwhile: nothing to park, nothing to say
            return Started(DelegationStep.SKIPPED, why="closed meanwhile")
        await self.platform.tasks.comment(task.id, why)
        return Started(DelegationStep.PARKED, why=why)

    def _expensive_agents(self) -> list[str]:
        return sorted(slug for slug, agent in self.platform.agents.items() if agent.expensive)

    async def _expensive_under_way(self, expensive: list[str]) -> int:
        """Expensive runs queued or running now, across the fleet. A parked run spends
        nothing while it waits for a person, so it does not hold a place under the cap."""
        if not expensive:
            return 0
        query = select(func.count()).where(
            agent_runs.c.status.in_(ACTIVE), agent_runs.c.agent.in_(expensive)
        )
        async with self.store.read() as conn:
            return (await conn.execute(query)).scalar_one()

    async def _over_cap(self) -> bool:
        under_way = await self._expensive_under_way(self._expensive_agents())
        return under_way >= self.limits.expensive_cap


def oldest_eligible(moment: datetime, limits: Limits, expensive: list[str]):
    """The sweep's one statement: the oldest eligible tasks (id, assignee), up to the quota;
    with expensive agents, up to the quota of the cheap and of the expensive apart, so
    expensive tasks crowding the head of the queue cannot use up a tick that may start no
    more of them."""
    condition = eligible(moment, limits.cooldown)

    def oldest(*where):
        query = select(tasks.c.id, tasks.c.assignee).where(condition, *where)
        return query.order_by(tasks.c.id).limit(limits.per_tick)

    if not expensive:
        return oldest()
    return union_all(
        oldest(tasks.c.assignee.not_in(expensive)).subquery().select(),
        oldest(tasks.c.assignee.in_(expensive)).subquery().select(),
    )


def eligible(moment: datetime, cooldown: timedelta):
    """The condition on ``tasks`` that makes a task eligible for a run now."""
    busy_or_recent = (
        select(agent_runs.c.id)
        .where(
            agent_runs.c.task_id == tasks.c.id,
            or_(agent_runs.c.status.in_(UNDER_WAY), agent_runs.c.created_at > moment - cooldown),
        )
        .exists()
    )
    return and_(
        tasks.c.closed_at.is_(None),
        tasks.c.state.in_(ELIGIBLE_STATES),
        tasks.c.assignee.is_not(None),
        ~busy_or_recent,
    )


def origin_names(task: Task) -> tuple[str, ...]:
    """The names a handler's ``origin:`` may match this task by: its own kind, then
    ``forward`` for anything forwarded or ``message`` for what was written to the bot."""
    plain = WRITTEN if task.origin_kind == "self" else FORWARDED
    return (task.origin_kind, plain)


def handler_for(agent: AgentProfile, task: Task) -> TaskHandler | None:
    """The agent's first ``tasks:`` entry matching the task, in the file's order."""
    names = origin_names(task)
    labels = list(task.labels)
    return next(
        (h for h in agent.task_handlers if any(h.matches(name, labels) for name in names)), None
    )


def executor_for(task: Task, agents: dict[str, AgentProfile]) -> Executor | str:
    """Who runs the task and what they are asked; or, in words, why nobody can and what to
    declare in aegis.yaml so someone can."""
    slug = task.assignee or ""
    agent = agents.get(slug)
    entry = f"a tasks: entry whose when: matches it ({describe_match(task)})"
    if agent is None:
        return (
            f"No executor: {slug} is not an agent declared in aegis.yaml. Declare agents.{slug} "
            f"with a harness and {entry}, or assign the task to an agent that has one."
        )
    if agent.harness is None:
        kinds = ", ".join(kind.value for kind in HarnessKind)
        return (
            f"No executor: {slug} has no harness in aegis.yaml, so it cannot run. Declare "
            f"agents.{slug}.harness ({kinds}) and {entry}."
        )
    handler = handler_for(agent, task)
    if handler is None:
        labels = ", ".join(task.labels)
        return (
            f"No executor: {slug} has no tasks: entry for this task ({describe_match(task)}). "
            f"Add one under agents.{slug}.tasks, e.g. "
            f'- when: {{origin: [{origin_names(task)[1]}], labels: [{labels}]}} do: "… {{text}}"'
        )
    return Executor(agent, fill(handler.request, task))


def describe_match(task: Task) -> str:
    labels = ", ".join(task.labels) or "none"
    return f"origin: {' or '.join(origin_names(task))}; labels: {labels}"


def fill(template: str, task: Task) -> str:
    """The request for a run: ``{title}``, ``{text}``, ``{link}``, ``{labels}`` and ``{id}``
    replaced in one pass, never with ``str.format`` (a task's text is someone else's words)."""
    values = {
        "title": task.title,
        "text": task.text(),
        "link": link_of(task),
        "labels": ", ".join(task.labels),
        "id": str(task.id),
    }
    return PLACEHOLDER.sub(lambda found: values[found.group(1)], template)


def link_of(task: Task) -> str:
    """The task's public link (a channel post), else the first link it holds, else ""."""
    if task.origin_link:
        return task.origin_link
    return next((a["url"] for a in task.attachments if a.get("url")), "")
