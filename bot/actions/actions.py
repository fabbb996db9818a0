"""The one call path for everyone who acts: the worker, the harnesses, the MCP server.

``perform(call)`` decides a ``ToolCall`` (bot/actions/call.py, policies/decision.py), then runs the
tool, or consumes a grant and runs it, or creates the approval card and returns a refusal that says
how to retry: the identical call, once approved. Every decision, grant use and refusal writes an
audit event.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping

from bot.actions.audit import Audit, AuditEvent
from bot.actions.call import (
    CallOutcome,
    CallStatus,
    Continuation,
    Explainer,
    Ruling,
    ToolCall,
    ToolFunction,
    Vetter,
)
from bot.actions.grants import Approvals
from bot.chat.text import visible
from bot.interactions.interactions import Ask, Effects, Interaction, Interactions, Kind
from bot.store.database import serialize_on
from policies.decision import Allow, Deny, Gate, decide
from policies.tools import Catalog

logger = logging.getLogger(__name__)


class Actions:
    def __init__(
        self,
        catalog: Catalog | Callable[[], Catalog],
        toolbox: Mapping[str, ToolFunction],
        interactions: Interactions,
        approvals: Approvals,
        explainers: Mapping[str, Explainer] | None = None,
        vetters: Mapping[str, Vetter] | None = None,
    ) -> None:
        # A function gives the catalog in force at each call (aegis.yaml may have changed).
        self._catalog = catalog if callable(catalog) else (lambda: catalog)
        self.toolbox = toolbox
        self.interactions = interactions
        self.approvals = approvals
        self.explainers = explainers if explainers is not None else {}
        self.vetters = vetters if vetters is not None else {}
        self.store = interactions.store

    @property
    def catalog(self) -> Catalog:
        return self._catalog()

    def rule(self, call: ToolCall) -> Ruling:
        """The gate's decision on ``call`` under the catalog in force now."""
        catalog = self.catalog
        return Ruling(decide(catalog, call.agent, call.tool, call.args), catalog)

    async def perform(
        self,
        call: ToolCall,
        *,
        continuation: Continuation | None = None,
        ruling: Ruling | None = None,
    ) -> CallOutcome:
        """Decide ``call`` (or take ``ruling``, while its catalog is still the one in force),
        then run it, use a grant for it, or ask on a card; the outcome carries the decision."""
        if call.args_hash is None:
            return await self._deny(call, call.unhashable or "the arguments are not plain JSON")
        if ruling is None or ruling.catalog is not self.catalog:
            ruling = self.rule(call)
        decision = ruling.decision
        problem = None if isinstance(decision, Deny) else await self._vet(call)
        if isinstance(decision, Deny):
            outcome = await self._deny(call, decision.reason)
        elif problem is not None:  # it could never run: nobody is asked, nothing is done
            outcome = await self._deny(call, f"refused before asking anyone: {problem}")
        elif isinstance(decision, Allow):
            await Audit(self.store).record(
                AuditEvent.ALLOWED,
                decision.reason,
                **call.audited,
            )
            outcome = await self._run(call, None)
        else:
            outcome = await self._gated(call, decision, continuation)
        return dataclasses.replace(outcome, decision=decision)

    async def _gated(self, call: ToolCall, decision: Gate, continuation) -> CallOutcome:
        effects = Effects()
        args_hash = call.args_hash
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
                    **call.audited,
                    interaction_id=granted_by_card,
                )
            else:
                waiting = await self._waiting_card(
                    conn, open_card, call, decision, continuation, effects
                )
        await self.interactions.announce(effects)
        if granted_by_card is not None:
            return await self._run(call, granted_by_card)
        return CallOutcome(
            CallStatus.GATED, _retry_advice(waiting, decision), interaction_id=waiting.id
        )

    async def _waiting_card(
        self, conn, waiting, call: ToolCall, decision: Gate, continuation, effects
    ) -> Interaction:
        """The open card for this exact call (``waiting``), or a new one; either way, audited."""
        if waiting is not None:
            event, detail = AuditEvent.WAITING, f"card #{waiting.id} is still open"
        else:
            explainer = self.explainers.get(call.tool)
            ask = Ask(
                kind=Kind.APPROVAL,
                agent=call.agent,
                chat_id=call.caller().chat_id,
                prompt=visible(_prompt(call, decision, explainer)),
                tool=call.tool,
                args=call.args,
                args_hash=call.args_hash,
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
            **call.audited,
            interaction_id=waiting.id,
        )
        return waiting

    async def _run(self, call: ToolCall, interaction_id: int | None) -> CallOutcome:
        tool = call.tool
        # A family's one function ("cli.*") stands for every tool of it that has none of its own.
        family = tool.rpartition(".")[0] + ".*"
        function = self.toolbox.get(tool) or self.toolbox.get(family)
        if function is None:
            reason = f"{tool} is declared but nothing in this process implements it"
            await self._record_failure(call, interaction_id, reason)
            return CallOutcome(CallStatus.FAILED, reason, interaction_id=interaction_id)
        try:
            result = await function(call.args, call.caller(interaction_id))
        except Exception as exc:
            logger.exception("tool %s failed for %s", tool, call.agent)
            reason = f"{tool} failed: {type(exc).__name__}: {exc}"
            await self._record_failure(call, interaction_id, reason)
            return CallOutcome(CallStatus.FAILED, reason, interaction_id=interaction_id)
        how = "allowed" if interaction_id is None else f"approved on card #{interaction_id}"
        return CallOutcome(CallStatus.RAN, f"{tool} ran ({how})", result, interaction_id)

    async def _record_failure(self, call: ToolCall, interaction_id, reason: str) -> None:
        await Audit(self.store).record(
            AuditEvent.FAILED,
            reason,
            **call.audited,
            interaction_id=interaction_id,
        )

    async def _vet(self, call: ToolCall) -> str | None:
        vetter = self.vetters.get(call.tool)
        if vetter is None:
            return None
        try:
            return await vetter(call.args, call.caller())
        except Exception:  # a vetter's own bug refuses, never waves a call through unchecked
            logger.exception("vetting a call of %s failed", call.tool)
            return "its arguments could not be checked"

    async def _deny(self, call: ToolCall, reason: str) -> CallOutcome:
        await Audit(self.store).record(AuditEvent.DENIED, reason, **call.audited)
        return CallOutcome(CallStatus.DENIED, reason)


def _prompt(call: ToolCall, decision: Gate, explainer) -> str:
    # "site.edit changes something" reads "it changes something" after the tool's own name.
    reason = decision.reason.removeprefix(f"{call.tool} ")
    reason = f"it {reason}" if reason != decision.reason else reason
    who = call.agent
    if call.asked_by is not None:  # a peer's request: who asked for it there
        asker = "owner" if call.asked_by == "owner" else f"agent {call.asked_by}"
        who = f"{call.agent} (for its {asker})"
    prompt = f"{who} wants to run {call.tool[:200]!r}: {reason}."
    try:
        what = explainer(call.args, call.caller()) if explainer is not None else None
    except Exception:  # an explanation is a courtesy; the card goes out without it
        logger.exception("explaining a call of %s failed", call.tool)
        what = None
    return f"{prompt}\n{what}" if what else prompt


def _retry_advice(waiting: Interaction, decision: Gate) -> str:
    code = " and a TOTP code" if waiting.step_up else ""
    return (
        f"Waiting for the owner's approval{code} on card #{waiting.id} ({decision.reason}). "
        "Nothing was done. Retry the identical call once it is approved; any change to the "
        "arguments needs a new approval."
    )
