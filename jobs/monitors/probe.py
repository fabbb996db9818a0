"""Checking a monitor once: ``check(spec)`` runs the probe for its kind (probes/ beside this)
under a hard ceiling of ``spec.timeout_seconds`` and at most ``concurrency`` probes at once in each
event loop, and measures how long it took.

It never raises for the target's fault: whatever went wrong is a DOWN result with the reason in
a few words. A probe's own bug reads as DOWN too, with the traceback in the log, so that one bad
check does not stop the monitor's next ones.
"""

from __future__ import annotations

import asyncio
import logging
import time

from bot.monitors.monitor import CheckResult, MonitorKind, MonitorSpec
from jobs.monitors.probes import PerLoop, cert, cmd, elapsed_ms, http, set_ssl_context, tcp

__all__ = ["DEFAULT_CONCURRENCY", "check", "close", "set_concurrency", "set_ssl_context"]

logger = logging.getLogger(__name__)

PROBES = {
    MonitorKind.HTTP: http.check,
    MonitorKind.TCP: tcp.check,
    MonitorKind.CERT: cert.check,
    MonitorKind.CMD: cmd.check,
}
DEFAULT_CONCURRENCY = 256

_concurrency = DEFAULT_CONCURRENCY
_slots = PerLoop(lambda: asyncio.Semaphore(_concurrency))


def set_concurrency(limit: int) -> None:
    """At most ``limit`` probes at once in each event loop, from the next check on."""
    global _concurrency
    if limit < 1:
        raise ValueError(f"concurrency must be at least 1, not {limit}")
    _concurrency = limit
    _slots.clear()  # checks under way give their slot back to the semaphore they took it from


async def check(spec: MonitorSpec) -> CheckResult:
    """What one check of ``spec`` found; never raises but for cancellation."""
    async with _slots.get():  # the ceiling starts once a slot is ours, not while waiting
        started = time.perf_counter()
        try:
            async with asyncio.timeout(spec.timeout_seconds):
                return await PROBES[spec.kind](spec)
        except TimeoutError:
            return CheckResult.down(_too_slow(spec), elapsed_ms(started))
        except Exception:
            logger.exception("the %s probe failed on %s", spec.kind, spec.what())
            return CheckResult.down("the check itself failed (the log has why)")


async def close() -> None:
    """Let go of this event loop's pooled connections (call it before the loop ends)."""
    await http.close()


def _too_slow(spec: MonitorSpec) -> str:
    seconds = f"{spec.timeout_seconds:g} s"
    if spec.kind is MonitorKind.CMD:
        return f"did not finish within {seconds}"
    return f"no answer within {seconds}"
