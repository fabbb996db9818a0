"""The assigned-task sweep's choice over a full store, against /next's list query.

    python bench/delegation.py [--assigned 1000 10000] [--runs 200] [--database sqlite postgres]

For each size N, a fresh database holds N open assigned tasks (80% @next, 10% @someday, 10%
@waiting with a parked run) among N unassigned open tasks and N/2 closed ones, ids shuffled
together, as a store grown over months. The oldest 50 assigned tasks have a run under way (the
sweep must look past them), one in ten of the rest had a run within the cooldown, and one agent
of three is expensive with one run of it going. Then, interleaved, ``runs`` times each:

- ``Delegation.pick()``: what ``sweep_assigned`` does before it sends its children (the count
  of expensive runs under way, then the eligibility query, oldest first, up to the quota);
- the baseline, ``Tasks.in_state(State.NEXT, size=20)``: the /next list over the same store.

Both as loaded and after ANALYZE (Postgres: VACUUM ANALYZE), with p50, p99 and the ratios, and
the eligibility query's plan. Postgres is skipped, saying so, when none is reachable at
AEGIS_TEST_POSTGRES_DSN. Numbers are only comparable within one run; the ratios are the result.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import asyncpg
from capture import POSTGRES_DSN, fresh_database
from fullstack import percentile
from sqlalchemy import insert, text

from bot.agents.agent_run import RunState
from bot.agents.delegation import Delegation, Limits, oldest_eligible
from bot.chat.callbacks import CallbackSigner
from bot.config.settings import Settings
from bot.core import Platform
from bot.store import migrate
from bot.store.database import Store
from bot.store.tables import agent_runs, tasks
from bot.tasks.task import State
from bot.tasks.tasks import Tasks
from bot.timeutil import now

AGENTS = ("clerk", "reader", "thinker")  # thinker is expensive
CONFIG = """\
agents:
  clerk: {harness: script, steps: [{say: hi}], tasks: [{do: "File {title}"}]}
  reader: {harness: script, steps: [{say: hi}], tasks: [{do: "Read {title}"}]}
  thinker:
    harness: script
    expensive: true
    steps: [{say: hi}]
    tasks: [{do: "Think about {title}"}]
"""
BUSY_HEAD = 50  # the oldest assigned tasks with a run under way
WARM_UP = 20


def seed_rows(assigned: int, seed: int = 1) -> tuple[list[dict], list[dict]]:
    """Task rows (ids given, shuffled) and their runs."""
    rng = random.Random(seed)
    start = now() - timedelta(days=365)
    kinds = ["assigned"] * assigned + ["unassigned"] * assigned + ["closed"] * (assigned // 2)
    rng.shuffle(kinds)
    task_rows, run_rows, seen_assigned = [], [], 0
    for index, kind in enumerate(kinds):
        task_id, created = index + 1, start + timedelta(minutes=index)
        state, closed_at, assignee = State.NEXT, None, None
        if kind == "closed":
            closed_at = created + timedelta(days=2)
        if kind == "assigned":
            assignee = AGENTS[seen_assigned % len(AGENTS)]
            state = rng.choices((State.NEXT, State.SOMEDAY, State.WAITING), (8, 1, 1))[0]
            run = _run_for(rng, task_id, assignee, state, seen_assigned, created)
            if run is not None:
                run_rows.append(run)
            seen_assigned += 1
        title = f"task {task_id}"
        task_rows.append(
            {
                "id": task_id,
                "title": title,
                "body": title,
                "search_text": title,
                "state": state,
                "labels": [],
                "assignee": assignee,
                "attachments": [],
                "origin_kind": "user",
                "chat_id": 1,
                "created_at": created,
                "updated_at": created,
                "closed_at": closed_at,
                "closed_as": "done" if closed_at else None,
            }
        )
    return task_rows, run_rows


def _run_for(rng, task_id: int, agent: str, state: State, nth: int, created) -> dict | None:
    if state is State.WAITING:
        status, at = RunState.PARKED, created
    elif nth < BUSY_HEAD:
        # One expensive run going: the cap (2) leaves room for one more.
        if agent == "thinker" and nth > 2:
            return None
        status, at = RunState.RUNNING, now() - timedelta(minutes=1)
    elif rng.random() < 0.1:
        status, at = RunState.FAILED, now() - timedelta(minutes=10)  # within the cooldown
    else:
        return None
    return {
        "agent": agent,
        "request": "r",
        "origin": "task",
        "task_id": task_id,
        "chat_id": 1,
        "status": status,
        "step": status.value,
        "state": {},
        "effects": {},
        "deadline_seconds": 600,
        "attempts": 1,
        "cancel_requested": False,
        "created_at": at,
    }


async def seed(store: Store, assigned: int) -> None:
    await migrate.upgrade(store)
    task_rows, run_rows = seed_rows(assigned)
    for rows, table in ((task_rows, tasks), (run_rows, agent_runs)):
        for first in range(0, len(rows), 5000):
            async with store.write() as conn:
                await conn.execute(insert(table), rows[first : first + 5000])
    if not store.is_sqlite:  # ids were given: move the sequence past them
        async with store.write() as conn:
            await conn.execute(text("SELECT setval('tasks_id_seq', (SELECT max(id) FROM tasks))"))


def platform_for(store: Store, data_dir: Path) -> Platform:
    config = data_dir / "aegis.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    settings = Settings(
        data_dir=data_dir,
        config_file=config,
        database_url=str(store.url),
        _env_file=None,
    )

    async def enqueue(actor_name: str, *args, **kwargs) -> None:
        raise AssertionError("the bench enqueues nothing")

    return Platform.build(settings, store, CallbackSigner(b"k" * 32), enqueue)


async def time_both(delegation: Delegation, store: Store, runs: int) -> dict[str, list[float]]:
    listing = Tasks(store)
    timings: dict[str, list[float]] = {"pick": [], "next": []}
    picked = None
    for i in range(runs + WARM_UP):
        for name, call in (
            ("pick", delegation.pick),
            ("next", lambda: listing.in_state(State.NEXT, page=0, size=20)),
        ):
            started = time.perf_counter()
            result = await call()
            if i >= WARM_UP:
                timings[name].append((time.perf_counter() - started) * 1000)
            if name == "pick":
                picked = result
    timings["picked"] = picked  # type: ignore[assignment]
    return timings


async def settle(store: Store) -> None:
    if store.is_sqlite:
        async with store.write() as conn:
            await conn.execute(text("ANALYZE"))
        return
    async with store.write_engine.connect() as conn:
        conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(text("VACUUM ANALYZE tasks"))
        await conn.execute(text("VACUUM ANALYZE agent_runs"))


async def query_plan(store: Store, limits: Limits) -> list[str]:
    """How the database runs the sweep's statement (its values written in as literals)."""
    query = oldest_eligible(now(), limits, [AGENTS[-1]])
    async with store.read() as conn:
        sql = query.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True})
        explain = "EXPLAIN QUERY PLAN" if store.is_sqlite else "EXPLAIN ANALYZE"
        rows = (await conn.exec_driver_sql(f"{explain} {sql}")).all()
    return [f"    {row[-1]}" for row in rows]


async def bench_one(kind: str, assigned: int, runs: int) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        data_dir = Path(folder)
        async with fresh_database(kind, data_dir) as url:
            store = Store(url)
            try:
                began = time.perf_counter()
                await seed(store, assigned)
                figures: dict = {"seeded in": time.perf_counter() - began}
                limits = Limits()
                delegation = Delegation(platform_for(store, data_dir), limits)
                for when in ("as loaded", "settled"):
                    if when == "settled":
                        await settle(store)
                    figures[when] = await time_both(delegation, store, runs)
                    figures[f"plan {when}"] = await query_plan(store, limits)
            finally:
                await store.close()
    return figures


def report(kind: str, assigned: int, runs: int, figures: dict) -> None:
    print(f"\n{kind}, {assigned:,} assigned tasks (seeded in {figures['seeded in']:.1f} s)")
    print(f"{'':48}{'p50 ms':>8}{'p99 ms':>8}{'× p50':>7}{'× p99':>7}")
    for when in ("as loaded", "settled"):
        timings = figures[when]
        b50, b99 = (percentile(timings["next"], q) for q in (0.5, 0.99))
        for label, name in ((f"Delegation.pick(), {when}", "pick"), ("  baseline: /next", "next")):
            p50, p99 = (percentile(timings[name], q) for q in (0.5, 0.99))
            print(f"{label:48}{p50:8.2f}{p99:8.2f}{p50 / b50:7.2f}{p99 / b99:7.2f}")
    picked = figures["settled"]["picked"]
    print(f"picked: tasks {picked.task_ids}, {picked.over_cap} left for the expensive cap")
    print(f"({runs} runs each, interleaved, after {WARM_UP} to warm up)")
    for when in ("as loaded", "settled"):
        print(f"eligibility query plan, {when}:\n" + "\n".join(figures[f"plan {when}"]))


async def postgres_reachable() -> bool:
    try:
        connection = await asyncpg.connect(POSTGRES_DSN, timeout=2)
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        print(f"\npostgres skipped: none reachable at the DSN given ({type(exc).__name__})")
        return False
    await connection.close()
    return True


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--assigned", type=int, nargs="+", default=[1000, 10_000])
    parser.add_argument("--runs", type=int, default=200, help="timed calls of each (200)")
    parser.add_argument(
        "--database", nargs="+", choices=("sqlite", "postgres"), default=["sqlite", "postgres"]
    )
    return parser.parse_args()


async def main() -> None:
    args = parse_args()
    print(f"python {sys.version.split()[0]}; quota {Limits().per_tick} per tick")
    for kind in args.database:
        if kind == "postgres" and not await postgres_reachable():
            continue
        for assigned in args.assigned:
            report(kind, assigned, args.runs, await bench_one(kind, assigned, args.runs))


if __name__ == "__main__":
    asyncio.run(main())
