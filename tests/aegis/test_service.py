"""``aegis service install`` and what ``aegis doctor`` says of installed units.

The units for hosts of 1, 2, 8 and 64 GiB are compared with golden files in service_golden/.
After a deliberate change to the units, write them anew and read the diff before committing:

    AEGIS_TEST_GOLDEN=write python -m pytest tests/aegis/test_service.py -k golden
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from aegis.service.plan import is_local_postgres, is_local_redis, parse_memory
from aegis.service.units import Plan, memory_plan, render_units, settings_of
from tests.conftest import require
from tests.helpers.cli import run_aegis

GOLDEN = Path(__file__).parent / "service_golden"
TOKEN = "123456:AAH-the-bot-token-itself"
DB_PASSWORD = "pg-Pa55word"
REDIS_PASSWORD = "redis-Pa55word"
SECRETS = {
    "AEGIS_TELEGRAM_TOKEN": TOKEN,
    "AEGIS_DATABASE_URL": f"postgresql+asyncpg://aegis:{DB_PASSWORD}@127.0.0.1:1/aegis",
    "AEGIS_REDIS_URL": f"redis://:{REDIS_PASSWORD}@localhost:1/0",
}
UNIT_FILES = ["aegis.slice", "aegis-web.service", "aegis-clock.service"]
UNIT_FILES += ["aegis-worker@.service", "aegis.target"]


def golden_plan(memory: str) -> Plan:
    return Plan(
        workers=2,
        user="aegis",
        memory_mib=parse_memory(memory),
        executable=Path("/opt/aegis/.venv/bin/aegis"),
        workdir=Path("/opt/aegis"),
        data_dir=Path("/var/lib/aegis"),
        env_file=Path("/etc/aegis/aegis.env"),
        local_redis=True,
        local_postgres=True,
        agent_dirs=(Path("/srv/site"),),
        python_paths=(Path("/usr/bin/python3.11"), Path("/usr")),
        memory_given=memory,
    )


def as_one_text(units: dict[str, str]) -> str:
    return "".join(f"==> {name} <==\n{text}\n" for name, text in units.items())


@pytest.mark.parametrize("memory", ["1G", "2G", "8G", "64G"])
def test_units_for_a_host_match_the_golden_files(memory):
    text = as_one_text(render_units(golden_plan(memory)))
    path = GOLDEN / f"host-{memory}.units"
    if os.environ.get("AEGIS_TEST_GOLDEN") == "write":
        path.write_text(text)
    assert text == path.read_text(), f"regenerate with AEGIS_TEST_GOLDEN=write ({__doc__})"


@pytest.mark.parametrize("total", [512, 1000, 1024, 2048, 4096, 8192, 16384, 65536, 1048576])
def test_every_cap_fits_the_host_and_throttling_comes_before_the_kill(total):
    plan = memory_plan(total)
    assert plan.budget.max_mib < total
    for memory in (plan.web, plan.clock, plan.worker):
        assert memory.max_mib <= plan.budget.max_mib
    for memory in (plan.budget, plan.web, plan.clock, plan.worker):
        assert 0 < memory.high_mib < memory.max_mib


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("redis://127.0.0.1:6379/0", True),
        ("redis://:pw@localhost/1", True),
        ("unix:///run/redis/redis.sock", True),
        ("redis://redis.example.net:6379/0", False),
        (None, False),  # the embedded one: aegis starts it itself
    ],
)
def test_redis_is_waited_for_only_where_it_runs_here(url, local):
    assert is_local_redis(url) is local


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("postgresql+asyncpg://a:b@127.0.0.1/aegis", True),
        ("postgresql+asyncpg://a@/aegis", True),  # the default unix socket
        ("postgresql+asyncpg://a@/aegis?host=/var/run/postgresql", True),
        ("postgresql+asyncpg://a:b@db.example.net/aegis", False),
        ("sqlite+aiosqlite:////var/lib/aegis/aegis.sqlite3", False),
        (None, False),
    ],
)
def test_postgres_is_waited_for_only_where_it_runs_here(url, local):
    assert is_local_postgres(url) is local


def install(tmp_path: Path, *extra: str, **env: str) -> subprocess.CompletedProcess:
    env.setdefault("AEGIS_DATA_DIR", str(tmp_path / "data"))
    units = str(tmp_path / "units")
    return run_aegis(["service", "install", "--unit-dir", units, *extra], tmp_path, **env)


def test_secrets_go_to_a_0600_file_and_never_into_a_unit(tmp_path):
    (tmp_path / ".env").write_text("AEGIS_OWNER_IDS=11111111\nAEGIS_PUBLIC_URL=https://x.test\n")
    result = install(tmp_path, "--workers", "2", "--memory", "2G", **SECRETS)
    assert result.returncode == 0, result.stderr
    units = tmp_path / "units"
    env_file = units / "aegis.env"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    written = env_file.read_text()
    for name, value in SECRETS.items():
        assert f"{name}={value}" in written
    assert "AEGIS_OWNER_IDS=11111111" in written  # from .env
    for name in UNIT_FILES:
        text = (units / name).read_text()
        assert stat.S_IMODE((units / name).stat().st_mode) == 0o644
        for secret in (TOKEN, DB_PASSWORD, REDIS_PASSWORD, "Pa55word", "AAH-"):
            assert secret not in text, f"{secret!r} in {name}"
    for secret in (TOKEN, DB_PASSWORD, REDIS_PASSWORD):
        assert secret not in result.stdout + result.stderr
    web = settings_of((units / "aegis-web.service").read_text())
    assert web["Service.EnvironmentFile"] == [str(env_file)]
    assert "postgresql.service" in web["Unit.After"][0]
    assert "redis-server.service" in web["Unit.After"][0]


def test_the_units_run_aegis_itself_and_stop_all_it_started(tmp_path):
    result = install(tmp_path, "--workers", "3", "--memory", "8G")
    assert result.returncode == 0, result.stderr
    units = tmp_path / "units"
    target = settings_of((units / "aegis.target").read_text())
    wanted = target["Unit.Wants"][0].split()
    assert wanted == ["aegis-web.service", "aegis-clock.service"] + [
        f"aegis-worker@{n}.service" for n in (1, 2, 3)
    ]
    for name, role in [("aegis-web.service", "web"), ("aegis-worker@.service", "worker")]:
        service = settings_of((units / name).read_text())
        [start] = service["Service.ExecStart"]
        executable, command = start.split(" ")
        assert Path(executable).is_absolute() and Path(executable).name == "aegis"
        assert command == role
        assert service["Service.KillMode"] == ["control-group"]
        assert service["Unit.After"][0].split() == ["network-online.target"]  # nothing local
    web = settings_of((units / "aegis-web.service").read_text())
    high, cap = memory_plan(parse_memory("8G")).web.lines()  # --memory as the host's
    assert web["Service.MemoryMax"] == [cap.partition("=")[2]]
    assert web["Service.MemoryHigh"] == [high.partition("=")[2]]
    assert "useradd --system" in result.stdout
    assert "systemctl enable --now aegis.target" in result.stdout


def test_a_dry_run_writes_nothing_and_shows_the_units(tmp_path):
    result = install(tmp_path, "--dry-run", "--memory", "1G", **SECRETS)
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "units").exists()
    assert not (tmp_path / "data").exists()
    assert "Would write" in result.stdout and "MemoryMax=" in result.stdout
    assert "AEGIS_TELEGRAM_TOKEN (values not shown)" in result.stdout
    for secret in (TOKEN, DB_PASSWORD, REDIS_PASSWORD):
        assert secret not in result.stdout


def test_a_unit_dir_it_may_not_write_is_a_sentence(tmp_path):
    if os.geteuid() == 0:  # root writes anywhere but where the kernel says no
        unwritable = Path("/sys/aegis-test-units")
    else:
        unwritable = tmp_path / "locked"
        unwritable.mkdir(mode=0o500)
    env = {"AEGIS_DATA_DIR": str(tmp_path / "data")}
    result = run_aegis(["service", "install", "--unit-dir", str(unwritable)], tmp_path, **env)
    assert result.returncode == 1
    [sentence] = result.stderr.strip().splitlines()
    assert "permission denied" in sentence and "sudo" in sentence and "--unit-dir" in sentence
    assert "Traceback" not in result.stderr


def test_doctor_names_a_hand_edited_setting_and_an_env_file_others_may_read(tmp_path):
    assert install(tmp_path, "--memory", "2G").returncode == 0
    units = tmp_path / "units"
    doctor = run_aegis(["doctor"], tmp_path, AEGIS_UNIT_DIR=str(units), **data_dir(tmp_path))
    assert f"ok   The units in {units} are what install would write (1 workers)." in doctor.stdout
    web = units / "aegis-web.service"
    web.write_text(web.read_text().replace("MemoryMax=384M", "MemoryMax=900M"))
    (units / "aegis.env").chmod(0o644)
    doctor = run_aegis(["doctor"], tmp_path, AEGIS_UNIT_DIR=str(units), **data_dir(tmp_path))
    assert doctor.returncode == 1
    assert "FIX  aegis-web.service: MemoryMax is 900M, install would write 384M." in doctor.stdout
    assert f"the EnvironmentFile {units / 'aegis.env'} is mode 0644" in doctor.stdout
    assert "Rewrite them: sudo aegis service install --workers 1" in doctor.stdout


def data_dir(tmp_path: Path) -> dict[str, str]:
    return {"AEGIS_DATA_DIR": str(tmp_path / "data")}


def test_systemd_accepts_the_units(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None or not sys.platform.startswith("linux"):
        require("systemd-analyze", "not installed")
    (tmp_path / "data").mkdir()
    result = install(tmp_path, "--workers", "2", "--memory", "2G", **SECRETS)
    assert result.returncode == 0, result.stderr
    units = tmp_path / "units"
    names = ["aegis.target", "aegis.slice", "aegis-web.service", "aegis-clock.service"]
    names += ["aegis-worker@1.service", "aegis-worker@2.service"]
    verify = subprocess.run(
        [analyze, "verify", *names],
        cwd=units,
        env={**os.environ, "SYSTEMD_UNIT_PATH": f"{units}:"},  # ours first, then the system's
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert verify.returncode == 0, verify.stderr
    assert verify.stderr.strip() == "", verify.stderr  # systemd only warns of what it ignores


FAKE_TOOL = """#!/bin/sh
echo "$(basename "$0") $*" >> "$(dirname "$0")/ran.log"
"""


def test_yes_runs_the_root_commands_in_order(tmp_path):
    """useradd, chown and systemctl are stand-ins here that write down how they were called
    (the PATH holds no sbin, so the real useradd cannot be reached); mkdir and chmod are real."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("useradd", "chown", "systemctl"):
        (bin_dir / tool).write_text(FAKE_TOOL)
        (bin_dir / tool).chmod(0o755)
    path = f"{bin_dir}:/usr/bin:/bin"
    result = install(tmp_path, "--yes", "--user", "aegis-test-nobody", "--memory", "1G", PATH=path)
    if os.geteuid() != 0:
        assert result.returncode == 1
        assert "need root: run it with sudo" in result.stderr
        return
    assert result.returncode == 0, result.stderr
    data = tmp_path / "data"
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    owner = "aegis-test-nobody:aegis-test-nobody"
    assert (bin_dir / "ran.log").read_text().splitlines() == [
        f"useradd --system --user-group --home-dir {data} --no-create-home --shell "
        "/usr/sbin/nologin aegis-test-nobody",
        f"chown -R {owner} {data}",
        f"chown {owner} {tmp_path / 'units' / 'aegis.env'}",
        "systemctl daemon-reload",
        "systemctl enable --now aegis.target",
    ]
    assert "journalctl -u 'aegis-*'" in result.stdout
