"""The ``aegis`` command run as a user runs it: a process of its own, with no ``AEGIS_*`` setting
of the test's but those given, and ports of its own (tests run side by side)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers.ports import free_port

AEGIS = [sys.executable, "-m", "aegis.cli"]


def aegis_environment(**env: str) -> dict[str, str]:
    """This process's environment without its ``AEGIS_*`` settings, with ``env``; the web and
    MCP ports are free ones unless ``env`` names them (the defaults may be taken by another
    test, or by an aegis the developer runs)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("AEGIS_")}
    environment.update(AEGIS_PORT=str(free_port()), AEGIS_MCP_PORT=str(free_port()))
    environment.update(env)
    return environment


def run_aegis(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    environment = aegis_environment(**env)
    return subprocess.run(
        AEGIS + args, cwd=cwd, env=environment, capture_output=True, text=True, timeout=60
    )
