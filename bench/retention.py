"""What pruning a million old outbox rows costs the platform while it runs, and /status and a
/metrics scrape before and after.

    python bench/retention.py [--rows 1000000] [--database sqlite|postgres]

A fresh database (SQLite in a temporary dir, or a new Postgres database on 127.0.0.1) is filled
with ``--rows`` delivered outbox rows 40 days old, then 2,000 young ones, 20 still owed.

1. ``/status``'s outbox figures as aegis reads them now (the unsent rows through
   ix_outbox_unsent, and the oldest owed), and a whole /metrics scrape (aegis/metrics.py, without
   the broker's part), each beside the baseline: the count by status over the whole table that
   /status used to run. Before the prune and after it. 20,000 agent runs and 100,000 model
   calls are there too, as after months of use.
2. The prune (bot/upkeep/retention.py, with the job's batch and pause and no time budget), while a
   writer queues one outbox row every 10 ms as the platform would. Its baseline, side by side in
   the same run: the same writer for the same time with no prune. Printed: the writer's p50, p99
   and worst wait for a write transaction in each, the prune's longest hold of the write lock,
   its batches and its rate.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from sqlalchemy import func, insert, select

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fullstack import percentile  # noqa: E402  (bench/fullstack.py, beside this one)

from aegis.metrics import scrape  # noqa: E402
from bot.chat.outbox import Outbox  # noqa: E402
from bot.store import migrate  # noqa: E402
from bot.store.database import Store  # noqa: E402
from bot.store.tables import agent_runs, model_calls, outbox  # noqa: E402
from bot.timeutil import now  # noqa: E402
from bot.upkeep.retention import Keep, Retention  # noqa: E402

WRITE_EVERY = 0.010
CHUNK = 20_000


def row(age: timedelta, status: str = "sent") -> dict:
    return {
        "chat_id": 1,
        "kind": "text",
        "parts": ["a reply of a usual length, about sixty characters long, sent"],
        "status": status,
        "telegram_message_ids": [1],
        "created_at": now() - age,
        "attempts": 1,
        "parts_sent": 1,
    }


async def fill(store: Store, rows: int) -> None:
    started = time.perf_counter()
    old = row(timedelta(days=40))
    for start in range(0, rows, CHUNK):
        async with store.write() as conn:
            await conn.execute(insert(outbox), [old] * min(CHUNK, rows - start))
    young = [row(timedelta(hours=1))] * 1980 + [row(timedelta(seconds=5), "pending")] * 20
    async with store.write() as conn:
        await conn.execute(insert(outbox), young)
    run = {
        "agent": "scout",
        "request": "look",
        "origin": "command",
        "chat_id": 1,
        "status": "completed",
        "step": "",
        "state": {},
        "effects": {"tool_calls": 1},
        "deadline_seconds": 600,
        "attempts": 1,
        "cancel_requested": False,
        "created_at": now(),
    }
    call = {"agent": "scout", "provider": "openai", "model": "m", "status": "ok"}
    call |= {"latency_ms": 900, "prompt_tokens": 1000, "completion_tokens": 200, "at": now()}
    async with store.write() as conn:
        await conn.execute(insert(agent_runs), [run] * 20_000)
        for _ in range(10):
            await conn.execute(insert(model_calls), [call] * 10_000)
    print(f"filled {rows:,} old rows + 2,000 young in {time.perf_counter() - started:.1f} s")


async def timed(work, repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        began = time.perf_counter()
        await work()
        best = min(best, time.perf_counter() - began)
    return best * 1000


async def status_figures(store: Store, label: str) -> None:
    box = Outbox(store)

    async def now_reads():
        await box.counts()
        await box.oldest_owed_at()

    async def whole_table():
        query = select(outbox.c.status, func.count()).group_by(outbox.c.status)
        async with store.read() as conn:
            (await conn.execute(query)).all()

    async def metrics_scrape():
        await scrape(store, None)

    mine, baseline = await timed(now_reads), await timed(whole_table)
    scraped = await timed(metrics_scrape)
    print(
        f"{label}: /status outbox figures {mine:.2f} ms, a /metrics scrape {scraped:.2f} ms; the "
        f"whole-table count {baseline:.1f} ms (ratios {mine / baseline:.4f}, "
        f"{scraped / baseline:.4f})"
    )


async def writer(store: Store, stop: asyncio.Event, waits: list[float]) -> None:
    """One outbox row every 10 ms; each write's time from asking to commit."""
    young = row(timedelta(0), "pending")
    while not stop.is_set():
        began = time.perf_counter()
        async with store.write() as conn:
            await conn.execute(insert(outbox).values(**young))
        waits.append((time.perf_counter() - began) * 1000)
        await asyncio.sleep(WRITE_EVERY)


async def prune_beside_writer(store: Store) -> tuple:
    waits: list[float] = []
    stop = asyncio.Event()
    writing = asyncio.create_task(writer(store, stop, waits))
    began = time.perf_counter()
    pruned = await Retention(store, Keep(30, 365), budget=float("inf")).prune()
    took = time.perf_counter() - began
    stop.set()
    await writing
    return pruned, took, waits


async def writer_alone(store: Store, seconds: float) -> list[float]:
    waits: list[float] = []
    stop = asyncio.Event()
    writing = asyncio.create_task(writer(store, stop, waits))
    await asyncio.sleep(seconds)
    stop.set()
    await writing
    return waits


def describe(label: str, waits: list[float]) -> str:
    return (
        f"{label}: {len(waits)} writes, p50 {percentile(waits, 0.5):.2f} ms, "
        f"p99 {percentile(waits, 0.99):.2f} ms, worst {max(waits):.2f} ms"
    )


async def main(rows: int, database: str) -> None:
    async with database_url(database) as url:
        store = Store(url)
        await migrate.upgrade(store)
        await fill(store, rows)
        await status_figures(store, "before")
        # The writer's baseline on each side of the prune, on the same database.
        alone = await writer_alone(store, 5.0)
        pruned, took, beside = await prune_beside_writer(store)
        after = await writer_alone(store, 5.0)
        await status_figures(store, "after")
        left = await Outbox(store).counts()
        await store.close()
    gone = pruned.rows["outbox"]
    print(
        f"pruned {gone:,} rows in {took:.1f} s ({gone / took:,.0f}/s), {pruned.batches} batches;"
        f" the write lock held {pruned.median_lock_ms:.1f} ms per batch (median), at most "
        f"{pruned.longest_lock_ms:.1f} ms; left unsent: {left}"
    )
    print(describe("writer, no prune (before)", alone))
    print(describe("writer, beside the prune", beside))
    print(describe("writer, no prune (after)", after))
    base = percentile(alone + after, 0.99)
    ratio = percentile(beside, 0.99) / base
    print(f"ratio of the writer's p99 beside the prune to without it: {ratio:.2f}")


@contextlib.asynccontextmanager
async def database_url(kind: str):
    if kind == "sqlite":
        with tempfile.TemporaryDirectory() as directory:
            yield f"sqlite+aiosqlite:///{directory}/bench.sqlite3"
        return
    import asyncpg

    name = f"aegis_bench_{int(time.time())}"
    admin = await asyncpg.connect("postgresql://postgres@127.0.0.1:5432/postgres")
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}"
    finally:
        await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        await admin.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="old delivered rows")
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="sqlite")
    args = parser.parse_args()
    asyncio.run(main(args.rows, args.database))
