"""What /status shows: live processes, queues, the database and broker, the recent work."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from bot.chat.outbox import Outbox
from bot.chat.text import Html, bold, html
from bot.chat.topics import Topics
from bot.chat.views.schedules import status_lines
from bot.chat.views.topics import status_line as topics_line
from bot.chat.views.voice import status_line as voice_line
from bot.timeutil import now, short_time
from bot.upkeep.heartbeats import Heartbeats, Process
from bot.upkeep.job_runs import JobRun, JobRuns
from bot.upkeep.schedules import Schedules

QUIET_JOBS = ("deliver",)  # one per message sent: counted in the outbox line instead
# The jobs /status lists as recent work, in words: what a person asked for or waits on. An allow
# list: everything else is the machine's upkeep (sweeps, monitor checks, expiries), summed up
# in one line, so a new kind of job never floods the list.
WORK = {
    "run_agent": "agent run",
    "run_assigned_task": "assigned task",
    "scheduled_run": "scheduled run",
    "daily_briefing": "daily briefing",
    "weekly_review": "weekly review",
    "triage_task": "triage",
    "apply_triage": "triage",
    "remind": "reminder",
    "ping": "ping",
    "demo_step": "demo",
    "transcribe_voice": "voice note",
    "review_chat": "chat review",
    "open_topics": "forum topics",
}


@dataclass(frozen=True)
class StatusReport:
    processes: list[Process]
    queue_depths: dict[str, int] | None
    outbox: dict[str, int]  # the rows not yet sent, by status
    database: str
    broker: str
    latest_jobs: list[JobRun]  # of WORK
    latest_upkeep: JobRun | None = None
    schedules: list[str] = field(default_factory=list)  # warnings and skips; none: quiet
    config_problem: str | None = None  # why aegis.yaml on disk is not the one in force
    oldest_owed_at: datetime | None = None  # when the oldest message still to send was queued
    voice: str | None = None  # whether voice notes are transcribed, and by whom
    topics: str | None = None  # where agents' topics are, if anywhere

    def render(self) -> Html:
        """The report in the chat's HTML: bold headings, a line each (``plain`` for a terminal)."""
        lines: list[str] = [bold("aegis status"), "", bold("Processes")]
        lines += [f"  {_process_line(p)}" for p in self.processes] or ["  none reporting"]
        if self.queue_depths is None:
            lines += ["", html("<b>Queues</b>: broker unreachable")]
        else:
            queues = ", ".join(f"{name} {depth}" for name, depth in self.queue_depths.items())
            lines += ["", html("<b>Queues</b>: {}", queues)]
        lines += [self._outbox_line(), f"Database: {self.database}", f"Broker: {self.broker}"]
        lines += [line for line in (self.voice, self.topics) if line]
        lines += ["", bold("Recent work")]
        lines += [f"  {_job_line(run)}" for run in self.latest_jobs] or ["  none yet"]
        if self.latest_upkeep is not None:
            run = self.latest_upkeep
            lines.append(f"  upkeep (sweeps, checks): last {_when(run)}, {run.status}")
        if self.schedules:
            lines += ["", bold("Schedules"), *(f"  {line}" for line in self.schedules)]
        if self.config_problem:
            lines += [
                "",
                bold("aegis.yaml changed but is not used (the last good file stays in force):"),
                f"  {self.config_problem}",
            ]
        return Html("\n").join(lines)

    def _outbox_line(self) -> str:
        if not self.outbox:
            return "Outbox: everything sent"
        counts = ", ".join(f"{k} {v}" for k, v in sorted(self.outbox.items()))
        if self.oldest_owed_at is None:
            return f"Outbox: {counts}"
        return f"Outbox: {counts} (waiting since {short_time(self.oldest_owed_at)})"


async def gather_status(
    heartbeats: Heartbeats,
    outbox: Outbox,
    job_runs: JobRuns,
    *,
    queue_depths: dict[str, int] | None,
    database: str,
    broker: str,
    schedules: Schedules | None = None,
    agents: dict | None = None,
    config_problem: str | None = None,
    transcribe_url: str | None = None,
    topics: Topics | None = None,
) -> StatusReport:
    rows = await schedules.all() if schedules is not None else []
    forum = await topics.forum() if topics is not None else None
    topic_count = len(await topics.of_forum(forum.chat_id)) if forum is not None else 0
    return StatusReport(
        processes=await heartbeats.alive(),
        queue_depths=queue_depths,
        outbox=await outbox.counts(),
        oldest_owed_at=await outbox.oldest_owed_at(),
        database=database,
        broker=broker,
        latest_jobs=await job_runs.latest(5, only_jobs=tuple(WORK)),
        latest_upkeep=next(iter(await job_runs.latest(1, exclude_jobs=(*QUIET_JOBS, *WORK))), None),
        schedules=status_lines(rows, agents or {}),
        config_problem=config_problem,
        voice=voice_line(transcribe_url),
        topics=topics_line(forum, topic_count),
    )


def _process_line(process: Process) -> str:
    up = now() - process.started_at
    return f"{process.kind}: {process.process_id}, up {_duration(up.total_seconds())}"


def _job_line(run: JobRun) -> str:
    """``ping completed 14:02 UTC``, and what it did, in words: the counts that are not 0."""
    effects = ", ".join(
        f"{name.replace('_', ' ')} {count}"
        for name, count in run.summary.items()
        if isinstance(count, int) and not isinstance(count, bool) and count
    )
    line = f"{WORK.get(run.job, run.job)} {run.status} {_when(run)}"
    return f"{line}: {effects}" if effects else line


def _when(run: JobRun) -> str:
    return short_time(run.finished_at or run.started_at)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"
