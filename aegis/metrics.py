"""``GET /metrics`` on the web port: the platform's numbers in the Prometheus text format, for a
Prometheus (or anything that reads it) to scrape, behind a bearer token.

The token is ``AEGIS_METRICS_TOKEN`` or, unset, the data dir's ``secrets/metrics-token`` (made at
the first start, mode 0600): point Prometheus's ``authorization.credentials_file`` at a copy of
it. A scrape reads what bot/upkeep/gauges.py reads (every read bounded), the broker's queues and
the deliveries counted by outcome in Redis, and this process's own CPU and memory; its series are
a fixed set plus one per queue, schedule, model and live process.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import Iterable

from aiohttp import web
from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from bot.config.secrets import SecretFiles
from bot.config.settings import Settings
from bot.errors import BrokerError, StoreError
from bot.upkeep.gauges import Gauges, read_gauges
from jobs.worker.broker import delivery_counts, queue_depths

TOKEN_FILE = "metrics-token"  # noqa: S105 (a file name, not a secret)
UNSENT_STATUSES = ("pending", "sending", "failed")


def metrics_token(settings: Settings) -> str:
    if settings.metrics_token is not None:
        return settings.metrics_token.get_secret_value()
    return SecretFiles(settings.data_dir).get_or_create(TOKEN_FILE)


def authorized(request: web.Request, token: str) -> bool:
    scheme, _, offered = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(offered.encode(), token.encode())


async def scrape(store, broker) -> bytes:
    """One scrape: the families of this moment, in the text format (``broker`` None: without
    the queues and deliveries, as when Redis cannot be reached)."""
    began = time.perf_counter()
    gauges = await read_gauges(store)
    queues = deliveries = None
    try:
        if broker is not None:
            queues, deliveries = await asyncio.to_thread(_from_redis, broker)
    except BrokerError:
        pass
    families = list(_families(gauges, queues, deliveries))
    families.append(
        _gauge("scrape_duration_seconds", "How long this scrape took.", time.perf_counter() - began)
    )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(families))
    ProcessCollector(registry=registry)  # this web process's CPU, memory and open files
    return generate_latest(registry)


def _from_redis(broker) -> tuple[dict[str, int], dict[str, int]]:
    return queue_depths(broker), delivery_counts(broker)


class _Fixed:
    """A collector that hands out families already read (the reads are async; collect is not)."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


def _families(gauges: Gauges, queues, deliveries) -> Iterable[Metric]:
    yield _gauge(
        "broker_up", "1 when the broker's Redis answered this scrape.", int(queues is not None)
    )
    if queues is not None:
        yield _labelled(
            "queue_messages", "Jobs waiting per queue (ready and delayed).", "queue", queues
        )
        counter = CounterMetricFamily(
            "aegis_deliveries",
            "Deliveries to Telegram by outcome (since Redis last lost its data).",
            labels=["outcome"],
        )
        for outcome, count in deliveries.items():
            counter.add_metric([outcome], count)
        yield counter
    unsent = {status: gauges.outbox.get(status, 0) for status in UNSENT_STATUSES}
    yield _labelled(
        "outbox_unsent_messages", "Outbox rows not sent yet, by status.", "status", unsent
    )
    yield _gauge(
        "outbox_oldest_unsent_age_seconds",
        "How long the oldest message still to send has waited (0: none waits).",
        gauges.oldest_owed_seconds,
    )
    yield _gauge(
        "cards_pending",
        "Cards waiting for an answer (approvals, choices, questions).",
        gauges.cards_pending,
    )
    yield _labelled(
        "agent_runs_under_way",
        "Agent runs queued, running or parked.",
        "state",
        gauges.runs_under_way,
    )
    yield _labelled(
        "agent_runs_recent_endings",
        "Of the latest 500 agent runs, the ended ones by how they ended.",
        "state",
        gauges.recent_endings,
    )
    yield _gauge(
        "agent_runs_recent_no_effect",
        "Of the latest 500 agent runs, those that completed with zero effect.",
        gauges.recent_no_effect,
    )
    yield _labelled(
        "schedule_lag_seconds",
        "How far past due each enabled schedule is (0: not due yet).",
        "schedule",
        gauges.schedule_lag,
    )
    last_ok = GaugeMetricFamily(
        "aegis_model_last_success_timestamp_seconds",
        "When each model last answered a call (Unix time).",
        labels=["provider", "model"],
    )
    for (provider, model), at in sorted(gauges.model_last_ok.items()):
        last_ok.add_metric([provider, model], at.timestamp())
    yield last_ok
    alive: dict[str, int] = {}
    memory = GaugeMetricFamily(
        "aegis_process_resident_memory_bytes",
        "Resident memory of each live aegis process at its last heartbeat.",
        labels=["kind", "process"],
    )
    for process in gauges.processes:
        alive[process.kind] = alive.get(process.kind, 0) + 1
        if process.rss_bytes is not None:
            memory.add_metric([process.kind, process.process_id], process.rss_bytes)
    yield _labelled(
        "processes_alive", "aegis processes with a recent heartbeat, by kind.", "kind", alive
    )
    yield memory


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"aegis_{name}", documentation, value=value)


def _labelled(name: str, documentation: str, label: str, values: dict) -> GaugeMetricFamily:
    family = GaugeMetricFamily(f"aegis_{name}", documentation, labels=[label])
    for key, value in sorted(values.items()):
        family.add_metric([key], value)
    return family


async def metrics_response(request: web.Request, token: str, store, broker) -> web.Response:
    if not authorized(request, token):
        return web.Response(
            status=401,
            text="A bearer token is needed: AEGIS_METRICS_TOKEN, or the data dir's "
            f"secrets/{TOKEN_FILE}.\n",
            headers={"WWW-Authenticate": 'Bearer realm="aegis metrics"'},
        )
    try:
        body = await scrape(store, broker)
    except StoreError as exc:
        return web.Response(status=503, text=f"The database cannot be read: {exc}\n")
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
