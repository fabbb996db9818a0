"""Agents' MCP bearer tokens (bot/agents/tokens.py), on SQLite and Postgres: a token maps to its
agent, only its hash is kept, and an expired, revoked or unknown token maps to nobody."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
from sqlalchemy import select

from bot.agents.tokens import AgentTokens, TokenHolder
from bot.store.tables import agent_tokens
from tests.helpers.mcp import agent_of

HOUR = timedelta(hours=1)


async def rows(store) -> list:
    async with store.read() as conn:
        return (await conn.execute(select(agent_tokens).order_by(agent_tokens.c.id))).all()


async def test_a_token_made_for_a_run_maps_to_its_agent_and_only_its_hash_is_kept(store):
    tokens = AgentTokens(store)
    token = await tokens.mint_for_run("scout", 7, HOUR)
    assert len(token) >= 43  # 32 random bytes, url-safe base64
    assert await agent_of(tokens, token) == "scout"
    [row] = await rows(store)
    assert row.token_hash == hashlib.sha256(token.encode()).hexdigest()
    assert (row.agent, row.run_id, row.revoked_at) == ("scout", 7, None)
    assert row.expires_at - row.created_at == HOUR
    assert token not in str(tuple(row))


async def test_tokens_are_fresh_and_each_speaks_only_for_its_own_agent(store):
    tokens = AgentTokens(store)
    first = await tokens.mint_for_run("scout", 1, HOUR)
    second = await tokens.mint_for_run("scout", 1, HOUR)
    other = await tokens.mint_for_run("scribe", 2, HOUR)
    assert len({first, second, other}) == 3
    agents = [await agent_of(tokens, t) for t in (first, second, other)]
    assert agents == ["scout", "scout", "scribe"]


async def test_an_unknown_a_near_or_a_malformed_token_maps_to_nobody(store):
    tokens = AgentTokens(store)
    token = await tokens.mint_for_run("scout", 1, HOUR)
    near = token[:-1] + ("A" if token[-1] != "A" else "B")
    for wrong in (near, token + "x", "", "x" * 1000, token.upper()):
        assert await agent_of(tokens, wrong) is None
    assert await agent_of(tokens, None) is None


async def test_an_expired_token_is_refused(store):
    tokens = AgentTokens(store)
    token = await tokens.mint_for_run("scout", 1, timedelta(seconds=-1))
    assert await agent_of(tokens, token) is None


async def test_revoking_a_run_refuses_its_tokens_and_no_others(store):
    tokens = AgentTokens(store)
    mine = [await tokens.mint_for_run("scout", 5, HOUR) for _ in range(2)]
    theirs = await tokens.mint_for_run("scout", 6, HOUR)
    lasting = await tokens.mint("scout")  # no run, no expiry: made by hand
    assert await tokens.revoke_run(5) == 2
    assert [await agent_of(tokens, t) for t in mine] == [None, None]
    assert await agent_of(tokens, theirs) == "scout"
    assert await agent_of(tokens, lasting) == "scout"
    assert await tokens.revoke_run(5) == 0  # already revoked: nothing more to do


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_the_fast_token_lookup_agrees_with_the_sqlalchemy_one(store):
    tokens = AgentTokens(store)
    live = await tokens.mint("coder")
    expired = await tokens.mint("coder", ttl=timedelta(seconds=-1))
    run = await tokens.mint_for_run("coder", 7, timedelta(minutes=5))
    await tokens.revoke_run(7)
    answers = []
    for is_sqlite in (True, False):  # the same store, read both ways
        store.is_sqlite = is_sqlite
        try:
            answers.append([await tokens.identify(t) for t in (live, expired, run, "nope")])
        finally:
            store.is_sqlite = True
    assert answers[0] == answers[1] == [TokenHolder("coder", None), None, None, None]
