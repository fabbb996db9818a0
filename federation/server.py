"""The federation route the web process serves: every request passes ``checks.verify`` before
its body is read as JSON; then it may claim its link's invitation (``claim``) or, on a claimed
link, ask this aegis's ``status`` or ask it to act (``requests``: federation/requests.py, run
under this aegis's gate by federation/acting.py).

A refusal is a 4xx with a sentence, audited at most once a minute per kind; it changes
nothing else. The one 5xx is 503 while this side cannot check (starting, or Redis down for the
nonces): a request that could not be checked is never served.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio
from aiohttp import web

from aegis.request_body import read_at_most
from bot.errors import FederationError, PeerRefused, StoreError
from federation.acting import Acting
from federation.checks import MAX_BODY, Checked, Link, NonceStore, Request, verify
from federation.links import Direction, Peers
from federation.nonces import RedisNonces
from federation.refusals import RefusalLog
from federation.requests import check_ask
from federation.signing import SIGNATURE, answer_canonical, signature

logger = logging.getLogger(__name__)
PREFIX = "/federation/"
STATUS_PATH = "/federation/v1/status"
CLAIM_PATH = "/federation/v1/claim"
REQUESTS_PATH = "/federation/v1/requests"
SHARE = re.compile(r"[0-9a-f]{64}")
FRESH_FOR = 5.0  # seconds a read of the links serves; `aegis peer` changes show within it
CONTACT_EVERY = 10.0  # seconds between two writes of one link's last contact


@dataclass
class Federation:
    """What the route needs, made inside the web process's loop."""

    peers: Peers
    nonces: NonceStore
    status: Callable[[], Awaitable[dict[str, Any]]]
    refusals: RefusalLog
    acting: Acting | None = None  # None: this process runs no peer's requests (tests of checks)
    max_body: int = MAX_BODY
    _links: dict[str, Link] = field(default_factory=dict)
    _read_at: float = float("-inf")
    _contacts: dict[str, float] = field(default_factory=dict)
    _reading: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def links(self, at: float) -> dict[str, Link]:
        """The links, read again when older than a few seconds, by one request at a time: a
        burst arriving as the read goes stale waits for that one read instead of each making
        its own."""
        if at - self._read_at > FRESH_FOR:
            async with self._reading:
                if at - self._read_at > FRESH_FOR:
                    self._links, self._read_at = await self.peers.links_in(), at
        return self._links

    def forget_links(self) -> None:
        """Read the links again at the next request (a link was claimed, or a test changed
        one and does not wait for ``FRESH_FOR``)."""
        self._read_at = float("-inf")

    async def contacted(self, peer: str, skew: int, at: float) -> None:
        """Keep the link's last contact and skew, at most every few seconds."""
        if at - self._contacts.get(peer, float("-inf")) < CONTACT_EVERY:
            return
        self._contacts[peer] = at
        try:
            await self.peers.contacted(peer, Direction.IN, float(skew))
        except StoreError as exc:
            logger.warning("the last contact of %s was not kept: %s", peer, exc)


@dataclass
class Served:
    """Holds the federation once the web process has made it (None while it starts)."""

    federation: Federation | None = None


SERVED = web.AppKey("federation", Served)


@contextlib.asynccontextmanager
async def serving(
    peers: Peers,
    client: redis.asyncio.Redis,
    namespace: str,
    status: Callable[[], Awaitable[dict[str, Any]]],
    acting: Acting | None = None,
) -> AsyncIterator[Federation]:
    """The federation of a web process, its nonces in the broker's Redis (``client``, closed
    at the end); ``acting`` runs the peers' requests, and first takes up those under way when
    the process last stopped."""
    try:
        if acting is not None:
            try:
                resumed = await acting.resume()
            except StoreError as exc:  # each is taken up again when its peer asks about it
                logger.warning("the peer requests under way were not taken up: %s", exc)
            else:
                if resumed:
                    logger.info("took up %d peer requests under way at the last stop", resumed)
        yield Federation(peers, RedisNonces(client, namespace), status, RefusalLog(peers), acting)
    finally:
        try:
            if acting is not None:
                await acting.close()
        finally:
            await client.aclose()


def mount(app: web.Application) -> Served:
    """Add the federation routes to the web process's app."""
    served = app[SERVED] = Served()
    # Every path and method under /federation/ goes through the checks (the signature covers
    # both), so a forgery aimed at a path or a method is refused as any other forgery is, and
    # a stranger learns nothing from a 404 or a 405.
    app.router.add_route("*", PREFIX + "{action:.*}", answer)
    return served


async def answer(request: web.Request) -> web.Response:
    federation = request.app[SERVED].federation
    if federation is None:
        return _error(503, "starting", "aegis is starting; try again in a few seconds")
    at = time.time()
    try:
        body = await read_at_most(request, federation.max_body)
        incoming = Request(
            request.method,
            request.raw_path,
            request.headers.items(),
            body,
            request.content_length or len(body or b""),
        )
        links = await federation.links(at)
        checked = await verify(
            incoming, links.get, federation.nonces, at, max_body=federation.max_body
        )
    except PeerRefused as refused:
        await federation.refusals.record(refused, at)
        return _error(refused.status, refused.reason, str(refused))
    except (FederationError, StoreError) as exc:
        logger.warning("a peer's request could not be checked: %s", exc)
        return _error(503, "unavailable", "this aegis cannot check requests now; try again")
    # The request is the peer's own: whatever is answered now is signed for it.
    try:
        answered = await _act(federation, request, checked, links.get(checked.peer), _ask(body))
    except PeerRefused as refused:
        await federation.refusals.record(refused, at)
        answered = _error(refused.status, refused.reason, str(refused))
    except (FederationError, StoreError) as exc:
        logger.warning("a peer's request could not be answered: %s", exc)
        answered = _error(503, "unavailable", "this aegis cannot answer now; try again")
    return _signed(answered, checked)


def _signed(answered: web.Response, checked: Checked) -> web.Response:
    message = answer_canonical(answered.status, checked.nonce, answered.body)
    answered.headers[SIGNATURE] = signature(checked.key, message)
    return answered


async def _act(
    federation: Federation, request: web.Request, checked: Checked, link: Link | None, ask: dict
) -> web.Response:
    """What a request that passed every check asks for: the claim of an invitation, which is
    all an unclaimed link may ask, or ``status``."""
    asked = (request.method, request.path)
    if asked == ("POST", CLAIM_PATH):
        return await _claim(federation, checked.peer, ask)
    if link is None or not link.claimed:
        raise PeerRefused(
            403, "unclaimed", "this link's invitation is not claimed yet", peer=checked.peer
        )
    await federation.contacted(checked.peer, checked.skew, time.time())
    if asked == ("POST", REQUESTS_PATH) and federation.acting is not None:
        return await _request(federation.acting, checked.peer, ask)
    if asked != ("POST", STATUS_PATH):
        raise PeerRefused(
            404, "no_such_action", f"this aegis answers POST {STATUS_PATH} and {REQUESTS_PATH}"
        )
    status = await federation.status()
    return web.json_response(status | {"time": time.time()})


async def _request(acting: Acting, peer: str, ask: dict) -> web.Response:
    """A request to act (federation/requests.py): made the first time its id is seen, then
    run under this aegis's gate; asked again, the same request as it stands, after waiting
    up to ``wait`` seconds for its end. So a lost answer costs a retry, never a second run."""
    request_id, action, args, agent, wait = check_ask(ask)
    request, made = await acting.requests.receive(peer, request_id, action, args, agent)
    acting.start(request, resumed=not made)  # a known request with no driver: taken up again
    request = await acting.settled(request, wait)
    return web.json_response(request.answer() | {"time": time.time()})


async def _claim(federation: Federation, peer: str, ask: dict) -> web.Response:
    share = ask.get("share")
    if not isinstance(share, str) or not SHARE.fullmatch(share):
        raise PeerRefused(400, "bad_body", "a claim carries its share: 64 lowercase hex digits")
    if not await federation.peers.claim(peer, bytes.fromhex(share)):
        raise PeerRefused(409, "claimed", "this invitation was claimed already", peer=peer)
    federation.forget_links()
    return web.json_response({"claimed": True, "time": time.time()})


def _ask(body: bytes) -> dict[str, Any]:
    """The request's JSON object, read only once every check has passed."""
    try:
        ask = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise PeerRefused(400, "bad_body", "the body is not JSON") from None
    if not isinstance(ask, dict):
        raise PeerRefused(400, "bad_body", "the body is not a JSON object")
    return ask


def _error(status: int, reason: str, message: str) -> web.Response:
    return web.json_response({"refused": reason, "error": message}, status=status)
