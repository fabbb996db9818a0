"""Which processes are alive: each writes a heartbeat row every few seconds."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, insert, select, update

from bot.store.database import Store, serialize_on
from bot.store.tables import heartbeats
from bot.timeutil import now

BEAT_EVERY = timedelta(seconds=10)
ALIVE_WITHIN = timedelta(seconds=35)
FORGET_AFTER = timedelta(days=1)


@dataclass(frozen=True)
class Process:
    process_id: str
    kind: str
    started_at: datetime
    seen_at: datetime
    rss_bytes: int | None = None  # resident memory at its last beat


def resident_bytes() -> int | None:
    """This process's resident memory now (Linux's /proc; None elsewhere)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def process_id(kind: str) -> str:
    return f"{kind}@{socket.gethostname()}:{os.getpid()}"


class Heartbeats:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def beat(self, process: str, kind: str, started_at: datetime) -> None:
        moment, rss = now(), resident_bytes()
        async with self.store.write() as conn:
            await serialize_on(conn, f"heartbeat:{process}")  # update-or-insert, one at a time
            seen = await conn.execute(
                update(heartbeats)
                .where(heartbeats.c.process_id == process)
                .values(seen_at=moment, rss_bytes=rss, kind=kind)
            )
            if seen.rowcount == 0:
                await conn.execute(
                    insert(heartbeats).values(
                        process_id=process,
                        kind=kind,
                        started_at=started_at,
                        seen_at=moment,
                        rss_bytes=rss,
                    )
                )
            await conn.execute(
                delete(heartbeats).where(heartbeats.c.seen_at < moment - FORGET_AFTER)
            )

    async def stop(self, process: str) -> None:
        async with self.store.write() as conn:
            await conn.execute(delete(heartbeats).where(heartbeats.c.process_id == process))

    async def alive(self) -> list[Process]:
        query = (
            select(heartbeats)
            .where(heartbeats.c.seen_at > now() - ALIVE_WITHIN)
            .order_by(heartbeats.c.kind, heartbeats.c.started_at)
        )
        async with self.store.read() as conn:
            rows = (await conn.execute(query)).all()
        return [Process(r.process_id, r.kind, r.started_at, r.seen_at, r.rss_bytes) for r in rows]
