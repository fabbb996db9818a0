"""Interactions against SQLite and Postgres, with no Telegram and no broker: one winner among
concurrent taps, a timeout that is never a yes, step-up codes, every kind of card, replies,
continuations claimed once, and cards that show everything they ask about.

``enqueue`` is a recorder (tests/helpers/interactions.py); TOTP codes read ``bot.chat.codes.now``,
which the step-up tests set, as in test_codes.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from datetime import timedelta

import pytest

from bot.actions.audit import AuditEvent
from bot.chat import codes
from bot.chat.codes import CodeVerifier
from bot.chat.outbox import TELEGRAM_TEXT_LIMIT, Outbox, OutboxKind
from bot.chat.views import cards
from bot.errors import PairingLocked
from bot.interactions.interaction import (
    Ask,
    InteractionOutcome,
    InteractionStatus,
    Kind,
    TimeoutPolicy,
)
from bot.store.database import Store
from bot.store.tables import interactions as interactions_table
from tests.helpers.interactions import (
    ALICE,
    BOB,
    CHAT,
    SECRET,
    SIGNER,
    STEP,
    Clock,
    RecordingEnqueue,
    approval,
    audit_rows,
    card_rows,
    edits_of,
    grant_rows,
    make_interactions,
    move_into_past,
)

TINY = timedelta(milliseconds=1)
RESUME = {"continuation_actor": "resume", "continuation_kwargs": {"task": 7}}


@pytest.fixture
def enqueue() -> RecordingEnqueue:
    return RecordingEnqueue()


@pytest.fixture
def asker(store, enqueue):
    return make_interactions(store, enqueue)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(codes, "now", clock)
    return clock


@pytest.fixture
def verifier(store, clock) -> CodeVerifier:
    return CodeVerifier(store, SECRET)


def ask(kind: Kind, **overrides) -> Ask:
    values = {"kind": kind, "agent": "scribe", "chat_id": CHAT, "prompt": "Which one?"}
    values.update(overrides)
    return Ask(**values)


# One winner


@pytest.mark.parametrize("separate_stores", [False, True], ids=["one-store", "twenty-stores"])
async def test_of_twenty_concurrent_approvals_exactly_one_wins(
    store, database_url, enqueue, asker, separate_stores
):
    card = await asker.create(approval(**RESUME))
    # Separate stores race on their own connections, as the web process and workers would.
    stores = [Store(database_url) for _ in range(20)] if separate_stores else [store] * 20
    try:
        replies = await asyncio.gather(
            *(
                make_interactions(s, enqueue).tap(
                    card.id, "approve", 2000 + i, f"Owner {i}", codes_ready=False
                )
                for i, s in enumerate(stores)
            )
        )
    finally:
        if separate_stores:
            for extra in stores:
                await extra.close()

    [winner] = [reply for reply in replies if reply.changed]
    settled = await asker.get(card.id)
    assert (settled.status, settled.outcome) == (
        InteractionStatus.RESOLVED,
        InteractionOutcome.APPROVED,
    )
    assert settled.resolved_by == winner.interaction.resolved_by
    name = settled.resolved_by_name
    assert winner.text.startswith(f"✅ Approved by {name} at ")
    losers = [reply.text for reply in replies if not reply.changed]
    assert len(losers) == 19
    for text in losers:
        assert text.startswith(f"Already settled: ✅ Approved by {name} at "), text
    assert len(await grant_rows(store, card.id)) == 1
    assert len(await audit_rows(store, AuditEvent.GRANTED)) == 1
    assert enqueue.continuations() == [("resume", {"task": 7, "interaction_id": card.id})]


# Timeouts: never a yes


async def test_an_approve_tap_after_the_deadline_expires_the_card_and_grants_nothing(
    store, enqueue, asker
):
    card = await asker.create(approval(timeout=TINY, **RESUME))
    await asyncio.sleep(0.02)

    reply = await asker.tap(card.id, "approve", ALICE, "Alice", codes_ready=False)

    assert reply.text.startswith("Already settled: ⌛ Expired at ")
    assert reply.interaction.status is InteractionStatus.EXPIRED
    stored = await asker.get(card.id)
    assert (stored.status, stored.outcome) == (
        InteractionStatus.EXPIRED,
        InteractionOutcome.EXPIRED,
    )
    assert stored.resolved_by is None and stored.resolved_at == card.expires_at
    assert await grant_rows(store) == []
    assert len(await audit_rows(store, AuditEvent.EXPIRED)) == 1
    assert await audit_rows(store, AuditEvent.GRANTED) == []
    assert enqueue.continuations() == [("resume", {"task": 7, "interaction_id": card.id})]
    [edit] = await edits_of(store, (await card_rows(store, card.id))[0]["id"])
    assert edit["parts"][0].startswith("⌛ Expired at ")

    again = await asker.tap(card.id, "approve", BOB, "Bob", codes_ready=False)
    assert not again.changed and again.text.startswith("Already settled: ⌛ Expired at ")
    assert len(enqueue.continuations()) == 1


async def test_expire_settles_a_due_card_once(store, enqueue, asker):
    due = await asker.create(approval(timeout=TINY, **RESUME))
    not_due = await asker.create(approval({"text": "later"}))
    await asyncio.sleep(0.02)
    assert await asker.due_for_expiry() == [due.id]
    assert await asker.expire(not_due.id) is None

    expired = await asker.expire(due.id)

    assert (expired.status, expired.outcome) == (
        InteractionStatus.EXPIRED,
        InteractionOutcome.EXPIRED,
    )
    assert await asker.expire(due.id) is None
    assert await asker.due_for_expiry() == []
    assert (await asker.get(not_due.id)).status is InteractionStatus.PENDING
    assert await grant_rows(store) == []
    assert enqueue.continuations() == [("resume", {"task": 7, "interaction_id": due.id})]
    late = await asker.tap(due.id, "approve", ALICE, "Alice", codes_ready=False)
    assert not late.changed and await grant_rows(store) == []


async def test_a_hold_card_never_expires(store, asker):
    card = await asker.create(
        ask(Kind.ACKNOWLEDGEMENT, timeout=TINY, timeout_policy=TimeoutPolicy.HOLD)
    )
    await asyncio.sleep(0.02)
    assert card.expires_at is None
    assert await asker.due_for_expiry() == []
    assert await asker.expire(card.id) is None
    assert "It waits until you answer." in (await card_rows(store, card.id))[0]["parts"][0]

    reply = await asker.tap(card.id, "ack", ALICE, "Alice", codes_ready=False)

    assert reply.changed and reply.interaction.outcome == InteractionOutcome.ACKNOWLEDGED


async def test_an_approval_must_name_one_call_bound_to_its_hash(store, asker):
    """A grant binds the exact call the card shows: an approval with no tool, or whose hash is
    not the hash of the arguments shown, is refused when it is asked."""
    with pytest.raises(ValueError, match="one call"):
        await asker.create(ask(Kind.APPROVAL, prompt="Shall I go on with the plan?"))
    shown = approval({"text": "hello"})
    with pytest.raises(ValueError, match="one call"):
        await asker.create(dataclasses.replace(shown, args={"text": "hellO"}))


async def test_an_archive_card_needs_a_timeout_and_a_choice_needs_options(asker):
    with pytest.raises(ValueError, match="timeout"):
        await asker.create(approval(timeout=None))
    with pytest.raises(ValueError, match="options"):
        await asker.create(ask(Kind.CHOICE))
    assert await asker.open_interactions() == ([], 0)


# Step-up: a tap, then a valid code from whoever tapped


async def test_a_step_up_approval_needs_a_valid_code_from_whoever_tapped(
    store, enqueue, asker, verifier, clock
):
    card = await asker.create(approval(step_up=True, **RESUME))

    tapped = await asker.tap(card.id, "approve", ALICE, "Alice", codes_ready=True)
    assert tapped.changed and "6-digit code" in tapped.text
    waiting = await asker.get(card.id)
    assert (waiting.status, waiting.code_from) == (InteractionStatus.AWAITING_CODE, ALICE)
    assert await grant_rows(store) == [] and enqueue.continuations() == []
    assert len(await audit_rows(store, AuditEvent.CODE_ASKED)) == 1

    wrong = await asker.submit_code(ALICE, "Alice", clock.wrong_code(), verifier)
    assert not wrong.changed and "not valid" in wrong.text and "still waiting" in wrong.text
    assert (await asker.get(card.id)).status is InteractionStatus.AWAITING_CODE
    assert len(await audit_rows(store, AuditEvent.CODE_REFUSED)) == 1

    # Bob owes no code: his message is an ordinary one, and the code is not spent.
    assert await asker.submit_code(BOB, "Bob", clock.code(), verifier) is None
    assert await grant_rows(store) == []

    granted = await asker.submit_code(ALICE, "Alice", clock.code(), verifier)

    assert granted.changed and granted.text.startswith("✅ Approved by Alice at ")
    assert (await asker.get(card.id)).status is InteractionStatus.RESOLVED
    [grant] = await grant_rows(store)
    assert (grant.interaction_id, grant.granted_by, grant.used_at) == (card.id, ALICE, None)
    assert enqueue.continuations() == [("resume", {"task": 7, "interaction_id": card.id})]
    assert await asker.submit_code(ALICE, "Alice", clock.code(), verifier) is None


async def test_a_code_grants_one_step_up_card_and_is_refused_on_the_next(
    store, asker, verifier, clock
):
    first = await asker.create(approval({"name": "a"}, step_up=True))
    second = await asker.create(approval({"name": "b"}, step_up=True))
    await asker.tap(second.id, "approve", ALICE, "Alice", codes_ready=True)
    code = clock.code()

    assert (await asker.submit_code(ALICE, "Alice", code, verifier)).changed
    await asker.tap(first.id, "approve", ALICE, "Alice", codes_ready=True)
    replayed = await asker.submit_code(ALICE, "Alice", code, verifier)

    assert not replayed.changed and "already used" in replayed.text
    assert [g.interaction_id for g in await grant_rows(store)] == [second.id]
    assert (await asker.get(first.id)).status is InteractionStatus.AWAITING_CODE
    clock.moment += STEP
    assert (await asker.submit_code(ALICE, "Alice", clock.code(), verifier)).changed
    assert [g.interaction_id for g in await grant_rows(store)] == [second.id, first.id]


async def test_a_code_goes_to_the_card_tapped_last_and_no_other(store, asker, verifier, clock):
    first = await asker.create(approval({"name": "a"}, step_up=True))
    second = await asker.create(approval({"name": "b"}, step_up=True))
    await asker.tap(second.id, "approve", ALICE, "Alice", codes_ready=True)
    await asker.tap(first.id, "approve", ALICE, "Alice", codes_ready=True)

    assert (await asker.submit_code(ALICE, "Alice", clock.code(), verifier)).changed
    assert [g.interaction_id for g in await grant_rows(store)] == [first.id]
    assert (await asker.get(second.id)).status is InteractionStatus.PENDING  # waits for a tap again


async def test_five_wrong_codes_lock_the_approval_out(store, asker, verifier, clock):
    card = await asker.create(approval(step_up=True))
    await asker.tap(card.id, "approve", ALICE, "Alice", codes_ready=True)
    for _ in range(codes.LOCKOUT_AFTER):
        refused = await asker.submit_code(ALICE, "Alice", clock.wrong_code(), verifier)
        assert not refused.changed

    with pytest.raises(PairingLocked):
        await asker.submit_code(ALICE, "Alice", clock.code(), verifier)

    assert (await asker.get(card.id)).status is InteractionStatus.AWAITING_CODE
    assert await grant_rows(store) == []


async def test_step_up_without_a_totp_secret_starts_nothing(store, asker):
    card = await asker.create(approval(step_up=True))
    reply = await asker.tap(card.id, "approve", ALICE, "Alice", codes_ready=False)
    assert not reply.changed and "none is set up" in reply.text
    assert (await asker.get(card.id)).status is InteractionStatus.PENDING


async def test_deny_on_a_step_up_card_needs_no_code(store, enqueue, asker):
    card = await asker.create(approval(step_up=True, **RESUME))
    await asker.tap(card.id, "approve", ALICE, "Alice", codes_ready=True)
    reply = await asker.tap(card.id, "deny", BOB, "Bob", codes_ready=True)
    assert reply.changed and reply.text.startswith("❌ Denied by Bob at ")
    assert await grant_rows(store) == []
    assert len(await audit_rows(store, AuditEvent.DECLINED)) == 1
    assert enqueue.continuations() == [("resume", {"task": 7, "interaction_id": card.id})]


async def test_a_code_after_the_deadline_expires_the_card(store, asker, verifier, clock):
    card = await asker.create(approval(step_up=True))
    await asker.tap(card.id, "approve", ALICE, "Alice", codes_ready=True)
    await move_into_past(store, interactions_table, card.id)

    reply = await asker.submit_code(ALICE, "Alice", clock.code(), verifier)

    assert reply.text.startswith("Already settled: ⌛ Expired at ")
    assert (await asker.get(card.id)).status is InteractionStatus.EXPIRED
    assert await grant_rows(store) == []


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
    assert edit["parts"][0].startswith(receipt)


async def sent_as(store, outbox_id: int, telegram_message_id: int) -> None:
    """Deliver the card row as a delivery would, recording the Telegram message id."""
    box = Outbox(store)
    message = await box.claim_next_in_chat(outbox_id)
    assert message is not None and message.id == outbox_id
    await box.record_part(message, telegram_message_id)


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
    [text] = row["parts"]
    assert json.dumps(args, indent=2, sort_keys=True, ensure_ascii=False) in text
    assert "Tool: notes.write" in text and "cannot be undone" in text
    buttons = {
        b["text"]: SIGNER.verify(b["callback_data"])
        for line in row["reply_markup"]["inline_keyboard"]
        for b in line
    }
    assert {label: (d.kind, d.id, d.choice) for label, d in buttons.items()} == {
        "Approve (then a code)": ("ix", str(card.id), "approve"),
        "Deny": ("ix", str(card.id), "deny"),
    }


@pytest.mark.parametrize("size", [TELEGRAM_TEXT_LIMIT, 20_000])
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
    assert document == cards.card_text(card)
    assert len(row["caption"]) <= cards.CAPTION_LIMIT
    assert "attached file" in row["caption"] and f"card #{card.id}" in row["caption"]
    assert row["reply_markup"]["inline_keyboard"]


async def test_a_settled_card_starts_with_the_verdict_and_keeps_the_arguments(store, asker):
    args = {"text": "hello"}
    card = await asker.create(approval(args))
    await asker.tap(card.id, "deny", BOB, "Bob", codes_ready=False)

    [row] = await card_rows(store, card.id)
    [edit] = await edits_of(store, row["id"])

    text = edit["parts"][0]
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

    await asker.resend(first, CHAT + 1)
    await asker.tap(first.id, "approve", ALICE, "Alice", codes_ready=False)
    rows = await card_rows(store, first.id)
    assert [r["chat_id"] for r in rows] == [CHAT, CHAT + 1]
    for row in rows:  # every copy of the card is settled, not just the first
        [edit] = await edits_of(store, row["id"])
        assert edit["chat_id"] == row["chat_id"] and edit["parts"][0].startswith("✅ Approved")
