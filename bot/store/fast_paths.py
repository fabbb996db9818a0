"""The hottest point lookups, each written twice, side by side: as raw SQL that
``Store.read_now`` runs on SQLite's own thread (a few microseconds, where an async read crosses to
the driver's thread and back eight times), and as the SQLAlchemy query it mirrors, which every
other database runs. ``tests/bot/store/test_fast_paths.py`` holds each pair equal on the same rows.

``fetch(store, path, **params)`` takes the fast way where there is one; callers name parameters,
never placeholders, and get plain tuples back either way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, or_, select

from bot.store.database import Store, sqlite_time
from bot.store.tables import agent_tokens, grants, interactions

# The open statuses of an interaction (bot/interactions/interaction.py's OPEN, which the test
# holds equal): the store knows no concept above it.
OPEN_STATUSES = ("pending", "awaiting_code")


@dataclass(frozen=True)
class FastRead:
    name: str
    sql: str  # ``?`` placeholders, in the order of ``params``
    params: tuple[str, ...]
    query: Callable[..., Select]  # the same lookup, from the same keyword parameters


async def fetch(store: Store, path: FastRead, **params: Any) -> list[tuple]:
    if store.is_sqlite:
        values = tuple(_sqlite_value(params[name]) for name in path.params)
        return store.read_now(path.sql, values)
    async with store.read() as conn:
        return [tuple(row) for row in (await conn.execute(path.query(**params))).all()]


def _sqlite_value(value: Any) -> Any:
    return sqlite_time(value) if isinstance(value, datetime) else value


def live_grant_where(args_hash: str, moment: datetime) -> tuple:
    """An unused grant for this exact call that has not expired at ``moment``."""
    return (
        grants.c.args_hash == args_hash,
        grants.c.used_at.is_(None),
        grants.c.expires_at > moment,
    )


# Every gated call asks, and an agent polling for its approval asks often (bot/actions/grants.py).
LIVE_GRANT = FastRead(
    "a live grant",
    "SELECT 1 FROM grants WHERE args_hash = ? AND used_at IS NULL AND expires_at > ? LIMIT 1",
    ("args_hash", "moment"),
    lambda args_hash, moment: select(1).where(*live_grant_where(args_hash, moment)).limit(1),
)

# Every MCP request asks who its bearer token speaks for (bot/agents/tokens.py).
LIVE_HOLDER = FastRead(
    "a live token's holder",
    "SELECT agent, run_id, token_hash FROM agent_tokens WHERE token_hash = ? "
    "AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?)",
    ("token_hash", "moment"),
    lambda token_hash, moment: select(
        agent_tokens.c.agent, agent_tokens.c.run_id, agent_tokens.c.token_hash
    ).where(
        agent_tokens.c.token_hash == token_hash,
        agent_tokens.c.revoked_at.is_(None),
        or_(agent_tokens.c.expires_at.is_(None), agent_tokens.c.expires_at > moment),
    ),
)

# A held call looks at its card every poll (bot/actions/held_calls.py).
CARD_STATUS = FastRead(
    "a card's status",
    "SELECT status, outcome FROM interactions WHERE id = ?",
    ("card",),
    lambda card: select(interactions.c.status, interactions.c.outcome).where(
        interactions.c.id == card
    ),
)

# The latest settled approval card for this exact call, resolved after ``since``: an owner's
# "no" is remembered (bot/actions/held_calls.py).
SETTLED_APPROVAL = FastRead(
    "the latest settled approval of a call",
    "SELECT id, outcome FROM interactions WHERE args_hash = ? AND kind = 'approval' "
    "AND status NOT IN ('pending', 'awaiting_code') AND resolved_at > ? "
    "ORDER BY id DESC LIMIT 1",
    ("args_hash", "since"),
    lambda args_hash, since: (
        select(interactions.c.id, interactions.c.outcome)
        .where(
            interactions.c.args_hash == args_hash,
            interactions.c.kind == "approval",
            interactions.c.status.not_in(OPEN_STATUSES),
            interactions.c.resolved_at > since,
        )
        .order_by(interactions.c.id.desc())
        .limit(1)
    ),
)

FAST_READS = (LIVE_GRANT, LIVE_HOLDER, CARD_STATUS, SETTLED_APPROVAL)
