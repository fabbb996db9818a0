"""A gated call held open: how an agent outside aegis's runs waits for its owner.

An agent reaching aegis over MCP cannot be parked and continued the way a run is; it can only
call again. So a gated call is held open for a bounded time (``hold``, 25 s by default: under
the clients' own per-call timeouts) while the card waits for a tap. If the owner approves in
that time, the same call is made again through the gate, which finds the grant and runs it
once, and the held call returns its result. If the time runs out, the agent is told that
nothing was done and to retry the identical call at once, which is held again: an agent polls
with immediate retries instead of sleeping.

What bounds it:

- The owner's "no" is remembered: for ``REFUSAL_MEMORY`` after a card for this exact call was
  denied or expired unanswered, the identical call is refused at once, without a new card, so
  an agent cannot turn a refusal into a stream of cards by retrying.
- An agent has at most ``MAX_OPEN_CARDS`` approval cards open at once; past that a new call is
  refused (a retry of a call already waiting on its card still waits), so one token cannot
  flood the owner's chat.
- At most ``MAX_HELD`` calls of one agent are held at once; past that a call waits a moment
  and is told to retry, so a client cannot pin a crowd of waiters on the web process.
- A call that may use a grant is shielded: a client that hangs up cannot stop a tool between
  its grant being used and its end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta

from sqlalchemy import case, func, select

from bot.actions.actions import Actions
from bot.actions.audit import Audit, AuditEvent
from bot.actions.call import CallOutcome, CallStatus, Ruling, ToolCall
from bot.interactions.interaction import OPEN, InteractionOutcome, Kind
from bot.store.database import Store
from bot.store.fast_paths import CARD_STATUS, SETTLED_APPROVAL, fetch
from bot.store.tables import grants, interactions
from bot.timeutil import now
from policies.decision import Gate

logger = logging.getLogger(__name__)
HOLD_SECONDS = 25.0
# How often a held call looks at its card (one indexed read) when no word comes that it was
# settled: a card settled in this process wakes its calls at once; this catches the rest (one
# that expired in a worker's sweep, a tap handled by another web process).
POLL_SECONDS = 0.25
PROGRESS_EVERY = 5.0  # seconds between progress notes to a waiting client
REFUSAL_MEMORY = timedelta(minutes=15)
MAX_OPEN_CARDS = 10  # approval cards one agent may have waiting at once
MAX_HELD = 8  # calls of one agent held open at once
CROWDED_PAUSE = 1.0  # seconds a call past MAX_HELD waits before it is told to retry
REFUSED = (InteractionOutcome.DENIED, InteractionOutcome.EXPIRED)
Progress = Callable[[float, float, str], Awaitable[None]]


async def _no_progress(done: float, total: float, message: str) -> None:
    return None


@dataclass
class GrantTurn:
    """Identical calls woken by one approved card take turns to use its one grant."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    wanted: int = 0


class HeldCalls:
    def __init__(
        self,
        actions: Actions,
        *,
        hold: float = HOLD_SECONDS,
        poll: float = POLL_SECONDS,
        progress_every: float = PROGRESS_EVERY,
    ) -> None:
        self.actions = actions
        self.store: Store = actions.store
        self.hold = hold
        self.poll = poll
        self.progress_every = progress_every
        self._waiting: dict[int, set[asyncio.Event]] = {}
        self._held = Counter()  # agent -> calls held now
        self._settling: dict[str, GrantTurn] = {}  # args hash -> the turn to use its grant
        self._asking: dict[str, asyncio.Lock] = {}  # agent -> one gated call asks at a time
        self._running: set[asyncio.Task] = set()  # calls under way, kept until they end
        actions.interactions.settled_listeners.append(self._wake)

    def _wake(self, card: int) -> None:
        for event in self._waiting.get(card, ()):
            event.set()

    async def call(
        self,
        call: ToolCall,
        *,
        progress: Progress = _no_progress,
        on_hold: Callable[[int], Awaitable[None]] | None = None,
    ) -> CallOutcome:
        """Make the call through the gate; if it is gated, hold it until the card is settled
        or ``hold`` seconds have passed, whichever is first. A call with no chat to ask in
        (``chat_id`` None) runs only what the gate allows outright. ``on_hold`` is told the
        card a call is about to be held on (a run shows it in its message)."""
        agent = call.agent
        if call.args_hash is None:
            return await self._perform(call, None)  # the gate refuses it, saying why
        ruling = self.actions.rule(call)
        if isinstance(ruling.decision, Gate):
            # One gated call of an agent at a time counts its cards and makes its own, so calls
            # sent together cannot all pass the cap (one web process serves MCP).
            async with self._asking.setdefault(agent, asyncio.Lock()):
                refused = await self._before_asking(call)
                if refused is not None:
                    return refused
                outcome = await self._perform(call, ruling)
        else:
            outcome = await self._perform(call, ruling)
        if outcome.status is not CallStatus.GATED:
            return outcome
        card = outcome.interaction_id
        if on_hold is not None:
            try:
                await on_hold(card)
            except Exception:  # showing the wait is worth less than the call itself
                logger.warning("%s: the wait on card #%s was not shown", agent, card, exc_info=True)
        if self._held[agent] >= MAX_HELD:
            await asyncio.sleep(CROWDED_PAUSE)
            return CallOutcome(CallStatus.GATED, _still_waiting(card, self.hold), None, card)
        settled = asyncio.Event()
        self._waiting.setdefault(card, set()).add(settled)
        self._held[agent] += 1
        try:
            return await self._hold(card, settled, progress, call, ruling)
        finally:
            self._held[agent] -= 1
            waiters = self._waiting.get(card, set())
            waiters.discard(settled)
            if not waiters:
                self._waiting.pop(card, None)

    async def _hold(self, card, settled, progress, call: ToolCall, ruling: Ruling) -> CallOutcome:
        started = time.monotonic()
        deadline = started + self.hold
        next_note = started
        while True:
            moment = time.monotonic()
            if moment >= next_note:
                waited = moment - started
                await progress(waited, self.hold, f"waiting for the owner's answer on card #{card}")
                next_note = moment + self.progress_every
            settled.clear()  # before the look: a tap after it still wakes the wait below
            status, answer = await self._card(card)
            if status is None:
                return CallOutcome(
                    CallStatus.DENIED, f"card #{card} is gone; nothing was done", None, card
                )
            if status not in OPEN:
                return await self._settled(card, answer, call, ruling)
            moment = time.monotonic()
            if moment >= deadline:
                ran_on = await self.ran_before(call)
                return CallOutcome(
                    CallStatus.GATED, _still_waiting(card, self.hold, ran_on), None, card
                )
            with contextlib.suppress(TimeoutError):
                wait = min(self.poll, deadline - moment, max(0.0, next_note - moment))
                await asyncio.wait_for(settled.wait(), timeout=wait)

    async def _settled(self, card, answer, call: ToolCall, ruling: Ruling) -> CallOutcome:
        if answer != InteractionOutcome.APPROVED:
            return _refusal(card, answer)
        # Approved: the identical call again, which uses the grant. Identical calls held on
        # the same card take turns here: the first uses the grant, and the others, finding it
        # gone, must not ask again.
        args_hash = call.args_hash
        turn = self._settling.setdefault(args_hash, GrantTurn())
        turn.wanted += 1
        try:
            await turn.lock.acquire()
        except BaseException:
            self._leave(args_hash, turn, locked=False)
            raise
        # The turn is held until the call that uses the grant has ended, even if its client
        # hangs up meanwhile (so the next in line finds the grant used, and asks nothing).
        try:
            live = await self.actions.approvals.has_live_grant(args_hash)
        except BaseException:
            self._leave(args_hash, turn, locked=True)
            raise
        if not live:
            self._leave(args_hash, turn, locked=True)
            return CallOutcome(
                CallStatus.DENIED,
                f"card #{card} was approved and an identical call that waited on it ran once; "
                "this one did not run. Call again to ask for it to run again",
                None,
                card,
            )
        return await self._perform(call, ruling, then=lambda: self._leave(args_hash, turn, True))

    def _leave(self, args_hash: str, turn: GrantTurn, locked: bool) -> None:
        if locked:
            turn.lock.release()
        turn.wanted -= 1
        if turn.wanted == 0 and self._settling.get(args_hash) is turn:
            del self._settling[args_hash]

    async def _perform(self, call: ToolCall, ruling: Ruling | None, then=None) -> CallOutcome:
        """The call through the gate, as a task of its own: once a call may use its grant, the
        tool runs to its end even if the client hangs up (its result is then lost to the
        client, never half-done), and how it ended is still seen (``then``, and the log)."""
        task = asyncio.ensure_future(self.actions.perform(call, ruling=ruling))
        self._running.add(task)

        def ended(task: asyncio.Task) -> None:
            self._running.discard(task)
            if then is not None:
                then()
            if not task.cancelled() and task.exception() is not None:
                logger.error(
                    "%s's call of %s failed", call.agent, call.tool, exc_info=task.exception()
                )

        task.add_done_callback(ended)
        return await asyncio.shield(task)

    async def _card(self, card: int) -> tuple[str | None, str | None]:
        rows = await fetch(self.store, CARD_STATUS, card=card)
        return rows[0] if rows else (None, None)

    async def _before_asking(self, call: ToolCall) -> CallOutcome | None:
        """Why this call, which the gate would hold, may not ask the owner now; None if it may."""
        agent, args_hash = call.agent, call.args_hash
        reason = None
        refused = await self._refused_before(args_hash)
        if refused is not None:
            reason = _refusal(*refused)
        elif call.chat_id is None:
            reason = CallOutcome(
                CallStatus.DENIED,
                "aegis knows no owner chat to ask in (set AEGIS_OWNER_IDS), so it runs nothing "
                "that needs an approval",
            )
        else:
            open_cards, this_one = await self._open_cards(agent, args_hash)
            if open_cards >= MAX_OPEN_CARDS and not this_one:
                reason = CallOutcome(
                    CallStatus.DENIED,
                    f"{agent} already has {open_cards} approval cards waiting for the owner; "
                    "nothing was done. Retry a call that is waiting, or try again once some "
                    "are answered",
                )
        if reason is not None:
            await Audit(self.store).record(
                AuditEvent.DENIED,
                f"not asked again: {reason.reason}",
                **call.audited,
                interaction_id=reason.interaction_id,
            )
        return reason

    async def _refused_before(self, args_hash: str) -> tuple[int, str] | None:
        """The card on which the owner refused this exact call within REFUSAL_MEMORY."""
        rows = await fetch(
            self.store, SETTLED_APPROVAL, args_hash=args_hash, since=now() - REFUSAL_MEMORY
        )
        found = rows[0] if rows else None
        return found if found is not None and found[1] in REFUSED else None

    async def _open_cards(self, agent: str, args_hash: str) -> tuple[int, bool]:
        """How many approval cards of ``agent`` are open, and whether one is for this call."""
        query = select(
            func.count(),
            func.coalesce(func.sum(case((interactions.c.args_hash == args_hash, 1), else_=0)), 0),
        ).where(
            interactions.c.agent == agent,
            interactions.c.kind == Kind.APPROVAL,
            interactions.c.status.in_(OPEN),
        )
        async with self.store.read() as conn:
            count, same = (await conn.execute(query)).one()
        return count, bool(same)

    async def ran_before(self, call: ToolCall) -> int | None:
        """The card whose grant this identical call used within the grant's lifetime, if any."""
        query = (
            select(grants.c.interaction_id)
            .where(
                grants.c.args_hash == call.args_hash,
                grants.c.used_at > now() - REFUSAL_MEMORY,
            )
            .order_by(grants.c.id.desc())
            .limit(1)
        )
        async with self.store.read() as conn:
            return (await conn.execute(query)).scalar_one_or_none()


def _refusal(card: int, answer: str | None) -> CallOutcome:
    how = "denied it" if answer == InteractionOutcome.DENIED else "did not answer in time"
    return CallOutcome(
        CallStatus.DENIED,
        f"the owner {how} on card #{card}; nothing was done. Do not retry this call: "
        "the owner will not be asked again for the same arguments for "
        f"{int(REFUSAL_MEMORY.total_seconds() // 60)} minutes",
        None,
        card,
    )


def _still_waiting(card: int, hold: float, ran_on: int | None = None) -> str:
    before = (
        f"This identical call already ran once, approved on card #{ran_on}; card #{card} asks "
        "the owner to run it again. "
        if ran_on is not None
        else ""
    )
    return (
        f"{before}Waiting for the owner's approval on card #{card}. Nothing was done yet. Retry "
        f"this identical call now: each retry waits up to {hold:g} s for the answer and runs "
        "the call once it is approved; any change to the arguments needs a new approval."
    )
