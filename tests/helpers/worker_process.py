"""A Dramatiq worker in an OS process of its own, for tests that kill it (SIGKILL) mid-job.

    python -m tests.helpers.worker_process <redis namespace>

It is ``aegis worker`` (the same ``start_worker``) but on the test's own Redis namespace, which
``aegis worker`` cannot be pointed at. Settings come from the ``AEGIS_*`` environment the test
gives it (``environment(settings)``). It prints ``ready`` once its consumers run, and stops
cleanly on SIGTERM.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from bot.config.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
READY = "ready"


def environment(settings: Settings) -> dict[str, str]:
    """The ``AEGIS_*`` variables that give a child process exactly these settings."""
    variables = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("AEGIS_") or key.startswith("AEGIS_TEST_")
    }
    for name, value in settings.model_dump().items():
        if value is not None:
            variables[f"AEGIS_{name.upper()}"] = _text(value)
    return variables


def _text(value: Any) -> str:
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, frozenset | set | list | tuple):
        return ",".join(str(item) for item in sorted(value))
    return str(value)


def start(settings: Settings, namespace: str, log: Path) -> subprocess.Popen:
    """Start a worker process; it has printed ``ready`` when ``wait_ready`` returns."""
    return subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.worker_process", namespace],
        cwd=ROOT,
        env=environment(settings),
        stdout=subprocess.PIPE,
        stderr=log.open("a"),
        text=True,
    )


class Workers:
    """Worker processes a test starts (``await workers.start()``) and may kill; whatever is
    still running at ``close`` is stopped."""

    def __init__(self, settings: Settings, namespace: str, log: Path) -> None:
        self.settings, self.namespace, self.log = settings, namespace, log
        self.started: list[subprocess.Popen] = []

    async def start(self) -> subprocess.Popen:
        import asyncio

        process = start(self.settings, self.namespace, self.log)
        self.started.append(process)
        await asyncio.to_thread(wait_ready, process)
        return process

    def close(self) -> None:
        for process in self.started:
            if process.poll() is None:
                process.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(20)
            if process.poll() is None:
                process.kill()
                process.wait()


def wait_ready(process: subprocess.Popen) -> None:
    """Block until the worker says it consumes (or fail with how it ended)."""
    line = process.stdout.readline().strip()
    if line != READY:
        raise AssertionError(f"the worker process did not start (exit {process.poll()}): {line}")


def main(namespace: str) -> int:
    from aegis.processes import start_worker
    from jobs import load_actors

    settings = Settings(_env_file=None)
    logging.basicConfig(
        level=settings.log_level,
        stream=sys.stderr,
        format=f"%(asctime)s worker {os.getpid()} %(name)s %(levelname)s %(message)s",
    )
    broker = load_actors(settings, settings.redis_url, namespace=namespace)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    worker = start_worker(settings, None, broker)
    print(READY, flush=True)
    while not stop.wait(0.5):
        pass
    worker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
