"""Ports for the servers tests start, without a race between xdist workers."""

from __future__ import annotations

import itertools
import os
import random
import socket


def free_port() -> int:
    """A port nobody listens on, from this xdist worker's own range below the kernel's
    ephemeral ports: a port the kernel picks (bind to 0) could be picked again for another
    worker's test before this one binds it, and fail that test's start."""
    for _ in range(PORTS_PER_WORKER):
        port = next(_ports)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port from {_FIRST} to {_FIRST + PORTS_PER_WORKER - 1}")


PORTS_FROM = 20_000  # ephemeral ports start at 32768 on Linux (ip_local_port_range)
PORTS_PER_WORKER = 1_500  # eight workers fit below 32768
_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0) % 8
_FIRST = PORTS_FROM + _WORKER * PORTS_PER_WORKER
# Started at a random place in the range, so two test runs at once rarely meet.
_range = [*range(_FIRST, _FIRST + PORTS_PER_WORKER)]
_start = random.randrange(PORTS_PER_WORKER)
_ports = itertools.cycle(_range[_start:] + _range[:_start])
