"""An agent run as data: its states and origins, the row as a value, and what a holder of a
run learns when it beats. The service that moves runs from state to state is
bot/agents/agent_runs.py.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from bot.timeutil import now


class RunState(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    PARKED = "parked"
    COMPLETED = "completed"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"

    @property
    def is_over(self) -> bool:
        return self in ENDED


ENDED = frozenset({RunState.COMPLETED, RunState.FAILED, RunState.TIMED_OUT, RunState.CANCELLED})


# Counted in a run's effects but changing nothing: calls refused, failed or denied
# (``calls_*``), cards that only asked, and a CLI's calls that only read.
NOT_EFFECTS = ("calls_", "cards_asked", "reads")


def completed_with_no_effect(status: str, effects: dict | None) -> bool:
    """The completed no-op: a run that says it is done and changed nothing (a finding). A call
    that was refused or failed changed nothing either."""
    counts = [
        value
        for name, value in (effects or {}).items()
        if isinstance(value, int | float) and not name.startswith(NOT_EFFECTS)
    ]
    return status == RunState.COMPLETED and sum(counts) == 0


ACTIVE = (RunState.QUEUED, RunState.RUNNING)
UNDER_WAY = (RunState.QUEUED, RunState.RUNNING, RunState.PARKED)  # not over yet


class RunOrigin(enum.StrEnum):
    COMMAND = "command"  # /run
    TASK = "task"  # an assigned task, picked by the sweep
    SCHEDULE = "schedule"  # a schedule from aegis.yaml


@dataclass(frozen=True)
class AgentRun:
    id: int
    agent: str
    request: str
    origin: RunOrigin
    task_id: int | None
    schedule: str | None
    chat_id: int
    status: RunState
    step: str
    state: dict[str, Any]
    effects: dict[str, int]
    result: str | None
    error: str | None
    waiting_on: int | None  # the card a parked run waits for
    progress_outbox_id: int | None
    deadline_seconds: int
    deadline_at: datetime | None
    attempts: int
    cancel_requested: bool
    created_at: datetime
    started_at: datetime | None
    heartbeat_at: datetime | None
    finished_at: datetime | None
    watching: int | None = None  # or the process watch it waits for
    thread_id: int | None = None  # the agent's forum topic in ``chat_id``, if it has one

    @classmethod
    def from_row(cls, row: Any) -> AgentRun:
        values = dict(row._mapping)
        values.pop("idempotency_key", None)
        values["origin"] = RunOrigin(values["origin"])
        values["status"] = RunState(values["status"])
        return cls(**values)

    def waits_for(self) -> str:
        """What a parked run waits for, in words: "you on card #4", "process watch #2"."""
        if self.watching is not None:
            return f"process watch #{self.watching}"
        return f"you on card #{self.waiting_on}"

    def elapsed(self, moment: datetime | None = None) -> timedelta:
        if self.started_at is None:
            return timedelta(0)
        return (self.finished_at or moment or now()) - self.started_at

    def effects_text(self) -> str:
        """What it changed, as counts: "tool calls: 2, messages sent: 1"; "no effect" when
        none (which is a finding, not a success)."""
        shown = [
            f"{name.replace('_', ' ')}: {count}"
            for name, count in sorted(self.effects.items())
            if count
        ]
        return ", ".join(shown) or "no effect"


class Beat(enum.Enum):
    GO_ON = "go on"
    CANCEL = "cancel"  # /cancel was asked for
    LOST = "lost"  # the run is no longer this holder's


def end_key(run_id: int) -> str:
    """The outbox key of a run's last word (see ``AgentRuns.ended_untold``)."""
    return f"run:{run_id}:end"
