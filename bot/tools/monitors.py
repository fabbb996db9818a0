"""What aegis watches, as agents read and change it: ``monitors.list`` answers at once;
``monitors.watch`` and ``monitors.remove`` wait for the owner's tap, and
``monitors.watch_command`` for a tap and a code (it runs a program here at every check), and
so does ``monitors.watch_process``, which watches a long process for the calling run and
continues it with the outcome (bot/monitors/process_watch.py).

What an agent asks is checked field by field like ``/watch`` (bot/monitors/specs.py); a refusal
names the field. A monitor an agent made says so (``source``: ``agent:<slug>``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot.errors import MonitorRefused, ToolRefused
from bot.monitors import specs
from bot.monitors.monitor import Monitor, MonitorKind

if TYPE_CHECKING:
    from bot.actions.call import Caller, Explainer, ToolFunction, Vetter
    from bot.core import Platform


def monitor_summary(monitor: Monitor, day: float | None) -> dict[str, Any]:
    return {
        "id": monitor.id,
        "name": monitor.name,
        "watches": monitor.spec.what(),
        "state": "paused" if monitor.paused else monitor.state.value,
        "last_check": monitor.last_check_at.isoformat(timespec="seconds")
        if monitor.last_check_at
        else None,
        "last_error": monitor.last_error if monitor.last_ok is False else None,
        "uptime_24h": day,
        "made_by": monitor.source,
    }


def vetters(platform: Platform) -> dict[str, Vetter]:
    """A monitor or a process watch an agent asks for is checked field by field before its
    card is made: the owner is never asked to approve what would be refused afterwards."""

    async def watch(args: dict, caller: Caller) -> str | None:
        return _problem(lambda: _spec(MonitorKind(args["kind"]), args["target"], args))

    async def watch_command(args: dict, caller: Caller) -> str | None:
        return _problem(lambda: _spec(MonitorKind.CMD, args["command"], args))

    async def watch_process(args: dict, caller: Caller) -> str | None:
        if caller.run_id is None:
            return (
                "run: only a run aegis started can be continued when the process ends; ask for "
                "the watch from within a run (/run)"
            )
        busy = await platform.monitors.processes.waiting_for(caller.run_id)
        if busy is not None:
            return f"run: run #{caller.run_id} already waits on process watch #{busy.id}"
        return _problem(lambda: specs.process_watch(args))

    return {
        "monitors.watch": watch,
        "monitors.watch_command": watch_command,
        "monitors.watch_process": watch_process,
    }


def explainers(platform: Platform) -> dict[str, Explainer]:
    """The card for a process watch says where its commands will run: approving what you
    cannot see is not approval."""

    def where_it_runs(args: dict, caller: Caller) -> str | None:
        return f"Its commands run in {workdir_of(platform, caller.agent)}."

    return {"monitors.watch_process": where_it_runs}


def workdir_of(platform: Platform, agent: str) -> str:
    """Where an agent's process watch runs its commands: its workdir, else the worker's own
    working folder."""
    profile = platform.agents.get(agent)
    workdir = profile.workdir if profile is not None else None
    return str(workdir) if workdir is not None else str(Path.cwd())


def _problem(build) -> str | None:
    try:
        build()
    except MonitorRefused as exc:
        return f"{exc.field}: {exc.problem}"
    return None


def _spec(kind: MonitorKind, target: str, args: dict):
    options = {
        key: value for key, value in args.items() if key not in ("kind", "target", "command")
    }
    return specs.build(kind, target, options)


def toolbox(platform: Platform) -> dict[str, ToolFunction]:
    monitors = platform.monitors

    async def list_monitors(args: dict, caller: Caller) -> dict:
        uptimes = await monitors.uptimes()
        return {
            "monitors": [
                monitor_summary(m, uptimes[m.id].day if m.id in uptimes else None)
                for m in await monitors.all()
            ]
        }

    async def watch(args: dict, caller: Caller) -> dict:
        return await _watch(platform, MonitorKind(args["kind"]), args["target"], args, caller)

    async def watch_command(args: dict, caller: Caller) -> dict:
        return await _watch(platform, MonitorKind.CMD, args["command"], args, caller)

    async def remove(args: dict, caller: Caller) -> dict:
        removed = await monitors.remove(args["id"])
        if removed is None:
            raise ToolRefused(f"there is no monitor #{args['id']}")
        return {"removed": removed.id, "name": removed.name}

    async def watch_process(args: dict, caller: Caller) -> dict:
        try:
            spec = replace(specs.process_watch(args), workdir=workdir_of(platform, caller.agent))
            watch = await monitors.processes.start(
                spec, agent=caller.agent, run_id=caller.run_id, chat_id=caller.chat_id
            )
        except MonitorRefused as exc:
            raise ToolRefused(f"{exc.field}: {exc.problem}") from None
        return {
            "watch": watch.id,
            "name": watch.name,
            "every_seconds": spec.every_seconds,
            "runs_in": spec.workdir,
            "deadline": watch.deadline_at.isoformat(timespec="seconds"),
            "next": "End your turn now. When the process passes, fails or reaches its deadline, "
            "aegis continues this run with the outcome; do not check on it yourself.",
        }

    return {
        "monitors.list": list_monitors,
        "monitors.watch": watch,
        "monitors.watch_command": watch_command,
        "monitors.watch_process": watch_process,
        "monitors.remove": remove,
    }


async def _watch(platform: Platform, kind: MonitorKind, target: str, args: dict, caller) -> dict:
    try:
        spec = _spec(kind, target, args)
    except MonitorRefused as exc:
        raise ToolRefused(f"{exc.field}: {exc.problem}") from None
    monitor, new = await platform.monitors.watch(spec, source=f"agent:{caller.agent}")
    return {"id": monitor.id, "name": monitor.name, "new": new, "watches": monitor.spec.what()}
