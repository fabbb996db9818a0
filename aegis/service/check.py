"""What ``aegis doctor`` says of installed units: each setting that differs from what ``aegis
service install`` would write now (with the parameters it was given then, read from the units'
header), and an EnvironmentFile others may read."""

from __future__ import annotations

import stat
from pathlib import Path

from aegis.service.plan import make_plan
from aegis.service.units import TARGET, WEB, differences, install_parameters, render_units
from aegis.service.units import settings_of as unit_settings
from bot.config.settings import Settings
from bot.errors import ConfigError, ServiceError


def installed_units(settings: Settings) -> list[tuple[bool, str]]:
    """(ok, sentence) for the units in AEGIS_UNIT_DIR; nothing where none is installed."""
    unit_dir = settings.unit_dir
    target = unit_dir / TARGET
    if not target.is_file():
        return []
    try:
        parameters = install_parameters(target.read_text(encoding="utf-8"))
    except OSError as exc:
        return [(False, f"Cannot read {target}: {exc.strerror}.")]
    if parameters is None:
        return [(True, f"{target} was not written by aegis service install; not compared.")]
    try:
        problems = _differences(settings, unit_dir, parameters)
    except (ServiceError, ConfigError, KeyError, ValueError) as exc:
        return [(False, f"Cannot compare the units in {unit_dir}: {exc}.")]
    if not problems:
        workers = parameters["workers"]
        return [
            (True, f"The units in {unit_dir} are what install would write ({workers} workers).")
        ]
    rewrite = (
        f" Rewrite them: sudo aegis service install --workers {parameters['workers']} "
        f"--user {parameters['user']}"
        + (f" --memory {parameters['memory']}" if parameters["memory"] != "host" else "")
        + (f" --unit-dir {unit_dir}" if unit_dir != Path("/etc/systemd/system") else "")
        + "."
    )
    sentences = [problem + "." for problem in problems]
    sentences[-1] += rewrite
    return [(False, sentence) for sentence in sentences]


def _differences(settings: Settings, unit_dir: Path, parameters: dict[str, str]) -> list[str]:
    memory = parameters["memory"]
    plan = make_plan(
        settings,
        workers=int(parameters["workers"]),
        user=parameters["user"],
        memory=None if memory == "host" else memory,
        unit_dir=unit_dir,
        workdir=Path(parameters["workdir"]),
    )
    problems = []
    for name, wanted in render_units(plan).items():
        path = unit_dir / name
        if not path.is_file():
            problems.append(f"{path} is missing")
            continue
        problems += differences(name, path.read_text(encoding="utf-8"), wanted)
    problems += _env_file_problems(unit_dir / WEB)
    return problems


def _env_file_problems(web_unit: Path) -> list[str]:
    """The EnvironmentFile the installed web unit names: it holds the secrets, so 0600."""
    if not web_unit.is_file():
        return []
    named = unit_settings(web_unit.read_text(encoding="utf-8")).get("Service.EnvironmentFile")
    if not named:
        return []
    path = Path(named[0].lstrip("-"))
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return [f"the EnvironmentFile {path} is missing"]
    except OSError as exc:
        return [f"cannot look at the EnvironmentFile {path} ({exc.strerror})"]
    if mode != 0o600:
        return [
            f"the EnvironmentFile {path} is mode {mode:04o}; it holds the bot token and "
            f"passwords, so it must be 0600 (chmod 600 {path})"
        ]
    return []
