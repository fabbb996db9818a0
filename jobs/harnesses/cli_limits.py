"""What an agent CLI may take of the machine: it dies first when memory runs out, and, where the
worker runs in a delegated cgroup v2, each run has a memory cap of its own.

The OOM score: the worker runs with a negative ``OOMScoreAdjust`` (aegis/service/units.py), which
its children inherit. The exec wrapper of cli_process.py writes AGENT_OOM_SCORE_ADJ to
``/proc/self/oom_score_adj`` before it becomes the CLI, so the CLI and everything it starts carry
it from their first instruction (raising one's own score needs no privilege; lowering would).

The cgroup: ``Delegate=yes`` hands the worker unit's cgroup to the worker's user. cgroup v2 lets
only leaves hold processes once controllers are enabled for children, so the worker first moves
itself (and whatever else is in its cgroup) into a leaf ``worker``, enables the memory controller
for its children, then makes a leaf per run with ``memory.max`` (RUN_SHARE of the worker's own
cap, or of the host's memory where it has none) and ``memory.oom.group`` (an OOM kills the run's
whole tree, not a random part of it). The wrapper moves itself into the run's leaf before exec,
so the CLI and its children are born inside it. Where the worker's cgroup is not v2 or not
writable, or not the one our own unit delegates (cgroup v1, a hybrid, a worker not started by
``aegis service install``'s units, a laptop), nothing is done; it is logged once.
"""

from __future__ import annotations

import contextlib
import fnmatch
import logging
import os
import secrets
import threading
from pathlib import Path

logger = logging.getLogger(__name__)

AGENT_OOM_SCORE_ADJ = 500  # aegis's own processes run at -500 (the units' OOMScoreAdjust)
RUN_SHARE = (3, 4)  # a run may take 3/4 of the worker's memory: the worker keeps a quarter
CGROUP_MOUNT = Path("/sys/fs/cgroup")
MEMBERSHIP = Path("/proc/self/cgroup")
DELEGATED_UNITS = "aegis-worker@*.service"  # aegis/service/units.py gives these Delegate=yes


class RunCgroups:
    """The per-run cgroups under this worker's delegated cgroup, or none at all."""

    def __init__(self, mount: Path = CGROUP_MOUNT, membership: Path = MEMBERSHIP) -> None:
        self.mount = mount
        self.membership = membership
        self._base: Path | None = None
        self._checked = False
        self._lock = threading.Lock()  # the worker's threads start runs at once

    def leaf_for(self, run_id: object) -> Path | None:
        """A new cgroup for one run, capped; None where runs get none (see the docstring)."""
        base = self._ready()
        if base is None:
            return None
        leaf = base / f"run-{run_id}-{secrets.token_hex(3)}"
        try:
            leaf.mkdir()
            (leaf / "memory.oom.group").write_text("1")
            (leaf / "memory.max").write_text(str(self._cap(base)))
        except OSError as exc:
            logger.warning("run %s: no memory cap of its own (%s: %s)", run_id, leaf, exc)
            self.remove(leaf)
            return None
        return leaf

    def remove(self, leaf: Path | None) -> None:
        """The run's cgroup: whatever is left in it killed (a daemon the CLI started in a
        session of its own escapes its process group, not its cgroup), then removed. One
        the kernel still finds busy stays, empty, until the unit stops."""
        if leaf is None:
            return
        with contextlib.suppress(OSError):
            (leaf / "cgroup.kill").write_text("1")  # Linux 5.14 and later
        with contextlib.suppress(OSError):
            leaf.rmdir()

    def _ready(self) -> Path | None:
        with self._lock:
            if not self._checked:
                self._checked = True
                self._base = self._prepare()
            return self._base

    def _prepare(self) -> Path | None:
        own, why = self._own_cgroup()
        if own is None:
            logger.info("agent runs get no memory cap of their own: %s", why)
            return None
        try:
            leaf = own / "worker"
            leaf.mkdir(exist_ok=True)
            for pid in (own / "cgroup.procs").read_text().split():
                with contextlib.suppress(ProcessLookupError):  # gone meanwhile
                    (leaf / "cgroup.procs").write_text(pid)
            (own / "cgroup.subtree_control").write_text("+memory")
        except OSError as exc:
            logger.warning("agent runs get no memory cap of their own: %s (%s)", own, exc)
            return None
        logger.info("agent runs get a memory cap each, in cgroups under %s", own)
        return own

    def _own_cgroup(self) -> tuple[Path | None, str]:
        try:
            lines = self.membership.read_text().split()
        except OSError:
            return None, f"{self.membership} cannot be read (not Linux?)"
        if len(lines) != 1 or not lines[0].startswith("0::"):
            return None, "this is cgroup v1 or a hybrid, not cgroup v2 alone"
        own = self.mount / lines[0][3:].lstrip("/")
        if not fnmatch.fnmatch(own.name, DELEGATED_UNITS):
            # Only the cgroup our own unit delegates is ours to reorganise: elsewhere (a root
            # shell, a container's root cgroup) moving processes around would be vandalism.
            return None, f"the worker does not run as {DELEGATED_UNITS} (aegis service install)"
        if not os.access(own / "cgroup.subtree_control", os.W_OK):
            return None, f"{own} is not ours to write (run the worker with Delegate=yes)"
        if "memory" not in _read(own / "cgroup.controllers").split():
            return None, f"the memory controller is not delegated to {own}"
        return own, ""

    def _cap(self, base: Path) -> int:
        own = (base / "memory.max").read_text().strip()
        limit = int(own) if own.isdigit() else _host_memory()
        return limit * RUN_SHARE[0] // RUN_SHARE[1]


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _host_memory() -> int:
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


_this_worker = RunCgroups()


def this_worker() -> RunCgroups:
    """The worker process's own: it finds its cgroup once and logs once."""
    return _this_worker
