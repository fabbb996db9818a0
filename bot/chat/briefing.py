"""The daily briefing: one card a day with what is ``@next``, what waits on the owner, and what
ran in the last 24 hours and what it changed.

It reads the numbers, never only the statuses: a run that completed with no effect says so.
Its buttons open ``/next`` (a list page, bot/chat/views/tasks.py) and ``/pending``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, or_, select

from bot.agents.agent_run import AgentRun, RunState
from bot.agents.agent_runs import AgentRuns
from bot.chat.callbacks import CallbackSigner
from bot.chat.text import Html, clip, html, visible
from bot.chat.views.tasks import task_line
from bot.interactions.interaction import Interaction
from bot.interactions.interactions import Interactions
from bot.store.tables import agent_runs
from bot.tasks.task import Page, State
from bot.tasks.tasks import Tasks
from bot.timeutil import now, short_time

BRIEFING_KIND = "brief"  # brief:pending:go resends the open cards, as /pending does
WINDOW = timedelta(hours=24)
TASKS_SHOWN = 5
CARDS_SHOWN = 5
RUNS_SHOWN = 10


@dataclass(frozen=True)
class Briefing:
    day: str
    next_tasks: Page
    waiting: list[Interaction]
    waiting_total: int
    runs: list[AgentRun]  # the newest of the window
    run_counts: dict[str, int]  # every run of the window, by status

    @property
    def runs_total(self) -> int:
        return sum(self.run_counts.values())


async def gather_briefing(
    tasks: Tasks, interactions: Interactions, runs: AgentRuns, *, moment: datetime | None = None
) -> Briefing:
    moment = moment or now()
    waiting, waiting_total = await interactions.open_interactions(CARDS_SHOWN)
    recent, counts = await _runs_since(runs, moment - WINDOW)
    return Briefing(
        day=moment.date().isoformat(),
        next_tasks=await tasks.in_state(State.NEXT, size=TASKS_SHOWN),
        waiting=waiting,
        waiting_total=waiting_total,
        runs=recent,
        run_counts=counts,
    )


async def _runs_since(runs: AgentRuns, since: datetime) -> tuple[list[AgentRun], dict[str, int]]:
    """Runs started or ended since then: the newest few, and how many of each status."""
    window = or_(agent_runs.c.created_at >= since, agent_runs.c.finished_at >= since)
    newest = select(agent_runs).where(window).order_by(agent_runs.c.id.desc()).limit(RUNS_SHOWN)
    by_status = (
        select(agent_runs.c.status, func.count()).where(window).group_by(agent_runs.c.status)
    )
    async with runs.store.read() as conn:
        recent = [AgentRun.from_row(row) for row in (await conn.execute(newest)).all()]
        counts = {status: count for status, count in (await conn.execute(by_status)).all()}
    return recent, counts


def briefing_view(signer: CallbackSigner, briefing: Briefing) -> tuple[str, dict[str, Any] | None]:
    lines = [html("<b>Daily briefing</b> · {}", briefing.day), ""]
    lines += _next_section(briefing.next_tasks)
    lines += ["", *_waiting_section(briefing)]
    lines += ["", *_runs_section(briefing)]
    buttons = []
    if briefing.next_tasks.total:
        # Its own kind, not a page of the list: a page turns in place, and this is a new message.
        buttons.append(_button(signer, BRIEFING_KIND, "next", "go", "Show /next"))
    if briefing.waiting_total:
        buttons.append(_button(signer, BRIEFING_KIND, "pending", "go", "Pending cards"))
    return Html("\n").join(lines), {"inline_keyboard": [buttons]} if buttons else None


def _next_section(page: Page) -> list[str]:
    if not page.total:
        return [html("<b>@next</b>: nothing. /inbox shows what waits for triage.")]
    tasks = "task" if page.total == 1 else "tasks"
    lines = [html("<b>@next</b>: {} {}", page.shown_total(), tasks)]
    lines += [f"  {task_line(task)}" for task in page.tasks]
    if page.has_next:
        lines.append("  … /next shows them all")
    return lines


def _waiting_section(briefing: Briefing) -> list[str]:
    if not briefing.waiting_total:
        return [html("<b>Waiting on you</b>: nothing.")]
    total = briefing.waiting_total
    lines = [html("<b>Waiting on you</b>: {} {}", total, "card" if total == 1 else "cards")]
    for card in briefing.waiting:
        prompt = visible(clip(" ".join(card.prompt.split()), 80))
        lines.append(f"  #{card.id} {card.agent}: {prompt} (since {short_time(card.created_at)})")
    if total > len(briefing.waiting):
        lines.append("  … /pending sends them all again")
    return lines


def _runs_section(briefing: Briefing) -> list[str]:
    if not briefing.runs_total:
        return [html("<b>Ran in the last 24 h</b>: nothing.")]
    counts = ", ".join(
        f"{count} {RunState(status).value.replace('_', ' ')}"
        for status, count in sorted(briefing.run_counts.items())
    )
    lines = [html("<b>Ran in the last 24 h</b>: {}", counts)]
    for run in briefing.runs:
        status = run.status.value.replace("_", " ")
        where = f" (schedule {run.schedule})" if run.schedule else ""
        if run.task_id is not None:
            where = f" (task {run.task_id})"
        lines.append(f"  #{run.id} {run.agent}{where} · {status} · changed: {run.effects_text()}")
    if briefing.runs_total > len(briefing.runs):
        lines.append("  … /runs lists more")
    return lines


def _button(signer: CallbackSigner, kind: str, id: str, choice: str, text: str) -> dict:
    return {"text": text, "callback_data": signer.sign(kind, id, choice)}
