"""The model-call ledger on SQLite and Postgres: what /models reads, the rolling 24-hour window of
the token budgets, and when a spent budget frees up. Rows are written with the times they need
(a call 25 hours ago), never waited for."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import insert

from bot.agents.ledger import Ledger, provider_label
from bot.agents.profiles import AgentProfile, HarnessKind, Provider
from bot.store.tables import model_calls
from bot.timeutil import now


async def call_at(store, ago: timedelta, *, agent="scout", status="ok", tokens=0, **more):
    values = {
        "run_id": None,
        "agent": agent,
        "provider": more.get("provider", "first"),
        "model": more.get("model", "small"),
        "status": status,
        "latency_ms": 10,
        "prompt_tokens": tokens,
        "completion_tokens": 0,
        "at": now() - ago,
    }
    async with store.write() as conn:
        await conn.execute(insert(model_calls).values(**values))
    return values["at"]


def agent(budget: int | None) -> AgentProfile:
    return AgentProfile("scout", "Scout", HarnessKind.HTTP, budget_tokens=budget)


async def test_last_seen_gives_each_model_its_last_success_and_last_failure(store):
    ok_at = await call_at(store, timedelta(hours=30))
    await call_at(store, timedelta(hours=2), status="http 500")
    failed_at = await call_at(store, timedelta(hours=1), status="timeout")
    other_at = await call_at(store, timedelta(minutes=5), model="big")

    big, small = await Ledger(store).last_seen()  # by provider, then model

    assert (small.provider, small.model) == ("first", "small")
    assert small.last_ok == ok_at
    assert (small.last_failure, small.last_failure_status) == (failed_at, "timeout")
    assert small.calls_24h == 2  # the success was 30 hours ago
    assert (big.model, big.last_ok, big.last_failure, big.calls_24h) == ("big", other_at, None, 1)


async def test_tokens_are_counted_over_the_last_24_hours(store):
    ledger = Ledger(store)
    await call_at(store, timedelta(hours=25), tokens=1000)
    await call_at(store, timedelta(hours=3), tokens=40)
    await call_at(store, timedelta(hours=1), tokens=2, agent="other")
    assert await ledger.tokens_spent("scout") == 40
    assert await ledger.tokens_spent() == 42
    assert await ledger.tokens_spent("scout", since=now() - timedelta(hours=30)) == 1040


async def test_a_spent_budget_frees_up_when_enough_tokens_are_a_day_old(store):
    ledger = Ledger(store)
    oldest = await call_at(store, timedelta(hours=20), tokens=60)
    middle = await call_at(store, timedelta(hours=10), tokens=30)
    await call_at(store, timedelta(hours=1), tokens=30)

    assert await ledger.spent(agent(121)) is None
    assert await ledger.spent(agent(None)) is None
    spent = await ledger.spent(agent(120))
    assert (spent.whose, spent.used, spent.budget) == ("scout", 120, 120)
    # 120 used, 120 allowed: once the oldest 60 are a day old, 60 < 120 and a run may start.
    assert spent.frees_at == oldest + timedelta(hours=24)
    # 120 used, 50 allowed: 71 must go, the oldest two calls.
    assert (await ledger.spent(agent(50))).frees_at == middle + timedelta(hours=24)


async def test_the_overall_budget_counts_every_agent(store):
    await call_at(store, timedelta(hours=1), tokens=70, agent="other")
    await call_at(store, timedelta(hours=1), tokens=30)
    assert await Ledger(store, overall_per_day=101).spent(agent(None)) is None
    spent = await Ledger(store, overall_per_day=100).spent(agent(1000))
    assert (spent.whose, spent.setting, spent.used) == (
        "all agents",
        "AEGIS_TOKEN_BUDGET_PER_DAY",
        100,
    )


def test_a_provider_is_named_without_what_its_url_may_hide():
    hidden = Provider("https://user:sk-secret@api.example.com:8443/v1?key=sk-other", "m")
    assert provider_label(hidden) == "api.example.com:8443"
    assert provider_label(Provider("https://api.example.com/v1", "m")) == "api.example.com"
    assert provider_label(Provider("http://127.0.0.1:9000/v1", "m", name="local")) == "local"
