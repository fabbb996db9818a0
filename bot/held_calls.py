"""A gated call held open: how an agent outside aegis's runs waits for its owner.

An agent reaching aegis over MCP cannot be parked and continued the way a run is; it can only
call again. So a gated call is held open for a bounded time (``hold``, 25 s by default: under
the clients' own per-call timeouts) while the card waits for a tap. If the owner approves in
that time, the same call is made again through the gate, which finds the grant and runs it
once, and the held call returns its result. If the time runs out, the agent is told that
nothing was done and to retry the identical call at once, which is held again: an agent polls
with immediate retries instead of sleeping.

The owner's "no" is remembered: for ``REFUSAL_MEMORY`` after a card for this exact call was
denied or expired unanswered, the identical call is refused at once, without a new card, so
an agent cannot turn a refusal into a stream of cards by retrying.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta

from sqlalchemy import select

from bot.actions import Actions, Continuation, Outcome, Status
from bot.interaction import OPEN, Kind
from bot.interaction import Outcome as CardOutcome
from bot.interaction import Status as CardStatus
from bot.store import Store, sqlite_time
from bot.tables import interactions
from bot.timeutil import now
from policies.canonical import approval_hash
from policies.decision import Gate, decide

HOLD_SECONDS = 25.0
# How often a held call looks at its card (one indexed read) when no word comes that it was
# settled: a card settled in this process wakes its calls at once; this catches the rest (one
# that expired in a worker's sweep, a tap handled by another web process).
POLL_SECONDS = 0.25
PROGRESS_EVERY = 5.0  # seconds between progress notes to a waiting client
REFUSAL_MEMORY = timedelta(minutes=15)
REFUSED = (CardOutcome.DENIED, CardOutcome.EXPIRED)
CARD_SQL = "SELECT status, outcome FROM interactions WHERE id = ?"
# _refused_before's query, for Store.read_now; tests/bot/test_held_calls.py holds them together.
REFUSED_SQL = (
    "SELECT id, outcome FROM interactions WHERE args_hash = ? AND kind = 'approval' "
    "AND status NOT IN ('pending', 'awaiting_code') AND resolved_at > ? "
    "ORDER BY id DESC LIMIT 1"
)
Progress = Callable[[float, float, str], Awaitable[None]]


async def _no_progress(done: float, total: float, message: str) -> None:
    return None


class HeldCalls:
    def __init__(
        self, actions: Actions, *, hold: float = HOLD_SECONDS, poll: float = POLL_SECONDS
    ) -> None:
        self.actions = actions
        self.store: Store = actions.store
        self.hold = hold
        self.poll = poll
        self._waiting: dict[int, set[asyncio.Event]] = {}
        actions.interactions.settled_listeners.append(self._wake)

    def _wake(self, card: int) -> None:
        for event in self._waiting.get(card, ()):
            event.set()

    async def call(
        self,
        agent: str,
        tool: str,
        args,
        *,
        chat_id: int,
        run_id: int | None = None,
        progress: Progress = _no_progress,
    ) -> Outcome:
        """Make the call through the gate; if it is gated, hold it until the card is settled
        or ``hold`` seconds have passed, whichever is first."""
        # Only a call the gate would hold can have been refused; a read costs no lookup.
        if isinstance(decide(self.actions.catalog, agent, tool, args), Gate):
            refused = await self._refused_before(agent, tool, args)
            if refused is not None:
                return refused
        outcome = await self._perform(agent, tool, args, chat_id, run_id)
        if outcome.status is not Status.GATED:
            return outcome
        card = outcome.interaction_id
        settled = asyncio.Event()
        self._waiting.setdefault(card, set()).add(settled)
        try:
            return await self._hold(card, settled, progress, agent, tool, args, chat_id, run_id)
        finally:
            waiters = self._waiting.get(card, set())
            waiters.discard(settled)
            if not waiters:
                self._waiting.pop(card, None)

    async def _hold(self, card, settled, progress, agent, tool, args, chat_id, run_id) -> Outcome:
        started = time.monotonic()
        deadline = started + self.hold
        next_note = started
        while True:
            moment = time.monotonic()
            if moment >= next_note:
                waited = moment - started
                await progress(waited, self.hold, f"waiting for the owner's answer on card #{card}")
                next_note = moment + PROGRESS_EVERY
            status, answer = await self._card(card)
            if status not in OPEN:
                return await self._settled(card, answer, agent, tool, args, chat_id, run_id)
            if moment >= deadline:
                return Outcome(Status.GATED, _still_waiting(card, self.hold), None, card)
            settled.clear()
            with contextlib.suppress(TimeoutError):
                wait = min(self.poll, max(0.0, deadline - moment), next_note - moment)
                await asyncio.wait_for(settled.wait(), timeout=max(0.0, wait))

    async def _settled(self, card, answer, agent, tool, args, chat_id, run_id) -> Outcome:
        if answer != CardOutcome.APPROVED:
            return _refusal(card, answer)
        # Approved: the identical call again, which uses the grant. Shielded, so a client that
        # hangs up now cannot stop a tool between its grant being used and its end.
        return await asyncio.shield(self._perform(agent, tool, args, chat_id, run_id))

    async def _perform(self, agent, tool, args, chat_id, run_id) -> Outcome:
        return await self.actions.perform(
            agent, tool, args, chat_id=chat_id, run_id=run_id, continuation=NO_CONTINUATION
        )

    async def _card(self, card: int) -> tuple[str | None, str | None]:
        if self.store.is_sqlite:
            rows = self.store.read_now(CARD_SQL, (card,))
        else:
            query = select(interactions.c.status, interactions.c.outcome).where(
                interactions.c.id == card
            )
            async with self.store.read() as conn:
                rows = (await conn.execute(query)).all()
        return tuple(rows[0]) if rows else (CardStatus.EXPIRED, CardOutcome.EXPIRED)

    async def _refused_before(self, agent: str, tool: str, args) -> Outcome | None:
        """A refusal of this exact call the owner gave within REFUSAL_MEMORY, if any."""
        try:
            args_hash = approval_hash(agent, tool, args)
        except (TypeError, ValueError):
            return None  # the gate refuses such arguments itself, with the reason
        since = now() - REFUSAL_MEMORY
        if self.store.is_sqlite:
            rows = self.store.read_now(REFUSED_SQL, (args_hash, sqlite_time(since)))
            found = rows[0] if rows else None
            if found is None or found[1] not in REFUSED:
                return None
            return _refusal(found[0], found[1])
        query = (
            select(interactions.c.id, interactions.c.outcome)
            .where(
                interactions.c.args_hash == args_hash,
                interactions.c.kind == Kind.APPROVAL,
                interactions.c.status.not_in(OPEN),
                interactions.c.resolved_at > since,
            )
            .order_by(interactions.c.id.desc())
            .limit(1)
        )
        async with self.store.read() as conn:
            row = (await conn.execute(query)).first()
        if row is None or row.outcome not in REFUSED:
            return None
        return _refusal(row.id, row.outcome)


# Held calls wait here instead of being continued: nothing is enqueued when their card settles.
NO_CONTINUATION: Continuation | None = None


def _refusal(card: int, answer: str | None) -> Outcome:
    how = "denied it" if answer == CardOutcome.DENIED else "did not answer in time"
    return Outcome(
        Status.DENIED,
        f"the owner {how} on card #{card}; nothing was done. Do not retry this call: "
        "the owner will not be asked again for the same arguments for "
        f"{int(REFUSAL_MEMORY.total_seconds() // 60)} minutes",
        None,
        card,
    )


def _still_waiting(card: int, hold: float) -> str:
    return (
        f"Waiting for the owner's approval on card #{card}. Nothing was done yet. Retry this "
        f"identical call now: each retry waits up to {hold:g} s for the answer and runs the "
        "call once it is approved; any change to the arguments needs a new approval."
    )
