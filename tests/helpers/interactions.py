"""Helpers for core tests of interactions and the call path: a recording ``enqueue`` in place of
Dramatiq, a toolbox that counts what ran, a settable TOTP clock, and reads of the rows a test
checks (grants, audit events, a card's outbox rows)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyotp
from sqlalchemy import select, update

from bot.actions.actions import Actions
from bot.actions.audit import AuditEvent
from bot.chat.callbacks import CallbackSigner
from bot.chat.outbox import Outbox
from bot.config.settings import Settings
from bot.core import Platform
from bot.errors import BrokerError
from bot.interactions.interaction import Ask, Interaction, InteractionStatus, Kind, TimeoutPolicy
from bot.interactions.interactions import Interactions
from bot.store.database import Store
from bot.store.tables import audit_events, grants, interaction_cards, interactions, outbox
from policies.canonical import approval_hash

SIGNER = CallbackSigner(b"k" * 32)
CHAT = 4242
ALICE, BOB = 1001, 1002
SECRET = pyotp.random_base32()
TOTP = pyotp.TOTP(SECRET)
STEP = timedelta(seconds=30)
# The tools and agents of the call-path tests (aegis.yaml); ``BUILT_TOOLS`` are implemented.
CONFIG = """
tools:
  notes.read: {effect: read}
  notes.write:
    effect: write
    schema:
      type: object
      properties: {text: {type: string}}
      required: [text]
      additionalProperties: false
  notes.explode: {effect: read}
  notes.unbuilt: {effect: write}
  site.deploy: {effect: irreversible}
agents:
  scribe:
    tools: [notes.read, notes.write, notes.explode, notes.unbuilt, site.deploy, nobody.declared]
  copyist: {tools: [notes.write]}
  reader: {tools: [notes.read]}
"""
BUILT_TOOLS = ("notes.read", "notes.write", "notes.explode", "site.deploy")


@dataclass
class RecordingEnqueue:
    """Stands in for the broker: records every message; ``down_for`` names actors whose
    messages fail as if Redis were unreachable."""

    calls: list[tuple[str, tuple, dict]] = field(default_factory=list)
    down_for: set[str] = field(default_factory=set)

    async def __call__(self, actor_name: str, *args: Any, **kwargs: Any) -> None:
        if actor_name in self.down_for:
            raise BrokerError(f"the broker is down for {actor_name}")
        self.calls.append((actor_name, args, kwargs))

    def continuations(self) -> list[tuple[str, dict]]:
        """Everything enqueued but deliveries: the continuations, in order."""
        return [(actor, kwargs) for actor, _, kwargs in self.calls if actor != "deliver"]


class Clock:
    """A settable clock for ``bot.chat.codes.now``: ten seconds into a 30-second step, so a step
    boundary never falls between making a code and checking it (as in test_codes.py)."""

    def __init__(self) -> None:
        self.moment = datetime(2030, 1, 1, 12, 0, 10, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.moment

    def code(self) -> str:
        return TOTP.at(self.moment)

    def wrong_code(self) -> str:
        """A well-formed code that matches no step inside the drift window."""
        near = {TOTP.at(self.moment + offset * STEP) for offset in (-1, 0, 1)}
        return next(c for c in (f"{n:06d}" for n in range(1_000_000)) if c not in near)


def make_interactions(store: Store, enqueue: RecordingEnqueue) -> Interactions:
    """Interactions over an outbox that asks for its deliveries through ``enqueue``, as
    ``Platform.build`` wires them."""
    outbox = Outbox(store, deliver=functools.partial(enqueue, "deliver"))
    return Interactions(store, outbox, SIGNER, enqueue)


def approval(
    args: Any = None, *, tool: str = "notes.write", agent: str = "scribe", **overrides: Any
) -> Ask:
    """An approval card for ``agent`` calling ``tool`` with ``args``, bound to their hash."""
    args = {"text": "hello"} if args is None else args
    values: dict[str, Any] = {
        "kind": Kind.APPROVAL,
        "agent": agent,
        "chat_id": CHAT,
        "prompt": f"{agent} wants to run {tool}.",
        "tool": tool,
        "args": args,
        "args_hash": approval_hash(agent, tool, args),
    }
    values.update(overrides)
    return Ask(**values)


async def grant_rows(store: Store, interaction_id: int | None = None) -> list:
    query = select(grants).order_by(grants.c.id)
    if interaction_id is not None:
        query = query.where(grants.c.interaction_id == interaction_id)
    async with store.read() as conn:
        return (await conn.execute(query)).all()


async def audit_rows(store: Store, event: AuditEvent | None = None) -> list:
    query = select(audit_events).order_by(audit_events.c.id)
    if event is not None:
        query = query.where(audit_events.c.event == event)
    async with store.read() as conn:
        return (await conn.execute(query)).all()


async def interaction_count(store: Store) -> int:
    async with store.read() as conn:
        return len((await conn.execute(select(interactions.c.id))).all())


async def card_rows(store: Store, interaction_id: int) -> list[dict[str, Any]]:
    """The outbox rows that carried the card (not its later edits), oldest first."""
    query = (
        select(outbox)
        .join(interaction_cards, interaction_cards.c.outbox_id == outbox.c.id)
        .where(interaction_cards.c.interaction_id == interaction_id)
        .order_by(outbox.c.id)
    )
    async with store.read() as conn:
        return [dict(row._mapping) for row in (await conn.execute(query)).all()]


async def edits_of(store: Store, outbox_id: int) -> list[dict[str, Any]]:
    query = select(outbox).where(outbox.c.edit_of == outbox_id).order_by(outbox.c.id)
    async with store.read() as conn:
        return [dict(row._mapping) for row in (await conn.execute(query)).all()]


async def move_into_past(store: Store, table, row_id: int, column: str = "expires_at") -> None:
    """Set a deadline an hour back, as if the time had passed."""
    past = datetime.now(UTC) - timedelta(hours=1)
    async with store.write() as conn:
        await conn.execute(update(table).where(table.c.id == row_id).values({column: past}))


class Toolbox(dict):
    """Tools that only count: every call is recorded as ``(tool, args)``; the tools named in
    ``failing`` raise instead."""

    def __init__(self, names: tuple[str, ...], *, failing: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.calls: list[tuple[str, Any]] = []
        for name in names:
            self[name] = self._tool(name, fails=name in failing)

    def _tool(self, name: str, *, fails: bool):
        async def tool(args: Any, caller: Any) -> str:
            self.calls.append((name, args))
            if fails:
                raise RuntimeError(f"{name} broke")
            return f"{name} did it"

        return tool


def build_platform(
    folder: Path, store: Store, enqueue: RecordingEnqueue, toolbox: Toolbox
) -> Platform:
    """The platform as the processes build it, from an aegis.yaml holding ``CONFIG``, with
    ``toolbox`` in place of the built-in tools."""
    (folder / "aegis.yaml").write_text(CONFIG)
    settings = Settings(data_dir=folder, config_file=folder / "aegis.yaml", _env_file=None)
    platform = Platform.build(settings, store, SIGNER, enqueue)
    platform.actions = Actions(platform.catalog, toolbox, platform.interactions, platform.approvals)
    return platform


def an_interaction(**overrides) -> Interaction:
    """An open approval card as the views see it (no database), with ``overrides``."""
    moment = datetime(2030, 1, 1, 21, 59, tzinfo=UTC)
    values = {
        "id": 1,
        "kind": Kind.APPROVAL,
        "agent": "demo",
        "chat_id": 7,
        "prompt": "demo wants to run 'demo.write_file': it changes something.",
        "options": (),
        "tool": "demo.write_file",
        "args": {"path": "a.md"},
        "args_hash": "h",
        "step_up": False,
        "status": InteractionStatus.PENDING,
        "outcome": None,
        "answer": None,
        "timeout_policy": TimeoutPolicy.ARCHIVE,
        "expires_at": moment,
        "created_at": moment,
        "code_from": None,
        "resolved_at": None,
        "resolved_by": None,
        "resolved_by_name": None,
        "continuation_actor": None,
        "continuation_kwargs": {},
    }
    return Interaction(**{**values, **overrides})
