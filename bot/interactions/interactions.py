"""Interactions: every human handoff (approval, choice, acknowledgement, question) as one row,
delivered as a card, resolved by one compare-and-set, continued by enqueueing an actor.

Nothing waits on a person. Whoever asks creates the row and finishes; a tap, a code or a reply
resolves it (``UPDATE … WHERE status IN open``: of twenty taps one wins, nineteen get an honest
answer), and the continuation named on the row is enqueued with the outcome. A timeout is never
a yes: an ``archive`` card expires and its asker reads a soft decline; a ``hold`` card waits.

An approval that needs a code is resolved in two steps: Approve marks the row as owing a code
from whoever tapped, and only a valid, unused code from that same owner grants the call.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta

from sqlalchemy import func, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from bot.actions.audit import AuditEvent, audit_card
from bot.actions.grants import Approvals
from bot.chat.callbacks import CallbackSigner
from bot.chat.outbox import Outbox
from bot.chat.text import MESSAGE_LIMIT, plain
from bot.chat.topics import Place, Topics
from bot.chat.views import cards
from bot.errors import BrokerError
from bot.interactions.answers import Answers
from bot.interactions.interaction import (  # noqa: F401  (the service's vocabulary, importable from here)
    OPEN,
    TAP_OUTCOMES,
    Ask,
    Effects,
    Interaction,
    InteractionOutcome,
    InteractionStatus,
    Kind,
    Reply,
    TimeoutPolicy,
)
from bot.store.database import Store
from bot.store.tables import interaction_cards, interactions
from bot.store.tables import outbox as outbox_table
from bot.tasks.notes import Notes
from bot.timeutil import now, short_time
from policies.canonical import approval_hash

logger = logging.getLogger(__name__)
CARDS_SCANNED_FOR_REPLIES = 500  # a reply to a card is looked for among the chat's latest
Enqueue = Callable[..., Awaitable[None]]


class Interactions:
    def __init__(
        self,
        store: Store,
        outbox: Outbox,
        signer: CallbackSigner,
        enqueue: Enqueue,
        topics: Topics | None = None,
    ) -> None:
        self.store = store
        self.outbox = outbox
        self.topics = topics or Topics(store)  # a card goes to its agent's topic, if any
        self.signer = signer
        self.enqueue = enqueue
        # Told the id of each card settled in this process, once it is committed: a call held
        # open on a card (bot/actions/held_calls.py) wakes at once instead of at its next look.
        self.settled_listeners: list[Callable[[int], None]] = []
        self.answers = Answers(self)

    # Answering: a tap, a code, a reply (bot/interactions/answers.py decides what each means)

    async def tap(
        self, interaction_id: int, choice: str, user_id: int, user_name: str, *, codes_ready: bool
    ) -> Reply:
        return await self.answers.tap(
            interaction_id, choice, user_id, user_name, codes_ready=codes_ready
        )

    async def submit_code(self, user_id: int, user_name: str, code: str, verifier) -> Reply | None:
        return await self.answers.submit_code(user_id, user_name, code, verifier)

    async def reply(
        self, chat_id: int, replied_to: int, user_id: int, user_name: str, text: str
    ) -> Reply | None:
        return await self.answers.reply(chat_id, replied_to, user_id, user_name, text)

    # Asking

    async def create(self, ask: Ask) -> Interaction:
        effects = Effects()
        async with self.store.write() as conn:
            interaction = await self.create_in(conn, ask, effects)
        await self.announce(effects)
        return interaction

    async def create_in(self, conn: AsyncConnection, ask: Ask, effects: Effects) -> Interaction:
        """Create the row and its card inside the caller's transaction; ``announce(effects)``
        after it commits."""
        moment = now()
        if ask.kind is Kind.CHOICE and not ask.options:
            raise ValueError("a choice needs options")
        if ask.kind is Kind.APPROVAL and (
            ask.tool is None or ask.args_hash != approval_hash(ask.agent, ask.tool, ask.args)
        ):
            # The card shows these arguments; the grant must be bound to exactly them.
            raise ValueError("an approval is for one call: its tool, arguments and their hash")
        if ask.timeout_policy is TimeoutPolicy.ARCHIVE and ask.timeout is None:
            raise ValueError("an archive card needs a timeout")
        place = await self.topics.place(ask.chat_id, ask.agent, conn)
        values = {
            "kind": ask.kind,
            "agent": ask.agent,
            "chat_id": place.chat_id,
            "thread_id": place.thread_id,
            "prompt": ask.prompt,
            "options": list(ask.options),
            "tool": ask.tool,
            "args": ask.args,
            "args_hash": ask.args_hash,
            "step_up": ask.step_up,
            "status": InteractionStatus.PENDING,
            "timeout_policy": ask.timeout_policy,
            "expires_at": moment + ask.timeout
            if ask.timeout_policy is TimeoutPolicy.ARCHIVE
            else None,
            "created_at": moment,
            "continuation_actor": ask.continuation_actor,
            "continuation_kwargs": dict(ask.continuation_kwargs),
        }
        row = (
            await conn.execute(insert(interactions).values(**values).returning(*interactions.c))
        ).one()
        interaction = Interaction.from_row(row)
        effects.outbox_ids.append(await self._put_card(conn, interaction, place))
        return interaction

    async def resend(self, interaction: Interaction, to: Place) -> None:
        """Send the card again, with live buttons (``/pending``, to where it was asked for)."""
        effects = Effects()
        async with self.store.write() as conn:
            effects.outbox_ids.append(await self._put_card(conn, interaction, to))
        await self.announce(effects)

    async def _put_card(self, conn: AsyncConnection, interaction: Interaction, to: Place) -> int:
        text = cards.card_text(interaction)
        markup = cards.card_markup(interaction, self.signer)
        chat_id, thread_id = to.chat_id, to.thread_id
        if len(plain(text)) <= MESSAGE_LIMIT:
            outbox_id = await self.outbox.add(
                conn, chat_id, text, reply_markup=markup, thread_id=thread_id
            )
        else:  # approving what you cannot see is not approval: the whole card goes as a file
            caption = cards.card_caption(interaction)
            outbox_id = await self.outbox.add(
                conn, chat_id, text, reply_markup=markup, caption=caption, thread_id=thread_id
            )
        await conn.execute(
            insert(interaction_cards).values(
                outbox_id=outbox_id, interaction_id=interaction.id, chat_id=chat_id
            )
        )
        return outbox_id

    # Resolving and expiring: every compare-and-set on the table

    async def await_code_in(self, conn, interaction: Interaction, user_id: int, moment) -> bool:
        """Mark the card as owing ``user_id``'s code; False if it was settled meanwhile. One
        card at a time waits for an account's code: the one it tapped last, and the one the
        prompt names. Any other goes back to waiting for a tap."""
        await conn.execute(
            update(interactions)
            .where(
                interactions.c.status == InteractionStatus.AWAITING_CODE,
                interactions.c.code_from == user_id,
                interactions.c.id != interaction.id,
            )
            .values(status=InteractionStatus.PENDING, code_from=None)
        )
        asked = await conn.execute(
            update(interactions)
            .where(
                interactions.c.id == interaction.id,
                interactions.c.status.in_(OPEN),
                or_(interactions.c.expires_at.is_(None), interactions.c.expires_at > moment),
            )
            .values(status=InteractionStatus.AWAITING_CODE, code_from=user_id)
        )
        return asked.rowcount == 1

    async def owed_code_in(self, conn, user_id: int) -> Interaction | None:
        """The card waiting for ``user_id``'s code, if any (the latest)."""
        owed = select(interactions).where(
            interactions.c.status == InteractionStatus.AWAITING_CODE,
            interactions.c.code_from == user_id,
        )
        row = (await conn.execute(owed.order_by(interactions.c.id.desc()).limit(1))).first()
        return Interaction.from_row(row) if row else None

    async def resolve_in(
        self,
        conn,
        interaction,
        outcome,
        user_id,
        user_name,
        moment,
        effects,
        *,
        answer=None,
        code_from=None,
    ) -> Interaction | None:
        """The one winner: returns the resolved interaction, or None if it was not open (or,
        with ``code_from``, no longer waiting for that account's code)."""
        still = [interactions.c.status.in_(OPEN)]
        if code_from is not None:
            still = [
                interactions.c.status == InteractionStatus.AWAITING_CODE,
                interactions.c.code_from == code_from,
            ]
        settled = {
            "status": InteractionStatus.RESOLVED,
            "outcome": outcome,
            "answer": answer,
            "resolved_at": moment,
            "resolved_by": user_id,
            "resolved_by_name": user_name[:200],
        }
        changed = await conn.execute(
            update(interactions)
            .where(
                interactions.c.id == interaction.id,
                *still,
                or_(interactions.c.expires_at.is_(None), interactions.c.expires_at > moment),
            )
            .values(**settled)
        )
        if changed.rowcount != 1:
            return None
        resolved = dataclasses.replace(interaction, **settled)
        await self._record_resolution(conn, resolved, user_id, moment)
        await self._settle(conn, resolved, effects)
        return resolved

    async def _record_resolution(self, conn, resolved: Interaction, user_id: int, moment) -> None:
        if resolved.kind is not Kind.APPROVAL:
            detail = f"card #{resolved.id}: {resolved.outcome}"
            await audit_card(conn, AuditEvent.RESOLVED, detail, resolved, user_id)
        elif resolved.outcome == InteractionOutcome.APPROVED:
            until = await Approvals.grant(
                conn,
                interaction_id=resolved.id,
                agent=resolved.agent,
                tool=resolved.tool,
                args_hash=resolved.args_hash,
                granted_by=user_id,
                moment=moment,
                step_up=resolved.step_up,
            )
            detail = f"card #{resolved.id}: one call, until {short_time(until)}"
            await audit_card(conn, AuditEvent.GRANTED, detail, resolved, user_id)
        else:
            detail = f"card #{resolved.id}: denied"
            await audit_card(conn, AuditEvent.DECLINED, detail, resolved, user_id)

    async def expire(self, interaction_id: int) -> Interaction | None:
        """Expire the interaction if it is open and due; returns it expired, else None."""
        effects = Effects()
        async with self.store.write() as conn:
            interaction = await self.get_in(conn, interaction_id)
            moment = now()
            if interaction is None or not interaction.is_open or not interaction.is_due(moment):
                return None
            expired = await self.expire_in(conn, interaction, moment, effects)
        await self.announce(effects)
        return expired

    async def expire_in(self, conn, interaction, moment, effects) -> Interaction | None:
        changed = await conn.execute(
            update(interactions)
            .where(
                interactions.c.id == interaction.id,
                interactions.c.status.in_(OPEN),
                interactions.c.expires_at <= moment,
            )
            .values(
                status=InteractionStatus.EXPIRED,
                outcome=InteractionOutcome.EXPIRED,
                resolved_at=interaction.expires_at,
            )
        )
        if changed.rowcount != 1:
            return await self.get_in(conn, interaction.id)
        expired = dataclasses.replace(
            interaction,
            status=InteractionStatus.EXPIRED,
            outcome=InteractionOutcome.EXPIRED,
            resolved_at=interaction.expires_at,
        )
        detail = f"card #{expired.id} expired unanswered: nothing was done"
        await audit_card(conn, AuditEvent.EXPIRED, detail, expired)
        await self._settle(conn, expired, effects)
        return expired

    async def _settle(self, conn, settled: Interaction, effects: Effects) -> None:
        """Edit every message that carried the card, and line up the continuation."""
        query = select(interaction_cards.c.outbox_id, interaction_cards.c.chat_id).where(
            interaction_cards.c.interaction_id == settled.id
        )
        effects.settled.append(settled.id)
        text = cards.settled_text(settled)
        for outbox_id, chat_id in (await conn.execute(query)).all():
            effects.outbox_ids.append(await self.outbox.add(conn, chat_id, text, edit_of=outbox_id))
        if settled.continuation_actor:
            effects.continuations.append(settled)

    async def announce(self, effects: Effects) -> None:
        """After the commit: send the continuation, then deliver what was queued (the person
        sees the edit a moment later; the agent should not wait for it). If the broker is
        down, the interactions sweep and the outbox sweep send them later."""
        for card in effects.settled:
            for listener in self.settled_listeners:
                listener(card)
        try:
            for settled in effects.continuations:
                await self.send_continuation(settled)
        except BrokerError as exc:
            logger.warning("broker down, the sweeps will catch up: %s", exc)
            return
        for outbox_id in effects.outbox_ids:
            if not await self.outbox.ask_delivery(outbox_id):
                return  # the broker is down: the outbox sweep sends the rest

    async def send_continuation(self, settled: Interaction) -> None:
        kwargs = {**settled.continuation_kwargs, "interaction_id": settled.id}
        await self.enqueue(settled.continuation_actor, **kwargs)
        async with self.store.write() as conn:
            await conn.execute(
                update(interactions)
                .where(interactions.c.id == settled.id)
                .values(continuation_sent_at=now())
            )

    async def claim_continuation(self, interaction_id: int) -> Interaction | None:
        """The continuation actor's first step: exactly one delivery of it goes on (Dramatiq
        delivers at least once, and a sweep may send it again)."""
        async with self.store.write() as conn:
            claimed = await conn.execute(
                update(interactions)
                .where(
                    interactions.c.id == interaction_id,
                    interactions.c.status.notin_(OPEN),
                    interactions.c.continued_at.is_(None),
                )
                .values(continued_at=now())
            )
            if claimed.rowcount != 1:
                return None
            return await self.get_in(conn, interaction_id)

    # Reading

    async def get(self, interaction_id: int) -> Interaction | None:
        async with self.store.read() as conn:
            return await self.get_in(conn, interaction_id)

    async def open_interactions(self, limit: int = 20) -> tuple[list[Interaction], int]:
        """The oldest open interactions, and how many are open in all."""
        query = select(interactions).where(interactions.c.status.in_(OPEN))
        async with self.store.read() as conn:
            rows = (await conn.execute(query.order_by(interactions.c.id).limit(limit))).all()
            total = len((await conn.execute(query.with_only_columns(interactions.c.id))).all())
        return [Interaction.from_row(row) for row in rows], total

    async def open_count(self, *, agent: str) -> int:
        """How many cards of this asker wait for an answer."""
        query = (
            select(func.count())
            .select_from(interactions)
            .where(interactions.c.agent == agent, interactions.c.status.in_(OPEN))
        )
        async with self.store.read() as conn:
            return (await conn.execute(query)).scalar_one()

    @staticmethod
    async def open_for_hash(
        conn: AsyncConnection, args_hash: str, *, step_up: bool = False
    ) -> Interaction | None:
        """The open card for this exact call; with ``step_up``, only one that asks for a code
        (a card made before the policy was tightened would grant without one)."""
        query = (
            select(interactions)
            .where(interactions.c.args_hash == args_hash, interactions.c.status.in_(OPEN))
            .order_by(interactions.c.id)
            .limit(1)
        )
        if step_up:
            query = query.where(interactions.c.step_up.is_(True))
        row = (await conn.execute(query)).first()
        return Interaction.from_row(row) if row else None

    async def due_for_expiry(self, limit: int = 100) -> list[int]:
        query = (
            select(interactions.c.id)
            .where(interactions.c.status.in_(OPEN), interactions.c.expires_at <= now())
            .order_by(interactions.c.id)
            .limit(limit)
        )
        async with self.store.read() as conn:
            return list((await conn.execute(query)).scalars())

    async def unsent_continuations(
        self, *, older_than: timedelta, limit: int = 100
    ) -> list[Interaction]:
        query = (
            select(interactions)
            .where(
                interactions.c.status.notin_(OPEN),
                interactions.c.continuation_actor.is_not(None),
                interactions.c.continuation_sent_at.is_(None),
                interactions.c.continued_at.is_(None),  # not one that already ran
                interactions.c.resolved_at < now() - older_than,
            )
            .order_by(interactions.c.id)
            .limit(limit)
        )
        async with self.store.read() as conn:
            return [Interaction.from_row(row) for row in (await conn.execute(query)).all()]

    async def notes_for(self, agent: str, limit: int = 20) -> list[str]:
        """What the owner told this agent by replying to its cards, oldest first."""
        return await Notes(self.store).for_agent(agent, limit=limit)

    @staticmethod
    async def get_in(conn: AsyncConnection, interaction_id: int) -> Interaction | None:
        row = (
            await conn.execute(select(interactions).where(interactions.c.id == interaction_id))
        ).first()
        return Interaction.from_row(row) if row else None

    async def card_of_message_in(self, conn, chat_id: int, message_id: int) -> Interaction | None:
        # The Telegram ids a card was sent as live on its outbox row; the recent cards of the
        # chat are few enough to look through.
        query = (
            select(interaction_cards.c.interaction_id, outbox_table.c.telegram_message_ids)
            .join(outbox_table, outbox_table.c.id == interaction_cards.c.outbox_id)
            .where(interaction_cards.c.chat_id == chat_id)
            .order_by(interaction_cards.c.outbox_id.desc())
            .limit(CARDS_SCANNED_FOR_REPLIES)
        )
        for interaction_id, sent_as in (await conn.execute(query)).all():
            if message_id in (sent_as or []):
                return await self.get_in(conn, interaction_id)
        return None
