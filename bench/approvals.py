"""Approval benchmarks: the gate's decision rate, and a tap's way to its continuation.

    python bench/approvals.py [--part both|decisions|tap] [--calls 10000] [--samples 200]

1. Decisions, pinned to one core. ``decide(catalog, agent, tool, args)`` over a mix of reads,
   writes and irreversible calls with small argument dicts, each Gate followed by
   ``Approvals.has_live_grant(approval_hash(...))`` against a migrated SQLite store in a temp dir
   that holds a realistic number of grants (some live, some used, some expired). Decisions per
   second for decide alone, for decide + lookup one caller at a time, and for decide + lookup
   from many concurrent callers (``asyncio.gather``), each against the baseline measured in the
   same run: ``approval_hash`` alone. Target: decide + lookup >= 20,000 decisions per second.
   Beside it, the same decisions with the lookup through the async SQLAlchemy read path (what
   ``has_live_grant`` did before it used ``Store.read_now`` on SQLite).

2. Tap to continuation, through the real Telegram path in the emulator. The whole stack runs in
   this process as in tests/helpers/stack.py (the web app with the emulator and PTB polling it,
   a Dramatiq worker on the Redis at --redis-url under a namespace of its own, SQLite in a temp
   dir). Each sample asks ``Actions.perform`` for a gated call whose continuation is a bench-only
   actor, waits until its card is in the emulator's chat, and taps Approve with
   ``EmulatorClient.tap``: latency = the actor's first line - the moment just before the tap.
   Baseline, interleaved with it: the same worker, a no-op actor, latency = its first line - the
   moment just before ``actor.send``. Targets: p50 under 50 ms, ratio to the baseline under 2.
   The tap's way is stamped stage by stage by wrapping, on the running instances only, the
   intake, ``Interactions.tap``, ``announce`` and ``enqueue``, and by a bench-only middleware.

Numbers are only comparable within one run; the ratios are the result.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import logging
import os
import pstats
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import insert, select
from tap_latency import bench_tap, heading  # the tap part, and its headings

from bot.actions.grants import Approvals
from bot.agents import demo
from bot.store import migrate
from bot.store.database import Store
from bot.store.fast_paths import live_grant_where
from bot.store.tables import grants
from bot.timeutil import now
from policies.canonical import approval_hash
from policies.decision import Gate, decide
from policies.tools import AgentSpec, Catalog, Effect, ToolSpec, object_schema

ROOT = Path(__file__).resolve().parent.parent
DECISIONS_TARGET = 20_000  # decisions per second, decide + lookup, on one core
DISTINCT_CALLS = 2_000


# Part 1: decisions per second ----------------------------------------------------------------

Call = tuple[str, str, dict[str, Any]]


def bench_catalog() -> Catalog:
    """The demo agent plus a few agents and tools of the kind an ``aegis.yaml`` declares."""
    text = {"type": "string", "maxLength": 200}
    tools = [
        *demo.TOOLS,
        ToolSpec("files.read", Effect.READ, object_schema({"path": text}, "path")),
        ToolSpec(
            "files.list",
            Effect.READ,
            object_schema({"dir": text, "limit": {"type": "integer", "minimum": 1}}, "dir"),
        ),
        ToolSpec(
            "notes.append",
            Effect.WRITE,
            object_schema({"note": {"type": "string", "maxLength": 2000}, "tag": text}, "note"),
        ),
        ToolSpec(
            "mail.send",
            Effect.WRITE,
            object_schema(
                {
                    "to": {"type": "string", "pattern": "^[^@ ]+@[^@ ]+$"},
                    "subject": text,
                    "body": {"type": "string", "maxLength": 10_000},
                },
                "to",
                "subject",
                "body",
            ),
        ),
        ToolSpec(
            "deploy.site",
            Effect.IRREVERSIBLE,
            object_schema(
                {
                    "ref": {"type": "string", "pattern": "^[0-9a-f]{7,40}$"},
                    "env": {"enum": ["staging", "production"]},
                },
                "ref",
                "env",
            ),
        ),
        ToolSpec(
            "db.drop_table",
            Effect.IRREVERSIBLE,
            object_schema({"table": {"type": "string", "pattern": "^[a-z_]{1,40}$"}}, "table"),
        ),
    ]
    agents = [
        *demo.AGENTS,
        AgentSpec("ops", frozenset({"files.read", "files.list", "deploy.site", "demo.read_clock"})),
        AgentSpec("assistant", frozenset({"files.read", "notes.append", "mail.send"})),
        AgentSpec("janitor", frozenset({"files.read", "files.list", "db.drop_table"})),
    ]
    return Catalog(tools, agents)


def bench_calls(count: int, seed: int = 1) -> list[Call]:
    """``count`` calls: 40% reads, 40% writes, 20% irreversible, each with small arguments."""
    rng = random.Random(seed)

    def word() -> str:
        return "".join(rng.choice("abcdefghijklmnop") for _ in range(rng.randint(3, 9)))

    makers: list[tuple[float, Callable[[], Call]]] = [
        (0.10, lambda: ("demo", "demo.read_clock", {})),
        (0.20, lambda: ("ops", "files.read", {"path": f"notes/{word()}.md"})),
        (0.10, lambda: ("janitor", "files.list", {"dir": f"/srv/{word()}", "limit": 20})),
        (0.15, lambda: ("demo", "demo.write_file", {"name": f"{word()}.txt", "text": word()})),
        (0.15, lambda: ("assistant", "notes.append", {"note": f"buy {word()}", "tag": word()})),
        (
            0.10,
            lambda: (
                "assistant",
                "mail.send",
                {"to": f"{word()}@example.org", "subject": word(), "body": f"Hi {word()}."},
            ),
        ),
        (
            0.10,
            lambda: ("ops", "deploy.site", {"ref": f"{rng.getrandbits(32):08x}", "env": "staging"}),
        ),
        (0.05, lambda: ("demo", "demo.delete_file", {"name": f"{word()}.txt"})),
        (0.05, lambda: ("janitor", "db.drop_table", {"table": word()})),
    ]
    weights = [weight for weight, _ in makers]
    return [rng.choices(makers, weights)[0][1]() for _ in range(count)]


async def seed_grants(store: Store, catalog: Catalog, calls: list[Call], count: int) -> dict:
    """``count`` grants on the hashes of gated calls: 20% live, 50% used, 30% expired."""
    gated = [call for call in calls if isinstance(decide(catalog, *call), Gate)]
    moment = now()
    states = ("live",) * 2 + ("used",) * 5 + ("expired",) * 3
    rows, made = [], {"live": 0, "used": 0, "expired": 0}
    for i in range(count):
        agent, tool, args = gated[i % len(gated)]
        state = states[i % len(states)]
        made[state] += 1
        granted_at = moment - (timedelta(hours=1) if state == "expired" else timedelta(minutes=5))
        rows.append(
            {
                "interaction_id": i + 1,
                "agent": agent,
                "tool": tool,
                "args_hash": approval_hash(agent, tool, args),
                "step_up": isinstance(decide(catalog, agent, tool, args), Gate)
                and decide(catalog, agent, tool, args).step_up,
                "granted_by": 1000001,
                "granted_at": granted_at,
                "expires_at": granted_at + timedelta(minutes=15),
                "used_at": granted_at + timedelta(minutes=1) if state == "used" else None,
            }
        )
    async with store.write() as conn:
        await conn.execute(insert(grants), rows)
    return made


@contextlib.contextmanager
def pinned_to(cpu: int) -> Iterator[None]:
    """Every thread of this process, and so every thread they start, on one core; then back.
    (``os.sched_setaffinity(0, ...)`` alone pins only the calling thread on Linux.)"""
    if cpu < 0:
        yield
        return
    before = os.sched_getaffinity(0)

    def pin(cpus: set[int]) -> None:
        for tid in os.listdir("/proc/self/task"):
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(int(tid), cpus)

    pin({cpu})
    try:
        yield
    finally:
        pin(before)


def per_second(count: int, started: float) -> float:
    return count / (time.perf_counter() - started)


def time_hash_only(calls: list[Call]) -> float:
    started = time.perf_counter()
    for agent, tool, args in calls:
        approval_hash(agent, tool, args)
    return per_second(len(calls), started)


def time_decide_only(catalog: Catalog, calls: list[Call]) -> float:
    started = time.perf_counter()
    for agent, tool, args in calls:
        decide(catalog, agent, tool, args)
    return per_second(len(calls), started)


def time_schema_checks(catalog: Catalog, calls: list[Call]) -> float:
    """The part of decide() that is the JSON-schema check of the arguments."""
    started = time.perf_counter()
    for _agent, tool, args in calls:
        catalog.tool(tool).argument_error(args)
    return per_second(len(calls), started)


async def decide_and_look_up(catalog: Catalog, approvals, calls: list[Call]) -> int:
    """What the call path does before it acts: decide, and for a Gate, look for a grant."""
    found = 0
    for agent, tool, args in calls:
        if isinstance(decide(catalog, agent, tool, args), Gate):
            found += await approvals.has_live_grant(approval_hash(agent, tool, args))
    return found


async def time_sequential(catalog: Catalog, approvals, calls: list[Call]) -> tuple[float, int]:
    """Decisions per second one caller at a time, and how many lookups found a grant."""
    started = time.perf_counter()
    found = await decide_and_look_up(catalog, approvals, calls)
    return per_second(len(calls), started), found


async def time_concurrent(
    catalog: Catalog, approvals, calls: list[Call], callers: int
) -> tuple[float, int]:
    """The same from ``callers`` callers at once, each taking its share of the calls."""
    shares = [calls[i::callers] for i in range(callers)]
    started = time.perf_counter()
    found = await asyncio.gather(
        *(decide_and_look_up(catalog, approvals, share) for share in shares)
    )
    return per_second(len(calls), started), sum(found)


class AsyncLookupApprovals(Approvals):
    """The lookup as it was before Store.read_now: the SQLAlchemy condition through the async
    read path (BEGIN, the query, ROLLBACK, each a trip to aiosqlite's thread)."""

    async def has_live_grant(self, args_hash: str) -> bool:
        query = select(grants.c.id).where(*live_grant_where(args_hash, now())).limit(1)
        async with self.store.read() as conn:
            return (await conn.execute(query)).first() is not None


async def profile_sequential(catalog: Catalog, approvals, calls: list[Call], top: int) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        await decide_and_look_up(catalog, approvals, calls)
    finally:
        profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).strip_dirs().sort_stats("tottime").print_stats(top)
    return out.getvalue()


async def bench_decisions(args) -> None:
    where = f"pinned to CPU {args.cpu}" if args.cpu >= 0 else "NOT pinned (--cpu -1)"
    heading(f"1. decide() + grant lookup, {where}")
    if args.cpu >= 0:
        print(f"every thread of the process pinned with os.sched_setaffinity(tid, {{{args.cpu}}})")
    catalog = bench_catalog()
    distinct = bench_calls(DISTINCT_CALLS)
    calls = [distinct[i % len(distinct)] for i in range(args.calls)]
    decisions: dict[str, int] = {}
    for call in distinct:
        kind = type(decide(catalog, *call)).__name__
        decisions[kind] = decisions.get(kind, 0) + 1
    with tempfile.TemporaryDirectory(prefix="aegis-bench-") as directory:
        database = Path(directory) / "aegis.sqlite3"
        store = Store(f"sqlite+aiosqlite:///{database}")
        try:
            await migrate.upgrade(store)
            made = await seed_grants(store, catalog, distinct, args.grants)
            print(
                f"{len(distinct)} distinct calls ({len(catalog.agents)} agents, "
                f"{len(catalog.tools)} tools) cycled to {args.calls} per round: "
                + ", ".join(f"{n} {kind}" for kind, n in sorted(decisions.items()))
                + f"\nSQLite store in a temp dir with {args.grants} grants: "
                + ", ".join(f"{n} {state}" for state, n in made.items())
                + f"\nmedian of {args.rounds} rounds; concurrent = {args.callers} callers in"
                " asyncio.gather, each taking its share of the calls"
            )
            await run_decisions(args, store, catalog, calls)
        finally:
            await store.close()


async def run_decisions(args, store: Store, catalog: Catalog, calls) -> None:
    variants = {"today": Approvals(store), "async": AsyncLookupApprovals(store)}
    rate, found = await measure_decisions(args, catalog, calls, variants)
    report_decisions(args, rate)
    if len(set(found.values())) != 1:
        print(f"\nWARNING: the two lookups found different numbers of live grants: {found}")
    if args.profile:
        print(f"\ncProfile of decide + lookup, one caller, {len(calls)} calls, by own time")
        print(await profile_sequential(catalog, Approvals(store), calls, args.profile))


async def measure_decisions(args, catalog, calls, variants) -> tuple[dict, dict]:
    """Every figure, ``args.rounds`` times over, interleaved; their medians."""
    for approvals in variants.values():  # warm: pools, caches, compiled statements
        await decide_and_look_up(catalog, approvals, calls[:500])
    measured: dict[str, list[float]] = {}
    found: dict[str, int] = {}
    for _ in range(args.rounds):
        measured.setdefault("hash", []).append(time_hash_only(calls))
        measured.setdefault("decide", []).append(time_decide_only(catalog, calls))
        measured.setdefault("schema", []).append(time_schema_checks(catalog, calls))
        for name, approvals in variants.items():
            for how, value in (
                ("one", await time_sequential(catalog, approvals, calls)),
                ("many", await time_concurrent(catalog, approvals, calls, args.callers)),
            ):
                measured.setdefault(f"{name} {how}", []).append(value[0])
                found[f"{name} {how}"] = value[1]
    return {name: statistics.median(values) for name, values in measured.items()}, found


def report_decisions(args, rate: dict[str, float]) -> None:
    print(f"\n{'':46}{'decisions/s':>12}{'µs each':>9}{'× hash':>8}{'target':>8}")
    for label, key in (
        ("approval_hash alone (the baseline)", "hash"),
        ("decide alone", "decide"),
        ("decide + lookup, one caller", "today one"),
        (f"decide + lookup, {args.callers} concurrent callers", "today many"),
        ("  the same, lookup by async SQLAlchemy (before)", "async one"),
        (f"  the same, {args.callers} concurrent callers", "async many"),
    ):
        verdict = ""
        if key.startswith("today"):
            verdict = "met" if rate[key] >= DECISIONS_TARGET else "MISSED"
        print(
            f"{label:46}{rate[key]:12,.0f}{1e6 / rate[key]:9.1f}"
            f"{rate['hash'] / rate[key]:8.1f}{verdict:>8}"
        )
    print(
        "× hash: a decision's cost in approval_hashes (the baseline, same run). "
        f"Target: decide + lookup >= {DECISIONS_TARGET:,}/s."
    )


def parse_args() -> argparse.Namespace:
    from aegis.processes import WORKER_TIMEOUT_MS
    from bot.config.settings import Settings

    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Part 2 needs a Redis server at --redis-url; nothing else is needed.",
    )
    parser.add_argument("--part", choices=("both", "decisions", "tap"), default="both")
    one = parser.add_argument_group("1. decisions")
    one.add_argument("--calls", type=int, default=10_000, help="calls per round (10000)")
    one.add_argument("--rounds", type=int, default=3, help="rounds, the median shown (3)")
    one.add_argument("--callers", type=int, default=100, help="concurrent callers (100)")
    one.add_argument("--grants", type=int, default=1_000, help="grant rows in the store (1000)")
    one.add_argument("--cpu", type=int, default=0, help="the core to pin to; -1: do not pin (0)")
    one.add_argument("--profile", type=int, default=0, metavar="N", help="cProfile's top N")
    two = parser.add_argument_group("2. tap to continuation")
    two.add_argument("--samples", type=int, default=200, help="taps, and bare sends (200)")
    two.add_argument("--warmup", type=int, default=10, help="unmeasured pairs first (10)")
    two.add_argument(
        "--idle", type=float, default=0.4, help="seconds without a job before each (0.4)"
    )
    two.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    two.add_argument(
        "--worker-threads",
        type=int,
        default=Settings.model_fields["worker_threads"].default,
        help="worker threads (the setting's default)",
    )
    two.add_argument(
        "--worker-timeout",
        type=int,
        default=WORKER_TIMEOUT_MS,
        metavar="MS",
        help="the longest sleep between polls of Redis of a consumer holding messages "
        f"({WORKER_TIMEOUT_MS}, as aegis/processes.py; an idle one waits for a wake)",
    )
    return parser.parse_args()


async def main() -> None:
    args = parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.part in ("both", "decisions"):
        with pinned_to(args.cpu):
            await bench_decisions(args)
    if args.part in ("both", "tap"):
        await bench_tap(args)


if __name__ == "__main__":
    asyncio.run(main())
