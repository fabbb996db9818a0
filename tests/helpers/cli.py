"""The ``aegis`` command run as a user runs it: a process of its own, with no ``AEGIS_*`` setting
of the test's but those given."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

AEGIS = [sys.executable, "-m", "aegis.cli"]


def run_aegis(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("AEGIS_")}
    environment.update(env)
    return subprocess.run(
        AEGIS + args, cwd=cwd, env=environment, capture_output=True, text=True, timeout=60
    )
