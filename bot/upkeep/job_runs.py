"""Runs: every job writes a row saying what ran, when, how it ended and what it changed.

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


class RunStatus(enum.StrEnum):
    COMPLETED = "completed"
    FAILED = "failed"
    RETRYING = "retrying"
    PARKED = "parked"


@dataclass(frozen=True)
class Run:
    id: int
    job: str
    status: str
    summary: dict[str, Any]
    error: str | None
    started_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True)
class RunRecord:
    """A finished job, as the worker saw it."""

    job: str
    message_id: str
    status: RunStatus
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


class Runs:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def record_many(self, records: list[RunRecord]) -> None:
        """Write several runs in one transaction (the worker batches them)."""
        if not records:
            return
        async with self.store.write() as conn:
            await conn.execute(insert(runs), [record.row() for record in records])

    async def latest(self, limit: int = 10, *, exclude_jobs: tuple[str, ...] = ()) -> list[Run]:
        query = select(runs).order_by(runs.c.id.desc()).limit(limit)
        if exclude_jobs:
            query = query.where(runs.c.job.not_in(exclude_jobs))
        async with self.store.read() as conn:
            rows = (await conn.execute(query)).all()
        return [
            Run(r.id, r.job, r.status, r.summary, r.error, r.started_at, r.finished_at)
            for r in rows
        ]
