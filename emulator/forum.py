"""Forum topics, under the rules Telegram applies to them (TDLib's ForumTopicManager and the
Bot API server): who may create, edit, close and delete a topic, and where a message goes.

A topic is a thread whose id is the id of the service message that created it. Messages in it
carry that ``message_thread_id`` and ``is_topic_message``, and one that replies to nothing
replies to the creating service message. Everything else is in General, which has no thread id
at all in the Bot API.
"""

from __future__ import annotations

from typing import Any

from emulator.errors import bad_request
from emulator.models import Chat, ForumTopic, StoredMessage
from emulator.state import EmulatorState

DEFAULT_ICON_COLOR = 7322096  # 0x6FB9F0, the blue Telegram picks when a bot names no colour
MAX_TOPIC_NAME = 128
THREAD_NOT_FOUND = "message thread not found"
# What Telegram answers a topic method about a topic that does not exist (or no longer does);
# sends into such a topic get THREAD_NOT_FOUND instead.
UNKNOWN_TOPIC = "TOPIC_ID_INVALID"


def require_forum(chat: Chat) -> None:
    if not chat.is_forum:
        raise bad_request("the chat is not a forum")


def topic_name(raw: str | None) -> str:
    """Telegram collapses whitespace and cuts a long name at 128 characters, refusing only
    a name that is left empty."""
    name = " ".join((raw or "").split())[:MAX_TOPIC_NAME].strip()
    if not name:
        raise bad_request("name must be non-empty")
    return name


def icon_color(value: int | None) -> int:
    """An RGB colour; none (or 0, as the Bot API server reads a missing one) means the default."""
    if not value:
        return DEFAULT_ICON_COLOR
    if not 0 < value <= 0xFFFFFF:
        raise bad_request("invalid icon color specified")
    return value


def rights(chat: Chat, actor: dict[str, Any]) -> dict[str, bool]:
    """The administrator rights of ``actor`` in ``chat``; the emulator's users hold none."""
    return (chat.bot_rights or {}) if actor.get("is_bot") else {}


def require_right(chat: Chat, actor: dict[str, Any], right: str, refusal: str) -> None:
    if not rights(chat, actor).get(right):
        raise bad_request(refusal)


def managed_topic(
    chat: Chat, thread_id: int | None, actor: dict[str, Any], right: str, refusal: str
) -> ForumTopic:
    """The topic a topic method names, if ``actor`` may change it: with ``right``, or as the
    topic's creator (the exemption TDLib applies to edit, close and delete)."""
    require_forum(chat)
    if thread_id is None or thread_id <= 0:
        raise bad_request("invalid forum topic identifier specified")
    topic = chat.topics.get(thread_id)
    if topic is None:
        raise bad_request(UNKNOWN_TOPIC)
    if topic.creator_id != actor["id"]:
        require_right(chat, actor, right, refusal)
    return topic


def create_topic(
    state: EmulatorState,
    chat: Chat,
    creator: dict[str, Any],
    name: str,
    color: int,
    custom_emoji_id: str | None = None,
) -> tuple[ForumTopic, StoredMessage]:
    """Post the ``forum_topic_created`` service message; its id becomes the topic's id."""
    created: dict[str, Any] = {"name": name, "icon_color": color}
    if custom_emoji_id:
        created["icon_custom_emoji_id"] = custom_emoji_id
    message = state.add_message(chat, creator, service={"forum_topic_created": created})
    message.message_thread_id = message.message_id
    topic = ForumTopic(message.message_id, name, color, creator["id"], custom_emoji_id)
    chat.topics[topic.message_thread_id] = topic
    return topic, message


def edit_topic(
    state: EmulatorState,
    chat: Chat,
    topic: ForumTopic,
    actor: dict[str, Any],
    name: str | None,
    custom_emoji_id: str | None,
) -> None:
    """Rename the topic and/or change its emoji (``""`` removes it); ``None`` keeps a field."""
    edited: dict[str, Any] = {}
    if name is not None and name != topic.name:
        topic.name = name
        edited["name"] = name
    if custom_emoji_id is not None and custom_emoji_id != (topic.icon_custom_emoji_id or ""):
        topic.icon_custom_emoji_id = custom_emoji_id or None
        edited["icon_custom_emoji_id"] = custom_emoji_id
    if not edited:
        raise bad_request("TOPIC_NOT_MODIFIED")
    _post_notice(state, chat, topic, actor, {"forum_topic_edited": edited})


def set_closed(
    state: EmulatorState, chat: Chat, topic: ForumTopic, actor: dict[str, Any], closed: bool
) -> None:
    if topic.closed == closed:
        raise bad_request("TOPIC_NOT_MODIFIED")
    topic.closed = closed
    notice = "forum_topic_closed" if closed else "forum_topic_reopened"
    _post_notice(state, chat, topic, actor, {notice: {}})


def delete_topic(state: EmulatorState, chat: Chat, topic: ForumTopic) -> None:
    """The topic goes with all its messages, its creating service message included."""
    for message in chat.messages:
        if message.message_thread_id == topic.message_thread_id:
            message.deleted = True
    del chat.topics[topic.message_thread_id]
    state.touch(chat)


def _post_notice(
    state: EmulatorState,
    chat: Chat,
    topic: ForumTopic,
    actor: dict[str, Any],
    service: dict[str, Any],
) -> None:
    """Telegram tells a topic's readers of each change with a service message inside it."""
    root = chat.find(topic.message_thread_id)
    state.add_message(
        chat, actor, service=service, message_thread_id=topic.message_thread_id, reply_to=root
    )


def place(
    chat: Chat, thread_id: int | None, reply_to: StoredMessage | None, sender: dict[str, Any]
) -> dict[str, Any]:
    """Where a new message goes, as ``add_message`` fields (``message_thread_id``, ``reply_to``).

    A reply without a thread id goes into the topic of the message it answers. Outside forums
    the Bot API server drops a thread id (in other groups it names a reply thread), except in
    a private chat, which has no such threads. A thread id of 0 or less means none.
    """
    if thread_id is not None and thread_id <= 0:
        thread_id = None
    if not chat.is_forum:
        if thread_id is not None and chat.info.get("type") == "private":
            raise bad_request(THREAD_NOT_FOUND)
        return {}
    if thread_id is None and reply_to is not None:
        thread_id = reply_to.message_thread_id
    if thread_id is None:
        return {}
    topic = chat.topics.get(thread_id)
    if topic is None:
        raise bad_request(THREAD_NOT_FOUND)
    if topic.closed and not _may_write_when_closed(chat, topic, sender):
        raise bad_request("TOPIC_CLOSED")
    return {"message_thread_id": thread_id, "reply_to": reply_to or chat.find(thread_id)}


def _may_write_when_closed(chat: Chat, topic: ForumTopic, sender: dict[str, Any]) -> bool:
    """A closed topic still takes messages from its creator and from administrators who may
    manage topics (TDLib's ``can_send_message_to_forum_topic``)."""
    return topic.creator_id == sender["id"] or bool(rights(chat, sender).get("can_manage_topics"))
