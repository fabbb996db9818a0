"""Run benchmarks: a no-op run against a bare Dramatiq job, and how late a hung run is stopped.

    python bench/runs.py [--samples 50] [--hung 20] [--hung-cli 8] [--database sqlite|postgres]

``aegis up`` runs against the emulator as in bench/fullstack.py (whose machinery this imports),
on a fresh database, with an aegis.yaml declaring the agents below. Then:

1. Dispatch overhead of a no-op run: ``/run noop x`` written to the bot, to the run's result
   (the reply to its progress message) seen in the emulator. ``noop`` is a script agent whose
   only step is a ``say``. Interleaved with it, in the same run:
   - the baseline: a bare Dramatiq actor that returns at once, on the same Redis (aegis's
     embedded one), in a worker process of its own with aegis's worker settings (threads and
     the idle consumer's poll timeout); timed from just before ``send`` to the actor's LPUSH
     seen by a BLPOP waiting in this process (the cheapest "it was processed" there is: no
     polling on our side, one Redis command on the actor's);
   - ``/ping``, the project's own command -> job -> reply.
   Each is timed after ``--idle`` seconds without work, as a command comes to an idle bot.
   Where a run's time goes is read from its row (created, claimed, finished).
2. Deadline accuracy: ``--hung`` runs of a script agent that sleeps 30 s past a 1 s deadline,
   ``--parallel`` at a time; for each, ``finished_at - deadline_at`` from its row (how late it
   was marked timed out) and the moment its "timed out" reply reached the emulator. Then the
   same for a coding-CLI agent (the fake ``claude`` of tests/fakes) that hangs: once as
   ``hang`` (it dies on SIGTERM) and once ``stubborn`` (it ignores SIGTERM and is killed by
   SIGKILL after the harness's grace).

Numbers are only comparable within one run; the ratios are the result.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import fullstack
from capture import fresh_database, with_store
from fullstack import PROBE_USER, heading, percentile
from run_deadlines import HUNG_SLEEP, bench_deadlines  # the second part
from sqlalchemy import select

from aegis.embedded_redis import EmbeddedRedis
from aegis.processes import WORKER_TIMEOUT_MS
from bot.config.settings import Settings
from bot.store.tables import agent_runs
from emulator.inject import inject_message

ROOT = Path(__file__).resolve().parent.parent
FAKE_CLAUDE = ROOT / "tests" / "fakes" / "claude"
WORKER_THREADS = Settings.model_fields["worker_threads"].default  # what `aegis up` starts with
BASELINE_NAMESPACE = "bench-baseline"
RESULT_OF_RUN = re.compile(r"^Run #(\d+) ")


def agents_yaml(workdir: Path) -> str:
    agents = {
        "noop": {"name": "No-op", "harness": "script", "steps": [{"say": "{request}"}]},
        "hung": {
            "name": "Hung script",
            "harness": "script",
            "deadline": 1,
            "steps": [{"sleep": HUNG_SLEEP}],
        },
        "hungcli": {
            "name": "Hung CLI",
            "harness": "claude-code",
            "command": str(FAKE_CLAUDE),
            "workdir": str(workdir),
            "deadline": 1,
        },
    }
    return json.dumps({"agents": agents}, indent=2)  # JSON is YAML


# The emulator, stamping the bot's messages --------------------------------------------------


@dataclass
class Seen:
    perf: float  # time.perf_counter() when the emulator stored it
    wall: float  # time.time(), to compare with the rows' timestamps (same machine clock)
    text: str
    reply_to_text: str | None


@dataclass
class Waiter:
    wanted: Callable[[Seen], bool]
    future: asyncio.Future
    count: int = 1
    found: list[Seen] = field(default_factory=list)


class Emulator(fullstack.Emulator):
    """fullstack's emulator, telling waiters when a bot message they want arrives."""

    def __init__(self, token: str) -> None:
        self.waiters: list[Waiter] = []
        super().__init__(token)

    def _wrap_add_message(self) -> None:
        super()._wrap_add_message()
        stamped = self.state.add_message

        def add_message(chat, sender, **fields):
            message = stamped(chat, sender, **fields)
            if message.from_bot:
                reply_to = message.reply_to
                self._seen(
                    Seen(
                        time.perf_counter(),
                        time.time(),
                        message.text or message.caption or "",
                        reply_to.text if reply_to is not None and reply_to.from_bot else None,
                    )
                )
            return message

        self.state.add_message = add_message

    def _seen(self, seen: Seen) -> None:
        for waiter in list(self.waiters):
            if waiter.wanted(seen):
                waiter.found.append(seen)
                if len(waiter.found) >= waiter.count and not waiter.future.done():
                    waiter.future.set_result(waiter.found)
                    self.waiters.remove(waiter)

    def expect(self, wanted: Callable[[Seen], bool], count: int = 1) -> asyncio.Future:
        waiter = Waiter(wanted, asyncio.get_running_loop().create_future(), count)
        self.waiters.append(waiter)
        return waiter.future

    def write(self, text: str) -> None:
        body = {"user": {"id": PROBE_USER, "first_name": "Owner"}, "text": text}
        inject_message(self.state, self.state.bot(self.token), body)


def run_result(seen: Seen) -> bool:
    """A run's last word: a reply to its progress message."""
    return seen.reply_to_text is not None and RESULT_OF_RUN.match(seen.reply_to_text) is not None


def pong(seen: Seen) -> bool:
    return seen.text.startswith("pong from worker")


# aegis and the baseline worker --------------------------------------------------------------


@contextlib.asynccontextmanager
async def running_aegis(args) -> AsyncIterator[tuple[Emulator, str, Path, Path]]:
    """``aegis up`` with this bench's aegis.yaml on a fresh database, answering."""
    token = f"{secrets.randbelow(10**9) + 10**9}:{secrets.token_urlsafe(26)}"
    with tempfile.TemporaryDirectory(prefix="aegis-bench-") as directory:
        data_dir = Path(directory) / ".aegis"
        data_dir.mkdir()
        workdir = Path(directory) / "work"
        workdir.mkdir()
        (Path(directory) / "aegis.yaml").write_text(agents_yaml(workdir), encoding="utf-8")
        async with fresh_database(args.database, data_dir) as database_url:
            emulator = Emulator(token)
            url = await emulator.start()
            process = fullstack.start_aegis(token, url, data_dir, [PROBE_USER], database_url)
            try:
                await fullstack.wait_until_answering(emulator, "aegis up")
                yield emulator, database_url, data_dir, workdir
            finally:
                fullstack.stop(process)
                await emulator.runner.cleanup()


def baseline_actor(redis_url: str):
    """The bare no-op actor, declared alike in the worker process and in this one."""
    import dramatiq
    import redis
    from dramatiq.brokers.redis import RedisBroker

    broker = RedisBroker(url=redis_url, namespace=BASELINE_NAMESPACE)
    client = redis.Redis.from_url(redis_url)

    def noop(key: str) -> None:
        client.lpush(key, b"1")  # the one thing it does: say it was processed

    actor = dramatiq.actor(noop, broker=broker, actor_name="noop", max_retries=0)
    return broker, actor


def serve_baseline(redis_url: str) -> None:
    """The baseline's worker process: a bare Dramatiq worker, as aegis's is configured."""
    import dramatiq

    broker, _ = baseline_actor(redis_url)
    worker = dramatiq.Worker(
        broker, worker_threads=WORKER_THREADS, worker_timeout=WORKER_TIMEOUT_MS
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    worker.start()
    print("ready", flush=True)
    stop.wait()
    worker.stop()


@contextlib.contextmanager
def baseline_worker(redis_url: str):
    process = subprocess.Popen(
        [sys.executable, __file__, "--serve-baseline", redis_url],
        env=fullstack.bench_environment(),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        if process.stdout.readline().strip() != "ready":
            raise RuntimeError("the baseline worker did not start")
        yield
    finally:
        fullstack.stop(process)


# 1. Dispatch -------------------------------------------------------------------------------


@dataclass
class Sample:
    ms: float
    injected: float  # wall clock
    seen: Seen


async def timed_command(emulator: Emulator, text: str, wanted) -> Sample:
    arrived = emulator.expect(wanted)
    wall, started = time.time(), time.perf_counter()
    emulator.write(text)
    [seen] = await asyncio.wait_for(arrived, timeout=30)
    return Sample((seen.perf - started) * 1000, wall, seen)


async def timed_bare(actor, blpop) -> float:
    key = f"{BASELINE_NAMESPACE}:done:{secrets.token_hex(6)}"
    started = time.perf_counter()
    await asyncio.to_thread(actor.send, key)  # as aegis enqueues: off the loop
    if await blpop(key, timeout=30) is None:
        raise RuntimeError("the baseline actor did not run within 30 s")
    return (time.perf_counter() - started) * 1000


async def bench_dispatch(args, emulator: Emulator, redis_url: str) -> dict:
    import redis.asyncio

    _, actor = baseline_actor(redis_url)
    client = redis.asyncio.Redis.from_url(redis_url)
    kinds = {
        "run": lambda: timed_command(emulator, "/run noop x", run_result),
        "ping": lambda: timed_command(emulator, "/ping", pong),
        "bare": lambda: timed_bare(actor, client.blpop),
    }
    samples: dict[str, list] = {kind: [] for kind in kinds}
    order = list(kinds)
    try:
        with baseline_worker(redis_url):
            for _ in range(args.warmup):
                for kind in order:
                    await kinds[kind]()
            for i in range(args.samples):
                for kind in order[i % 3 :] + order[: i % 3]:  # each goes first in turn
                    await asyncio.sleep(args.idle)
                    samples[kind].append(await kinds[kind]())
    finally:
        await client.aclose()
    return samples


async def run_stages(database_url: str, runs: list[Sample]) -> dict[str, list[float]]:
    """Where each timed no-op run's time went, from its row (ms)."""
    ids = {int(RESULT_OF_RUN.match(s.seen.reply_to_text).group(1)): s for s in runs}

    async def rows(store):
        async with store.read() as conn:
            query = select(agent_runs).where(agent_runs.c.id.in_(ids))
            return (await conn.execute(query)).all()

    stages: dict[str, list[float]] = {
        "command → run row (bot, gate, /run)": [],
        "run row → claimed by the worker (queue)": [],
        "claimed → finished (the run)": [],
        "finished → result seen (outbox, delivery)": [],
    }
    names = list(stages)
    for row in await with_store(database_url, rows):
        sample = ids[row.id]
        moments = [
            datetime.fromtimestamp(sample.injected, UTC),
            row.created_at,
            row.started_at,
            row.finished_at,
            datetime.fromtimestamp(sample.seen.wall, UTC),
        ]
        for name, (a, b) in zip(names, zip(moments, moments[1:], strict=False), strict=True):
            stages[name].append((b - a).total_seconds() * 1000)
    return stages


def print_dispatch(args, samples: dict, stages: dict) -> None:
    times = {
        "bare": samples["bare"],
        "ping": [s.ms for s in samples["ping"]],
        "run": [s.ms for s in samples["run"]],
    }
    p50 = {kind: percentile(values, 0.5) for kind, values in times.items()}
    p99 = {kind: percentile(values, 0.99) for kind, values in times.items()}
    print(f"{'':44}{'p50 ms':>8}{'p99 ms':>8}{'× bare p50':>12}{'× bare p99':>12}")
    for kind, name in (
        ("bare", "bare Dramatiq no-op actor (the baseline)"),
        ("ping", "/ping (command → job → reply)"),
        ("run", "/run noop x (command → run → result)"),
    ):
        print(
            f"{name:44}{p50[kind]:8.1f}{p99[kind]:8.1f}"
            f"{p50[kind] / p50['bare']:12.2f}{p99[kind] / p99['bare']:12.2f}"
        )
    print(
        f"\na no-op run: {p50['run'] / p50['bare']:.2f}× the bare actor's p50 and "
        f"{p50['run'] / p50['ping']:.2f}× /ping's, in the same run"
    )
    print(
        f"\nwhere a no-op run's time goes (p50 / p99 ms over the {len(times['run'])} timed runs):"
    )
    for name, values in stages.items():
        print(f"  {name:46}{percentile(values, 0.5):8.1f}{percentile(values, 0.99):8.1f}")
    print(
        f"(aegis's worker and the baseline's: {WORKER_THREADS} threads; the baseline's idle "
        f"consumers poll Redis at most every {WORKER_TIMEOUT_MS} ms, aegis's wait for the wake "
        f"each enqueue pushes (jobs/worker/broker.py); each sample after {args.idle:g} s idle)"
    )


# The whole ---------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--samples", type=int, default=50, help="timed samples of each of the three (50)"
    )
    parser.add_argument("--warmup", type=int, default=5, help="untimed rounds first (5)")
    parser.add_argument(
        "--idle", type=float, default=0.2, help="seconds without work before each sample (0.2)"
    )
    parser.add_argument("--hung", type=int, default=20, help="hung script runs (20; 0: none)")
    parser.add_argument(
        "--hung-cli", type=int, default=8, help="hung CLI runs of each kind (8; 0: none)"
    )
    parser.add_argument("--parallel", type=int, default=4, help="hung runs at a time (4)")
    parser.add_argument(
        "--part", choices=("all", "dispatch", "deadlines"), default="all", help="which part"
    )
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--serve-baseline", metavar="REDIS_URL", help=argparse.SUPPRESS)
    return parser.parse_args()


async def main(args) -> None:
    command = " ".join(["python bench/runs.py", *sys.argv[1:]])
    print(f"`{command}` ({args.database}, {os.cpu_count()} cores)")
    async with running_aegis(args) as (emulator, database_url, data_dir, workdir):
        redis_url = EmbeddedRedis(data_dir).url
        if args.part in ("all", "dispatch"):
            heading(
                f"1. A no-op run against a bare Dramatiq job, {args.samples} of each, interleaved"
            )
            samples = await bench_dispatch(args, emulator, redis_url)
            stages = await run_stages(database_url, samples["run"])
            print_dispatch(args, samples, stages)
        if args.part in ("all", "deadlines"):
            heading("2. How late a hung run is stopped")
            await bench_deadlines(args, emulator, database_url, workdir)


if __name__ == "__main__":
    arguments = parse_args()
    if arguments.serve_baseline:
        serve_baseline(arguments.serve_baseline)
    else:
        asyncio.run(main(arguments))
