"""Outages logged like a person would want (jobs/worker/outages.py): one line when a dependency goes
away, one when it is back with how long and how many tries waited, and no traceback for a job
that only waited; a real bug keeps its traceback. Through a real Dramatiq worker on Redis."""

from __future__ import annotations

import asyncio
import logging
import threading

import dramatiq
import pytest
import redis
from telegram.error import BadRequest, Forbidden, NetworkError, TimedOut

from bot.errors import StoreError
from bot.store import migrate
from bot.store.database import Store
from jobs import load_actors
from jobs.worker.outages import Outages, dependency_of, outages
from tests.helpers.stack import eventually, make_settings, running_worker


def test_an_outage_is_one_line_away_and_one_line_back(caplog):
    moment = [100.0]
    record = Outages(clock=lambda: moment[0])
    caplog.set_level(logging.INFO, logger="jobs.worker.outages")
    for n in range(5):
        record.failed("the database", StoreError("connection refused"), f"job-{n % 2}")
    record.worked("ping")  # it never failed on the database: says nothing of it
    assert record.away() == ["the database"]
    moment[0] = 120.0
    record.worked("job-1")
    assert record.away() == []
    record.worked("job-0")  # already back: nothing more
    assert [r.getMessage() for r in caplog.records] == [
        "the database is unreachable (StoreError: connection refused); what needs it waits "
        "and is tried again",
        "the database is back after 20 s; 5 tries waited for it",
    ]


def test_what_counts_as_a_dependency_away():
    assert dependency_of(StoreError("x")) == "the database"
    assert dependency_of(redis.ConnectionError("x")) == "Redis"
    assert dependency_of(TimedOut()) == "Telegram"
    assert dependency_of(NetworkError("x")) == "Telegram"
    for answered in (BadRequest("chat not found"), Forbidden("blocked"), ValueError("bug")):
        assert dependency_of(answered) is None


@pytest.mark.redis_server
async def test_a_job_that_waits_out_an_outage_logs_no_traceback_and_a_bug_keeps_one(
    caplog, tmp_path, redis_server_url, redis_namespace
):
    database_url = f"sqlite+aiosqlite:///{tmp_path / 'aegis.sqlite3'}"
    settings = make_settings(tmp_path / "data", database_url, redis_server_url)
    store = Store(database_url)
    await migrate.upgrade(store)
    await store.close()
    broker = load_actors(settings, redis_server_url, namespace=redis_namespace)
    tries = {"waits": 0, "breaks": 0}
    done = threading.Event()

    @dramatiq.actor(broker=broker, max_retries=10, min_backoff=10, max_backoff=50)
    def waits() -> None:
        tries["waits"] += 1
        if tries["waits"] <= 4:
            raise StoreError("the database (test) is unavailable: connection refused")
        done.set()

    @dramatiq.actor(broker=broker, max_retries=0)
    def breaks() -> None:
        tries["breaks"] += 1
        raise ValueError("a real bug")

    caplog.set_level(logging.INFO)
    with running_worker(broker):
        waits.send()
        breaks.send()
        assert await asyncio.to_thread(done.wait, 30)
        await eventually(lambda: tries["breaks"] == 1)
    assert outages.away() == []
    lines = [(r.levelno, r.getMessage(), r.exc_info is not None) for r in caplog.records]
    tracebacks = [message for level, message, traced in lines if traced]
    assert len(tracebacks) == 1 and "breaks" in tracebacks[0]  # the bug, and only the bug
    said = [message for _, message, _ in lines if message.startswith("the database is")]
    assert said == [
        "the database is unreachable (StoreError: the database (test) is unavailable: "
        "connection refused); what needs it waits and is tried again",
        said[1],
    ]
    assert said[1].startswith("the database is back after ") and "4 tries waited" in said[1]
