"""A worker killed with SIGKILL in the middle of an incident, on SQLite and Postgres with a real
Redis: the worker is an OS process of its own (tests/helpers/worker_process.py), killed while a
check of the down monitor is in flight. A new worker takes over: the incident goes on with no
second card and no early reminder, and the recovery edits the one card, once."""

from __future__ import annotations

import asyncio
import signal

import pytest
from sqlalchemy import select

from bot.store.tables import incidents
from tests.helpers import worker_process
from tests.helpers.runs import message_with
from tests.helpers.stack import eventually, make_settings, running_clock, running_stack
from tests.helpers.target import health_target

STALL = 4.0  # seconds a check of the stalled target is held in flight: the kill lands in there


@pytest.fixture
async def target():
    async with health_target(healthy=False, stall=STALL) as state:
        yield state


@pytest.fixture
async def stack(tmp_path, database_url, redis_server_url, redis_namespace):
    """aegis without a worker of its own: the workers are processes the test starts and kills."""
    settings = make_settings(tmp_path / "data", database_url, redis_server_url)
    settings.config_file.parent.mkdir(parents=True, exist_ok=True)
    settings.config_file.write_text("{}\n", encoding="utf-8")
    async with running_stack(settings, namespace=redis_namespace, worker=False) as running:
        workers = worker_process.Workers(settings, redis_namespace, tmp_path / "workers.log")
        running.workers = workers
        try:
            yield running
        finally:
            workers.close()


async def cards(stack) -> list[dict]:
    return [m for m in await stack.bot_messages() if (m["text"] or "").startswith(("🔴", "🟢"))]


async def test_a_worker_killed_mid_check_loses_no_alert_and_repeats_none(stack, target):
    first = await stack.workers.start()
    await stack.ask("/start")
    async with running_clock(stack):
        sent = await stack.send(f"/watch {target['url']} every 10s fail 2 recover 1 timeout 8s")
        await message_with(stack, r"^Watching ", after=sent["message_id"])
        card = await message_with(stack, r"^🔴 .* is down", timeout=30)

        target["stall"] = True  # the next check hangs at the target …
        await eventually(lambda: target["in_flight"] > 0, timeout=20)
        first.send_signal(signal.SIGKILL)  # … and its worker dies with it
        await asyncio.to_thread(first.wait, 10)
        target["stall"] = False
        await stack.workers.start()

        hits = target["hits"]
        await eventually(lambda: target["hits"] > hits, timeout=20)  # checked again, still down
        await asyncio.sleep(1)
        assert [m["message_id"] for m in await cards(stack)] == [card["message_id"]]

        target["healthy"] = True

        async def recovered():
            [only] = await cards(stack)
            return only if only["text"].startswith("🟢") else None

        edited = await eventually(recovered, timeout=30)
    assert edited["message_id"] == card["message_id"]  # the one card, edited in place
    assert "recovered after" in edited["text"]
    texts = [m["text"] or "" for m in await stack.bot_messages(after=card["message_id"])]
    assert not [text for text in texts if "Still down" in text]  # no reminder before 4 h
    async with stack.store.read() as conn:
        [incident] = (await conn.execute(select(incidents))).all()
    assert incident.closed_at is not None and incident.reminders == 0
