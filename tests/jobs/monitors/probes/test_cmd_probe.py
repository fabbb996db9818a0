"""The cmd probe running real commands (this Python, with small scripts): the exit code and the
output judged, no shell in between, bounded output, and nothing left running after a timeout."""

from __future__ import annotations

import asyncio
import re
import shlex
import sys

from bot.monitors.monitor import MonitorKind, MonitorSpec
from jobs.monitors import probe
from tests.helpers.cli_harness import gone
from tests.helpers.stack import eventually

PYTHON = shlex.quote(sys.executable)


def spec(target: str, **fields) -> MonitorSpec:
    return MonitorSpec(name="job", kind=MonitorKind.CMD, target=target, **fields)


def python(script: str, *args: str) -> str:
    """A command line running ``script`` in this Python."""
    return shlex.join([sys.executable, "-c", script, *args])


async def test_a_command_that_exits_as_expected_with_the_text_is_up():
    result = await probe.check(spec(python("print('backup ok')"), output_contains="backup ok"))
    assert result.ok
    assert re.fullmatch(r"exit 0 in \d+ ms", result.detail)


async def test_another_exit_code_is_down_with_the_code_and_the_last_line():
    script = "import sys; print('copying'); print('disk full', file=sys.stderr); sys.exit(3)"
    result = await probe.check(spec(python(script)))
    expected = await probe.check(spec(python(script), expect_exit=3))
    assert result.error == "exit code 3, expected 0: disk full"
    assert expected.ok


async def test_output_without_the_text_is_down_naming_it():
    result = await probe.check(spec(python("print('nothing to see')"), output_contains="ready"))
    assert result.error == "'ready' not in its output: nothing to see"


async def test_a_command_killed_by_a_signal_is_down_naming_it():
    script = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    result = await probe.check(spec(python(script)))
    assert result.error == "killed by SIGKILL, expected 0: (no output)"


async def test_a_missing_program_is_down_naming_it():
    result = await probe.check(spec("no-such-program-of-aegis --version"))
    assert result.error == "program not found: no-such-program-of-aegis"


async def test_the_command_line_goes_to_no_shell():
    result = await probe.check(spec("echo $HOME; false", output_contains="$HOME; false"))
    assert result.ok  # a shell would have said /root (or the like) and then exited 1


async def test_an_unreadable_or_empty_command_line_is_down_saying_so():
    assert (await probe.check(spec("echo 'unclosed"))).error == (
        "the command line cannot be read: No closing quotation"
    )
    assert (await probe.check(spec("   "))).error == "the command line is empty"


async def test_aegis_settings_are_not_in_its_environment(monkeypatch):
    monkeypatch.setenv("AEGIS_TELEGRAM_TOKEN", "secret")
    script = "import os; print(os.environ.get('AEGIS_TELEGRAM_TOKEN', 'absent'))"
    result = await probe.check(spec(python(script), output_contains="absent"))
    assert result.ok


async def test_a_flood_of_output_is_bounded_and_the_last_line_still_shown():
    script = "import sys; sys.stdout.write('x' * 5_000_000 + '\\nthe end\\n'); sys.exit(1)"
    result = await probe.check(spec(python(script)))
    assert result.error == "exit code 1, expected 0: the end"
    long_line = await probe.check(spec(python("print('y' * 5000); raise SystemExit(2)")))
    assert long_line.error.startswith("exit code 2, expected 0: yyy")
    assert long_line.error.endswith("…") and len(long_line.error) < 250


async def test_at_the_timeout_the_command_and_its_children_are_killed(tmp_path):
    pids = tmp_path / "pids"
    script = (
        "import os, subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "open(sys.argv[1], 'w').write(f'{os.getpid()} {child.pid}')\n"
        "time.sleep(60)\n"
    )
    check = asyncio.create_task(probe.check(spec(python(script, str(pids)), timeout_seconds=2)))
    await eventually(lambda: pids.exists() and pids.read_text().count(" ") == 1, timeout=2)
    result = await check
    assert result.error == "did not finish within 2 s"
    parent, child = (int(pid) for pid in pids.read_text().split())
    assert gone(parent, reaped=True)
    await eventually(lambda: gone(child, reaped=False))  # init reaps it, not us


async def test_a_child_left_running_after_the_command_exits_is_killed(tmp_path):
    pid_file = tmp_path / "pid"
    script = (
        "import subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "open(sys.argv[1], 'w').write(str(child.pid))\n"
        "print('started the daemon')\n"
    )
    # The child holds the output pipe open: the probe waits a moment for it, then kills it.
    result = await probe.check(spec(python(script, str(pid_file)), output_contains="daemon"))
    assert result.ok
    await eventually(lambda: gone(int(pid_file.read_text()), reaped=False))
