"""The cert probe: a TLS handshake with ``host:port`` (443 when no port is given), verified in
full (the chain up to a trusted root, and the name), then the days left before the peer's
certificate expires. A failed verification is down with OpenSSL's reason; so is a certificate
with fewer than ``warn_days`` days left."""

from __future__ import annotations

import asyncio
import ssl
import time
from datetime import UTC, datetime

from bot.monitors.monitor import CheckResult, MonitorSpec
from bot.timeutil import now
from jobs.monitors.probes import elapsed_ms, never_resolves, reason, split_host_port, ssl_context

DEFAULT_PORT = 443


async def check(spec: MonitorSpec) -> CheckResult:
    try:
        host, port = split_host_port(spec.target, DEFAULT_PORT)
    except ValueError as exc:
        return CheckResult.down(str(exc))
    if never_resolves(host):
        return CheckResult.down(f"DNS lookup failed for {host}")
    started = time.perf_counter()
    try:
        expires = await _expiry(host, port)
    except OSError as exc:  # ssl.SSLError too
        return CheckResult.down(reason(exc, host), elapsed_ms(started))
    return _judge(spec, expires, elapsed_ms(started))


async def _expiry(host: str, port: int) -> datetime | None:
    """When the certificate ``host`` shows expires, read after a verified handshake; None
    when the handshake was not verified."""
    transport, _ = await asyncio.get_running_loop().create_connection(
        asyncio.Protocol, host, port, ssl=ssl_context(), server_hostname=host
    )
    try:
        peer = transport.get_extra_info("ssl_object").getpeercert()
    finally:
        transport.close()
    if "notAfter" not in peer:  # a context that does not verify shows an empty certificate
        return None
    return datetime.fromtimestamp(ssl.cert_time_to_seconds(peer["notAfter"]), UTC)


def _judge(spec: MonitorSpec, expires: datetime | None, latency: float) -> CheckResult:
    if expires is None:
        return CheckResult.down(
            "TLS: the certificate was not verified, so its expiry is unknown", latency
        )
    days = (expires - now()).days  # whole days, rounded down
    if days < spec.warn_days:
        when = "today" if days < 1 else f"in {_days(days)}"
        return CheckResult.down(f"certificate expires {when} ({expires.date()})", latency)
    return CheckResult(True, latency, detail=f"{_days(days)} left")


def _days(days: int) -> str:
    return "1 day" if days == 1 else f"{days} days"
