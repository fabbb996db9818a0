"""A message Telegram keeps failing on is set aside, its chat goes on, and the owner is told once
(issue 21): the whole stack, the emulator answering 500 to the one reply that carries a marker."""

from __future__ import annotations

import asyncio
import time

import pytest
from sqlalchemy import select

from bot.chat.undelivered import NOTICE_KEY, SERVER_ERRORS_IN_A_ROW, server_errors_in_a_row
from bot.store.tables import outbox
from tests.helpers.outbox import bot_texts, delivery_stack, settled_row
from tests.helpers.stack import OWNER_CHAT, eventually

POISON = "poison-7f3a"


@pytest.fixture
async def stack(tmp_path, database_url, redis_server_url, redis_namespace):
    # Tries 50 ms apart and doubling, not a second: the bound in tries is what is tested.
    async with delivery_stack(
        tmp_path / "data",
        database_url,
        redis_server_url,
        redis_namespace,
        outbox_retry_seconds=0.05,
    ) as running:
        yield running


async def rows(stack) -> list:
    async with stack.store.read() as conn:
        return (await conn.execute(select(outbox).order_by(outbox.c.id))).all()


async def notice_rows(stack) -> list:
    return [row for row in await rows(stack) if (row.idempotency_key or "").startswith(NOTICE_KEY)]


def notices(texts: list[str | None]) -> list[str]:
    return [text for text in texts if text and "set it aside" in text]


async def test_a_reply_that_always_gets_500_is_set_aside_and_the_next_five_go_out(stack):
    await stack.emulator.outage(500, "sendMessage", text_contains=POISON)
    started = time.monotonic()
    await stack.send(f"remember {POISON}")
    after = [f"after the poison {n}" for n in range(5)]
    for text in after:
        await stack.send(text)

    async def five_replies_and_the_notice():
        texts = await bot_texts(stack)
        replies = [text for text in texts if text and "after the poison" in text]
        return texts if len(replies) == 5 and notices(texts) else None

    texts = await eventually(five_replies_and_the_notice, timeout=60)
    took = time.monotonic() - started
    replies = [text for text in texts if "after the poison" in (text or "")]
    assert [next(t for t in after if t in reply) for reply in replies] == after  # in order
    assert not any(POISON in (text or "") for text in texts)
    [notice] = notices(texts)
    assert "500" in notice and "Internal Server Error" in notice
    await asyncio.sleep(1.0)  # a second notice, had one been queued, would be out by now

    [poisoned] = [row for row in await rows(stack) if POISON in row.parts[0]]
    assert poisoned.status == "failed"
    assert "Internal Server Error" in poisoned.last_error and "500" in poisoned.last_error
    refused = (await stack.emulator.outage(0))["refused"]
    assert refused == SERVER_ERRORS_IN_A_ROW  # bounded: tried that often, then set aside
    assert [row.idempotency_key for row in await notice_rows(stack)] == [
        f"{NOTICE_KEY}{poisoned.id}"
    ]
    assert notices(await bot_texts(stack)) == [notice]
    print(f"\npoisoned row set aside after {refused} tries; all five replies out in {took:.1f} s")


async def test_a_notice_that_fails_too_is_set_aside_without_a_notice_of_its_own(stack):
    # Every sendMessage fails with 500: the row, then its notice, are set aside; nothing more.
    await stack.emulator.outage(500, "sendMessage")
    first = await stack.services.platform.outbox.send(OWNER_CHAT, "never arrives")
    assert (await settled_row(stack, first, timeout=40))["status"] == "failed"

    async def the_notice_failed():
        found = await notice_rows(stack)
        return found if found and found[0].status == "failed" else None

    [notice] = await eventually(the_notice_failed, timeout=40)
    assert notice.idempotency_key == f"{NOTICE_KEY}{first}"
    await asyncio.sleep(1.0)
    assert len(await rows(stack)) == 2  # the row and its notice; no notice about the notice
    assert (await stack.emulator.outage(0))["refused"] == 2 * SERVER_ERRORS_IN_A_ROW
    assert await stack.bot_messages() == []


async def test_a_500_that_clears_after_two_tries_is_delivered_in_order(stack):
    await stack.emulator.outage(500, "sendMessage", count=2, text_contains=POISON)
    outbox_ = stack.services.platform.outbox
    texts = [f"first {POISON}", "second", "third"]
    ids = [await outbox_.send(OWNER_CHAT, text) for text in texts]
    for outbox_id in ids:
        assert (await settled_row(stack, outbox_id, timeout=20))["status"] == "sent"
    assert await bot_texts(stack) == texts
    assert (await stack.emulator.outage(0))["refused"] == 2
    row = await outbox_.get(ids[0])
    assert row["attempts"] == 3 and row["last_error"] is None


async def test_a_gateway_error_is_waited_out_in_order_and_never_set_aside(stack):
    # As many as would set a row aside, were a 502 counted like a 500.
    await stack.emulator.outage(502, "sendMessage", count=SERVER_ERRORS_IN_A_ROW)
    outbox_ = stack.services.platform.outbox
    texts = ["through the gateway 1", "through the gateway 2"]
    ids = [await outbox_.send(OWNER_CHAT, text) for text in texts]
    for outbox_id in ids:
        assert (await settled_row(stack, outbox_id, timeout=60))["status"] == "sent"
    assert await bot_texts(stack) == texts
    assert await notice_rows(stack) == []


def test_the_count_of_server_errors_is_read_back_from_the_last_error():
    assert server_errors_in_a_row(None) == 0
    assert server_errors_in_a_row("NetworkError: aiohttp.ClientConnectorError") == 0
    assert server_errors_in_a_row("HTTP 500, 3 in a row: Internal Server Error") == 3
