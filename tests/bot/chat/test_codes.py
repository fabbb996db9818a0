"""TOTP codes against SQLite and Postgres: once only, never an older step, lock after five wrong.

The verifier reads the time from ``bot.chat.codes.now``; the tests set that clock (ten seconds
into a 30-second step) so a step boundary never falls between making a code and checking it.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pyotp
import pytest
from sqlalchemy import select

from bot.chat import codes
from bot.chat.codes import CodeVerifier
from bot.errors import PairingError, PairingLocked
from bot.store.tables import code_attempts, totp_steps

SECRET = pyotp.random_base32()
TOTP = pyotp.TOTP(SECRET)
STEP = timedelta(seconds=30)
ALICE, BOB = 1001, 1002


class Clock:
    def __init__(self, moment: datetime) -> None:
        self.moment = moment

    def __call__(self) -> datetime:
        return self.moment


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock(datetime(2030, 1, 1, 12, 0, 10, tzinfo=UTC))
    monkeypatch.setattr(codes, "now", clock)
    return clock


@pytest.fixture
def verifier(store, clock) -> CodeVerifier:
    return CodeVerifier(store, SECRET)


def code_at(moment: datetime) -> str:
    return TOTP.at(moment)


async def attempts(store, user_id: int) -> list[bool]:
    query = select(code_attempts.c.accepted).where(code_attempts.c.user_id == user_id)
    async with store.read() as conn:
        return list((await conn.execute(query.order_by(code_attempts.c.id))).scalars())


async def last_step(store) -> int | None:
    async with store.read() as conn:
        return (await conn.execute(select(totp_steps.c.last_step))).scalar_one_or_none()


async def test_the_current_code_is_accepted_once(verifier, clock, store):
    code = code_at(clock.moment)
    await verifier.verify(ALICE, code, purpose="pair")
    with pytest.raises(PairingError, match="already used") as refused:
        await verifier.verify(ALICE, code, purpose="pair")
    assert not isinstance(refused.value, PairingLocked)
    assert await attempts(store, ALICE) == [True, False]
    assert await last_step(store) == TOTP.timecode(clock.moment)


async def test_a_code_with_surrounding_whitespace_is_accepted(verifier, clock):
    await verifier.verify(ALICE, f"  {code_at(clock.moment)}\n", purpose="pair")


async def test_an_older_step_is_refused_after_a_newer_one(verifier, clock):
    await verifier.verify(ALICE, code_at(clock.moment), purpose="pair")
    with pytest.raises(PairingError, match="already used"):
        await verifier.verify(ALICE, code_at(clock.moment - STEP), purpose="pair")


async def test_the_previous_step_is_accepted_within_the_drift_window(verifier, clock, store):
    await verifier.verify(ALICE, code_at(clock.moment - STEP), purpose="pair")
    assert await last_step(store) == TOTP.timecode(clock.moment) - 1
    # The current step is newer than the one just used, so it still goes through.
    await verifier.verify(ALICE, code_at(clock.moment), purpose="pair")


async def test_codes_outside_the_drift_window_are_not_valid(verifier, clock):
    for moment in (clock.moment - 2 * STEP, clock.moment + 2 * STEP):
        with pytest.raises(PairingError, match="not valid"):
            await verifier.verify(ALICE, code_at(moment), purpose="pair")


async def test_a_used_step_stays_used_when_the_clock_moves_on(verifier, clock):
    code = code_at(clock.moment)
    await verifier.verify(ALICE, code, purpose="pair")
    clock.moment += STEP  # the same code is now the previous step, inside the drift window
    with pytest.raises(PairingError, match="already used"):
        await verifier.verify(ALICE, code, purpose="pair")


@pytest.mark.parametrize("malformed", ["12345", "abcdef", "1234567", "", "12 345", "１２３４５６"])
async def test_a_malformed_code_is_refused_without_consuming_a_step(
    verifier, clock, store, malformed
):
    with pytest.raises(PairingError, match="not valid"):
        await verifier.verify(ALICE, malformed, purpose="pair")
    assert await last_step(store) is None
    assert await attempts(store, ALICE) == [False]
    await verifier.verify(ALICE, code_at(clock.moment), purpose="pair")


async def test_five_wrong_codes_lock_the_account_for_fifteen_minutes(verifier, clock, store):
    good = code_at(clock.moment)
    wrong = f"{(int(good) + 1) % 1_000_000:06d}"
    for _ in range(5):
        with pytest.raises(PairingError, match="not valid"):
            await verifier.verify(ALICE, wrong, purpose="pair")

    with pytest.raises(PairingLocked, match="15 minutes"):
        await verifier.verify(ALICE, good, purpose="pair")
    # The lock is per account and per purpose.
    await verifier.verify(BOB, good, purpose="pair")
    clock.moment += timedelta(minutes=14, seconds=50)
    with pytest.raises(PairingLocked):
        await verifier.verify(ALICE, code_at(clock.moment), purpose="pair")

    clock.moment += timedelta(seconds=20)  # the first wrong code is now 15 minutes old
    await verifier.verify(ALICE, code_at(clock.moment), purpose="pair")
    assert await attempts(store, ALICE) == [False] * 5 + [True]
    assert await attempts(store, BOB) == [True]


async def test_four_wrong_codes_do_not_lock(verifier, clock):
    good = code_at(clock.moment)
    wrong = f"{(int(good) + 1) % 1_000_000:06d}"
    for _ in range(4):
        with pytest.raises(PairingError):
            await verifier.verify(ALICE, wrong, purpose="pair")
    await verifier.verify(ALICE, code_at(clock.moment), purpose="pair")


async def test_attempts_are_recorded_with_user_purpose_and_time(verifier, clock, store):
    with pytest.raises(PairingError):
        await verifier.verify(ALICE, "abcdef", purpose="step-up")
    await verifier.verify(ALICE, code_at(clock.moment), purpose="step-up")
    async with store.read() as conn:
        rows = (await conn.execute(select(code_attempts).order_by(code_attempts.c.id))).all()
    assert [(r.user_id, r.purpose, r.accepted, r.at) for r in rows] == [
        (ALICE, "step-up", False, clock.moment),
        (ALICE, "step-up", True, clock.moment),
    ]


async def test_separate_secret_names_keep_separate_steps(store, clock):
    owner = CodeVerifier(store, SECRET, secret_name="owner")
    other = CodeVerifier(store, SECRET, secret_name="other")
    code = code_at(clock.moment)
    await owner.verify(ALICE, code, purpose="pair")
    await other.verify(ALICE, code, purpose="pair")


async def test_concurrent_uses_of_one_code_accept_exactly_one(store, database_url, clock):
    """Verifiers in separate stores (like web and worker) race for the very first step."""
    from bot.store.database import Store

    stores = [Store(database_url) for _ in range(5)]
    try:
        code = code_at(clock.moment)
        results = await asyncio.gather(
            *(CodeVerifier(s, SECRET).verify(ALICE, code, purpose="pair") for s in stores),
            return_exceptions=True,
        )
    finally:
        for s in stores:
            await s.close()
    accepted = [r for r in results if r is None]
    refused = [r for r in results if isinstance(r, PairingError)]
    assert len(accepted) == 1, results
    assert len(refused) == 4, results
