"""``aegis service install``: writes the units and the EnvironmentFile, then prints the commands
that need root (the user, the data dir, systemctl), or runs them with ``--yes``.

Units are 0644 and hold nothing secret; the EnvironmentFile is created 0600 (never readable by
others, not even for a moment) and owned by the service user once that user exists.
"""

from __future__ import annotations

import os
import pwd
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from aegis.service.plan import env_file_text, environment, make_plan
from aegis.service.units import TARGET, Plan, render_units
from bot.config.settings import Settings
from bot.errors import ServiceError

UNIT_MODE = 0o644
ENV_MODE = 0o600


@dataclass(frozen=True)
class Request:
    """What the command line asked for."""

    workers: int = 1
    user: str = "aegis"
    memory: str | None = None
    unit_dir: Path | None = None
    dry_run: bool = False
    yes: bool = False


def run_install(request: Request, settings: Settings, out: TextIO) -> int:
    if request.workers < 1:
        raise ServiceError("--workers must be 1 or more")
    unit_dir = request.unit_dir or settings.unit_dir
    plan = make_plan(
        settings,
        workers=request.workers,
        user=request.user,
        memory=request.memory,
        unit_dir=unit_dir,
        workdir=Path.cwd(),
    )
    units = render_units(plan)
    values = environment(settings, plan, dict(os.environ))
    if request.dry_run:
        _show(plan, unit_dir, units, values, out)
        return 0
    if request.yes and os.geteuid() != 0:
        raise ServiceError(
            "--yes runs useradd, chown and systemctl, which need root: run it with sudo"
        )
    existed = (unit_dir / TARGET).exists()
    _write_all(plan, unit_dir, units, env_file_text(values))
    out.write(_written(plan, unit_dir, units, values))
    _warn(plan, settings, out)
    _start(root_commands(plan, restart=existed), run=request.yes, out=out)
    return 0


def _start(commands: list[list[str]], *, run: bool, out: TextIO) -> None:
    if not run:
        out.write("\nTo start aegis, run as root (or run this again with --yes):\n")
        out.write("".join(f"  {shlex.join(command)}\n" for command in commands))
        return
    for command in commands:
        _run(command, out)
    out.write(f"\naegis runs: systemctl status {TARGET}; logs: journalctl -u 'aegis-*'\n")


def root_commands(plan: Plan, *, restart: bool) -> list[list[str]]:
    """What needs root, in order: the user, its data dir, the EnvironmentFile's owner,
    systemctl. A user that exists already is not made again."""
    owner = f"{plan.user}:{plan.user}"
    commands = []
    if not _user_exists(plan.user):
        commands.append(
            ["useradd", "--system", "--user-group", "--home-dir", str(plan.data_dir)]
            + ["--no-create-home", "--shell", "/usr/sbin/nologin", plan.user]
        )
    commands += [
        ["mkdir", "-p", str(plan.data_dir)],
        ["chmod", "0700", str(plan.data_dir)],
        ["chown", "-R", owner, str(plan.data_dir)],
        ["chown", owner, str(plan.env_file)],
        ["systemctl", "daemon-reload"],
        ["systemctl", "enable", "--now", TARGET],
    ]
    if restart:  # units that run already take the new ones only when restarted
        commands.append(["systemctl", "restart", TARGET])
    return commands


def _user_exists(user: str) -> bool:
    try:
        pwd.getpwnam(user)
    except KeyError:
        return False
    return True


def _show(plan: Plan, unit_dir: Path, units: dict[str, str], values: dict, out: TextIO) -> None:
    out.write("Dry run: nothing is written.\n\n")
    out.write(f"Would write {plan.env_file} (mode 0600) with {_names(values)}.\n")
    for name, text in units.items():
        out.write(f"\nWould write {unit_dir / name} (mode 0644):\n\n{text}")
    out.write("\nThen, as root:\n")
    commands = root_commands(plan, restart=(unit_dir / TARGET).exists())
    out.write("".join(f"  {shlex.join(command)}\n" for command in commands))


def _names(values: dict[str, str]) -> str:
    return ", ".join(values) + " (values not shown)"


def _written(plan: Plan, unit_dir: Path, units: dict[str, str], values: dict) -> str:
    return (
        f"Wrote {', '.join(units)} to {unit_dir} (mode 0644, nothing secret in them) and "
        f"{plan.env_file} (mode 0600) with {_names(values)}.\n"
    )


def _write_all(plan: Plan, unit_dir: Path, units: dict[str, str], env_text: str) -> None:
    """The EnvironmentFile first (the units name it), then the units; a directory we may not
    write to is named in a sentence before anything is written."""
    for directory in (plan.env_file.parent, unit_dir):
        _check_writable(directory, unit_dir)
    try:
        _write(plan.env_file, env_text, ENV_MODE, owner=_owner(plan.user))
        for name, text in units.items():
            _write(unit_dir / name, text, UNIT_MODE)
    except PermissionError as exc:
        raise ServiceError(_needs_root(Path(exc.filename or unit_dir), unit_dir)) from None
    except OSError as exc:
        raise ServiceError(f"cannot write {exc.filename}: {exc.strerror}") from None


def _check_writable(directory: Path, unit_dir: Path) -> None:
    existing = directory
    while not existing.exists():
        existing = existing.parent
    if not os.access(existing, os.W_OK):
        raise ServiceError(_needs_root(directory, unit_dir))


def _needs_root(path: Path, unit_dir: Path) -> str:
    return (
        f"cannot write to {path}: permission denied. Writing the units to {unit_dir} needs "
        "root: run it with sudo (sudo .venv/bin/aegis service install …), or give --unit-dir "
        "a directory you can write."
    )


def _owner(user: str) -> tuple[int, int] | None:
    """The service user's uid and gid, when we are root and it exists (otherwise the printed
    commands chown the file)."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return None
    return entry.pw_uid, entry.pw_gid


def _write(path: Path, text: str, mode: int, owner: tuple[int, int] | None = None) -> None:
    """Written whole or not at all (a temporary file renamed over it), with ``mode`` from the
    first byte on."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.unlink(missing_ok=True)
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.fchmod(descriptor, mode)  # the umask may have taken bits away
        if owner is not None:
            os.fchown(descriptor, *owner)
        os.write(descriptor, text.encode("utf-8"))
    finally:
        os.close(descriptor)
    os.replace(temporary, path)


def _warn(plan: Plan, settings: Settings, out: TextIO) -> None:
    _warn_unreachable(plan, out)
    if not settings.redis_url:
        out.write(
            "\nNote: no AEGIS_REDIS_URL, so the units share the embedded Redis, which dies "
            "with whichever unit started it. On a server, install Redis and set "
            "AEGIS_REDIS_URL=redis://127.0.0.1:6379/0.\n"
        )


def _warn_unreachable(plan: Plan, out: TextIO) -> None:
    """The service user is neither owner nor group of the venv, as a rule: every directory on
    the way to it and to the interpreter must let others in."""
    if plan.user == "root":
        return
    for path in (plan.executable.resolve(), *plan.python_paths, plan.workdir):
        blocked = next((p for p in [path, *path.parents] if not _others_may_enter(p)), None)
        if blocked is not None:
            out.write(
                f"\nWarning: the user {plan.user} cannot reach {path} ({blocked} lets no other "
                "user in), so the units cannot start aegis. Put the clone and its venv where "
                "every user can read them (e.g. /opt/aegis, a venv made with /usr/bin/python3).\n"
            )
            return


def _others_may_enter(path: Path) -> bool:
    try:
        mode = path.stat().st_mode
    except OSError:
        return True  # not there: not this check's to say
    return bool(mode & 0o001) if path.is_dir() else bool(mode & 0o004 or mode & 0o001)


def _run(command: list[str], out: TextIO) -> None:
    out.write(f"+ {shlex.join(command)}\n")
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)  # noqa: S603 (our own list)
    except OSError as exc:
        raise ServiceError(f"`{shlex.join(command)}` could not be run: {exc.strerror}") from None
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise ServiceError(f"`{shlex.join(command)}` failed (exit {done.returncode}): {why}")
