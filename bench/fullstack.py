"""Full-stack benchmark of the foundation, against a bare PTB echo bot in the same run.

    python bench/fullstack.py [--messages 2000] [--chats 20] [--samples 200]
    python bench/fullstack.py --database postgres [--workers 1,2,4]

One emulator (in this process) serves both bots as their Bot API server; each bot runs in its own
process. For each bot it measures:

- throughput: a burst of N messages from C users; updates per second from the first message
  injected to the last reply seen, with zero lost and zero doubled checked;
- latency: one message at a time, update injected to reply seen, p50 and p99.

aegis runs as ``aegis up`` pointed at the emulator as if it were Telegram
(AEGIS_TELEGRAM_API_URL), so every update goes through the gate, is recorded in SQLite, and its
reply goes through the outbox and a Dramatiq delivery job over the embedded Redis. Its outbox rate
limits are raised for the run (the emulator enforces none; Telegram's 30/s would cap both bots).

Then ``aegis up`` as a user runs it: the time from start to answering /ping, and the idle memory of
every process (aegis and its embedded Redis) after it settles, beside the echo bot's.

With ``--database postgres`` the aegis runs are the Procfile's shape on a PostgreSQL server and a
Redis server (``--postgres-url``, ``--redis-url``), once per worker count in ``--workers``: the
path a user takes who outgrows SQLite. Each run gets a database of its own, dropped after.
Numbers are only comparable within one run; the ratios are the result.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from aiohttp import web
from servers import Meter, cpu_seconds, servers

from aegis.embedded_redis import EmbeddedRedis
from emulator import EmulatorState, create_emulator_app
from emulator.inject import inject_message

ROOT = Path(__file__).resolve().parent.parent
FIRST_USER = 5_000_000
PROBE_USER = 4_999_999  # start-up probes and latency samples, apart from the burst's chats


@dataclass
class Arrivals:
    """Wall-clock times of the bot's messages per chat, stamped as the emulator stores them."""

    by_chat: dict[int, list[float]] = field(default_factory=dict)
    total: int = 0
    event: asyncio.Event = field(default_factory=asyncio.Event)
    wanted: int = 0

    def record(self, chat_id: int) -> None:
        self.by_chat.setdefault(chat_id, []).append(time.perf_counter())
        self.total += 1
        if self.total >= self.wanted:
            self.event.set()

    def reset(self, wanted: int) -> None:
        self.by_chat, self.total, self.wanted = {}, 0, wanted
        self.event = asyncio.Event()


class Emulator:
    def __init__(self, token: str) -> None:
        self.token = token
        self.state = EmulatorState()
        self.arrivals = Arrivals()
        self._wrap_add_message()

    def _wrap_add_message(self) -> None:
        original = self.state.add_message

        def add_message(chat, sender, **fields):
            message = original(chat, sender, **fields)
            if message.from_bot:
                self.arrivals.record(chat.info["id"])
            return message

        self.state.add_message = add_message

    async def start(self) -> str:
        app = create_emulator_app(self.state, token=self.token, control_key=secrets.token_hex(8))
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        host, port = self.runner.addresses[0][:2]
        return f"http://{host}:{port}"

    def send(self, user_id: int, text: str) -> None:
        bot = self.state.bot(self.token)
        user = {"id": user_id, "first_name": f"User {user_id}"}
        inject_message(self.state, bot, {"user": user, "text": text})


@dataclass
class Result:
    name: str
    rate: float  # updates per second in the burst
    p50_ms: float
    p99_ms: float
    lost: int
    doubled: int
    cpu_ms: float  # CPU time of the bot's processes per update in the burst, all cores together
    servers: dict[str, float] | None = None  # per update in the burst, where Meter measured


async def burst(emulator: Emulator, name: str, messages: int, chats: int) -> tuple[float, int, int]:
    emulator.arrivals.reset(messages)
    users = [FIRST_USER + i for i in range(chats)]
    started = time.perf_counter()
    for i in range(messages):
        emulator.send(users[i % chats], f"message {i}")
        if i % 50 == 0:
            await asyncio.sleep(0)
    try:
        await asyncio.wait_for(emulator.arrivals.event.wait(), timeout=120)
    except TimeoutError:
        print(f"  {name}: only {emulator.arrivals.total} of {messages} replies within 120 s")
    await asyncio.sleep(1.0)  # let any doubled reply show up before counting
    elapsed = emulator.arrivals.by_chat and max(max(t) for t in emulator.arrivals.by_chat.values())
    per_chat = {user: len(emulator.arrivals.by_chat.get(user, [])) for user in users}
    expected = {
        user: messages // chats + (1 if i < messages % chats else 0) for i, user in enumerate(users)
    }
    lost = sum(max(0, expected[u] - per_chat[u]) for u in users)
    doubled = sum(max(0, per_chat[u] - expected[u]) for u in users)
    return messages / (elapsed - started), lost, doubled


async def latency(emulator: Emulator, samples: int) -> list[float]:
    user = PROBE_USER
    times = []
    for i in range(samples):
        emulator.arrivals.reset(1)
        started = time.perf_counter()
        emulator.send(user, f"ping {i}")
        await asyncio.wait_for(emulator.arrivals.event.wait(), timeout=30)
        times.append((emulator.arrivals.by_chat[user][0] - started) * 1000)
    return times


def heading(text: str) -> None:
    """A part of a bench's report, underlined."""
    print(f"\n{text}\n{'=' * len(text)}", flush=True)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


async def measure(
    emulator: Emulator, name: str, args, pids: list[int], meter: Meter | None = None
) -> Result:
    await latency(emulator, 20)  # warm up: connections, first queries, caches
    cpu_before = cpu_seconds(pids)
    each_before = [cpu_seconds([pid]) for pid in pids]
    servers_before = meter and await meter.read()
    rate, lost, doubled = await burst(emulator, name, args.messages, args.chats)
    cpu_ms = (cpu_seconds(pids) - cpu_before) * 1000 / args.messages
    each_ms = [
        (cpu_seconds([pid]) - before) * 1000 / args.messages
        for pid, before in zip(pids, each_before, strict=True)
    ]
    servers = None
    if meter is not None:
        await asyncio.sleep(1.5)  # Postgres publishes a backend's counts within a second
        after = await meter.read()
        servers = {key: (after[key] - servers_before[key]) / args.messages for key in after}
        # The Procfile's processes in their order: web, the workers, clock.
        servers["web_cpu_ms"] = each_ms[0]
        servers["worker_cpu_ms"] = sum(each_ms[1:-1])
    times = await latency(emulator, args.samples)
    p50, p99 = percentile(times, 0.5), percentile(times, 0.99)
    return Result(name, rate, p50, p99, lost, doubled, cpu_ms, servers)


def bench_environment(**extra: str) -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("AEGIS_")}
    environment.pop("PYTHONDONTWRITEBYTECODE", None)  # a warm machine has its bytecode cached
    environment.update(extra)
    return environment


class Processes:
    """Several processes stopped together (the Procfile's web, worker and clock)."""

    def __init__(self, processes: list[subprocess.Popen], data_dir: Path) -> None:
        self.processes, self.data_dir = processes, data_dir

    def terminate(self) -> None:
        for process in self.processes:
            process.terminate()

    def wait(self, timeout: float) -> None:
        for process in self.processes:
            process.wait(timeout)
        EmbeddedRedis(self.data_dir).stop()  # shared by the three; nobody else stops it

    def kill(self) -> None:
        for process in self.processes:
            process.kill()


def start_procfile(
    token: str,
    url: str,
    data_dir: Path,
    users: list[int],
    servers: dict[str, str] | None = None,
    workers: int = 1,
) -> Processes:
    """``honcho start``'s shape: web, worker(s) and clock as processes of their own; ``servers``
    holds AEGIS_DATABASE_URL and AEGIS_REDIS_URL for a database and a Redis of their own."""
    environment = aegis_environment(token, url, data_dir, users) | (servers or {})
    log = open(data_dir.parent / "aegis.log", "w")
    migrated = subprocess.run(  # the processes would race to make the tables on a new database
        [sys.executable, "-m", "aegis.cli", "db", "upgrade"],
        cwd=data_dir.parent,
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    if migrated.returncode:
        raise RuntimeError(f"aegis db upgrade failed; see {data_dir.parent / 'aegis.log'}")
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "aegis.cli", kind],
            cwd=data_dir.parent,
            env=environment,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        for kind in ("web", *["worker"] * workers, "clock")
    ]
    return Processes(processes, data_dir)


def aegis_environment(token: str, url: str, data_dir: Path, users: list[int]) -> dict[str, str]:
    return bench_environment(
        AEGIS_DATA_DIR=str(data_dir),
        AEGIS_TELEGRAM_TOKEN=token,
        AEGIS_TELEGRAM_API_URL=f"{url}/bot",
        AEGIS_OWNER_IDS=",".join(map(str, users)),
        AEGIS_PORT=str(free_port()),
        AEGIS_MCP_PORT=str(free_port()),
        AEGIS_OUTBOX_PER_CHAT_PER_SECOND="100000",
        AEGIS_OUTBOX_GLOBAL_PER_SECOND="100000",
        AEGIS_LOG_LEVEL="WARNING",
        **(
            {"AEGIS_WORKER_THREADS": os.environ["BENCH_WORKER_THREADS"]}
            if "BENCH_WORKER_THREADS" in os.environ
            else {}
        ),
    )


def start_aegis(
    token: str, url: str, data_dir: Path, users: list[int], database_url: str | None = None
) -> subprocess.Popen:
    environment = aegis_environment(token, url, data_dir, users)
    if database_url is not None:
        environment["AEGIS_DATABASE_URL"] = database_url
    return subprocess.Popen(
        [sys.executable, "-m", "aegis.cli", "up"],
        cwd=data_dir.parent,
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=open(data_dir.parent / "aegis.log", "w"),
    )


def start_echo(token: str, url: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "echo_bot.py"), token, f"{url}/bot"],
        env=bench_environment(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def stop(process) -> None:
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()


async def run_bot(name: str, start, args, meter: Meter | None = None) -> Result:
    token = f"{secrets.randbelow(10**9) + 10**9}:{secrets.token_urlsafe(26)}"
    emulator = Emulator(token)
    url = await emulator.start()
    process = start(token, url)
    pids = [p.pid for p in getattr(process, "processes", [process])]
    try:
        await wait_until_answering(emulator, name)
        return await measure(emulator, name, args, pids, meter)
    finally:
        stop(process)
        await emulator.runner.cleanup()


async def wait_until_answering(emulator: Emulator, name: str) -> None:
    deadline = time.perf_counter() + 60
    while time.perf_counter() < deadline:
        emulator.arrivals.reset(1)
        emulator.send(PROBE_USER, "are you there?")
        try:
            await asyncio.wait_for(emulator.arrivals.event.wait(), timeout=2)
        except TimeoutError:
            continue
        await asyncio.sleep(2)  # replies to earlier probes arrive now, not during the burst
        return
    raise RuntimeError(f"{name} did not answer within 60 s")


def rss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            total += psutil.Process(pid).memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total / 2**20


async def startup_and_memory(args) -> None:
    """``aegis up`` as the README runs it (emulator mode): start to /ping, then idle RSS."""
    from emulator.client import EmulatorClient

    starts, memories = [], []
    for attempt in range(args.starts + 1):
        with tempfile.TemporaryDirectory(prefix="aegis-bench-") as directory:
            port = free_port()
            environment = bench_environment(
                AEGIS_PORT=str(port), AEGIS_MCP_PORT=str(free_port()), AEGIS_LOG_LEVEL="WARNING"
            )
            began = time.perf_counter()
            process = subprocess.Popen(
                [sys.executable, "-m", "aegis.cli", "up"],
                cwd=directory,
                env=environment,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                key_file = Path(directory) / ".aegis" / "secrets" / "emulator-key"
                client = None
                while time.perf_counter() - began < 60:
                    try:
                        if client is None and key_file.exists():
                            client = EmulatorClient(
                                f"http://127.0.0.1:{port}/emulator", key_file.read_text()
                            )
                        if client is not None:
                            sent = await client.send_message("/ping")
                            await client.wait_for_bot_messages(
                                1000001, 1, after=sent["message"]["message_id"], timeout=10
                            )
                            break
                    except Exception:  # noqa: BLE001 - not up yet
                        pass
                    await asyncio.sleep(0.02)
                elapsed = time.perf_counter() - began
                await asyncio.sleep(args.idle)
                redis_pid = int((Path(directory) / ".aegis/redis/redis.pid").read_text())
                memory = rss_mb([process.pid, redis_pid])
            finally:
                stop(process)
            if attempt:  # the first start fills the bytecode cache: a cold machine
                starts.append(elapsed)
                memories.append(memory)
    print(
        f"\naegis up, start to answering /ping (warm, {args.starts} starts): "
        f"median {statistics.median(starts):.2f} s, max {max(starts):.2f} s (target ≤ 3 s)"
    )
    print(
        f"aegis up idle RSS, aegis + embedded Redis: median {statistics.median(memories):.0f} MB"
        f" (target ≤ 150 MB)"
    )


async def echo_memory() -> float:
    token = f"{secrets.randbelow(10**9) + 10**9}:{secrets.token_urlsafe(26)}"
    emulator = Emulator(token)
    url = await emulator.start()
    process = start_echo(token, url)
    try:
        await wait_until_answering(emulator, "echo")
        await asyncio.sleep(2)
        return rss_mb([process.pid])
    finally:
        stop(process)
        await emulator.runner.cleanup()


def print_table(results: list[Result], echo: Result) -> None:
    width = max(10, *(len(result.name) + 2 for result in results))
    print(
        f"{'':{width}}{'updates/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'lost':>6}{'doubled':>8}"
        f"{'ratio':>7}{'CPU ms/update':>15}"
    )
    for result in results:
        print(
            f"{result.name:{width}}{result.rate:10.0f}{result.p50_ms:9.1f}{result.p99_ms:9.1f}"
            f"{result.lost:6}{result.doubled:8}{result.rate / echo.rate:7.2f}"
            f"{result.cpu_ms:15.2f}"
        )


def print_server_costs(results: list[Result]) -> None:
    measured = [result for result in results if result.servers]
    if not measured:
        return
    width = max(len(result.name) + 2 for result in measured)
    print("\nwhat each update of the burst cost the servers")
    print(
        f"{'':{width}}{'web CPU ms':>11}{'workers CPU ms':>15}{'PG xacts':>9}{'PG CPU ms':>10}"
        f"{'Redis cmds':>11}{'of scripts':>11}{'Redis CPU ms':>13}"
    )
    for result in measured:
        cost = result.servers
        print(
            f"{result.name:{width}}{cost['web_cpu_ms']:11.2f}{cost['worker_cpu_ms']:15.2f}"
            f"{cost['transactions']:9.2f}{cost['postgres_cpu_ms']:10.2f}"
            f"{cost['redis_commands']:11.2f}{cost['redis_scripts']:11.2f}"
            f"{cost['redis_cpu_ms']:13.2f}"
        )
    print(
        "Redis cmds count the commands a script runs; 'of scripts' are the scripts (Dramatiq's"
        " enqueue, fetch and ack, the send windows), one round trip each"
    )


async def run_postgres(args, users: list[int]) -> None:
    """The Procfile's shape on a PostgreSQL server and a Redis server, for each worker count,
    beside the echo bot and the same shape on SQLite with the embedded Redis."""
    echo = await run_bot("echo", start_echo, args)
    results = [echo]
    with tempfile.TemporaryDirectory(prefix="aegis-bench-") as directory:
        data_dir = Path(directory) / ".aegis"
        data_dir.mkdir()
        results.append(
            await run_bot(
                "procfile sqlite",
                lambda t, u, d=data_dir: start_procfile(t, u, d, users),
                args,
            )
        )
    for workers in args.workers:
        with tempfile.TemporaryDirectory(prefix="aegis-bench-") as directory:
            data_dir = Path(directory) / ".aegis"
            data_dir.mkdir()
            async with servers(args.postgres_url, args.redis_url) as urls:
                results.append(
                    await run_bot(
                        f"postgres, {workers} worker{'s' * (workers > 1)}",
                        lambda t, u, d=data_dir, e=urls, w=workers: start_procfile(
                            t, u, d, users, e, w
                        ),
                        args,
                        Meter(urls),
                    )
                )
    print_table(results, echo)
    print_server_costs(results)
    print("\nratio: burst throughput against the echo bot in this run (target >= 0.5 on Postgres)")
    print("CPU ms/update: the bot's processes in the burst (not the emulator, Redis, Postgres)")
    print("each aegis row is the Procfile's web, worker(s) and clock as processes of their own")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2000, help="messages in the burst")
    parser.add_argument("--chats", type=int, default=20, help="users sending the burst")
    parser.add_argument("--samples", type=int, default=200, help="one-at-a-time round trips")
    parser.add_argument("--starts", type=int, default=3, help="warm starts of aegis up to time")
    parser.add_argument("--idle", type=float, default=5.0, help="seconds idle before RSS")
    parser.add_argument(
        "--database",
        choices=("sqlite", "postgres"),
        default="sqlite",
        help="sqlite: aegis up and the Procfile on SQLite (default); postgres: the Procfile on "
        "a PostgreSQL server and a Redis server, per worker count",
    )
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("BENCH_POSTGRES_URL", "postgresql://127.0.0.1:5432/postgres"),
        help="a server where the bench may create and drop databases (BENCH_POSTGRES_URL)",
    )
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/14"),
        help="a Redis database the bench may empty (BENCH_REDIS_URL; default db 14)",
    )
    parser.add_argument(
        "--workers",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[1],
        help="worker processes, comma-separated for several runs (e.g. 1,2,4)",
    )
    args = parser.parse_args()
    users = [PROBE_USER] + [FIRST_USER + i for i in range(args.chats)]
    print(
        f"burst of {args.messages} messages from {args.chats} users; "
        f"{args.samples} one-at-a-time round trips\n"
    )
    if args.database == "postgres":
        await run_postgres(args, users)
        return
    echo = await run_bot("echo", start_echo, args)
    results = [echo]
    for name, start in (("aegis up", start_aegis), ("procfile", start_procfile)):
        with tempfile.TemporaryDirectory(prefix="aegis-bench-") as directory:
            data_dir = Path(directory) / ".aegis"
            data_dir.mkdir()
            results.append(
                await run_bot(name, lambda t, u, s=start, d=data_dir: s(t, u, d, users), args)
            )
    print_table(results, echo)
    print("\nratio: burst throughput against the echo bot in this run (target >= 0.5)")
    print("CPU ms/update: the bot's processes in the burst (without the emulator or Redis)")
    print("aegis up: web, worker and clock in one process; procfile: three processes (a VPS)")
    await startup_and_memory(args)
    print(f"bare PTB echo bot idle RSS: {await echo_memory():.0f} MB (for scale)")


if __name__ == "__main__":
    asyncio.run(main())
