"""A forum topic per agent: where an agent's messages go, and whose topic a message was written in.

Point aegis at a supergroup with topics (``/here`` sent there by an owner, or
``AEGIS_OWNER_CHAT_ID``) and each agent gets a topic of its own; its run messages, results and
cards go there, and what an owner writes in it is for that agent. Making a topic is a Bot API call,
so a job makes them (jobs/topics.py); until an agent has one, and whenever the forum is off or
lost (Telegram refused to make a topic), its messages go to the private chat as before.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, delete, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from bot.store.database import Store
from bot.store.tables import forum, topics
from bot.timeutil import now

FORUM_ROW = 1  # there is one forum: its row's id


class ForumState(enum.StrEnum):
    ON = "on"
    LOST = "lost"  # Telegram refused a topic there: everything goes to the home chat


@dataclass(frozen=True)
class Place:
    """Where a message goes: a chat, and in a forum chat the topic (its message_thread_id)."""

    chat_id: int
    thread_id: int | None = None


@dataclass(frozen=True)
class Forum:
    chat_id: int
    title: str
    home_chat_id: int  # the private chat everything falls back to
    state: ForumState
    problem: str | None
    changed_at: datetime

    @property
    def on(self) -> bool:
        return self.state is ForumState.ON


class Topics:
    def __init__(self, store: Store) -> None:
        self.store = store

    # The forum

    async def forum(self) -> Forum | None:
        async with self.store.read() as conn:
            row = (await conn.execute(select(forum).where(forum.c.id == FORUM_ROW))).first()
        return _forum(row)

    async def set_forum(self, chat_id: int, title: str, home_chat_id: int) -> Forum:
        """Make ``chat_id`` the forum (``/here``), on again even if it was lost."""
        moment = now()
        values = {
            "chat_id": chat_id,
            "title": title[:200],
            "home_chat_id": home_chat_id,
            "state": ForumState.ON,
            "problem": None,
            "changed_at": moment,
        }
        async with self.store.write() as conn:
            changed = await conn.execute(
                update(forum).where(forum.c.id == FORUM_ROW).values(**values)
            )
            if changed.rowcount == 0:
                await conn.execute(insert(forum).values(id=FORUM_ROW, set_at=moment, **values))
        return await self.forum()

    async def seed(self, chat_id: int, home_chat_id: int) -> None:
        """The forum ``AEGIS_OWNER_CHAT_ID`` names, unless one is set already (``/here`` wins:
        it is the later word)."""
        moment = now()
        row = {
            "id": FORUM_ROW,
            "chat_id": chat_id,
            "title": "the group",
            "home_chat_id": home_chat_id,
            "state": ForumState.ON,
            "set_at": moment,
            "changed_at": moment,
        }
        try:
            async with self.store.write() as conn:
                if (await conn.execute(select(forum.c.id))).first() is None:
                    await conn.execute(insert(forum).values(**row))
        except IntegrityError:  # another process seeded it at the same moment
            pass

    async def clear_forum(self) -> Forum | None:
        """Back to the private chat (``/here`` in a private chat); returns the forum it was."""
        before = await self.forum()
        async with self.store.write() as conn:
            await conn.execute(delete(forum).where(forum.c.id == FORUM_ROW))
        return before

    async def lose(self, chat_id: int, problem: str) -> bool:
        """Turn the forum off because Telegram refused it; True for the one call that did (so
        the owner is told once)."""
        async with self.store.write() as conn:
            changed = await conn.execute(
                update(forum)
                .where(
                    forum.c.id == FORUM_ROW,
                    forum.c.chat_id == chat_id,
                    forum.c.state == ForumState.ON,
                )
                .values(state=ForumState.LOST, problem=problem[:1000], changed_at=now())
            )
        return changed.rowcount == 1

    # The topics

    async def place(
        self, chat_id: int, agent: str | None, conn: AsyncConnection | None = None
    ) -> Place:
        """Where a message of ``agent``'s goes: its topic while the forum is on and it has one
        there, else ``chat_id``. Read in the caller's transaction (``conn``) where it has one,
        so the place is the one in force when what it writes commits."""
        if agent is None:
            return Place(chat_id)
        if conn is None:
            async with self.store.read() as conn:
                return await self.place(chat_id, agent, conn)
        query = (
            select(topics.c.chat_id, topics.c.thread_id)
            .join(forum, and_(forum.c.chat_id == topics.c.chat_id, forum.c.id == FORUM_ROW))
            .where(topics.c.agent == agent, forum.c.state == ForumState.ON)
        )
        row = (await conn.execute(query)).first()
        return Place(row.chat_id, row.thread_id) if row else Place(chat_id)

    async def agent_of(self, chat_id: int, thread_id: int | None) -> str | None:
        """The agent whose topic ``thread_id`` is, in ``chat_id``; None: nobody's."""
        if thread_id is None:
            return None
        query = select(topics.c.agent).where(
            topics.c.chat_id == chat_id, topics.c.thread_id == thread_id
        )
        async with self.store.read() as conn:
            return (await conn.execute(query)).scalar()

    async def of_forum(self, chat_id: int) -> dict[str, int]:
        """Each agent's topic in ``chat_id``: slug → message_thread_id."""
        query = select(topics.c.agent, topics.c.thread_id).where(topics.c.chat_id == chat_id)
        async with self.store.read() as conn:
            return dict((await conn.execute(query)).all())

    async def missing(self, chat_id: int, agents: Iterable[str]) -> list[str]:
        """The agents, of ``agents``, that have no topic in ``chat_id`` yet."""
        have = await self.of_forum(chat_id)
        return sorted(slug for slug in set(agents) if slug not in have)

    async def record(self, agent: str, chat_id: int, thread_id: int, name: str) -> None:
        async with self.store.write() as conn:
            await conn.execute(
                insert(topics).values(
                    agent=agent,
                    chat_id=chat_id,
                    thread_id=thread_id,
                    name=name[:128],
                    created_at=now(),
                )
            )

    async def forget(self, chat_id: int, thread_id: int) -> str | None:
        """Drop a topic Telegram no longer has (deleted in the group); returns whose it was."""
        agent = await self.agent_of(chat_id, thread_id)
        async with self.store.write() as conn:
            await conn.execute(
                delete(topics).where(topics.c.chat_id == chat_id, topics.c.thread_id == thread_id)
            )
        return agent


def _forum(row) -> Forum | None:
    if row is None:
        return None
    return Forum(
        chat_id=row.chat_id,
        title=row.title,
        home_chat_id=row.home_chat_id,
        state=ForumState(row.state),
        problem=row.problem,
        changed_at=row.changed_at,
    )
