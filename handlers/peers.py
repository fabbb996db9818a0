"""``/peers``: each link with another aegis (federation/links.py), one line each, as
``aegis peer list`` prints them. Links are made and changed from the shell only: an invitation
carries a secret, and a chat is no place for one.

``/deploy RECIPE@PEER`` asks another aegis to run one of its deploy recipes, and ``/run
AGENT@PEER …`` (handlers/agents.py) to run one of its agents: the request is queued with the
answer that follows it (one commit), and jobs/peer_requests.py sends it and edits that answer
as the other side's owner approves it (with a code), and it runs and ends.
"""

from __future__ import annotations

import logging
import re

import aiohttp
from telegram import Update
from telegram.ext import ContextTypes

from bot.chat.outbox_statements import insert_unless_keyed
from bot.chat.views.peers import asked_text
from bot.config.secrets import SecretFiles
from bot.errors import BrokerError, FederationError
from federation.client import PeerClient, status_line
from federation.links import Direction, Peer, Peers
from federation.requests import ACTIONS, PeerRequests
from handlers.services import place_of, reply, reply_row, services

logger = logging.getLogger(__name__)
ON_PEER = re.compile(r"([A-Za-z0-9][\w.-]{0,99})@([a-z0-9][a-z0-9-]{0,62})")
DEPLOY_USAGE = (
    "Say which recipe and which aegis: /deploy site@vps runs the recipe site of the aegis "
    "you call vps (/peers lists them), once its owner approves it there with a code."
)


async def peers(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    """``/peers``: the links; ``/peers NAME``: that peer's status, asked now."""
    platform = services(context).platform
    known = Peers(platform.store, SecretFiles(platform.settings.data_dir))
    words = (update.message.text or "").split()
    if len(words) > 1:
        await reply(update, context, await _status(known, words[1]))
        return
    await reply(update, context, peers_view(await known.all()))


async def _status(known: Peers, name: str) -> str:
    try:
        async with aiohttp.ClientSession(trust_env=False) as session:
            answer = await PeerClient(known, session, tries=1).status(name)
    except FederationError as exc:
        return f"Could not ask {name}: {exc}"
    return status_line(name, answer)


def peers_view(links: list[Peer]) -> str:
    if not links:
        return (
            "No links with other aegis instances. On the one to be called: aegis peer invite "
            "NAME; on the other: aegis peer add NAME <invitation> (README, Link two instances)."
        )
    return "Links with other aegis instances:\n" + "\n".join(f"• {p.summary()}" for p in links)


async def deploy(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    words = (update.message.text or "").split(maxsplit=1)
    asked = ON_PEER.fullmatch(words[1].strip()) if len(words) == 2 else None
    if asked is None:
        await reply(update, context, DEPLOY_USAGE)
        return
    recipe, peer = asked.groups()
    await ask_peer(update, context, peer, "deploy", {"recipe": recipe})


async def ask_peer(
    update: Update, context: ContextTypes.DEFAULT_TYPE, peer: str, action: str, args: dict
) -> None:
    """Queue ``action`` for ``peer`` with the answer that will follow it, in one commit, and
    ask for its sending; a redelivered update queues nothing more."""
    platform = services(context).platform
    link = await Peers(platform.store, SecretFiles(platform.settings.data_dir)).get(
        peer, Direction.OUT
    )
    if link is None:
        await reply(
            update,
            context,
            f"This aegis has no link called {peer} on which it calls another; /peers lists "
            "them, and aegis peer add makes one. Nothing was asked.",
        )
        return
    chat_id = place_of(update).chat_id
    row = reply_row(update, context, asked_text(peer, ACTIONS[action].doing(args)))
    async with platform.store.write() as conn:
        outbox_id = (
            await conn.execute(insert_unless_keyed(conn.dialect.name), row)
        ).scalar_one_or_none()
        if outbox_id is None:
            return  # this update was handled before: its request is queued already
        await PeerRequests(platform.store).queue(
            conn, peer, action, args, chat_id=chat_id, outbox_id=outbox_id
        )
    await platform.outbox.request_delivery(chat_id, outbox_id)
    try:
        await services(context).enqueue("ask_peer", peer)
    except BrokerError:
        logger.warning("broker down: the request to %s waits for the peer sweep", peer)
