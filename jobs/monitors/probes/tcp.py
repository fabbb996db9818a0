"""The tcp probe: connect to ``host:port`` and close again; up if the connection was made."""

from __future__ import annotations

import asyncio
import time

from bot.monitors.monitor import CheckResult, MonitorSpec
from jobs.monitors.probes import elapsed_ms, never_resolves, reason, split_host_port


async def check(spec: MonitorSpec) -> CheckResult:
    try:
        host, port = split_host_port(spec.target)
    except ValueError as exc:
        return CheckResult.down(str(exc))
    if never_resolves(host):
        return CheckResult.down(f"DNS lookup failed for {host}")
    started = time.perf_counter()
    try:
        transport, _ = await asyncio.get_running_loop().create_connection(
            asyncio.Protocol, host, port
        )
    except OSError as exc:
        return CheckResult.down(reason(exc, host), elapsed_ms(started))
    latency = elapsed_ms(started)
    transport.close()
    return CheckResult(True, latency, detail=f"connected in {latency:.0f} ms")
