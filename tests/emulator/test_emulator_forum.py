"""Forum topics: the real PTB Bot against the emulator, and the user's side through the client.

Error texts are the Bot API server's (TDLib's words with the first letter lowered, or
Telegram's own UPPER_CASE codes), so a bot's handling of them is tested as on Telegram.
"""

from __future__ import annotations

import aiohttp
import pytest
import telegram
from conftest import TOKEN
from telegram.error import BadRequest

from emulator import DEFAULT_USER
from emulator.client import EmulatorClientError

FORUM = -1001234567890
CHAT = DEFAULT_USER["id"]
BLUE = 7322096
ANN = {"id": 42, "first_name": "Ann"}


@pytest.fixture
async def forum(emulator) -> int:
    await emulator.client.create_forum(FORUM, "Team")
    return FORUM


async def user_topic(emulator, name: str = "Support") -> int:
    """A topic Ann opens, so the bot is not its creator."""
    created = await emulator.client.create_topic(FORUM, name, user=ANN)
    return created["topic"]["message_thread_id"]


async def refused(call) -> str:
    """The description of the Bad Request a Bot API call must end in."""
    with pytest.raises(BadRequest) as caught:
        await call
    return caught.value.message


async def test_a_topic_is_created_and_sent_into(emulator, bot, forum) -> None:
    topic = await bot.create_forum_topic(forum, "Builds")
    assert (topic.name, topic.icon_color) == ("Builds", BLUE)
    thread = topic.message_thread_id
    sent = await bot.send_message(forum, "green", message_thread_id=thread)
    assert sent.message_thread_id == thread and sent.is_topic_message
    assert sent.reply_to_message.message_id == thread  # implicit: the topic's first message
    assert sent.reply_to_message.forum_topic_created.name == "Builds"
    document = telegram.InputFile(b"log", filename="build.log")
    await bot.send_document(forum, document, message_thread_id=thread)
    await bot.send_photo(forum, b"\x89PNG\r\n\x1a\n", message_thread_id=thread)

    view = await emulator.client.messages(forum, message_thread_id=thread)
    assert [m["message_id"] for m in view] == [thread, sent.message_id, thread + 2, thread + 3]
    assert view[0]["service"] == {"forum_topic_created": {"name": "Builds", "icon_color": BLUE}}
    assert all(m["message_thread_id"] == thread for m in view)
    assert await emulator.client.topics(forum) == [{**topic.to_dict(), "is_closed": False}]
    assert (await bot.get_chat(forum)).is_forum is True


async def test_a_message_without_a_thread_goes_to_general(emulator, bot, forum) -> None:
    topic = await bot.create_forum_topic(forum, "Builds", icon_color=16766590)
    assert topic.icon_color == 16766590
    general = await bot.send_message(forum, "hello all")
    assert general.message_thread_id is None and not general.is_topic_message
    assert general.reply_to_message is None
    in_topic = await emulator.client.messages(forum, message_thread_id=topic.message_thread_id)
    assert general.message_id not in [m["message_id"] for m in in_topic]


async def test_a_users_topic_message_reaches_the_bot_with_its_thread(emulator, bot, forum) -> None:
    thread = (await bot.create_forum_topic(forum, "Builds")).message_thread_id
    await emulator.client.send_message("is it green?", chat_id=forum, message_thread_id=thread)
    await emulator.client.send_message("lunch?", chat_id=forum)
    in_topic, in_general = await bot.get_updates()

    message = in_topic.message
    assert message.chat.is_forum and message.chat.type == "supergroup"
    assert message.message_thread_id == thread and message.is_topic_message
    assert message.reply_to_message.forum_topic_created.name == "Builds"
    assert in_general.message.message_thread_id is None
    assert not in_general.message.is_topic_message


async def test_a_reply_follows_the_message_it_answers_into_its_topic(emulator, bot, forum) -> None:
    thread = (await bot.create_forum_topic(forum, "Builds")).message_thread_id
    question = await bot.send_message(forum, "deploy?", message_thread_id=thread)
    replied = question.message_id
    await emulator.client.send_message("yes", chat_id=forum, reply_to_message_id=replied)
    (update,) = await bot.get_updates()
    assert update.message.message_thread_id == thread and update.message.is_topic_message
    assert update.message.reply_to_message.message_id == question.message_id
    answer = await update.message.reply_text("deploying")  # PTB passes the thread on
    assert answer.message_thread_id == thread


async def test_a_topic_a_user_opens_reaches_the_bot(emulator, bot, forum) -> None:
    created = await emulator.client.create_topic(forum, "Support", icon_color=9367192, user=ANN)
    assert created["topic"]["name"] == "Support" and created["topic"]["is_closed"] is False
    (update,) = await bot.get_updates()
    message = update.message
    assert message.from_user.id == ANN["id"]
    assert message.forum_topic_created.name == "Support"
    assert message.forum_topic_created.icon_color == 9367192
    assert message.message_thread_id == message.message_id == created["topic"]["message_thread_id"]
    assert message.is_topic_message


async def test_topics_need_a_forum(emulator, bot) -> None:
    await emulator.client.send_message("hi")
    await emulator.client.inject_message(
        {"chat_id": -100777, "chat": {"type": "supergroup", "title": "Plain"}, "text": "hi"}
    )
    for chat_id in (CHAT, -100777):
        assert await refused(bot.create_forum_topic(chat_id, "x")) == "The chat is not a forum"
    with pytest.raises(EmulatorClientError) as caught:
        await emulator.client.topics(-100777)
    assert caught.value.payload["description"] == "Bad Request: the chat is not a forum"


async def test_a_topic_name_must_not_be_empty_and_is_cut_at_128(emulator, bot, forum) -> None:
    assert await refused(bot.create_forum_topic(forum, "  ")) == "Name must be non-empty"
    long = await bot.create_forum_topic(forum, "n" * 200)
    assert long.name == "n" * 128  # Telegram cuts a long name rather than refusing it
    spaced = await bot.create_forum_topic(forum, "  two   words ")
    assert spaced.name == "two words"


async def test_sends_into_an_unknown_thread_are_refused(emulator, bot, forum) -> None:
    for thread in (999, 1):  # 1 is General's id, which no send may name
        description = await refused(bot.send_message(forum, "x", message_thread_id=thread))
        assert description == "Message thread not found"
    async with aiohttp.ClientSession() as http:
        url = f"{emulator.url}/bot{TOKEN}/sendMessage"
        body = {"chat_id": forum, "text": "x", "message_thread_id": 999}
        async with http.post(url, json=body) as resp:
            assert resp.status == 400
            assert await resp.json() == {
                "ok": False,
                "error_code": 400,
                "description": "Bad Request: message thread not found",
            }
        body["message_thread_id"] = "seven"
        async with http.post(url, json=body) as resp:
            assert resp.status == 400
            assert (await resp.json())["description"] == (
                "Bad Request: invalid message_thread_id specified"
            )
    with pytest.raises(EmulatorClientError) as caught:
        await emulator.client.send_message("x", chat_id=forum, message_thread_id=999)
    assert caught.value.status == 400


async def test_a_thread_id_outside_forums(emulator, bot) -> None:
    """Telegram drops it in other groups (there it names a reply thread) and refuses it in a
    private chat, which has no threads."""
    await emulator.client.send_message("hi")
    group = {"chat_id": -100888, "chat": {"type": "supergroup", "title": "Plain"}, "text": "hi"}
    await emulator.client.inject_message(group)
    sent = await bot.send_message(-100888, "hello", message_thread_id=5)
    assert sent.message_thread_id is None and not sent.is_topic_message
    description = await refused(bot.send_message(CHAT, "hello", message_thread_id=5))
    assert description == "Message thread not found"


async def test_unknown_topics_in_topic_methods(emulator, bot, forum) -> None:
    for call in (
        bot.edit_forum_topic(forum, 999, name="x"),
        bot.close_forum_topic(forum, 999),
        bot.reopen_forum_topic(forum, 999),
        bot.delete_forum_topic(forum, 999),
    ):
        assert await refused(call) == "Topic_id_invalid"  # PTB capitalizes TOPIC_ID_INVALID


async def test_without_can_manage_topics_the_bot_cannot_create(emulator, bot, forum) -> None:
    rights = await emulator.client.set_bot_rights(forum, can_manage_topics=False)
    assert rights["bot_rights"] == {"can_manage_topics": False, "can_delete_messages": True}
    description = await refused(bot.create_forum_topic(forum, "Builds"))
    assert description == "Not enough rights to create a topic"
    assert await emulator.client.topics(forum) == []
    await emulator.client.set_bot_rights(forum, can_manage_topics=True)
    assert (await bot.create_forum_topic(forum, "Builds")).name == "Builds"


async def test_without_rights_only_the_bots_own_topics_can_change(emulator, bot, forum) -> None:
    own = (await bot.create_forum_topic(forum, "Builds")).message_thread_id
    anns = await user_topic(emulator)
    await emulator.client.set_bot_rights(forum, can_manage_topics=False, can_delete_messages=False)
    for call, description in (
        (bot.edit_forum_topic(forum, anns, name="x"), "Not enough rights to edit the topic"),
        (bot.close_forum_topic(forum, anns), "Not enough rights to close or open the topic"),
        (bot.delete_forum_topic(forum, anns), "Not enough rights to delete the topic"),
    ):
        assert await refused(call) == description
    assert await bot.edit_forum_topic(forum, own, name="CI")  # its creator needs no right
    assert await bot.close_forum_topic(forum, own)
    assert await bot.delete_forum_topic(forum, own)
    assert [t["name"] for t in await emulator.client.topics(forum)] == ["Support"]


async def test_a_closed_topic_takes_messages_only_from_those_who_manage(
    emulator, bot, forum
) -> None:
    thread = await user_topic(emulator)
    assert await bot.close_forum_topic(forum, thread)
    assert await refused(bot.close_forum_topic(forum, thread)) == "Topic_not_modified"
    assert (await emulator.client.topics(forum))[0]["is_closed"] is True
    bob = {"id": 43, "first_name": "Bob"}
    with pytest.raises(EmulatorClientError) as caught:
        await emulator.client.send_message("hey", user=bob, chat_id=forum, message_thread_id=thread)
    assert caught.value.payload["description"] == "Bad Request: TOPIC_CLOSED"
    await emulator.client.send_message("mine", user=ANN, chat_id=forum, message_thread_id=thread)
    # An administrator who may manage topics still writes in a closed one, as on Telegram.
    assert await bot.send_message(forum, "note", message_thread_id=thread)
    await emulator.client.set_bot_rights(forum, can_manage_topics=False)
    description = await refused(bot.send_message(forum, "x", message_thread_id=thread))
    assert description == "Topic_closed"

    await emulator.client.set_bot_rights(forum, can_manage_topics=True)
    assert await bot.reopen_forum_topic(forum, thread)
    assert await emulator.client.send_message(
        "hey", user=bob, chat_id=forum, message_thread_id=thread
    )
    services = [m["service"] for m in await emulator.client.messages(forum) if m["service"]]
    assert [next(iter(s)) for s in services] == [
        "forum_topic_created",
        "forum_topic_closed",
        "forum_topic_reopened",
    ]


async def test_a_deleted_topic_takes_its_messages_and_no_more(emulator, bot, forum) -> None:
    thread = (await bot.create_forum_topic(forum, "Builds")).message_thread_id
    await bot.send_message(forum, "one", message_thread_id=thread)
    general = await bot.send_message(forum, "outside")
    assert await bot.delete_forum_topic(forum, thread)
    description = await refused(bot.send_message(forum, "two", message_thread_id=thread))
    assert description == "Message thread not found"
    assert await emulator.client.topics(forum) == []
    in_topic = await emulator.client.messages(forum, message_thread_id=thread)
    assert len(in_topic) == 2 and all(m["deleted"] for m in in_topic)
    assert not (await emulator.client.messages(forum, general.message_id - 1))[0]["deleted"]
    with pytest.raises(EmulatorClientError) as caught:
        await emulator.client.send_message("late", chat_id=forum, message_thread_id=thread)
    assert caught.value.payload["description"] == "Bad Request: message thread not found"


async def test_a_topics_first_message_cannot_be_deleted_alone(emulator, bot, forum) -> None:
    thread = (await bot.create_forum_topic(forum, "Builds")).message_thread_id
    assert await refused(bot.delete_message(forum, thread)) == "Message can't be deleted"


async def test_editing_a_topic(emulator, bot, forum) -> None:
    thread = (await bot.create_forum_topic(forum, "Builds")).message_thread_id
    assert await bot.edit_forum_topic(forum, thread, name="CI")
    assert await refused(bot.edit_forum_topic(forum, thread, name="CI")) == "Topic_not_modified"
    assert await bot.edit_forum_topic(forum, thread)  # nothing asked, nothing to refuse
    assert await bot.edit_forum_topic(forum, thread, icon_custom_emoji_id="5312536423851630001")
    [topic] = await emulator.client.topics(forum)
    assert topic["name"] == "CI" and topic["icon_custom_emoji_id"] == "5312536423851630001"
    edits = [m["service"] for m in await emulator.client.messages(forum) if m["service"]][1:]
    assert edits == [
        {"forum_topic_edited": {"name": "CI"}},
        {"forum_topic_edited": {"icon_custom_emoji_id": "5312536423851630001"}},
    ]


async def test_an_edited_topic_message_keeps_its_thread(emulator, bot, forum) -> None:
    thread = (await bot.create_forum_topic(forum, "Builds")).message_thread_id
    sent = await bot.send_message(forum, "v1", message_thread_id=thread)
    edited = await bot.edit_message_text("v2", forum, sent.message_id)
    assert edited.message_thread_id == thread and edited.is_topic_message


async def test_wait_for_bot_messages_in_one_topic(emulator, bot, forum) -> None:
    builds = (await bot.create_forum_topic(forum, "Builds")).message_thread_id
    support = (await bot.create_forum_topic(forum, "Support")).message_thread_id
    await bot.send_message(forum, "in builds", message_thread_id=builds)
    await bot.send_message(forum, "in support", message_thread_id=support)
    found = await emulator.client.wait_for_bot_messages(
        forum, 1, after=support, message_thread_id=support, timeout=2
    )
    assert [m["text"] for m in found] == ["in support"]


async def test_a_group_first_seen_as_a_forum_is_one(emulator, bot) -> None:
    body = {"chat_id": FORUM, "chat": {"type": "supergroup", "title": "T", "is_forum": True}}
    await emulator.client.inject_message({**body, "text": "hi"})
    (update,) = await bot.get_updates()
    assert update.message.chat.is_forum and update.message.message_id == 2
    assert (await bot.create_forum_topic(FORUM, "Builds")).message_thread_id == 3


async def test_the_control_api_refuses_bad_forum_requests(emulator, forum) -> None:
    for call in (
        emulator.client.set_bot_rights(forum, can_fly=True),
        emulator.client.create_forum(42, "Not a group"),
        emulator.client.create_topic(forum, " "),
        emulator.client.create_topic(-100999, "No such chat"),
    ):
        with pytest.raises(EmulatorClientError) as caught:
            await call
        assert caught.value.status in (400, 404)
    chats = await emulator.client.chats()
    assert [c["chat"]["id"] for c in chats] == [forum]
