"""A peer's request run under this aegis's gate, from its arrival to its end.

The request acts as the agent named after the peer, which aegis.yaml must declare with
``peer: true``: the policy then gates every call of it with a code (policies/decision.py,
``asked_by_peer``), whatever the tool's effect, and the agent's tools are all a peer may reach.
A peer with no such agent is refused, as is one whose namesake is a local agent: a peer never
acts as one of ours.

Each request is held on its card the way an MCP call is (bot/actions/held_calls.py), in a task
of the web process; past that hold it waits on the card itself, then makes the identical call
again once the owner has answered or the card has expired. The peer's polls only read the row.
A request still under way when the process stopped is taken up again at the next start: the
identical call finds its card, or its grant. One whose grant had been used had started
running, and how it ended is not known: it ends as failed, saying so, and is not run again.

A ``run`` request ends when the run it started ends, not when it starts: the run's id is kept
on the row as soon as it is known, and the run is followed (again, after a restart) until it is
over, so the asking side gets the run's result.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from bot.actions.call import CallStatus, ToolCall
from bot.actions.held_calls import HeldCalls
from bot.agents.agent_run import AgentRun, RunState
from bot.errors import StoreError
from federation.requests import ACTIONS, PeerRequest, PeerRequests, RequestState

logger = logging.getLogger(__name__)
RETRY_SECONDS = 5.0  # after the database failed us mid-request
SHORTEST_ROUND = 1.0  # seconds before a call held on no card is made again
CARD_LOOK = 2.0  # seconds between two looks at a card a request waits on (a tap wakes it)
FOLLOW_EVERY = 1.0  # seconds between two looks at a run a peer's request started
ENDS = {
    CallStatus.RAN: RequestState.DONE,
    CallStatus.DENIED: RequestState.REFUSED,
    CallStatus.FAILED: RequestState.FAILED,
}


class Acting:
    def __init__(
        self,
        requests: PeerRequests,
        held: HeldCalls,
        owner_chat: int | None,
        runs: Callable[[int], Awaitable[AgentRun | None]] | None = None,
        *,
        retry_seconds: float = RETRY_SECONDS,
    ) -> None:
        self.requests = requests
        self.held = held
        self.owner_chat = owner_chat
        self.runs = runs  # a run by its id, to follow the runs peers start (None: not followed)
        self.retry_seconds = retry_seconds
        self._running: dict[int, asyncio.Task] = {}
        self._ended: dict[int, asyncio.Event] = {}

    def start(self, request: PeerRequest, *, resumed: bool = False) -> None:
        """Run the request under the gate, unless it has ended or is under way already."""
        if request.state.final or request.id in self._running:
            return
        task = asyncio.create_task(self._drive(request, resumed))
        self._running[request.id] = task
        task.add_done_callback(lambda _: self._running.pop(request.id, None))

    async def resume(self) -> int:
        """Take up the requests under way when this process last stopped; returns how many."""
        unfinished = await self.requests.unfinished_in()
        for request in unfinished:
            self.start(request, resumed=True)
        return len(unfinished)

    async def settled(self, request: PeerRequest, wait: float) -> PeerRequest:
        """The request once it has ended, or as it is after ``wait`` seconds."""
        if request.state.final or wait <= 0:
            return request
        ended = self._ended.setdefault(request.id, asyncio.Event())
        try:
            current = await self.requests.get(request.id) or request  # it may have just ended
            if not current.state.final:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(ended.wait(), timeout=wait)
                current = await self.requests.get(request.id) or current
        finally:
            if request.id not in self._running:
                self._ended.pop(request.id, None)
        return current

    async def close(self) -> None:
        running = list(self._running.values())
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)

    async def _drive(self, request: PeerRequest, resumed: bool) -> None:
        """Run the request to its end, then write the end, retrying only the write: what ran
        is never asked for again because the database failed us once."""
        ended = None
        while ended is None:
            try:
                ended = await self._run(request, resumed)
            except StoreError as exc:
                logger.warning("%s's request %s waits: %s", request.peer, request.id, exc)
                await asyncio.sleep(self.retry_seconds)
                # Taken up as after a restart: from the row as it is now, its card included.
                request, resumed = await self._reread(request), True
            except Exception as exc:  # a bug here ends the request, failed, and says so
                logger.exception("%s's request %s failed", request.peer, request.id)
                ended = (
                    RequestState.FAILED,
                    f"this aegis failed while handling it ({type(exc).__name__}); how far it got "
                    "is not known, and it will not be tried again. Look before asking again",
                    None,
                    None,
                )
        while True:
            try:
                await self.requests.settle(request.id, *ended)
                break
            except StoreError as exc:
                logger.warning("ending %s's request %s waits: %s", request.peer, request.id, exc)
                await asyncio.sleep(self.retry_seconds)
        self._ended.pop(request.id, asyncio.Event()).set()

    async def _reread(self, request: PeerRequest) -> PeerRequest:
        while True:
            try:
                return await self.requests.get(request.id) or request
            except StoreError:
                await asyncio.sleep(self.retry_seconds)

    async def _run(self, request: PeerRequest, resumed: bool):
        peer = request.peer
        agent = self.held.actions.catalog.agent(peer)
        if agent is None or not agent.peer:
            why = "a local agent of the same name may not act for it" if agent else "there is none"
            return (
                RequestState.REFUSED,
                f"nothing was done: this aegis runs a peer's requests as the agent named after "
                f"the peer, declared in aegis.yaml with peer: true, and for {peer} {why}",
                None,
                None,
            )
        to = request.args.get("to")
        if request.action == "message" and self.held.actions.catalog.agent(str(to)) is None:
            return (
                RequestState.REFUSED,
                f"nothing was done: no agent here is called {str(to)[:100]!r}",
                None,
                None,
            )
        call = ToolCall(
            peer,
            ACTIONS[request.action].tool,
            request.args,
            chat_id=self.owner_chat,
            asked_by=request.agent,
        )
        if resumed and _run_started(request):
            return await self._follow(request.result)
        if resumed and request.card is not None:
            if await self.held.actions.approvals.used(request.card):
                return (
                    RequestState.FAILED,
                    f"it was approved on card #{request.card} and had started when this aegis "
                    "stopped; how it ended is not known, and it was not run again. Look before "
                    "asking again",
                    None,
                    request.card,
                )

        async def on_card(card: int) -> None:
            await self.requests.waiting(request.id, card)

        while True:
            outcome = await self.held.call(call, on_hold=on_card)
            if outcome.interaction_id is not None:  # kept even if on_card's write failed
                await self.requests.waiting(request.id, outcome.interaction_id)
            if outcome.status is CallStatus.RAN and request.action == "run":
                await self.requests.ran(request.id, outcome.result)
                return await self._follow(outcome.result, outcome.interaction_id)
            if outcome.status is not CallStatus.GATED:
                return ENDS[outcome.status], outcome.reason, outcome.result, outcome.interaction_id
            # Still waiting for the owner: wait for the card itself (no pass through the gate,
            # and so no audit row, until it is settled), then call again, which runs it on its
            # grant or is refused as the owner said.
            await self._settled_card(outcome.interaction_id)

    async def _settled_card(self, card: int | None) -> None:
        """Until ``card`` is settled (denied, approved, expired or gone): woken at once by a
        tap in this process, else a look every ``CARD_LOOK`` seconds."""
        if card is None:
            await asyncio.sleep(SHORTEST_ROUND)
            return
        interactions = self.held.actions.interactions
        settled = asyncio.Event()

        def woken(settled_card: int) -> None:
            if settled_card == card:
                settled.set()

        interactions.settled_listeners.append(woken)
        try:
            while True:
                found = await interactions.get(card)
                if found is None or not found.is_open:
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(settled.wait(), timeout=CARD_LOOK)
        finally:
            interactions.settled_listeners.remove(woken)

    async def _follow(self, started: dict, card: int | None = None):
        """The end of the run a request started: done with the run's result once it
        completed, failed with its error otherwise."""
        run_id = started["run"]
        while True:
            run = await self.runs(run_id) if self.runs is not None else None
            if run is None:
                return RequestState.FAILED, f"run #{run_id} is gone", started, card
            if run.status.is_over:
                break
            await asyncio.sleep(FOLLOW_EVERY)
        result = {**started, "state": str(run.status), "result": run.result, "error": run.error}
        if run.status is RunState.COMPLETED:
            return RequestState.DONE, f"run #{run_id} completed", result, card
        return RequestState.FAILED, f"run #{run_id} {run.status}: {run.error}", result, card


def _run_started(request: PeerRequest) -> bool:
    return request.action == "run" and isinstance(request.result, dict) and "run" in request.result
