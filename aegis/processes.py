"""The processes of the Procfile (web, worker, clock) and ``up``, which runs all three at once."""

from __future__ import annotations

import asyncio
import faulthandler
import gc
import logging
import signal
import threading

from aiohttp import web

from aegis import instance
from aegis.botapi.endpoint import chat_page_url
from aegis.clock import run_clock
from aegis.runtime import RedisTarget, open_broker, open_store, resolve_redis
from aegis.web import create_web_app
from bot.config.secrets import SecretFiles, callback_signer
from bot.config.settings import Settings
from bot.core import Platform
from bot.upkeep.schedules import builtin_schedules
from jobs.worker.enqueue import make_enqueue
from jobs.worker.threads import Worker

logger = logging.getLogger(__name__)
# At most between the polls of a consumer holding messages; an idle one waits for a wake
# (jobs/worker/broker.py), and so does an idle worker thread (jobs/worker/threads.py).
WORKER_TIMEOUT_MS = 100
STARTED_AFTER_SECONDS = 10.0  # by then a process has built what it keeps for its lifetime
# On stop, how long the web server lets requests in flight finish before it cancels them
# (aiohttp's own default is 60 s). Its clients ask again: PTB's polling, peers, the chat page.
WEB_STOP_SECONDS = 10.0


def freeze_startup() -> None:
    """Move what the process built at startup (modules, tables, the platform: hundreds of
    thousands of objects) out of the cyclic garbage collector's sight. Its full collections
    otherwise walk them all, about 0.1 s of CPU each, as often as the monitors' checks make
    garbage (bench/monitors.py); objects are still freed as they always are, by reference."""
    gc.collect()
    gc.freeze()


async def serve_web(
    settings: Settings, target: RedisTarget, stop: asyncio.Event, broker=None
) -> None:
    broker = broker or open_broker(settings, target)
    app = create_web_app(settings, broker, target.description)
    runner = web.AppRunner(
        app, access_log=None, handle_signals=False, shutdown_timeout=WEB_STOP_SECONDS
    )
    await runner.setup()
    site = web.TCPSite(runner, settings.host, settings.port)
    await site.start()
    _announce(settings, target)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def start_worker(settings: Settings, target: RedisTarget, broker=None) -> Worker:
    broker = broker or open_broker(settings, target)
    worker = Worker(
        broker, worker_threads=settings.worker_threads, worker_timeout=WORKER_TIMEOUT_MS
    )
    worker.start()
    return worker


async def serve_clock(
    settings: Settings, target: RedisTarget, stop: asyncio.Event, broker=None
) -> None:
    broker = broker or open_broker(settings, target)
    store = await open_store(settings)
    try:
        enqueue = make_enqueue(broker)
        signer = callback_signer(SecretFiles(settings.data_dir))
        platform = Platform.build(settings, store, signer, enqueue)  # for its monitors
        builtins = builtin_schedules(settings.briefing_at, settings.weekly_review_at)
        await run_clock(
            store,
            enqueue,
            stop,
            platform.config,
            platform.monitors,
            builtins=builtins,
            zone=settings.zone,
        )
    finally:
        await store.close()


async def serve_up(settings: Settings, target: RedisTarget, stop: asyncio.Event) -> None:
    """Web, worker and clock in one process: a laptop or a 1 GB VPS."""
    store = await open_store(settings)  # migrate once, before the three start
    await store.close()
    broker = open_broker(settings, target)  # once: the three share it and its actors
    worker = await asyncio.to_thread(start_worker, settings, target, broker)
    try:
        await asyncio.gather(
            serve_web(settings, target, stop, broker), serve_clock(settings, target, stop, broker)
        )
    finally:
        logger.info("web and clock stopped; stopping the worker (it lets running jobs finish)")
        await asyncio.to_thread(worker.stop)
        logger.info("worker stopped")


def _stopping(stop: asyncio.Event, name: str):
    def signalled() -> None:
        if not stop.is_set():
            logger.info("%s: stopping", name)
        stop.set()

    return signalled


def dump_threads_on_sigusr1() -> None:
    """``kill -USR1 <pid>`` writes every thread's stack to stderr (the log): what a process
    that will not stop is waiting on, without stopping it."""
    faulthandler.register(signal.SIGUSR1, all_threads=True)


def run_async_process(name: str, settings: Settings, serve) -> int:
    """Run one of the serve_* coroutines until SIGINT or SIGTERM; first of all, hold this data
    dir's lock for the role (aegis/instance.py), so a second one starts nothing."""
    instance.hold_for(name, settings)
    dump_threads_on_sigusr1()
    if name in ("up", "web"):
        instance.refuse_taken_ports(settings)
    target = resolve_redis(settings)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, _stopping(stop, name))
        loop.call_later(STARTED_AFTER_SECONDS, freeze_startup)
        await serve(settings, target, stop)

    try:
        asyncio.run(main())
    finally:
        if target.started_here and name == "up":
            target.embedded.stop()
    return 0


def run_worker_process(settings: Settings) -> int:
    dump_threads_on_sigusr1()
    target = resolve_redis(settings)
    asyncio.run(_migrate_only(settings))
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    worker = start_worker(settings, target)
    logger.info("worker running with %d threads on %s", settings.worker_threads, target.description)
    stop.wait(STARTED_AFTER_SECONDS)
    freeze_startup()
    while not stop.is_set():
        stop.wait(1.0)
    logger.info("worker: stopping (it lets running jobs finish)")
    worker.stop()
    logger.info("worker stopped")
    return 0


async def _migrate_only(settings: Settings) -> None:
    store = await open_store(settings)
    await store.close()


def _announce(settings: Settings, target: RedisTarget) -> None:
    """What runs where, and what to try first, once the web server listens (a terminal's
    first screen; the log has the same without the chat page's key)."""
    logger.info("web server on %s", settings.web_url)
    database = "a database at AEGIS_DATABASE_URL" if settings.database_url else "SQLite"
    where = [
        f"  Data dir:   {settings.data_dir.resolve()} ({database}; Redis: {target.description})",
        f"  MCP:        http://127.0.0.1:{settings.mcp_port}/mcp for coding agents "
        "(aegis agent token SLUG)",
    ]
    if settings.uses_emulator:
        head = [
            "  aegis is running with the built-in Telegram emulator (no AEGIS_TELEGRAM_TOKEN).",
            f"  Open the chat page: {chat_page_url(settings)}",
        ]
        first = "send /help in the chat page, then /demo"
    else:
        head = ["  aegis is running as your Telegram bot."]
        first = "send /help to the bot in Telegram, then /demo"
    tips = f"  Try first:  {first}; `aegis status` and `aegis logs` from a shell."
    print("\n" + "\n".join([*head, "", *where, tips]) + "\n", flush=True)
