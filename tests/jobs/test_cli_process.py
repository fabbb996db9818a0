"""A coding CLI's process, without the bot: the bounded line reader of its output, a CLI
cancelled while it starts a child leaving nothing running, and a CLI dying with a worker killed
by SIGKILL."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from bot.agents.profiles import HarnessKind
from jobs.harnesses import cli_process
from jobs.harnesses.cli import _command
from jobs.harnesses.cli_process import CliProcess, _lines
from jobs.harnesses.cli_specs import CLIS
from jobs.harnesses.cli_streams import ClaudeStream
from tests.helpers.cli_harness import FAKES, gone, profile
from tests.helpers.stack import eventually

REPO = Path(__file__).resolve().parent.parent.parent


async def test_a_line_too_long_is_dropped_and_counted_and_the_rest_read(monkeypatch):
    monkeypatch.setattr(cli_process, "MAX_LINE_BYTES", 10)
    monkeypatch.setattr(cli_process, "READ_CHUNK", 4)
    stream = asyncio.StreamReader()
    stream.feed_data(b'{"a": 1}\n' + b"x" * 25 + b"\n{}\nlast")
    stream.feed_eof()
    holder = CliProcess.__new__(CliProcess)
    holder.stdout_bytes = 0
    lines = [line async for line in _lines(stream, holder)]
    assert lines == [b'{"a": 1}', None, b"{}", b"last"]
    assert holder.stdout_bytes == 9 + 26 + 3 + 4


class Stretch:
    """Just enough of a RunContext for one CLI process."""

    def __init__(self, request: str) -> None:
        self.request = request
        self.effects = Counter()
        self.run = SimpleNamespace(id=0)

    def remaining(self) -> float:
        return 60.0

    async def checkpoint(self, step=None) -> None:
        pass

    async def step(self, what: str) -> None:
        pass


class Watching(ClaudeStream):
    """Claude's stream, telling when the CLI's first event arrives."""

    def __init__(self) -> None:
        super().__init__()
        self.started = asyncio.Event()

    def event(self, event: dict) -> list[str]:
        self.started.set()
        return super().event(event)


@pytest.mark.parametrize("stubborn", [False, True])
async def test_a_cli_cancelled_while_it_starts_a_child_leaves_nothing_running(tmp_path, stubborn):
    """The fake prints its first event, then starts its child: cancelled at moments from then
    on, the harness returns only once the CLI and its child are dead, not merely signalled."""
    request = "hang stubborn, spawn a child" if stubborn else "hang, spawn a child"
    command = claude_command(tmp_path)
    for index, delay in enumerate([0, 0, 0, 0.001, 0.001, 0.002, 0.003, 0.005, 0.01, 0.05]):
        workdir = tmp_path / str(index)
        workdir.mkdir()
        reader = Watching()
        process = CliProcess("claude", reader, Stretch(request), "tok")
        task = asyncio.create_task(process.run(command, workdir, dict(os.environ)))
        await reader.started.wait()
        await asyncio.sleep(delay)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        left = running_in(workdir)
        assert left == [], f"cancelled {delay}s after its first event, still running: {left}"


def running_in(workdir: Path) -> list[int]:
    """The processes working in ``workdir`` that are alive (not zombies)."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.cwd() == str(workdir) and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process.pid)
        except psutil.Error:  # gone meanwhile, or not ours to look at
            continue
    return found


def claude_command(tmp_path: Path) -> list[str]:
    """The fake claude's command line, as the harness would give it."""
    rundir = tmp_path / "claude-run"
    rundir.mkdir(exist_ok=True)
    kind = HarnessKind.CLAUDE_CODE
    argv, _ = _command(CLIS[kind], profile(kind, tmp_path), rundir, 8743, "tok-123")
    return [str(FAKES / "claude"), *argv]


# A worker killed outright: its CLI must not outlive it.

WORKER = """
import asyncio, os, sys
from collections import Counter
from types import SimpleNamespace
from jobs.harnesses.cli_process import CliProcess
from jobs.harnesses.cli_streams import ClaudeStream

class Stretch:
    request = "hang, spawn a child"
    effects = Counter()
    run = SimpleNamespace(id=0)
    def remaining(self):
        return 600.0
    async def checkpoint(self, step=None):
        pass
    async def step(self, what):
        pass

workdir, command = sys.argv[1], sys.argv[2:]
process = CliProcess("claude", ClaudeStream(), Stretch(), "tok")
asyncio.run(process.run(command, workdir, dict(os.environ)))
"""


async def test_a_cli_dies_with_a_worker_killed_by_sigkill(tmp_path):
    """A worker SIGKILLed mid-run runs no cleanup: the kernel kills its CLI (PR_SET_PDEATHSIG).
    The CLI's own child is not covered (see cli_process.py); it is killed here by hand."""
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux's")
    workdir = tmp_path / "work"
    workdir.mkdir()
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, str(workdir), *claude_command(tmp_path)], cwd=REPO
    )
    path = workdir / "fake-claude.jsonl"
    given = None
    try:
        given = await eventually(
            lambda: path.exists() and json.loads(path.read_text().splitlines()[0]), timeout=20
        )
        assert psutil.Process(given["pid"]).ppid() == worker.pid  # the wrapper became the CLI
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()
        await eventually(lambda: gone(given["pid"], reaped=False), timeout=10)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        if given is not None:  # the CLI's group: its child, and the CLI if the test failed
            with contextlib.suppress(ProcessLookupError):
                os.killpg(given["pgid"], signal.SIGKILL)
