"""Bot API methods that create and change forum topics; the rules live in :mod:`emulator.forum`.

Each checks in the order TDLib does — the chat is a forum, the topic id is valid, the bot
may do it — so that the first refusal a bot meets is the one Telegram would give.
"""

from __future__ import annotations

from typing import Any

from emulator import forum
from emulator.calls import Call, Method
from emulator.models import Chat, ForumTopic

# TDLib's refusals, in the Bot API server's spelling (first letter lowered).
EDIT_REFUSED = "not enough rights to edit the topic"
CLOSE_REFUSED = "not enough rights to close or open the topic"
DELETE_REFUSED = "not enough rights to delete the topic"


def _forum(call: Call) -> Chat:
    chat = call.state.resolve_chat(call.params.raw("chat_id"))
    forum.require_forum(chat)
    return chat


def _topic(call: Call, chat: Chat, right: str, refusal: str) -> ForumTopic:
    thread_id = call.params.int("message_thread_id")
    return forum.managed_topic(chat, thread_id, call.bot.user, right, refusal)


async def create_forum_topic(call: Call) -> dict[str, Any]:
    chat = _forum(call)
    forum.require_right(
        chat, call.bot.user, "can_manage_topics", "not enough rights to create a topic"
    )
    name = forum.topic_name(call.params.str("name"))
    color = forum.icon_color(call.params.int("icon_color"))
    emoji = call.params.str("icon_custom_emoji_id") or None
    topic, _ = forum.create_topic(call.state, chat, call.bot.user, name, color, emoji)
    return topic.to_api()


async def edit_forum_topic(call: Call) -> bool:
    """An empty or missing name keeps the current one; with neither a name nor an emoji
    there is nothing to do, and Telegram agrees without looking at the topic."""
    chat = _forum(call)
    topic = _topic(call, chat, "can_manage_topics", EDIT_REFUSED)
    raw_name = call.params.str("name")
    name = forum.topic_name(raw_name) if raw_name else None
    emoji = call.params.str("icon_custom_emoji_id")
    if name is None and emoji is None:
        return True
    forum.edit_topic(call.state, chat, topic, call.bot.user, name, emoji)
    return True


async def close_forum_topic(call: Call) -> bool:
    chat = _forum(call)
    topic = _topic(call, chat, "can_manage_topics", CLOSE_REFUSED)
    forum.set_closed(call.state, chat, topic, call.bot.user, closed=True)
    return True


async def reopen_forum_topic(call: Call) -> bool:
    chat = _forum(call)
    topic = _topic(call, chat, "can_manage_topics", CLOSE_REFUSED)
    forum.set_closed(call.state, chat, topic, call.bot.user, closed=False)
    return True


async def delete_forum_topic(call: Call) -> bool:
    """Deleting a topic takes the right to delete messages, not to manage topics."""
    chat = _forum(call)
    topic = _topic(call, chat, "can_delete_messages", DELETE_REFUSED)
    forum.delete_topic(call.state, chat, topic)
    return True


FORUM_METHODS: dict[str, Method] = {
    "createForumTopic": create_forum_topic,
    "editForumTopic": edit_forum_topic,
    "closeForumTopic": close_forum_topic,
    "reopenForumTopic": reopen_forum_topic,
    "deleteForumTopic": delete_forum_topic,
}
