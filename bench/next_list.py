"""Part 2 of bench/capture.py: /next over a full store (run it through capture.py).

A fresh database seeded with M tasks (30% open @next under a few context labels, the rest in
the other states or closed), then ``Tasks.in_state(State.NEXT, page=0, size=20)`` timed against
``Tasks.get(id)`` through the same store, and ``/next`` through ``aegis up`` and the emulator
timed against ``/help``. It runs aegis with capture.py's runner, so capture.py imports this
module inside ``main`` (a module-level import would be circular).
"""

from __future__ import annotations

import random
import time
from datetime import timedelta

from capture import running_aegis, with_store
from fullstack import PROBE_USER, percentile
from sqlalchemy import insert, text

from bot.store import migrate, search
from bot.store.database import Store
from bot.store.tables import tasks
from bot.tasks.task import State
from bot.tasks.tasks import Tasks
from bot.timeutil import now

QUERY_TARGET_MS = 20
SETTLE = {"sqlite": "ANALYZE", "postgres": "VACUUM ANALYZE tasks"}
CONTEXTS = ("home", "work", "errands", "calls", "computer")

# Part 2's spread of the seeded tasks: (weight, state, closed_as)
SPREAD = (
    (30, State.NEXT, None),
    (8, State.INBOX, None),
    (10, State.SOMEDAY, None),
    (7, State.WAITING, None),
    (30, State.NEXT, "done"),
    (10, State.SOMEDAY, "dropped"),
    (5, State.REFERENCE, "filed"),
)


# /next over many tasks ----------------------------------------------------------------


def seed_rows(count: int, seed: int = 1) -> list[dict]:
    rng = random.Random(seed)
    weights = [weight for weight, _, _ in SPREAD]
    start = now() - timedelta(days=365)
    rows = []
    for i in range(count):
        _, state, closed_as = rng.choices(SPREAD, weights)[0]
        created = start + timedelta(minutes=5 * i)
        labels = [] if rng.random() < 0.2 else rng.sample(CONTEXTS, rng.randint(1, 2))
        title = f"task {i}: {rng.choice(('call', 'buy', 'fix', 'read', 'write'))} something"
        rows.append(
            {
                "capture_key": f"msg:{PROBE_USER}:{i + 1_000_000}",
                "title": title,
                "body": title,
                "search_text": search.search_text(title),
                "state": state,
                "labels": labels if state is not State.INBOX else [],
                "attachments": [],
                "origin_kind": "self",
                "chat_id": PROBE_USER,
                "message_id": i + 1_000_000,
                "captured_by": PROBE_USER,
                "created_at": created,
                "updated_at": created,
                # inbox tasks asked about already: the clock's first triage sweep sends no cards
                "triage_interaction_id": 0 if state is State.INBOX else None,
                "closed_at": created + timedelta(days=3) if closed_as else None,
                "closed_as": closed_as,
            }
        )
    return rows


async def seed(store: Store, count: int) -> int:
    await migrate.upgrade(store)
    rows = seed_rows(count)
    for first in range(0, count, 5000):
        async with store.write() as conn:
            await conn.execute(insert(tasks), rows[first : first + 5000])
    return sum(1 for row in rows if row["state"] is State.NEXT and row["closed_at"] is None)


async def time_query(store: Store, runs: int) -> dict[str, list[float]]:
    """``in_state(@next)`` and the baseline ``get(id)``, interleaved; milliseconds."""
    tasks_ = Tasks(store)
    timings: dict[str, list[float]] = {"next": [], "get": []}
    for i in range(runs + 20):
        for name, call in (
            ("next", lambda: tasks_.in_state(State.NEXT, page=0, size=20)),
            ("get", lambda i=i: tasks_.get(1 + i * 97)),
        ):
            started = time.perf_counter()
            await call()
            if i >= 20:  # the first 20: warm-up
                timings[name].append((time.perf_counter() - started) * 1000)
    return timings


async def settle(store: Store) -> None:
    """What a table grown over months has had: statistics, and (Postgres) a vacuum, whose
    visibility map lets an index-only scan skip the heap. Autovacuum does it in time."""
    if store.is_sqlite:
        async with store.write() as conn:
            await conn.execute(text("ANALYZE"))
        return
    async with store.write_engine.connect() as conn:
        conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(text("VACUUM ANALYZE tasks"))


async def query_plan(store: Store) -> list[str]:
    """How the database runs the two statements of ``in_state``."""
    where = "state = '@next' AND closed_at IS NULL"
    statements = [
        f"SELECT count(*) FROM tasks WHERE {where}",
        f"SELECT * FROM tasks WHERE {where} ORDER BY id LIMIT 20",
    ]
    explain = "EXPLAIN QUERY PLAN" if store.is_sqlite else "EXPLAIN ANALYZE"
    lines = []
    async with store.read() as conn:
        for statement in statements:
            rows = (await conn.execute(text(f"{explain} {statement}"))).all()
            lines += [f"  {statement}"] + [f"    {row[-1]}" for row in rows]
    return lines


async def bench_next(args) -> dict:
    figures: dict = {}

    async def seeded(url: str) -> None:
        async def fill(store: Store) -> None:
            began = time.perf_counter()
            figures["open next"] = await seed(store, args.tasks)
            figures["seconds"] = time.perf_counter() - began
            for when in ("as loaded", "settled"):
                if when == "settled":
                    await settle(store)
                figures[when] = await time_query(store, args.query_runs)
                figures[f"plan {when}"] = await query_plan(store)

        await with_store(url, fill)

    async with running_aegis(args.database, seeded) as (emulator, _):
        for _ in range(5):  # warm up
            await emulator.round_trip("/next")
            await emulator.round_trip("/help")
        figures["command"] = {"next": [], "help": []}
        for _ in range(args.command_runs):
            for name in ("next", "help"):
                figures["command"][name].append(await emulator.round_trip(f"/{name}"))
    report_next(args, figures)
    return figures


def report_next(args, figures: dict) -> None:
    print(
        f"{args.tasks:,} tasks seeded in {figures['seconds']:.1f} s, "
        f"{figures['open next']:,} of them open @next"
    )
    print(f"\n{'':44}{'p50 ms':>8}{'p99 ms':>8}{'× p50':>7}{'× p99':>7}")
    rows = [
        row
        for when in ("as loaded", "settled")
        for row in (
            (f"Tasks.in_state(@next), {when}", figures[when], "next", "get"),
            ("  baseline: Tasks.get(id)", figures[when], "get", "get"),
        )
    ]
    rows += [
        (f"/next, sent to reply, {args.command_runs} runs", figures["command"], "next", "help"),
        ("  baseline: /help", figures["command"], "help", "help"),
    ]
    for label, timings, name, base in rows:
        p50, p99 = (percentile(timings[name], q) for q in (0.5, 0.99))
        b50, b99 = (percentile(timings[base], q) for q in (0.5, 0.99))
        print(f"{label:44}{p50:8.1f}{p99:8.1f}{p50 / b50:7.2f}{p99 / b99:7.2f}")
    print(f"({args.query_runs} runs each; settled: after {SETTLE[args.database]})")
    for when in ("as loaded", "settled"):
        p99 = percentile(figures[when]["next"], 0.99)
        verdict = "met" if p99 <= QUERY_TARGET_MS else "MISSED"
        print(f"query target, p99 at most {QUERY_TARGET_MS} ms, {when}: {verdict}")
    for when in ("as loaded", "settled"):
        print(f"\nquery plan, {when}:\n" + "\n".join(figures[f"plan {when}"]))


# The whole run ---------------------------------------------------------------------------------
