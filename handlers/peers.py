"""``/peers``: each link with another aegis (federation/links.py), one line each, as
``aegis peer list`` prints them. Links are made and changed from the shell only: an invitation
carries a secret, and a chat is no place for one."""

from __future__ import annotations

from telegram import Update
from telegram.ext import ContextTypes

from bot.config.secrets import SecretFiles
from federation.links import Peer, Peers
from handlers.services import reply, services


async def peers(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    platform = services(context).platform
    links = await Peers(platform.store, SecretFiles(platform.settings.data_dir)).all()
    await reply(update, context, peers_view(links))


def peers_view(links: list[Peer]) -> str:
    if not links:
        return (
            "No links with other aegis instances. On the one to be called: aegis peer invite "
            "NAME; on the other: aegis peer add NAME <invitation> (README, Link two instances)."
        )
    return "Links with other aegis instances:\n" + "\n".join(f"• {p.summary()}" for p in links)
