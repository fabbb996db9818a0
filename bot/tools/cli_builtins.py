"""A coding CLI's own built-in tools, as the gate sees them (``cli.<Name>``).

Claude Code asks aegis's ``permission_prompt`` tool before it uses a built-in that is neither
allowed nor refused on its command line; the gate then decides ``cli.<Name>`` like any call.
Only the built-ins that read are declared, so they run unattended, and only inside the agent's
workdir (never in aegis's data dir); any other (Bash, Edit, Write, WebFetch, one added in a later
release …) is undeclared, so it waits for a tap and a code. When the gate lets one through,
nothing runs here: the answer is the CLI's permission to run it itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from bot.errors import ToolRefused
from bot.tools.declarations import CLI_FAMILY

if TYPE_CHECKING:
    from bot.actions.call import Caller, ToolFunction
    from bot.core import Platform


PATH_KEYS = ("file_path", "path", "notebook_path", "pattern")


def touches(args: dict, private: Path | Sequence[Path]) -> str | None:
    """The first path in a built-in's input that reaches into ``private`` (inside it, or a
    folder a search would go down into it from), if any. Only absolute paths can be told; a
    relative one is the CLI's to resolve."""
    places = (private,) if isinstance(private, Path) else tuple(private)
    for key in PATH_KEYS:
        value = args.get(key)
        if isinstance(value, str) and value.startswith(("/", "~")):
            where = _fixed_part(Path(value).expanduser()).resolve()
            if any(where.is_relative_to(p) or p.is_relative_to(where) for p in places):
                return value
    return None


def _fixed_part(path: Path) -> Path:
    """A path up to its first wildcard: where a glob or a search is sure to look."""
    parts = []
    for part in path.parts:
        if any(mark in part for mark in "*?["):
            break
        parts.append(part)
    return Path(*parts)


def outside(args: dict, workdir: Path | None) -> str | None:
    """The first absolute path in a built-in's input that lies outside ``workdir`` (every one,
    when there is none)."""
    for key in PATH_KEYS:
        value = args.get(key)
        if isinstance(value, str) and value.startswith(("/", "~")):
            where = _fixed_part(Path(value).expanduser()).resolve()
            if workdir is None or not where.is_relative_to(workdir.resolve()):
                return value
    return None


def toolbox(platform: Platform) -> dict[str, ToolFunction]:
    private = platform.settings.private_paths

    async def permitted(args: dict, caller: Caller) -> str:
        # aegis's data dir and .env hold its secrets (the bot token, the webhook secret, the
        # emulator's key): an agent that read them could forge its owner's taps. No approval
        # lets a CLI read there.
        where = touches(args, private)
        if where is not None:
            raise ToolRefused(f"{where} is inside aegis's own data dir, which no agent may read")
        # Nor anywhere outside its workdir (a CLI asks only about what lies outside it): the
        # worker's /proc/<pid>/environ, another run's token file, the owner's ~/.ssh … An
        # allow list, so nothing there is read because nobody thought to name it.
        profile = platform.agents.get(caller.agent)
        where = outside(args, profile.workdir if profile is not None else None)
        if where is not None:
            raise ToolRefused(
                f"{where} is outside {caller.agent}'s workdir; its own tools read only there"
            )
        return "permitted: the CLI runs it itself"

    return {CLI_FAMILY: permitted}
