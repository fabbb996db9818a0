"""The systemd units of a deployment, as text: a pure function of a :class:`Plan`, so that
``aegis service install`` writes them and ``aegis doctor`` compares the installed ones with them.

Six files: ``aegis.slice`` (the memory budget of aegis as a whole), ``aegis-web.service``,
``aegis-clock.service``, one template ``aegis-worker@.service`` started as ``aegis-worker@1`` …
``@N``, and ``aegis.target``, which wants them all (enable it, and everything starts at boot).
One template rather than N copies: the workers are identical, so there is one file to keep in
step (and for doctor to compare), and changing N changes the target's ``Wants=`` alone.

Memory, in MiB, from the host's total T (see :func:`memory_plan`):

- the slice (all of aegis together): T less a reserve for the system, Redis and Postgres of
  T/4, at least 256 MiB and at most 4 GiB: 768M on 1 GiB, 1.5G on 2 GiB, 6G on 8 GiB, 60G on
  64 GiB;
- web: a quarter of that, within 256M … 2G; clock: an eighth, within 128M … 512M;
- each worker: three quarters of the slice (the agent CLIs it runs are the big consumers).
  Workers may together promise more than the slice holds; the slice's cap holds the sum, the
  worker's own cap stops one runaway worker from starving web and clock;
- MemoryHigh (where the kernel starts reclaiming and throttling) is 7/8 of MemoryMax (where the
  OOM killer acts), everything rounded down to 16 MiB.

aegis's own processes get ``OOMScoreAdjust=-500``; the agent CLIs a worker starts raise their own
score to +500 (jobs/harnesses/cli_limits.py), so under pressure a runaway agent dies first.
``OOMPolicy=continue``: a process killed for memory (an agent run) does not stop its unit.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

TARGET = "aegis.target"
SLICE = "aegis.slice"
WEB = "aegis-web.service"
CLOCK = "aegis-clock.service"
WORKER = "aegis-worker@.service"
HEADER = "# Written by `aegis service install`"  # followed by the install's own parameters
OOM_SCORE_ADJUST = -500
HOME_DIRS = (Path("/home"), Path("/root"), Path("/run/user"))
REDIS_UNITS = "redis-server.service redis.service"  # Debian/Ubuntu's name, and everyone else's
POSTGRES_UNITS = "postgresql.service"


@dataclass(frozen=True)
class Plan:
    """Everything the units depend on: what install was told, and what it found on the host."""

    workers: int
    user: str
    memory_mib: int  # the host's total memory (or --memory)
    executable: Path  # the venv's `aegis`
    workdir: Path
    data_dir: Path
    env_file: Path
    local_redis: bool = False
    local_postgres: bool = False
    agent_dirs: tuple[Path, ...] = ()  # agents' workdirs: the worker may write there
    python_paths: tuple[Path, ...] = ()  # where the venv's interpreter really lives
    memory_given: str | None = None  # --memory as given, recorded in the header

    def header(self) -> str:
        memory = self.memory_given or "host"
        return (
            f"{HEADER} (workers={self.workers} user={self.user} memory={memory} "
            f"workdir={self.workdir}).\n# `aegis doctor` compares it with what install would "
            "write now. Secrets live in the EnvironmentFile, never here."
        )


@dataclass(frozen=True)
class Memory:
    high_mib: int
    max_mib: int

    def lines(self) -> list[str]:
        return [f"MemoryHigh={size(self.high_mib)}", f"MemoryMax={size(self.max_mib)}"]


@dataclass(frozen=True)
class MemoryPlan:
    budget: Memory  # the slice: all of aegis
    web: Memory
    clock: Memory
    worker: Memory


def memory_plan(total_mib: int) -> MemoryPlan:
    """The caps for a host of ``total_mib``; the module's docstring gives the formula."""
    budget = total_mib - _clamp(total_mib // 4, 256, 4096)
    return MemoryPlan(
        budget=_capped(budget),
        web=_capped(_clamp(budget // 4, 256, 2048)),
        clock=_capped(_clamp(budget // 8, 128, 512)),
        worker=_capped(budget * 3 // 4),
    )


def _capped(max_mib: int) -> Memory:
    max_mib = max(_round(max_mib), 64)
    return Memory(high_mib=_round(max_mib * 7 // 8), max_mib=max_mib)


def _round(mib: int) -> int:
    return mib // 16 * 16


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(value, high))


def size(mib: int) -> str:
    """systemd's way to write a size: 2G, 1536M."""
    return f"{mib // 1024}G" if mib % 1024 == 0 else f"{mib}M"


def worker_names(workers: int) -> list[str]:
    return [f"aegis-worker@{index}.service" for index in range(1, workers + 1)]


def render_units(plan: Plan) -> dict[str, str]:
    """File name → contents, for every unit of the deployment."""
    memory = memory_plan(plan.memory_mib)
    return {
        SLICE: _slice(plan, memory.budget),
        WEB: _service(plan, "web", "Telegram updates, health, the MCP server", memory.web),
        CLOCK: _service(plan, "clock", "enqueues what is due (one at a time)", memory.clock),
        WORKER: _service(plan, "worker", "runs background jobs and agents", memory.worker),
        TARGET: _target(plan),
    }


def _slice(plan: Plan, budget: Memory) -> str:
    return _text(
        plan,
        ("Unit", ["Description=aegis: all of its processes, under one memory budget"]),
        ("Slice", budget.lines()),
    )


def _target(plan: Plan) -> str:
    wanted = " ".join([WEB, CLOCK, *worker_names(plan.workers)])
    unit = [f"Description=aegis: web, {plan.workers} worker(s) and the clock", f"Wants={wanted}"]
    return _text(plan, ("Unit", unit), ("Install", ["WantedBy=multi-user.target"]))


def _service(plan: Plan, role: str, what: str, memory: Memory) -> str:
    return _text(
        plan,
        ("Unit", [f"Description={_title(role)}: {what}", f"PartOf={TARGET}", *_ordering(plan)]),
        ("Service", _process(plan, role) + _limits(role, memory) + _hardening(plan, role)),
    )


def _title(role: str) -> str:
    return "aegis worker %i" if role == "worker" else f"aegis {role}"


def _ordering(plan: Plan) -> list[str]:
    """After the network, and after Redis and Postgres where they run on this machine."""
    after = ["network-online.target"]
    if plan.local_redis:
        after.append(REDIS_UNITS)
    if plan.local_postgres:
        after.append(POSTGRES_UNITS)
    units = " ".join(after)
    # Restart=on-failure, but not for ever: five failed starts in five minutes and it stays down.
    return [f"After={units}", f"Wants={units}", "StartLimitIntervalSec=300", "StartLimitBurst=5"]


def _process(plan: Plan, role: str) -> list[str]:
    path = ":".join([str(plan.executable.parent), "/usr/local/bin", "/usr/bin", "/bin"])
    return [
        "Type=exec",
        f"User={plan.user}",
        f"Group={plan.user}",
        # The data dir, not the clone: settings come from the EnvironmentFile alone, never
        # from a .env there (which may be 0600 and another user's).
        f"WorkingDirectory={plan.data_dir}",
        f"EnvironmentFile={plan.env_file}",
        f"Environment=PATH={path}",
        f"ExecStart={plan.executable} {role}",
        "Restart=on-failure",
        "RestartSec=5",
        "TimeoutStopSec=30",
        # The whole cgroup is stopped: agent CLIs (in their own sessions) die with the worker.
        "KillMode=control-group",
        f"SyslogIdentifier=aegis-{role}",
    ]


def _limits(role: str, memory: Memory) -> list[str]:
    lines = [f"Slice={SLICE}", *memory.lines(), "OOMPolicy=continue"]
    lines.append(f"OOMScoreAdjust={OOM_SCORE_ADJUST}")
    if role == "worker":  # each agent run gets a cgroup of its own, under the worker's
        lines.append("Delegate=yes")
    return lines


def _hardening(plan: Plan, role: str) -> list[str]:
    writable = [str(plan.data_dir)]
    if role == "worker":  # "-": a workdir that does not exist (yet) does not stop the start
        writable += [f"-{path}" for path in plan.agent_dirs]
    lines = [
        "NoNewPrivileges=yes",
        "PrivateTmp=yes",
        "RestrictSUIDSGID=yes",
        "LockPersonality=yes",
        # The whole file system read-only but for the data dir (and, for the worker, the
        # agents' workdirs, where the tools they are granted may write).
        "ProtectSystem=strict",
        f"ProtectHome={_protect_home(plan)}",
        "ReadWritePaths=" + " ".join(_unique(writable)),
    ]
    if role != "worker":  # the worker writes to its delegated cgroup, under /sys/fs/cgroup
        lines += ["ProtectKernelTunables=yes", "ProtectKernelModules=yes"]
        lines.append("ProtectControlGroups=yes")
    return lines


def _protect_home(plan: Plan) -> str:
    """``yes`` hides /home, /root and /run/user. Where aegis itself lives there (a clone in a
    home directory, a pyenv interpreter under /root), hiding them would stop it from starting:
    then ``read-only``, and the data dir stays writable through ReadWritePaths."""
    used = [plan.executable, plan.workdir, plan.env_file, plan.data_dir, *plan.python_paths]
    used += plan.agent_dirs
    inside = any(path.is_relative_to(home) for path in used for home in HOME_DIRS)
    return "read-only" if inside else "yes"


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _text(plan: Plan, *sections: tuple[str, list[str]]) -> str:
    blocks = [f"[{name}]\n" + "\n".join(lines) + "\n" for name, lines in sections]
    return plan.header() + "\n\n" + "\n".join(blocks)


# -- reading them back -------------------------------------------------------------------------

_HEADER_VALUES = re.compile(r"(\w+)=(\S+?)(?=[ )])")


def install_parameters(text: str) -> dict[str, str] | None:
    """What install was told (workers, user, memory, workdir), from a unit's header; None for a
    file install did not write."""
    first = text.partition("\n")[0]
    if not first.startswith(HEADER):
        return None
    inside = first[len(HEADER) :].partition(")")[0] + ")"
    return dict(_HEADER_VALUES.findall(inside))


def settings_of(text: str) -> dict[str, list[str]]:
    """``Section.Key`` → its values in order, comments and blank lines left out."""
    found: dict[str, list[str]] = {}
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, _, value = line.partition("=")
        found.setdefault(f"{section}.{key.strip()}", []).append(value.strip())
    return found


def differences(name: str, installed: str, wanted: str) -> list[str]:
    """Each setting of ``name`` that differs, as a sentence naming it and both values."""
    have, want = settings_of(installed), settings_of(wanted)
    sentences = []
    for key in _unique([*want, *have]):
        if have.get(key) == want.get(key):
            continue
        setting = key.partition(".")[2]
        now = " ".join(have[key]) if key in have else None
        then = " ".join(want[key]) if key in want else None
        if now is None:
            sentences.append(f"{name}: {setting} is not set, install would write {then}")
        elif then is None:
            sentences.append(f"{name}: {setting} is {now}, install would not set it")
        else:
            sentences.append(f"{name}: {setting} is {now}, install would write {then}")
    return sentences
