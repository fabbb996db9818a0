"""``/here``: the group it is sent in becomes the forum where each agent has a topic
(bot/chat/topics.py); sent in a private chat, everything comes back to that chat."""

from __future__ import annotations

from telegram import Update
from telegram.ext import ContextTypes

from bot.errors import BrokerError
from handlers.services import reply, services

NOT_A_FORUM = (
    "This group has no topics. Turn Topics on in the group's settings, make me an admin who "
    "can manage topics, and send /here again."
)


async def here(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    svc = services(context)
    chat = update.effective_chat
    topics = svc.platform.topics
    if chat.type == chat.PRIVATE:
        before = await topics.clear_forum()
        text = "Agents' messages come to this chat now."
        if before is not None:
            text += f" Their topics in {before.title} stay; send /here there to use them again."
        await reply(update, context, text)
        return
    if not chat.is_forum:
        await reply(update, context, NOT_A_FORUM)
        return
    # The sender's private chat (its id is theirs) is where everything falls back to.
    await topics.set_forum(chat.id, chat.title or "this group", update.effective_user.id)
    text = (
        "Each agent gets a topic here, for its runs, cards and results; what you write in an "
        "agent's topic is for that agent. Everything else stays in General."
    )
    try:
        await svc.enqueue("open_topics")
    except BrokerError:
        text += " The topics are made once the queue is back."
    await reply(update, context, text)
