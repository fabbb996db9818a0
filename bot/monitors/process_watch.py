"""A long process watched for an agent's run: what tells that it is done (a command that exits 0),
what tells that it failed (another), what shows its progress (a third), how often to look, and
the deadline; what one look found; and the words the run is continued with when it ends.

A coding agent that starts a build, a deploy or a migration should not spend its turn polling
it. It asks aegis to watch (``monitors.watch_process``, gated with a code: the commands run on
this server at every look), ends its turn, and its run is parked on the watch
(bot/agents/agent_runs.py). When a look finds it passed or failed, or the deadline comes, the
run is continued with ``ProcessWatch.outcome``. The service is bot/monitors/process_watches.py;
the looks are run by the worker (jobs/monitors/processes.py).
"""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from bot.timeutil import short_time

DEFAULT_EVERY = 30
MIN_EVERY = 10
MAX_EVERY = 3600
MIN_DEADLINE = 60
MAX_DEADLINE = 7 * 24 * 3600
PROGRESS_CHARS = 160


class WatchStatus(enum.StrEnum):
    WATCHING = "watching"
    PASSED = "passed"  # the done command exited 0
    FAILED = "failed"  # the fail command exited 0
    TIMED_OUT = "timed_out"  # neither, by the deadline
    BROKEN = "broken"  # a command could not be started at all: looking again cannot help
    ABANDONED = "abandoned"  # the run that asked for it ended meanwhile (cancelled)

    @property
    def is_over(self) -> bool:
        return self is not WatchStatus.WATCHING


@dataclass(frozen=True)
class ProcessWatchSpec:
    """Command lines are split into words by ``shlex`` and never given to a shell."""

    name: str
    done: str
    fail: str | None = None
    progress: str | None = None
    every_seconds: int = DEFAULT_EVERY
    timeout_seconds: float = 10.0  # each command's own ceiling
    deadline_seconds: int = 3600
    workdir: str | None = None  # where the commands run: the agent's workdir, when it has one

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, values: dict[str, Any]) -> ProcessWatchSpec:
        return cls(**values)

    @property
    def every(self) -> timedelta:
        return timedelta(seconds=self.every_seconds)


@dataclass(frozen=True)
class Look:
    """What one look found: the status it shows (WATCHING: neither done nor failed yet), the
    progress command's last line, and a few words on why (a command's last line, a problem)."""

    status: WatchStatus
    progress: str | None = None
    detail: str | None = None


@dataclass(frozen=True)
class ProcessWatch:
    """One row of ``process_watches``."""

    id: int
    agent: str
    run_id: int
    chat_id: int
    spec: ProcessWatchSpec
    status: WatchStatus
    checks: int
    progress: str | None
    outcome: str | None
    next_check_at: datetime
    deadline_at: datetime
    created_at: datetime
    ended_at: datetime | None

    @classmethod
    def from_row(cls, row: Any) -> ProcessWatch:
        values = dict(row._mapping)
        values["spec"] = ProcessWatchSpec.from_json(values["spec"])
        values["status"] = WatchStatus(values["status"])
        return cls(**values)

    @property
    def name(self) -> str:
        return self.spec.name

    def next_look(self, moment: datetime) -> datetime:
        """One interval on, but never past the deadline: the deadline gets a look of its own.
        A look claimed at or past the deadline is claimed again an interval later, in case its
        message was lost."""
        following = moment + self.spec.every
        return following if moment >= self.deadline_at else min(following, self.deadline_at)

    def waiting_step(self) -> str:
        """The run's step while it waits, as its progress message shows it."""
        step = f"waiting for {self.name} (process watch #{self.id})"
        return f"{step}: {self.progress}" if self.progress else step


def ended(watch: ProcessWatch, look: Look, moment: datetime) -> tuple[WatchStatus, str] | None:
    """The status and the words a run is continued with, when this look ends the watch; None
    while it goes on. A look at or past the deadline that finds neither ends it TIMED_OUT."""
    status = look.status
    if status is WatchStatus.WATCHING and moment >= watch.deadline_at:
        status = WatchStatus.TIMED_OUT
    if status is WatchStatus.WATCHING:
        return None
    return status, outcome(watch, status, look, moment)


def outcome(watch: ProcessWatch, status: WatchStatus, look: Look, moment: datetime) -> str:
    took = _duration(moment - watch.created_at)
    head = f"aegis's watch #{watch.id} of {watch.name!r} (run #{watch.run_id}):"
    said = {
        WatchStatus.PASSED: f"it passed after {took}: the done command exited 0",
        WatchStatus.FAILED: f"it failed after {took}: the fail command exited 0",
        WatchStatus.TIMED_OUT: (
            f"it had neither passed nor failed by its deadline ({short_time(watch.deadline_at)}, "
            f"{took} after it began)"
        ),
        WatchStatus.BROKEN: f"it could not be watched after {took}",
        WatchStatus.ABANDONED: "its run ended before it did",
    }[status]
    lines = [f"{head} {said}."]
    # What the commands printed is data, never instructions: it is quoted as such.
    if look.detail:
        lines.append(f"Its last line of output (quoted): {json.dumps(look.detail)}")
    progress = look.progress or watch.progress
    if progress and status is not WatchStatus.PASSED:
        lines.append(f"The last progress line (quoted): {json.dumps(progress)}")
    return "\n".join(lines)


def _duration(elapsed: timedelta) -> str:
    seconds = max(0, int(elapsed.total_seconds()))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"
