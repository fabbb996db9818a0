"""The checks on a peer's request, in the design's order: body size, headers, known peer,
clock, signature, nonce. The body is parsed only after all of them pass, by the caller.

``check`` is pure (the clock and the links are passed in); ``verify`` adds the one step with a
side effect, the nonce, through any ``NonceStore`` (``federation/nonces.py`` keeps them in
Redis). A refusal raises ``PeerRefused`` and has changed nothing.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from bot.errors import PeerRefused
from federation.headers import parse_headers
from federation.signing import canonical, signature

WINDOW = 300  # seconds either way between the sender's clock and ours
NONCE_TTL = 2 * WINDOW  # a nonce outlives every timestamp that could carry it again
MAX_BODY = 1_048_576


@dataclass(frozen=True)
class LinkKey:
    """A direction key a peer may sign with, and until when (None: the current secret)."""

    key: bytes
    until: float | None = None


@dataclass(frozen=True)
class Link:
    """A link on which ``peer`` calls us (``us`` is our name in it), as the checks need it."""

    peer: str
    us: str
    keys: tuple[LinkKey, ...]
    claimed: bool = True  # False: made by an invitation nobody has claimed yet
    spent: tuple[LinkKey, ...] = ()  # a claimed invitation's key, to say so to a late copy


@dataclass(frozen=True)
class Request:
    """What the checks read of an incoming request; ``body`` is None when it was too large to
    read (``size`` is then what was declared or read before giving up)."""

    method: str
    path_qs: str
    headers: Iterable[tuple[str, str]]
    body: bytes | None
    size: int


@dataclass(frozen=True)
class Checked:
    peer: str
    nonce: str
    skew: int  # the sender's clock minus ours, in seconds
    key: bytes = b""  # the key the request was signed with: the answer is signed with it


class NonceStore(Protocol):
    async def claim(self, peer: str, nonce: str, ttl: int) -> bool:
        """True the first time ``nonce`` is seen from ``peer`` within ``ttl`` seconds."""


def check(
    request: Request, links: Callable[[str], Link | None], now: float, *, max_body: int = MAX_BODY
) -> Checked:
    """Every check but the nonce, in order; raises ``PeerRefused`` at the first that fails."""
    if request.body is None or request.size > max_body or len(request.body) > max_body:
        raise PeerRefused(413, "too_large", f"the body is over {max_body} bytes")
    headers = parse_headers(request.headers)
    link = links(headers.peer)
    if link is None:
        raise PeerRefused(401, "unknown_peer", f"no link from a peer called {headers.peer}")
    skew = headers.ts - int(now)
    if abs(skew) > WINDOW:
        way = "ahead of" if skew > 0 else "behind"
        raise PeerRefused(
            401,
            "clock_skew",
            f"the request's timestamp is {abs(skew)} s {way} this server's clock "
            f"(at most {WINDOW} s either way)",
            peer=link.peer,
        )
    message = canonical(
        request.method,
        request.path_qs,
        link.peer,
        link.us,
        headers.ts,
        headers.nonce,
        request.body,
    )
    key = _signed_by(link.keys, message, headers.signature, now)
    if key is None:
        if _signed_by(link.spent, message, headers.signature, now) is not None:
            raise PeerRefused(409, "claimed", "this invitation was claimed already", peer=link.peer)
        raise PeerRefused(401, "bad_signature", "the signature does not verify", peer=link.peer)
    return Checked(link.peer, headers.nonce, skew, key)


def _signed_by(keys: tuple[LinkKey, ...], message: bytes, given: str, now: float) -> bytes | None:
    """The live key that made ``given``, or None."""
    matched = None
    for held in keys:
        live = held.until is None or now < held.until
        # every live key is compared, so the time taken does not tell which one matched
        if hmac.compare_digest(signature(held.key, message), given) and live:
            matched = held.key
    return matched


async def verify(
    request: Request,
    links: Callable[[str], Link | None],
    nonces: NonceStore,
    now: float,
    *,
    max_body: int = MAX_BODY,
) -> Checked:
    """``check``, then the nonce stored atomically: a second use within its TTL is a 409."""
    checked = check(request, links, now, max_body=max_body)
    if not await nonces.claim(checked.peer, checked.nonce, NONCE_TTL):
        raise PeerRefused(409, "replay", "this nonce was used already", peer=checked.peer)
    return checked
