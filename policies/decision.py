"""``decide(catalog, agent, tool, args)``: Allow, Gate or Deny, each with its reason.

The decision is an ordered list of small rules; the first rule with an opinion decides, and when
none has one the call is gated. So the list fails closed: a tool nobody declared, or an effect
nobody thought of, waits for the owner instead of running.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from policies.tools import AgentSpec, Catalog, Effect, ToolSpec


@dataclass(frozen=True)
class Allow:
    reason: str


@dataclass(frozen=True)
class Gate:
    reason: str
    step_up: bool = False  # the approval also needs a current TOTP code


@dataclass(frozen=True)
class Deny:
    reason: str


Decision = Allow | Gate | Deny


@dataclass(frozen=True)
class Call:
    """What a rule looks at: who asks, for which tool, with which arguments. ``agent`` and
    ``tool`` are None when nobody declared them."""

    slug: str
    name: str
    args: Any
    agent: AgentSpec | None
    tool: ToolSpec | None


Rule = Callable[[Call], Decision | None]


def unknown_agent(call: Call) -> Decision | None:
    if call.agent is None:
        return Deny(f"no agent named {call.slug!r} is declared")
    return None


def undeclared_tool(call: Call) -> Decision | None:
    # After the grant check: a tool the agent was granted but nobody declared has no known
    # effect, so it is treated as the worst effect there is.
    if call.tool is None:
        return Gate(f"no one declared the tool {call.name!r}, so its effect is unknown", True)
    return None


def not_granted(call: Call) -> Decision | None:
    if not call.agent.grants(call.name):
        return Deny(f"{call.slug} is not granted {call.name}")
    return None


def bad_arguments(call: Call) -> Decision | None:
    error = call.tool.argument_error(call.args)
    if error is not None:
        return Deny(f"the arguments do not match {call.name}'s schema: {error}")
    return None


def asked_by_peer(call: Call) -> Decision | None:
    if call.agent.peer:
        return Gate(f"{call.slug} acts for a federated peer; its requests need a code", True)
    return None


def read_only(call: Call) -> Decision | None:
    if call.tool.effect is Effect.READ:
        return Allow(f"{call.name} only reads")
    return None


def talks(call: Call) -> Decision | None:
    if call.tool.effect is Effect.TALK:
        return Allow(f"{call.name} only speaks inside aegis")
    return None


def irreversible(call: Call) -> Decision | None:
    if call.tool.effect is Effect.IRREVERSIBLE:
        return Gate(f"{call.name} cannot be undone", step_up=True)
    return None


def writes(call: Call) -> Decision | None:
    if call.tool.effect is Effect.WRITE:
        return Gate(f"{call.name} changes something")
    return None


RULES: Sequence[Rule] = (
    unknown_agent,
    not_granted,
    undeclared_tool,
    bad_arguments,
    asked_by_peer,
    read_only,
    talks,
    irreversible,
    writes,
)
FALLBACK = Gate("no rule allows this call", step_up=True)


def decide(catalog: Catalog, agent: str, tool: str, args: Any, rules=RULES) -> Decision:
    call = Call(agent, tool, args, catalog.agent(agent), catalog.tool(tool))
    for rule in rules:
        decision = rule(call)
        if decision is not None:
            return decision
    return FALLBACK
