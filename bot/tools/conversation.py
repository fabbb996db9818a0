"""Asking the owner and talking to other agents (owner.ask, owner.answer, messages.send,
messages.read).

``owner.ask`` puts a question, or a choice, on a card in the owner's chat and returns at once:
nothing waits for a person. The agent that asked, and no other, reads the answer with
``owner.answer``, as often as it likes; ``wait_seconds`` holds that call open until the card is
settled, so an agent long-polls instead of sleeping. Asking only speaks inside aegis, so it runs
unattended; a cap on the cards an agent may have open keeps a runaway loop from burying the
owner in them.

``messages.send`` and ``messages.read`` let agents consult each other by slug (``slug@peer``:
an agent of a linked aegis, bot/tools/peers.py, once that side's owner approves it with a
code; such a message arrives from ``slug@peer``, and a reply to it goes back across, the text
it answers quoted first). The sender is always the caller. A reply names the message it
answers, which must be one its sender received, and goes back to whoever wrote that message: so
the text a reply cites is always its reader's own.
"""

from __future__ import annotations

import asyncio
import re
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, func, insert, select, update

from bot.chat.text import clip, visible
from bot.errors import ToolRefused
from bot.interactions.interaction import OPEN, Ask, Effects, Interaction, Kind, TimeoutPolicy
from bot.store.database import serialize_on
from bot.store.tables import agent_messages, interactions
from bot.timeutil import now
from bot.tools import peers

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

    from bot.actions.call import Caller, ToolFunction
    from bot.core import Platform

MAX_OPEN_CARDS = 5
# Two agents answering each other in a loop, with no person in it, stop here.
MAX_UNREAD_FROM_ONE_SENDER = 100
POLL_SECONDS = 0.2
CITED_CHARS = 200
ASKED_KINDS = (Kind.QUESTION, Kind.CHOICE)  # the cards owner.ask makes; owner.answer reads these
PEER_ADDRESS = re.compile(r"([a-z0-9][a-z0-9_-]{0,99})@([a-z0-9][a-z0-9-]{0,62})")  # slug@peer


def toolbox(platform: Platform) -> dict[str, ToolFunction]:
    interactions_ = platform.interactions
    store = interactions_.store

    async def ask_owner(args: dict, caller: Caller) -> dict:
        options = tuple(args.get("options", ()))
        ask = Ask(
            kind=Kind.CHOICE if options else Kind.QUESTION,
            agent=caller.agent,
            chat_id=caller.chat_id,
            prompt=visible(_question(args["question"])),
            options=_options(options),
            timeout=timedelta(minutes=args.get("timeout_minutes", 60)),
            timeout_policy=TimeoutPolicy.ARCHIVE,
        )
        effects = Effects()
        async with store.write() as conn:
            # Counted and created in one transaction: two asks at once cannot both pass the cap.
            await serialize_on(conn, f"owner.ask:{caller.agent}")
            if await _open_cards(conn, caller.agent) >= MAX_OPEN_CARDS:
                raise ToolRefused(
                    f"you already have {MAX_OPEN_CARDS} cards waiting for the owner (questions "
                    "and approvals); ask more once some are answered"
                )
            card = await interactions_.create_in(conn, ask, effects)
        await interactions_.announce(effects)
        return {
            "card": card.id,
            "status": "asked",
            "expires_at": _iso(card.expires_at),
            "next": "call owner.answer with this card to read the answer",
        }

    async def read_answer(args: dict, caller: Caller) -> dict:
        card_id = args["card"]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + args.get("wait_seconds", 0)
        while True:
            card = await interactions_.get(card_id)
            if card is None or card.agent != caller.agent or card.kind not in ASKED_KINDS:
                # One refusal for all three: another agent's card reads as a missing one.
                raise ToolRefused(f"you asked no card {card_id}")
            moment = now()
            left = deadline - loop.time()
            if not card.is_open or card.is_due(moment) or left <= 0:
                return _answer(card, moment)
            await asyncio.sleep(min(POLL_SECONDS, left))

    async def send_message(args: dict, caller: Caller) -> dict:
        if not args["text"].strip():
            raise ToolRefused("the message is empty")
        if "to" not in args and "reply_to" not in args:
            raise ToolRefused("say whom the message is for (to), or which message it answers")
        on_peer = PEER_ADDRESS.fullmatch(args.get("to", ""))
        if on_peer is not None and "reply_to" not in args:
            return await _to_peer(platform, caller, *on_peer.groups(), args["text"])
        # A peer's message is from its agent there ("scout@laptop"), so a reply finds its way.
        sender = f"{caller.asked_by}@{caller.agent}" if caller.asked_by else caller.agent
        to = args.get("to")
        if "reply_to" in args:
            async with store.read() as conn:
                to, cited = await _reply_recipient(conn, args["reply_to"], to, caller.agent)
            across = PEER_ADDRESS.fullmatch(to)
            if across is not None:  # a reply to an agent of a linked aegis
                text = f"> {clip(cited, CITED_CHARS)}\n\n{args['text']}"
                return await _to_peer(platform, caller, *across.groups(), text)
        async with store.write() as conn:
            if to == sender:
                raise ToolRefused("an agent cannot send a message to itself")
            if to not in platform.catalog.agents:
                raise ToolRefused(f"no agent is called {to!r}")
            await serialize_on(conn, f"messages:{to}")
            if await _unread_from(conn, sender, to) >= MAX_UNREAD_FROM_ONE_SENDER:
                raise ToolRefused(
                    f"{to} has not read your last {MAX_UNREAD_FROM_ONE_SENDER} messages yet; "
                    "wait for it before sending more"
                )
            values = {
                "sender": sender,
                "recipient": to,
                "text": args["text"],
                "reply_to": args.get("reply_to"),
                "created_at": now(),
            }
            inserted = insert(agent_messages).values(**values).returning(agent_messages.c.id)
            message_id = (await conn.execute(inserted)).scalar_one()
        return {"message": message_id, "to": to}

    async def read_messages(args: dict, caller: Caller) -> dict:
        limit, unread_only = args.get("limit", 20), args.get("unread_only", True)
        query = _inbox_query(caller.agent, unread_only, args.get("from"))
        async with store.write() as conn:
            # Reads of one inbox take turns, so two at once never hand out the same message.
            await serialize_on(conn, f"messages:{caller.agent}")
            rows = (await conn.execute(query.limit(limit + 1))).all()
            more, rows = len(rows) > limit, rows[:limit]
            if not unread_only:  # the latest ones, newest first in the query
                rows.reverse()
            unread = [row.id for row in rows if row.read_at is None]
            if unread:
                await conn.execute(
                    update(agent_messages)
                    .where(agent_messages.c.id.in_(unread), agent_messages.c.read_at.is_(None))
                    .values(read_at=now())
                )
        return {"messages": [_message(row) for row in rows], "more": more}

    return {
        "owner.ask": ask_owner,
        "owner.answer": read_answer,
        "messages.send": send_message,
        "messages.read": read_messages,
    }


async def _to_peer(platform: Platform, caller: Caller, to: str, peer: str, text: str) -> dict:
    """A message for ``to`` on the linked aegis ``peer``: a request to it, which its owner
    approves there with a code before it reaches ``to`` (checked against its roster there)."""
    if not await peers.linked(platform, peer):
        raise ToolRefused(f"this aegis calls no peer called {peer!r} (see peers.list)")
    asked = await peers.ask(platform, peer, "message", {"to": to, "text": text}, caller)
    return {**asked, "to": f"{to}@{peer}"}


def _question(text: str) -> str:
    if not text.strip():
        raise ToolRefused("the question is empty")
    return text.strip()


def _options(options: tuple[str, ...]) -> tuple[str, ...]:
    """The options as given: the chosen one is handed back verbatim, so one that would show
    differently on its button (a hidden character, a line break, a blank) is refused, not
    rewritten."""
    for number, option in enumerate(options, 1):
        if not option.strip() or not option.isprintable():
            raise ToolRefused(f"option {number} is blank or holds an invisible character")
    return options


async def _open_cards(conn: AsyncConnection, agent: str) -> int:
    query = (
        select(func.count())
        .select_from(interactions)
        .where(interactions.c.agent == agent, interactions.c.status.in_(OPEN))
    )
    return (await conn.execute(query)).scalar_one()


def _answer(card: Interaction, moment: datetime) -> dict[str, Any]:
    """What owner.answer says of a card. An open card past its deadline reads as expired: no
    tap or reply can settle it any more, whether or not the sweep has marked it yet."""
    if card.is_open:
        status = "expired" if card.is_due(moment) else "pending"
    else:
        status = card.outcome or card.status.value
    settled_by_owner = status not in ("pending", "expired")
    return {
        "card": card.id,
        "status": status,
        "answer": card.answer if settled_by_owner else None,
        "answered_at": _iso(card.resolved_at) if settled_by_owner else None,
        "expires_at": _iso(card.expires_at) if status == "pending" else None,
    }


async def _reply_recipient(
    conn: AsyncConnection, reply_to: int, to: str | None, agent: str
) -> tuple[str, str]:
    """Who a reply goes to, the sender of the message it answers, which ``agent`` received;
    and that message's text."""
    query = select(agent_messages.c.sender, agent_messages.c.text).where(
        agent_messages.c.id == reply_to, agent_messages.c.recipient == agent
    )
    found = (await conn.execute(query)).first()
    if found is None:
        raise ToolRefused(f"you received no message {reply_to}")
    sender, text = found
    if to is not None and to != sender:
        raise ToolRefused(f"message {reply_to} came from {sender}: a reply goes back to its sender")
    return sender, text


async def _unread_from(conn: AsyncConnection, sender: str, recipient: str) -> int:
    query = (
        select(func.count())
        .select_from(agent_messages)
        .where(
            agent_messages.c.recipient == recipient,
            agent_messages.c.read_at.is_(None),
            agent_messages.c.sender == sender,
        )
    )
    return (await conn.execute(query)).scalar_one()


def _inbox_query(agent: str, unread_only: bool, sender: str | None):
    """Messages to ``agent``: the oldest unread first, or else the newest first (reversed
    for the answer). The cited text joins only a message the reader itself sent."""
    message, cited = agent_messages, agent_messages.alias("cited")
    query = (
        select(message, cited.c.text.label("cited_text"))
        .outerjoin(cited, and_(cited.c.id == message.c.reply_to, cited.c.sender == agent))
        .where(message.c.recipient == agent)
    )
    if unread_only:
        query = query.where(message.c.read_at.is_(None))
    if sender is not None:
        query = query.where(message.c.sender == sender)
    return query.order_by(message.c.id if unread_only else message.c.id.desc())


def _message(row: Any) -> dict[str, Any]:
    return {
        "id": row.id,
        "from": row.sender,
        "text": row.text,
        "reply_to": row.reply_to,
        "cites": row.cited_text[:CITED_CHARS] if row.cited_text is not None else None,
        "sent_at": _iso(row.created_at),
    }


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat(timespec="seconds") if moment is not None else None
