"""Two aegis instances: laptop's client asks vps's real web app (the whole web process on a
real port, its own data dir, database and Redis namespace) for its status over a link vps
made. What vps refuses, laptop is told, with the reason."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from bot.config.secrets import SecretFiles
from bot.errors import FederationError
from federation import client as client_module
from federation.links import Direction, LinkState, Peers
from tests.helpers.stack import make_settings, running_stack


@pytest.fixture
async def vps(tmp_path, redis_server_url, redis_namespace):
    settings = make_settings(
        tmp_path / "vps",
        f"sqlite+aiosqlite:///{tmp_path / 'vps.sqlite3'}",
        redis_server_url,
        peer_name="vps",
    )
    async with running_stack(settings, namespace=redis_namespace) as stack:
        yield stack, Peers(stack.store, SecretFiles(settings.data_dir))


async def _linked(vps, laptop):
    stack, vps_peers = vps
    laptop_peers, client = laptop
    invitation = await vps_peers.invite("laptop", us="vps", url=stack.settings.web_url)
    await client.link("home", invitation)
    return stack, vps_peers, laptop_peers, client


async def test_laptop_asks_vps_for_its_status(vps, laptop):
    stack, vps_peers, laptop_peers, client = await _linked(vps, laptop)
    answer = await client.status("home")
    assert answer["instance"] == "vps" and answer["ok"] is True
    assert set(answer["queues"]) == {"default", "outbox", "runs"} and answer["version"]
    inbound = await vps_peers.get("laptop", Direction.IN)
    assert inbound.state == LinkState.LINKED and inbound.last_contact_at is not None
    outbound = await laptop_peers.get("home", Direction.OUT)
    assert outbound.last_contact_at is not None and abs(outbound.skew_seconds) < 2
    [shown] = await stack.ask("/peers")
    assert "• laptop: they call us (we are vps, they are laptop); last contact" in shown["text"]
    assert "refused: none" in shown["text"]


async def test_a_rotation_keeps_the_old_secret_for_its_overlap_only(vps, laptop):
    stack, vps_peers, laptop_peers, client = await _linked(vps, laptop)
    await client.status("home")
    url = stack.settings.web_url
    rotation = await vps_peers.rotate("laptop", url=url, overlap=timedelta(hours=1))
    await _forget_links(stack)
    assert (await client.status("home"))["ok"]  # the old secret, within the overlap
    await vps_peers.rotate("laptop", url=url, overlap=timedelta(0))
    await _forget_links(stack)
    with pytest.raises(FederationError, match="signature does not verify"):
        await client.status("home")  # laptop never added the rotations
    await laptop_peers.add("home", rotation)  # too old now: the second one replaced it
    with pytest.raises(FederationError, match="401"):
        await client.status("home")


async def test_vps_clock_ten_minutes_off_refuses_every_call_naming_the_skew(
    vps, laptop, monkeypatch
):
    stack, vps_peers, laptop_peers, client = await _linked(vps, laptop)

    class TenMinutesAhead:
        @staticmethod
        def time() -> float:
            return time.time() + 600

    monkeypatch.setattr(client_module, "time", TenMinutesAhead)
    with pytest.raises(FederationError, match="600 s ahead of this server's clock"):
        await client.status("home")


@pytest.mark.parametrize(
    "ahead, said",
    [
        (600, "600 s ahead of this server's clock"),  # vps refuses, and says by how much
        (90, "its clock is 90 s behind this machine's"),  # accepted, but doctor warns
        (0, "answers (clock skew"),
    ],
)
async def test_doctor_names_a_peer_whose_clock_is_off(
    vps, laptop, tmp_path, monkeypatch, ahead, said
):
    from aegis.doctor import Finding
    from aegis.doctor_peers import peer_findings
    from bot.config.settings import Settings

    stack, vps_peers, laptop_peers, client = await _linked(vps, laptop)

    class Ahead:
        @staticmethod
        def time() -> float:
            return time.time() + ahead

    monkeypatch.setattr(client_module, "time", Ahead)
    settings = Settings(
        data_dir=tmp_path / "laptop",
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'laptop' / 'aegis.sqlite3'}",
        _env_file=None,
    )
    [finding] = await peer_findings(settings, Finding)
    assert finding.ok == (ahead == 0) and said in finding.text, finding.text


async def test_a_removed_link_is_refused_and_nothing_is_served(vps, laptop):
    stack, vps_peers, laptop_peers, client = await _linked(vps, laptop)
    await vps_peers.remove("laptop")
    await _forget_links(stack)
    with pytest.raises(FederationError, match="no link from a peer called laptop"):
        await client.status("home")


async def _forget_links(stack) -> None:
    """The web process reads the links again within seconds; a test does not wait for that."""
    from federation.server import SERVED

    stack.app[SERVED].federation.forget_links()


async def test_a_peer_that_is_down_is_named_unreachable_after_the_retries(laptop, tmp_path):
    from bot.errors import PeerUnreachable
    from federation.invitations import Invitation
    from tests.helpers.stack import free_port

    laptop_peers, client = laptop
    url = f"http://127.0.0.1:{free_port()}"
    expires = int(time.time()) + 600
    invitation = Invitation("0" * 32, "down", "laptop", url, "1" * 64, expires)
    await laptop_peers.add("down", invitation)
    with pytest.raises(PeerUnreachable, match="could not be reached"):
        await client.status("down")
