"""Fixtures of the worker's tests."""

from __future__ import annotations

import pytest

from jobs.worker import broker as broker_module
from tests.helpers.wakes import LONG_WAIT, waking_broker_at


@pytest.fixture
def waking_broker(redis_server_url, redis_namespace, monkeypatch):
    """A waking broker whose idle consumers wait LONG_WAIT for a wake."""
    monkeypatch.setattr(broker_module, "IDLE_WAIT_SECONDS", LONG_WAIT)
    broker = waking_broker_at(redis_server_url, redis_namespace)
    yield broker
    broker.client.close()
