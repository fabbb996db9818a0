"""Owners and strangers: a stranger is refused at most once an hour, even under a burst."""

from __future__ import annotations

import asyncio

from sqlalchemy import select

from bot.chat.owners import Owners
from bot.store.database import Store
from bot.store.tables import unknown_senders


async def test_a_burst_from_a_new_stranger_earns_exactly_one_refusal(store, database_url):
    # Separate stores, as separate web requests on Postgres would race on their own connections.
    stores = [Store(database_url) for _ in range(5)]
    try:
        verdicts = await asyncio.gather(
            *(Owners(s, []).note_unknown(666, "Mallory") for s in stores for _ in range(2))
        )
    finally:
        for extra in stores:
            await extra.close()
    assert verdicts.count(True) == 1
    async with store.read() as conn:
        row = (await conn.execute(select(unknown_senders))).one()
    assert row.updates_seen == 10


async def test_a_group_sighting_does_not_use_up_the_private_refusal(store):
    owners = Owners(store, [1])
    assert await owners.note_unknown(7, "Eve", refusable=False) is False
    assert await owners.note_unknown(7, "Eve") is True
    assert await owners.note_unknown(7, "Eve") is False
    assert await owners.is_owner(1) and not await owners.is_owner(7)


async def test_pairing_that_fails_to_add_the_owner_does_not_spend_the_code(store):
    import pyotp
    import pytest
    from sqlalchemy import insert
    from sqlalchemy.exc import IntegrityError

    from bot.chat.codes import CodeVerifier
    from bot.store.tables import code_attempts, owners, totp_steps
    from bot.timeutil import now

    secret = pyotp.random_base32()
    verifier = CodeVerifier(store, secret)
    pairing = Owners(store, [])
    assert not await pairing.is_owner(5)  # caches "not an owner" for a few seconds
    async with store.write() as conn:  # meanwhile another process paired the account
        await conn.execute(insert(owners).values(user_id=5, display_name="Ann", paired_at=now()))
    with pytest.raises(IntegrityError):
        await pairing.pair(5, "Ann", pyotp.TOTP(secret).now(), verifier)
    async with store.read() as conn:
        assert (await conn.execute(select(totp_steps))).all() == []  # the step was not spent
        assert (await conn.execute(select(code_attempts))).all() == []


async def test_paired_accounts_are_named_as_they_paired_and_configured_ones_are_not(store):
    import pyotp

    from bot.chat.codes import CodeVerifier

    secret = pyotp.random_base32()
    owners_ = Owners(store, [1])
    await owners_.pair(5, "Ann", pyotp.TOTP(secret).now(), CodeVerifier(store, secret))
    assert await owners_.names() == {5: "Ann"}  # 1 is an owner by AEGIS_OWNER_IDS: no name
