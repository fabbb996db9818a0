"""Other aegis instances, as agents reach them: ``peers.list`` (the links this aegis calls),
``peers.deploy`` and ``peers.run`` (ask one to run a deploy recipe, or one of its agents) and
``peers.request`` (how such a request stands).

``peers.deploy`` and ``peers.run`` wait for the owner's tap here; each then queues its request
in the peer's outbox and returns at once: jobs/peer_requests.py sends it, and the peer runs it
only once its own owner has approved it with a code. The agent reads how it went with
``peers.request``, whose ``wait_seconds`` holds the call until the request has ended, so an
agent long-polls instead of sleeping. An agent reads only the requests it made.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from bot.config.secrets import SecretFiles
from bot.errors import BrokerError, ToolRefused
from federation.links import Direction, Peers
from federation.requests import PeerRequest, PeerRequests

if TYPE_CHECKING:
    from bot.actions.call import Caller, ToolFunction, Vetter
    from bot.core import Platform

POLL_SECONDS = 0.25


def _peers(platform: Platform) -> Peers:
    return Peers(platform.store, SecretFiles(platform.settings.data_dir))


async def ask(platform: Platform, peer: str, action: str, asked: dict, caller: Caller) -> dict:
    """Queue a request of ``caller`` to ``peer`` and ask for its sending; what the agent is
    told (it reads the rest with peers.request)."""
    async with platform.store.write() as conn:
        row_id = await PeerRequests(platform.store).queue(
            conn, peer, action, asked, agent=caller.agent
        )
    try:
        await platform.interactions.enqueue("ask_peer", peer)
    except BrokerError:
        pass  # the peer sweep sends it within 30 s
    return {
        "request": row_id,
        "state": "queued",
        "next": f"call peers.request with request {row_id} (and wait_seconds) to learn how it "
        f"went; {peer}'s owner must approve it there with a code",
    }


async def linked(platform: Platform, peer: str) -> bool:
    return await _peers(platform).get(peer, Direction.OUT) is not None


def vetters(platform: Platform) -> dict[str, Vetter]:
    """A deploy to a peer this aegis has no link to is refused before anyone is asked."""

    async def to_a_peer(args: dict, caller: Caller) -> str | None:
        if not await linked(platform, args["peer"]):
            return f"peer: this aegis calls no peer called {args['peer']!r} (see peers.list)"
        return None

    return {"peers.deploy": to_a_peer, "peers.run": to_a_peer}


def toolbox(platform: Platform) -> dict[str, ToolFunction]:
    requests = PeerRequests(platform.store)

    async def list_peers(args: dict, caller: Caller) -> dict:
        links = [p for p in await _peers(platform).all() if p.direction is Direction.OUT]
        return {
            "peers": [
                {
                    "name": link.name,
                    "last_contact": link.last_contact_at.isoformat(timespec="seconds")
                    if link.last_contact_at
                    else None,
                    "clock_skew_seconds": link.skew_seconds,
                }
                for link in links
            ]
        }

    async def deploy(args: dict, caller: Caller) -> dict:
        return await ask(platform, args["peer"], "deploy", {"recipe": args["recipe"]}, caller)

    async def run(args: dict, caller: Caller) -> dict:
        asked = {"agent": args["agent"], "request": args["request"]}
        return await ask(platform, args["peer"], "run", asked, caller)

    async def read_request(args: dict, caller: Caller) -> dict:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + args.get("wait_seconds", 0)
        while True:
            request = await requests.get(args["request"])
            if request is None or request.agent != caller.agent or request.way != "out":
                raise ToolRefused(f"you made no request {args['request']}")
            left = deadline - loop.time()
            if request.state.final or left <= 0:
                return _described(request)
            await asyncio.sleep(min(POLL_SECONDS, left))

    return {
        "peers.list": list_peers,
        "peers.deploy": deploy,
        "peers.run": run,
        "peers.request": read_request,
    }


def _described(request: PeerRequest) -> dict[str, Any]:
    return {
        "request": request.id,
        "peer": request.peer,
        "asked": request.doing,
        "state": str(request.state),
        "reason": request.reason,
        "result": request.result,
        "card_there": request.card,
    }
