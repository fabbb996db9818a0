"""A topic per agent, end to end on SQLite and Postgres: /here in a forum group through the real
bot and the emulator's forum topics, the topics made by a real worker with createForumTopic, the
cards of two agents in two topics, what is written in a topic going to its agent, and the
fallback to the private chat when Telegram refuses a topic."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import select

from aegis.botapi.endpoint import make_bot
from bot.store.tables import agent_runs, tasks
from bot.store.tables import topics as topic_rows
from handlers.topics import NOT_A_FORUM
from tests.helpers.runs import buttons
from tests.helpers.stack import OWNER_CHAT, eventually, make_settings, running_stack

FORUM = -100_424_242
CONFIG = """\
agents:
  scribe:
    harness: script
    tools: [demo.write_file]
    steps:
      - call: demo.write_file
        args: {name: "scribe-{run}.txt", text: "{request}"}
  clerk:
    harness: script
    tools: [demo.write_file]
    steps:
      - call: demo.write_file
        args: {name: "clerk-{run}.txt", text: "{request}"}
"""


@pytest.fixture
async def stack(tmp_path, database_url, redis_server_url, redis_namespace):
    settings = make_settings(tmp_path / "data", database_url, redis_server_url)
    settings.config_file.parent.mkdir(parents=True, exist_ok=True)
    settings.config_file.write_text(CONFIG, encoding="utf-8")
    async with running_stack(settings, namespace=redis_namespace) as running:
        yield running


async def topics_made(stack, *agents: str) -> dict[str, int]:
    """Each agent's topic as aegis recorded it (name → message_thread_id), once each of
    ``agents`` has one that the forum holds. Read from the store, not from the forum's list: a
    job retried after Telegram made a topic may leave a second topic of the same name there."""

    async def made():
        async with stack.store.read() as conn:
            rows = (
                await conn.execute(select(topic_rows).where(topic_rows.c.chat_id == FORUM))
            ).all()
        recorded = {row.agent: row.thread_id for row in rows}
        in_forum = {t["message_thread_id"] for t in await stack.emulator.topics(FORUM)}
        if set(agents) <= set(recorded) and set(recorded.values()) <= in_forum:
            return recorded
        return None

    return await eventually(made, timeout=30)


async def bot_said(stack, chat_id: int, pattern: str, *, thread: int | None = None) -> dict:
    """The first bot message in the chat (in topic ``thread`` if given) matching ``pattern``."""

    async def found():
        messages = await stack.emulator.messages(chat_id, message_thread_id=thread)
        for message in messages:
            if message["from_bot"] and re.search(pattern, message["text"] or ""):
                return message
        return None

    return await eventually(found, timeout=30)


async def a_forum_with_topics(stack) -> dict[str, int]:
    await stack.emulator.create_forum(FORUM, "Agents")
    await stack.send("/here", chat_id=FORUM)
    return await topics_made(stack, "scribe", "clerk")


async def test_the_cards_of_two_agents_land_in_their_two_topics(stack):
    topics = await a_forum_with_topics(stack)
    scribe, clerk = topics["scribe"], topics["clerk"]
    assert scribe != clerk
    await bot_said(stack, FORUM, r"^This is scribe's topic", thread=scribe)

    await stack.send("/run scribe hello")  # typed in the private chat: the run is scribe's
    await stack.send("/run tidy up", chat_id=FORUM, message_thread_id=clerk)  # no name needed

    scribe_card = await bot_said(stack, FORUM, r"from scribe", thread=scribe)
    clerk_card = await bot_said(stack, FORUM, r"from clerk", thread=clerk)
    assert "Approve" in buttons(scribe_card) and "Approve" in buttons(clerk_card)
    assert scribe_card["message_thread_id"] == scribe
    async with stack.store.read() as conn:
        runs = (await conn.execute(select(agent_runs).order_by(agent_runs.c.id))).all()
    assert [(r.agent, r.request, r.chat_id, r.thread_id) for r in runs] == [
        ("scribe", "hello", FORUM, scribe),
        ("clerk", "tidy up", FORUM, clerk),
    ]
    # A reply to the card, in the topic, is a note for its agent; the answer comes there too.
    await stack.send(
        "use blue ink",
        chat_id=FORUM,
        message_thread_id=scribe,
        reply_to_message_id=scribe_card["message_id"],
    )
    await bot_said(stack, FORUM, r"^Noted for scribe", thread=scribe)
    # Nothing of theirs went to the private chat, and nothing to the other agent's topic.
    private = [m["text"] or "" for m in await stack.bot_messages(OWNER_CHAT)]
    assert not any("scribe" in text or "clerk" in text for text in private)
    in_clerks = [
        m["text"] or "" for m in await stack.emulator.messages(FORUM, message_thread_id=clerk)
    ]
    assert not any("from scribe" in text for text in in_clerks)


async def test_what_is_written_in_an_agents_topic_is_for_that_agent(stack):
    topics = await a_forum_with_topics(stack)
    await stack.send("buy stamps", chat_id=FORUM, message_thread_id=topics["scribe"])
    answer = await bot_said(
        stack, FORUM, r"Captured as task \d+ for scribe", thread=topics["scribe"]
    )
    task_id = int(re.search(r"task (\d+)", answer["text"]).group(1))

    await stack.send("file the receipts", chat_id=FORUM)  # General: nobody's
    await bot_said(stack, FORUM, r"Captured as task \d+: file the receipts")
    async with stack.store.read() as conn:
        rows = (await conn.execute(select(tasks.c.id, tasks.c.assignee))).all()
    assert sorted(rows) == [(task_id, "scribe"), (task_id + 1, None)]


async def test_refused_topics_fall_back_to_the_private_chat_and_say_so_once(stack):
    await stack.ask("/start")  # the owner's private chat with the bot, where it falls back to
    await stack.emulator.create_forum(FORUM, "Agents")
    await stack.emulator.set_bot_rights(FORUM, can_manage_topics=False)
    await stack.send("/here", chat_id=FORUM)
    notice = await bot_said(stack, OWNER_CHAT, r"I could not make a topic for")
    assert "not enough rights" in notice["text"].lower() and "/here" in notice["text"]

    await stack.send("/run scribe hello")
    await bot_said(stack, OWNER_CHAT, r"from scribe")  # the card came to the private chat
    status = await stack.ask("/status")
    assert "Topics: off" in status[0]["text"]
    notices = [
        m
        for m in await stack.bot_messages(OWNER_CHAT)
        if "could not make a topic" in (m["text"] or "")
    ]
    assert len(notices) == 1
    assert await stack.emulator.topics(FORUM) == []


async def test_here_in_a_group_without_topics_says_what_to_do(stack):
    [answer] = await stack.ask("/here", chat_id=-4242)
    assert answer["text"] == NOT_A_FORUM


async def test_here_in_the_private_chat_brings_everything_back(stack):
    topics = await a_forum_with_topics(stack)
    [answer] = await stack.ask("/here")
    assert "come to this chat now" in answer["text"] and "Agents" in answer["text"]
    await stack.send("/run scribe hello")
    await bot_said(stack, OWNER_CHAT, r"from scribe")
    in_topic = await stack.emulator.messages(FORUM, message_thread_id=topics["scribe"])
    assert not any("from scribe" in (m["text"] or "") for m in in_topic)


async def test_a_topic_deleted_in_the_group_sends_to_general_and_is_made_again(stack):
    topics = await a_forum_with_topics(stack)
    bot = make_bot(stack.settings)
    async with bot:  # someone deletes scribe's topic in the group
        await bot.delete_forum_topic(FORUM, topics["scribe"])

    await stack.send("/run scribe hello")
    card = await bot_said(stack, FORUM, r"from scribe")
    remade = await eventually(lambda: _new_topic(stack, "scribe", topics["scribe"]), timeout=20)
    # Sent to General when the topic was found gone, or to the new topic if it was made first.
    assert card.get("message_thread_id") in (None, remade)
    async with stack.store.read() as conn:
        [row] = (await conn.execute(select(topic_rows).where(topic_rows.c.agent == "scribe"))).all()
    assert row.thread_id == remade != topics["scribe"]

    await stack.send("/run scribe again")  # its next run is in the new topic
    await bot_said(stack, FORUM, r"Run #2 ", thread=remade)


async def _new_topic(stack, name: str, old: int) -> int | None:
    for topic in await stack.emulator.topics(FORUM):
        if topic["name"] == name and topic["message_thread_id"] != old:
            return topic["message_thread_id"]
    return None
