"""What each kind of card asks and shows, against SQLite and Postgres, with no Telegram and no
broker: a tap resolving each kind with its outcome, replies to a card as its answer or as a note,
continuations claimed once and those the broker missed sent again, taps refused, and cards
that show everything they ask about.

``enqueue`` is a recorder (tests/helpers/interactions.py).
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest

from bot.actions.audit import AuditEvent
from bot.chat.outbox import Outbox
from bot.chat.outgoing import OutboxKind
from bot.chat.text import MESSAGE_LIMIT, plain
from bot.chat.topics import Place
from bot.chat.views import cards
from bot.interactions.interaction import InteractionOutcome, InteractionStatus, Kind
from bot.store.database import Store
from bot.store.tables import interactions as interactions_table
from tests.helpers.asks import RESUME, ask
from tests.helpers.interactions import (
    ALICE,
    BOB,
    CHAT,
    SIGNER,
    RecordingEnqueue,
    approval,
    audit_rows,
    card_rows,
    edits_of,
    grant_rows,
    make_interactions,
    move_into_past,
)

# Choices, acknowledgements, questions and replies


@pytest.mark.parametrize(
    ("kind", "options", "choice", "outcome", "answer", "receipt"),
    [
        (
            Kind.CHOICE,
            ("red", "green", "blue"),
            "1",
            InteractionOutcome.CHOSEN,
            "green",
            "☑️ Chosen: green",
        ),
        (Kind.ACKNOWLEDGEMENT, (), "ack", InteractionOutcome.ACKNOWLEDGED, None, "👍 Acknowledged"),
        (Kind.QUESTION, (), "skip", InteractionOutcome.SKIPPED, None, "⏭ Skipped"),
        (Kind.APPROVAL, (), "deny", InteractionOutcome.DENIED, None, "❌ Denied"),
    ],
)
async def test_a_tap_resolves_each_kind_with_its_outcome(
    store, enqueue, asker, kind, options, choice, outcome, answer, receipt
):
    card_ask = approval(**RESUME) if kind is Kind.APPROVAL else ask(kind, options=options, **RESUME)
    card = await asker.create(card_ask)

    reply = await asker.tap(card.id, choice, ALICE, "Alice", codes_ready=False)

    assert reply.changed and reply.text.startswith(f"{receipt} by Alice at ")
    stored = await asker.get(card.id)
    assert (stored.status, stored.outcome, stored.answer) == (
        InteractionStatus.RESOLVED,
        outcome,
        answer,
    )
    assert (stored.resolved_by, stored.resolved_by_name) == (ALICE, "Alice")
    assert await grant_rows(store) == []
    assert enqueue.continuations() == [("resume", {"task": 7, "interaction_id": card.id})]
    [edit] = await edits_of(store, (await card_rows(store, card.id))[0]["id"])
    assert edit["kind"] == OutboxKind.EDIT and edit["reply_markup"] is None
    assert plain(edit["parts"][0]).startswith(receipt)


async def sent_as(store, outbox_id: int, telegram_message_id: int) -> None:
    """Deliver the card row as a delivery would, recording the Telegram message id."""
    box = Outbox(store)
    message = await box.deliveries.claim_next_in_chat(outbox_id)
    assert message is not None and message.id == outbox_id
    await box.deliveries.record_part(message, telegram_message_id)


async def test_a_reply_to_a_question_card_is_its_answer(store, enqueue, asker):
    card = await asker.create(ask(Kind.QUESTION, prompt="When shall we meet?", **RESUME))
    await sent_as(store, (await card_rows(store, card.id))[0]["id"], 555)

    assert await asker.reply(CHAT, 556, ALICE, "Alice", "not a card") is None
    assert await asker.reply(CHAT + 1, 555, ALICE, "Alice", "other chat") is None
    reply = await asker.reply(CHAT, 555, ALICE, "Alice", "Tuesday at ten")

    assert reply.changed and reply.text == "Answer passed to scribe."
    stored = await asker.get(card.id)
    assert (stored.outcome, stored.answer) == (InteractionOutcome.ANSWERED, "Tuesday at ten")
    assert enqueue.continuations() == [("resume", {"task": 7, "interaction_id": card.id})]
    assert await asker.notes_for("scribe") == []
    # A second reply to the answered question is a note, not a new answer.
    later = await asker.reply(CHAT, 555, ALICE, "Alice", "or Wednesday")
    assert later.text.startswith("Noted for scribe")
    assert (await asker.get(card.id)).answer == "Tuesday at ten"
    assert await asker.notes_for("scribe") == ["or Wednesday"]


async def test_a_reply_to_an_approval_card_is_a_note_for_its_agent(store, enqueue, asker):
    card = await asker.create(approval())
    await sent_as(store, (await card_rows(store, card.id))[0]["id"], 777)

    first = await asker.reply(CHAT, 777, ALICE, "Alice", "only on weekdays")
    await asker.reply(CHAT, 777, BOB, "Bob", "and never to production")

    assert first.changed and first.text.startswith("Noted for scribe")
    assert await asker.notes_for("scribe") == ["only on weekdays", "and never to production"]
    assert await asker.notes_for("someone-else") == []
    assert (await asker.get(card.id)).status is InteractionStatus.PENDING
    assert len(await audit_rows(store, AuditEvent.NOTE)) == 2
    assert enqueue.continuations() == []


# Continuations


async def test_a_continuation_is_claimed_once(store, database_url, asker):
    card = await asker.create(approval(**RESUME))
    assert await asker.claim_continuation(card.id) is None  # still open: nothing to continue
    await asker.tap(card.id, "approve", ALICE, "Alice", codes_ready=False)

    stores = [Store(database_url) for _ in range(5)]
    try:
        claims = await asyncio.gather(
            *(make_interactions(s, RecordingEnqueue()).claim_continuation(card.id) for s in stores)
        )
    finally:
        for extra in stores:
            await extra.close()

    [claimed] = [c for c in claims if c is not None]
    assert (claimed.id, claimed.outcome) == (card.id, InteractionOutcome.APPROVED)
    assert await asker.claim_continuation(card.id) is None


async def test_unsent_continuations_are_those_the_broker_missed(store, enqueue, asker):
    enqueue.down_for = {"resume"}
    missed = await asker.create(ask(Kind.ACKNOWLEDGEMENT, **RESUME))
    no_actor = await asker.create(ask(Kind.ACKNOWLEDGEMENT))
    still_open = await asker.create(ask(Kind.ACKNOWLEDGEMENT, **RESUME))
    just_now = await asker.create(ask(Kind.ACKNOWLEDGEMENT, **RESUME))
    for card in (missed, no_actor, just_now):
        await asker.tap(card.id, "ack", ALICE, "Alice", codes_ready=False)
    for card in (missed, no_actor, still_open):
        await move_into_past(store, interactions_table, card.id, "resolved_at")
    assert enqueue.continuations() == []

    [unsent] = await asker.unsent_continuations(older_than=timedelta(minutes=1))
    assert unsent.id == missed.id

    enqueue.down_for = set()
    await asker.send_continuation(unsent)
    assert enqueue.continuations() == [("resume", {"task": 7, "interaction_id": missed.id})]
    assert await asker.unsent_continuations(older_than=timedelta(minutes=1)) == []


# Refused taps


@pytest.mark.parametrize(
    ("kind", "options", "choice"),
    [
        (Kind.APPROVAL, (), "yes"),
        (Kind.APPROVAL, (), "ack"),
        (Kind.CHOICE, ("red", "green"), "2"),
        (Kind.CHOICE, ("red", "green"), "-1"),
        (Kind.CHOICE, ("red", "green"), "red"),
        (Kind.ACKNOWLEDGEMENT, (), "approve"),
        (Kind.QUESTION, (), "ack"),
    ],
)
async def test_a_tap_with_an_unknown_choice_changes_nothing(
    store, enqueue, asker, kind, options, choice
):
    card_ask = approval(**RESUME) if kind is Kind.APPROVAL else ask(kind, options=options, **RESUME)
    card = await asker.create(card_ask)
    delivered = len(enqueue.calls)

    reply = await asker.tap(card.id, choice, ALICE, "Alice", codes_ready=True)

    assert not reply.changed and "nothing was done" in reply.text
    assert (await asker.get(card.id)).status is InteractionStatus.PENDING
    assert len(enqueue.calls) == delivered
    assert await grant_rows(store) == []
    assert await edits_of(store, (await card_rows(store, card.id))[0]["id"]) == []
    [refused] = await audit_rows(store, AuditEvent.TAP_REFUSED)
    assert (refused.interaction_id, refused.user_id) == (card.id, ALICE)


async def test_a_tap_on_a_missing_card_changes_nothing(store, enqueue, asker):
    reply = await asker.tap(9999, "approve", ALICE, "Alice", codes_ready=False)
    assert not reply.changed and reply.interaction is None
    assert "no longer exists" in reply.text
    assert enqueue.calls == []
    [refused] = await audit_rows(store, AuditEvent.TAP_REFUSED)
    assert refused.user_id == ALICE and "#9999" in refused.detail


# Cards show what they ask about


async def test_a_card_shows_the_complete_pretty_printed_arguments(store, asker):
    args = {"path": "/srv/site", "options": {"force": False, "depth": [1, 2]}, "note": "é ✓"}
    card = await asker.create(approval(args, step_up=True))

    [row] = await card_rows(store, card.id)

    assert row["kind"] == OutboxKind.TEXT and row["caption"] is None
    [text] = map(plain, row["parts"])
    assert json.dumps(args, indent=2, sort_keys=True, ensure_ascii=False) in text
    assert "Tool: notes.write" in text and "cannot be undone" in text
    buttons = {
        b["text"]: SIGNER.verify(b["callback_data"])
        for line in row["reply_markup"]["inline_keyboard"]
        for b in line
    }
    assert {label: (d.kind, d.id, d.choice) for label, d in buttons.items()} == {
        "Approve + code": ("ix", str(card.id), "approve"),
        "Deny": ("ix", str(card.id), "deny"),
    }


@pytest.mark.parametrize("size", [MESSAGE_LIMIT, 20_000])
async def test_arguments_too_long_for_a_message_go_as_a_file_with_every_argument(
    store, asker, size
):
    body = "".join(f"line {n}: the quick brown fox\n" for n in range(size // 20))
    args = {"path": "notes.md", "text": body, "tail": "the very last argument"}
    card = await asker.create(approval(args))

    [row] = await card_rows(store, card.id)

    assert row["kind"] == OutboxKind.DOCUMENT
    [document] = row["parts"]
    assert json.dumps(args, indent=2, sort_keys=True, ensure_ascii=False) in document
    assert document == cards.card_text(card)  # kept as HTML; the file gets what it shows
    assert len(row["caption"]) <= cards.CAPTION_LIMIT
    assert "attached file" in row["caption"] and f"card #{card.id}" in row["caption"]
    assert row["reply_markup"]["inline_keyboard"]


async def test_a_settled_card_starts_with_the_verdict_and_keeps_the_arguments(store, asker):
    args = {"text": "hello"}
    card = await asker.create(approval(args))
    await asker.tap(card.id, "deny", BOB, "Bob", codes_ready=False)

    [row] = await card_rows(store, card.id)
    [edit] = await edits_of(store, row["id"])

    text = plain(edit["parts"][0])
    assert text.startswith("❌ Denied by Bob at ")
    assert json.dumps(args, indent=2) in text and "Expires at" not in text
    assert (edit["chat_id"], edit["reply_markup"]) == (CHAT, None)


async def test_pending_lists_open_cards_and_resend_sends_a_live_copy(store, enqueue, asker):
    first = await asker.create(approval({"n": 1}))
    second = await asker.create(approval({"n": 2}))
    settled = await asker.create(approval({"n": 3}))
    await asker.tap(settled.id, "deny", ALICE, "Alice", codes_ready=False)

    listed, total = await asker.open_interactions()
    assert [i.id for i in listed] == [first.id, second.id] and total == 2

    await asker.resend(first, Place(CHAT + 1))
    await asker.tap(first.id, "approve", ALICE, "Alice", codes_ready=False)
    rows = await card_rows(store, first.id)
    assert [r["chat_id"] for r in rows] == [CHAT, CHAT + 1]
    for row in rows:  # every copy of the card is settled, not just the first
        [edit] = await edits_of(store, row["id"])
        assert edit["chat_id"] == row["chat_id"]
        assert plain(edit["parts"][0]).startswith("✅ Approved")
