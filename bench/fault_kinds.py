"""The faults of bench/faults.py, each injected into a running stack mid-burst; the suite runs
each in a stack of its own and measures what it did to the replies."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from procfile import postgres_outage
from sqlalchemy import select

from bot.store.tables import leases
from emulator.models import Outage

if TYPE_CHECKING:
    from faults import Run

POISON = "poison-7f3a"  # the emulator answers 500 to every send whose text holds it


@dataclass(frozen=True)
class Fault:
    name: str
    inject: Callable[[Run], Awaitable[None]]
    # What the run must have: "postgres" (and "postgres-proxy": aegis reaching it through a
    # TcpProxy), "redis-aof", "redis-noaof" (a redis-server of its own).
    needs: str = ""


async def kill_worker(run: Run) -> None:
    run.procfile.restart("worker")


async def kill_web(run: Run) -> None:
    run.procfile.restart("web")


async def kill_clock(run: Run) -> None:
    run.procfile.restart("clock")
    run.watchers.append(asyncio.create_task(_lease_taken(run, run.procfile.running["clock"].pid)))


async def _lease_taken(run: Run, pid: int) -> None:
    """How long after the kill the new clock held the clock's lease (aegis/clock.py)."""
    while True:
        with contextlib.suppress(Exception):
            async with run.store.read() as conn:
                holder = (
                    await conn.execute(select(leases.c.holder).where(leases.c.name == "clock"))
                ).scalar()
            if holder and holder.endswith(f":{pid}"):
                took = time.perf_counter() - run.fault_started
                run.notes.append(f"the new clock held the lease {took:.1f} s after the kill")
                return
        await asyncio.sleep(0.25)


async def restart_redis(run: Run) -> None:
    """The worker paused first for ``--backlog`` seconds, so deliveries wait in Redis as they do
    under load (at the burst's rate the queues are all but empty), then Redis killed and started
    again, then the worker let go on."""
    worker = run.procfile.running["worker"]
    worker.send_signal(signal.SIGSTOP)
    try:
        await asyncio.sleep(run.args.backlog)
        held = run.redis.held_jobs()
        run.redis.kill()
        await asyncio.to_thread(run.redis.start)
    finally:
        worker.send_signal(signal.SIGCONT)
    run.notes.append(
        f"{held} jobs were in Redis at the kill (the worker paused {run.args.backlog:g} s); "
        f"{run.redis.held_jobs()} after the restart"
    )


async def postgres_down(run: Run) -> None:
    """The server crashed, as its clients see it: every connection reset, none taken."""
    await run.proxy.cut()
    await asyncio.sleep(run.args.outage)
    await run.proxy.restore()
    run.notes.append(f"every connection to Postgres reset and refused for {run.args.outage:g} s")


async def postgres_refusing(run: Run) -> None:
    """The server up, the database refusing connections (SQLSTATE 55000), its own cut off."""
    await postgres_outage(run.args.postgres_url, run.database_url, run.args.outage)
    run.notes.append(f"the database refused every connection for {run.args.outage:g} s")


async def poisoned_reply(run: Run) -> None:
    run.emulator.bot.outage = Outage(500, frozenset({"sendmessage"}), text_contains=POISON)
    run.poisoned = run.args.messages  # one note past the burst's own
    run.emulator.note(run.users[0], run.poisoned, f" {POISON}")


async def storm_429(run: Run) -> None:
    run.emulator.bot.outage = Outage(429, frozenset({"sendmessage"}))
    await asyncio.sleep(run.args.storm)
    refused, run.emulator.bot.outage = run.emulator.bot.outage.refused, None
    run.notes.append(f"{refused} sends answered 429 (retry after 1 s) in {run.args.storm:g} s")


async def kill_between_send_and_record(run: Run) -> None:
    """kill -9 the worker from inside the emulator's handling of its next send: the message is
    stored (Telegram accepted it) and the worker never reads the answer, so never records it."""
    loop = asyncio.get_running_loop()

    def land() -> None:
        run.emulator.on_send = None
        run.procfile.kill("worker")
        loop.call_soon(run.procfile.start, "worker")

    run.emulator.on_send = land


FAULTS = {
    fault.name: fault
    for fault in (
        Fault("kill-worker", kill_worker),
        Fault("kill-web", kill_web),
        Fault("kill-clock", kill_clock),
        Fault("redis-restart-aof", restart_redis, "redis-aof"),
        Fault("redis-restart-noaof", restart_redis, "redis-noaof"),
        Fault("postgres-outage", postgres_down, "postgres-proxy"),
        Fault("postgres-no-connections", postgres_refusing, "postgres"),
        Fault("poisoned-reply", poisoned_reply),
        Fault("429-storm", storm_429),
        Fault("kill-between-send-and-record", kill_between_send_and_record),
    )
}
