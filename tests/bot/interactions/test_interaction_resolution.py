"""How an interaction is settled, against SQLite and Postgres, with no Telegram and no broker: one
winner among concurrent taps, a timeout that is never a yes (and a hold card that never
expires), what a card must name to be asked, and step-up codes after a tap.

``enqueue`` is a recorder (tests/helpers/interactions.py); TOTP codes read ``bot.chat.codes.now``,
which the step-up tests set, as in test_codes.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta

import pytest

from bot.actions.audit import AuditEvent
from bot.chat import codes
from bot.chat.codes import CodeVerifier
from bot.chat.text import plain
from bot.errors import PairingLocked
from bot.interactions.interaction import (
    InteractionOutcome,
    InteractionStatus,
    Kind,
    TimeoutPolicy,
)
from bot.store.database import Store
from bot.store.tables import interactions as interactions_table
from tests.helpers.asks import RESUME, ask
from tests.helpers.interactions import (
    ALICE,
    BOB,
    SECRET,
    STEP,
    Clock,
    approval,
    audit_rows,
    card_rows,
    edits_of,
    grant_rows,
    make_interactions,
    move_into_past,
)

TINY = timedelta(milliseconds=1)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(codes, "now", clock)
    return clock


@pytest.fixture
def verifier(store, clock) -> CodeVerifier:
    return CodeVerifier(store, SECRET)


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
    assert plain(edit["parts"][0]).startswith("⌛ Expired at ")

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
