"""The notes store: what was filed as ``@reference``, what the owner kept with /note or told an
agent by replying to its cards, and what agents kept themselves; searchable by words
(bot/store/search.py) on SQLite and Postgres alike."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from bot.store import search
from bot.store.database import Store
from bot.store.tables import notes
from bot.timeutil import now


class NoteKind(enum.StrEnum):
    REFERENCE = "reference"  # filed from a task
    AGENT = "agent"  # a reply to an agent's card, for its later runs
    COMMENT = "comment"  # said about a task (by an agent's run, or the sweep)
    MEMO = "memo"  # kept by an agent itself (notes.add), found by notes.search
    OWNER = "owner"  # kept by the owner with /note


@dataclass(frozen=True)
class Note:
    id: int
    kind: NoteKind
    text: str
    agent: str | None
    task_id: int | None
    created_at: datetime


async def add_note(
    conn: AsyncConnection,
    kind: NoteKind,
    text: str,
    *,
    agent: str | None = None,
    task_id: int | None = None,
    interaction_id: int | None = None,
    user_id: int | None = None,
) -> int:
    """Keep a note inside the caller's transaction; returns its id."""
    result = await conn.execute(
        insert(notes)
        .values(
            kind=kind,
            agent=agent,
            task_id=task_id,
            interaction_id=interaction_id,
            user_id=user_id,
            text=text,
            search_text=search.search_text(text),
            created_at=now(),
        )
        .returning(notes.c.id)
    )
    return result.scalar_one()


class Notes:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def search(self, query: str, *, limit: int = 10) -> tuple[list[Note], int]:
        """Notes holding every word of ``query`` (as a word prefix), newest first, and how
        many there are in all. No words, no notes."""
        words = search.words(query)
        if not words:
            return [], 0
        condition = search.matches(notes, words, sqlite=self.store.is_sqlite)
        async with self.store.read() as conn:
            total = (await conn.execute(select(func.count()).where(condition))).scalar_one()
            rows = await conn.execute(
                select(notes).where(condition).order_by(notes.c.id.desc()).limit(limit)
            )
            return [_note(row) for row in rows.all()], total

    async def keep(self, text: str, *, user_id: int | None = None) -> int:
        """Keep what the owner wrote with /note; returns its id."""
        async with self.store.write() as conn:
            return await add_note(conn, NoteKind.OWNER, text, user_id=user_id)

    async def for_agent(self, agent: str, *, limit: int = 20) -> list[str]:
        """What the owner told this agent by replying to its cards, oldest first."""
        query = (
            select(notes.c.text)
            .where(notes.c.kind == NoteKind.AGENT, notes.c.agent == agent)
            .order_by(notes.c.id.desc())
            .limit(limit)
        )
        async with self.store.read() as conn:
            return list(reversed((await conn.execute(query)).scalars().all()))


def _note(row) -> Note:
    return Note(row.id, NoteKind(row.kind), row.text, row.agent, row.task_id, row.created_at)
