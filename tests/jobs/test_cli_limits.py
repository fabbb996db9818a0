"""What an agent CLI may take of the machine (jobs/harnesses/cli_limits.py).

The OOM score is checked for real: a fake CLI started through CliProcess, its score and its
child's read from /proc. The cgroup code is checked against a temporary directory standing in
for cgroupfs: what it writes where, not what the kernel does with it (this machine is cgroup v1,
so the kernel's side is untested here).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from pathlib import Path

import pytest

from jobs.harnesses.cli_limits import AGENT_OOM_SCORE_ADJ, RunCgroups
from jobs.harnesses.cli_process import CliProcess
from jobs.harnesses.cli_streams import ClaudeStream
from tests.helpers.stack import eventually
from tests.jobs.test_cli_process import Stretch, claude_command

UNIT = "system.slice/aegis-worker@1.service"
GIB = 1024**3


def oom_score_adj(pid: int) -> int:
    return int(Path(f"/proc/{pid}/oom_score_adj").read_text())


async def test_an_agent_cli_and_its_children_die_first_when_memory_runs_out(tmp_path):
    if not sys.platform.startswith("linux"):
        pytest.skip("oom_score_adj is Linux's")
    workdir = tmp_path / "work"
    workdir.mkdir()
    process = CliProcess("claude", ClaudeStream(), Stretch("hang, spawn a child"), "tok")
    task = asyncio.create_task(process.run(claude_command(tmp_path), workdir, dict(os.environ)))
    record = workdir / "fake-claude.jsonl"
    given = None
    try:
        given = await eventually(
            lambda: record.exists() and json.loads(record.read_text().splitlines()[0]),
            timeout=20,
        )
        assert oom_score_adj(given["pid"]) == AGENT_OOM_SCORE_ADJ
        assert oom_score_adj(given["child_pid"]) == AGENT_OOM_SCORE_ADJ  # inherited
        assert oom_score_adj(os.getpid()) < AGENT_OOM_SCORE_ADJ  # the worker's own is not raised
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if given is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(given["pgid"], signal.SIGKILL)


def fake_cgroupfs(tmp_path: Path, *, memory_max: str = str(GIB), controllers: str = "cpu memory"):
    """A directory shaped like the worker's delegated cgroup v2, and its /proc/self/cgroup."""
    mount = tmp_path / "cgroup"
    own = mount / UNIT
    own.mkdir(parents=True)
    (own / "cgroup.controllers").write_text(controllers + "\n")
    (own / "cgroup.subtree_control").write_text("")
    (own / "cgroup.procs").write_text("4242\n")
    (own / "memory.max").write_text(memory_max + "\n")
    membership = tmp_path / "self-cgroup"
    membership.write_text(f"0::/{UNIT}\n")
    return mount, own, membership


def test_a_run_gets_a_capped_cgroup_under_the_delegated_one(tmp_path):
    mount, own, membership = fake_cgroupfs(tmp_path)
    cgroups = RunCgroups(mount, membership)
    leaf = cgroups.leaf_for(7)
    assert leaf is not None and leaf.parent == own and leaf.name.startswith("run-7-")
    assert (own / "worker" / "cgroup.procs").read_text() == "4242"  # out of the inner node
    assert (own / "cgroup.subtree_control").read_text() == "+memory"
    assert int((leaf / "memory.max").read_text()) == GIB * 3 // 4
    assert (leaf / "memory.oom.group").read_text() == "1"
    assert cgroups.leaf_for(8) != leaf  # one per run


def test_a_worker_with_no_cap_caps_its_runs_by_the_host(tmp_path):
    mount, _, membership = fake_cgroupfs(tmp_path, memory_max="max")
    leaf = RunCgroups(mount, membership).leaf_for(1)
    host = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert int((leaf / "memory.max").read_text()) == host * 3 // 4


async def test_the_cli_enters_its_run_cgroup_before_it_execs(tmp_path):
    """The wrapper writes 0 (itself) to the run's cgroup.procs: here a plain file."""
    if not sys.platform.startswith("linux"):
        pytest.skip("the exec wrapper is Linux's")
    mount, own, membership = fake_cgroupfs(tmp_path)
    cgroups = RunCgroups(mount, membership)
    left = []
    cgroups.remove = left.append  # a plain directory with files cannot be rmdir'ed
    workdir = tmp_path / "work"
    workdir.mkdir()
    process = CliProcess("claude", ClaudeStream(), Stretch("say hello"), "tok", cgroups=cgroups)
    await process.run(claude_command(tmp_path), workdir, dict(os.environ))
    [leaf] = left
    assert (leaf / "cgroup.procs").read_text() == "0"


@pytest.mark.parametrize(
    ("membership", "controllers", "why"),
    [
        ("12:memory:/x\n0::/\n", "memory", "cgroup v1 or a hybrid"),
        (f"0::/{UNIT}\n", "cpu pids", "memory controller is not delegated"),
    ],
)
def test_no_cgroup_where_none_is_delegated_and_it_is_said_once(
    tmp_path, caplog, membership, controllers, why
):
    mount, _, path = fake_cgroupfs(tmp_path, controllers=controllers)
    path.write_text(membership)
    cgroups = RunCgroups(mount, path)
    with caplog.at_level(logging.INFO, logger="jobs.harnesses.cli_limits"):
        assert cgroups.leaf_for(1) is None
        assert cgroups.leaf_for(2) is None
    [said] = [record.getMessage() for record in caplog.records]
    assert "no memory cap" in said and why in said


def test_on_this_machine_the_real_check_finds_its_answer_without_failing():
    """Whatever the kernel here: a leaf in a writable v2 cgroup, or None, never an exception."""
    cgroups = RunCgroups()
    leaf = cgroups.leaf_for("probe")
    cgroups.remove(leaf)
