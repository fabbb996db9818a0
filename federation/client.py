"""Asking a peer: a signed request over aiohttp, tried again (tenacity) when the peer could not
be reached or answered 5xx, never when it refused.

Each try is signed anew, with a fresh nonce and timestamp: the peer refuses a nonce it has seen
(409), and a try that did arrive before its answer was lost must not be taken for a replay.
Every try has its own hard ceiling (``timeout``), so a stuck peer cannot hold the caller. An
answer is believed only when the peer signed it for this very request (federation/signing.py);
one that is not is taken as no answer.
"""

from __future__ import annotations

import hmac
import json
import secrets
import time
from typing import TYPE_CHECKING, Any

import aiohttp
from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)
from yarl import URL

from bot.config.secrets import SecretFiles
from bot.errors import FederationError, PeerLinkRefused, PeerRefused, PeerUnreachable, ToolRefused
from federation.invitations import Invitation, link_secret
from federation.links import Direction, Peer, Peers
from federation.requests import PeerRequest, RequestState
from federation.server import CLAIM_PATH, REQUESTS_PATH, STATUS_PATH
from federation.signing import NONCE, SIGNATURE, Signer, answer_canonical, signature

if TYPE_CHECKING:
    from bot.actions.call import Caller
    from bot.core import Platform

LONGEST_ANSWER = 1_048_576
STATES = {str(state) for state in RequestState}


class PeerClient:
    def __init__(
        self, peers: Peers, session: aiohttp.ClientSession, *, tries: int = 3, timeout=10.0
    ) -> None:
        self.peers = peers
        self.session = session
        self.tries = tries
        self.timeout = aiohttp.ClientTimeout(total=timeout)

    async def status(self, name: str) -> dict[str, Any]:
        """The peer's health, version and queue depths."""
        return await self.ask(name, "POST", STATUS_PATH, {})

    async def request(self, request: PeerRequest, *, wait: float = 0.0) -> dict[str, Any]:
        """Send our request (federation/requests.py) to its peer, or send it again: the peer
        makes it the first time it sees its id and otherwise answers how it stands, once it
        has ended or ``wait`` seconds have passed. The answer has its ``state``."""
        payload = {
            "id": request.request_id,
            "action": request.action,
            "args": request.args,
            "agent": request.agent,
            "wait": wait,
        }
        answer = await self.ask(request.peer, "POST", REQUESTS_PATH, payload, waits=wait)
        if answer.get("id") != request.request_id or answer.get("state") not in STATES:
            raise PeerUnreachable(f"{request.peer} answered the request in a form we do not know")
        return answer

    async def link(self, name: str, invitation: Invitation) -> Peer:
        """Make the link ``invitation`` offers, stored as ``name``: claimed at the inviting
        side first (one try: a claim is good once), then stored with the secret the claim
        made. A rotation's invitation carries its secret and is stored as it is."""
        await self.peers.check_new(name, invitation)
        if invitation.rotation:
            return await self.peers.add(name, invitation)
        offered = bytes.fromhex(invitation.secret)
        signer = Signer.for_link(offered, invitation.caller, invitation.callee)
        share = secrets.token_bytes(32)
        body = json.dumps({"share": share.hex()}).encode()
        try:
            await self._send(name, invitation.url, signer, "POST", CLAIM_PATH, body)
        except PeerRefused as refused:
            if refused.reason != "claimed":
                raise
            raise PeerLinkRefused(
                f"{invitation.callee} says this invitation was claimed already. If the answer "
                "to an earlier `aegis peer add` of yours was lost, ask for a new invitation; if "
                f"not, someone else used a copy of it: `aegis peer remove {invitation.caller}` "
                f"on {invitation.callee} ends their link. Nothing was stored"
            ) from refused
        secret = link_secret(offered, share).hex()
        return await self.peers.add(name, invitation, secret=secret)

    async def ask(
        self, name: str, method: str, path: str, payload: dict, *, waits: float = 0.0
    ) -> dict[str, Any]:
        """One request to the peer ``name``, tried again while it cannot be reached; ``waits``:
        the seconds the peer may hold it before it answers, on top of the usual timeout."""
        peer = await self.peers.get(name, Direction.OUT)
        if peer is None:
            raise PeerLinkRefused(f"there is no link called {name} on which we call the peer")
        signer = Signer.for_link(self.peers.secret(name, Direction.OUT), peer.us, peer.them)
        body = json.dumps(payload, separators=(",", ":")).encode()
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.tries),
            wait=wait_exponential(multiplier=0.2, max=2),
            retry=retry_if_exception_type(PeerUnreachable),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                sent = time.time()
                answer = await self._send(name, peer.url, signer, method, path, body, waits)
        await self.peers.contacted(name, Direction.OUT, _skew(answer, sent, time.time()))
        return answer

    async def _send(
        self,
        name: str,
        base: str,
        signer: Signer,
        method: str,
        path: str,
        body: bytes,
        waits: float = 0.0,
    ) -> dict[str, Any]:
        url = URL(base.rstrip("/") + path, encoded=True)
        headers = signer.headers(method, url.raw_path_qs, body, ts=int(time.time()))
        headers["Content-Type"] = "application/json"
        timeout = aiohttp.ClientTimeout(total=self.timeout.total + waits)
        try:
            async with self.session.request(
                method, url, data=body, headers=headers, timeout=timeout
            ) as response:
                raw = await response.content.read(LONGEST_ANSWER)
                status = response.status
                answer_signature = response.headers.get(SIGNATURE)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise PeerUnreachable(
                f"{name} at {base} could not be reached ({type(exc).__name__})"
            ) from exc
        answer = _json(raw)
        expected = signature(signer.key, answer_canonical(status, headers[NONCE], raw))
        signed = hmac.compare_digest(expected, answer_signature or "")
        if status >= 500:
            raise PeerUnreachable(f"{name} answered {status}: {_said(answer)}")
        if status >= 400:
            reason = str(answer.get("refused", "refused"))[:40]
            message = f"{name} refused the request ({status}): {_said(answer)}"
            raise PeerRefused(status, reason, message, peer=name, signed=signed)
        if not signed:  # changed on the way, or not from the peer: never believed
            raise PeerUnreachable(f"{name}'s answer is not signed for our request; it was not used")
        return answer


def _json(raw: bytes) -> dict[str, Any]:
    try:
        answer = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return {}
    return answer if isinstance(answer, dict) else {}


def _said(answer: dict[str, Any]) -> str:
    error = answer.get("error")
    return str(error)[:300] if error else "no reason given"


def _skew(answer: dict[str, Any], sent: float, received: float) -> float | None:
    """Their clock minus ours, against the middle of the round trip."""
    their = answer.get("time")
    if not isinstance(their, int | float):
        return None
    return round(float(their) - (sent + received) / 2, 3)


def status_line(name: str, answer: dict[str, Any]) -> str:
    """A peer's status in one line, what it said made safe to print."""
    queues = answer.get("queues") or {}
    if isinstance(queues, dict):
        depths = ", ".join(f"{queue} {depth}" for queue, depth in queues.items()) or "unknown"
    else:
        depths = "unknown"
    said = f"{answer.get('instance')}, aegis {answer.get('version')}"
    health = "ok" if answer.get("ok") is True else "NOT ok"
    return f"{name} ({_printable(said)}): {health}; queues: {_printable(depths)}"


def _printable(text: str) -> str:
    """What a peer said, without anything a terminal would act on."""
    return "".join(c if c.isprintable() else "?" for c in text)[:300]


def plug_into(platform: Platform) -> None:
    """Give this process's tools the one that asks a peer over the network, ``peers.status``
    (the core's tools never reach the network themselves)."""
    peers = Peers(platform.store, SecretFiles(platform.settings.data_dir))

    async def status(args: dict, caller: Caller) -> dict:
        try:
            async with aiohttp.ClientSession(trust_env=False) as session:
                answer = await PeerClient(peers, session, tries=1).status(args["peer"])
        except FederationError as exc:
            raise ToolRefused(str(exc)) from None
        return {
            "peer": args["peer"],
            "ok": answer.get("ok") is True,
            "version": answer.get("version"),
            "queues": answer.get("queues"),
            "said": status_line(args["peer"], answer),
        }

    platform.actions.toolbox["peers.status"] = status
