"""The one call path for everyone who acts: the worker, the harnesses, the MCP server.

``perform(agent, tool, args)`` decides (policies/decision.py), then runs the tool, or consumes
a grant and runs it, or creates the approval card and returns a refusal that says how to retry:
the identical call, once approved. Every decision, grant use and refusal writes an audit event.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bot.actions.audit import Audit, AuditEvent
from bot.actions.grants import Approvals
from bot.chat.views.cards import visible
from bot.interactions.interactions import Ask, Effects, Interaction, Interactions, Kind
from bot.store.database import serialize_on
from policies.canonical import approval_hash
from policies.decision import Allow, Deny, Gate, decide
from policies.tools import Catalog

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Caller:
    """Who a tool runs for: the agent, the chat its owner reads, and its run (None when the
    call comes from outside a run, such as an MCP client holding the agent's lasting token).
    Tools read this, never their arguments, to know who asks."""

    agent: str
    chat_id: int
    run_id: int | None = None
    card: int | None = None  # the approval card whose grant this call is using, if any


ToolFunction = Callable[[Any, Caller], Awaitable[Any]]
# What a call would do, in words, for its card where the arguments alone do not show it (a
# deploy recipe's name says nothing of the command it runs); None when there is nothing to add.
Explainer = Callable[[Any], str | None]


class CallStatus(enum.StrEnum):
    RAN = "ran"  # the tool ran; ``result`` holds what it returned
    GATED = "gated"  # waiting for the owner: retry the identical call once approved
    DENIED = "denied"  # refused by policy; retrying will not help
    FAILED = "failed"  # allowed, but the tool raised


@dataclass(frozen=True)
class CallOutcome:
    status: CallStatus
    reason: str
    result: Any = None
    interaction_id: int | None = None

    @property
    def ran(self) -> bool:
        return self.status is CallStatus.RAN


@dataclass(frozen=True)
class Continuation:
    """Where a gated call resumes: the actor enqueued when its card is settled."""

    actor: str
    kwargs: dict[str, Any] = field(default_factory=dict)


class Actions:
    def __init__(
        self,
        catalog: Catalog | Callable[[], Catalog],
        toolbox: Mapping[str, ToolFunction],
        interactions: Interactions,
        approvals: Approvals,
        explainers: Mapping[str, Explainer] | None = None,
    ) -> None:
        # A function gives the catalog in force at each call (aegis.yaml may have changed).
        self._catalog = catalog if callable(catalog) else (lambda: catalog)
        self.toolbox = toolbox
        self.interactions = interactions
        self.approvals = approvals
        self.explainers = explainers if explainers is not None else {}
        self.store = interactions.store

    @property
    def catalog(self) -> Catalog:
        return self._catalog()

    async def perform(
        self,
        agent: str,
        tool: str,
        args: Any,
        *,
        chat_id: int,
        run_id: int | None = None,
        continuation: Continuation | None = None,
    ) -> CallOutcome:
        caller = Caller(agent, chat_id, run_id)
        try:
            args_hash = approval_hash(agent, tool, args)
        except (TypeError, ValueError) as exc:
            return await self._deny(agent, tool, None, f"the arguments are not plain JSON: {exc}")
        decision = decide(self.catalog, agent, tool, args)
        if isinstance(decision, Deny):
            return await self._deny(agent, tool, args_hash, decision.reason)
        if isinstance(decision, Allow):
            await Audit(self.store).record(
                AuditEvent.ALLOWED, decision.reason, agent=agent, tool=tool, args_hash=args_hash
            )
            return await self._run(caller, tool, args, args_hash, None)
        return await self._gated(caller, tool, args, args_hash, decision, continuation)

    async def _gated(
        self, caller, tool, args, args_hash, decision: Gate, continuation
    ) -> CallOutcome:
        agent = caller.agent
        effects = Effects()
        # The lookup is a read; only a call that finds a grant pays for the write that uses it.
        may_have_grant = await self.approvals.has_live_grant(args_hash)
        async with self.store.write() as conn:
            granted_by_card = (
                await Approvals.consume(conn, args_hash, step_up=decision.step_up)
                if may_have_grant
                else None
            )
            open_card = None
            if granted_by_card is None:
                await serialize_on(conn, f"approval:{args_hash}")  # identical calls: one card
                open_card = await self.interactions.open_for_hash(
                    conn, args_hash, step_up=decision.step_up
                )
                if open_card is None and not may_have_grant:
                    # No card open: it may have been approved since the read above, and then
                    # its grant is this call's, not a reason to ask again.
                    granted_by_card = await Approvals.consume(
                        conn, args_hash, step_up=decision.step_up
                    )
            if granted_by_card is not None:
                await Audit.add(
                    conn,
                    AuditEvent.USED,
                    f"used the grant of card #{granted_by_card}",
                    agent=agent,
                    tool=tool,
                    args_hash=args_hash,
                    interaction_id=granted_by_card,
                )
            else:
                waiting = await self._waiting_card(
                    conn, open_card, caller, tool, args, args_hash, decision, continuation, effects
                )
        await self.interactions.announce(effects)
        if granted_by_card is not None:
            return await self._run(caller, tool, args, args_hash, granted_by_card)
        return CallOutcome(
            CallStatus.GATED, _retry_advice(waiting, decision), interaction_id=waiting.id
        )

    async def _waiting_card(
        self, conn, waiting, caller, tool, args, args_hash, decision, continuation, effects
    ) -> Interaction:
        """The open card for this exact call (``waiting``), or a new one; either way, audited."""
        agent, chat_id = caller.agent, caller.chat_id
        if waiting is not None:
            event, detail = AuditEvent.WAITING, f"card #{waiting.id} is still open"
        else:
            ask = Ask(
                kind=Kind.APPROVAL,
                agent=agent,
                chat_id=chat_id,
                prompt=visible(_prompt(agent, tool, args, decision, self.explainers.get(tool))),
                tool=tool,
                args=args,
                args_hash=args_hash,
                step_up=decision.step_up,
                continuation_actor=continuation.actor if continuation else None,
                continuation_kwargs=continuation.kwargs if continuation else {},
            )
            waiting = await self.interactions.create_in(conn, ask, effects)
            event, detail = AuditEvent.GATED, f"{decision.reason}; asked on card #{waiting.id}"
        await Audit.add(
            conn,
            event,
            detail,
            agent=agent,
            tool=tool,
            args_hash=args_hash,
            interaction_id=waiting.id,
        )
        return waiting

    async def _run(self, caller: Caller, tool, args, args_hash, interaction_id) -> CallOutcome:
        agent = caller.agent
        caller = dataclasses.replace(caller, card=interaction_id)
        # A family's one function ("cli.*") stands for every tool of it that has none of its own.
        family = tool.rpartition(".")[0] + ".*"
        function = self.toolbox.get(tool) or self.toolbox.get(family)
        if function is None:
            reason = f"{tool} is declared but nothing in this process implements it"
            await self._record_failure(agent, tool, args_hash, interaction_id, reason)
            return CallOutcome(CallStatus.FAILED, reason, interaction_id=interaction_id)
        try:
            result = await function(args, caller)
        except Exception as exc:
            logger.exception("tool %s failed for %s", tool, agent)
            reason = f"{tool} failed: {type(exc).__name__}: {exc}"
            await self._record_failure(agent, tool, args_hash, interaction_id, reason)
            return CallOutcome(CallStatus.FAILED, reason, interaction_id=interaction_id)
        how = "allowed" if interaction_id is None else f"approved on card #{interaction_id}"
        return CallOutcome(CallStatus.RAN, f"{tool} ran ({how})", result, interaction_id)

    async def _record_failure(self, agent, tool, args_hash, interaction_id, reason) -> None:
        await Audit(self.store).record(
            AuditEvent.FAILED,
            reason,
            agent=agent,
            tool=tool,
            args_hash=args_hash,
            interaction_id=interaction_id,
        )

    async def _deny(self, agent, tool, args_hash, reason) -> CallOutcome:
        await Audit(self.store).record(
            AuditEvent.DENIED, reason, agent=agent, tool=tool, args_hash=args_hash
        )
        return CallOutcome(CallStatus.DENIED, reason)


def _prompt(agent: str, tool: str, args: Any, decision: Gate, explainer) -> str:
    prompt = f"{agent} wants to run {tool[:200]!r}: {decision.reason}."
    try:
        what = explainer(args) if explainer is not None else None
    except Exception:  # an explanation is a courtesy; the card goes out without it
        logger.exception("explaining a call of %s failed", tool)
        what = None
    return f"{prompt}\n{what}" if what else prompt


def _retry_advice(waiting: Interaction, decision: Gate) -> str:
    code = " and a TOTP code" if waiting.step_up else ""
    return (
        f"Waiting for the owner's approval{code} on card #{waiting.id} ({decision.reason}). "
        "Nothing was done. Retry the identical call once it is approved; any change to the "
        "arguments needs a new approval."
    )
