"""The two processes of bench/monitors.py besides aegis, each run as ``python
bench/monitor_sides.py <side> …`` until killed:

- ``target <port>``: the local target, an aiohttp server answering ``GET /m/<n>`` with "ok" and
  ``GET /down/<n>`` with 503, stamping each request (its arrival, its ``n``, its User-Agent);
  ``GET /log`` hands the stamps over;
- ``baseline <url> <count> <interval>``: the bare aiohttp client aegis is measured against, one
  GET per monitor per interval at the monitor's slot times, over one ClientSession.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import sys
import time

import aiohttp

from bot.monitors.monitor import phase_of

BASELINE_AGENT = "bench-baseline"


async def serve_target(port: int) -> None:
    """Answer GET /m/<n> with "ok", stamping each request; GET /log hands the stamps over."""
    from aiohttp import web

    stamps: list[tuple[float, int, str]] = []

    async def monitored(request: web.Request) -> web.Response:
        agent = request.headers.get("User-Agent", "")
        stamps.append((time.time(), int(request.match_info["n"]), agent))
        return web.Response(text="ok")

    async def failing(request: web.Request) -> web.Response:
        stamps.append((time.time(), -int(request.match_info["n"]), ""))  # down checks: n < 0
        return web.Response(status=503, text="down")

    async def log(request: web.Request) -> web.Response:
        return web.json_response(stamps)

    app = web.Application()
    app.router.add_get("/m/{n:\\d+}", monitored)
    app.router.add_get("/down/{n:\\d+}", failing)
    app.router.add_get("/log", log)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    await asyncio.Event().wait()  # until killed


async def run_baseline(url: str, count: int, interval: int) -> None:
    """One GET per monitor per interval at its slot times, over one ClientSession, until killed."""
    headers = {"User-Agent": BASELINE_AGENT}
    async with aiohttp.ClientSession(headers=headers) as session:

        async def get(n: int) -> None:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with session.get(f"{url}/m/{n}") as response:
                    await response.read()

        now = time.time()
        due = [(next_slot_after(n, interval, now), n) for n in range(1, count + 1)]
        heapq.heapify(due)
        pending: set[asyncio.Task] = set()
        while True:
            slot, n = due[0]
            wait = slot - time.time()
            if wait > 0:
                await asyncio.sleep(wait)
            heapq.heapreplace(due, (slot + interval, n))
            task = asyncio.create_task(get(n))
            pending.add(task)
            task.add_done_callback(pending.discard)


def next_slot_after(monitor_id: int, interval: int, moment: float) -> float:
    phase = phase_of(monitor_id, interval)
    return phase + ((moment - phase) // interval + 1) * interval


def slot_at_or_before(monitor_id: int, interval: int, moment: float) -> float:
    phase = phase_of(monitor_id, interval)
    return phase + ((moment - phase) // interval) * interval


COMMANDS = {
    "target": lambda port: serve_target(int(port)),
    "baseline": lambda url, count, interval: run_baseline(url, int(count), int(interval)),
}

if __name__ == "__main__":
    side, *arguments = sys.argv[1:] or ["--help"]
    if side not in COMMANDS:
        sys.exit(f"usage: {sys.argv[0]} target <port> | baseline <url> <count> <interval>")
    asyncio.run(COMMANDS[side](*arguments))
