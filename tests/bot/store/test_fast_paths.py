"""Each fast path (bot/store/fast_paths.py) says exactly what the SQLAlchemy query beside it
says: the raw SQL through Store.read_now and the query through SQLAlchemy, on the same SQLite
rows, for parameters on both sides of every edge; and ``fetch`` answers alike on Postgres."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import insert

from bot.interactions.interaction import OPEN
from bot.store.fast_paths import (
    CARD_STATUS,
    FAST_READS,
    LIVE_GRANT,
    LIVE_HOLDER,
    OPEN_STATUSES,
    SETTLED_APPROVAL,
    FastRead,
    _sqlite_value,
    fetch,
)
from bot.store.tables import agent_tokens, grants, interactions
from bot.timeutil import now

T0 = now().replace(microsecond=500_000)
EDGES = [T0 + step for step in (-timedelta(days=1), -timedelta(microseconds=1), timedelta(0))]
EDGES += [T0 + timedelta(microseconds=1), T0 + timedelta(days=1)]


async def seed(store) -> None:
    """Rows around T0 for every fast path: live, used, expired, revoked, open, settled."""
    hour = timedelta(hours=1)
    async with store.write() as conn:
        for i, (args_hash, used) in enumerate([("h-live", None), ("h-used", T0)], start=1):
            await conn.execute(
                insert(grants).values(
                    interaction_id=i, agent="scribe", tool="notes.write", args_hash=args_hash,
                    step_up=False, granted_by=1, granted_at=T0 - hour, expires_at=T0,
                    used_at=used,
                )
            )  # fmt: skip
        for token_hash, expires, revoked in [
            ("t-lasting", None, None),
            ("t-run", T0, None),
            ("t-revoked", None, T0 - hour),
        ]:
            await conn.execute(
                insert(agent_tokens).values(
                    agent="scribe", token_hash=token_hash, run_id=7 if expires else None,
                    created_at=T0 - hour, expires_at=expires, revoked_at=revoked,
                )
            )  # fmt: skip
        for status, outcome, resolved, args_hash in [
            ("pending", None, None, "h-a"),
            ("awaiting_code", None, None, "h-a"),
            ("resolved", "denied", T0, "h-a"),
            ("expired", "expired", T0 - hour, "h-a"),
            ("resolved", "approved", T0, "h-b"),
        ]:
            await conn.execute(
                insert(interactions).values(
                    kind="approval", agent="scribe", chat_id=1, prompt="?", options=[],
                    tool="notes.write", args={}, args_hash=args_hash, step_up=False,
                    status=status, outcome=outcome, timeout_policy="archive", created_at=T0,
                    resolved_at=resolved, continuation_kwargs={},
                )
            )  # fmt: skip


PARAMETERS = {
    LIVE_GRANT: [{"args_hash": h, "moment": m} for h in ("h-live", "h-used", "no") for m in EDGES],
    LIVE_HOLDER: [
        {"token_hash": h, "moment": m}
        for h in ("t-lasting", "t-run", "t-revoked", "no")
        for m in EDGES
    ],
    CARD_STATUS: [{"card": card} for card in range(0, 7)],
    SETTLED_APPROVAL: [{"args_hash": h, "since": m} for h in ("h-a", "h-b", "no") for m in EDGES],
}


def test_every_fast_path_is_held_here_and_names_its_parameters():
    assert set(PARAMETERS) == set(FAST_READS)
    for path in FAST_READS:
        assert path.sql.count("?") == len(path.params), path.name
        assert all(set(params) == set(path.params) for params in PARAMETERS[path]), path.name


def test_the_store_knows_the_open_statuses_of_an_interaction():
    assert set(OPEN_STATUSES) == {str(status) for status in OPEN}


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("path", FAST_READS, ids=lambda path: path.name)
async def test_the_raw_sql_says_what_the_query_says(store, path: FastRead):
    await seed(store)
    answers = set()
    for params in PARAMETERS[path]:
        values = tuple(_sqlite_value(params[name]) for name in path.params)
        fast = [tuple(row) for row in store.read_now(path.sql, values)]
        async with store.read() as conn:
            slow = [tuple(row) for row in (await conn.execute(path.query(**params))).all()]
        assert fast == slow, (path.name, params)
        answers.add(bool(fast))
    assert answers == {True, False}  # the parameters reach both sides of the edge


async def test_fetch_answers_alike_on_either_database(store):
    await seed(store)
    assert await fetch(store, LIVE_GRANT, args_hash="h-live", moment=T0 - timedelta(seconds=1))
    assert not await fetch(store, LIVE_GRANT, args_hash="h-live", moment=T0)
    [holder] = await fetch(store, LIVE_HOLDER, token_hash="t-lasting", moment=T0)
    assert holder == ("scribe", None, "t-lasting")
    assert await fetch(store, LIVE_HOLDER, token_hash="t-revoked", moment=T0) == []
    assert await fetch(store, CARD_STATUS, card=3) == [("resolved", "denied")]
    since = T0 - timedelta(minutes=1)
    [(card, outcome)] = await fetch(store, SETTLED_APPROVAL, args_hash="h-a", since=since)
    assert (card, outcome) == (3, "denied")
