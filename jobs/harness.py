"""The one interface every harness implements, and what a harness may do during a run.

A harness (script, http, a coding CLI …) is given a :class:`RunContext` and returns the run's
result as text. Everything that touches the world goes through the context: a tool call goes
through the gate (``call``), a message to the owner through the outbox (``say``), progress to
the run's message (``step``), and the harness's own state (conversation so far, step reached)
is saved with ``checkpoint`` so a parked or interrupted run continues where it stopped.

A gated call parks the run: ``call`` raises :class:`Parked` after the card is made, the runner
records it, and when the card is settled the run is started again with the same state. The
harness then makes the identical call again: approved, it now runs (once); denied or expired,
``call`` answers that nothing was done, without asking again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from bot.actions.call import CallOutcome, CallStatus, Continuation, ToolCall
from bot.agents.agent_run import AgentRun
from bot.agents.agent_runs import AgentRuns
from bot.agents.profiles import AgentProfile
from bot.errors import Parked
from bot.interactions.interaction import Interaction, InteractionOutcome
from bot.timeutil import now

CONTINUE_ACTOR = "run_agent"
WATCHED = "watched"  # state: the last process watch whose outcome the run was given
RESUME = "resume"  # state: that outcome, for the harness to give its agent (then dropped)


class Harness(Protocol):
    async def run(self, ctx: RunContext) -> str: ...


Perform = Callable[..., Awaitable[CallOutcome]]
Say = Callable[[str, str], Awaitable[None]]


@dataclass
class RunContext:
    run: AgentRun
    agent: AgentProfile
    perform: Perform  # Actions.perform
    runs: AgentRuns
    say_to_owner: Say  # (text, key) → queued in the run's chat, once per key
    settled: Interaction | None = None  # the card this stretch continues from
    state: dict[str, Any] = field(default_factory=dict)
    effects: Counter = field(default_factory=Counter)
    on_step: Callable[[str], Awaitable[None]] | None = None

    def __post_init__(self) -> None:
        self.state = dict(self.run.state)
        self.effects = Counter(self.run.effects)

    @property
    def request(self) -> str:
        return self.run.request

    @property
    def resumed_with(self) -> str | None:
        """The outcome of the process watch this stretch continues after, if it does: what the
        harness tells its agent before it goes on (jobs/agent_runs.py sets it)."""
        return self.state.get(RESUME)

    def remaining(self) -> float:
        """Seconds left before the run's deadline, read from the clock now."""
        if self.run.deadline_at is None:
            return float(self.run.deadline_seconds)
        return (self.run.deadline_at - now()).total_seconds()

    async def call(self, tool: str, args: Any) -> CallOutcome:
        """Ask for a tool call through the gate; raises Parked when it waits for a card."""
        settled, self.settled = self.settled, None
        self.state.pop("continued_from", None)  # the card answers this one call, no other
        call = ToolCall(self.agent.slug, tool, args, self.run.chat_id, self.run.id)
        if settled is not None and settled.outcome != InteractionOutcome.APPROVED:
            if call.is_for(settled.args_hash):
                self.effects["calls_refused"] += 1
                return CallOutcome(
                    CallStatus.DENIED,
                    f"the owner was asked on card #{settled.id} and it was {settled.outcome}; "
                    "nothing was done",
                    interaction_id=settled.id,
                )
        outcome = await self.perform(
            call, continuation=Continuation(CONTINUE_ACTOR, {"run_id": self.run.id})
        )
        if outcome.status is CallStatus.GATED:
            self.effects["cards_asked"] += 1
            raise Parked(outcome.interaction_id, outcome.reason)
        self.effects["tool_calls" if outcome.ran else f"calls_{outcome.status.value}"] += 1
        return outcome

    async def say(self, text: str, *, key: str) -> None:
        """A message to the owner, sent once however often this stretch is replayed."""
        await self.say_to_owner(text, f"run:{self.run.id}:say:{key}")
        self.effects["messages_sent"] += 1

    async def step(self, what: str) -> None:
        """What the run is doing now, for its progress message."""
        if self.on_step is not None:
            await self.on_step(what)

    async def checkpoint(self, step: str | None = None) -> None:
        await self.runs.checkpoint(
            self.run, state=self.state, effects=dict(self.effects), step=step
        )
