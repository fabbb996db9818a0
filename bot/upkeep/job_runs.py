"""Job runs: every job a worker runs writes a row of the ``runs`` table (the design's name for it)
saying what ran, when, how it ended and what it changed. Not agent runs: those are
bot/agents/agent_runs.py.

"Completed" with an empty summary is a finding, not a success: readers look at the numbers.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select

from bot.store.database import Store
from bot.store.tables import runs


class JobRunStatus(enum.StrEnum):
    COMPLETED = "completed"
    FAILED = "failed"
    RETRYING = "retrying"
    PARKED = "parked"


@dataclass(frozen=True)
class JobRun:
    """A row of ``runs``, read back."""

    id: int
    job: str
    status: str
    summary: dict[str, Any]
    error: str | None
    started_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True)
class JobRunRecord:
    """A finished job, as the worker saw it, to be written as a row."""

    job: str
    message_id: str
    status: JobRunStatus
    started_at: datetime
    finished_at: datetime
    summary: dict[str, Any]
    error: str | None = None

    def row(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "message_id": self.message_id,
            "status": self.status,
            "summary": self.summary,
            "error": self.error and self.error[:2000],
            "started_at": self.started_at,
            "finished_at": self.finished_at,
        }


class JobRuns:
    """The ``runs`` table: written by the worker (jobs/worker/middleware.py), read by /status."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def record_many(self, records: list[JobRunRecord]) -> None:
        """Write several runs in one transaction (the worker batches them)."""
        if not records:
            return
        async with self.store.write() as conn:
            await conn.execute(insert(runs), [record.row() for record in records])

    async def latest(
        self,
        limit: int = 10,
        *,
        exclude_jobs: tuple[str, ...] = (),
        only_jobs: tuple[str, ...] | None = None,
    ) -> list[JobRun]:
        query = select(runs).order_by(runs.c.id.desc()).limit(limit)
        if exclude_jobs:
            query = query.where(runs.c.job.not_in(exclude_jobs))
        if only_jobs is not None:
            query = query.where(runs.c.job.in_(only_jobs))
        async with self.store.read() as conn:
            rows = (await conn.execute(query)).all()
        return [
            JobRun(r.id, r.job, r.status, r.summary, r.error, r.started_at, r.finished_at)
            for r in rows
        ]
