"""One bounded subprocess, for the tools that run commands (shell.run, deploy.run).

The command starts in a session of its own (``start_new_session``), so it and everything it
starts share one process group, stopped as one: SIGTERM, then SIGKILL after a short grace, at
its ceiling or when the call is cancelled, and SIGKILL to whatever it left running when it
exits. Nothing it started outlives the call, and it is always reaped.

Its stdin is /dev/null (nobody is there to type), its environment has no ``AEGIS_*`` variable
(those are aegis's own settings and secrets), and its output (stdout and stderr together, as a
terminal shows them) is read as it comes into a bounded buffer: the first and last
``KEEP_BYTES``, with a count of what was cut between them (design: what survives the cap is
the payload, with a note of what was cut).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from dataclasses import dataclass
from pathlib import Path

from bot.errors import ToolRefused

KEEP_BYTES = 6 * 1024  # of the output's head, and as much of its tail: both fit a tool result
READ_CHUNK = 65_536
KILL_GRACE = 0.8  # SIGTERM to SIGKILL
DRAIN_GRACE = 1.0  # after the command exits, how long its output may take to run dry
GROUP_GONE_WITHIN = 2.0  # seconds of SIGKILLs again until nothing of the group is alive
GROUP_POLL = 0.01


@dataclass(frozen=True)
class Finished:
    exit_code: int | None  # negative: killed by that signal
    output: str
    timed_out: bool
    cut_bytes: int

    def as_dict(self) -> dict:
        return {
            "exit_code": self.exit_code,
            "output": self.output,
            "timed_out": self.timed_out,
            "cut_bytes": self.cut_bytes,
        }


class CappedOutput:
    """The first ``keep`` bytes of a stream and its last ``keep``, and how many fell between."""

    def __init__(self, keep: int = KEEP_BYTES) -> None:
        self.keep = keep
        self.head = bytearray()
        self.tail = bytearray()
        self.cut_bytes = 0

    def add(self, chunk: bytes) -> None:
        room = self.keep - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        self.tail += chunk
        if len(self.tail) > self.keep:
            self.cut_bytes += len(self.tail) - self.keep
            del self.tail[: -self.keep]

    def text(self) -> str:
        head = self.head.decode("utf-8", errors="replace")
        tail = self.tail.decode("utf-8", errors="replace")
        if not self.cut_bytes:
            return head + tail
        return f"{head}\n… [{self.cut_bytes:,} bytes cut here] …\n{tail}"


def clean_environment(workdir: Path) -> dict[str, str]:
    """This process's environment without aegis's own variables; PWD is the workdir (a shell's
    ``pwd`` believes PWD when it names the directory it is in)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("AEGIS_")}
    env["PWD"] = str(workdir)
    return env


async def run_bounded(argv: list[str], workdir: Path, *, seconds: float) -> Finished:
    """Run ``argv`` (no shell) in ``workdir`` for at most ``seconds``.

    Raises ToolRefused when it cannot be started (no such program, not executable)."""
    spawn = asyncio.ensure_future(_spawn(argv, workdir))
    try:
        process = await asyncio.shield(spawn)
    except asyncio.CancelledError:
        # Cancelled while it was being started: stopped with its group, not left to asyncio,
        # which would kill the leader alone.
        with contextlib.suppress(Exception):
            await kill_group(await spawn, grace=0)
        raise
    output = CappedOutput()
    reader = asyncio.create_task(_read(process.stdout, output))
    timed_out = False
    try:
        try:
            async with asyncio.timeout(seconds):
                await process.wait()
        except TimeoutError:
            timed_out = True
        else:  # what it printed last may still be in the pipe (unless a child holds it)
            await asyncio.wait([reader], timeout=DRAIN_GRACE)
    finally:  # at the ceiling, on cancellation, and after it exited: its group goes too
        await kill_group(process, grace=KILL_GRACE if process.returncode is None else 0)
        await asyncio.wait([reader], timeout=DRAIN_GRACE)
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
    return Finished(process.returncode, output.text(), timed_out, output.cut_bytes)


async def start(argv: list[str], workdir: Path) -> asyncio.subprocess.Process:
    """A program (never a shell) in its own process group, stopped as one, with a clean
    environment, no input, and its output and errors on one pipe; OSError if it cannot start."""
    return await asyncio.create_subprocess_exec(
        *argv,
        cwd=workdir,
        env=clean_environment(workdir),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )


async def _spawn(argv: list[str], workdir: Path) -> asyncio.subprocess.Process:
    try:
        return await start(argv, workdir)
    except OSError as exc:
        raise ToolRefused(f"{argv[0]!r} could not be started: {exc.strerror}") from None


async def _read(stream: asyncio.StreamReader, output: CappedOutput) -> None:
    while chunk := await stream.read(READ_CHUNK):
        output.add(chunk)


async def kill_group(process: asyncio.subprocess.Process, *, grace: float) -> None:
    """Stop the process and everything it started: SIGTERM to its group (when ``grace``),
    then SIGKILL, until no living member of the group is left."""
    try:
        if grace > 0 and process.returncode is None:
            _signal_group(process.pid, signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(process.wait()), timeout=grace)
    finally:  # even if cancelled again meanwhile
        _signal_group(process.pid, signal.SIGKILL)
    await process.wait()  # reaped: no zombie of ours
    # A SIGKILL is sent, not waited for: a child may still be running, exiting, a moment after
    # it (2 to 5 CLI runs in 100 here), and nothing started must outlive its caller. So the
    # group is signalled again until none of it is alive. Dead children are zombies until init
    # reaps them and still count for killpg, so /proc tells the living from the dead; without
    # /proc the bound ends the wait.
    for _ in range(round(GROUP_GONE_WITHIN / GROUP_POLL)):
        if living_members(process.pid) == 0 or not _signal_group(process.pid, signal.SIGKILL):
            return
        await asyncio.sleep(GROUP_POLL)


def _signal_group(group: int, signum: int) -> bool:
    """Signal the whole process group; False once no member of it is left (or it is not
    ours to signal). The group's id is not reused while any member lives."""
    try:
        os.killpg(group, signum)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def living_members(group: int) -> int | None:
    """How many processes of ``group`` are alive, zombies not counted; None without /proc."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    living = 0
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as file:
                stat = file.read()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        # "pid (comm) state ppid pgrp …"; comm may hold spaces and parentheses.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 2 and fields[2] == str(group).encode() and fields[0] != b"Z":
            living += 1
    return living
