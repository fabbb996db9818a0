"""A tool call as one value: who asks, for which tool, with which arguments and their approval
hash, computed once; the gate's ruling on it; and how it came out.

The call path (bot/actions/actions.py) takes a ``ToolCall`` and returns a ``CallOutcome`` that
carries the decision it made, so nobody downstream decides or hashes the same call again.
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from policies.canonical import approval_hash
from policies.decision import Allow, Deny, Gate
from policies.tools import Catalog

Decision = Allow | Gate | Deny


@dataclass(frozen=True)
class Caller:
    """Who a tool runs for: the agent, the chat its owner reads, and its run (None when the
    call comes from outside a run, such as an MCP client holding the agent's lasting token).
    Tools read this, never their arguments, to know who asks."""

    agent: str
    chat_id: int
    run_id: int | None = None
    card: int | None = None  # the approval card whose grant this call is using, if any
    asked_by: str | None = None  # a peer's request: who asked there (its agent, or "owner")


@dataclass(frozen=True)
class ToolCall:
    """One call an agent asks for. ``chat_id`` None: there is no chat to ask in, so only what
    the gate allows outright can run. ``args_hash`` is the design's approval hash, or None with
    ``unhashable`` saying why when the arguments are not plain JSON (the gate refuses those)."""

    agent: str
    tool: str
    args: Any
    chat_id: int | None = None
    run_id: int | None = None
    asked_by: str | None = None  # a peer's request: who asked there (its agent, or "owner")
    args_hash: str | None = field(init=False, default=None)
    unhashable: str | None = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        # A copy of its own: what was hashed (and approved) is what runs, whatever the caller
        # does with its dict afterwards.
        object.__setattr__(self, "args", copy.deepcopy(self.args))
        try:
            object.__setattr__(self, "args_hash", approval_hash(self.agent, self.tool, self.args))
        except (TypeError, ValueError) as exc:
            object.__setattr__(self, "unhashable", f"the arguments are not plain JSON: {exc}")

    def caller(self, card: int | None = None) -> Caller:
        chat = self.chat_id if self.chat_id is not None else 0  # only a card needs a chat
        return Caller(self.agent, chat, self.run_id, card, self.asked_by)

    @property
    def audited(self) -> dict[str, str | None]:
        """What an audit event says of the call (``Audit.add(..., **call.audited)``)."""
        return {"agent": self.agent, "tool": self.tool, "args_hash": self.args_hash}

    def is_for(self, args_hash: str | None) -> bool:
        """Whether a card or grant made for ``args_hash`` is for exactly this call."""
        return self.args_hash is not None and self.args_hash == args_hash


@dataclass(frozen=True)
class Ruling:
    """The gate's decision on a call and the catalog it was made under: it holds for as long
    as that catalog is the one in force (aegis.yaml may change while a call waits)."""

    decision: Decision
    catalog: Catalog


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
    decision: Decision | None = None  # what the gate decided; None when it was not asked

    @property
    def ran(self) -> bool:
        return self.status is CallStatus.RAN


@dataclass(frozen=True)
class Continuation:
    """Where a gated call resumes: the actor enqueued when its card is settled."""

    actor: str
    kwargs: dict[str, Any] = field(default_factory=dict)


ToolFunction = Callable[[Any, Caller], Awaitable[Any]]
# What a call would do, in words, for its card where the arguments alone do not show it (a
# deploy recipe's name says nothing of the command it runs); None when there is nothing to add.
Explainer = Callable[[Any, Caller], str | None]
# Why a call could never run, checked before anyone is asked (arguments the schema cannot judge,
# such as a duration or a command line): the owner never approves what would be refused after.
# None when the call may go on to the gate.
Vetter = Callable[[Any, Caller], Awaitable[str | None]]
