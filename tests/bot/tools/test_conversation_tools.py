"""Asking the owner and messages between agents, called as agents call them: through the gate
(``platform.actions.perform``), on a platform built as the processes build it, against SQLite
and Postgres, with a recording ``enqueue`` for the broker. Answers arrive the way the bot's
handlers deliver them: ``Interactions.tap`` for a button, ``Interactions.reply`` for text.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from sqlalchemy import func, select

from bot.actions.audit import AuditEvent
from bot.actions.call import CallStatus, ToolCall
from bot.chat.outbox import Outbox
from bot.config.settings import Settings
from bot.core import Platform
from bot.interactions.interaction import Kind, TimeoutPolicy
from bot.store.tables import agent_messages
from bot.store.tables import interactions as interactions_table
from bot.tools.conversation import MAX_OPEN_CARDS, MAX_UNREAD_FROM_ONE_SENDER
from tests.helpers.interactions import (
    ALICE,
    CHAT,
    SIGNER,
    RecordingEnqueue,
    approval,
    audit_rows,
    card_rows,
    interaction_count,
    move_into_past,
)

CONFIG = """
agents:
  scribe: {tools: ["owner.*", "messages.*"]}
  copyist: {tools: ["owner.*", "messages.*"]}
  clerk: {tools: ["messages.*"]}
  reader: {tools: [messages.read]}
"""


@pytest.fixture
def enqueue() -> RecordingEnqueue:
    return RecordingEnqueue()


@pytest.fixture
def platform(tmp_path, store, enqueue) -> Platform:
    (tmp_path / "aegis.yaml").write_text(CONFIG)
    settings = Settings(data_dir=tmp_path, config_file=tmp_path / "aegis.yaml", _env_file=None)
    return Platform.build(settings, store, SIGNER, enqueue)


async def call(platform: Platform, tool: str, args: dict, agent: str = "scribe"):
    return await platform.actions.perform(ToolCall(agent, tool, args, CHAT))


async def ran(platform: Platform, tool: str, args: dict, agent: str = "scribe"):
    outcome = await call(platform, tool, args, agent)
    assert outcome.status is CallStatus.RAN, outcome.reason
    return outcome.result


async def refused(platform: Platform, tool: str, args: dict, agent: str = "scribe") -> str:
    """The sentence a refused call comes back with (the tool ran and refused)."""
    outcome = await call(platform, tool, args, agent)
    assert outcome.status is CallStatus.FAILED, outcome
    prefix = f"{tool} failed: ToolRefused: "
    assert outcome.reason.startswith(prefix)
    return outcome.reason.removeprefix(prefix)


async def ask(platform: Platform, agent: str = "scribe", **args) -> int:
    args.setdefault("question", "Deploy on Friday?")
    result = await ran(platform, "owner.ask", args, agent)
    return result["card"]


async def answer(platform: Platform, card: int, agent: str = "scribe", **args) -> dict:
    return await ran(platform, "owner.answer", {"card": card, **args}, agent)


async def tap(platform: Platform, card: int, choice: str):
    return await platform.interactions.tap(card, choice, ALICE, "Alice", codes_ready=True)


async def sent_as(store, outbox_id: int, telegram_message_id: int) -> None:
    """Deliver the card's message as a delivery would, recording its Telegram message id."""
    box = Outbox(store)
    message = await box.deliveries.claim_next_in_chat(outbox_id)
    assert message is not None and message.id == outbox_id
    await box.deliveries.record_part(message, telegram_message_id)


async def message_count(store) -> int:
    async with store.read() as conn:
        return (await conn.execute(select(func.count()).select_from(agent_messages))).scalar_one()


def buttons(row: dict) -> list[str]:
    return [button["text"] for line in row["reply_markup"]["inline_keyboard"] for button in line]


# Asking the owner


async def test_a_choice_is_one_card_delivered_through_the_outbox_to_the_callers_chat(
    platform, store, enqueue
):
    result = await ran(platform, "owner.ask", {"question": "Which day?", "options": ["Mon", "Tue"]})

    assert (result["status"], result["next"]) == (
        "asked",
        "call owner.answer with this card to read the answer",
    )
    card = await platform.interactions.get(result["card"])
    assert (card.kind, card.agent, card.chat_id) == (Kind.CHOICE, "scribe", CHAT)
    assert (card.prompt, card.options) == ("Which day?", ("Mon", "Tue"))
    assert card.timeout_policy is TimeoutPolicy.ARCHIVE
    assert card.expires_at - card.created_at == timedelta(minutes=60)
    [row] = await card_rows(store, card.id)
    assert row["chat_id"] == CHAT and buttons(row) == ["Mon", "Tue"]
    assert "Which day?" in row["parts"][0] and "from scribe" in row["parts"][0]
    assert enqueue.calls == [("deliver", (row["id"],), {})]
    assert await interaction_count(store) == 1


async def test_a_question_without_options_is_a_question_card_with_its_own_timeout(platform, store):
    card_id = await ask(
        platform, question="  What should the release be called?  ", timeout_minutes=5
    )

    card = await platform.interactions.get(card_id)
    assert (card.kind, card.prompt) == (Kind.QUESTION, "What should the release be called?")
    assert card.expires_at - card.created_at == timedelta(minutes=5)
    [row] = await card_rows(store, card_id)
    assert buttons(row) == ["Skip"] and "Reply to this message" in row["parts"][0]


async def test_options_that_would_show_differently_are_refused_and_nothing_is_asked(
    platform, store, enqueue
):
    for options in (["yes\u202e", "no"], ["yes", "line\nbreak"], ["yes", "   "]):
        reason = await refused(platform, "owner.ask", {"question": "Q?", "options": options})
        assert "invisible character" in reason
    assert "empty" in await refused(platform, "owner.ask", {"question": "   "})
    assert await interaction_count(store) == 0 and enqueue.calls == []


async def test_owner_answer_sees_pending_then_the_option_tapped(platform):
    card = await ask(platform, options=["Mon", "Tue"])

    pending = await answer(platform, card)
    assert (pending["card"], pending["status"], pending["answer"]) == (card, "pending", None)
    assert pending["answered_at"] is None and pending["expires_at"] is not None

    assert (await tap(platform, card, "1")).changed
    chosen = await answer(platform, card)
    assert (chosen["status"], chosen["answer"]) == ("chosen", "Tue")
    assert chosen["answered_at"] is not None and chosen["expires_at"] is None


async def test_a_reply_to_the_question_card_is_read_as_its_answer(platform, store):
    card = await ask(platform, question="What should the release be called?")
    [row] = await card_rows(store, card)
    await sent_as(store, row["id"], 555)
    assert (await answer(platform, card))["status"] == "pending"

    reply = await platform.interactions.reply(CHAT, 555, ALICE, "Alice", "Aurora")

    assert reply.changed
    answered = await answer(platform, card)
    assert (answered["status"], answered["answer"]) == ("answered", "Aurora")


async def test_a_skipped_or_expired_card_reads_so_with_no_answer(platform, store):
    skipped, expired = await ask(platform), await ask(platform)
    await tap(platform, skipped, "skip")
    await move_into_past(store, interactions_table, expired)

    assert (await answer(platform, skipped))["status"] == "skipped"
    assert (await answer(platform, skipped))["answer"] is None
    # Past its deadline it is expired before the sweep marks it, and after.
    before_sweep = await answer(platform, expired)
    assert await platform.interactions.expire(expired) is not None
    after_sweep = await answer(platform, expired)
    for seen in (before_sweep, after_sweep):
        assert (seen["status"], seen["answer"], seen["answered_at"]) == ("expired", None, None)


async def test_another_agents_card_is_refused_exactly_like_a_missing_one(platform):
    card = await ask(platform)
    missing = card + 1000
    # A card of scribe's that owner.ask did not make (an approval) is not one it asked either.
    gate_card = await platform.interactions.create(approval(agent="scribe"))

    assert await refused(platform, "owner.answer", {"card": card}, "copyist") == (
        f"you asked no card {card}"
    )
    assert await refused(platform, "owner.answer", {"card": missing}, "copyist") == (
        f"you asked no card {missing}"
    )
    assert await refused(platform, "owner.answer", {"card": gate_card.id}) == (
        f"you asked no card {gate_card.id}"
    )
    assert (await answer(platform, card))["status"] == "pending"


async def test_an_agent_with_five_open_cards_is_refused_a_sixth(platform, store):
    cards = [await ask(platform) for _ in range(MAX_OPEN_CARDS)]

    reason = await refused(platform, "owner.ask", {"question": "One more?"})

    assert f"already have {MAX_OPEN_CARDS} cards waiting" in reason
    assert await interaction_count(store) == MAX_OPEN_CARDS
    await ask(platform, "copyist")  # the cap is each agent's own
    await tap(platform, cards[0], "skip")  # an answered card no longer counts
    await ask(platform)
    assert await interaction_count(store) == MAX_OPEN_CARDS + 2


async def test_wait_seconds_holds_the_call_until_the_card_is_settled(platform):
    card = await ask(platform, options=["Mon", "Tue"])
    waiting = asyncio.create_task(answer(platform, card, wait_seconds=25))
    await asyncio.sleep(0.5)
    assert not waiting.done()  # still polling: nothing has settled the card

    await tap(platform, card, "0")

    # Well before its 25 seconds are up: the call ends when the card is settled.
    settled = await asyncio.wait_for(waiting, timeout=20)
    assert (settled["status"], settled["answer"]) == ("chosen", "Mon")


async def test_wait_seconds_on_a_card_nobody_answers_ends_pending(platform):
    card = await ask(platform)

    assert (await answer(platform, card, wait_seconds=0.3))["status"] == "pending"


# Messages between agents


async def test_a_message_and_its_reply_make_a_round_trip_and_the_reply_cites_the_question(
    platform, store
):
    sent = await ran(platform, "messages.send", {"to": "copyist", "text": "Which branch?"})
    assert sent == {"message": sent["message"], "to": "copyist"}
    assert (await ran(platform, "messages.read", {}))["messages"] == []  # not scribe's to read

    received = await ran(platform, "messages.read", {}, "copyist")
    [message] = received["messages"]
    assert received["more"] is False
    assert message == {
        "id": sent["message"],
        "from": "scribe",
        "text": "Which branch?",
        "reply_to": None,
        "cites": None,
        "sent_at": message["sent_at"],
    }
    assert message["sent_at"] is not None

    reply = await ran(
        platform, "messages.send", {"reply_to": sent["message"], "text": "main"}, "copyist"
    )
    assert reply["to"] == "scribe"  # back to whoever asked, without naming it

    [answered] = (await ran(platform, "messages.read", {}))["messages"]
    assert (answered["id"], answered["from"], answered["text"]) == (
        reply["message"],
        "copyist",
        "main",
    )
    assert (answered["reply_to"], answered["cites"]) == (sent["message"], "Which branch?")


async def test_a_reply_cites_only_the_first_two_hundred_characters(platform):
    long = "x" * 150 + "y" * 150
    first = await ran(platform, "messages.send", {"to": "copyist", "text": long})
    await ran(
        platform,
        "messages.send",
        {"to": "scribe", "reply_to": first["message"], "text": "ok"},
        "copyist",
    )

    [reply] = (await ran(platform, "messages.read", {}))["messages"]

    assert reply["cites"] == long[:200]


async def test_a_reply_to_a_message_the_caller_did_not_receive_is_refused(platform, store):
    first = (await ran(platform, "messages.send", {"to": "copyist", "text": "Which branch?"}))[
        "message"
    ]

    for agent in ("clerk", "scribe"):  # a bystander, and the sender itself
        reply = {"reply_to": first, "text": "main"}
        assert await refused(platform, "messages.send", reply, agent) == (
            f"you received no message {first}"
        )
    missing = {"reply_to": first + 1000, "text": "main"}
    assert await refused(platform, "messages.send", missing, "clerk") == (
        f"you received no message {first + 1000}"
    )
    elsewhere = {"reply_to": first, "to": "clerk", "text": "main"}
    assert "goes back to its sender" in await refused(
        platform, "messages.send", elsewhere, "copyist"
    )
    assert await message_count(store) == 1


async def test_a_message_to_an_unknown_agent_to_oneself_or_to_nobody_is_refused(platform, store):
    assert await refused(platform, "messages.send", {"to": "nobody", "text": "hi"}) == (
        "no agent is called 'nobody'"
    )
    assert "to itself" in await refused(platform, "messages.send", {"to": "scribe", "text": "hi"})
    assert "say whom" in await refused(platform, "messages.send", {"text": "hi"})
    assert "empty" in await refused(platform, "messages.send", {"to": "copyist", "text": "  "})
    assert await message_count(store) == 0


async def test_no_argument_can_claim_another_sender(platform, store):
    claim = {"to": "copyist", "text": "hi", "from": "clerk"}

    outcome = await call(platform, "messages.send", claim)

    assert outcome.status is CallStatus.DENIED and "schema" in outcome.reason
    assert await message_count(store) == 0


async def test_reading_marks_messages_read_so_unread_only_hides_them(platform):
    sent = [
        (await ran(platform, "messages.send", {"to": "copyist", "text": f"note {n}"}))["message"]
        for n in range(3)
    ]

    def ids(result: dict) -> list[int]:
        return [message["id"] for message in result["messages"]]

    first = await ran(platform, "messages.read", {"limit": 2}, "copyist")
    assert (ids(first), first["more"]) == (sent[:2], True)
    second = await ran(platform, "messages.read", {}, "copyist")
    assert (ids(second), second["more"]) == (sent[2:], False)
    assert ids(await ran(platform, "messages.read", {}, "copyist")) == []

    everything = await ran(platform, "messages.read", {"unread_only": False}, "copyist")
    assert (ids(everything), everything["more"]) == (sent, False)
    latest = await ran(platform, "messages.read", {"unread_only": False, "limit": 2}, "copyist")
    assert (ids(latest), latest["more"]) == (sent[1:], True)  # the latest two, oldest first


async def test_reading_from_one_sender_leaves_the_others_unread(platform):
    from_scribe = await ran(platform, "messages.send", {"to": "copyist", "text": "a"})
    from_clerk = await ran(platform, "messages.send", {"to": "copyist", "text": "b"}, "clerk")

    only_clerk = await ran(platform, "messages.read", {"from": "clerk"}, "copyist")
    rest = await ran(platform, "messages.read", {}, "copyist")

    assert [m["id"] for m in only_clerk["messages"]] == [from_clerk["message"]]
    assert [m["id"] for m in rest["messages"]] == [from_scribe["message"]]


async def test_a_sender_whose_messages_go_unread_is_stopped(platform, store):
    for n in range(MAX_UNREAD_FROM_ONE_SENDER):
        await ran(platform, "messages.send", {"to": "copyist", "text": f"ping {n}"})

    reason = await refused(platform, "messages.send", {"to": "copyist", "text": "ping!"})

    assert "has not read your last" in reason
    await ran(platform, "messages.send", {"to": "copyist", "text": "hello"}, "clerk")
    await ran(platform, "messages.read", {"limit": 1}, "copyist")
    await ran(platform, "messages.send", {"to": "copyist", "text": "ping!"})
    assert await message_count(store) == MAX_UNREAD_FROM_ONE_SENDER + 2


# The gate


async def test_talk_and_read_run_at_once_and_an_agent_not_granted_a_tool_is_denied(platform, store):
    card = await ask(platform)
    await answer(platform, card)
    await ran(platform, "messages.send", {"to": "reader", "text": "for you"})
    await ran(platform, "messages.read", {}, "reader")
    allowed = [(row.tool, row.detail) for row in await audit_rows(store, AuditEvent.ALLOWED)]
    assert allowed == [
        ("owner.ask", "owner.ask only speaks inside aegis"),
        ("owner.answer", "owner.answer only reads"),
        ("messages.send", "messages.send only speaks inside aegis"),
        ("messages.read", "messages.read only reads"),
    ]
    assert await interaction_count(store) == 1  # the question: no approval card for any of it

    for tool, args in (
        ("messages.send", {"to": "scribe", "text": "hi"}),
        ("owner.ask", {"question": "May I?"}),
        ("owner.answer", {"card": card}),
    ):
        outcome = await call(platform, tool, args, "reader")
        assert (
            outcome.status is CallStatus.DENIED
            and outcome.reason == f"reader is not granted {tool}"
        )
    assert await interaction_count(store) == 1 and await message_count(store) == 1
