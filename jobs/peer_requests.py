"""Our requests to other aegis instances (federation/requests.py), sent in order and followed
to their end; the owner's message about each is edited as it goes.

``ask_peer(peer)`` is one turn of one peer's outbox, by one worker at a time (a lease per
peer). It sends each request still queued, oldest first, and stops at the first the peer cannot
be reached for, so none overtakes another. Then it asks again about those the peer has taken,
waiting (a long poll) up to ``WAIT`` seconds on the oldest, and enqueues the next turn at once
while any is under way. The peer runs each under its own gate and answers a request sent again
with how it stands, so a turn repeated after a crash runs nothing twice.

A peer that cannot be reached keeps its requests queued: the sweep (``sweep_peer_requests``,
every 30 s) starts a turn for every peer owed one, for up to ``GIVE_UP_AFTER``, after which a
request ends failed and says whether the peer might have taken it.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import aiohttp
import dramatiq

from bot.chat.views.peers import request_text
from bot.config.secrets import SecretFiles
from bot.errors import PeerLinkRefused, PeerRefused, PeerUnreachable
from bot.timeutil import now
from bot.upkeep.leases import Leases
from federation.client import PeerClient
from federation.links import Peers
from federation.requests import PeerRequest, PeerRequests, RequestState
from jobs.worker.broker import require_broker
from jobs.worker.resources import resources

require_broker()

WAIT = 20.0  # seconds the peer may hold one poll: under the worker's patience for one job
GIVE_UP_AFTER = timedelta(days=1)
TRIES = 2  # of one send or poll, while the peer cannot be reached
# A turn renews its lease before each send or poll, and one takes at most TRIES × (the client's
# 10 s + WAIT) and the pause between tries: the lease outlasts that, so turns never overlap.
LEASE_TTL = timedelta(seconds=TRIES * (10 + WAIT) + 30)
RETELL_WITHIN = timedelta(minutes=10)  # changed this recently: the sweep makes sure it was told
# What a peer's refusal of a request means: these, signed by the peer, say the request itself
# was refused, so nothing ran there; any other (our clock or secret refused, say), or one not
# signed, is the link's trouble, not the request's: it waits as for a peer that is down.
REFUSED_REQUEST = frozenset({"bad_body", "no_such_action", "id_reused", "too_many"})


@dramatiq.actor(queue_name="default", max_retries=0)
async def ask_peer(peer: str) -> dict:
    platform = (await resources()).platform
    leases, name, holder = Leases(platform.store), f"peer:{peer}", f"ask_peer:{uuid.uuid4().hex}"

    async def keep() -> bool:
        return (await leases.hold(name, holder, LEASE_TTL)).holder == holder

    if not await keep():
        return {"turn": "taken by another worker"}
    try:
        reachable = await _turn(platform, peer, keep)
    finally:
        await leases.release(name, holder)
    # Read once the lease is let go: a request queued while this turn ended is seen here, or
    # its own job finds the lease free.
    under_way = len(await PeerRequests(platform.store).unfinished_out(peer))
    if reachable and under_way:
        await asyncio.to_thread(ask_peer.send, peer)
    return {"reachable": reachable, "under_way": under_way}


@dramatiq.actor(queue_name="default", max_retries=0)
async def sweep_peer_requests(schedule: str = "") -> dict:
    """Start a turn for every peer owed one (a request queued while it was down, a turn lost
    with its worker), and make sure the owner was told of every request that changed lately
    (a worker that died between the change and the telling)."""
    platform = (await resources()).platform
    requests = PeerRequests(platform.store)
    owed = sorted({request.peer for request in await requests.unfinished_out()})
    for peer in owed:
        await asyncio.to_thread(ask_peer.send, peer)
    for request in await requests.changed_out(since=now() - RETELL_WITHIN):
        await tell(platform, request)
    return {"peers_owed_a_turn": len(owed)}


async def _turn(platform, peer: str, keep) -> bool:
    """One turn of the peer's outbox; whether the peer could be reached."""
    requests = PeerRequests(platform.store)
    peers = Peers(platform.store, SecretFiles(platform.settings.data_dir))
    unreachable: PeerUnreachable | None = None
    async with aiohttp.ClientSession() as session:
        client = PeerClient(peers, session, tries=TRIES)
        unfinished = await requests.unfinished_out(peer)
        under_way: list[PeerRequest] = []
        for index, request in enumerate(unfinished):
            if request.state is RequestState.WAITING and under_way:
                under_way.append(request)  # asked about once the oldest has had its wait
                continue
            if not await keep():
                break  # the lease ran out: another turn goes on from here
            try:
                request = await _ask(platform, requests, client, request, 0.0)
            except PeerUnreachable as exc:
                unreachable = exc
                for left in unfinished[index:]:  # none overtakes the one that could not go
                    await _not_reached(platform, requests, left, exc)
                break
            if request is not None:
                under_way.append(request)
        if unreachable is None and under_way:
            oldest, *rest = under_way
            try:
                await _ask(platform, requests, client, oldest, WAIT)
                for request in rest:
                    if not await keep():
                        break
                    await _ask(platform, requests, client, request, 0.0)
            except PeerUnreachable as exc:
                unreachable = exc
    return unreachable is None


async def _not_reached(platform, requests: PeerRequests, request: PeerRequest, exc) -> None:
    """The peer could not be reached about ``request``: it waits for the next turn, and its
    owner is told once; after ``GIVE_UP_AFTER`` it ends, saying what may have happened."""
    await requests.tried(request.id)
    if now() - request.created_at >= GIVE_UP_AFTER:
        why = (
            f"{request.peer} took it, then could not be reached for a day; what it did there "
            "is not known here"
            if request.state is RequestState.WAITING
            else f"{request.peer} could not be reached for a day, and no more tries will be "
            "made; if it got the request before an answer was lost, it may still run it there"
        )
        await _end(platform, requests, request, RequestState.FAILED, f"{why} ({exc})")
    elif request.tries == 0 and request.state is RequestState.QUEUED:
        await tell(platform, await requests.get(request.id) or request)


async def _ask(
    platform, requests: PeerRequests, client: PeerClient, request: PeerRequest, wait: float
) -> PeerRequest | None:
    """Send or ask about one request; it as it now stands, or None once it has ended. Raises
    ``PeerUnreachable`` when the peer could not be reached."""
    try:
        answer = await client.request(request, wait=wait)
    except PeerRefused as refused:
        if refused.reason not in REFUSED_REQUEST or not refused.signed:
            raise PeerUnreachable(str(refused)) from refused
        await _end(platform, requests, request, RequestState.REFUSED, str(refused))
        return None
    except PeerLinkRefused as exc:  # the link was removed here, or its secret is gone
        if request.state is RequestState.WAITING:
            why = f"{request.peer} took it, and then {exc}; what it did there is not known here"
            await _end(platform, requests, request, RequestState.FAILED, why)
        else:
            await _end(platform, requests, request, RequestState.REFUSED, f"never sent: {exc}")
        return None
    state = RequestState(answer["state"])
    card = answer.get("card") if isinstance(answer.get("card"), int) else None
    if state.final:
        reason = str(answer.get("reason") or "")
        await _end(platform, requests, request, state, reason, answer.get("result"), card)
        return None
    if await requests.waiting(request.id, card):
        request = await requests.get(request.id) or request
        await tell(platform, request)
    return request


async def _end(platform, requests, request, state, reason, result=None, card=None) -> None:
    ended = await requests.settle(request.id, state, reason, result, card)
    if ended is not None:  # this worker ended it: it tells
        await tell(platform, ended)


async def tell(platform, request: PeerRequest) -> None:
    """Show the owner how the request stands: the message about it edited, once per state
    (a key per state, so a repeated turn or the sweep edits nothing twice)."""
    if request.chat_id is None:
        return
    key = f"peer-request:{request.id}:{request.state}:{request.card}:{request.tries > 0}"
    text = request_text(request)
    if request.outbox_id is not None:
        await platform.outbox.send_edit(request.chat_id, text, edit_of=request.outbox_id, key=key)
    else:
        await platform.outbox.send(request.chat_id, text, key=key)
