"""A topic per agent (bot/chat/topics.py), on SQLite and Postgres: where an agent's messages go
while the forum is on, off or lost, and which agent a topic's messages are for."""

from __future__ import annotations

import asyncio

from bot.agents.agent_run import RunOrigin
from bot.agents.agent_runs import AgentRuns
from bot.chat.outbox import Outbox
from bot.chat.topics import ForumState, Place, Topics
from bot.chat.views.runs import progress_text
from bot.interactions.interaction import Kind
from tests.helpers.asks import ask
from tests.helpers.interactions import RecordingEnqueue, card_rows, make_interactions

FORUM = -100_555
HOME = 7
OWNER_CHAT = 7


async def a_forum(store, **threads: int) -> Topics:
    topics = Topics(store)
    await topics.set_forum(FORUM, "Agents", HOME)
    for agent, thread_id in threads.items():
        await topics.record(agent, FORUM, thread_id, agent)
    return topics


async def test_an_agents_messages_go_to_its_topic_only_while_the_forum_is_on(store):
    topics = await a_forum(store, scout=11, scribe=12)
    async with store.read() as conn:
        assert await topics.place(OWNER_CHAT, "scout", conn) == Place(FORUM, 11)
        assert await topics.place(OWNER_CHAT, "scribe", conn) == Place(FORUM, 12)
        # No topic yet, and not an agent's message at all: where the caller said.
        assert await topics.place(OWNER_CHAT, "newcomer", conn) == Place(OWNER_CHAT)
        assert await topics.place(OWNER_CHAT, None, conn) == Place(OWNER_CHAT)

    assert await topics.lose(FORUM, "Telegram said: not enough rights")
    assert await topics.place(OWNER_CHAT, "scout") == Place(OWNER_CHAT)
    forum = await topics.forum()
    assert forum.state is ForumState.LOST and "not enough rights" in forum.problem

    await topics.set_forum(FORUM, "Agents", HOME)  # /here again: on, with the same topics
    assert await topics.place(OWNER_CHAT, "scout") == Place(FORUM, 11)

    assert (await topics.clear_forum()).chat_id == FORUM  # /here in the private chat
    assert await topics.forum() is None
    assert await topics.place(OWNER_CHAT, "scout") == Place(OWNER_CHAT)


async def test_a_topic_in_another_group_is_not_used_by_the_forum(store):
    topics = await a_forum(store)
    await topics.record("scout", -100_999, 5, "scout")  # its topic in a group used before
    assert await topics.place(OWNER_CHAT, "scout") == Place(OWNER_CHAT)
    assert await topics.missing(FORUM, ["scout", "scribe"]) == ["scout", "scribe"]


async def test_the_forum_is_lost_once_however_many_refusals_arrive(store):
    topics = await a_forum(store)
    results = await asyncio.gather(*(topics.lose(FORUM, f"refusal {n}") for n in range(6)))
    assert sorted(results) == [False] * 5 + [True]
    assert not await topics.lose(-100_999, "another group")  # not the forum: nothing changes


async def test_the_setting_seeds_a_forum_but_never_replaces_one_set_by_here(store):
    topics = Topics(store)
    await topics.seed(FORUM, HOME)
    assert (await topics.forum()).chat_id == FORUM
    await topics.set_forum(-100_777, "Later", HOME)
    await topics.seed(FORUM, HOME)  # a restart with the same setting
    assert (await topics.forum()).chat_id == -100_777


async def test_whose_topic_a_message_was_written_in(store):
    topics = await a_forum(store, scout=11)
    assert await topics.agent_of(FORUM, 11) == "scout"
    assert await topics.agent_of(FORUM, 12) is None
    assert await topics.agent_of(FORUM, None) is None  # General
    assert await topics.agent_of(-100_999, 11) is None  # the same thread id, another chat
    assert await topics.missing(FORUM, ["scout", "scribe"]) == ["scribe"]

    assert await topics.forget(FORUM, 11) == "scout"  # deleted in the group
    assert await topics.agent_of(FORUM, 11) is None
    assert await topics.missing(FORUM, ["scout"]) == ["scout"]


async def test_a_run_and_its_progress_message_go_to_the_agents_topic(store):
    topics = await a_forum(store, scribe=12)
    outbox = Outbox(store)
    runs = AgentRuns(store, outbox, progress_text, topics)
    run, _ = await runs.create(
        "scribe", "write it", OWNER_CHAT, origin=RunOrigin.COMMAND, deadline_seconds=60
    )
    assert (run.chat_id, run.thread_id) == (FORUM, 12)
    row = await outbox.get(run.progress_outbox_id)
    assert (row["chat_id"], row["thread_id"]) == (FORUM, 12)

    other, _ = await runs.create(
        "scout", "look", OWNER_CHAT, origin=RunOrigin.COMMAND, deadline_seconds=60
    )
    assert (other.chat_id, other.thread_id) == (OWNER_CHAT, None)


async def test_a_card_goes_to_its_agents_topic(store):
    await a_forum(store, scribe=12)
    asker = make_interactions(store, RecordingEnqueue())
    card = await asker.create(ask(Kind.QUESTION, chat_id=OWNER_CHAT, agent="scribe"))
    assert (card.chat_id, card.thread_id) == (FORUM, 12)
    [row] = await card_rows(store, card.id)
    assert (row["chat_id"], row["thread_id"]) == (FORUM, 12)

    await asker.resend(card, Place(OWNER_CHAT))  # /pending in the private chat: sent there
    rows = await card_rows(store, card.id)
    assert [(r["chat_id"], r["thread_id"]) for r in rows] == [(FORUM, 12), (OWNER_CHAT, None)]
