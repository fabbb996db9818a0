"""The fault suite: a burst through the Procfile's processes, one fault injected mid-burst.

    python bench/faults.py                      # every fault, on Postgres and a Redis server
    python bench/faults.py --faults kill-worker,poisoned-reply --messages 200
    python bench/faults.py --database sqlite    # SQLite and the embedded Redis

Each fault is a run of its own: a fresh database, ``aegis web``, ``worker`` and ``clock`` as
processes of their own pointed at the Bot API emulator in this process (bench/fullstack.py's
machinery), a burst of messages from several users at a steady rate, and the fault injected
30% of the way in (``--fault-at``). Once every reply is in and the outbox owes nothing (or
``--settle`` seconds after the burst), it prints per fault: replies lost and doubled (each reply
names the message it answers), outbox rows still owed (read from the database), rows set aside,
and the seconds from the fault until replies were on time again.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import secrets
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fault_kinds import FAULTS, Fault
from fullstack import FIRST_USER, PROBE_USER, Emulator, percentile, servers
from procfile import Procfile, RedisServer, TcpProxy
from sqlalchemy import func, select
from sqlalchemy.engine import make_url

from bot.store.database import Store
from bot.store.tables import outbox

NOTE = re.compile(r"\bnote (\d+) of the burst\b")
SET_ASIDE = "set it aside"  # bot/chat/undelivered.py's notice
# A reply accepted this long before a kill of the worker may not have been recorded yet: the
# duplicate window is milliseconds, this is slack for a loaded machine.
IN_WINDOW = 1.0


class FaultEmulator(Emulator):
    """fullstack's emulator, also keeping each reply by the message it answers, the wall-clock
    time it accepted each of the bot's sends, and a hook called at every send."""

    def __init__(self, token: str, chats: list[int]) -> None:
        super().__init__(token)
        self.chats = set(chats)
        self.sent_at: dict[int, float] = {}  # note -> injected (perf_counter)
        self.replies: dict[int, list[float]] = defaultdict(list)  # note -> replies seen
        self.notices: list[str] = []
        self.others: list[str] = []
        self.accepted: dict[tuple[int, int], float] = {}  # (chat, message id) -> time.time()
        self.on_send: Callable[[], None] | None = None
        original = self.state.add_message

        def add_message(chat, sender, **fields):
            message = original(chat, sender, **fields)
            if message.from_bot and chat.info["id"] in self.chats:
                self._keep(chat.info["id"], message)
            return message

        self.state.add_message = add_message

    def _keep(self, chat_id: int, message) -> None:
        """A reply is the bot's message answering a note; a card the clock's triage sweep sends
        about a note's task quotes it too, but answers nothing."""
        self.accepted[(chat_id, message.message_id)] = time.time()
        text = message.text or message.caption or ""
        answered = NOTE.search(message.reply_to.text or "") if message.reply_to else None
        if SET_ASIDE in text:
            self.notices.append(text)
        elif answered:
            self.replies[int(answered.group(1))].append(time.perf_counter())
        else:
            self.others.append(text)
        if self.on_send is not None:
            self.on_send()

    def note(self, user: int, index: int, extra: str = "") -> None:
        self.sent_at[index] = time.perf_counter()
        self.send(user, f"note {index} of the burst{extra}")

    @property
    def bot(self):
        return self.state.bot(self.token)


@dataclass
class Run:
    """One fault's run: its stack, and what the fault did to it."""

    args: argparse.Namespace
    emulator: FaultEmulator
    procfile: Procfile
    store: Store
    users: list[int]
    database_url: str | None = None  # on Postgres: the run's own database
    redis: RedisServer | None = None  # the run's own redis-server, where the fault needs one
    proxy: TcpProxy | None = None  # between aegis and Postgres, where the fault needs one
    fault_started: float = 0.0
    poisoned: int | None = None  # the note whose reply the emulator refuses
    notes: list[str] = field(default_factory=list)
    watchers: list[asyncio.Task] = field(default_factory=list)


@dataclass
class Row:
    fault: str
    messages: int
    lost: int
    doubled: int
    stuck: int  # outbox rows still owed after the settle
    set_aside: int  # outbox rows failed for good
    recover: float | None  # seconds from the fault until replies were on time again
    in_window: int = 0  # of the doubled: sent just before a kill of the worker, which never knew
    notes: list[str] = field(default_factory=list)
    skipped: str = ""


@contextlib.asynccontextmanager
async def stack(fault: Fault, args: argparse.Namespace):
    """A fresh stack for one fault: database, Redis, emulator and the three processes."""
    users = [FIRST_USER + i for i in range(args.chats)]
    token = f"{secrets.randbelow(10**9) + 10**9}:{secrets.token_urlsafe(26)}"
    with tempfile.TemporaryDirectory(prefix="aegis-faults-") as directory:
        data_dir = Path(directory) / ".aegis"
        data_dir.mkdir()
        async with contextlib.AsyncExitStack() as exits:
            redis = _redis_for(fault, args, Path(directory))
            if redis is not None:
                redis.start()
                exits.callback(redis.stop)
            environment = {"AEGIS_REDIS_URL": redis.url} if redis else {}
            if args.database == "postgres":
                redis_url = redis.url if redis else args.redis_url
                environment = await exits.enter_async_context(servers(args.postgres_url, redis_url))
            database_url = environment.get("AEGIS_DATABASE_URL")
            proxy = None
            if fault.needs == "postgres-proxy":
                proxy = await _proxy(database_url)
                exits.push_async_callback(proxy.cut)
                environment = environment | {"AEGIS_DATABASE_URL": _through(proxy, database_url)}
            if args.retry_seconds is not None:
                environment["AEGIS_OUTBOX_RETRY_SECONDS"] = str(args.retry_seconds)
            emulator = FaultEmulator(token, users)
            url = await emulator.start()
            exits.push_async_callback(emulator.runner.cleanup)
            procfile = Procfile(token, url, data_dir, [PROBE_USER, *users], environment, args.lease)
            # In a thread: while they stop, the processes still talk to the emulator (and the
            # proxy) in this loop.
            exits.push_async_callback(asyncio.to_thread, procfile.stop)
            await asyncio.to_thread(procfile.start_all)
            store = Store(database_url or f"sqlite+aiosqlite:///{data_dir / 'aegis.sqlite3'}")
            exits.push_async_callback(store.close)
            await answering(emulator)
            yield Run(args, emulator, procfile, store, users, database_url, redis, proxy)


async def answering(emulator: FaultEmulator) -> None:
    """fullstack's wait_until_answering without its two seconds for late answers to the probes:
    here they go to a chat the burst's counts leave out."""
    deadline = time.perf_counter() + 60
    while time.perf_counter() < deadline:
        emulator.arrivals.reset(1)
        emulator.send(PROBE_USER, "are you there?")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(emulator.arrivals.event.wait(), timeout=2)
            return
    raise RuntimeError("aegis did not answer within 60 s")


async def _proxy(database_url: str) -> TcpProxy:
    url = make_url(database_url)
    proxy = TcpProxy(url.host or "127.0.0.1", url.port or 5432)
    await proxy.restore()
    return proxy


def _through(proxy: TcpProxy, database_url: str) -> str:
    url = make_url(database_url).set(host="127.0.0.1", port=proxy.port)
    return url.render_as_string(hide_password=False)


def _redis_for(fault: Fault, args: argparse.Namespace, directory: Path) -> RedisServer | None:
    if fault.needs.startswith("redis-"):
        return RedisServer(directory, appendonly=fault.needs == "redis-aof")
    if args.redis_url == "own":
        return RedisServer(directory, appendonly=True)
    return None


async def run_fault(fault: Fault, args: argparse.Namespace) -> Row:
    if fault.needs.startswith("postgres") and args.database != "postgres":
        return Row(fault.name, 0, 0, 0, 0, 0, None, skipped="needs --database postgres")
    async with stack(fault, args) as run:
        await burst(run, fault)
        await settle(run)
        row = await measure(run, fault)
        for watcher in run.watchers:
            watcher.cancel()
        return row


async def burst(run: Run, fault: Fault) -> None:
    """The burst at a steady rate, the fault started ``--fault-at`` of the way in (it may go on
    while the burst does: an outage, a storm)."""
    args, emulator = run.args, run.emulator
    started, injected = time.perf_counter(), None
    for index in range(args.messages):
        if index == int(args.messages * args.fault_at):
            run.fault_started = time.perf_counter()
            injected = asyncio.create_task(fault.inject(run))
        emulator.note(run.users[index % len(run.users)], index)
        await asyncio.sleep(max(0.0, started + (index + 1) / args.rate - time.perf_counter()))
    await injected


async def settle(run: Run) -> None:
    """Until every reply is in, the outbox owes nothing and the fault's watchers are done (the
    clock's lease taken over), or ``--settle`` seconds."""
    deadline = time.perf_counter() + run.args.settle
    wanted = _wanted(run)
    while time.perf_counter() < deadline:
        counts = await _outbox_counts(run)
        replied = wanted <= run.emulator.replies.keys() and counts is not None and not counts[0]
        if replied and all(watcher.done() for watcher in run.watchers):
            break
        await asyncio.sleep(0.5)
    await asyncio.sleep(1.0)  # a doubled reply on its way shows up now


def _wanted(run: Run) -> set[int]:
    return set(range(run.args.messages))


async def _outbox_counts(run: Run) -> tuple[dict[str, int], int] | None:
    """Rows still owed, by status, and rows set aside; None while the database is away."""
    try:
        async with run.store.read() as conn:
            query = select(outbox.c.status, func.count()).group_by(outbox.c.status)
            counts = dict((await conn.execute(query)).all())
    except Exception:  # noqa: BLE001 - the outage under test
        return None
    owed = {status: n for status, n in counts.items() if status in ("pending", "sending")}
    return owed, counts.get("failed", 0)


async def measure(run: Run, fault: Fault) -> Row:
    emulator, wanted = run.emulator, _wanted(run)
    lost = len(wanted - emulator.replies.keys())
    doubled = sum(len(emulator.replies[i]) - 1 for i in wanted if len(emulator.replies[i]) > 1)
    owed, set_aside = await _outbox_counts(run) or ({"unknown": -1}, -1)
    row = Row(
        fault.name,
        len(emulator.sent_at),
        lost,
        doubled,
        sum(owed.values()),
        set_aside,
        None if lost else _recovery(run, wanted),
        _in_window(run, wanted),
        run.notes,
    )
    if run.poisoned is not None:
        row.notes.append(_poison_note(run))
    if row.in_window:
        row.notes.append(
            f"{row.in_window} of the {doubled} doubled sent just before the worker was killed: "
            "the kill landed between Telegram accepting the send and aegis recording it"
        )
    if fault.name == "kill-between-send-and-record":
        row.notes.append(await _duplicate_window(run))
    for i in sorted(i for i in wanted if len(emulator.replies[i]) > 1):
        seen = ", ".join(f"{at - run.fault_started:+.3f}" for at in emulator.replies[i])
        row.notes.append(f"note {i} answered at {seen} s from the fault")
    if emulator.others:
        first = emulator.others[0].splitlines()[0][:60]
        row.notes.append(f"{len(emulator.others)} other messages from the bot, the first: {first}")
    return row


def _in_window(run: Run, wanted: set[int]) -> int:
    """Doubles a kill of the worker explains: the first copy accepted by the emulator just
    before the kill, so the worker never recorded it, and sent again after."""
    kills = run.procfile.killed_at["worker"]
    return sum(
        1
        for i in wanted
        if len(copies := run.emulator.replies[i]) > 1
        and any(kill - IN_WINDOW <= copies[0] <= kill < copies[1] for kill in kills)
    )


def _recovery(run: Run, wanted: set[int]) -> float:
    """Seconds from the fault until the last late reply: one that took longer than three times
    the p99 before the fault (at least a second). 0: no reply was late."""
    emulator = run.emulator
    first = {i: emulator.replies[i][0] - emulator.sent_at[i] for i in wanted}
    before = [took for i, took in first.items() if emulator.replies[i][0] < run.fault_started]
    late_after = max(1.0, 3 * percentile(before, 0.99)) if before else 1.0
    late = [emulator.replies[i][0] for i, took in first.items() if took > late_after]
    late = [at for at in late if at > run.fault_started]
    return max(late) - run.fault_started if late else 0.0


def _poison_note(run: Run) -> str:
    delivered = len(run.emulator.replies.get(run.poisoned, []))
    refused = run.emulator.bot.outage.refused if run.emulator.bot.outage else 0
    return (
        f"the poisoned reply was refused {refused} times, delivered {delivered} times; "
        f"{len(run.emulator.notices)} notice(s) to its owner"
    )


async def _duplicate_window(run: Run) -> str:
    """From the emulator accepting a send to the worker's ``sent_at`` for it: a kill inside that
    window sends the message again once the row's lease runs out."""
    async with run.store.read() as conn:
        rows = (
            await conn.execute(
                select(outbox.c.chat_id, outbox.c.telegram_message_ids, outbox.c.sent_at).where(
                    outbox.c.status == "sent"
                )
            )
        ).all()
    windows = [
        (row.sent_at.timestamp() - run.emulator.accepted[key]) * 1000
        for row in rows
        if (key := (row.chat_id, row.telegram_message_ids[-1])) in run.emulator.accepted
    ]
    if not windows:
        return "no send was matched to its record"
    p50, p99 = percentile(windows, 0.5), percentile(windows, 0.99)
    return (
        f"the duplicate window (the emulator accepting a send -> its sent_at), over "
        f"{len(windows)} sends: p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {max(windows):.1f} ms"
    )


def print_table(rows: list[Row]) -> None:
    width = max(len(row.fault) for row in rows) + 2
    print(
        f"{'fault':{width}}{'messages':>9}{'lost':>6}{'doubled':>8}{'stuck':>7}"
        f"{'set aside':>10}{'recover s':>10}"
    )
    for row in rows:
        if row.skipped:
            print(f"{row.fault:{width}}  skipped: {row.skipped}")
            continue
        recover = "never" if row.recover is None else f"{row.recover:.1f}"
        print(
            f"{row.fault:{width}}{row.messages:9}{row.lost:6}{row.doubled:8}{row.stuck:7}"
            f"{row.set_aside:10}{recover:>10}"
        )
    for row in rows:
        for note in row.notes:
            print(f"  {row.fault}: {note}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--faults",
        type=lambda text: text.split(","),
        default=list(FAULTS),
        help=f"comma-separated, of: {', '.join(FAULTS)} (default: all)",
    )
    parser.add_argument("--messages", type=int, default=400, help="messages in each burst")
    parser.add_argument("--chats", type=int, default=10, help="users sending the burst")
    parser.add_argument("--rate", type=float, default=20.0, help="messages per second")
    parser.add_argument(
        "--fault-at", type=float, default=0.3, help="how far into the burst the fault comes"
    )
    parser.add_argument(
        "--settle", type=float, default=150.0, help="seconds after the burst to wait at most"
    )
    parser.add_argument(
        "--database",
        choices=("postgres", "sqlite"),
        default="postgres",
        help="postgres: a PostgreSQL server and a Redis server (default); sqlite: SQLite in the "
        "data dir and the embedded Redis (the postgres faults skipped)",
    )
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("BENCH_POSTGRES_URL", "postgresql://127.0.0.1:5432/postgres"),
        help="a server where the suite may create and drop databases (BENCH_POSTGRES_URL)",
    )
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/14"),
        help="a Redis database the suite may empty (BENCH_REDIS_URL; default db 14), or 'own': "
        "a redis-server of each run's own, with an append-only file",
    )
    parser.add_argument(
        "--outage", type=float, default=10.0, help="seconds of each postgres-* fault"
    )
    parser.add_argument("--storm", type=float, default=5.0, help="429-storm seconds")
    parser.add_argument(
        "--backlog",
        type=float,
        default=2.0,
        help="redis-restart-*: seconds the worker is paused before the kill, so jobs wait in Redis",
    )
    parser.add_argument(
        "--lease",
        type=float,
        help="the outbox lease in seconds (aegis's own, 60, by default): how long a killed "
        "worker's rows wait before another delivery takes them",
    )
    parser.add_argument(
        "--retry-seconds",
        type=float,
        help="AEGIS_OUTBOX_RETRY_SECONDS: the first wait before a 500 is tried again",
    )
    args = parser.parse_args(argv)
    unknown = set(args.faults) - FAULTS.keys()
    if unknown:
        parser.error(f"unknown faults: {', '.join(sorted(unknown))}")
    return args


async def run_suite(args: argparse.Namespace) -> list[Row]:
    rows = []
    for name in args.faults:
        started = time.perf_counter()
        rows.append(await run_fault(FAULTS[name], args))
        print(f"{name}: {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    return rows


async def main() -> None:
    args = parse_args()
    print(
        f"{args.messages} messages from {args.chats} users at {args.rate:g}/s, one fault "
        f"{args.fault_at:.0%} of the way in; {args.database}\n"
    )
    print_table(await run_suite(args))
    print(
        "\nlost: messages never answered; doubled: answers past the first; stuck: outbox rows "
        "still owed after the settle; set aside: rows failed for good (with a notice); "
        "recover s: from the fault to the last reply that was late (3x the p99 before it)"
    )


if __name__ == "__main__":
    asyncio.run(main())
