"""``aegis web``: the aiohttp server with the Telegram webhook (or long polling), health, and,
with no bot token, the built-in Bot API emulator and its chat page under ``/emulator``."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta

from aiohttp import web
from dramatiq.brokers.redis import RedisBroker
from telegram import Bot, Update
from telegram.error import InvalidToken, TelegramError

from aegis import aegis_version
from aegis.botapi.endpoint import EMULATOR_PREFIX, bot_token, emulator_key, make_bot, owner_chats
from aegis.mcp.listener import MCP_PATH, Listener, listening
from aegis.metrics import metrics_response, metrics_token
from aegis.request_body import read_at_most
from aegis.runtime import make_queue_depths, open_store
from bot.actions.held_calls import HeldCalls
from bot.chat.owners import Owners
from bot.chat.updates import UpdateLog
from bot.config.secrets import SecretFiles, callback_signer
from bot.config.settings import Settings
from bot.core import Platform
from bot.errors import BrokerError, StoreError, TransportError
from bot.monitors.watchdog import Watchdog
from bot.timeutil import now
from bot.upkeep.heartbeats import BEAT_EVERY, Heartbeats, process_id
from bot.upkeep.job_runs import JobRunRecord, JobRunStatus
from emulator import DEFAULT_USER, EmulatorState, create_emulator_app
from federation import client as federation_client
from federation import server as federation_server
from federation.acting import Acting
from federation.links import Peers
from federation.requests import PeerRequests
from handlers.application import BOT_COMMANDS, build_application
from handlers.intake import Intake
from handlers.services import Services
from jobs.worker.enqueue import make_enqueue
from jobs.worker.redis_client import loop_client

logger = logging.getLogger(__name__)
WEBHOOK_PATH = "/telegram/webhook"
EMULATOR_UPLOAD_BYTES = 50 * 2**20
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"  # noqa: S105 (a header name)
WATCHDOG_EVERY = 60.0  # seconds between the watchdog's passes
NONCE_CONNECTIONS = 32  # Redis connections peers' requests share for their nonces


@dataclass
class WebContext:
    """What the web process holds while it runs; created inside its event loop."""

    settings: Settings
    broker: RedisBroker
    broker_description: str
    webhook_secret: str | None = None
    services: Services | None = None
    intake: Intake | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    mcp: Listener | None = None  # the MCP server's port, while it is held
    background: set[asyncio.Task] = field(default_factory=set)
    metrics_token: str = ""  # the bearer token /metrics asks for (aegis/metrics.py)


WEB = web.AppKey("web", WebContext)
EMULATOR = web.AppKey("emulator", EmulatorState)


def create_web_app(
    settings: Settings,
    broker: RedisBroker,
    broker_description: str,
    *,
    emulator_state: EmulatorState | None = None,
) -> web.Application:
    """The web process's app. ``emulator_state`` lets a restarted app keep the emulated chats."""
    # The webhook enforces AEGIS_WEBHOOK_MAX_BYTES itself; this cap is for the emulator, whose
    # Bot API takes documents the way Telegram does (up to 50 MB).
    app = web.Application(client_max_size=EMULATOR_UPLOAD_BYTES)
    context = WebContext(settings, broker, broker_description)
    if settings.public_url:
        context.webhook_secret = SecretFiles(settings.data_dir).get_or_create("webhook-secret")
    context.metrics_token = metrics_token(settings)
    app[WEB] = context
    app.router.add_post(WEBHOOK_PATH, telegram_webhook)
    app.router.add_get("/healthz", health)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/", index)
    federation_server.mount(app)
    if settings.uses_emulator:
        state = emulator_state or EmulatorState()
        app[EMULATOR] = state
        emulator = create_emulator_app(
            state, token=bot_token(settings), control_key=emulator_key(settings)
        )
        app.add_subapp(EMULATOR_PREFIX, emulator)
    app.cleanup_ctx.append(telegram_context)
    return app


async def telegram_context(app: web.Application) -> AsyncIterator[None]:
    context = app[WEB]
    settings = context.settings
    store = await open_store(settings)
    bot = make_bot(settings, read_timeout=40.0)
    services = _services(settings, store, context)
    application = build_application(bot, services)
    context.services = services
    first_retry = timedelta(seconds=settings.update_retry_seconds)
    context.intake = Intake(
        application,
        UpdateLog(store, bot_id(bot), first_retry=first_retry),
        replies_gathered=services.platform.outbox.deliveries_gathered,
    )
    stop = asyncio.Event()
    tasks = [
        _supervised(_run_telegram(context, application, bot, stop)),
        _supervised(_beat(services.platform.heartbeats, "web", stop)),
        _supervised(_watch_aegis(services.platform, stop)),
    ]
    # Calls held on their cards: the MCP server's agents' and the peers' requests.
    held = HeldCalls(services.platform.actions, hold=settings.mcp_hold_seconds)
    async with contextlib.AsyncExitStack() as stack:
        context.mcp = await _start_mcp(stack, settings, services, held)
        app[federation_server.SERVED].federation = await stack.enter_async_context(
            serving_peers(context, store, held)
        )
        yield
        stop.set()
        await _finish(tasks + list(context.background))
    if context.ready.is_set():
        await application.shutdown()
    await bot.shutdown()
    await store.close()


async def _start_mcp(
    stack: contextlib.AsyncExitStack, settings: Settings, services, held: HeldCalls
) -> Listener | None:
    """The MCP server on its loopback port. If it cannot listen the bot still runs, and the
    log and /healthz say why agents cannot reach it."""
    platform = services.platform
    chats = owner_chats(settings)
    tools = {  # aegis.mcp.server.ServedTools, made when the first client connects
        "platform": platform,
        "tokens": platform.tokens,
        "held": held,
        "owner_chat": chats[0] if chats else None,
    }
    try:
        listener = await stack.enter_async_context(listening(settings.mcp_port, tools))
    except OSError as exc:
        logger.error("%s", exc)
        return None
    logger.info("MCP server for agents at http://127.0.0.1:%s%s", settings.mcp_port, MCP_PATH)
    return listener


def _services(settings: Settings, store, context: WebContext) -> Services:
    files = SecretFiles(settings.data_dir)
    owner_ids = set(settings.owner_ids)
    if settings.uses_emulator:
        owner_ids.add(DEFAULT_USER["id"])
    signer = callback_signer(files)
    enqueue = make_enqueue(context.broker)
    platform = Platform.build(settings, store, signer, enqueue)
    federation_client.plug_into(platform)  # peers.status, for the MCP server's agents
    return Services(
        platform=platform,
        owners=Owners(store, owner_ids),
        signer=signer,
        enqueue=enqueue,
        queue_depths=make_queue_depths(context.broker),
        broker_description=context.broker_description,
        totp_secret=lambda: files.get("totp"),
    )


@contextlib.asynccontextmanager
async def serving_peers(
    context: WebContext, store, held: HeldCalls
) -> AsyncIterator[federation_server.Federation]:
    """The federation route: its checks, ``status`` (this aegis's health, version and queue
    depths, as a peer may ask for them) and the peers' requests, held on their cards."""
    settings = context.settings
    depths = make_queue_depths(context.broker)

    async def status() -> dict:
        try:
            queues = await depths()
        except BrokerError:
            queues = None
        database = await _database_ok(context)
        return {
            "instance": settings.peer_name,
            "version": aegis_version(),
            "ok": database,
            "database": database,
            "queues": queues,
        }

    peers = Peers(store, SecretFiles(settings.data_dir))
    client = loop_client(waiting_beyond=NONCE_CONNECTIONS)
    chats = owner_chats(settings)
    runs = context.services.platform.runs
    acting = Acting(PeerRequests(store), held, chats[0] if chats else None, runs.get)
    namespace = context.broker.namespace
    async with federation_server.serving(peers, client, namespace, status, acting) as fed:
        yield fed


def bot_id(bot: Bot) -> int:
    return int(bot.token.split(":", 1)[0])


async def _run_telegram(context: WebContext, application, bot: Bot, stop: asyncio.Event) -> None:
    """Connect to the Bot API and register (retrying until it answers), then poll or wait for
    the webhook. If this ever ends before shutdown, /healthz says so."""
    try:
        if not await _connect(context, application, bot, stop):
            return
        context.ready.set()
        await _open_topics(context)
        every = min(5.0, context.settings.update_retry_seconds / 2)
        context.background.add(_supervised(context.intake.run_retries(stop, every=every)))
        if not context.settings.public_url:
            await context.intake.poll(bot, stop)
    finally:
        if not stop.is_set() and not context.settings.public_url:
            context.ready.clear()
            logger.error("stopped receiving Telegram updates; see the error above")


async def _open_topics(context: WebContext) -> None:
    """With a forum set (AEGIS_OWNER_CHAT_ID, or an earlier /here), ask for the topics of the
    agents that have none there yet (jobs/topics.py)."""
    settings, svc = context.settings, context.services
    topics = svc.platform.topics
    chats = owner_chats(settings)
    if settings.owner_chat_id is not None and chats:
        await topics.seed(settings.owner_chat_id, home_chat_id=chats[0])
    forum = await topics.forum()
    if forum is None or not forum.on:
        return
    try:
        await svc.enqueue("open_topics")
    except BrokerError:
        logger.warning("broker down: agents' topics are made at the next start or /here")


async def _connect(context: WebContext, application, bot: Bot, stop: asyncio.Event) -> bool:
    delay = 0.05
    while not stop.is_set():
        try:
            await application.initialize()
            await bot.set_my_commands(BOT_COMMANDS)
            await _register(context, bot)
            return True
        except InvalidToken:
            logger.error("the Bot API refused the token; check AEGIS_TELEGRAM_TOKEN")
            return False
        except TelegramError as exc:
            logger.warning("Bot API not ready yet: %s", exc)
            await _sleep(stop, delay)
            delay = min(delay * 2, 30)
    return False


async def _register(context: WebContext, bot: Bot) -> None:
    """The webhook with its secret when AEGIS_PUBLIC_URL is set; else none, for long polling."""
    settings = context.settings
    if not settings.public_url:
        await bot.delete_webhook()
        where = "the built-in emulator" if settings.uses_emulator else "Telegram"
        logger.info("long polling %s", where)
        return
    url = settings.public_url.rstrip("/") + WEBHOOK_PATH
    await bot.set_webhook(
        url, secret_token=context.webhook_secret, allowed_updates=Update.ALL_TYPES
    )
    logger.info("webhook registered at %s", url)


async def telegram_webhook(request: web.Request) -> web.Response:
    context = request.app[WEB]
    # The secret is checked before the body is read, so a stranger cannot make us parse it.
    given = request.headers.get(SECRET_HEADER, "")
    if context.webhook_secret is None or not hmac.compare_digest(
        given.encode(), context.webhook_secret.encode()
    ):
        return web.json_response({"error": "forbidden"}, status=403)
    body = await read_at_most(request, context.settings.webhook_max_bytes)
    if body is None:
        return web.json_response({"error": "body too large"}, status=413)
    try:
        update = await context.intake.accept(_parsed(body))
    except (UnicodeDecodeError, ValueError, TransportError) as exc:
        return web.json_response({"error": f"not an update: {exc}"[:200]}, status=400)
    except StoreError:
        logger.warning("webhook update not recorded (database down); Telegram will resend it")
        return web.json_response({"error": "try again"}, status=503)
    if update is not None and context.ready.is_set():
        task = asyncio.create_task(context.intake.handle(update))
        context.background.add(task)
        task.add_done_callback(context.background.discard)
    return web.Response(status=200)


def _parsed(body: bytes):
    """The body's JSON. Nesting deep enough to exhaust the parser's stack (about a thousand
    levels) is refused like any other body that is not an update, not answered with a 500."""
    try:
        return json.loads(body.decode("utf-8"))
    except RecursionError:
        raise TransportError("nested too deeply") from None


async def health(request: web.Request) -> web.Response:
    context = request.app[WEB]
    checks = {
        "telegram": context.ready.is_set(),
        "database": await _database_ok(context),
        "mcp": context.mcp is not None and context.mcp.live,
    }
    ok = all(checks.values())
    return web.json_response({"ok": ok, **checks}, status=200 if ok else 503)


async def metrics(request: web.Request) -> web.Response:
    context = request.app[WEB]
    if context.services is None:
        return web.Response(status=503, text="aegis is still starting.\n")
    store = context.services.platform.store
    return await metrics_response(request, context.metrics_token, store, context.broker)


async def index(request: web.Request) -> web.Response:
    return web.Response(
        text="aegis is running. The chat page's address (with its key) is printed in the "
        "terminal that started aegis; `aegis doctor` checks the set-up.\n"
    )


async def _database_ok(context: WebContext) -> bool:
    if context.services is None:
        return False
    try:
        await context.services.platform.store.ping()
        return True
    except StoreError:
        return False


async def _beat(heartbeats: Heartbeats, kind: str, stop: asyncio.Event) -> None:
    process, started = process_id(kind), now()
    while not stop.is_set():
        try:
            await heartbeats.beat(process, kind, started)
        except StoreError as exc:
            logger.warning("heartbeat skipped: %s", exc)
        await _sleep(stop, BEAT_EVERY.total_seconds())
    try:
        await heartbeats.stop(process)
    except StoreError:
        pass


async def _watch_aegis(platform, stop: asyncio.Event) -> None:
    """The watchdog (bot/monitors/watchdog.py), here and not on the clock: a stopped clock or
    worker is among what it must see. Each pass is a job run with its summary."""
    watchdog = Watchdog(platform.monitors)
    while not stop.is_set():
        await _sleep(stop, WATCHDOG_EVERY)
        if stop.is_set():
            return
        started = now()
        chats = owner_chats(platform.settings)
        try:
            summary = await watchdog.watch(chats[0] if chats else None)
            record = JobRunRecord(
                "watchdog",
                f"web:{started.isoformat()}",
                JobRunStatus.COMPLETED,
                started,
                now(),
                summary,
            )
            await platform.job_runs.record_many([record])
        except StoreError as exc:
            logger.warning("watchdog pass skipped: %s", exc)


async def _sleep(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), timeout=seconds)
    except TimeoutError:
        pass


def _supervised(coroutine) -> asyncio.Task:
    """A background task whose crash is logged at once, not when it is garbage-collected."""
    task = asyncio.create_task(coroutine)
    task.add_done_callback(_log_crash)
    return task


def _log_crash(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.error("background task %s crashed", task.get_coro(), exc_info=task.exception())


async def _finish(tasks: list[asyncio.Task], grace: float = 5.0) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.wait(tasks, timeout=grace) if tasks else None
