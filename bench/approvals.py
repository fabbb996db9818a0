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
import secrets
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import aiosqlite
import aiosqlite.core
import dramatiq
import redis
from sqlalchemy import insert, select

from bot import demo, migrate
from bot.actions import Continuation, Status
from bot.approvals import Approvals, _live
from bot.cards import CALLBACK_KIND, SETTLED
from bot.store import Store
from bot.tables import grants
from bot.timeutil import now
from emulator import DEFAULT_USER
from policies.canonical import approval_hash
from policies.decision import Gate, decide
from policies.tools import AgentSpec, Catalog, Effect, ToolSpec, object_schema

ROOT = Path(__file__).resolve().parent.parent
DECISIONS_TARGET = 20_000  # decisions per second, decide + lookup, on one core
TAP_P50_TARGET_MS = 50.0
TAP_RATIO_TARGET = 2.0
CONTINUATION_ACTOR = "bench_continuation"
NOOP_ACTOR = "bench_noop"
DISTINCT_CALLS = 2_000
OWNER_CHAT = DEFAULT_USER["id"]  # the emulator's user, an owner in emulator mode


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def heading(text: str) -> None:
    print(f"\n{text}\n{'=' * len(text)}")


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
        query = select(grants.c.id).where(*_live(args_hash, now())).limit(1)
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


# Part 2: a tap to its continuation -----------------------------------------------------------


class Starts:
    """When a worker thread took each bench message, and when the actor's first line ran;
    the latter handed from the worker's loop to the bench's."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.waiting: dict[str, asyncio.Future] = {}
        self.taken: dict[str, float] = {}

    def expect(self, token: str) -> asyncio.Future:
        future = self.loop.create_future()
        self.waiting[token] = future
        return future

    def started(self, token: str, moment: float) -> None:
        future = self.waiting.pop(token, None)
        if future is not None:
            self.loop.call_soon_threadsafe(_settle, future, moment)


def _settle(future: asyncio.Future, moment: float) -> None:
    if not future.done():
        future.set_result(moment)


class TakenStamp(dramatiq.Middleware):
    """Notes when a worker thread takes a bench message: the end of the queue's share."""

    def __init__(self, starts: Starts) -> None:
        self.starts = starts

    def before_process_message(self, broker, message) -> None:
        if message.actor_name in (CONTINUATION_ACTOR, NOOP_ACTOR):
            self.starts.taken[message.kwargs["token"]] = time.perf_counter()


def declare_actors(broker, starts: Starts) -> dramatiq.Actor:
    """The continuation and the no-op, both async like aegis's own continuations, on the
    ``default`` queue like them; returns the no-op actor."""

    async def continuation(token: str, interaction_id: int | None = None) -> dict:
        starts.started(token, time.perf_counter())
        return {}

    async def noop(token: str) -> dict:
        starts.started(token, time.perf_counter())
        return {}

    broker.add_middleware(TakenStamp(starts))
    options = {"queue_name": "default", "max_retries": 0, "broker": broker}
    dramatiq.actor(continuation, actor_name=CONTINUATION_ACTOR, **options)
    return dramatiq.actor(noop, actor_name=NOOP_ACTOR, **options)


# The way of a tap, in the order it is taken; each stage ends at its stamp.
STAGES = (
    ("polled", "emulator, getUpdates returning the tap"),
    ("tapped", "update recorded, PTB, gate, handler"),
    ("committed", "the tap's transaction (grant, audit, edit)"),
    ("enqueued", "announce, up to the continuation's enqueue"),
    ("taken", "enqueue -> a worker thread takes it"),
    ("started", "-> the actor's first line (worker loop)"),
)
BARE_STAGES = (
    ("taken", "send -> a worker thread takes it"),
    ("started", "-> the actor's first line (worker loop)"),
)


@dataclass
class Samples:
    tap: list[float] = field(default_factory=list)  # ms, tap -> continuation's first line
    stages: dict[str, list[float]] = field(default_factory=dict)  # ms per stage of the tap
    bare: list[float] = field(default_factory=list)  # ms, actor.send -> no-op's first line
    bare_stages: dict[str, list[float]] = field(default_factory=dict)
    trips: dict[str, list[int]] = field(default_factory=dict)  # round trips per stage of a tap

    def add(self, total: float, marks: dict[str, float], trips: dict[str, int], bare: bool):
        (self.bare if bare else self.tap).append(total * 1000)
        if not bare:
            for mark, _ in STAGES:
                self.trips.setdefault(mark, []).append(trips.get(mark, 0))
        stages = self.bare_stages if bare else self.stages
        previous = marks["start"]
        for mark, _ in BARE_STAGES if bare else STAGES:
            at = marks.get(mark, previous)
            stages.setdefault(mark, []).append((at - previous) * 1000)
            previous = at


class TapBench:
    """One running stack, its emulator, and the two kinds of sample."""

    def __init__(self, stack, client, noop, starts: Starts, args) -> None:
        self.stack, self.client, self.noop, self.starts = stack, client, noop, starts
        self.args = args
        self.platform = stack.services.platform
        self.signer = stack.services.signer
        self.marks: dict[str, float] | None = None  # the stages of the tap in flight
        self.trips: dict[str, int] = {}  # its round trips to aiosqlite's thread, per stage
        self.last_message = 0
        self.count = 0
        self.run = secrets.token_hex(3)
        self._stamp_stages()

    def _stamp_stages(self) -> None:
        """Wrap, on these instances only, the steps a tap takes in the web process, to note
        when each is reached (the first time, while a measured tap is in flight)."""

        def stamp(owner, name: str, mark: str, when=lambda *a, **k: True) -> None:
            original = getattr(owner, name)

            async def stamped(*args, **kwargs):
                if self.marks is not None and when(*args, **kwargs):
                    self.marks.setdefault(mark, time.perf_counter())
                return await original(*args, **kwargs)

            setattr(owner, name, stamped)

        interactions = self.platform.interactions
        stamp(self.stack.intake, "_take", "polled", lambda batch, *_: bool(batch))
        stamp(interactions, "tap", "tapped")
        stamp(interactions, "announce", "committed")
        stamp(
            interactions, "enqueue", "enqueued", lambda name, *_, **__: name == CONTINUATION_ACTOR
        )

    @contextlib.contextmanager
    def counting_round_trips(self) -> Iterator[None]:
        """Count the web loop's round trips to aiosqlite's threads, per stage of the tap."""
        original = aiosqlite.core.Connection._execute
        web_thread = threading.current_thread()
        web_stages = [mark for mark, _ in STAGES[:4]]

        async def counted(connection, function, *args, **kwargs):
            marks = self.marks
            if marks is not None and threading.current_thread() is web_thread:
                stage = next((mark for mark in web_stages if mark not in marks), None)
                if stage is not None:
                    self.trips[stage] = self.trips.get(stage, 0) + 1
            return await original(connection, function, *args, **kwargs)

        aiosqlite.core.Connection._execute = counted
        try:
            yield
        finally:
            aiosqlite.core.Connection._execute = original

    async def open_chat(self) -> None:
        """The owner writes first, as on Telegram: the chat exists from then on."""
        sent = await self.client.send_message("/ping")
        replies = await self.client.wait_for_bot_messages(
            OWNER_CHAT, 1, after=sent["message"]["message_id"], timeout=30
        )
        self.last_message = max(m["message_id"] for m in replies)

    async def tap_sample(self) -> tuple[float, dict[str, float], dict[str, int]]:
        """Seconds from the tap to the continuation's first line, the stages' stamps, and the
        round trips to aiosqlite's thread in each."""
        i = self.count = self.count + 1  # a new call each time: no grant or open card reused
        token = f"tap-{self.run}-{i}"
        outcome = await self.platform.actions.perform(
            demo.AGENT,
            "demo.write_file",
            {"name": f"bench-{self.run}-{i}.txt", "text": "from bench/approvals.py"},
            chat_id=OWNER_CHAT,
            continuation=Continuation(CONTINUATION_ACTOR, {"token": token}),
        )
        if outcome.status is not Status.GATED:
            raise RuntimeError(f"expected a gated call, got {outcome}")
        approve = self.signer.sign(CALLBACK_KIND, str(outcome.interaction_id), "approve")
        card = await self._card_with(approve)
        started = self.starts.expect(token)
        await asyncio.sleep(self.args.idle)
        self.marks, self.trips = {}, {}
        tapped_at = time.perf_counter()
        tapped = await self.client.tap(OWNER_CHAT, card["message_id"], approve)
        began = await asyncio.wait_for(started, timeout=30)
        marks, self.marks = self.marks, None
        marks.update(start=tapped_at, taken=self.starts.taken.pop(token), started=began)
        await self._settled(card["message_id"], tapped["callback_query_id"])
        return began - tapped_at, marks, dict(self.trips)

    async def bare_sample(self) -> tuple[float, dict[str, float], dict[str, int]]:
        i = self.count = self.count + 1
        token = f"noop-{self.run}-{i}"
        started = self.starts.expect(token)
        await asyncio.sleep(self.args.idle)
        sent_at = time.perf_counter()
        self.noop.send(token=token)
        began = await asyncio.wait_for(started, timeout=30)
        marks = {"start": sent_at, "taken": self.starts.taken.pop(token), "started": began}
        return began - sent_at, marks, {}

    async def _card_with(self, approve: str) -> dict:
        """The card message whose Approve button carries ``approve``, once it is delivered."""
        deadline = time.perf_counter() + 30
        while time.perf_counter() < deadline:
            messages = await self.client.wait_for_bot_messages(
                OWNER_CHAT, 1, after=self.last_message, timeout=30
            )
            for message in messages:
                self.last_message = max(self.last_message, message["message_id"])
                rows = (message.get("reply_markup") or {}).get("inline_keyboard", [])
                if any(b.get("callback_data") == approve for row in rows for b in row):
                    return message
        raise TimeoutError("the card never reached the emulator")

    async def _settled(self, message_id: int, callback_query_id: str) -> None:
        """Wait out the tap's other effects (its answer, the card's edit) before the next
        sample, so they do not land inside it."""
        deadline = time.perf_counter() + 30
        answered = edited = False
        while not (answered and edited):
            if time.perf_counter() > deadline:
                raise TimeoutError("the tap was never answered, or the card never edited")
            answered = answered or await self.client.callback_answer(callback_query_id) is not None
            if not edited:
                messages = await self.client.messages(OWNER_CHAT, message_id - 1)
                card = next(m for m in messages if m["message_id"] == message_id)
                edited = (card.get("text") or "").startswith(SETTLED["approved"])
            await asyncio.sleep(0.005)

    async def measure(self, count: int, samples: Samples | None) -> None:
        order = random.Random(count)
        for i in range(count):
            kinds = ["tap", "bare"]
            order.shuffle(kinds)  # neither kind always runs right after the other
            for kind in kinds:
                sample = self.tap_sample if kind == "tap" else self.bare_sample
                total, marks, trips = await sample()
                if samples is not None:
                    samples.add(total, marks, trips, bare=kind == "bare")
            if samples is not None and (i + 1) % 50 == 0:
                print(f"  {i + 1}/{count} pairs done", flush=True)


def start_worker(broker, threads: int, timeout_ms: int) -> dramatiq.Worker:
    """The worker as ``aegis worker`` starts it (aegis/processes.py), in this process."""
    worker = dramatiq.Worker(broker, worker_threads=threads, worker_timeout=timeout_ms)
    worker.start()
    return worker


async def bench_tap(args) -> None:
    sys.path.insert(0, str(ROOT))  # tests.helpers, when run as ``python bench/approvals.py``
    from emulator.client import EmulatorClient
    from handlers.botapi import EMULATOR_PREFIX, emulator_key
    from tests.helpers.stack import make_settings, running_stack

    heading("2. a tap on Approve to its continuation starting in the worker")
    try:
        redis.Redis.from_url(args.redis_url, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        raise SystemExit(f"no Redis at {args.redis_url} ({type(exc).__name__}); start one") from exc
    namespace = f"aegis-bench-{secrets.token_hex(4)}"
    print(
        f"web app + emulator + PTB polling + Dramatiq worker ({args.worker_threads} threads, "
        f"worker_timeout {args.worker_timeout} ms) in this process;\nRedis {args.redis_url} "
        f"under {namespace!r}; SQLite in a temp dir. {args.samples} taps and {args.samples} "
        f"bare sends, interleaved,\neach after {args.idle * 1000:.0f} ms with no job, as a tap "
        f"comes to an idle worker; {args.warmup} pairs of warm-up first."
    )
    with tempfile.TemporaryDirectory(prefix="aegis-bench-") as directory:
        data_dir = Path(directory) / "data"
        data_dir.mkdir()
        settings = make_settings(
            data_dir, f"sqlite+aiosqlite:///{data_dir / 'aegis.sqlite3'}", args.redis_url
        )
        try:
            async with running_stack(settings, namespace=namespace, worker=False) as stack:
                starts = Starts()
                noop = declare_actors(stack.broker, starts)
                url = settings.web_url + EMULATOR_PREFIX
                async with aiohttp.ClientSession() as session:
                    client = EmulatorClient(url, emulator_key(settings), session=session)
                    bench = TapBench(stack, client, noop, starts, args)
                    worker = start_worker(stack.broker, args.worker_threads, args.worker_timeout)
                    try:
                        samples = Samples()
                        await bench.open_chat()
                        with bench.counting_round_trips():
                            await bench.measure(args.warmup, None)
                            await bench.measure(args.samples, samples)
                    finally:
                        # Off the loop: a job still running may need this loop to finish.
                        await asyncio.to_thread(worker.stop)
        finally:
            forget_namespace(args.redis_url, namespace)
    report_tap(samples, args.worker_timeout)


def forget_namespace(redis_url: str, namespace: str) -> None:
    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(f"{namespace}:*", count=1000))
    if keys:
        client.delete(*keys)


def report_tap(samples: Samples, timeout_ms: int) -> None:
    web = [mark for mark, _ in STAGES[:4]]
    rows = [("tap -> continuation starts", samples.tap, "")]
    for mark, label in STAGES:
        trips = f"{statistics.median(samples.trips[mark]):.0f}" if mark in web else ""
        rows.append((f"  {label}", samples.stages[mark], trips))
    rows += [("bare send -> no-op starts (the baseline)", samples.bare, "")]
    rows += [(f"  {label}", samples.bare_stages[mark], "") for mark, label in BARE_STAGES]
    print(f"\n{'ms':50}{'p50':>8}{'p90':>8}{'p99':>8}{'max':>8}{'trips':>7}")
    for label, values, trips in rows:
        cells = [percentile(values, q) for q in (0.5, 0.9, 0.99)] + [max(values)]
        print(f"{label:50}" + "".join(f"{v:8.1f}" for v in cells) + f"{trips:>7}")
    print(
        "(a stage's percentiles are its own: they need not add up to the total's; trips: the"
        " web loop's round trips\nto aiosqlite's threads in the stage, median)"
    )
    p50, p99 = percentile(samples.tap, 0.5), percentile(samples.tap, 0.99)
    bare50, bare99 = percentile(samples.bare, 0.5), percentile(samples.bare, 0.99)
    verdict = lambda ok: "met" if ok else "MISSED"  # noqa: E731
    print(
        f"\ntap p50 {p50:.1f} ms (target < {TAP_P50_TARGET_MS:.0f} ms: "
        f"{verdict(p50 < TAP_P50_TARGET_MS)})"
        f"\nratio to the baseline: p50 {p50 / bare50:.2f}, p99 {p99 / bare99:.2f} "
        f"(target < {TAP_RATIO_TARGET:.0f}: {verdict(p50 / bare50 < TAP_RATIO_TARGET)} at p50, "
        f"{verdict(p99 / bare99 < TAP_RATIO_TARGET)} at p99)"
    )
    print(
        f"\nAn idle Dramatiq consumer polls Redis, sleeping {timeout_ms // 2}-{timeout_ms} ms"
        f" between polls (worker_timeout {timeout_ms} ms,\njittered backoff), and a message waits"
        f" for the sleep under way to end: about {0.39 * timeout_ms:.0f} ms on average, up to"
        f" {timeout_ms} ms."
    )


# Entry point ---------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    from aegis.processes import WORKER_TIMEOUT_MS
    from bot.settings import Settings

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
        help=f"an idle consumer's longest sleep between polls of Redis ({WORKER_TIMEOUT_MS},"
        " as aegis/processes.py)",
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
