"""What the units depend on, found on this host: its memory, the venv's ``aegis``, whether Redis
and Postgres run here, the agents' workdirs, and the settings the units' EnvironmentFile holds."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path
from urllib.parse import urlsplit

from dotenv import dotenv_values
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from aegis.service.units import Plan
from bot.config.file import load_config
from bot.config.settings import Settings, is_loopback
from bot.errors import ServiceError

DEFAULT_UNIT_DIR = Path("/etc/systemd/system")
DEFAULT_ENV_FILE = Path("/etc/aegis/aegis.env")
MEMINFO = Path("/proc/meminfo")
SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?", re.IGNORECASE)
UNIT_SHIFT = {"": -20, "K": -10, "M": 0, "G": 10, "T": 20}  # to MiB
PLAIN_PATH = re.compile(r"[\w./@+=,:~-]+")  # nothing systemd would read as a specifier or a quote


def make_plan(
    settings: Settings,
    *,
    workers: int,
    user: str,
    memory: str | None,
    unit_dir: Path,
    workdir: Path,
) -> Plan:
    """The plan for units that run aegis from ``workdir`` with ``settings``."""
    config = load_config(_inside(workdir, settings.config_file))
    agent_dirs = [agent.workdir for agent in config.agents.values() if agent.workdir]
    agent_dirs += [recipe.workdir for recipe in config.recipes.values()]
    plan = Plan(
        workers=workers,
        user=user,
        memory_mib=parse_memory(memory) if memory else host_memory_mib(),
        executable=aegis_executable(),
        workdir=workdir,
        data_dir=_inside(workdir, settings.data_dir),
        env_file=env_file_for(unit_dir),
        local_redis=is_local_redis(settings.redis_url),
        local_postgres=is_local_postgres(settings.database_url),
        agent_dirs=tuple(dict.fromkeys(path.resolve() for path in agent_dirs)),
        python_paths=(Path(sys.executable).resolve(), Path(sys.base_prefix).resolve()),
        memory_given=memory,
    )
    for path in (plan.executable, plan.workdir, plan.data_dir, plan.env_file, *plan.agent_dirs):
        _plain(path)
    if not re.fullmatch(r"[a-z_][a-z0-9_-]{0,31}", user):
        raise ServiceError(f"--user {user!r} is not a user name useradd accepts (aegis, svc_bot)")
    return plan


def env_file_for(unit_dir: Path) -> Path:
    """/etc/aegis/aegis.env beside the system's units; beside the units in any other --unit-dir."""
    return DEFAULT_ENV_FILE if unit_dir == DEFAULT_UNIT_DIR else unit_dir / "aegis.env"


def parse_memory(text: str) -> int:
    """``2G``, ``1536M``, ``512MiB`` (binary units, as systemd reads them) in MiB."""
    match = SIZE.fullmatch(text.strip())
    if match is None or float(match.group(1)) <= 0:
        raise ServiceError(f"--memory {text!r} is not a size: give it as 2G or 1536M")
    shift = UNIT_SHIFT[match.group(2).upper()]
    return int(float(match.group(1)) * 2**shift)


def host_memory_mib(meminfo: Path = MEMINFO) -> int:
    """The host's total memory (MemTotal), in MiB."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    raise ServiceError(f"cannot read the host's memory from {meminfo}; give it with --memory 2G")


def aegis_executable() -> Path:
    """The ``aegis`` of the venv this runs in (not resolved: the venv's own path is the one)."""
    beside = Path(sys.executable).parent / "aegis"
    if beside.is_file():
        return beside.absolute()
    found = shutil.which("aegis")
    if found is None:
        raise ServiceError(
            "cannot find the aegis command of this venv; install aegis with pip install -e . "
            "and run it as .venv/bin/aegis"
        )
    return Path(found).absolute()


def is_local_redis(url: str | None) -> bool:
    """A Redis server on this machine (loopback or a unix socket); None is the embedded one,
    which aegis starts itself."""
    if not url:
        return False
    parts = urlsplit(url)
    return parts.scheme == "unix" or is_loopback(parts.hostname or "")


def is_local_postgres(url: str | None) -> bool:
    if not url or not url.startswith("postgres"):
        return False
    try:
        parsed = make_url(url)
    except ArgumentError:
        return False
    socket_dir = str(parsed.query.get("host", ""))
    return parsed.host is None or socket_dir.startswith("/") or is_loopback(parsed.host)


def environment(settings: Settings, plan: Plan, environ: dict[str, str]) -> dict[str, str]:
    """What the EnvironmentFile holds: every AEGIS_* setting of ``.env`` and the environment
    (the environment wins, as for aegis itself), the data dir and config file as absolute
    paths, and the API keys aegis.yaml's agents name (``key_env``) where they are set."""
    found = {
        name: value
        for name, value in dotenv_values(plan.workdir / ".env").items()
        if name.startswith("AEGIS_") and value is not None
    }
    found.update({k: v for k, v in environ.items() if k.startswith("AEGIS_")})
    found.pop("AEGIS_UNIT_DIR", None)  # install's and doctor's, not the service's
    found["AEGIS_DATA_DIR"] = str(plan.data_dir)
    found["AEGIS_CONFIG_FILE"] = str(_inside(plan.workdir, settings.config_file))
    config = load_config(_inside(plan.workdir, settings.config_file))
    for agent in config.agents.values():
        for provider in agent.providers:
            if provider.key_env and provider.key_env in environ:
                found[provider.key_env] = environ[provider.key_env]
    return dict(sorted(found.items()))


def env_file_text(values: dict[str, str]) -> str:
    lines = [
        "# aegis's settings and secrets for its systemd units, written by `aegis service install`.",
        "# Mode 0600: it holds the bot token and passwords. Edit it here, then restart "
        "aegis.target.",
    ]
    for name, value in values.items():
        if "\n" in value or "\r" in value:
            raise ServiceError(f"{name} holds a line break, which an EnvironmentFile cannot")
        if not re.fullmatch(r"[\w./@:%+=,~*-]*", value):  # quoted: systemd unescapes \\ and \"
            value = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
        lines.append(f"{name}={value}")
    return "\n".join(lines) + "\n"


def _inside(workdir: Path, path: Path) -> Path:
    return path if path.is_absolute() else workdir / path


def _plain(path: Path) -> None:
    if not PLAIN_PATH.fullmatch(str(path)):
        raise ServiceError(
            f"the path {path} holds a space, a quote or a %, which a systemd unit would read "
            "otherwise; move it (or the venv) to a plain path such as /opt/aegis"
        )
