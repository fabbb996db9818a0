"""The federation route (federation/server.py) over HTTP: the shared table of cases ends the
same there, a refusal is audited once a minute per kind and counted on its link, and a fuzz of
headers and bodies never gets a 5xx."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from bot.store.tables import audit_events
from federation.invitations import link_secret
from federation.links import Direction
from federation.server import CLAIM_PATH
from tests.helpers.federation_route import federation_route, start_of_a_second
from tests.helpers.signature_cases import CASES, World, signed


@pytest.fixture
async def route(tmp_path, redis_server_url, redis_namespace):
    async with federation_route(tmp_path, redis_server_url, redis_namespace) as route:
        yield route


async def test_every_case_ends_over_http_as_in_the_table(route):
    for case in CASES:
        world = case.world(start_of_a_second())
        await route.use(world)
        *before, last = case.sends(world)
        for sent in before:
            assert (await route.send(sent))[0] == 200, case.name
        status, answer = await route.send(last)
        assert status == (case.status or 200), case.name
        if case.status is not None and answer:  # aiohttp answers a 10,000-char header itself
            assert answer["refused"] == case.reason, case.name
        if case.status is None:
            assert answer["instance"] == "vps" and "time" in answer, case.name


async def test_refusals_are_audited_once_a_minute_per_kind_and_counted_on_the_link(route):
    world = World(start_of_a_second())
    await route.use(world)
    before = await route.peers.get("laptop", Direction.IN)
    for _ in range(5):
        assert (await route.send(signed(world, ts_offset=-900)))[0] == 401
    async with route.peers.store.read() as conn:
        rows = (await conn.execute(select(audit_events.c.detail))).scalars().all()
    refused = [row for row in rows if "refused" in row]
    assert len(refused) == 1 and "900 s behind" in refused[0]
    link = await route.peers.get("laptop", Direction.IN)
    assert link.refusals == {"clock_skew": 1}  # the other four wait for the next row
    assert (link.last_contact_at, link.skew_seconds) == (before.last_contact_at, None)
    no_nonce = signed(world).with_header("X-Aegis-Nonce", None)
    assert (await route.send(no_nonce))[0] == 400
    async with route.peers.store.read() as conn:
        rows = (await conn.execute(select(audit_events.c.detail))).scalars().all()
    assert sum("refused" in row for row in rows) == 2  # another kind, its own row


async def test_a_valid_request_is_kept_as_contact(route):
    world = World(start_of_a_second())
    await route.use(world)
    assert (await route.send(signed(world, ts_offset=-7)))[0] == 200
    link = await route.peers.get("laptop", Direction.IN)
    assert link.last_contact_at is not None and link.skew_seconds in (-7.0, -8.0)


async def test_an_unclaimed_link_may_only_claim_and_only_once(route):
    invitation = await route.peers.invite("desktop", us="vps", url="http://127.0.0.1:1")
    offered = bytes.fromhex(invitation.secret)
    world = World(start_of_a_second())

    def claim(share: bytes):
        body = json.dumps({"share": share.hex()}).encode()
        return signed(world, sender="desktop", secret=offered, path_qs=CLAIM_PATH, body=body)

    status, answer = await route.send(signed(world, sender="desktop", secret=offered))
    assert (status, answer["refused"]) == (403, "unclaimed")
    assert (await route.send(claim(b"x")))[0] == 400  # a share is 32 bytes
    assert (await route.send(claim(b"a" * 32)))[0] == 200
    route.federation.forget_links()
    status, answer = await route.send(claim(b"b" * 32))
    assert (status, answer["refused"]) == (409, "claimed")  # the offer is spent
    made = link_secret(offered, b"a" * 32)
    again = signed(
        world,
        sender="desktop",
        secret=made,
        path_qs=CLAIM_PATH,
        body=b'{"share":"' + b"c" * 64 + b'"}',
    )
    status, answer = await route.send(again)
    assert (status, answer["refused"]) == (409, "claimed")
    assert (await route.send(signed(world, sender="desktop", secret=made)))[0] == 200


HEADER_NAMES = st.sampled_from(
    ["X-Aegis-Peer", "X-Aegis-Timestamp", "X-Aegis-Nonce", "X-Aegis-Signature", "x-aegis-peer"]
)
VALUES = st.one_of(
    st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=300),
    st.from_regex(r"v1=[0-9a-f]{64}", fullmatch=True),
    st.from_regex(r"[0-9a-f]{32}", fullmatch=True),
    st.integers(-(10**13), 10**13).map(str),
    st.just("laptop"),
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    changes=st.lists(
        st.tuples(HEADER_NAMES, st.one_of(st.none(), VALUES), st.booleans()), max_size=5
    ),
    body=st.one_of(st.binary(max_size=2000), st.just(b"[]"), st.just(b"[" * 5000)),
    method=st.sampled_from(["POST", "GET", "PUT", "DELETE"]),
)
async def test_no_header_or_body_gets_a_5xx(route, changes, body, method):
    world = World(start_of_a_second())
    sent = signed(world, body=body, method=method)
    for name, value, add in changes:
        sent = sent.with_header(name, value, add=add)
    status, _ = await route.send(sent)
    assert status < 500
