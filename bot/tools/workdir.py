"""Work in the caller's working directory: run a shell command there (``shell.run``) and send
one of its files to the owner's chat (``files.send``).

The directory is the ``workdir`` aegis.yaml gives the agent of the caller's run, or the
calling agent's outside a run (``agents.<slug>.workdir``); an agent without one has neither
tool. A shell command can do anything its user can, so ``shell.run`` is irreversible: it waits
for a tap and a TOTP code. A command never outlives the run that asked for it (see
processes.py for how it is bounded).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import stat
import tempfile
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, BinaryIO

from bot.chat.outgoing import OUTGOING
from bot.errors import ToolRefused
from bot.timeutil import now
from bot.tools.processes import run_bounded

if TYPE_CHECKING:
    from bot.actions.call import Caller, ToolFunction
    from bot.agents.agent_run import AgentRun
    from bot.core import Platform

MAX_FILE_BYTES = 50 * 1024 * 1024  # what a bot may upload to Telegram
COPY_CHUNK = 1024 * 1024


async def caller_run(platform: Platform, caller: Caller) -> AgentRun | None:
    if caller.run_id is None:
        return None
    run = await platform.runs.get(caller.run_id)
    if run is None:
        raise ToolRefused(f"there is no run {caller.run_id}")
    return run


def ceiling(run: AgentRun | None, seconds: float) -> float:
    """``seconds``, but never past the deadline of the run the call belongs to."""
    if run is None or run.deadline_at is None:
        return seconds
    left = (run.deadline_at - now()).total_seconds()
    if left <= 0:
        raise ToolRefused(f"run {run.id} is past its deadline, so nothing was started")
    return min(seconds, left)


def working_directory(platform: Platform, slug: str) -> Path:
    profile = platform.agents.get(slug)
    workdir = profile.workdir if profile is not None else None
    if workdir is None:
        raise ToolRefused(
            f"{slug} has no working directory; set agents.{slug}.workdir in aegis.yaml"
        )
    if not workdir.is_dir():
        raise ToolRefused(
            f"{slug}'s working directory {workdir} is not a directory "
            f"(agents.{slug}.workdir in aegis.yaml)"
        )
    return workdir


def inside(workdir: Path, path: str) -> Path:
    """``path`` resolved inside ``workdir``, symlinks followed; refused if it leads out.

    Containment is checked before existence, so a refusal says nothing of what is outside."""
    if PurePath(path).is_absolute():
        raise ToolRefused("the path must be relative to the working directory")
    root = workdir.resolve()
    try:
        target = (root / path).resolve()
    except (OSError, RuntimeError, ValueError):  # a symlink loop, a NUL byte
        raise ToolRefused(f"{path!r} cannot be resolved") from None
    if not target.is_relative_to(root):
        raise ToolRefused(f"{path!r} leads outside the working directory")
    if not target.exists():
        raise ToolRefused(f"there is no file {path!r} in the working directory")
    return target


def keep_copy(source: Path, outgoing: Path) -> tuple[str, int]:
    """Copy ``source`` to ``outgoing/<sha256>/<its name>``; returns that place under
    ``outgoing`` and the size. The delivery sends this copy, so changing the file after the
    call cannot change what arrives."""
    with _open_regular(source) as file:
        outgoing.mkdir(parents=True, exist_ok=True, mode=0o700)
        digest, size = hashlib.sha256(), 0
        with tempfile.NamedTemporaryFile(dir=outgoing, prefix=".copy-", delete=False) as copy:
            try:
                while chunk := file.read(COPY_CHUNK):
                    size += len(chunk)
                    if size > MAX_FILE_BYTES:  # it grew while being read
                        raise ToolRefused(_too_big(source.name, size))
                    digest.update(chunk)
                    copy.write(chunk)
            except BaseException:
                os.unlink(copy.name)
                raise
    folder = outgoing / digest.hexdigest()
    folder.mkdir(exist_ok=True, mode=0o700)
    os.replace(copy.name, folder / source.name)
    return f"{folder.name}/{source.name}", size


def _open_regular(source: Path) -> BinaryIO:
    """``source`` open for reading, if it is a regular file no bigger than a bot may send."""
    try:  # not following a symlink put in its place since; a FIFO must not block the open
        fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise ToolRefused(f"{source.name} cannot be read: {exc.strerror}") from None
    status = os.fstat(fd)
    if not stat.S_ISREG(status.st_mode) or status.st_size > MAX_FILE_BYTES:
        os.close(fd)
        if not stat.S_ISREG(status.st_mode):
            raise ToolRefused(f"{source.name} is not a regular file")
        raise ToolRefused(_too_big(source.name, status.st_size))
    return os.fdopen(fd, "rb")


def _too_big(name: str, size: int) -> str:
    return f"{name} is {size:,} bytes; a bot can send at most {MAX_FILE_BYTES:,}"


def toolbox(platform: Platform) -> dict[str, ToolFunction]:
    async def run_shell(args: dict, caller: Caller) -> dict:
        run = await caller_run(platform, caller)
        workdir = working_directory(platform, run.agent if run else caller.agent)
        timeout = ceiling(run, args.get("timeout_seconds", 60))
        finished = await run_bounded(["/bin/sh", "-c", args["command"]], workdir, seconds=timeout)
        return finished.as_dict()

    async def send_file(args: dict, caller: Caller) -> dict:
        run = await caller_run(platform, caller)
        source = inside(
            working_directory(platform, run.agent if run else caller.agent), args["path"]
        )
        outgoing = platform.settings.data_dir / OUTGOING
        stored, size = await asyncio.to_thread(keep_copy, source, outgoing)
        place = await platform.topics.place(caller.chat_id, caller.agent)
        await platform.outbox.send_file(
            place.chat_id, stored, caption=args.get("caption"), thread_id=place.thread_id
        )
        return {"sent": source.name, "bytes": size}

    return {"shell.run": run_shell, "files.send": send_file}
