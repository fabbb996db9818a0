"""The http harness's parts, without the stack: tool names as OpenAI accepts them, the offer of
an agent's tools and the names mapped back, a provider's body read as a chat completion, and a
long tool result capped."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.actions.call import CallOutcome, CallStatus
from bot.agents.profiles import AgentProfile, HarnessKind
from bot.errors import HarnessFailed, ProviderFailed
from bot.tools.offer import WIRE_NAME, capped, tool_text, wire_name
from jobs.harnesses.http import Offer, parse_completion
from policies.tools import Catalog, Effect, ToolSpec, object_schema

# The parts, without the stack


def test_plain_tool_names_read_the_same_with_dashes():
    assert wire_name("demo.read_clock") == "demo-read_clock"
    assert wire_name("search") == "search"
    assert wire_name("a.b") != wire_name("a_b")
    odd = wire_name("deploy-site.run now")
    assert odd.startswith("t--deploy_site_run_now-") and WIRE_NAME.match(odd)
    assert wire_name("x" * 65) != wire_name("x" * 66)
    assert len(wire_name("x." * 80)) <= 64


@given(st.sets(st.text(min_size=1, max_size=80), min_size=1, max_size=8))
def test_tool_names_map_one_to_one_onto_names_openai_accepts(names):
    wires = {wire_name(name) for name in names}
    assert len(wires) == len(names)
    assert all(WIRE_NAME.match(wire) for wire in wires)


def test_the_offer_maps_each_offered_name_back_to_its_tool():
    catalog = Catalog(
        [
            ToolSpec("a.read", Effect.READ, object_schema(), "Read a thing."),
            ToolSpec("b-c.write", Effect.WRITE, object_schema(), "Write a thing."),
        ]
    )
    agent = AgentProfile(
        "x", "X", HarnessKind.HTTP, tools=frozenset({"a.read", "b-c.write", "undeclared"})
    )
    offer = Offer.of(agent, catalog)
    assert {offer.by_wire[wire_name(t)] for t in agent.tools} == agent.tools
    about = {t["function"]["name"]: t["function"]["description"] for t in offer.tools}
    assert about["a-read"] == "a.read: Read a thing."
    assert about[wire_name("b-c.write")] == (
        "b-c.write: Write a thing. (each call waits for the owner's approval)"
    )
    assert about["undeclared"] == "undeclared (each call waits for the owner's approval)"


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"{}",
        b'{"choices": []}',
        b'{"choices": [{"message": "text"}]}',
        b'{"choices": [{"message": {"content": 5}}]}',
        b'{"choices": [{"message": {"tool_calls": [{"function": {}}]}}]}',
    ],
)
def test_a_body_that_is_not_a_chat_completion_is_a_bad_body(raw):
    with pytest.raises(ProviderFailed, match="bad body"):
        parse_completion(raw)


def test_a_completion_keeps_the_calls_as_written_and_names_unnamed_ones():
    body = {
        "choices": [
            {
                "message": {
                    "content": None,
                    "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}],
                }
            }
        ]
    }
    turn = parse_completion(json.dumps(body).encode(), first_id=3)
    assert turn.message["tool_calls"] == [
        {"id": "call-3-0", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    ]
    assert (turn.prompt_tokens, turn.completion_tokens) == (0, 0)


def test_two_calls_of_one_turn_never_share_an_id():
    call = {"id": "call_0", "function": {"name": "f", "arguments": "{}"}}
    body = {"choices": [{"message": {"content": "", "tool_calls": [call, call]}}]}
    turn = parse_completion(json.dumps(body).encode(), first_id=2)
    assert [c["id"] for c in turn.message["tool_calls"]] == ["call_0", "call-2-1"]


def test_a_long_tool_result_keeps_its_payload_and_says_what_was_cut():
    text = capped("x" * 20_005, limit=20_000)
    assert text == "x" * 20_000 + "\n[… 5 more characters cut]"
    assert tool_text(CallOutcome(CallStatus.RAN, "ran", {"n": 1})) == '{"n": 1}'
    assert tool_text(CallOutcome(CallStatus.FAILED, "it broke")) == "Failed: it broke"


def test_an_offer_refuses_two_tools_it_cannot_tell_apart(monkeypatch):
    import bot.tools.offer

    monkeypatch.setattr(bot.tools.offer, "wire_name", lambda tool: "same")
    agent = AgentProfile("x", "X", HarnessKind.HTTP, tools=frozenset({"a", "b"}))
    with pytest.raises(HarnessFailed, match="cannot be told apart"):
        Offer.of(agent, Catalog())
