"""What N http monitors cost ``aegis up``, against a bare aiohttp client doing the same GETs.

    python bench/monitors.py [--monitors 500] [--interval 60] [--seconds 180]

One local target (an aiohttp server in a process of its own) answers ``GET /m/<n>`` with 200 "ok"
and stamps every request's arrival (``time.time()``), its ``n`` and who sent it. Beside it, at the
same time and against the same target:

- the baseline: a bare aiohttp client in a process of its own, one ClientSession, one GET per
  monitor per interval, at the monitor's slot times (``epoch + phase + k * interval``, ``phase_of``
  of bot/monitors/monitor.py);
- aegis: ``aegis up`` in emulator mode on a fresh data dir, whose aegis.yaml starts empty (idle
  RSS is sampled then) and is then given the N monitors, ``every: <interval>``; the clock
  reconciles them, claims the slots due within the next seconds and sends them to the worker,
  which waits for each slot and probes;
- its idle twin: a second ``aegis up`` that is never given a monitor, measured over the same
  window, so that what the monitors cost is told apart from what aegis costs anyway.

After a warm-up of one interval, both are measured over ``--seconds``, in ``--rounds`` windows:
the checks the target saw, the CPU seconds (user + system) of each side's processes (aegis's with
its embedded Redis), aegis's RSS above its idle RSS, and each check's lateness, its arrival minus
its slot (the latest slot at or before the arrival). After each window every monitor is paused
(in aegis's own rows, as its Pause button does), and once the slots claimed ahead are done, aegis
is measured as long again: what the same process costs with the monitors and without, minutes
apart, is the figure least moved by the machine's drift. Each window resumes the monitors at
their next slot (aegis's Resume would check them all at once). Numbers are only comparable within
one run; the ratios are the result.

Last, ``--cards`` monitors that fail from their first check (``fail_after: 1``) are added, one
every 2 s, and the owner's chat at the emulator is read every 20 ms: the time from each one's
first (failing) check at the target to its incident card in the chat is the threshold-to-card
latency.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sqlite3
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import aiohttp
import psutil
from fullstack import bench_environment, cpu_seconds, free_port, rss_mb, stop
from monitor_report import Round, Side, Window, report
from monitor_sides import BASELINE_AGENT, slot_at_or_before
from sqlalchemy import select

from aegis.embedded_redis import EmbeddedRedis
from bot.monitors.checks import MOVE_MANY
from bot.monitors.monitor import next_slot
from bot.store.database import Store
from bot.store.tables import monitors
from bot.timeutil import now

SIDES = str(Path(__file__).with_name("monitor_sides.py"))  # the target and the baseline
AEGIS_AGENT = "aegis-monitor"  # jobs/monitors/probes/http.py's User-Agent
SETTLE_SECONDS = 5.0  # after /healthz answers, before the idle figures
CARD_GAP_SECONDS = 2.0  # between the monitors added to go down, for the card latency
# After pausing them all, before the window off: the slots claimed ahead are checked and their
# results recorded (CLAIM_AHEAD of bot/monitors/monitors.py, 30 s, then RECORD_EVERY of
# jobs/monitors/checks.py, 15 s).
PAUSE_SETTLE_SECONDS = 50.0
RESUME_AHEAD = timedelta(seconds=2)  # two of the clock's turns (TURN_SECONDS of aegis/clock.py)


def start_aegis(directory: Path, port: int, log: Path | None) -> subprocess.Popen:
    """``aegis up`` in emulator mode on ``directory``'s data dir and aegis.yaml."""
    environment = bench_environment(
        AEGIS_DATA_DIR=str(directory / ".aegis"),
        AEGIS_PORT=str(port),
        AEGIS_MCP_PORT=str(free_port()),
        AEGIS_LOG_LEVEL="WARNING",
    )
    return subprocess.Popen(
        [sys.executable, "-m", "aegis.cli", "up"],
        cwd=directory,
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=open(log, "w") if log else subprocess.DEVNULL,
    )


def spawn(*arguments: str, log: Path | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, SIDES, *arguments],
        env=bench_environment(),
        stdout=subprocess.DEVNULL,
        stderr=open(log, "w") if log else subprocess.DEVNULL,
    )


def monitors_yaml(url: str, count: int, interval: int) -> str:
    lines = ["monitors:"]
    for n in range(1, count + 1):
        lines += [f"  m{n}:", f"    http: {url}/m/{n}", f"    every: {interval}s"]
    return "\n".join(lines) + "\n"


async def wait_healthy(port: int, process: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"aegis up exited with {process.returncode}")
            with contextlib.suppress(aiohttp.ClientError, OSError):
                async with session.get(f"http://127.0.0.1:{port}/healthz") as response:
                    if response.status == 200:
                        return
            await asyncio.sleep(0.2)
    raise RuntimeError(f"aegis up was not healthy within {timeout:.0f} s")


def aegis_pids(process: subprocess.Popen, data_dir: Path) -> list[int]:
    """aegis up, its children, and the embedded Redis (a daemon: not a child)."""
    pids = [process.pid, *children(process)]
    with contextlib.suppress(OSError, ValueError):
        pids.append(int((data_dir / "redis" / "redis.pid").read_text()))
    return sorted(set(pids))


def children(process: subprocess.Popen) -> list[int]:
    with contextlib.suppress(psutil.NoSuchProcess):
        return [child.pid for child in psutil.Process(process.pid).children(recursive=True)]
    return []


def monitor_ids(data_dir: Path) -> dict[int, int]:
    """The n of each target path to its monitor's id, read from aegis's own rows."""
    with contextlib.closing(sqlite3.connect(data_dir / "aegis.sqlite3")) as db:
        rows = db.execute("SELECT id, spec FROM monitors").fetchall()
    return {int(json.loads(spec)["target"].rsplit("/", 1)[1]): id_ for id_, spec in rows}


async def wait_for_monitors(data_dir: Path, count: int, timeout: float = 60) -> dict[int, int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(sqlite3.Error):
            ids = monitor_ids(data_dir)
            if len(ids) == count:
                return ids
        await asyncio.sleep(0.2)
    raise RuntimeError(f"aegis did not add the {count} monitors within {timeout:.0f} s")


async def fetch_log(url: str) -> list[tuple[float, int, str]]:
    async with aiohttp.ClientSession() as session, session.get(f"{url}/log") as response:
        return [tuple(stamp) for stamp in await response.json()]


def lateness(stamps, agent: str, ids: dict[int, int], interval: int, window) -> list[float]:
    start, end = window
    return [
        (at - slot_at_or_before(ids[n], interval, at)) * 1000
        for at, n, who in stamps
        if who == agent and start <= at < end
    ]


async def bench(args, directory: Path) -> tuple[Side, Side, float, list[float]]:
    target_port = free_port()
    target_url = f"http://127.0.0.1:{target_port}"
    data_dir = directory / ".aegis"
    config = directory / "aegis.yaml"
    config.write_text("{}\n")
    port = free_port()
    twin_dir = directory / "twin"
    twin_dir.mkdir()
    (twin_dir / "aegis.yaml").write_text("{}\n")
    processes: list[subprocess.Popen] = []
    try:
        processes.append(spawn("target", str(target_port)))
        aegis = start_aegis(directory, port, args.aegis_log)
        processes.append(aegis)
        # The idle twin: a second aegis up that never gets a monitor, measured over the same
        # window, so what the monitors cost is told apart from what aegis costs anyway under
        # the same load (an idle rate taken earlier drifts with the machine).
        twin_port = free_port()
        twin = start_aegis(twin_dir, twin_port, None)
        processes.append(twin)
        await wait_healthy(port, aegis)
        await wait_healthy(twin_port, twin)
        await asyncio.sleep(SETTLE_SECONDS)
        idle_cpu = cpu_seconds(aegis_pids(aegis, data_dir))
        twin_idle_cpu = cpu_seconds(aegis_pids(twin, twin_dir / ".aegis"))
        await asyncio.sleep(args.idle_seconds)
        idle_cpu = (cpu_seconds(aegis_pids(aegis, data_dir)) - idle_cpu) / args.idle_seconds
        twin_idle_cpu = (
            cpu_seconds(aegis_pids(twin, twin_dir / ".aegis")) - twin_idle_cpu
        ) / args.idle_seconds
        idle_rss = rss_mb(aegis_pids(aegis, data_dir))
        print(
            f"aegis up idle (with its Redis): {idle_rss:.0f} MB RSS, "
            f"{idle_cpu * 1000:.0f} ms of CPU a second (its twin: {twin_idle_cpu * 1000:.0f})",
            flush=True,
        )

        config.write_text(monitors_yaml(target_url, args.monitors, args.interval))
        baseline = spawn(
            "baseline", target_url, str(args.monitors), str(args.interval), log=args.baseline_log
        )
        processes.append(baseline)
        ids = await wait_for_monitors(data_dir, args.monitors)
        plain = {n: n for n in range(1, args.monitors + 1)}
        print(f"warm-up {args.interval} s, then {args.seconds} s measured", flush=True)
        await asyncio.sleep(args.interval)

        pids = aegis_pids(aegis, data_dir)
        twin_pids = aegis_pids(twin, twin_dir / ".aegis")
        redis = [pid for pid in pids if pid != aegis.pid and pid not in children(aegis)]
        store = Store(f"sqlite+aiosqlite:///{data_dir / 'aegis.sqlite3'}")
        rounds: list[Round] = []
        window = args.seconds / args.rounds
        try:
            for number in range(args.rounds):
                on = await measure(pids, redis, twin_pids, [baseline.pid], seconds=window)
                if number == args.rounds - 1:
                    extra_rss = rss_mb(aegis_pids(aegis, data_dir)) - idle_rss
                    baseline_rss = rss_mb([baseline.pid])
                await pause_all(store, True, args.interval)
                await asyncio.sleep(PAUSE_SETTLE_SECONDS)
                off = await measure(pids, redis, twin_pids, [baseline.pid], seconds=window)
                await pause_all(store, False, args.interval)
                rounds.append(Round(on, off))
                print(f"round {number + 1} of {args.rounds} measured", flush=True)
        finally:
            await store.close()
        for process in processes:
            if process.poll() is not None:
                raise RuntimeError(f"{process.args[1:3]} exited with {process.returncode}")
        await asyncio.sleep(2)  # checks of slots just before the end arrive now
        stamps = await fetch_log(target_url)
        if args.stamps:
            windows = [each.on.window for each in rounds]
            args.stamps.write_text(json.dumps({"stamps": stamps, "ids": ids, "windows": windows}))
        seen = await cards_seen(args, config, target_url, data_dir, port)
        crossed: dict[int, float] = {}  # the first (failing) check of each: it crosses
        for at, n, _ in await fetch_log(target_url):
            if n < 0:
                crossed.setdefault(-n, at)
        card_latency = [(seen[n] - at) * 1000 for n, at in crossed.items() if n in seen]
    finally:
        for process in reversed(processes):
            stop(process)
        EmbeddedRedis(data_dir).stop()  # a daemon: stopped here whatever aegis up did
        EmbeddedRedis(twin_dir / ".aegis").stop()

    aegis_late, baseline_late = [], []
    for each in rounds:
        late = lateness(stamps, AEGIS_AGENT, ids, args.interval, each.on.window)
        each.checks = len(late)
        aegis_late += late
        baseline_late += lateness(stamps, BASELINE_AGENT, plain, args.interval, each.on.window)
    measured = sum(each.on.seconds for each in rounds)
    return (
        Side("baseline", len(baseline_late), sum(r.on.cpu[3] for r in rounds), baseline_late),
        Side(
            "aegis up",
            len(aegis_late),
            sum(r.on.cpu[0] for r in rounds),
            aegis_late,
            extra_rss,
            idle_cpu * measured,
            sum(r.on.cpu[1] for r in rounds),
            sum(r.on.cpu[2] for r in rounds),
            idle_cpu / twin_idle_cpu,
            rounds,
        ),
        baseline_rss,
        card_latency,
    )


async def measure(*groups: list[int], seconds: float) -> Window:
    """The CPU seconds each group of processes spends over the next ``seconds``."""
    before, start = [cpu_seconds(pids) for pids in groups], time.time()
    await asyncio.sleep(seconds)
    after, end = [cpu_seconds(pids) for pids in groups], time.time()
    return Window((start, end), tuple(b - a for a, b in zip(before, after, strict=True)))


async def pause_all(store: Store, paused: bool, interval: int) -> None:
    """Pause every monitor, or resume each at its next wall-clock slot, as aegis's own pause
    does but for the slot: aegis's resume checks at once, which for all of them is a burst.
    A resumed monitor counts as checked now: otherwise the minutes it was paused and the
    minute to its slot make it stale, and the watchdog's card about that lands in the window."""
    moment = now()
    async with store.write() as conn:
        ids = (await conn.execute(select(monitors.c.id))).scalars().all()
        changes = [
            {"monitor_id": monitor_id, "paused": paused}
            | ({} if paused else _resumed(monitor_id, interval, moment))
            for monitor_id in ids
        ]
        await conn.execute(MOVE_MANY, changes)


def _resumed(monitor_id: int, interval: int, moment) -> dict:
    # A slot less than a clock turn away could not be claimed in time (aegis's own resume
    # checks at once instead): the first slot is one at least RESUME_AHEAD away.
    following = next_slot(monitor_id, interval, moment + RESUME_AHEAD)
    return {"last_check_at": moment, "next_check_at": following}


async def cards_seen(args, config: Path, target_url: str, data_dir: Path, port: int) -> dict:
    """Add ``--cards`` monitors that fail at once (``fail_after: 1``), one every 2 s (Telegram
    lets a bot send one message a second to a chat, and so does aegis: a burst of cards would
    measure that limit), and note when each one's card shows in the owner's chat at the
    emulator, read every 20 ms: n to the time seen."""
    from aegis.botapi.endpoint import EMULATOR_PREFIX
    from bot.config.secrets import SecretFiles
    from emulator import DEFAULT_USER
    from emulator.client import EmulatorClient

    key = SecretFiles(data_dir).get_or_create("emulator-key", nbytes=18)
    client = EmulatorClient(f"http://127.0.0.1:{port}{EMULATOR_PREFIX}", key)
    await client.send_message("/start")  # the owner's chat exists once they have written

    async def add_one_by_one() -> None:
        for n in range(1, args.cards + 1):
            monitor = (
                f"  d{n}:\n    http: {target_url}/down/{n}\n    every: 60s\n    fail_after: 1\n"
            )
            config.write_text(config.read_text() + monitor)
            await asyncio.sleep(CARD_GAP_SECONDS)

    adding = asyncio.create_task(add_one_by_one())
    seen: dict[int, float] = {}
    deadline = time.monotonic() + args.cards * CARD_GAP_SECONDS + 60
    while len(seen) < args.cards and time.monotonic() < deadline:
        for message in await client.messages(DEFAULT_USER["id"]):
            text = message.get("text") or ""
            if message.get("from_bot") and text.startswith("🔴 d"):
                seen.setdefault(int(text[3:].split(" ", 1)[0]), time.time())
        await asyncio.sleep(0.02)
    await adding
    return seen


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--monitors", type=int, default=500, help="http monitors (default 500)")
    parser.add_argument(
        "--interval", type=int, default=60, help="seconds between a monitor's checks (default 60)"
    )
    parser.add_argument(
        "--seconds", type=int, default=180, help="measured window after a warm-up of one interval"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="the measured seconds in this many windows, each followed by one as long with "
        "every monitor paused (default 3)",
    )
    parser.add_argument(
        "--idle-seconds",
        type=float,
        default=60,
        help="aegis and its twin idle side by side this long first, for their ratio (default 60)",
    )
    parser.add_argument(
        "--cards", type=int, default=20, help="monitors that go down at the end, for card latency"
    )
    parser.add_argument("--aegis-log", type=Path, help="keep aegis up's stderr in this file")
    parser.add_argument("--baseline-log", type=Path, help="keep the baseline's stderr here")
    parser.add_argument(
        "--stamps",
        type=Path,
        help="write every request the target saw (arrival, n, agent), aegis's ids of the n and "
        "the measured windows to this file, as JSON",
    )
    args = parser.parse_args()
    if args.interval < 10:
        parser.error("aegis accepts intervals of 10 s at least")
    if args.rounds < 1:
        parser.error("--rounds must be 1 or more")
    with tempfile.TemporaryDirectory(prefix="aegis-bench-") as directory:
        if args.aegis_log is None:
            args.aegis_log = Path(directory) / "aegis.log"
        try:
            baseline, aegis, baseline_rss, cards = await bench(args, Path(directory))
        except Exception:
            log = Path(args.aegis_log)
            if log.exists():
                print(f"aegis up's stderr:\n{log.read_text()[-4000:]}", file=sys.stderr)
            raise
    report(args, baseline, aegis, baseline_rss, cards)


if __name__ == "__main__":
    asyncio.run(main())
