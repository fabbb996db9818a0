"""What one instance asks another to do, as rows at both ends (``peer_requests``).

The asking side (A) chooses the request's id and keeps the request as an "out" row until the
peer has answered for good: a peer that is down leaves it queued, and the rows of one peer go
out in their order (jobs/peer_requests.py sends them). The asked side (B) keeps it as an "in"
row under the same id, so a request sent again, after a lost answer, finds its row and is
never run twice: B answers with what the row says (federation/acting.py runs it under B's gate).

Only the actions in ``ACTIONS`` may be asked for: an allow list, each naming the tool it runs on
B, so what a peer may ask is exactly what B's gate can judge.
"""

from __future__ import annotations

import enum
import json
import re
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from bot.errors import PeerRefused
from bot.store.database import Store, serialize_on
from bot.store.tables import peer_requests
from bot.timeutil import now

REQUEST_ID = re.compile(r"[0-9a-f]{32}")
AGENT = re.compile(r"[a-z0-9][a-z0-9_-]{0,99}")
LONGEST_ARGS = 4096  # characters of JSON a request's arguments may take
MOST_UNFINISHED = 20  # a peer's requests under way here at once; past that, 429
OWNER = "owner"  # who asked, when it was the owner in chat rather than an agent


class Way(enum.StrEnum):
    OUT = "out"  # we asked the peer
    IN = "in"  # the peer asked us


class RequestState(enum.StrEnum):
    QUEUED = "queued"  # out: not taken by the peer yet (it may be down)
    WAITING = "waiting"  # taken: waiting for the owner there, or running
    DONE = "done"  # it ran; ``result`` says how
    REFUSED = "refused"  # nothing was done: denied, expired, not allowed
    FAILED = "failed"  # it ran and failed, or how it ended cannot be known

    @property
    def final(self) -> bool:
        return self in FINAL


FINAL = frozenset({RequestState.DONE, RequestState.REFUSED, RequestState.FAILED})


@dataclass(frozen=True)
class Action:
    """What a peer may ask for: ``tool`` is what it runs on the asked side, ``doing`` how the
    asking side's chat names it ("deploy site")."""

    name: str
    tool: str
    subject: str  # the one argument the request names

    def doing(self, args: dict[str, Any]) -> str:
        return f"{self.name} {args.get(self.subject, '?')}"


ACTIONS = {
    "deploy": Action("deploy", "deploy.run", "recipe"),  # {"recipe": "site"}
    "run": Action("run", "runs.start", "agent"),  # {"agent": "scout", "request": "…"}; followed
    "message": Action("message", "messages.send", "to"),  # {"to": "scout", "text": "…"}
}


@dataclass(frozen=True)
class PeerRequest:
    id: int
    way: Way
    peer: str
    request_id: str
    action: str
    args: dict[str, Any]
    agent: str
    state: RequestState
    reason: str | None
    result: Any
    card: int | None
    chat_id: int | None
    outbox_id: int | None
    tries: int
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None

    @property
    def doing(self) -> str:
        return ACTIONS[self.action].doing(self.args)

    def answer(self) -> dict[str, Any]:
        """What the asked side says of the request, each time it is asked."""
        return {
            "id": self.request_id,
            "state": str(self.state),
            "reason": self.reason,
            "result": self.result,
            "card": self.card,
        }


def new_request_id() -> str:
    return secrets.token_hex(16)


def check_ask(ask: dict[str, Any]) -> tuple[str, str, dict[str, Any], str, float]:
    """A peer's request body, as (id, action, args, agent, wait); raises ``PeerRefused`` (400)
    naming the first field that is wrong. The arguments' own shape is the gate's to judge."""
    request_id, action, args = ask.get("id"), ask.get("action"), ask.get("args")
    agent, wait = ask.get("agent", OWNER), ask.get("wait", 0)
    if not isinstance(request_id, str) or not REQUEST_ID.fullmatch(request_id):
        raise PeerRefused(400, "bad_body", "id: 32 lowercase hex digits, chosen by the asker")
    if action not in ACTIONS:
        raise PeerRefused(400, "no_such_action", f"action: one of {', '.join(sorted(ACTIONS))}")
    if not isinstance(args, dict) or len(_json(args)) > LONGEST_ARGS:
        raise PeerRefused(400, "bad_body", f"args: a JSON object of at most {LONGEST_ARGS} bytes")
    if not isinstance(agent, str) or not AGENT.fullmatch(agent):
        raise PeerRefused(400, "bad_body", "agent: the slug of the agent that asks, or 'owner'")
    if isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 <= wait <= 60:
        raise PeerRefused(400, "bad_body", "wait: seconds to wait for the end, 0 to 60")
    return request_id, action, args, agent, float(wait)


class PeerRequests:
    def __init__(self, store: Store) -> None:
        self.store = store

    # The asked side

    async def receive(
        self, peer: str, request_id: str, action: str, args: dict[str, Any], agent: str
    ) -> tuple[PeerRequest, bool]:
        """The peer's request as our "in" row, made now (True) or found (False). The same id
        with another action, arguments or agent is refused (409): an id names one request."""
        found = await self.find(Way.IN, peer, request_id)  # a poll: this read is all it costs
        made = found is None
        if made:
            found = await self._make_in(peer, request_id, action, args, agent)
        if (found.action, _json(found.args), found.agent) != (action, _json(args), agent):
            raise PeerRefused(
                409,
                "id_reused",
                f"request {request_id} was asked before with other arguments; an id names one "
                "request",
                peer=peer,
            )
        return found, made

    async def _make_in(
        self, peer: str, request_id: str, action: str, args: dict[str, Any], agent: str
    ) -> PeerRequest:
        """A new "in" row, within the peer's cap; the row of the same id sent at once by
        another request, if that one made it first."""
        moment = now()
        row = {
            "direction": Way.IN,
            "peer": peer,
            "request_id": request_id,
            "action": action,
            "args": args,
            "agent": agent,
            "state": RequestState.WAITING,
            "reason": None,
            "result": None,
            "card": None,
            "chat_id": None,
            "outbox_id": None,
            "tries": 1,
            "created_at": moment,
            "updated_at": moment,
            "finished_at": None,
        }
        try:
            async with self.store.write() as conn:
                await serialize_on(conn, f"peer-requests:{peer}")
                if await _unfinished_in(conn, peer) >= MOST_UNFINISHED:
                    raise PeerRefused(
                        429,
                        "too_many",
                        f"{MOST_UNFINISHED} requests of yours are under way here already; "
                        "ask again once some have ended",
                        peer=peer,
                    )
                inserted = insert(peer_requests).values(**row).returning(peer_requests.c.id)
                row["id"] = (await conn.execute(inserted)).scalar_one()
        except IntegrityError:  # the same id, sent twice at once: the other made it
            found = await self.find(Way.IN, peer, request_id)
            if found is None:  # removed since: never by aegis itself
                refused = "this id cannot be used; choose another"
                raise PeerRefused(409, "id_reused", refused) from None
            return found
        return _request(row)

    async def unfinished_in(self) -> list[PeerRequest]:
        """The peers' requests still under way here, oldest first (resumed at start)."""
        return await self._select(
            and_(peer_requests.c.direction == Way.IN, peer_requests.c.state == RequestState.WAITING)
        )

    # The asking side

    async def queue(
        self,
        conn: AsyncConnection,
        peer: str,
        action: str,
        args: dict[str, Any],
        *,
        agent: str = OWNER,
        chat_id: int | None = None,
        outbox_id: int | None = None,
    ) -> int:
        """Queue a request to ``peer`` inside the caller's transaction; returns its row id."""
        moment = now()
        result = await conn.execute(
            insert(peer_requests)
            .values(
                direction=Way.OUT,
                peer=peer,
                request_id=new_request_id(),
                action=action,
                args=args,
                agent=agent,
                state=RequestState.QUEUED,
                chat_id=chat_id,
                outbox_id=outbox_id,
                tries=0,
                created_at=moment,
                updated_at=moment,
            )
            .returning(peer_requests.c.id)
        )
        return result.scalar_one()

    async def unfinished_out(self, peer: str | None = None) -> list[PeerRequest]:
        """Our requests the peer has not answered for good, in the order they were made."""
        where = and_(
            peer_requests.c.direction == Way.OUT,
            peer_requests.c.state.in_((RequestState.QUEUED, RequestState.WAITING)),
        )
        if peer is not None:
            where = and_(where, peer_requests.c.peer == peer)
        return await self._select(where)

    async def changed_out(self, *, since: datetime) -> list[PeerRequest]:
        """Our requests that changed at ``since`` or later (the sweep makes sure each of their
        owners was told)."""
        return await self._select(
            and_(
                peer_requests.c.direction == Way.OUT,
                peer_requests.c.updated_at >= since,
            )
        )

    async def ran(self, row_id: int, result: Any) -> None:
        """Keep what the tool returned while the request goes on (a run it started, followed
        to its end): a restart follows it again rather than wonder whether it ran."""
        async with self.store.write() as conn:
            await conn.execute(
                update(peer_requests)
                .where(peer_requests.c.id == row_id, peer_requests.c.state == RequestState.WAITING)
                .values(result=result, updated_at=now())
            )

    async def tried(self, row_id: int) -> None:
        async with self.store.write() as conn:
            await conn.execute(
                update(peer_requests)
                .where(peer_requests.c.id == row_id)
                .values(tries=peer_requests.c.tries + 1, updated_at=now())
            )

    # Both sides

    async def get(self, row_id: int) -> PeerRequest | None:
        found = await self._select(peer_requests.c.id == row_id)
        return found[0] if found else None

    async def find(self, way: Way, peer: str, request_id: str) -> PeerRequest | None:
        found = await self._select(
            and_(
                peer_requests.c.direction == way,
                peer_requests.c.peer == peer,
                peer_requests.c.request_id == request_id,
            )
        )
        return found[0] if found else None

    async def waiting(self, row_id: int, card: int | None) -> bool:
        """Taken by the peer (out) or put on a card (in): waiting, on ``card`` if known. True
        when this changed the row (the first word that it waits)."""
        async with self.store.write() as conn:
            result = await conn.execute(
                update(peer_requests)
                .where(
                    peer_requests.c.id == row_id,
                    peer_requests.c.state.in_((RequestState.QUEUED, RequestState.WAITING)),
                    (peer_requests.c.state != RequestState.WAITING)
                    | peer_requests.c.card.is_distinct_from(card),
                )
                .values(state=RequestState.WAITING, card=card, updated_at=now())
            )
        return result.rowcount == 1

    async def settle(
        self,
        row_id: int,
        state: RequestState,
        reason: str,
        result: Any = None,
        card: int | None = None,
    ) -> PeerRequest | None:
        """End the request, once: a compare-and-set from an unfinished state, so of two
        processes that learn the end at once only one tells the owner. None: it had ended."""
        if not state.final:
            raise ValueError(f"{state} is not an end")
        moment = now()
        values = {
            "state": state,
            "reason": reason[:2000],
            "result": result,
            "updated_at": moment,
            "finished_at": moment,
        }
        if card is not None:
            values["card"] = card
        async with self.store.write() as conn:
            changed = await conn.execute(
                update(peer_requests)
                .where(
                    peer_requests.c.id == row_id,
                    peer_requests.c.state.in_((RequestState.QUEUED, RequestState.WAITING)),
                )
                .values(**values)
            )
        return await self.get(row_id) if changed.rowcount == 1 else None

    async def _select(self, where) -> list[PeerRequest]:
        async with self.store.read() as conn:
            rows = await conn.execute(
                select(peer_requests).where(where).order_by(peer_requests.c.id)
            )
            return [_request(row) for row in rows]


async def _unfinished_in(conn: AsyncConnection, peer: str) -> int:
    query = select(func.count()).where(
        peer_requests.c.direction == Way.IN,
        peer_requests.c.peer == peer,
        peer_requests.c.state == RequestState.WAITING,
    )
    return (await conn.execute(query)).scalar_one()


def _request(row) -> PeerRequest:
    """A row (or the values of one) as a request."""
    values = dict(getattr(row, "_mapping", row))
    way, state = Way(values.pop("direction")), RequestState(values.pop("state"))
    return PeerRequest(way=way, state=state, **values)


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
