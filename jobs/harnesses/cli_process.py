"""One coding-CLI process, from start to reaped: fed its request, its JSON stream read with bounded
memory, stopped with its whole process group, and its end put into words.

A CLI is started in a session of its own (``start_new_session``), so it and everything it starts
share one process group, killed as one: SIGTERM, then SIGKILL after a short grace, on
cancellation (the runner cancels at the deadline and on /cancel) or at our own ceiling, and
SIGKILL to whatever it left behind when it exits. The CLI is always waited for: no zombie.

A worker killed outright (SIGKILL, the OOM killer) runs no cleanup, and a CLI in a session of
its own would outlive it. So on Linux the CLI is started through a tiny exec wrapper
(PDEATHSIG_WRAPPER) that asks the kernel to SIGKILL it when its parent dies (prctl
PR_SET_PDEATHSIG) and then execs the CLI in its place: same pid, and the setting survives
exec. Not preexec_fn: it runs Python in the forked child of a threaded worker, which the
subprocess docs warn may deadlock. "Parent" is the thread that forked it: asyncio starts it from
the event loop's thread, which in a worker is Dramatiq's loop thread, alive as long as the
worker. Only the CLI itself is covered: its own children are not (PDEATHSIG is per process and
not inherited across fork), so a child it started outlives a SIGKILLed worker, in the CLI's
process group, until something kills that group.

The same wrapper raises the CLI's OOM score and, where the worker has a delegated cgroup v2,
moves it into a cgroup of its own with a memory cap, before it execs: so the CLI and all it
starts are born there (jobs/harnesses/cli_limits.py).

stdout is read in chunks and split into lines here, not by ``StreamReader.readline``, so that
one line longer than MAX_LINE_BYTES is dropped and counted instead of failing the run; of
stderr only the tail is kept, for the error message.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from bot.agents.ledger import OK
from bot.errors import HarnessFailed
from bot.tools.processes import kill_group
from jobs.harness import RunContext
from jobs.harnesses.cli_limits import AGENT_OOM_SCORE_ADJ, RunCgroups, this_worker
from jobs.harnesses.cli_streams import StreamReader

logger = logging.getLogger(__name__)

KILL_GRACE = 0.8  # SIGTERM to SIGKILL: even a CLI that ignores SIGTERM dies within a second
CEILING_GRACE = 1.0  # after our own ceiling, how long the runner has to call it timed out
DRAIN_GRACE = 1.0  # after the CLI exits, how long its stdout may take to run dry
STEP_EVERY = 1.0  # seconds between progress steps saved to the run's row
READ_CHUNK = 65_536
MAX_LINE_BYTES = 8 * 1024 * 1024  # one JSON event; a longer line is dropped and counted
STDERR_KEEP_BYTES = 16_384  # the tail of stderr kept for an error message
STDERR_SHOWN_LINES = 5
STDERR_SHOWN_CHARS = 600
RESULT_CHARS = 200_000  # a longer answer is cut, with a note of how much


# Run as ``python -I -S -c PDEATHSIG_WRAPPER <worker pid> <oom score> <cgroup.procs|""> <cli>
# <args…>``: arm PR_SET_PDEATHSIG (1) with SIGKILL (9), then check the parent is still the worker
# (if it died before prctl, the signal would never come), raise its OOM score and enter the run's
# cgroup (each a best effort: the CLI runs without), then become the CLI. -I -S: no site, no
# environment, a quick start.
PDEATHSIG_WRAPPER = """\
import ctypes, os, sys
if ctypes.CDLL(None, use_errno=True).prctl(1, 9, 0, 0, 0) != 0:
    sys.exit("aegis: PR_SET_PDEATHSIG failed: " + os.strerror(ctypes.get_errno()))
if os.getppid() != int(sys.argv[1]):
    sys.exit("aegis: the worker died while its CLI was being started")
for path, value in (("/proc/self/oom_score_adj", sys.argv[2]), (sys.argv[3], "0")):
    try:
        if path:
            with open(path, "w") as file:
                file.write(value)
    except OSError:
        pass
try:
    os.execv(sys.argv[4], sys.argv[4:])
except OSError as exc:
    sys.exit(f"aegis: {sys.argv[4]} could not be started: {exc.strerror}")
"""


def _dies_with_worker(command: list[str], cgroup: Path | None = None) -> list[str]:
    """``command`` wrapped so the kernel kills it if the worker dies, with its OOM score raised
    and in the run's ``cgroup`` where there is one (Linux only)."""
    if not sys.platform.startswith("linux"):
        return command
    procs = str(cgroup / "cgroup.procs") if cgroup is not None else ""
    score = str(AGENT_OOM_SCORE_ADJ)
    wrapper = [sys.executable, "-I", "-S", "-c", PDEATHSIG_WRAPPER, str(os.getpid())]
    return [*wrapper, score, procs, *command]


class CliProcess:
    """One CLI process: started, read, stopped and reaped."""

    def __init__(
        self,
        name: str,
        reader: StreamReader,
        ctx: RunContext,
        token: str,
        prompt: str | None = None,
        cgroups: RunCgroups | None = None,
        reads: Callable[[str], bool] = lambda tool: False,
    ) -> None:
        self.name = name  # the CLI's, for what the owner is told
        self.reads = reads  # whether a tool, as the stream names it, only reads (else: a change)
        self.cgroups = cgroups or this_worker()
        self.reader = reader
        self.ctx = ctx
        self.prompt = ctx.request if prompt is None else prompt  # what it reads on stdin
        self.token = token  # only to keep it out of anything shown
        self.stdout_bytes = 0
        self.oversized = 0
        self.stderr = bytearray()
        self.stderr_bytes = 0
        self.last_step_at = float("-inf")
        self.status = "not started"  # how it ended, in words for the ledger (bot/agents/ledger.py)

    async def run(self, command: list[str], workdir: Path, env: dict[str, str]) -> str:
        cgroup = await asyncio.to_thread(self.cgroups.leaf_for, self.ctx.run.id)
        try:
            return await self._run(_dies_with_worker(command, cgroup), workdir, env)
        finally:
            self.cgroups.remove(cgroup)  # the whole group is dead and reaped by now

    async def _run(self, command: list[str], workdir: Path, env: dict[str, str]) -> str:
        spawn = asyncio.ensure_future(self._spawn(command, workdir, env))
        try:
            process = await asyncio.shield(spawn)
        except asyncio.CancelledError:
            # Cancelled while it was being started: it is stopped like any other, not left
            # to asyncio, which would kill the CLI alone and not its group.
            with contextlib.suppress(HarnessFailed):
                await kill_group(await spawn, grace=0)
            raise
        self.status = "cancelled"  # unless it comes to an end of its own
        pumps = [
            asyncio.create_task(self._feed(process)),
            asyncio.create_task(self._read_stdout(process)),
            asyncio.create_task(self._read_stderr(process)),
        ]
        try:
            await self._wait(process, pumps)
        finally:
            # Cancelled (the deadline, /cancel) while it runs: SIGTERM first. Exited: SIGKILL
            # to whatever it left running in its group.
            grace = KILL_GRACE if process.returncode is None else 0
            await kill_group(process, grace=grace)
            await asyncio.wait(pumps, timeout=DRAIN_GRACE)  # what is left in the pipes
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
        return self._outcome(process.returncode)

    async def _spawn(
        self, command: list[str], workdir: Path, env: dict[str, str]
    ) -> asyncio.subprocess.Process:
        try:
            return await asyncio.create_subprocess_exec(
                *command,
                cwd=workdir,
                env=env,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,  # its own process group, killed as one
            )
        except OSError as exc:
            raise HarnessFailed(
                f"{self.name} could not be started ({type(exc).__name__}: {exc.strerror})"
            ) from None

    async def _wait(self, process: asyncio.subprocess.Process, pumps: list) -> None:
        ceiling = max(self.ctx.remaining(), 0.0)
        try:
            async with asyncio.timeout(ceiling):
                await process.wait()
        except TimeoutError:
            self.status = "timeout"
            await kill_group(process, grace=KILL_GRACE)
            # The runner cancels us at the same deadline and calls the run timed out; this
            # ceiling only matters if it cannot, so it leaves the runner a moment to.
            await asyncio.sleep(CEILING_GRACE)
            raise HarnessFailed(
                f"{self.name} was stopped at the run's deadline, after {ceiling:.0f}s"
            ) from None
        # Exited: what it printed last may still be in the pipe (unless a child holds it).
        await asyncio.wait(pumps[1:], timeout=DRAIN_GRACE)

    async def _feed(self, process: asyncio.subprocess.Process) -> None:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            process.stdin.write(self.prompt.encode("utf-8"))
            await process.stdin.drain()
            process.stdin.close()

    async def _read_stdout(self, process: asyncio.subprocess.Process) -> None:
        async for line in _lines(process.stdout, self):
            if line is None:
                self.oversized += 1
                continue
            ended = len(self.reader.calls)
            steps = self.reader.feed(line)
            if len(self.reader.calls) != ended:  # a tool result may end a call and show no step
                self._count_calls()
            for step in steps:
                await self._progress(step)

    async def _read_stderr(self, process: asyncio.subprocess.Process) -> None:
        while chunk := await process.stderr.read(READ_CHUNK):
            self.stderr_bytes += len(chunk)
            self.stderr += chunk
            del self.stderr[:-STDERR_KEEP_BYTES]

    async def _progress(self, step: str) -> None:
        """A step for the run's message, saved at most every STEP_EVERY seconds."""
        moment = asyncio.get_running_loop().time()
        if moment - self.last_step_at < STEP_EVERY:
            return
        self.last_step_at = moment
        step = self._scrub(step)
        try:
            await self.ctx.checkpoint(step)
            await self.ctx.step(step)
        except Exception:  # progress is worth showing, never worth stopping the CLI for
            logger.warning("run %s: progress not saved", self.ctx.run.id, exc_info=True)

    def _outcome(self, returncode: int | None) -> str:
        reader, name = self.reader, self.name
        self._count_calls()
        if returncode != 0:
            self.status = f"exit {returncode}"
            why = f"{name} {_exit_words(returncode)}"
            if reader.failure:
                why += f": {reader.failure}"
            raise HarnessFailed(self._scrub(why + self._stderr_words()))
        if self.stdout_bytes == 0:
            self.status = "no output"
            raise HarnessFailed(self._scrub(f"{name} printed nothing" + self._stderr_words()))
        if reader.failure:
            self.status = "failure reported"
            raise HarnessFailed(self._scrub(f"{name} reported a failure: {reader.failure}"))
        failed = [call for call in reader.calls if call.failed]
        changes = [call for call in reader.calls if not self.reads(call.tool)]
        if failed and len(failed) == len(reader.calls):
            # The completed no-op: every call it made was refused or failed, or never reached
            # aegis, and a run that changed nothing is not reported done (design.md).
            self.status = "no call worked"
            raise HarnessFailed(
                self._scrub(
                    f"{name} ended, but none of the {len(failed)} tool calls it made went "
                    f"through; the last: {failed[-1].words()}"
                )
            )
        if changes and all(call.failed for call in changes):
            # It read, then tried to change something, and nothing it tried was done.
            self.status = "no change went through"
            raise HarnessFailed(
                self._scrub(
                    f"{name} ended, but none of the {len(changes)} changes it tried went "
                    f"through; the last: {changes[-1].words()}"
                )
            )
        answer = reader.answer()
        if answer is None:
            self.status = "unreadable output"
            raise HarnessFailed(
                f"the output of {name} could not be read: {reader.events} events, "
                f"{reader.malformed + self.oversized} unreadable lines, and no result"
            )
        self.status = OK
        return self._scrub(_cap(answer))

    def _count_calls(self) -> None:
        """The run's effects: the CLI's calls that changed something, those that only read,
        and those that did not work."""
        worked = [call for call in self.reader.calls if not call.failed]
        changed = sum(not self.reads(call.tool) for call in worked)
        self.ctx.effects["changes_made"] = changed
        self.ctx.effects["reads"] = len(worked) - changed
        self.ctx.effects["calls_failed"] = len(self.reader.calls) - len(worked)

    def _stderr_words(self) -> str:
        lines = self.stderr.decode("utf-8", errors="replace").strip().splitlines()
        if not lines:
            return ""
        shown = "\n".join(lines[-STDERR_SHOWN_LINES:])
        cut = (
            self.stderr_bytes > len(self.stderr)
            or len(lines) > STDERR_SHOWN_LINES
            or len(shown) > STDERR_SHOWN_CHARS
        )
        shown = shown[-STDERR_SHOWN_CHARS:]
        return f"; the {'end' if cut else 'whole'} of its stderr: {shown}"

    def _scrub(self, text: str) -> str:
        """Whatever the CLI echoed, the token never reaches the chat or a log."""
        return text.replace(self.token, "[token]")


async def _lines(stream: asyncio.StreamReader, process: CliProcess):
    """Lines of ``stream``; None for a line longer than MAX_LINE_BYTES, which is not kept."""
    pending = bytearray()
    dropping = False
    while chunk := await stream.read(READ_CHUNK):
        process.stdout_bytes += len(chunk)
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            if dropping:
                dropping = False
                yield None
            else:
                pending += chunk[start:end]
                yield bytes(pending)
            pending.clear()
            start = end + 1
        if not dropping:
            pending += chunk[start:]
            if len(pending) > MAX_LINE_BYTES:
                pending.clear()
                dropping = True
    if dropping:
        yield None
    elif pending:
        yield bytes(pending)


def _exit_words(returncode: int | None) -> str:
    if returncode is not None and returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


def _cap(answer: str) -> str:
    if len(answer) <= RESULT_CHARS:
        return answer
    cut = len(answer) - RESULT_CHARS
    return answer[:RESULT_CHARS] + f"\n… [{cut} more characters cut]"
