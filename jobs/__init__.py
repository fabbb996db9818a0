"""Dramatiq actors. Call ``load_actors(settings)`` once per process: it configures the broker
and then imports every actor module, in that order."""

from __future__ import annotations

from dramatiq.brokers.redis import RedisBroker

from bot.config.settings import Settings

ACTOR_MODULES = (
    "jobs.delivery",
    "jobs.ping",
    "jobs.interactions",
    "jobs.demo",
    "jobs.triage",
    "jobs.voice",
    "jobs.agent_runs",
    "jobs.delegation",
    "jobs.schedules",
    "jobs.briefing",
    "jobs.retention",
    "jobs.reminders",
    "jobs.topics",
    "jobs.peer_requests",
    "jobs.monitors.checks",
    "jobs.monitors.watches",
    "jobs.monitors.processes",
)


def load_actors(settings: Settings, redis_url: str, *, namespace: str | None = None) -> RedisBroker:
    import importlib

    from jobs.worker.broker import NAMESPACE, configure_broker
    from jobs.worker.resources import use_settings

    broker = configure_broker(redis_url, namespace=namespace or NAMESPACE)
    use_settings(settings)
    for module in ACTOR_MODULES:
        importlib.import_module(module)
    return broker
