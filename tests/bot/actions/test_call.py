"""A tool call is one value (bot/actions/call.py): its approval hash computed once, the gate's
ruling reused while the catalog it was made under is in force, and the decision returned with
the outcome. Against SQLite and Postgres, through the real call path and held calls."""

from __future__ import annotations

import asyncio
import math

import pytest

from bot.actions import actions as call_path
from bot.actions.call import Caller, CallStatus, ToolCall
from bot.actions.held_calls import HeldCalls
from bot.store.tables import interactions
from policies.canonical import approval_hash
from policies.decision import Allow, Deny, Gate
from policies.tools import AgentSpec, Catalog
from tests.helpers.interactions import (
    ALICE,
    BUILT_TOOLS,
    CHAT,
    RecordingEnqueue,
    Toolbox,
    build_platform,
    interaction_count,
)

HELLO = {"text": "hello"}


@pytest.fixture
def toolbox() -> Toolbox:
    return Toolbox(BUILT_TOOLS)


@pytest.fixture
def platform(tmp_path, store, toolbox):
    return build_platform(tmp_path, store, RecordingEnqueue(), toolbox)


@pytest.fixture
def decisions(monkeypatch) -> list[str]:
    """Every time the call path asks the gate, the tool it asked about."""
    asked: list[str] = []
    real = call_path.decide

    def counting(catalog, agent, tool, args):
        asked.append(tool)
        return real(catalog, agent, tool, args)

    monkeypatch.setattr(call_path, "decide", counting)
    return asked


def test_a_call_hashes_its_arguments_once_as_the_design_says():
    call = ToolCall("scribe", "notes.write", HELLO, CHAT, 7)
    assert call.args_hash == approval_hash("scribe", "notes.write", HELLO)
    assert call.unhashable is None
    assert call.is_for(call.args_hash) and not call.is_for(None)
    assert not call.is_for(approval_hash("scribe", "notes.write", {"text": "hello!"}))
    assert call.caller(card=3) == Caller("scribe", CHAT, 7, 3)


def test_arguments_that_are_not_plain_json_have_no_hash_and_say_why():
    call = ToolCall("scribe", "notes.write", {"text": math.nan}, None)
    assert call.args_hash is None and "not plain JSON" in call.unhashable
    assert not call.is_for(None)  # no hash matches a card that has none either
    assert call.caller().chat_id == 0  # no chat: only what needs no card can run


async def test_the_outcome_carries_the_decision_it_was_made_under(platform, decisions):
    ran = await platform.actions.perform(ToolCall("scribe", "notes.read", {"q": "x"}, CHAT))
    gated = await platform.actions.perform(ToolCall("scribe", "notes.write", HELLO, CHAT))
    denied = await platform.actions.perform(ToolCall("reader", "notes.write", HELLO, CHAT))
    assert isinstance(ran.decision, Allow) and ran.status is CallStatus.RAN
    assert isinstance(gated.decision, Gate) and gated.status is CallStatus.GATED
    assert isinstance(denied.decision, Deny) and denied.status is CallStatus.DENIED
    assert decisions == ["notes.read", "notes.write", "notes.write"]  # once per call


async def test_unhashable_arguments_are_refused_without_asking_the_gate(platform, decisions):
    outcome = await platform.actions.perform(ToolCall("scribe", "notes.write", {"x": math.inf}))
    assert outcome.status is CallStatus.DENIED and "not plain JSON" in outcome.reason
    assert decisions == []


async def test_an_approved_held_call_is_decided_once(platform, toolbox, store, decisions):
    held = HeldCalls(platform.actions, hold=5.0, poll=0.02)
    waiting = asyncio.create_task(held.call(ToolCall("scribe", "notes.write", HELLO, CHAT)))
    card = await _card_appears(store)
    await platform.interactions.tap(card, "approve", ALICE, "Alice", codes_ready=True)
    outcome = await asyncio.wait_for(waiting, timeout=10)
    assert outcome.status is CallStatus.RAN and toolbox.calls == [("notes.write", HELLO)]
    assert decisions == ["notes.write"]  # it was three before the call became one value


async def test_a_catalog_changed_while_the_call_waits_is_the_one_that_decides(
    platform, toolbox, store, decisions
):
    held = HeldCalls(platform.actions, hold=5.0, poll=0.02)
    waiting = asyncio.create_task(held.call(ToolCall("scribe", "notes.write", HELLO, CHAT)))
    card = await _card_appears(store)
    before = platform.actions.catalog
    # aegis.yaml takes notes.write away from scribe while the card waits
    after = Catalog(before.tools.values(), [AgentSpec("scribe", frozenset({"notes.read"}))])
    platform.actions._catalog = lambda: after
    await platform.interactions.tap(card, "approve", ALICE, "Alice", codes_ready=True)
    outcome = await asyncio.wait_for(waiting, timeout=10)
    assert outcome.status is CallStatus.DENIED and isinstance(outcome.decision, Deny)
    assert toolbox.calls == []
    assert decisions == ["notes.write", "notes.write"]


async def _card_appears(store) -> int:
    for _ in range(500):
        if await interaction_count(store):
            async with store.read() as conn:
                return (await conn.execute(interactions.select())).one().id
        await asyncio.sleep(0.01)
    raise AssertionError("no card was made")


def test_a_call_keeps_its_own_copy_of_what_was_hashed():
    args = {"text": "hello", "tags": ["a"]}
    call = ToolCall("scribe", "notes.write", args, CHAT)
    args["text"] = "rm -rf /"
    args["tags"].append("b")
    assert call.args == {"text": "hello", "tags": ["a"]}
    assert call.args_hash == approval_hash("scribe", "notes.write", call.args)
