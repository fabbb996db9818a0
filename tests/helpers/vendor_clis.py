"""The real coding CLIs, installed from npm at pinned versions into a cache shared by every
test process, and fixtures that hand a test the path of each executable.

``cli_path("claude")`` installs ``@anthropic-ai/claude-code@<version>`` once into
``$AEGIS_TEST_CLI_CACHE/<package>@<version>`` (default ``~/.cache/aegis-tests/clis``): the
xdist workers take an exclusive lock on the cache first, and an install counts only once its
``--version`` matched and the marker file was written. Where npm is missing or the install
fails the test is skipped with the reason, and fails under CI=true (``require``).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from jobs.harnesses.cli_specs import CLIS
from tests.conftest import require

INSTALL_TIMEOUT = 600  # seconds; the three packages together are about 1.2 GB unpacked


@dataclass(frozen=True)
class PinnedCli:
    package: str
    version: str
    executable: str  # in node_modules/.bin

    @property
    def slug(self) -> str:
        """A directory name: ``anthropic-ai+claude-code@2.1.332``."""
        return f"{self.package.lstrip('@').replace('/', '+')}@{self.version}"


# The versions the suite drives are each CLI's ``tested`` in jobs/harnesses/cli_specs.py (which
# `aegis doctor` and the README quote); bump one there and the next run installs it beside the
# old.
PINNED: dict[str, PinnedCli] = {
    spec.executable: PinnedCli(spec.package, spec.tested, spec.executable) for spec in CLIS.values()
}

_installed: dict[str, Path] = {}


def cache_dir() -> Path:
    configured = os.environ.get("AEGIS_TEST_CLI_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "aegis-tests" / "clis"


def cli_path(name: str) -> Path:
    """The executable of the pinned CLI ``name`` (a key of PINNED), installed if need be."""
    if name not in _installed:
        _installed[name] = _install(PINNED[name])
    return _installed[name]


def _install(pinned: PinnedCli) -> Path:
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        require(f"npm, to install {pinned.package}", "npm or node is not on PATH")
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    prefix = cache / pinned.slug
    executable = prefix / "node_modules" / ".bin" / pinned.executable
    marker = prefix / ".installed"
    with open(cache / f".{pinned.slug}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not marker.exists():
            _npm_install(npm, pinned, prefix)
            _check_version(pinned, executable)
            marker.write_text(f"{pinned.package}@{pinned.version}\n")
    return executable


def _npm_install(npm: str, pinned: PinnedCli, prefix: Path) -> None:
    spec = f"{pinned.package}@{pinned.version}"
    command = [npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", spec]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=INSTALL_TIMEOUT)
    except subprocess.TimeoutExpired:
        require(f"{spec} from npm", f"npm install took more than {INSTALL_TIMEOUT} s")
    if done.returncode != 0:
        require(f"{spec} from npm", f"npm install exited {done.returncode}: {_tail(done.stderr)}")


def _check_version(pinned: PinnedCli, executable: Path) -> None:
    spec = f"{pinned.package}@{pinned.version}"
    if not executable.exists():
        require(spec, f"npm installed it but {executable} is missing")
    try:
        done = subprocess.run(
            [str(executable), "--version"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        require(spec, f"`{pinned.executable} --version` failed: {exc}")
    if pinned.version not in done.stdout:
        shown = _tail(done.stdout + done.stderr)
        require(spec, f"`{pinned.executable} --version` says {shown!r}, not {pinned.version}")


def _tail(text: str, lines: int = 5) -> str:
    return " | ".join(text.strip().splitlines()[-lines:])


@pytest.fixture(scope="session")
def claude_cli() -> Path:
    return cli_path("claude")


@pytest.fixture(scope="session")
def codex_cli() -> Path:
    return cli_path("codex")


@pytest.fixture(scope="session")
def opencode_cli() -> Path:
    return cli_path("opencode")
