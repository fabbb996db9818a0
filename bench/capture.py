"""Capture benchmarks: forwards captured as tasks, and /next over 100,000 tasks.

    python bench/capture.py [--forwards 10000] [--database sqlite|postgres] [--tasks 100000]

1. Capture throughput. ``aegis up`` runs against the emulator as in bench/fullstack.py (whose
   machinery this imports), on a fresh database. A burst of N distinct forwards (a
   ``forward_origin`` of type user and a text of their own) from C owners; forwards per second
   from the first forward injected to the last "Captured as task" reply. Then the check: exactly
   N task rows with N distinct capture keys, and exactly one reply, "Captured as task", to each
   forward. The baselines, in the same run: the foundation's burst (bench/fullstack.py's, 2,000
   plain messages through another ``aegis up`` on another fresh database of the same kind; each
   written message is captured as a task too), and the bare PTB echo bot's.
2. /next over a full store. A fresh database seeded with M tasks (30% open @next under a few
   context labels, the rest in the other states or closed), then:
   - ``Tasks.in_state(State.NEXT, page=0, size=20)``, interleaved with ``Tasks.get(id)`` (one
     read by primary key through the same store: the baseline); target: p99 at most 20 ms;
   - ``/next`` through ``aegis up`` and the emulator, sent to reply seen, interleaved with
     ``/help`` (a fixed text through the same gate, outbox and delivery: the baseline).

Numbers are only comparable within one run; the ratios are the result.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import asyncpg
import fullstack
from fullstack import FIRST_USER, PROBE_USER, percentile
from sqlalchemy import func, select

from bot.store.database import Store
from bot.store.tables import tasks
from emulator.inject import inject_message

POSTGRES_DSN = os.environ.get(
    "AEGIS_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test"
)
CAPTURED = "Captured as task"
FORWARDED_FROM = 7_000_000  # the original senders of the forwards, apart from the owners


class Emulator(fullstack.Emulator):
    """fullstack's emulator, also keeping the bot's replies by the message they answer."""

    def __init__(self, token: str) -> None:
        self.replies: dict[tuple[int, int], list[tuple[float, str]]] = defaultdict(list)
        self.captured = 0
        self.wanted = 0
        self.done = asyncio.Event()
        self.awaited: tuple[int, int] | None = None
        super().__init__(token)

    def _wrap_add_message(self) -> None:
        super()._wrap_add_message()
        stamped = self.state.add_message

        def add_message(chat, sender, **fields):
            message = stamped(chat, sender, **fields)
            if message.from_bot and message.reply_to is not None:
                self._answered((chat.chat_id, message.reply_to.message_id), message.text or "")
            return message

        self.state.add_message = add_message

    def _answered(self, key: tuple[int, int], text: str) -> None:
        self.replies[key].append((time.perf_counter(), text))
        if text.startswith(CAPTURED):
            self.captured += 1
        if key == self.awaited or (self.wanted and self.captured >= self.wanted):
            self.done.set()

    def write(self, user_id: int, text: str, origin: dict | None = None) -> tuple[int, int]:
        """A message (a forward, given ``origin``) from ``user_id``; its (chat, message) ids."""
        body = {"user": {"id": user_id, "first_name": f"User {user_id}"}, "text": text}
        if origin is not None:
            body["forward_origin"] = origin
        update = inject_message(self.state, self.state.bot(self.token), body)
        return user_id, update["message"]["message_id"]

    async def round_trip(self, text: str) -> float:
        """Milliseconds from ``text`` written by the probe owner to the bot's reply to it."""
        self.done = asyncio.Event()
        started = time.perf_counter()
        self.awaited = self.write(PROBE_USER, text)
        await asyncio.wait_for(self.done.wait(), timeout=30)
        return (self.replies[self.awaited][0][0] - started) * 1000


# Databases and the aegis process ---------------------------------------------------------------


@contextlib.asynccontextmanager
async def fresh_database(kind: str, data_dir: Path) -> AsyncIterator[str]:
    """A database of our own: SQLite in ``data_dir``, or a Postgres database dropped after."""
    if kind == "sqlite":
        yield f"sqlite+aiosqlite:///{data_dir / 'aegis.sqlite3'}"
        return
    name = f"aegis_bench_{secrets.token_hex(4)}"
    await admin(f'CREATE DATABASE "{name}"')
    try:
        server = POSTGRES_DSN.rsplit("/", 1)[0].replace("postgresql:", "postgresql+asyncpg:")
        yield f"{server}/{name}"
    finally:
        await admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def admin(statement: str) -> None:
    connection = await asyncpg.connect(POSTGRES_DSN)
    try:
        await connection.execute(statement)
    finally:
        await connection.close()


@contextlib.asynccontextmanager
async def running_aegis(kind: str, store_ready=None) -> AsyncIterator[tuple[Emulator, str]]:
    """``aegis up`` on a fresh database (``store_ready(url)`` first fills it), answering."""
    token = f"{secrets.randbelow(10**9) + 10**9}:{secrets.token_urlsafe(26)}"
    with tempfile.TemporaryDirectory(prefix="aegis-bench-") as directory:
        data_dir = Path(directory) / ".aegis"
        data_dir.mkdir()
        async with fresh_database(kind, data_dir) as database_url:
            if store_ready is not None:
                await store_ready(database_url)
            emulator = Emulator(token)
            url = await emulator.start()
            users = [PROBE_USER] + [FIRST_USER + i for i in range(100)]
            process = fullstack.start_aegis(token, url, data_dir, users, database_url)
            try:
                await fullstack.wait_until_answering(emulator, "aegis up")
                yield emulator, database_url
            finally:
                fullstack.stop(process)
                await emulator.runner.cleanup()


async def with_store(url: str, work: Callable[[Store], Awaitable]):
    store = Store(url)
    try:
        return await work(store)
    finally:
        await store.close()


# Part 1: capture throughput --------------------------------------------------------------------


async def foundation_rate(args) -> tuple[float, int, int]:
    """bench/fullstack.py's burst of plain messages through ``aegis up``, on the same database."""
    async with running_aegis(args.database) as (emulator, _):
        await fullstack.latency(emulator, 20)
        return await fullstack.burst(emulator, "aegis up", args.baseline_messages, args.chats)


async def capture_rate(args) -> dict:
    async with running_aegis(args.database) as (emulator, database_url):
        await fullstack.latency(emulator, 20)  # warm up, as fullstack.measure does
        forwards, started = await forward_burst(emulator, args.forwards, args.chats)
        await asyncio.sleep(1.0)  # let any doubled reply show up before counting
        rows, keys = await with_store(database_url, count_forwarded)
    answers = [emulator.replies[key] for key in forwards]
    ends = [t for replies in answers for t, text in replies if text.startswith(CAPTURED)]
    return {
        "rate": len(ends) / (max(ends) - started) if ends else 0.0,
        "lost": sum(1 for replies in answers if not replies),
        "doubled": sum(len(replies) - 1 for replies in answers if len(replies) > 1),
        # anything but one reply, "Captured as task", to a forward ("Already captured", ...)
        "wrong": sum(1 for r in answers if len(r) != 1 or not r[0][1].startswith(CAPTURED)),
        "rows": rows,
        "keys": keys,
    }


async def forward_burst(emulator: Emulator, count: int, chats: int):
    """``count`` distinct forwards from ``chats`` owners; their ids and the moment they began."""
    emulator.captured, emulator.wanted = 0, count
    emulator.done = asyncio.Event()
    moment = int(time.time()) - 3600
    started = time.perf_counter()
    forwards = []
    for i in range(count):
        origin = {"type": "user", "sender_user": {"id": FORWARDED_FROM + i % 97}, "date": moment}
        forwards.append(emulator.write(FIRST_USER + i % chats, f"forwarded note {i}", origin))
        if i % 50 == 0:
            await asyncio.sleep(0)
    try:
        await asyncio.wait_for(emulator.done.wait(), timeout=max(120, count / 20))
    except TimeoutError:
        print(f"  only {emulator.captured} of {count} captured before the timeout")
    return forwards, started


async def count_forwarded(store: Store) -> tuple[int, int]:
    forwarded = tasks.c.capture_key.like("fwd:%")
    query = select(func.count(), func.count(tasks.c.capture_key.distinct())).where(forwarded)
    async with store.read() as conn:
        return tuple((await conn.execute(query)).one())


async def bench_capture(args) -> dict:
    fullstack_args = argparse.Namespace(
        messages=args.baseline_messages, chats=args.chats, samples=20
    )
    echo = await fullstack.run_bot("echo", fullstack.start_echo, fullstack_args)
    base_rate, base_lost, base_doubled = await foundation_rate(args)
    result = await capture_rate(args)
    ok = (
        result["rows"] == result["keys"] == args.forwards
        and result["lost"] == result["doubled"] == result["wrong"] == 0
    )
    result.update(base=base_rate, echo=echo.rate, ok=ok)
    print(f"{'':42}{'per s':>8}{'lost':>6}{'doubled':>8}{'× aegis':>9}{'× echo':>8}")
    burst = f"{args.baseline_messages:,} messages"
    r = result
    for name, rate, lost, doubled in (
        (f"bare PTB echo bot, {burst}", echo.rate, echo.lost, echo.doubled),
        (f"aegis up, {burst} (fullstack.py)", base_rate, base_lost, base_doubled),
        (f"aegis up, {args.forwards:,} forwards", r["rate"], r["lost"], r["doubled"]),
    ):
        print(
            f"{name:42}{rate:8.0f}{lost:6}{doubled:8}{rate / base_rate:9.2f}{rate / echo.rate:8.2f}"
        )
    print(
        f"check: {result['rows']} forwarded task rows, {result['keys']} distinct capture keys, "
        f"{result['wrong']} forwards without exactly one reply '{CAPTURED} N': "
        + ("OK" if ok else "FAILED")
    )
    return result


def summary(args, capture: dict, nexts: dict) -> None:
    import next_list

    def p(values: list[float], q: float = 0.5) -> float:
        return percentile(values, q)

    def query(when: str) -> str:
        timings = nexts[when]
        return (
            f"p50 {p(timings['next']):.1f} ms, p99 {p(timings['next'], 0.99):.1f} ms {when} "
            f"({p(timings['next']) / p(timings['get']):.1f}× a get by id)"
        )

    command = nexts["command"]
    print(
        f"`{' '.join(['python bench/capture.py', *sys.argv[1:]])}` ({args.database}, "
        f"{os.cpu_count()} cores)\n"
        f"- capture: {args.forwards:,} forwards at {capture['rate']:.0f}/s, "
        f"{capture['rate'] / capture['base']:.2f}× the foundation's burst "
        f"({capture['base']:.0f}/s) and {capture['rate'] / capture['echo']:.2f}× the bare PTB "
        f"echo bot ({capture['echo']:.0f}/s) in the same run; lost {capture['lost']}, doubled "
        f"{capture['doubled']}, {capture['rows']:,} rows / {capture['keys']:,} distinct keys: "
        + ("OK" if capture["ok"] else "FAILED")
        + f"\n- /next query over {args.tasks:,} tasks ({nexts['open next']:,} open @next), "
        f"target p99 ≤ {next_list.QUERY_TARGET_MS} ms: {query('as loaded')}; {query('settled')}, "
        f"after {next_list.SETTLE[args.database]}"
        f"\n- /next command p50 {p(command['next']):.0f} ms, p99 "
        f"{p(command['next'], 0.99):.0f} ms; {p(command['next']) / p(command['help']):.2f}× "
        f"/help's p50 ({p(command['help']):.0f} ms) in the same run"
    )


def heading(text_: str) -> None:
    print(f"\n{text_}\n{'=' * len(text_)}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--forwards", type=int, default=10_000, help="forwards to capture")
    parser.add_argument(
        "--baseline-messages",
        type=int,
        default=2000,
        help="the foundation's burst (fullstack.py's default, 2000; it waits at most 120 s)",
    )
    parser.add_argument("--chats", type=int, default=20, help="owners forwarding them (20)")
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--tasks", type=int, default=100_000, help="tasks seeded for /next")
    parser.add_argument("--query-runs", type=int, default=200, help="in_state calls timed")
    parser.add_argument("--command-runs", type=int, default=30, help="/next round trips timed")
    return parser.parse_args()


async def main() -> None:
    import next_list  # it imports this module's aegis runner; see its docstring

    args = parse_args()
    heading(f"1. {args.forwards:,} forwards captured, {args.database}")
    capture = await bench_capture(args)
    heading(f"2. /next over {args.tasks:,} tasks, {args.database}")
    nexts = await next_list.bench_next(args)
    heading("Summary")
    summary(args, capture, nexts)


if __name__ == "__main__":
    asyncio.run(main())
