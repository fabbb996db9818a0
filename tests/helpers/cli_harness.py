"""What the tests of the coding-CLI harness share: where the fake CLIs are, an agent profile to
build a command line for, and whether a process is gone."""

from __future__ import annotations

from pathlib import Path

import psutil

from bot.agents.profiles import AgentProfile, HarnessKind

FAKES = Path(__file__).resolve().parent.parent / "fakes"


def profile(kind: HarnessKind, tmp_path: Path, **changes) -> AgentProfile:
    values = {
        "slug": "ada",
        "name": "Ada",
        "harness": kind,
        "model": "m1",
        "instructions": "Mind the {braces}.",
        "workdir": tmp_path,
    }
    return AgentProfile(**{**values, **changes})


def gone(pid: int, *, reaped: bool) -> bool:
    """Whether ``pid`` is dead; ``reaped``: not even a zombie is left (we are its parent)."""
    try:
        status = psutil.Process(pid).status()
    except psutil.NoSuchProcess:
        return True
    return not reaped and status == psutil.STATUS_ZOMBIE
