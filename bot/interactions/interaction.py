"""The interaction row as data: its kinds, states and outcomes, what to ask, and what an answer
did. The service that creates and settles them is bot/interactions/interactions.py."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any


class Kind(enum.StrEnum):
    APPROVAL = "approval"
    CHOICE = "choice"
    ACKNOWLEDGEMENT = "acknowledgement"
    QUESTION = "question"


class InteractionStatus(enum.StrEnum):
    PENDING = "pending"
    AWAITING_CODE = "awaiting_code"
    RESOLVED = "resolved"
    EXPIRED = "expired"


OPEN = (InteractionStatus.PENDING, InteractionStatus.AWAITING_CODE)


class TimeoutPolicy(enum.StrEnum):
    ARCHIVE = "archive"  # at the deadline it expires; the asker reads a soft decline
    HOLD = "hold"  # it waits for as long as it takes


class InteractionOutcome(enum.StrEnum):
    APPROVED = "approved"
    DENIED = "denied"
    CHOSEN = "chosen"
    ACKNOWLEDGED = "acknowledged"
    ANSWERED = "answered"
    SKIPPED = "skipped"
    EXPIRED = "expired"


# The choice part of a card's callback data, per kind; a choice card uses option indexes.
TAP_OUTCOMES = {
    Kind.APPROVAL: {"approve": InteractionOutcome.APPROVED, "deny": InteractionOutcome.DENIED},
    Kind.ACKNOWLEDGEMENT: {"ack": InteractionOutcome.ACKNOWLEDGED},
    Kind.QUESTION: {"skip": InteractionOutcome.SKIPPED},
}


@dataclass(frozen=True)
class Ask:
    """What to ask: the row to create."""

    kind: Kind
    agent: str
    chat_id: int
    prompt: str
    options: tuple[str, ...] = ()
    tool: str | None = None
    args: Any = None
    args_hash: str | None = None
    step_up: bool = False
    timeout: timedelta | None = timedelta(hours=1)
    timeout_policy: TimeoutPolicy = TimeoutPolicy.ARCHIVE
    continuation_actor: str | None = None
    continuation_kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Interaction:
    id: int
    kind: Kind
    agent: str
    chat_id: int
    prompt: str
    options: tuple[str, ...]
    tool: str | None
    args: Any
    args_hash: str | None
    step_up: bool
    status: InteractionStatus
    outcome: str | None
    answer: str | None
    timeout_policy: TimeoutPolicy
    expires_at: datetime | None
    created_at: datetime
    code_from: int | None
    resolved_at: datetime | None
    resolved_by: int | None
    resolved_by_name: str | None
    continuation_actor: str | None
    continuation_kwargs: dict[str, Any]
    thread_id: int | None = None  # the asking agent's forum topic in ``chat_id``, if any

    @classmethod
    def from_row(cls, row: Any) -> Interaction:
        values = {name.name: getattr(row, name.name) for name in dataclasses.fields(cls)}
        values.update(
            kind=Kind(row.kind),
            status=InteractionStatus(row.status),
            timeout_policy=TimeoutPolicy(row.timeout_policy),
            options=tuple(row.options),
        )
        return cls(**values)

    @property
    def is_open(self) -> bool:
        return self.status in OPEN

    def is_due(self, moment: datetime) -> bool:
        return self.expires_at is not None and self.expires_at <= moment

    def outcome_of(self, choice: str) -> tuple[str, str | None] | None:
        """The outcome (and, for a choice, the option) a tap on ``choice`` means."""
        if self.kind is Kind.CHOICE:
            if choice.isdigit() and int(choice) < len(self.options):
                return InteractionOutcome.CHOSEN, self.options[int(choice)]
            return None
        outcome = TAP_OUTCOMES[self.kind].get(choice)
        return (outcome, None) if outcome else None


@dataclass(frozen=True)
class Reply:
    """What a tap, a code or a reply did, with the sentence to show for it."""

    text: str
    interaction: Interaction | None = None
    changed: bool = False


@dataclass
class Effects:
    """What to announce once the transaction has committed."""

    outbox_ids: list[int] = field(default_factory=list)
    continuations: list[Interaction] = field(default_factory=list)
    settled: list[int] = field(default_factory=list)  # cards answered or expired
