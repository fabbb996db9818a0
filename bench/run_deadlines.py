"""The second part of bench/runs.py: how late a hung run is stopped (run by it, with its
aegis; see its docstring). Runs that hang past their 1 s deadline, a script and the fake CLIs,
a few at a time; for each, how long after its deadline it was marked timed out and the owner
told, and, for the CLIs, whether any process they started outlived them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
from capture import with_store
from fullstack import percentile
from sqlalchemy import select

from bot.store.tables import agent_runs

if TYPE_CHECKING:
    from runs import Emulator, Seen

HUNG_SLEEP = 30  # seconds the hung script sleeps, far past its deadline
CLI_VARIANTS = (  # what the fake CLI is asked (tests/fakes/fakecli.py), deadline 1 s
    ("CLI (fake claude) hangs, dies on SIGTERM", "/run hungcli hang, spawn a child"),
    ("CLI (fake claude) hangs, ignores SIGTERM", "/run hungcli hang stubborn, spawn a child"),
)
ENDED = re.compile(r"^Run #(\d+) (timed out|failed|was cancelled): ")


def run_ended(seen: Seen) -> bool:
    return seen.reply_to_text is not None and ENDED.match(seen.text) is not None


async def hung_runs(emulator: Emulator, text: str, count: int, parallel: int) -> dict[int, Seen]:
    """Start ``count`` runs, ``parallel`` at a time; each one's "ended" reply by run id."""
    ended: dict[int, Seen] = {}
    for start in range(0, count, parallel):
        batch = min(parallel, count - start)
        arrived = emulator.expect(run_ended, batch)
        for _ in range(batch):
            emulator.write(text)
        for seen in await asyncio.wait_for(arrived, timeout=HUNG_SLEEP + 30):
            ended[int(ENDED.match(seen.text).group(1))] = seen
    return ended


async def lateness(database_url: str, ended: dict[int, Seen]) -> dict[str, list[float]]:
    async def rows(store):
        async with store.read() as conn:
            query = select(agent_runs).where(agent_runs.c.id.in_(ended))
            return (await conn.execute(query)).all()

    marked, told, statuses = [], [], {}
    for row in await with_store(database_url, rows):
        statuses[row.status] = statuses.get(row.status, 0) + 1
        marked.append((row.finished_at - row.deadline_at).total_seconds() * 1000)
        seen_at = datetime.fromtimestamp(ended[row.id].wall, UTC)
        told.append((seen_at - row.deadline_at).total_seconds() * 1000)
    return {"marked timed out": marked, "owner told": told, "statuses": statuses}


def distribution(values: list[float]) -> str:
    return "".join(f"{percentile(values, q):8.0f}" for q in (0.0, 0.5, 0.9, 0.99, 1.0))


async def bench_deadlines(args, emulator: Emulator, database_url: str, workdir: Path) -> dict:
    variants = [("script: sleep 30 s, deadline 1 s", "/run hung sleep", args.hung)]
    variants += [(name, text, args.hung_cli) for name, text in CLI_VARIANTS]
    variants = [variant for variant in variants if variant[2] > 0]
    results = {}
    print(f"{'ms after the deadline':48}{'min':>8}{'p50':>8}{'p90':>8}{'p99':>8}{'max':>8}")
    for name, text, count in variants:
        ended = await hung_runs(emulator, text, count, args.parallel)
        found = await lateness(database_url, ended)
        results[name] = found
        statuses = ", ".join(f"{n} {s}" for s, n in sorted(found["statuses"].items()))
        print(f"{name} ({statuses}, {args.parallel} at a time)")
        for what, label in (
            ("marked timed out", "marked timed out (finished_at - deadline_at)"),
            ("owner told", "owner told (its reply seen - deadline_at)"),
        ):
            print(f"  {label:46}{distribution(found[what])}")
        if "CLI" in name:
            alive = cli_processes_alive(workdir)
            print(f"  CLI processes and their children still alive after the runs: {alive}")
    return results


def cli_processes_alive(workdir: Path) -> int:
    """The fake CLI records its pid and its child's; count those not gone (zombies count)."""
    pids = set()
    for line in (workdir / "fake-claude.jsonl").read_text().splitlines():
        entry = json.loads(line)
        pids.update(pid for pid in (entry.get("pid"), entry.get("child_pid")) if pid)
    alive = 0
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive += 1
    return alive
