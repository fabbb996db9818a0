"""``aegis doctor``'s look at each peer link: a peer we call is asked its status (once, with a
short ceiling); one that cannot be reached, refuses us, or whose clock is off by more than a
minute is a problem. A link on which a peer calls us shows the skew measured at its last
request. Nothing here changes a link but its last contact."""

from __future__ import annotations

import aiohttp

from bot.config.secrets import SecretFiles
from bot.config.settings import Settings
from bot.errors import FederationError, StoreError
from bot.store.database import Store
from bot.timeutil import short_time
from federation.checks import WINDOW
from federation.client import PeerClient
from federation.links import Direction, Peer, Peers

SKEW_WARNING = 60.0  # seconds; the checks refuse at WINDOW, so this warns well before


async def peer_findings(settings: Settings, finding) -> list:
    store = Store(settings.effective_database_url)
    try:
        peers = Peers(store, SecretFiles(settings.data_dir))
        links = await peers.all()
        async with aiohttp.ClientSession(trust_env=False) as session:
            client = PeerClient(peers, session, tries=1, timeout=5.0)
            return [await _look(client, peer, finding) for peer in links]
    except StoreError:
        return []  # the database finding says why
    finally:
        await store.close()


async def _look(client: PeerClient, peer: Peer, finding):
    if peer.direction == Direction.IN:
        return _inbound(peer, finding)
    try:
        await client.status(peer.name)
    except FederationError as exc:
        return finding(False, f"Peer {peer.name}: {exc}.")
    skew = (await client.peers.get(peer.name, Direction.OUT)).skew_seconds
    if skew is not None and abs(skew) > SKEW_WARNING:
        return finding(False, f"Peer {peer.name}: its clock is {_off(skew)}; {_fix(peer)}")
    return finding(True, f"Peer {peer.name} at {peer.url} answers (clock skew {skew or 0:+.1f} s).")


def _inbound(peer: Peer, finding):
    if peer.skew_seconds is not None and abs(peer.skew_seconds) > SKEW_WARNING:
        return finding(
            False,
            f"Peer {peer.name} (calls us): its clock was {_off(peer.skew_seconds)} at its "
            f"last request; {_fix(peer)}",
        )
    seen = "never yet" if peer.last_contact_at is None else short_time(peer.last_contact_at)
    return finding(True, f"Peer {peer.name} calls us (last: {seen}).")


def _off(skew: float) -> str:
    way = "ahead of" if skew > 0 else "behind"
    return f"{abs(skew):.0f} s {way} this machine's"


def _fix(peer: Peer) -> str:
    return (
        f"requests are refused beyond {WINDOW} s. Run NTP (e.g. `timedatectl set-ntp true`) on "
        f"{peer.them} or here."
    )
