"""Outages delay updates, never lose them, and never handle one twice.

Redis is a real embedded Redis of the test's own, really stopped and started again. The
database outage is fault injection: the web process's store refuses reads and writes with the
StoreError that ``bot/store/database.py`` raises when the database cannot be reached (stopping
the shared Postgres server, or deleting the SQLite file, would hit every other test and
process).
"""

from __future__ import annotations

import secrets
import shutil
import tempfile
from pathlib import Path

import pytest

from aegis.embedded_redis import EmbeddedRedis
from bot.store.tables import outbox, runs
from tests.helpers.stack import OWNER_CHAT, eventually, make_settings, running_stack
from tests.helpers.transport import (
    StoreOutage,
    all_rows,
    drained,
    owner_marker,
    settled,
    update_row,
    update_status,
    webhook_registered,
    webhook_settings,
    worker_ready,
)

HELLO = "Hello! I am aegis."


@pytest.fixture
def embedded_redis():
    # A short directory of our own: a unix socket path must stay under ~100 bytes.
    directory = Path(tempfile.mkdtemp(prefix="aegis-r-"))
    server = EmbeddedRedis(directory)
    server.ensure_running()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


async def test_a_redis_outage_delays_ping_and_loses_nothing(tmp_path, database_url, embedded_redis):
    settings = make_settings(tmp_path / "data", database_url, embedded_redis.url)
    namespace = f"aegis-outage-{secrets.token_hex(4)}"
    async with running_stack(settings, namespace=namespace) as stack:
        # No message before the outage: a job in flight when Redis goes would hold a worker
        # thread in dramatiq's 5-second ack retry.
        await worker_ready(stack)
        embedded_redis.stop()
        assert not embedded_redis.is_running()
        try:
            sent = await stack.emulator.send_message("/ping")
            update_id = sent["update_id"]

            async def retried_while_down():
                row = await update_row(stack.store, update_id)
                if row is not None and row.status == "pending" and row.attempts >= 2:
                    return row
                return None

            # Handled, hit the outage, and tried again by the retry sweep: still pending, not lost
            # (retries back off up to five minutes apart; only a day-old update is given up).
            row = await eventually(retried_while_down)
            assert "Redis" in row.error
            assert await all_rows(stack.store, runs, runs.c.job == "ping") == []
            assert await all_rows(stack.store, outbox) == []
        finally:
            # Up again before the stack stops: a worker cannot stop while it waits for Redis.
            restarted = embedded_redis.ensure_running()
        assert restarted
        [pong] = await stack.emulator.wait_for_bot_messages(OWNER_CHAT, 1, timeout=20)
        assert pong["text"].startswith("pong from worker")
        await eventually(lambda: _status_is(stack, update_id, "handled"), timeout=20)
        [row] = await drained(stack)
        assert row.chat_id == OWNER_CHAT
        assert [m["text"] for m in await stack.bot_messages()] == [pong["text"]]
        # The run is recorded once the ping job returns, which may be after its pong went out.
        ping_runs = await eventually(lambda: all_rows(stack.store, runs, runs.c.job == "ping"))
        assert [(run.status, run.summary) for run in ping_runs] == [
            ("completed", {"messages_queued": 1})
        ]


async def _status_is(stack, update_id: int, status: str) -> bool:
    return await update_status(stack.store, update_id) == status


async def test_long_polling_does_not_move_past_an_update_it_could_not_record(stack, monkeypatch):
    web_store = stack.services.platform.store
    assert stack.intake.log.store is web_store  # one store serves intake and handlers
    outage = StoreOutage(web_store, monkeypatch)
    batches: list[list[int]] = []
    record_many = stack.intake.log.record_many

    async def counted_record_many(payloads):
        batches.append([payload["update_id"] for payload in payloads])
        return await record_many(payloads)

    monkeypatch.setattr(stack.intake.log, "record_many", counted_record_many)
    opened = await owner_marker(stack)
    await settled(stack)

    outage.down = True
    before = len(batches)
    first = await stack.emulator.send_message("/start")
    second = await stack.emulator.send_message("/help")
    # The intake tried to record the batch holding the first update, failed, and is trying
    # again from that same update instead of fetching past it: the emulator still holds both.
    await eventually(lambda: sum(first["update_id"] in batch for batch in batches) >= 2)
    assert all(batch[0] == first["update_id"] for batch in batches[before:])
    assert (await stack.emulator.stats())["pending_updates"] == 2
    assert await update_row(stack.store, first["update_id"]) is None

    outage.down = False
    replies = await stack.emulator.wait_for_bot_messages(
        OWNER_CHAT, 2, after=opened["message_id"], timeout=15
    )
    assert replies[0]["text"].startswith(HELLO)
    assert "/status" in replies[1]["text"]
    await settled(stack)
    for sent in (first, second):
        row = await update_row(stack.store, sent["update_id"])
        assert (row.status, row.attempts) == ("handled", 0)
    sent_rows = await drained(stack)
    keys = [row.idempotency_key for row in sent_rows]
    assert keys.count(f"reply:{first['update_id']}") == 1
    assert keys.count(f"reply:{second['update_id']}") == 1
    assert len(await stack.bot_messages(after=opened["message_id"])) == 2


async def test_a_webhook_answers_503_while_the_database_is_down_and_is_delivered_again(
    tmp_path, database_url, redis_server_url, redis_namespace, monkeypatch
):
    settings = webhook_settings(tmp_path / "data", database_url, redis_server_url)
    async with running_stack(settings, namespace=redis_namespace) as stack:
        await webhook_registered(stack)
        await worker_ready(stack)
        opened = await owner_marker(stack)
        outage = StoreOutage(stack.services.platform.store, monkeypatch)
        failures = (await stack.emulator.stats())["webhook_failures"]

        outage.down = True
        sent = await stack.emulator.send_message("/start")

        async def refused_twice():
            return (await stack.emulator.stats())["webhook_failures"] >= failures + 2

        await eventually(refused_twice)
        hook = (await stack.emulator.bot_info())["webhook"]
        assert "503" in hook["last_error_message"]
        assert (await stack.emulator.stats())["pending_updates"] == 1
        assert await update_row(stack.store, sent["update_id"]) is None

        outage.down = False
        [reply] = await stack.emulator.wait_for_bot_messages(
            OWNER_CHAT, 1, after=opened["message_id"], timeout=15
        )
        assert reply["text"].startswith(HELLO)
        await eventually(lambda: _status_is(stack, sent["update_id"], "handled"))
        sent_rows = await drained(stack)
        assert [r.idempotency_key for r in sent_rows].count(f"reply:{sent['update_id']}") == 1
        assert len(await stack.bot_messages(after=opened["message_id"])) == 1
        assert len(await all_rows(stack.store, outbox, outbox.c.chat_id == OWNER_CHAT)) == 2
