"""Agents' MCP bearer tokens: each agent speaks to aegis's MCP server as itself, never as another.

A token is ``secrets.token_urlsafe(32)`` (256 random bits) and only its sha256 is stored, so a
copy of the database lets nobody speak as an agent. A run of a coding CLI gets a token of its
own (``mint_for_run``), which expires a little after the run's deadline and is revoked when the
run ends (``revoke_run``); a token without a run is a lasting one an owner made by hand.

``identify`` maps a token to its agent's slug (and run), or None for a token that is unknown,
expired or revoked: the MCP server refuses all three the same way, so a caller learns nothing
from which.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import insert, select, update

from bot.store.database import Store
from bot.store.fast_paths import LIVE_HOLDER, fetch
from bot.store.tables import agent_tokens
from bot.timeutil import now

TOKEN_BYTES = 32


@dataclass(frozen=True)
class TokenHolder:
    """Who a token speaks for: an agent, and the run it was made for (None: a lasting token)."""

    agent: str
    run_id: int | None = None


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class AgentTokens:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def mint(
        self, agent: str, *, run_id: int | None = None, ttl: timedelta | None = None
    ) -> str:
        """A fresh token for ``agent``; the caller holds the only copy of it."""
        token = secrets.token_urlsafe(TOKEN_BYTES)
        moment = now()
        async with self.store.write() as conn:
            await conn.execute(
                insert(agent_tokens).values(
                    agent=agent,
                    token_hash=token_hash(token),
                    run_id=run_id,
                    created_at=moment,
                    expires_at=None if ttl is None else moment + ttl,
                )
            )
        return token

    async def mint_for_run(self, agent: str, run_id: int, ttl: timedelta) -> str:
        """A token for one run of ``agent``, good for ``ttl`` unless revoked sooner."""
        return await self.mint(agent, run_id=run_id, ttl=ttl)

    async def identify(self, token: str) -> TokenHolder | None:
        """The agent (and run) holding ``token``; None if it is unknown, expired or revoked."""
        if not isinstance(token, str) or not token or len(token) > 256:
            return None
        wanted = token_hash(token)
        row = await self._live_row(wanted)
        # The index found the row by its hash; the hash is compared again in constant time
        # so that nothing about a near miss shows in how long the answer took.
        if row is None or not hmac.compare_digest(row[2], wanted):
            return None
        return TokenHolder(row[0], row[1])

    async def _live_row(self, wanted: str) -> tuple | None:
        """(agent, run_id, token_hash) of the unexpired, unrevoked token with this hash.

        Every MCP request asks this; on SQLite it is one indexed read on this thread
        (Store.read_now), not an async trip through the driver's thread.
        """
        rows = await fetch(self.store, LIVE_HOLDER, token_hash=wanted, moment=now())
        return rows[0] if rows else None

    async def lasting_since(self, agent: str) -> datetime | None:
        """When ``agent``'s live lasting token was made; None if it has none."""
        query = (
            select(agent_tokens.c.created_at)
            .where(
                agent_tokens.c.agent == agent,
                agent_tokens.c.run_id.is_(None),
                agent_tokens.c.revoked_at.is_(None),
            )
            .order_by(agent_tokens.c.id.desc())
            .limit(1)
        )
        async with self.store.read() as conn:
            return (await conn.execute(query)).scalar_one_or_none()

    async def revoke_lasting(self, agent: str) -> int:
        """Revoke every lasting token (one made by hand, not for a run) of ``agent``."""
        async with self.store.write() as conn:
            result = await conn.execute(
                update(agent_tokens)
                .where(
                    agent_tokens.c.agent == agent,
                    agent_tokens.c.run_id.is_(None),
                    agent_tokens.c.revoked_at.is_(None),
                )
                .values(revoked_at=now())
            )
        return result.rowcount or 0

    async def revoke_run(self, run_id: int) -> int:
        """Revoke every token made for ``run_id``; returns how many were still live."""
        async with self.store.write() as conn:
            result = await conn.execute(
                update(agent_tokens)
                .where(agent_tokens.c.run_id == run_id, agent_tokens.c.revoked_at.is_(None))
                .values(revoked_at=now())
            )
        return result.rowcount or 0
