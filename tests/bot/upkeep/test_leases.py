"""The lease on SQLite and Postgres: one holder at a time, renewed by it, taken over once it runs
out, let go at once by a clean stop."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from bot.upkeep.leases import Leases

TTL = timedelta(seconds=30)


async def test_one_holder_renews_and_another_is_told_who_holds_it(store):
    leases = Leases(store)
    first = await leases.hold("clock", "a", TTL)
    assert first.holder == "a"
    renewed = await leases.hold("clock", "a", TTL)
    assert renewed.holder == "a" and renewed.expires_at >= first.expires_at
    refused = await leases.hold("clock", "b", TTL)
    assert (refused.holder, refused.expires_at) == ("a", renewed.expires_at)
    assert (await leases.get("clock")).holder == "a"


async def test_a_lease_that_ran_out_goes_to_the_next_and_a_release_frees_it_at_once(store):
    leases = Leases(store)
    await leases.hold("clock", "a", timedelta(milliseconds=50))
    await asyncio.sleep(0.1)
    assert (await leases.hold("clock", "b", TTL)).holder == "b"
    await leases.release("clock", "a")  # not a's any more: changes nothing
    assert (await leases.get("clock")).holder == "b"
    await leases.release("clock", "b")
    assert await leases.get("clock") is None
    assert (await leases.hold("clock", "a", TTL)).holder == "a"


async def test_many_contenders_at_once_get_one_holder(store):
    leases = Leases(store)
    got = await asyncio.gather(*(leases.hold("clock", f"c{n}", TTL) for n in range(8)))
    assert len({lease.holder for lease in got}) == 1
