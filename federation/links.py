"""Peer links as rows, and their secrets as files of mode 0600 in the data dir.

A link goes one way. The called side (B) makes it: ``invite`` writes an "in" row and the
secret it offers and returns the invitation; the calling side (A) claims it (``claim`` here on
B, through federation/client.py) and ``add``s it as an "out" row with the secret the claim
made. B never calls A on it: A must invite B in turn for that. Only B makes secrets, so only B
rotates them: its old secret stays good for an overlap while A adds the new invitation.
"""

from __future__ import annotations

import enum
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from bot.actions.audit import Audit, AuditEvent
from bot.config.secrets import SecretFiles
from bot.errors import PeerLinkRefused
from bot.store.database import Store
from bot.store.tables import peers
from bot.timeutil import now, short_time
from federation.checks import Link, LinkKey
from federation.headers import NAME
from federation.invitations import VALID_FOR, Invitation, is_http_url, link_secret
from federation.signing import direction_key

SECRET_BYTES = 32
DEFAULT_OVERLAP = timedelta(hours=24)


class Direction(enum.StrEnum):
    OUT = "out"  # we call them
    IN = "in"  # they call us

    @property
    def described(self) -> str:
        return "we call them" if self is Direction.OUT else "they call us"


class LinkState(enum.StrEnum):
    INVITED = "invited"  # an "in" link whose invitation nobody has used yet
    LINKED = "linked"


@dataclass(frozen=True)
class Peer:
    name: str
    direction: Direction
    url: str | None
    us: str
    them: str
    state: LinkState
    invitation: str
    expires_at: datetime | None
    previous_until: datetime | None
    created_at: datetime
    last_contact_at: datetime | None
    skew_seconds: float | None
    refusals: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        """The link in a line, as ``aegis peer list`` and ``/peers`` show it."""
        where = f" at {self.url}" if self.direction == Direction.OUT else ""
        contact = short_time(self.last_contact_at) if self.last_contact_at else "never"
        skew = "" if self.skew_seconds is None else f", clock skew {self.skew_seconds:+.1f} s"
        open_ = ""
        if self.state == LinkState.INVITED and self.expires_at is not None:
            open_ = f", invitation open until {short_time(self.expires_at)}"
        refused = ", ".join(f"{why} {n}" for why, n in sorted(self.refusals.items())) or "none"
        return (
            f"{self.name}: {self.direction.described}{where} (we are {self.us}, they are "
            f"{self.them}){open_}; last contact {contact}{skew}; refused: {refused}"
        )


def check_name(name: str, what: str = "a peer's name") -> str:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise PeerLinkRefused(
            f"{what} is lowercase letters, digits and '-' (at most 63, starting with a letter "
            "or digit); nothing was changed"
        )
    return name


class Peers:
    """The links of this instance: rows in the store, secrets in ``files``."""

    def __init__(self, store: Store, files: SecretFiles) -> None:
        self.store = store
        self.files = files

    async def all(self) -> list[Peer]:
        query = select(peers).order_by(peers.c.name, peers.c.direction.desc())
        async with self.store.read() as conn:
            rows = (await conn.execute(query)).all()
        return [_peer(row) for row in rows]

    async def get(self, name: str, direction: Direction) -> Peer | None:
        async with self.store.read() as conn:
            row = await _row(conn, name, direction)
        return None if row is None else _peer(row)

    def secret(self, name: str, direction: Direction) -> bytes:
        value = self.files.get(_secret_file(name, direction))
        if value is None:
            raise PeerLinkRefused(f"the secret of the link {name} is missing from the data dir")
        return bytes.fromhex(value)

    async def invite(self, name: str, *, us: str, url: str) -> Invitation:
        """An "in" link for ``name`` (a fresh one, or one whose invitation went unused)."""
        check_name(name)
        check_name(us, "this instance's name (AEGIS_PEER_NAME)")
        if name == us:
            raise PeerLinkRefused(f"{name} is this instance's own name; nothing was changed")
        if not is_http_url(url):
            raise PeerLinkRefused(f"{url!r} is not an http(s) address peers can reach")
        moment = now()
        invitation = _invitation(us, name, url, moment)
        async with self.store.write() as conn:
            existing = await _row(conn, name, Direction.IN)
            if existing is not None and existing.state != LinkState.INVITED:
                raise PeerLinkRefused(
                    f"{name} calls us already; `aegis peer rotate {name}` makes a new secret, "
                    f"`aegis peer remove {name} --way in` ends the link"
                )
            await conn.execute(delete(peers).where(_is(name, Direction.IN)))
            await conn.execute(
                insert(peers).values(
                    _values(name, Direction.IN, None, us, name, invitation, moment)
                    | {"state": LinkState.INVITED, "expires_at": _at(invitation.expires)}
                )
            )
            await _audit(conn, f"invited {name} to call us as {us}")
            self.files.put(_secret_file(name, Direction.IN), invitation.secret)
        return invitation

    async def check_new(self, name: str, invitation: Invitation) -> None:
        """Refuse, before the invitation is claimed, what ``add`` would refuse after."""
        async with self.store.read() as conn:
            await self._refuse(conn, name, invitation)

    async def _refuse(self, conn: AsyncConnection, name: str, invitation: Invitation):
        """The "out" row ``name`` has now (None: none), or a refusal of ``invitation``."""
        check_name(name)
        if invitation.expires <= now().timestamp():
            raise PeerLinkRefused(
                f"this invitation expired at {_at(invitation.expires):%H:%M:%S} UTC; ask "
                f"{invitation.callee} for a new one (`aegis peer invite`); nothing was stored"
            )
        await _refuse_reuse(conn, invitation)
        existing = await _row(conn, name, Direction.OUT)
        if not invitation.rotation and existing is not None:
            raise PeerLinkRefused(
                f"we call a peer called {name} already; `aegis peer remove {name} --way out` first"
            )
        return existing

    async def add(self, name: str, invitation: Invitation, *, secret: str | None = None) -> Peer:
        """Store the "out" link ``invitation`` makes, with the ``secret`` its claim made (a
        rotation's invitation carries its own), or a rotation's new secret."""
        moment = now()
        async with self.store.write() as conn:
            existing = await self._refuse(conn, name, invitation)
            if invitation.rotation:
                await self._rotate_out(conn, name, existing, invitation)
            else:
                values = _values(
                    name,
                    Direction.OUT,
                    invitation.url,
                    invitation.caller,
                    invitation.callee,
                    invitation,
                    moment,
                )
                await conn.execute(insert(peers).values(values | {"state": LinkState.LINKED}))
            done = "a new secret for" if invitation.rotation else "a link to"
            await _audit(conn, f"added {done} {name} ({invitation.callee} at {invitation.url})")
            self.files.put(_secret_file(name, Direction.OUT), secret or invitation.secret)
        return await self.get(name, Direction.OUT)

    async def _rotate_out(
        self, conn: AsyncConnection, name: str, existing, invitation: Invitation
    ) -> None:
        same = existing is not None and (existing.us, existing.them) == (
            invitation.caller,
            invitation.callee,
        )
        if not same:
            raise PeerLinkRefused(
                f"this invitation rotates the secret of a link from {invitation.caller} to "
                f"{invitation.callee}, and {name} is not that link here; nothing was stored"
            )
        await conn.execute(
            update(peers)
            .where(_is(name, Direction.OUT))
            .values(invitation=invitation.id, url=invitation.url)
        )

    async def rotate(self, name: str, *, url: str, overlap: timedelta) -> Invitation:
        """A new secret for the "in" link ``name``; the old one stays good for ``overlap``
        (zero: it stops at once). Returns the invitation that carries the new one to A."""
        moment = now()
        async with self.store.write() as conn:
            existing = await _row(conn, name, Direction.IN)
            if existing is None:
                raise PeerLinkRefused(await _no_link_in(conn, name))
            if existing.state == LinkState.INVITED:
                raise PeerLinkRefused(
                    f"{name} has not claimed its invitation yet: `aegis peer invite {name}` "
                    "makes a new one. Nothing was changed"
                )
            invitation = _invitation(existing.us, name, url, moment, rotation=True)
            keep = overlap > timedelta(0)
            await conn.execute(
                update(peers)
                .where(_is(name, Direction.IN))
                .values(invitation=invitation.id, previous_until=moment + overlap if keep else None)
            )
            until = f"good until {moment + overlap:%Y-%m-%d %H:%M} UTC" if keep else "ended"
            await _audit(conn, f"rotated the secret of {name}, the old one {until}")
            self._replace_secret(name, invitation.secret, keep_previous=keep)
        return invitation

    def _replace_secret(self, name: str, secret: str, *, keep_previous: bool) -> None:
        current = _secret_file(name, Direction.IN)
        old = self.files.get(current)
        if keep_previous and old is not None:
            self.files.put(current + ".previous", old)
        else:
            self.files.path(current + ".previous").unlink(missing_ok=True)
        self.files.put(current, secret)

    async def remove(self, name: str, direction: Direction | None = None) -> Peer:
        """Remove the link ``name`` (its ``direction`` is needed only when both exist)."""
        async with self.store.write() as conn:
            found = [
                row
                for way in (Direction.OUT, Direction.IN)
                if direction in (None, way) and (row := await _row(conn, name, way)) is not None
            ]
            if not found:
                raise PeerLinkRefused(f"there is no link called {name}; nothing was changed")
            if len(found) > 1:
                raise PeerLinkRefused(
                    f"{name} names two links, one we call and one that calls us: add --way out "
                    "or --way in. Nothing was changed"
                )
            removed = _peer(found[0])
            await conn.execute(delete(peers).where(_is(name, removed.direction)))
            await _audit(conn, f"removed the link {name} ({removed.direction.described})")
            for suffix in ("", ".previous", ".offered"):
                self.files.path(_secret_file(name, removed.direction) + suffix).unlink(
                    missing_ok=True
                )
        return removed

    async def links_in(self) -> dict[str, Link]:
        """Every "in" link the checks may accept a request on, with its live keys."""
        links = {}
        for peer in await self.all():
            if peer.direction == Direction.IN:
                links[peer.name] = self._link(peer)
        return links

    def _link(self, peer: Peer) -> Link:
        current = self.files.get(_secret_file(peer.name, Direction.IN))
        until = peer.expires_at if peer.state == LinkState.INVITED else None
        keys = [] if current is None else [_key(current, peer, until)]
        previous = self.files.get(_secret_file(peer.name, Direction.IN) + ".previous")
        if previous is not None and peer.previous_until is not None:
            keys.append(_key(previous, peer, peer.previous_until))
        claimed = peer.state == LinkState.LINKED
        offered = self.files.get(_secret_file(peer.name, Direction.IN) + ".offered")
        spent = ()
        if claimed and offered is not None and peer.expires_at is not None:
            spent = (_key(offered, peer, peer.expires_at),)
        return Link(peer.them, peer.us, tuple(keys), claimed, spent)

    async def claim(self, name: str, share: bytes) -> bool:
        """The invitation of the "in" link ``name`` claimed with ``share``: the link's secret
        is made from the two, once. False when it was claimed already (or is gone)."""
        moment = now()
        async with self.store.write() as conn:
            claimed = await conn.execute(
                update(peers)
                .where(_is(name, Direction.IN))
                .where(peers.c.state == LinkState.INVITED, peers.c.expires_at > moment)
                .values(state=LinkState.LINKED, last_contact_at=moment)
            )
            if claimed.rowcount != 1:
                return False
            await _audit(conn, f"{name} claimed its invitation: the link is made")
            # The offer is kept until it expires, only to tell a late copy it was claimed.
            offered = self.secret(name, Direction.IN)
            self.files.put(_secret_file(name, Direction.IN) + ".offered", offered.hex())
            self.files.put(_secret_file(name, Direction.IN), link_secret(offered, share).hex())
        return True

    async def contacted(self, name: str, direction: Direction, skew: float | None) -> None:
        """A request on the link succeeded: its last contact and the clock skew measured then
        are kept."""
        async with self.store.write() as conn:
            await conn.execute(
                update(peers)
                .where(_is(name, direction))
                .values(last_contact_at=now(), skew_seconds=skew)
            )

    async def count_refusals(self, conn: AsyncConnection, name: str, counts: dict[str, int]):
        """Add refused requests by reason to the "in" link ``name``, in the caller's write."""
        row = await _row(conn, name, Direction.IN)
        if row is None:
            return
        total = dict(row.refusals or {})
        for reason, count in counts.items():
            total[reason] = total.get(reason, 0) + count
        await conn.execute(update(peers).where(_is(name, Direction.IN)).values(refusals=total))


async def _no_link_in(conn: AsyncConnection, name: str) -> str:
    out = await _row(conn, name, Direction.OUT)
    if out is None:
        return f"no link called {name} calls us; nothing was changed"
    return (
        f"{name} is a link we call: its secret is made by {out.them}. Run `aegis peer rotate` "
        f"there and `aegis peer add {name} <invitation>` here"
    )


async def _audit(conn: AsyncConnection, detail: str) -> None:
    await Audit.add(conn, AuditEvent.PEER_CHANGED, "federation: " + detail)


def _secret_file(name: str, direction: Direction) -> str:
    return f"peer-{direction}-{name}"


def _key(secret_hex: str, peer: Peer, until: datetime | None) -> LinkKey:
    key = direction_key(bytes.fromhex(secret_hex), peer.them, peer.us)
    return LinkKey(key, None if until is None else until.timestamp())


def _invitation(us: str, them: str, url: str, moment: datetime, *, rotation=False) -> Invitation:
    return Invitation(
        id=secrets.token_hex(16),
        callee=us,
        caller=them,
        url=url,
        secret=secrets.token_bytes(SECRET_BYTES).hex(),
        expires=int(moment.timestamp()) + VALID_FOR,
        rotation=rotation,
    )


def _values(name, direction, url, us, them, invitation: Invitation, moment) -> dict:
    return {
        "name": name,
        "direction": direction,
        "url": url,
        "us": us,
        "them": them,
        "invitation": invitation.id,
        "created_at": moment,
        "refusals": {},
    }


async def _refuse_reuse(conn: AsyncConnection, invitation: Invitation) -> None:
    used = (
        await conn.execute(select(peers.c.name).where(peers.c.invitation == invitation.id))
    ).first()
    if used is not None:
        raise PeerLinkRefused(
            f"this invitation was used already (for the link {used.name}); an invitation "
            "is good once. Nothing was stored"
        )


def _is(name: str, direction: Direction):
    return (peers.c.name == name) & (peers.c.direction == direction)


async def _row(conn: AsyncConnection, name: str, direction: Direction):
    return (await conn.execute(select(peers).where(_is(name, direction)))).first()


def _peer(row) -> Peer:
    return Peer(
        row.name,
        Direction(row.direction),
        row.url,
        row.us,
        row.them,
        LinkState(row.state),
        row.invitation,
        row.expires_at,
        row.previous_until,
        row.created_at,
        row.last_contact_at,
        row.skew_seconds,
        dict(row.refusals or {}),
    )


def _at(timestamp: int) -> datetime:
    return datetime.fromtimestamp(timestamp, now().tzinfo)
