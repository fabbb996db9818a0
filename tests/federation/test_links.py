"""Peer links (federation/links.py): made by an invitation, one way, secrets in 0600 files that
no audit row or refusal holds; rotation with an overlap; a refused change changes nothing."""

from __future__ import annotations

import stat
import time
from dataclasses import replace
from datetime import timedelta

import pytest
from sqlalchemy import select

from bot.config.secrets import SecretFiles
from bot.errors import PeerLinkRefused
from bot.store import migrate
from bot.store.database import Store
from bot.store.tables import audit_events
from federation.invitations import link_secret, read_invitation
from federation.links import Direction, LinkState, Peers


@pytest.fixture
def vps(store, tmp_path):
    """The called side, on SQLite and on Postgres."""
    return Peers(store, SecretFiles(tmp_path / "vps"))


@pytest.fixture
async def laptop(tmp_path):
    """The calling side, with a database (SQLite) and a data dir of its own."""
    (tmp_path / "laptop").mkdir()
    store = Store(f"sqlite+aiosqlite:///{tmp_path / 'laptop' / 'aegis.sqlite3'}")
    await migrate.upgrade(store)
    try:
        yield Peers(store, SecretFiles(tmp_path / "laptop"))
    finally:
        await store.close()


async def test_an_invitation_makes_a_link_one_way(vps, laptop):
    invitation = await vps.invite("laptop", us="vps", url="https://vps.example:8742")
    read = read_invitation(invitation.text())
    assert read == invitation and read.callee == "vps" and read.caller == "laptop"
    peer = await laptop.add("home-vps", read)
    assert (peer.direction, peer.us, peer.them, peer.url) == (
        Direction.OUT,
        "laptop",
        "vps",
        "https://vps.example:8742",
    )
    assert (
        laptop.secret("home-vps", Direction.OUT)
        == vps.secret("laptop", Direction.IN)
        == bytes.fromhex(invitation.secret)
    )
    inbound = await vps.get("laptop", Direction.IN)
    assert inbound.direction == Direction.IN and inbound.state == LinkState.INVITED
    links = await vps.links_in()
    assert set(links) == {"laptop"} and links["laptop"].us == "vps"
    assert await laptop.links_in() == {}  # laptop calls; nothing calls it on this link


async def test_secrets_are_files_of_mode_0600_and_never_in_the_audit(vps, laptop, tmp_path):
    invitation = await vps.invite("laptop", us="vps", url="http://127.0.0.1:9")
    await laptop.add("vps", invitation)
    assert await vps.claim("laptop", b"s" * 32)
    await vps.rotate("laptop", url="http://127.0.0.1:9", overlap=timedelta(hours=1))
    for side in ("vps", "laptop"):
        for path in (tmp_path / side / "secrets").iterdir():
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    async with vps.store.read() as conn:
        details = " ".join((await conn.execute(select(audit_events.c.detail))).scalars())
    assert "invited laptop" in details and "rotated the secret of laptop" in details
    for secret in (invitation.secret, vps.secret("laptop", Direction.IN).hex()):
        assert secret not in details


async def test_an_invitation_is_good_once(vps, laptop):
    invitation = await vps.invite("laptop", us="vps", url="http://127.0.0.1:9")
    await laptop.add("vps", invitation)
    with pytest.raises(PeerLinkRefused, match="used already"):
        await laptop.add("vps-again", invitation)
    assert [peer.name for peer in await laptop.all()] == ["vps"]


async def test_an_expired_invitation_is_refused_and_stores_nothing(vps, laptop, tmp_path):
    invitation = await vps.invite("laptop", us="vps", url="http://127.0.0.1:9")
    expired = replace(invitation, expires=int(time.time()) - 1)
    with pytest.raises(PeerLinkRefused, match="expired"):
        await laptop.add("vps", expired)
    assert await laptop.get("vps", Direction.OUT) is None
    assert not (tmp_path / "laptop" / "secrets" / "peer-out-vps").exists()


async def test_an_unclaimed_invitation_stops_verifying_when_it_expires(vps):
    invitation = await vps.invite("laptop", us="vps", url="http://127.0.0.1:9")
    [key] = (await vps.links_in())["laptop"].keys
    assert key.until == pytest.approx(invitation.expires, abs=1)


@pytest.mark.parametrize(
    "name, invitation_text, why",
    [
        ("Bad Name", None, "lowercase"),
        ("vps", "aegis-invite-1.@@@", "damaged"),
        ("vps", "hello", "does not start"),
        ("vps", "aegis-invite-1.e30", "damaged"),  # {}
    ],
)
async def test_bad_input_is_refused_and_changes_nothing(vps, laptop, name, invitation_text, why):
    invitation = await vps.invite("laptop", us="vps", url="http://127.0.0.1:9")
    with pytest.raises(PeerLinkRefused, match=why):
        await laptop.add(name, read_invitation(invitation_text or invitation.text()))
    assert await laptop.all() == []


async def test_an_existing_link_is_not_invited_over(vps, laptop):
    invitation = await vps.invite("laptop", us="vps", url="http://127.0.0.1:9")
    again = await vps.invite("laptop", us="vps", url="http://127.0.0.1:9")  # still unused
    assert (
        again.secret != invitation.secret
        and vps.secret("laptop", Direction.IN).hex() == again.secret
    )
    assert await vps.claim("laptop", b"s" * 32)
    claimed = vps.secret("laptop", Direction.IN)
    with pytest.raises(PeerLinkRefused, match="calls us already"):
        await vps.invite("laptop", us="vps", url="http://127.0.0.1:9")
    assert vps.secret("laptop", Direction.IN) == claimed


async def test_rotation_keeps_the_old_secret_for_the_overlap_and_now_ends_it(vps, laptop):
    first = await vps.invite("laptop", us="vps", url="http://127.0.0.1:9")
    await laptop.add("vps", first)
    assert await vps.claim("laptop", b"s" * 32)
    rotation = await vps.rotate("laptop", url="http://127.0.0.1:9", overlap=timedelta(hours=24))
    current, previous = (await vps.links_in())["laptop"].keys
    assert current.until is None and previous.until == pytest.approx(time.time() + 86400, abs=5)
    assert rotation.rotation and rotation.secret != first.secret
    await laptop.add("vps", rotation)
    assert laptop.secret("vps", Direction.OUT).hex() == rotation.secret
    await vps.rotate("laptop", url="http://127.0.0.1:9", overlap=timedelta(0))
    [only] = (await vps.links_in())["laptop"].keys
    assert only.until is None and vps.secret("laptop", Direction.IN).hex() != rotation.secret


async def test_only_the_called_side_rotates_and_a_rotation_fits_only_its_link(vps, laptop):
    await laptop.add("vps", await vps.invite("laptop", us="vps", url="http://127.0.0.1:9"))
    with pytest.raises(PeerLinkRefused, match="secret is made by vps"):
        await laptop.rotate("vps", url="http://127.0.0.1:9", overlap=timedelta(0))
    other = await vps.invite("desktop", us="vps", url="http://127.0.0.1:9")
    assert await vps.claim("desktop", b"s" * 32)
    rotation = await vps.rotate("desktop", url="http://127.0.0.1:9", overlap=timedelta(0))
    with pytest.raises(PeerLinkRefused, match="not that link"):
        await laptop.add("vps", rotation)
    assert laptop.secret("vps", Direction.OUT).hex() != other.secret


async def test_removing_a_link_removes_its_secrets_and_an_unknown_one_is_refused(vps, tmp_path):
    await vps.invite("laptop", us="vps", url="http://127.0.0.1:9")
    removed = await vps.remove("laptop")
    assert removed.name == "laptop" and await vps.links_in() == {}
    assert list((tmp_path / "vps" / "secrets").iterdir()) == []
    with pytest.raises(PeerLinkRefused, match="no link called laptop"):
        await vps.remove("laptop")


async def test_a_link_to_oneself_is_refused(vps):
    with pytest.raises(PeerLinkRefused, match="own name"):
        await vps.invite("vps", us="vps", url="http://127.0.0.1:9")


async def test_a_peer_both_ways_is_two_links_of_one_name(vps, laptop):
    """laptop calls vps, and vps calls laptop once laptop invites it in turn: on each side one
    name, two links, two secrets."""
    await laptop.add("vps", await vps.invite("laptop", us="vps", url="http://127.0.0.1:9"))
    back = await laptop.invite("vps", us="laptop", url="http://127.0.0.1:8")
    await vps.add("laptop", back)
    assert [(p.name, p.direction) for p in await laptop.all()] == [
        ("vps", Direction.OUT),
        ("vps", Direction.IN),
    ]
    assert laptop.secret("vps", Direction.OUT) != laptop.secret("vps", Direction.IN)
    assert set(await laptop.links_in()) == {"vps"} and set(await vps.links_in()) == {"laptop"}
    with pytest.raises(PeerLinkRefused, match="two links"):
        await laptop.remove("vps")
    removed = await laptop.remove("vps", Direction.IN)
    assert removed.direction == Direction.IN and await laptop.links_in() == {}
    assert (await laptop.get("vps", Direction.OUT)) is not None


async def test_an_invitation_is_claimed_once_and_the_link_secret_is_made_from_the_share(vps):
    invitation = await vps.invite("laptop", us="vps", url="http://127.0.0.1:9")
    [before] = (await vps.links_in())["laptop"].keys
    assert not (await vps.links_in())["laptop"].claimed
    assert await vps.claim("laptop", b"a" * 32)
    made = link_secret(bytes.fromhex(invitation.secret), b"a" * 32)
    assert vps.secret("laptop", Direction.IN) == made != bytes.fromhex(invitation.secret)
    link = (await vps.links_in())["laptop"]
    assert link.claimed and [key.until for key in link.keys] == [None] and before.until
    assert not await vps.claim("laptop", b"b" * 32)  # once
    assert vps.secret("laptop", Direction.IN) == made


async def test_an_unclaimed_link_is_invited_again_not_rotated(vps):
    await vps.invite("laptop", us="vps", url="http://127.0.0.1:9")
    with pytest.raises(PeerLinkRefused, match="not claimed its invitation yet"):
        await vps.rotate("laptop", url="http://127.0.0.1:9", overlap=timedelta(0))
