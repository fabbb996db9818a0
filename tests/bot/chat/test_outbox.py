"""The outbox on SQLite and Postgres: splitting, idempotent puts, exclusive leases, order."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import update

from bot.chat.deliveries import LEASE
from bot.chat.outbox import Outbox
from bot.chat.outgoing import OutboxKind, OutboxStatus, split_text
from bot.chat.text import MESSAGE_LIMIT, escape, plain
from bot.errors import LeaseLost
from bot.store.database import Store
from bot.store.tables import outbox as outbox_table
from bot.timeutil import now

CHAT, OTHER_CHAT = 501, 502

# -- split_text ----------------------------------------------------------------------------

words = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=0, max_size=40)
long_runs = st.builds(  # a long stretch with no space at all, or all spaces
    lambda char, count: char * count,
    st.sampled_from(["x", " ", "é", "😀", "\n"]),
    st.integers(1, 9000),
)
pieces = st.lists(st.one_of(words, long_runs, st.just("\n"), st.just(" ")), max_size=60)
texts = pieces.map("".join)


def visible(text: str) -> str:
    return "".join(char for char in text if not char.isspace())


@settings(max_examples=300, deadline=None)
@given(texts)
def test_every_part_fits_none_is_blank_and_nothing_visible_is_lost(text):
    parts = [plain(part) for part in split_text(escape(text))]
    if not text.strip():
        return  # Outbox.put refuses blank text; nothing to deliver
    assert parts
    assert all(len(part) <= MESSAGE_LIMIT for part in parts)
    assert all(part.strip() for part in parts)
    assert visible("".join(parts)) == visible(text)


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=MESSAGE_LIMIT).filter(str.strip))
def test_a_text_within_the_limit_is_one_part_unchanged(text):
    assert split_text(text) == [text]


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.text("abc ", min_size=1, max_size=30).filter(str.strip), min_size=1, max_size=2000)
)
def test_many_short_lines_are_split_only_at_line_boundaries(lines):
    text = "\n".join(lines)
    parts = split_text(text)
    assert all(len(part) <= MESSAGE_LIMIT for part in parts)
    # No line is cut in two: each part is a run of whole lines.
    assert [line for part in parts for line in part.split("\n")] == lines


def test_ten_thousand_characters_of_lines_become_three_parts():
    line = "a" * 99 + "\n"
    parts = split_text(line * 100)
    assert len(parts) == 3
    assert all(part.endswith("a") and len(part) <= MESSAGE_LIMIT for part in parts)


def test_a_long_line_is_cut_at_a_space_when_there_is_one():
    text = ("word " * 1000).strip()
    parts = split_text(text)
    assert all(part.endswith(" ") for part in parts[:-1])
    assert "".join(parts) == text


# -- Outbox --------------------------------------------------------------------------------


@pytest.fixture
def box(store) -> Outbox:
    return Outbox(store, file_over_chars=12_000)


async def test_put_with_the_same_key_twice_returns_the_same_row(box):
    first = await box.put(CHAT, "hello", idempotency_key="greet:1")
    again = await box.put(CHAT, "hello, edited", idempotency_key="greet:1")
    assert first[1] is True
    assert again == (first[0], False)
    assert (await box.get(first[0]))["parts"] == ["hello"]
    assert await box.counts() == {"pending": 1}


async def test_put_within_a_transaction_commits_with_it_and_a_repeated_key_queues_nothing(
    box, store
):
    async with store.write() as conn:
        first = await box.put_within(conn, CHAT, "hello", key="greet:2", reply_to=7)
    async with store.write() as conn:
        assert await box.put_within(conn, CHAT, "hello again", key="greet:2") is None
    with pytest.raises(RuntimeError):
        async with store.write() as conn:
            await box.put_within(conn, CHAT, "rolled back", key="greet:3")
            raise RuntimeError("what the message announces failed")
    row = await box.get(first)
    assert (row["parts"], row["reply_to_message_id"]) == (["hello"], 7)
    assert await box.counts() == {"pending": 1}


async def test_put_without_a_key_always_makes_a_new_row(box):
    first, _ = await box.put(CHAT, "hello")
    second, new = await box.put(CHAT, "hello")
    assert new and second != first


async def test_blank_text_is_refused(box):
    with pytest.raises(ValueError):
        await box.put(CHAT, " \n ")


async def test_a_row_records_everything_delivery_needs(box):
    markup = {"inline_keyboard": [[{"text": "OK", "callback_data": "a:1:ok:xxxxxxxxxx"}]]}
    message_id, _ = await box.put(CHAT, "hi", reply_markup=markup, reply_to_message_id=7)
    row = await box.get(message_id)
    assert row["kind"] == OutboxKind.TEXT
    assert row["status"] == OutboxStatus.PENDING
    assert row["reply_markup"] == markup and row["reply_to_message_id"] == 7
    assert row["parts_sent"] == 0 and row["telegram_message_ids"] == [] and row["attempts"] == 0
    assert row["created_at"].tzinfo is not None


async def test_a_long_text_is_split_and_a_text_past_the_file_limit_becomes_a_document(box):
    long_id, _ = await box.put(CHAT, ("x" * 99 + "\n") * 100)
    assert len((await box.get(long_id))["parts"]) == 3
    text = ("y" * 99 + "\n") * 121  # 12,100 characters
    doc_id, _ = await box.put(CHAT, text)
    row = await box.get(doc_id)
    assert row["kind"] == OutboxKind.DOCUMENT
    assert row["parts"] == [text]


async def test_claim_is_exclusive_while_the_lease_holds(box):
    message_id, _ = await box.put(CHAT, "once")
    message = await box.deliveries.claim_next_in_chat(message_id)
    assert message is not None and message.attempts == 1 and message.parts == ["once"]
    assert await box.deliveries.claim_next_in_chat(message_id) is None
    row = await box.get(message_id)
    assert row["status"] == OutboxStatus.SENDING
    assert row["lease_until"] > now() + LEASE - timedelta(seconds=10)


async def test_ten_concurrent_claims_from_separate_stores_have_one_winner(database_url, store):
    message_id, _ = await Outbox(store).put(CHAT, "contested")
    stores = [Store(database_url) for _ in range(10)]
    try:
        claims = await asyncio.gather(
            *(Outbox(s).deliveries.claim_next_in_chat(message_id) for s in stores)
        )
    finally:
        for s in stores:
            await s.close()
    assert sum(claim is not None for claim in claims) == 1


async def test_a_lapsed_lease_can_be_claimed_again(box, store):
    message_id, _ = await box.put(CHAT, "crashed worker")
    assert await box.deliveries.claim_next_in_chat(message_id) is not None
    await set_columns(store, message_id, lease_until=now() - timedelta(seconds=1))
    again = await box.deliveries.claim_next_in_chat(message_id)
    assert again is not None and again.attempts == 2


async def test_a_delivery_that_outlived_its_lease_cannot_undo_the_takeover(box, store):
    message_id, _ = await box.put(CHAT, "stalled worker")
    stalled = await box.deliveries.claim_next_in_chat(message_id)
    await set_columns(store, message_id, lease_until=now() - timedelta(seconds=1))
    takeover = await box.deliveries.claim_next_in_chat(message_id)
    await box.deliveries.record_part(takeover, 42)
    assert (await box.get(message_id))["status"] == "sent"
    assert await box.deliveries.release(message_id, "late", held=stalled) is False
    assert await box.deliveries.mark_failed(message_id, "late", held=stalled) is False
    with pytest.raises(LeaseLost):
        await box.deliveries.record_part(stalled, 43)
    row = await box.get(message_id)
    assert (row["status"], row["telegram_message_ids"]) == ("sent", [42])


async def test_recording_the_last_part_claims_the_chats_next_row_and_nothing_else(box, store):
    long_id, _ = await box.put(CHAT, ("x" * 99 + "\n") * 50)  # two parts
    after_id, _ = await box.put(CHAT, "after")
    other_chat, _ = await box.put(CHAT + 1, "another chat")
    long = await box.deliveries.claim_next_in_chat(long_id)
    assert (
        await box.deliveries.record_part(long, 1, claim_next=True) is None
    )  # a part short of the last
    assert (await box.get(long_id))["status"] == "sending" and long.parts_sent == 1
    following = await box.deliveries.record_part(long, 2, claim_next=True)
    assert following.id == after_id and following.attempts == 1 and following.parts == ["after"]
    row = await box.get(long_id)
    assert (row["status"], row["telegram_message_ids"]) == ("sent", [1, 2])
    assert (await box.get(after_id))["status"] == "sending"
    await set_columns(store, after_id, lease_until=now() - timedelta(seconds=1))
    takeover = await box.deliveries.claim_next_in_chat(after_id)
    later_id, _ = await box.put(CHAT, "later")
    with pytest.raises(LeaseLost):  # a lost lease records nothing and claims nothing
        await box.deliveries.record_part(following, 3, claim_next=True)
    assert (await box.get(later_id))["status"] == "pending"
    assert (
        await box.deliveries.record_part(takeover, 3) is None
    )  # without claim_next: nothing claimed
    assert (await box.get(later_id))["status"] == "pending"
    assert (await box.get(other_chat))["status"] == "pending"


async def test_a_message_queued_while_the_last_one_is_recorded_is_claimed_by_one_of_them(
    postgres_dsn,
):
    """Postgres: the drain's record of its last message and the claim of the message queued
    meanwhile cross. The record's statement took its snapshot before the new row committed
    (it cannot see it); the new row's delivery saw the last message still being sent (it
    leaves the chat to the drain). One of the two must claim it all the same: otherwise it
    waits for the sweep, 20 s later. The crossing is held in place by a row lock."""
    import asyncpg

    from bot.store import migrate
    from tests.conftest import _create_database, _drop_database

    name, url = await _create_database(postgres_dsn)
    store = Store(url)
    watcher = await asyncpg.connect(postgres_dsn.rsplit("/", 1)[0] + "/" + name)
    try:
        await migrate.upgrade(store)
        box = Outbox(store)
        last_id, _ = await box.put(CHAT, "the last one")
        last = await box.deliveries.claim_next_in_chat(last_id)

        async def waiting_on_the_lock() -> None:
            query = (
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            for _ in range(500):
                if await watcher.fetchval(query) >= 1:
                    return
                await asyncio.sleep(0.01)
            raise AssertionError("the record never waited on the row lock")

        holder = await asyncpg.connect(postgres_dsn.rsplit("/", 1)[0] + "/" + name)
        try:
            lock = holder.transaction()
            await lock.start()
            await holder.execute("SELECT 1 FROM outbox WHERE id = $1 FOR UPDATE", last_id)
            record = asyncio.create_task(box.deliveries.record_part(last, 1, claim_next=True))
            await waiting_on_the_lock()  # its snapshot is taken: the new row is not in it
            new_id, _ = await box.put(CHAT, "queued meanwhile")
            claimed = await box.deliveries.claim_next_in_chat(new_id)  # the last one is being sent
            await lock.commit()
            following = await record
        finally:
            await holder.close()

        winners = [m.id for m in (following, claimed) if m is not None]
        assert winners == [new_id]
        row = await box.get(new_id)
        assert (row["status"], row["attempts"]) == ("sending", 1)
        assert (await box.get(last_id))["status"] == "sent"
    finally:
        await watcher.close()
        await store.close()
        await _drop_database(postgres_dsn, name)


async def test_a_database_failing_the_second_claim_does_not_undo_the_record(postgres_dsn):
    """Postgres: the record of a drain's last message has committed when its second claim
    runs (the one above); the database failing that claim leaves the chat to the sweep and
    the message recorded as sent, not a lease said lost."""
    from bot.errors import StoreError
    from bot.store import migrate
    from tests.conftest import _create_database, _drop_database

    name, url = await _create_database(postgres_dsn)
    store = Store(url)
    try:
        await migrate.upgrade(store)
        box = Outbox(store)
        last_id, _ = await box.put(CHAT, "the last one")
        last = await box.deliveries.claim_next_in_chat(last_id)
        driver, calls = store.driver, []

        def failing_after_the_record():
            calls.append(1)
            if len(calls) > 1:
                raise StoreError("the database (test) is unavailable: connection reset")
            return driver()

        store.driver = failing_after_the_record
        assert await box.deliveries.record_part(last, 7, claim_next=True) is None
        assert len(calls) == 2  # the record, then the claim that failed
        row = await box.get(last_id)
        assert (row["status"], row["telegram_message_ids"]) == ("sent", [7])
    finally:
        await store.close()
        await _drop_database(postgres_dsn, name)


async def test_a_held_back_message_keeps_younger_ones_of_its_chat_waiting(box):
    first, _ = await box.put(CHAT, "first")
    second, _ = await box.put(CHAT, "second")
    claimed = await box.deliveries.claim_next_in_chat(second)
    assert claimed.id == first  # the chat's oldest, whichever message asked
    assert (
        await box.deliveries.claim_next_in_chat(second) is None
    )  # being sent: nobody overtakes it
    later = now() + timedelta(seconds=30)  # a rate limit or a 429 holds it back
    assert await box.deliveries.release(first, "429", not_before=later, held=claimed) is True
    assert await box.deliveries.claim_next_in_chat(second) is None  # still first in line
    assert await box.deliveries.claim_next_in_chat(first) is None


async def test_sent_and_failed_rows_are_never_claimed(box):
    sent, _ = await box.put(CHAT, "a")
    failed, _ = await box.put(CHAT, "b")
    await box.deliveries.mark_sent(sent)
    await box.deliveries.mark_failed(failed, "Forbidden: bot was blocked by the user")
    assert (
        await box.deliveries.claim_next_in_chat(sent) is None
        and await box.deliveries.claim_next_in_chat(failed) is None
    )
    assert (await box.get(failed))["last_error"] == "Forbidden: bot was blocked by the user"
    assert (await box.get(sent))["sent_at"] is not None


async def test_release_gives_the_row_back_and_keeps_recorded_parts(box):
    message_id, _ = await box.put(CHAT, ("z" * 99 + "\n") * 100)
    message = await box.deliveries.claim_next_in_chat(message_id)
    await box.deliveries.record_part(message, 11)
    await box.deliveries.release(message_id, "429: retry after 1")
    again = await box.deliveries.claim_next_in_chat(message_id)
    assert again.parts_sent == 1 and again.telegram_message_ids == [11]
    assert (await box.get(message_id))["last_error"] == "429: retry after 1"


async def test_an_older_undelivered_message_to_the_same_chat_blocks_a_newer_one(box):
    first, _ = await box.put(CHAT, "first")
    second, _ = await box.put(CHAT, "second")
    elsewhere, _ = await box.put(OTHER_CHAT, "other chat")
    taken = await box.deliveries.claim_next_in_chat(second)
    assert taken.id == first  # the newer one asked; the older one goes
    assert (await box.deliveries.claim_next_in_chat(elsewhere)).id == elsewhere  # other chats go on
    assert await box.deliveries.claim_next_in_chat(second) is None  # first is still sending
    await box.deliveries.record_part(taken, 7)
    assert (await box.deliveries.claim_next_in_chat(second)).id == second


async def test_a_failed_older_message_does_not_block_the_chat(box):
    first, _ = await box.put(CHAT, "first")
    second, _ = await box.put(CHAT, "second")
    await box.deliveries.mark_failed(first, "BadRequest: chat not found")
    assert (await box.deliveries.claim_next_in_chat(second)).id == second


async def test_due_for_retry_finds_old_pending_rows_and_lapsed_leases(box, store):
    # A chat each, so claiming one row does not wait on another's order.
    fresh, _ = await box.put(CHAT, "fresh")
    old, _ = await box.put(CHAT + 1, "old")
    lapsed, _ = await box.put(CHAT + 2, "lapsed")
    leased, _ = await box.put(CHAT + 3, "leased")
    done, _ = await box.put(CHAT + 4, "done")
    long_ago = now() - timedelta(minutes=5)
    await set_columns(store, old, created_at=long_ago)
    for message_id in (lapsed, leased, done):
        await set_columns(store, message_id, created_at=long_ago)
        await box.deliveries.claim_next_in_chat(message_id)
    await set_columns(store, lapsed, lease_until=now() - timedelta(seconds=1))
    await box.deliveries.mark_sent(done)

    assert await box.deliveries.due_for_retry(older_than=timedelta(seconds=20)) == [old, lapsed]
    assert await box.deliveries.due_for_retry(older_than=timedelta(seconds=20), limit=1) == [old]
    assert fresh in await box.deliveries.due_for_retry(older_than=timedelta(seconds=-1))


async def set_columns(store: Store, message_id: int, **values) -> None:
    async with store.write() as conn:
        await conn.execute(
            update(outbox_table).where(outbox_table.c.id == message_id).values(**values)
        )
