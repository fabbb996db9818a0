"""Refused requests, written to the audit trail at most once a minute per peer and reason.

A refusal must not become a way to make us write: a flood of bad requests costs one audit row
(and one update of the link's counts) a minute per kind, whatever its rate. The row says how
many were refused since the last one. Counts still pending when the process stops are lost.
"""

from __future__ import annotations

import logging

from bot.actions.audit import Audit, AuditEvent
from bot.errors import PeerRefused, StoreError
from federation.links import Peers

logger = logging.getLogger(__name__)
EVERY = 60.0  # seconds between two audit rows of one peer and reason
# Refused before the signature was verified: the peer's name is only what the request said.
UNPROVEN = ("clock_skew", "bad_signature")


class RefusalLog:
    def __init__(self, peers: Peers, *, every: float = EVERY) -> None:
        self.peers = peers
        self.every = every
        self._pending: dict[tuple[str | None, str], int] = {}
        self._written: dict[tuple[str | None, str], float] = {}

    async def record(self, refused: PeerRefused, at: float) -> bool:
        """Count ``refused``; True when this one was written (with those counted before it)."""
        # Only a link's own name is kept as a key: a stranger's made-up names are one key.
        key = (refused.peer, refused.reason)
        self._pending[key] = self._pending.get(key, 0) + 1
        if at - self._written.get(key, float("-inf")) < self.every:
            return False
        count = self._pending.pop(key)
        self._written[key] = at
        try:
            await self._write(refused, count)
        except StoreError as exc:
            logger.warning("a refused peer request was not audited: %s", exc)
        return True

    async def _write(self, refused: PeerRefused, count: int) -> None:
        who = refused.peer or "a sender with no link"
        if refused.reason in UNPROVEN:
            who = f"a sender calling itself {refused.peer}"
        detail = f"federation: refused {count} request(s) from {who} ({refused.reason}): {refused}"
        async with self.peers.store.write() as conn:
            await Audit.add(conn, AuditEvent.PEER_REFUSED, detail)
            if refused.peer is not None:
                await self.peers.count_refusals(conn, refused.peer, {refused.reason: count})
