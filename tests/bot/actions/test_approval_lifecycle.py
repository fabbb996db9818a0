"""The approval lifecycle as a state machine (hypothesis): gated calls make cards, owners tap
Approve or Deny, send fresh, wrong and replayed codes, deadlines pass (forced into the past),
sweeps expire what is due, and agents retry the identical call or a slightly different one.

A model predicts every outcome; after every step the database and the toolbox must agree that
nothing ran without a grant, no grant was used twice or after it expired, and no timeout turned
into a yes. Each example runs on a fresh SQLite file, one event loop per example.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
from hypothesis import HealthCheck, event, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from sqlalchemy import select

from bot.actions.call import CallStatus, ToolCall
from bot.chat import codes
from bot.chat.codes import CodeVerifier
from bot.errors import PairingLocked
from bot.store import migrate
from bot.store.database import Store
from bot.store.tables import audit_events, grants, interactions
from policies.canonical import approval_hash
from tests.helpers.interactions import (
    ALICE,
    BOB,
    BUILT_TOOLS,
    CHAT,
    SECRET,
    STEP,
    TOTP,
    Clock,
    RecordingEnqueue,
    Toolbox,
    build_platform,
    move_into_past,
)

AGENT = "scribe"
# The calls agents make, in pairs that differ by one character: each needs its own approval.
CALLS = (
    ("notes.write", {"text": "draft"}),
    ("notes.write", {"text": "drafts"}),
    ("site.deploy", {"ref": "v1"}),
    ("site.deploy", {"ref": "v2"}),
)
SIBLING = {0: 1, 1: 0, 2: 3, 3: 2}  # the same call with one character changed
OPEN = ("pending", "awaiting_code")
USERS = st.sampled_from([ALICE, BOB])


@dataclass
class Card:
    id: int
    args_hash: str
    step_up: bool
    status: str = "pending"
    outcome: str | None = None
    due: bool = False
    code_from: int | None = None


@dataclass
class Grant:
    card_id: int
    args_hash: str
    used: bool = False
    expired: bool = False

    @property
    def live(self) -> bool:
        return not self.used and not self.expired


def hash_of(index: int) -> str:
    tool, args = CALLS[index]
    return approval_hash(AGENT, tool, args)


class ApprovalLifecycle(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        # Memory-backed where there is one: a hundred small databases, each thrown away.
        shm = Path("/dev/shm")
        self.folder = Path(
            tempfile.mkdtemp(prefix="aegis-lifecycle-", dir=shm if shm.is_dir() else None)
        )
        self.enqueue = RecordingEnqueue()
        self.toolbox = Toolbox(BUILT_TOOLS)
        self.run(self.open_store())
        # Codes read this clock, which moves one step per fresh code (test_codes.py does the
        # same); teardown puts the real one back.
        self.clock = Clock()
        self.real_now, codes.now = codes.now, self.clock
        # The model.
        self.model: dict[int, Card] = {}
        self.grants: list[Grant] = []
        self.effects: Counter[str] = Counter()
        self.last_step: int | None = None
        self.last_accepted_code: str | None = None
        self.wrong_codes: dict[int, list] = {ALICE: [], BOB: []}
        self.last_call = 0

    async def open_store(self) -> None:
        self.store = Store(f"sqlite+aiosqlite:///{self.folder / 'aegis.sqlite3'}")
        await migrate.upgrade(self.store)
        self.platform = build_platform(self.folder, self.store, self.enqueue, self.toolbox)
        self.verifier = CodeVerifier(self.store, SECRET)

    def run(self, coroutine) -> Any:
        return self.loop.run_until_complete(coroutine)

    def teardown(self) -> None:
        codes.now = self.real_now
        self.run(self.store.close())
        self.loop.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    @initialize()
    def every_call_is_asked_once(self) -> None:
        for call in range(len(CALLS)):
            self.perform(call)

    # Agents

    @rule(call=st.integers(0, len(CALLS) - 1))
    def perform(self, call: int) -> None:
        """Create (a gated call), use (the identical call once approved) or retry."""
        self.last_call = call
        tool, args = CALLS[call]
        args_hash = hash_of(call)
        outcome = self.run(self.platform.actions.perform(ToolCall(AGENT, tool, args, CHAT)))

        live = [grant for grant in self.grants if grant.args_hash == args_hash and grant.live]
        if live:
            assert outcome.status is CallStatus.RAN, outcome
            assert outcome.interaction_id == live[0].card_id
            live[0].used = True
            self.effects[args_hash] += 1
            event("perform: ran on a grant")
            return
        assert outcome.status is CallStatus.GATED, outcome
        waiting = [c for c in self.model.values() if c.args_hash == args_hash and c.status in OPEN]
        if waiting:
            assert outcome.interaction_id == min(c.id for c in waiting)
            event("perform: waits on an open card")
            return
        assert outcome.interaction_id not in self.model
        card = Card(outcome.interaction_id, args_hash, step_up=tool == "site.deploy")
        self.model[card.id] = card

    @precondition(lambda self: any(grant.live for grant in self.grants))
    @rule(data=st.data())
    def use_a_grant(self, data) -> None:
        """The identical call, retried once its card is approved."""
        live = {grant.args_hash for grant in self.grants if grant.live}
        granted = [call for call in range(len(CALLS)) if hash_of(call) in live]
        self.perform(data.draw(st.sampled_from(granted)))

    @rule(changed=st.booleans())
    def retry(self, changed: bool) -> None:
        """The last call again: identical, or with one character of its arguments changed."""
        self.perform(SIBLING[self.last_call] if changed else self.last_call)

    # Owners

    @precondition(lambda self: self.open_cards())
    @rule(data=st.data(), user=USERS)
    def approve(self, data, user: int) -> None:
        self.tap_card(data.draw(st.sampled_from(self.open_cards())), "approve", user)

    @precondition(lambda self: self.model)
    @rule(data=st.data(), choice=st.sampled_from(["approve", "deny"]), user=USERS)
    def tap(self, data, choice: str, user: int) -> None:
        self.tap_card(data.draw(st.sampled_from(sorted(self.model))), choice, user)

    def tap_card(self, card_id: int, choice: str, user: int) -> None:
        reply = self.run(
            self.platform.interactions.tap(card_id, choice, user, str(user), codes_ready=True)
        )
        card = self.model[card_id]
        if card.status not in OPEN:
            assert not reply.changed and reply.text.startswith("Already settled"), reply
        elif card.due:
            assert reply.text.startswith("Already settled: ⌛ Expired"), reply
            event("tap: after the deadline")
            card.status, card.outcome = "expired", "expired"
        elif choice == "approve" and card.step_up:
            assert reply.changed and "code" in reply.text, reply
            for other in self.model.values():  # one card at a time waits for an account's code
                if other.status == "awaiting_code" and other.code_from == user:
                    other.status, other.code_from = "pending", None
            card.status, card.code_from = "awaiting_code", user
        else:
            assert reply.changed, reply
            self.settle(card, "approved" if choice == "approve" else "denied")

    def open_cards(self) -> list[int]:
        return sorted(c.id for c in self.model.values() if c.status in OPEN)

    @precondition(lambda self: self.owing())
    @rule(data=st.data(), fresh=st.booleans())
    def send_a_code(self, data, fresh: bool) -> None:
        """A fresh or a wrong code from someone who owes one (mostly), or who does not."""
        user = data.draw(st.sampled_from([*self.owing(), ALICE, BOB]))
        if fresh:
            self.clock.moment += STEP
        self.submit(user, self.clock.code() if fresh else self.clock.wrong_code())

    @precondition(lambda self: self.owing() and self.last_accepted_code)
    @rule(data=st.data())
    def replay_a_code(self, data) -> None:
        """The last code that was accepted, sent again for another card."""
        event("code: replayed")
        self.submit(data.draw(st.sampled_from(self.owing())), self.last_accepted_code)

    def owing(self) -> list[int]:
        return sorted({c.code_from for c in self.model.values() if c.status == "awaiting_code"})

    def submit(self, user: int, code: str) -> None:
        owed = [
            c for c in self.model.values() if c.status == "awaiting_code" and c.code_from == user
        ]
        target = max(owed, key=lambda c: c.id) if owed else None
        moment = self.clock.moment
        recent_wrong = [at for at in self.wrong_codes[user] if at > moment - codes.LOCKOUT_WINDOW]
        try:
            reply = self.run(
                self.platform.interactions.submit_code(user, str(user), code, self.verifier)
            )
        except PairingLocked:
            assert target is not None and not target.due
            assert len(recent_wrong) >= codes.LOCKOUT_AFTER
            event("code: locked out")
            return
        if target is None:
            assert reply is None
            return
        if target.due:
            assert reply.text.startswith("Already settled: ⌛ Expired"), reply
            target.status, target.outcome = "expired", "expired"
            return
        assert len(recent_wrong) < codes.LOCKOUT_AFTER
        step = self.matching_step(code)
        if step is not None and (self.last_step is None or step > self.last_step):
            assert reply.changed and reply.text.startswith("✅ Approved"), reply
            self.last_step, self.last_accepted_code = step, code
            self.settle(target, "approved")
            event("code: granted")
        else:
            assert not reply.changed and "still waiting" in reply.text, reply
            self.wrong_codes[user].append(moment)
            event("code: refused, the card still waits")

    def matching_step(self, code: str) -> int | None:
        current = TOTP.timecode(self.clock.moment)
        for step in range(current + codes.DRIFT_STEPS, current - codes.DRIFT_STEPS - 1, -1):
            if TOTP.generate_otp(step) == code:
                return step
        return None

    def settle(self, card: Card, outcome: str) -> None:
        card.status, card.outcome = "resolved", outcome
        if outcome == "approved":
            self.grants.append(Grant(card.id, card.args_hash))

    # Time

    @rule(data=st.data(), what=st.sampled_from(["card deadline", "grant deadline", "sweep"]))
    def time_passes(self, data, what: str) -> None:
        """A deadline passes (forced into the past), or the sweep expires what is due."""
        live = [grant for grant in self.grants if grant.live]
        if what == "card deadline" and self.model:
            card_id = data.draw(st.sampled_from(sorted(self.model)))
            self.run(move_into_past(self.store, interactions, card_id))
            self.model[card_id].due = True
        elif what == "grant deadline" and live:
            grant = data.draw(st.sampled_from(live))
            self.run(move_into_past(self.store, grants, self.run(self.grant_id(grant.card_id))))
            grant.expired = True
            event("grant: expired unused")
        else:
            self.sweep()

    def sweep(self) -> None:
        due = self.run(self.platform.interactions.due_for_expiry())
        expected = sorted(c.id for c in self.model.values() if c.due and c.status in OPEN)
        assert due == expected
        for card_id in due:
            expired = self.run(self.platform.interactions.expire(card_id))
            assert expired.outcome == "expired"
            self.model[card_id].status = self.model[card_id].outcome = "expired"

    async def grant_id(self, card_id: int) -> int:
        async with self.store.read() as conn:
            query = select(grants.c.id).where(grants.c.interaction_id == card_id)
            return (await conn.execute(query)).scalar_one()

    # What must always hold

    @invariant()
    def nothing_unapproved_ran_and_no_timeout_is_a_yes(self) -> None:
        grant_rows, card_rows, used_events = self.run(self.snapshot())
        # No effect without a grant, and no grant used twice.
        ran = Counter(approval_hash(AGENT, tool, args) for tool, args in self.toolbox.calls)
        used = Counter(row.args_hash for row in grant_rows if row.used_at is not None)
        assert ran == used == +self.effects
        assert sorted(used_events) == sorted({r.interaction_id for r in grant_rows if r.used_at})
        # No grant used after it expired, and none but for an approved card.
        for row in grant_rows:
            card = card_rows[row.interaction_id]
            assert (card.status, card.outcome) == ("resolved", "approved")
            assert row.used_at is None or row.used_at < row.expires_at
        assert not any(grant.expired and grant.used for grant in self.grants)
        # A card that timed out was never a yes.
        granted = {row.interaction_id for row in grant_rows}
        for card in card_rows.values():
            if card.status == "expired":
                assert card.id not in granted and card.resolved_by is None
        # And the model saw it all coming.
        assert {c.id: (c.status, c.outcome) for c in card_rows.values()} == {
            c.id: (c.status, c.outcome) for c in self.model.values()
        }
        assert [(g.card_id, g.used) for g in self.grants] == [
            (row.interaction_id, row.used_at is not None) for row in grant_rows
        ]

    async def snapshot(self):
        async with self.store.read() as conn:
            rows = (await conn.execute(select(grants).order_by(grants.c.id))).all()
            cards = {row.id: row for row in (await conn.execute(select(interactions))).all()}
            used = select(audit_events.c.interaction_id).where(audit_events.c.event == "used")
            used_events = list((await conn.execute(used)).scalars())
        return rows, cards, used_events


ApprovalLifecycle.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=35,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestApprovalLifecycle = ApprovalLifecycle.TestCase
