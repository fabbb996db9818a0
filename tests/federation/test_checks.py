"""The checks on a peer's request (federation/checks.py) against the shared table of cases,
the nonces in a real Redis; and the order the design fixes."""

from __future__ import annotations

import pytest

from bot.errors import PeerRefused
from federation.checks import NONCE_TTL, check, verify
from federation.signing import canonical, direction_key
from tests.helpers.signature_cases import CASES, NOW, SECRET, World, signed


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
async def test_each_case_ends_as_the_table_says(case, nonces):
    world = case.world(NOW)
    *before, last = case.sends(world)
    for sent in before:
        await verify(sent.request(), world.links().get, nonces, world.now)
    if case.status is None:
        checked = await verify(last.request(), world.links().get, nonces, world.now)
        assert checked.peer == "laptop"
        return
    with pytest.raises(PeerRefused) as refused:
        await verify(last.request(), world.links().get, nonces, world.now)
    assert (refused.value.status, refused.value.reason) == (case.status, case.reason)
    assert 400 <= refused.value.status < 500


async def test_a_refusal_stores_no_nonce(nonces, redis_namespace):
    world = World(NOW)
    sent = signed(world, ts_offset=301)
    with pytest.raises(PeerRefused):
        await verify(sent.request(), world.links().get, nonces, world.now)
    keys = [key async for key in nonces.client.scan_iter(f"{redis_namespace}:*")]
    assert keys == []


async def test_a_nonce_is_kept_for_twice_the_window(nonces, redis_namespace):
    world = World(NOW)
    sent = signed(world)
    await verify(sent.request(), world.links().get, nonces, world.now)
    [key] = [key async for key in nonces.client.scan_iter(f"{redis_namespace}:*")]
    assert NONCE_TTL == 600 and 590 < await nonces.client.ttl(key) <= 600


def test_the_skew_is_named_and_its_sign_kept():
    world = World(NOW)
    with pytest.raises(PeerRefused, match="301 s ahead"):
        check(signed(world, ts_offset=301).request(), world.links().get, world.now)
    with pytest.raises(PeerRefused, match="400 s behind"):
        check(signed(world, ts_offset=-400).request(), world.links().get, world.now)
    assert check(signed(world, ts_offset=-12).request(), world.links().get, world.now).skew == -12


def test_a_large_body_is_refused_before_anything_is_read_of_it():
    """413 comes first: a body over the cap with no headers at all is still a 413."""
    world = World(NOW)
    sent = signed(world, body=b"x" * 2**21).with_header("X-Aegis-Peer", None)
    with pytest.raises(PeerRefused) as refused:
        check(sent.request(), world.links().get, world.now)
    assert refused.value.status == 413


def test_the_order_is_headers_then_peer_then_clock_then_signature():
    world = World(NOW)
    stale_stranger = signed(world, sender="stranger", ts_offset=1000)
    with pytest.raises(PeerRefused, match="no link"):
        check(stale_stranger.request(), world.links().get, world.now)
    stale_forgery = signed(world, secret=b"\x01" * 32, ts_offset=1000)
    with pytest.raises(PeerRefused) as refused:
        check(stale_forgery.request(), world.links().get, world.now)
    assert refused.value.reason == "clock_skew"


def test_the_canonical_string_is_the_designs():
    message = canonical("POST", "/p?q=1", "a", "b", 17, "ab" * 16, b"{}")
    assert message == (
        b"v1\nPOST\n/p?q=1\na\nb\n17\n" + b"ab" * 16 + b"\n"
        b"44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
    )
    assert direction_key(SECRET, "a", "b") != direction_key(SECRET, "b", "a")


def test_a_refusal_never_quotes_a_header_value():
    world = World(NOW)
    sent = signed(world).with_header("X-Aegis-Nonce", "secretlooking" * 5)
    with pytest.raises(PeerRefused) as refused:
        check(sent.request(), world.links().get, world.now)
    assert "secretlooking" not in str(refused.value)
