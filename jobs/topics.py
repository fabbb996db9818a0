"""Make each agent's forum topic (bot/chat/topics.py), with ``createForumTopic``.

Asked for by ``/here`` and when the web process starts with a forum set (an agent added to
aegis.yaml since gets its topic then). When Telegram refuses to make a topic (the group has no
topics, or the bot may not manage them) the forum is turned off and the owner is told once, in
the private chat, which is where everything goes from then on.
"""

from __future__ import annotations

import logging

import dramatiq
from sqlalchemy.exc import IntegrityError
from telegram.error import BadRequest, Forbidden

from bot.chat.topics import Forum
from jobs.worker.broker import require_broker
from jobs.worker.resources import resources

require_broker()
logger = logging.getLogger(__name__)


@dramatiq.actor(queue_name="default", max_retries=5, min_backoff=2000)
async def open_topics() -> dict:
    """A topic for every agent that has none in the forum yet; the network is retried."""
    res = await resources()
    topics = res.platform.topics
    forum = await topics.forum()
    if forum is None or not forum.on:
        return {"forum_off": 1}
    opened = 0
    for agent in await topics.missing(forum.chat_id, res.platform.agents):
        try:
            made = await res.bot.create_forum_topic(forum.chat_id, agent)
        except (BadRequest, Forbidden) as exc:
            await _lose(res.platform, forum, agent, exc.message)
            return {"topics_opened": opened, "forum_lost": 1}
        thread_id = made.message_thread_id
        try:
            await topics.record(agent, forum.chat_id, thread_id, made.name)
        except IntegrityError:  # another run made this agent's topic meanwhile: drop ours
            logger.info("topic for %s made twice; deleting the extra one", agent)
            await res.bot.delete_forum_topic(forum.chat_id, thread_id)
            continue
        opened += 1
        await res.platform.outbox.send(
            forum.chat_id,
            f"This is {agent}'s topic: its runs, cards and results come here. What you write "
            f"here is for {agent}, and /run here needs no agent's name.",
            key=f"topic:{forum.chat_id}:{thread_id}",
            thread_id=thread_id,
        )
    return {"topics_opened": opened}


async def _lose(platform, forum: Forum, agent: str, said: str) -> None:
    """Turn the forum off and say so, once, in the private chat it falls back to."""
    if not await platform.topics.lose(forum.chat_id, f"Telegram said: {said}"):
        return
    logger.warning("forum %s lost: no topic for %s: %s", forum.chat_id, agent, said)
    await platform.outbox.send(
        forum.home_chat_id,
        f"I could not make a topic for {agent} in {forum.title}: Telegram said “{said}”. "
        "Agents' messages come to this chat instead. To use topics, turn Topics on in the "
        "group's settings, make me an admin who can manage topics, and send /here there again.",
        key=f"forum-lost:{forum.chat_id}:{forum.changed_at.timestamp():.0f}",
    )
