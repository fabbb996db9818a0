"""How a person's answer settles a card: a tap on one of its buttons, a TOTP code owed for an
irreversible approval, or a text reply (an answer to a question, else a note for the agent).

A collaborator of ``Interactions`` (bot/interactions/interactions.py), which owns the row, every
compare-and-set on it (``resolve_in``, ``expire_in``, ``await_code_in``) and what is announced after
the commit; this module only decides which of those an answer means, and what to tell the person
who gave it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bot.actions.audit import Audit, AuditEvent, audit_card
from bot.chat.codes import CodeVerifier
from bot.chat.views import cards
from bot.interactions.interaction import (
    Effects,
    InteractionOutcome,
    Kind,
    Reply,
)
from bot.tasks.notes import NoteKind, add_note
from bot.timeutil import now

if TYPE_CHECKING:
    from bot.interactions.interactions import Interactions


class Answers:
    """Decides what an answer means and what to tell the person who gave it; every change to a
    row goes through ``Interactions``, which owns the table."""

    def __init__(self, cards: Interactions) -> None:
        self.cards = cards
        self.store = cards.store

    async def tap(
        self, interaction_id: int, choice: str, user_id: int, user_name: str, *, codes_ready: bool
    ) -> Reply:
        """An owner tapped a button of the card. ``codes_ready`` says whether a TOTP secret
        exists; without one a step-up approval cannot be granted, so it is not started."""
        effects = Effects()
        async with self.store.write() as conn:
            reply = await self._tap(
                conn, interaction_id, choice, user_id, user_name, codes_ready, effects
            )
        await self.cards.announce(effects)
        return reply

    async def _tap(self, conn, interaction_id, choice, user_id, user_name, codes_ready, effects):
        moment = now()
        interaction = await self.cards.get_in(conn, interaction_id)
        if interaction is None:
            await Audit.add(
                conn, AuditEvent.TAP_REFUSED, f"no card #{interaction_id}", user_id=user_id
            )
            return Reply("That card no longer exists; nothing was done.")
        if not interaction.is_open:
            return Reply(cards.settled_answer(interaction), interaction)
        if interaction.is_due(moment):
            expired = await self.cards.expire_in(conn, interaction, moment, effects)
            return Reply(cards.settled_answer(expired), expired, changed=True)
        meaning = interaction.outcome_of(choice)
        if meaning is None:
            detail = f"no answer {choice!r} on card #{interaction.id}"
            await audit_card(conn, AuditEvent.TAP_REFUSED, detail, interaction, user_id)
            return Reply("That is not one of this card's answers; nothing was done.", interaction)
        outcome, option = meaning
        if outcome is InteractionOutcome.APPROVED and interaction.step_up:
            return await self._ask_for_code(conn, interaction, user_id, codes_ready, effects)
        resolved = await self.cards.resolve_in(
            conn, interaction, outcome, user_id, user_name, moment, effects, answer=option
        )
        if resolved is None:  # lost the race: say what the winner did
            current = await self.cards.get_in(conn, interaction.id)
            return Reply(cards.settled_answer(current), current)
        return Reply(cards.tap_receipt(resolved), resolved, changed=True)

    async def _ask_for_code(self, conn, interaction, user_id, codes_ready, effects) -> Reply:
        if not codes_ready:
            return Reply(
                "This action needs a TOTP code and none is set up: run aegis totp init on "
                "the server. Nothing was done.",
                interaction,
            )
        if not await self.cards.await_code_in(conn, interaction, user_id, now()):
            # settled meanwhile (Postgres lets taps race this far)
            current = await self.cards.get_in(conn, interaction.id)
            return Reply(cards.settled_answer(current), current)
        detail = f"card #{interaction.id} owes a code"
        await audit_card(conn, AuditEvent.CODE_ASKED, detail, interaction, user_id)
        text = (
            f"Card #{interaction.id} cannot be undone. To approve it, send the current 6-digit "
            "code from your authenticator app. Nothing happens until a valid code arrives."
        )
        outbox_id = await self.cards.outbox.add(
            conn, interaction.chat_id, text, thread_id=interaction.thread_id
        )
        effects.outbox_ids.append(outbox_id)
        return Reply("Now send your 6-digit code to approve.", interaction, changed=True)

    async def submit_code(
        self, user_id: int, user_name: str, code: str, verifier: CodeVerifier
    ) -> Reply | None:
        """A code from an owner who tapped Approve on a step-up card; None when no card owes
        a code from this account (the message is then an ordinary one). Raises PairingLocked
        after too many wrong codes."""
        effects = Effects()
        async with self.store.write() as conn:
            interaction = await self.cards.owed_code_in(conn, user_id)
            if interaction is None:
                return None
            moment = now()
            if interaction.is_due(moment):
                expired = await self.cards.expire_in(conn, interaction, moment, effects)
                reply = Reply(cards.settled_answer(expired), expired, changed=True)
            else:
                reply = await self._grant_with_code(
                    conn, interaction, user_id, user_name, code, verifier, effects
                )
        await self.cards.announce(effects)
        return reply

    async def _grant_with_code(
        self, conn, interaction, user_id, user_name, code, verifier, effects
    ):
        refusal = await verifier.check(conn, user_id, code, purpose="step-up")
        if refusal is not None:
            detail = f"card #{interaction.id}: {refusal}"
            await audit_card(conn, AuditEvent.CODE_REFUSED, detail, interaction, user_id)
            return Reply(f"{refusal} Card #{interaction.id} is still waiting.", interaction)
        resolved = await self.cards.resolve_in(
            conn,
            interaction,
            InteractionOutcome.APPROVED,
            user_id,
            user_name,
            now(),
            effects,
            code_from=user_id,
        )
        if resolved is None:
            current = await self.cards.get_in(conn, interaction.id)
            return Reply(cards.settled_answer(current), current)
        return Reply(cards.tap_receipt(resolved), resolved, changed=True)

    async def reply(
        self, chat_id: int, replied_to: int, user_id: int, user_name: str, text: str
    ) -> Reply | None:
        """A text reply to one of our messages: the answer to an open question card, else a
        note kept for the agent that asked. None when the message replied to is no card."""
        effects = Effects()
        async with self.store.write() as conn:
            interaction = await self.cards.card_of_message_in(conn, chat_id, replied_to)
            if interaction is None:
                return None
            moment = now()
            result = None
            if interaction.kind is Kind.QUESTION and interaction.is_open:
                resolved = await self.cards.resolve_in(
                    conn,
                    interaction,
                    InteractionOutcome.ANSWERED,
                    user_id,
                    user_name,
                    moment,
                    effects,
                    answer=text,
                )
                if resolved is not None:
                    result = Reply(f"Answer passed to {interaction.agent}.", resolved, True)
            if result is None:  # not an open question: a note for the agent that asked
                await add_note(
                    conn,
                    NoteKind.AGENT,
                    text,
                    agent=interaction.agent,
                    interaction_id=interaction.id,
                    user_id=user_id,
                )
                detail = f"note on card #{interaction.id}"
                await audit_card(conn, AuditEvent.NOTE, detail, interaction, user_id)
                text = f"Noted for {interaction.agent}: its later runs will see this."
                result = Reply(text, interaction, True)
        await self.cards.announce(effects)
        return result
