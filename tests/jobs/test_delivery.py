"""The delivery actor end to end: outbox row -> real Dramatiq worker on Redis -> PTB Bot over
HTTP -> the emulator, on SQLite and on Postgres."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import update

from bot.chat.callbacks import CallbackSigner
from bot.chat.text import html
from bot.store.tables import outbox as outbox_table
from tests.helpers.outbox import (
    OTHER_CHAT,
    bot_texts,
    delivery_runs,
    delivery_stack,
    settled_row,
)
from tests.helpers.stack import OWNER_CHAT, eventually
from tests.helpers.transport import outbox_rows, raw_message


@pytest.fixture
async def stack(tmp_path, database_url, redis_server_url, redis_namespace):
    async with delivery_stack(
        tmp_path / "data", database_url, redis_server_url, redis_namespace
    ) as running:
        yield running


def keyboard(signer: CallbackSigner, choice: str = "ok") -> dict:
    data = signer.sign("test", "1", choice)
    return {"inline_keyboard": [[{"text": "OK", "callback_data": data}]]}


async def test_a_message_arrives_once_and_its_row_records_the_telegram_id(stack):
    outbox_id = await stack.services.platform.outbox.send(OWNER_CHAT, "hello from the outbox")
    row = await settled_row(stack, outbox_id)
    assert row["status"] == "sent" and row["sent_at"] is not None and row["last_error"] is None
    [message] = await stack.bot_messages()
    assert message["text"] == "hello from the outbox"
    assert row["telegram_message_ids"] == [message["message_id"]]
    assert row["parts_sent"] == 1 and row["attempts"] == 1
    assert (await stack.emulator.stats())["messages_sent_by_bot"] == 1


async def test_a_message_goes_as_html_and_what_anyone_wrote_arrives_as_written(stack):
    outbox = stack.services.platform.outbox
    text = html("<b>{}</b>\n{}", "Report", "2 < 3 & <b>not bold</b>")
    await settled_row(stack, await outbox.send(OWNER_CHAT, text))
    await settled_row(stack, await outbox.send(OWNER_CHAT, "plain: a <tag> & more"))
    first, second = await stack.bot_messages()
    assert first["text"] == "Report\n2 < 3 & <b>not bold</b>"
    assert first["entities"] == [{"type": "bold", "offset": 0, "length": 6}]
    assert second["text"] == "plain: a <tag> & more" and not second.get("entities")


async def test_a_row_telegram_cannot_parse_as_html_arrives_as_written(stack):
    """A row queued before the outbox kept HTML (plain text with a ``<``) is not lost."""
    async with stack.store.write() as conn:
        await conn.execute(
            update(outbox_table)
            .values(parts=["2 <3 is a heart, <not a tag"])
            .where(outbox_table.c.id == await _queued_quietly(stack, conn))
        )
    outbox_id = (await outbox_rows(stack.store, OWNER_CHAT))[-1].id
    await stack.services.platform.outbox.ask_delivery(outbox_id)
    row = await settled_row(stack, outbox_id)
    assert row["status"] == "sent"
    [message] = await stack.bot_messages()
    assert message["text"] == "2 <3 is a heart, <not a tag"


async def _queued_quietly(stack, conn) -> int:
    """A row put without asking for its delivery (as if queued by an older aegis)."""
    return await stack.services.platform.outbox.add(conn, OWNER_CHAT, "placeholder")


async def test_an_edit_too_long_for_a_message_is_cut_and_says_so(stack):
    outbox = stack.services.platform.outbox
    sent = await settled_row(stack, await outbox.send(OWNER_CHAT, "short"))
    lines = [f"line {number} <of> many" for number in range(400)]
    edit = await outbox.send_edit(OWNER_CHAT, "\n".join(lines), edit_of=sent["id"])
    assert (await settled_row(stack, edit))["status"] == "sent"
    [message] = await stack.bot_messages()
    assert len(message["text"]) <= 4096 and message["text"].endswith("\n…")
    shown = message["text"].removesuffix("\n…").split("\n")
    assert shown == lines[: len(shown)]  # whole lines, as written, from the start


async def test_a_polled_batch_asks_for_one_delivery_per_chat_which_sends_its_replies_in_order(
    stack,
):
    payloads = [
        {"update_id": 700_000 + n, "message": raw_message(f"batch {n}", message_id=800_000 + n)}
        for n in range(4)
    ]
    await stack.intake.handle_batch(await stack.intake.log.record_many(payloads))

    async def four_replies():
        texts = await bot_texts(stack)
        return texts if len(texts) == 4 else None

    texts = await eventually(four_replies)
    assert [text.splitlines()[0].split(": ")[1] for text in texts] == [
        f"batch {n}" for n in range(4)
    ]

    async def sent_by_one_run():
        runs = await delivery_runs(stack)
        return runs if sum(run.summary.get("messages_sent", 0) for run in runs) == 4 else None

    await eventually(sent_by_one_run)
    await asyncio.sleep(0.5)  # a second delivery, had one been asked for, would be done by now
    [run] = await delivery_runs(stack)
    assert run.summary == {"messages_sent": 4}


async def test_a_repeated_idempotency_key_sends_nothing_more(stack):
    first = await stack.services.platform.outbox.send(OWNER_CHAT, "only once", key="test:once")
    await settled_row(stack, first)
    again = await stack.services.platform.outbox.send(OWNER_CHAT, "only once", key="test:once")
    assert again == first
    fence = await stack.services.platform.outbox.send(OWNER_CHAT, "a later message")
    await settled_row(stack, fence)
    assert await bot_texts(stack) == ["only once", "a later message"]


async def test_ten_thousand_characters_arrive_as_three_parts_split_at_lines(stack):
    lines = [f"line {number:03d} ".ljust(99, ".") for number in range(100)]
    text = "\n".join(lines) + "\n"
    assert len(text) == 10_000
    markup = keyboard(stack.services.signer)
    outbox_id = await stack.services.platform.outbox.send(OWNER_CHAT, text, reply_markup=markup)
    row = await settled_row(stack, outbox_id)
    assert row["status"] == "sent"

    messages = await stack.bot_messages()
    assert len(messages) == 3
    assert [m["message_id"] for m in messages] == row["telegram_message_ids"]
    parts = [m["text"] for m in messages]
    assert all(len(part) <= 4096 for part in parts)
    assert "\n".join(parts).split("\n") == lines  # whole lines, in order, none lost
    assert [m["reply_markup"] for m in messages] == [None, None, markup]


async def test_a_text_past_the_file_limit_arrives_as_a_document(
    tmp_path, database_url, redis_server_url, redis_namespace
):
    async with delivery_stack(
        tmp_path / "data",
        database_url,
        redis_server_url,
        redis_namespace,
        outbox_file_over_chars=5_000,
    ) as stack:
        text = "".join(f"row {number}: ünïcödé ✓ <b>&amp;\n" for number in range(400))
        assert len(text) > 5_000
        markup = keyboard(stack.services.signer)
        outbox_id = await stack.services.platform.outbox.send(OWNER_CHAT, text, reply_markup=markup)
        assert (await settled_row(stack, outbox_id))["status"] == "sent"
        [message] = await stack.bot_messages()
        document = message["document"]
        assert document is not None and document["filename"].endswith(".txt")
        assert message["caption"].startswith("row 0: ünïcödé ✓")
        assert message["reply_markup"] == markup
        content = await stack.emulator.file_content(document["file_id"])
        assert content.decode("utf-8") == text


async def test_messages_to_one_chat_keep_their_order_when_queued_together(stack):
    texts = [f"message {number}" for number in range(8)]
    other = [f"elsewhere {number}" for number in range(3)]
    ids = await asyncio.gather(
        *(stack.services.platform.outbox.send(OWNER_CHAT, text) for text in texts),
        *(stack.services.platform.outbox.send(OTHER_CHAT, text) for text in other),
    )
    for outbox_id in ids:
        assert (await settled_row(stack, outbox_id))["status"] == "sent"
    # gather starts the puts in order, but the ids are what the outbox promises to keep
    by_id = sorted(zip(ids[: len(texts)], texts, strict=True))
    assert await bot_texts(stack) == [text for _, text in by_id]
    other_by_id = sorted(zip(ids[len(texts) :], other, strict=True))
    assert await bot_texts(stack, OTHER_CHAT) == [text for _, text in other_by_id]


async def test_a_duplicate_delivery_message_does_not_send_twice(stack):
    outbox_id = await stack.services.platform.outbox.send(OWNER_CHAT, "exactly once")
    await settled_row(stack, outbox_id)
    deliver = stack.broker.get_actor("deliver")
    duplicate = deliver.send(outbox_id)

    async def duplicate_ran():
        runs = await delivery_runs(stack)
        return [run for run in runs if run.summary == {"nothing_to_send": 1}]

    [run] = await eventually(duplicate_ran)
    assert run.status == "completed"
    assert await bot_texts(stack) == ["exactly once"]
    assert duplicate.message_id  # the run belongs to the message we sent
    row = await stack.services.platform.outbox.get(outbox_id)
    assert row["attempts"] == 1 and row["status"] == "sent"


async def test_a_message_telegram_refuses_does_not_hold_back_the_next_one_in_its_drain(stack):
    too_long = {"inline_keyboard": [[{"text": "x", "callback_data": "y" * 65}]]}
    async with stack.services.platform.outbox.deliveries_gathered():  # one delivery for both
        refused = await stack.services.platform.outbox.send(
            OWNER_CHAT, "refused", reply_markup=too_long
        )
        after = await stack.services.platform.outbox.send(OWNER_CHAT, "after the refusal")
    failed = await settled_row(stack, refused)
    assert failed["status"] == "failed" and "BadRequest" in failed["last_error"]
    assert (await settled_row(stack, after))["status"] == "sent"  # long before the sweep

    async def two_sent():
        # The drain sends the next message, then the notice about the refused one (queued
        # after it); the notice's own delivery job may find it already sent.
        runs = await delivery_runs(stack)
        return runs if sum(run.summary.get("messages_sent", 0) for run in runs) == 2 else None

    runs = await eventually(two_sent)
    assert sum(run.summary.get("messages_failed", 0) for run in runs) == 1
    first, notice = await bot_texts(stack)
    assert first == "after the refusal"
    assert "could not be sent" in notice and "BadRequest" in notice


async def test_a_user_who_blocked_the_bot_fails_the_row_for_good(stack):
    await stack.emulator.block(OWNER_CHAT)
    outbox_id = await stack.services.platform.outbox.send(OWNER_CHAT, "you blocked me")
    row = await settled_row(stack, outbox_id)
    assert row["status"] == "failed"
    assert "Forbidden" in row["last_error"] and "blocked" in row["last_error"]

    async def failure_recorded():
        runs = await delivery_runs(stack)
        return [run for run in runs if run.summary.get("messages_failed") == 1]

    [run] = await eventually(failure_recorded)
    assert run.status == "completed"  # refused for good: no Dramatiq retry either
    # A sweep or a stray duplicate finds nothing to do: the row is never claimed again.
    stack.broker.get_actor("deliver").send(outbox_id)
    await eventually(lambda: _run_with(stack, {"nothing_to_send": 1}))
    row = await stack.services.platform.outbox.get(outbox_id)
    assert row["attempts"] == 1 and row["status"] == "failed"
    assert await stack.bot_messages() == []


async def test_every_delivery_writes_a_run_with_a_summary(stack):
    ids = [await stack.services.platform.outbox.send(OWNER_CHAT, f"counted {n}") for n in range(3)]
    for outbox_id in ids:
        await settled_row(stack, outbox_id)

    async def three_sent():
        # One delivery may send several of a chat's messages in a row: count what they sent.
        runs = await delivery_runs(stack)
        sent = sum(run.summary.get("messages_sent", 0) for run in runs)
        return runs if sent == 3 and len(runs) == len(ids) else None

    runs = await eventually(three_sent)
    assert all(run.summary for run in runs)  # never "completed" with nothing to say
    assert all(run.status == "completed" and run.finished_at for run in runs)


async def test_our_rate_limit_keeps_telegram_from_refusing_anything(
    tmp_path, database_url, redis_server_url, redis_namespace
):
    async with delivery_stack(
        tmp_path / "data",
        database_url,
        redis_server_url,
        redis_namespace,
        outbox_per_chat_per_second=1,
    ) as stack:
        await stack.emulator.set_flood(True, per_chat_per_second=1, global_per_second=30)
        texts = [f"paced {n}" for n in range(4)]
        ids = [await stack.services.platform.outbox.send(OWNER_CHAT, text) for text in texts]
        for outbox_id in ids:
            assert (await settled_row(stack, outbox_id, timeout=15))["status"] == "sent"
        assert await bot_texts(stack) == texts
        assert (await stack.emulator.stats())["rate_limited"] == 0
        runs = await delivery_runs(stack)
        assert any(run.summary.get("rate_limited") for run in runs)  # the limiter did work


async def test_a_429_is_honoured_and_every_message_arrives_once_in_order(stack):
    # Our limiter is at 1000/s here (make_settings), so only Telegram's 429s hold us back.
    await stack.emulator.set_flood(True, per_chat_per_second=1, global_per_second=30)
    texts = [f"flooded {n}" for n in range(4)]
    ids = [await stack.services.platform.outbox.send(OWNER_CHAT, text) for text in texts]
    for outbox_id in ids:
        assert (await settled_row(stack, outbox_id, timeout=15))["status"] == "sent"
    assert await bot_texts(stack) == texts
    stats = await stack.emulator.stats()
    assert stats["rate_limited"] > 0
    assert stats["messages_sent_by_bot"] == 4
    runs = await delivery_runs(stack)
    assert any(run.summary.get("telegram_429") for run in runs)


async def _run_with(stack, summary: dict) -> bool:
    return any(run.summary == summary for run in await delivery_runs(stack))


async def test_a_send_whose_record_meets_a_database_outage_is_recorded_after_it_not_resent(
    stack, monkeypatch
):
    """Telegram accepted the message, then the database went away for a moment: the delivery
    holds Telegram's answer and records it when the database is back; nothing goes out again."""
    from bot.chat.deliveries import Deliveries
    from bot.errors import StoreError

    record_part, failures = Deliveries.record_part, []

    async def away_twice(self, message, telegram_id, **options):
        if len(failures) < 2:
            failures.append(telegram_id)
            raise StoreError("the database (test) is unavailable: connection reset")
        return await record_part(self, message, telegram_id, **options)

    monkeypatch.setattr(Deliveries, "record_part", away_twice)
    outbox_id = await stack.services.platform.outbox.send(OWNER_CHAT, "sent during an outage")
    row = await settled_row(stack, outbox_id)
    [message] = await stack.bot_messages()
    assert message["text"] == "sent during an outage"
    assert failures == [message["message_id"]] * 2
    assert row["status"] == "sent" and row["telegram_message_ids"] == [message["message_id"]]
    await asyncio.sleep(0.5)  # a second send, had the delivery been retried, would be out now
    assert len(await stack.bot_messages()) == 1
