"""One-time codes (TOTP) for pairing an account and, later, for step-up approvals.

A code is accepted once: the time step it belongs to must be newer than the last step accepted
for that secret (compare-and-set in the database), so a replayed code, or an older code still
inside the clock-drift window, is refused. Five wrong codes from one account within 15 minutes
lock that account out for the rest of the window.
"""

from __future__ import annotations

import hmac
import re
from datetime import datetime, timedelta

import pyotp
from sqlalchemy import func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from bot.errors import PairingError, PairingLocked
from bot.store.database import Store
from bot.store.tables import code_attempts, totp_steps
from bot.timeutil import now

LOCKOUT_WINDOW = timedelta(minutes=15)
LOCKOUT_AFTER = 5
DRIFT_STEPS = 1
CODE_PATTERN = re.compile(r"^\d{6}$")


def provisioning_uri(secret: str, account: str) -> str:
    return pyotp.TOTP(secret).provisioning_uri(name=account, issuer_name="aegis")


def new_secret() -> str:
    return pyotp.random_base32()


class CodeVerifier:
    """Checks codes against one TOTP secret; ``secret_name`` keys its replay protection."""

    def __init__(self, store: Store, secret: str, *, secret_name: str = "owner") -> None:  # noqa: S107
        self.store = store
        self.totp = pyotp.TOTP(secret)
        self.secret_name = secret_name

    async def verify(self, user_id: int, code: str, *, purpose: str) -> None:
        """Accept the code or raise PairingError (or PairingLocked) with a sentence to show."""
        async with self.store.write() as conn:
            refusal = await self.check(conn, user_id, code, purpose=purpose)
        if refusal is not None:
            raise refusal

    async def check(
        self, conn: AsyncConnection, user_id: int, code: str, *, purpose: str
    ) -> PairingError | None:
        """Inside the caller's transaction, so what the code grants commits with it; returns
        the refusal to raise once the transaction has committed the attempt, or None."""
        moment = now()
        if await self._wrong_attempts(conn, user_id, purpose, moment) >= LOCKOUT_AFTER:
            raise PairingLocked("Too many wrong codes. Try again in 15 minutes.")
        step = self._matching_step(code.strip(), moment)
        accepted = step is not None and await self._claim_step(conn, step)
        await conn.execute(
            insert(code_attempts).values(
                user_id=user_id, purpose=purpose, accepted=accepted, at=moment
            )
        )
        return None if accepted else PairingError(self._refusal(step))

    def _matching_step(self, code: str, moment: datetime) -> int | None:
        if not CODE_PATTERN.match(code):
            return None
        current = self.totp.timecode(moment)
        for step in range(current + DRIFT_STEPS, current - DRIFT_STEPS - 1, -1):
            expected = self.totp.generate_otp(step)
            if hmac.compare_digest(expected.encode(), code.encode()):
                return step
        return None

    async def _claim_step(self, conn: AsyncConnection, step: int) -> bool:
        if await self._advance(conn, step):
            return True
        exists = await conn.execute(
            select(totp_steps.c.last_step).where(totp_steps.c.secret_name == self.secret_name)
        )
        if exists.first() is not None:
            return False
        try:
            async with conn.begin_nested():
                await conn.execute(
                    insert(totp_steps).values(secret_name=self.secret_name, last_step=step)
                )
        except IntegrityError:
            # Another verifier stored the very first step meanwhile (Postgres lets both get
            # here; SQLite serialises writers): compare with the step it stored instead.
            return await self._advance(conn, step)
        return True

    async def _advance(self, conn: AsyncConnection, step: int) -> bool:
        claimed = await conn.execute(
            update(totp_steps)
            .where(totp_steps.c.secret_name == self.secret_name, totp_steps.c.last_step < step)
            .values(last_step=step)
        )
        return claimed.rowcount == 1

    async def _wrong_attempts(
        self, conn: AsyncConnection, user_id: int, purpose: str, moment: datetime
    ) -> int:
        query = select(func.count()).where(
            code_attempts.c.user_id == user_id,
            code_attempts.c.purpose == purpose,
            code_attempts.c.accepted.is_(False),
            code_attempts.c.at > moment - LOCKOUT_WINDOW,
        )
        return (await conn.execute(query)).scalar_one()

    @staticmethod
    def _refusal(step: int | None) -> str:
        if step is None:
            return "That code is not valid. Send the current 6-digit code from your app."
        return "That code was already used. Wait for the next code and send it."
