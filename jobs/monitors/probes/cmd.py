"""The cmd probe: run a command line (split into words by ``shlex``, never given to a shell) and
judge its exit code and its output (stdout and stderr together, as a terminal shows them).

The command runs in a session of its own, so it and everything it starts share one process
group, killed as one when it is cancelled at the probe's ceiling and, after it exits, whatever
it left running (bot/tools/processes.py: ``kill_group``). Its stdin is /dev/null and its
environment has no ``AEGIS_*`` variable. Of its output the first and last OUTPUT_KEEP bytes are
kept, however much it prints.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from bot.monitors.monitor import CheckResult, MonitorSpec
from bot.tools.processes import CappedOutput, kill_group, start
from jobs.monitors.probes import clip, elapsed_ms

OUTPUT_KEEP = 32 * 1024  # of the head and as much of the tail: 64 KiB in all
READ_CHUNK = 65_536
DRAIN_GRACE = 1.0  # after it exits, how long its output may take to run dry
EXIT_POLL = 0.05
REAP_WITHIN = 3.0  # past the ceiling, at most this long to kill and reap it


async def check(spec: MonitorSpec) -> CheckResult:
    argv, problem = _argv(spec.target)
    if problem is not None:
        return CheckResult.down(problem)
    started = time.perf_counter()
    try:
        code, output = await _run(argv)
    except OSError as exc:
        return CheckResult.down(_not_started(argv, exc))
    return _judge(spec, code, output, elapsed_ms(started))


@dataclass(frozen=True)
class Ran:
    """A command run once under a ceiling: its exit code (None: stopped at the ceiling, or
    never started), the last line it printed, and why it could not start at all."""

    code: int | None
    last_line: str
    problem: str | None = None


async def run(command: str, ceiling: float, workdir: Path | None = None) -> Ran:
    """Run a command line once, as ``check`` does, in ``workdir`` (else the worker's own
    working folder), for what else watches commands (a process watch,
    jobs/monitors/processes.py)."""
    folder = workdir or Path.cwd()
    argv, problem = _argv(command, folder)
    if problem is not None:
        return Ran(None, "", problem)
    try:
        async with asyncio.timeout(ceiling):
            code, output = await _run(argv, folder)
    except TimeoutError:
        return Ran(None, f"(did not finish within {ceiling:g} s)")
    except OSError as exc:
        return Ran(None, "", _not_started(argv, exc))
    text = (output.head + output.tail).decode("utf-8", errors="replace")
    return Ran(code, _last_line(text) if text.strip() else "")


def _argv(command: str, workdir: Path | None = None) -> tuple[list[str], str | None]:
    try:
        argv = shlex.split(command)
    except ValueError as exc:  # "No closing quotation"
        return [], f"the command line cannot be read: {exc}"
    if not argv:
        return [], "the command line is empty"
    program = argv[0]
    if "/" in program and workdir is not None:  # ./build.sh: found where it runs
        program = str(workdir / program)
    if shutil.which(program) is None:
        return [], f"program not found: {argv[0]}"
    return argv, None


def _not_started(argv: list[str], exc: OSError) -> str:
    # found, yet not started: not executable, a bad interpreter line …
    return f"{argv[0]} could not be started: {exc.strerror or exc}"


async def _run(argv: list[str], workdir: Path | None = None) -> tuple[int, CappedOutput]:
    process = await _started(argv, workdir or Path.cwd())
    output = CappedOutput(OUTPUT_KEEP)
    reader = asyncio.create_task(_read(process.stdout, output))
    try:
        await _ended(process, reader)
    finally:  # at the ceiling (cancelled) and after it exited: nothing of it is left running
        reader.cancel()
        await _reaped(process)
        await asyncio.gather(reader, return_exceptions=True)
    return process.returncode, output


async def _started(argv: list[str], workdir: Path) -> asyncio.subprocess.Process:
    spawn = asyncio.ensure_future(_spawn(argv, workdir))
    try:
        return await asyncio.shield(spawn)
    except asyncio.CancelledError:
        # Cancelled while it was being started: stopped with its group, not left to asyncio,
        # which would kill the leader alone.
        with contextlib.suppress(Exception):
            await _reaped(await spawn)
        raise


async def _ended(process: asyncio.subprocess.Process, reader: asyncio.Task) -> None:
    """Until the command exited and its output ran dry, or DRAIN_GRACE after it exited when
    a child it left running holds the output open."""
    exited = asyncio.create_task(_exited(process))
    try:
        await asyncio.wait([reader, exited], return_when=asyncio.FIRST_COMPLETED)
        if reader.done():
            await process.wait()
        else:
            await asyncio.wait([reader], timeout=DRAIN_GRACE)
    finally:
        exited.cancel()


async def _exited(process: asyncio.subprocess.Process) -> None:
    # asyncio's process.wait() returns only once the output pipe is closed too, and a child
    # the command left running may hold it open; no event tells the exit alone, returncode does.
    while process.returncode is None:  # noqa: ASYNC110
        await asyncio.sleep(EXIT_POLL)


async def _reaped(process: asyncio.subprocess.Process) -> None:
    """Its whole group killed and the command reaped. Bounded: a process that left the group
    (setsid) may keep the pipe open, and asyncio's wait with it."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(REAP_WITHIN):
            await kill_group(process, grace=0)


async def _spawn(argv: list[str], workdir: Path) -> asyncio.subprocess.Process:
    return await start(argv, workdir)  # its own process group, killed as one


async def _read(stream: asyncio.StreamReader, output: CappedOutput) -> None:
    while chunk := await stream.read(READ_CHUNK):
        output.add(chunk)


def _judge(spec: MonitorSpec, code: int, output: CappedOutput, latency: float) -> CheckResult:
    text = (output.head + output.tail).decode("utf-8", errors="replace")
    if code != spec.expect_exit:
        problem = f"{_exit_words(code)}, expected {spec.expect_exit}"
    elif spec.output_contains is not None and spec.output_contains not in text:
        problem = f"'{clip(spec.output_contains, 60)}' not in its output"
    else:
        return CheckResult(True, latency, detail=f"exit {code} in {latency:.0f} ms")
    return CheckResult.down(f"{problem}: {_last_line(text)}", latency)


def _exit_words(code: int) -> str:
    if code >= 0:
        return f"exit code {code}"
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"killed by signal {-code}"


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return clip(lines[-1]) if lines else "(no output)"
