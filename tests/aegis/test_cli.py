"""The ``aegis`` command as a user meets it: help, doctor, totp init, db upgrade."""

from __future__ import annotations

import socket
import subprocess
from importlib import metadata

import pytest

from aegis.cli import COMMANDS
from tests.helpers.cli import AEGIS, aegis_environment, run_aegis

run = run_aegis


def test_top_level_help_lists_every_command(tmp_path):
    result = run(["--help"], tmp_path)
    assert result.returncode == 0
    for name in [*COMMANDS, "db", "totp", "agent", "service"]:
        assert name in result.stdout


@pytest.mark.parametrize(
    "args",
    [[name] for name in COMMANDS]
    + [["db", "upgrade"], ["totp", "init"], ["agent", "token"], ["service", "install"]],
)
def test_every_subcommand_has_help_that_says_what_it_does(tmp_path, args):
    result = run([*args, "--help"], tmp_path)
    assert result.returncode == 0
    description = result.stdout.split("\n\n", 1)[1]
    assert len(description.split()) >= 5, result.stdout


def test_plain_aegis_prints_its_help_and_version_says_which(tmp_path):
    result = run([], tmp_path)
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.startswith("usage: aegis") and "aegis up" in result.stdout
    version = run(["--version"], tmp_path)
    assert version.returncode == 0
    assert version.stdout.strip() == f"aegis {metadata.version('aegis')}"


@pytest.mark.parametrize("command", ["doctor", "up"])
@pytest.mark.parametrize(("variable", "value"), [("AEGIS_PORT", "99999"), ("AEGIS_MCP_PORT", "0")])
def test_a_port_out_of_range_is_named_and_nothing_starts(tmp_path, command, variable, value):
    result = run([command], tmp_path, **{variable: value})
    assert result.returncode == 2
    assert f"{variable}: Input should be" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / ".aegis").exists()


def test_a_port_another_program_holds_is_named_by_doctor_and_refused_by_up(tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = str(holder.getsockname()[1])
        doctor = run(["doctor"], tmp_path, AEGIS_MCP_PORT=port)
        assert doctor.returncode == 1
        assert f"AEGIS_MCP_PORT={port} on 127.0.0.1 is taken by another program" in doctor.stdout
        up = run(["up"], tmp_path, AEGIS_PORT=port)
    assert up.returncode == 2
    [sentence] = up.stderr.strip().splitlines()
    assert f"AEGIS_PORT={port} on 127.0.0.1 is taken by another program" in sentence
    assert "choose another with AEGIS_PORT" in sentence
    assert not (tmp_path / ".aegis" / "redis").exists()  # refused before anything started


def test_bad_setting_names_the_variable_and_changes_nothing(tmp_path):
    result = run(["doctor"], tmp_path, AEGIS_OWNER_IDS="12,abc")
    assert result.returncode == 2
    assert "AEGIS_OWNER_IDS" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / ".aegis").exists()


def test_doctor_on_embedded_defaults_is_happy(tmp_path):
    result = run(["doctor"], tmp_path)  # every default but the ports (tests/helpers/cli.py)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "All good." in result.stdout
    assert "emulator" in result.stdout


def test_doctor_names_each_problem_with_the_setting_to_change(tmp_path):
    result = run(
        ["doctor"],
        tmp_path,
        AEGIS_REDIS_URL="redis://127.0.0.1:1/0",
        AEGIS_DATABASE_URL="postgresql+asyncpg://aegis:hunter2@127.0.0.1:1/aegis",
        AEGIS_HOST="0.0.0.0",
        AEGIS_TELEGRAM_TOKEN="123:abc",
        AEGIS_TELEGRAM_API_URL="http://127.0.0.1:1/bot",
    )
    assert result.returncode == 1
    out = result.stdout
    for setting in (
        "AEGIS_REDIS_URL",
        "AEGIS_DATABASE_URL",
        "AEGIS_ALLOW_PUBLIC_BIND",
        "AEGIS_OWNER_IDS",
        "AEGIS_TELEGRAM_API_URL",
    ):
        assert setting in out, out
    assert "hunter2" not in out + result.stderr
    assert "123:abc" not in out + result.stderr


def test_a_bad_aegis_yaml_is_named_by_doctor_and_stops_up(tmp_path):
    (tmp_path / "aegis.yaml").write_text("tools:\n  deploy.site:\n    effect: sometimes\n")
    doctor = run(["doctor"], tmp_path)
    assert doctor.returncode == 1
    effects = "read, talk, write, irreversible"
    assert f"tools.deploy.site.effect: must be one of {effects}" in doctor.stdout
    up = run(["up"], tmp_path)
    assert up.returncode == 2
    assert "tools.deploy.site.effect" in up.stderr and "Traceback" not in up.stderr


def test_doctor_names_what_stops_an_agent_running_on_this_machine(tmp_path):
    (tmp_path / "aegis.yaml").write_text(
        "agents:\n"
        "  coder:\n    harness: claude-code\n    command: no-such-cli-here\n"
        "    workdir: /no/such/dir\n"
        "  scout:\n    harness: http\n"
        "    providers: [{url: 'http://127.0.0.1:9/v1', model: m, key_env: AEGIS_TEST_NO_KEY}]\n"
        "schedules:\n  daily:\n    every: 1d\n    agent: scout\n    request: news\n"
    )
    doctor = run(["doctor"], tmp_path)
    assert doctor.returncode == 1
    assert "3 agents (3 with a harness), 0 triage rules and 1 schedules" in doctor.stdout
    assert "agents.coder.command: no-such-cli-here is not an executable on PATH" in doctor.stdout
    assert "agents.coder.workdir: /no/such/dir is not a directory" in doctor.stdout
    assert (
        "agents.scout.providers[0].key_env: the environment variable AEGIS_TEST_NO_KEY is not set"
        in doctor.stdout
    )


def test_doctor_names_a_workdir_holding_aegis_data_and_each_clis_version(tmp_path):
    """A workdir that holds the data dir (./.aegis here) lets an agent's own tools read aegis's
    secrets: a problem. A CLI's version beside the one the tests run: a note, not a problem."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shows = {"claude-old": "2.1.300 (Claude Code)", "codex-now": "codex-cli 0.171.0"}
    for name, shown in shows.items():
        (bin_dir / name).write_text(f"#!/bin/sh\necho '{shown}'\n")
        (bin_dir / name).chmod(0o755)
    (tmp_path / "work").mkdir()
    (tmp_path / ".env").write_text("# aegis's settings would be here\n")
    (tmp_path / "aegis.yaml").write_text(
        "agents:\n"
        f"  coder:\n    harness: claude-code\n    command: {bin_dir / 'claude-old'}\n"
        f"    workdir: {tmp_path}\n"
        f"  cody:\n    harness: codex\n    command: {bin_dir / 'codex-now'}\n"
        f"    workdir: {tmp_path / 'work'}\n"
    )
    doctor = run(["doctor"], tmp_path)
    assert doctor.returncode == 1
    data_dir = (tmp_path / ".aegis").resolve()
    assert f"FIX  aegis.yaml: agents.coder.workdir: aegis's data dir {data_dir} lies inside" in (
        doctor.stdout
    )
    env_file = (tmp_path / ".env").resolve()
    assert f"agents.coder.workdir: aegis's settings file {env_file} lies inside" in doctor.stdout
    assert "agents.cody.workdir" not in doctor.stdout  # a workdir beside it is fine
    assert (
        "warn agents.coder: claude 2.1.300 is installed; aegis's tests run 2.1.332 "
        "(npm install -g @anthropic-ai/claude-code@2.1.332)" in doctor.stdout
    )
    assert "ok   agents.cody: codex 0.171.0, the version aegis's tests run." in doctor.stdout


def test_totp_init_prints_uri_and_qr_and_refuses_to_overwrite(tmp_path):
    first = run(["totp", "init"], tmp_path)
    assert first.returncode == 0
    assert "otpauth://totp/" in first.stdout and "issuer=aegis" in first.stdout
    assert "█" in first.stdout or "▀" in first.stdout or "▄" in first.stdout
    secret_file = tmp_path / ".aegis" / "secrets" / "totp"
    assert oct(secret_file.stat().st_mode & 0o777) == "0o600"
    secret = secret_file.read_text()
    again = run(["totp", "init"], tmp_path)
    assert again.returncode == 1 and "--rotate" in again.stdout
    assert secret_file.read_text() == secret
    rotated = run(["totp", "init", "--rotate"], tmp_path)
    assert rotated.returncode == 0 and secret_file.read_text() != secret


def test_db_upgrade_applies_then_reports_up_to_date(tmp_path):
    first = run(["db", "upgrade"], tmp_path)
    assert first.returncode == 0 and "Applied 0001" in first.stdout
    second = run(["db", "upgrade"], tmp_path)
    assert second.returncode == 0 and "up to date" in second.stdout


def test_agent_token_is_shown_once_and_rotated_on_request(tmp_path):
    (tmp_path / "aegis.yaml").write_text("agents:\n  coder:\n    tools: [tasks.list]\n")
    first = run(["agent", "token", "coder"], tmp_path)
    assert first.returncode == 0, first.stderr
    token = first.stdout.strip()
    assert len(token) >= 40 and "\n" not in token and "shown this once" in first.stderr
    again = run(["agent", "token", "coder"], tmp_path)
    assert again.returncode == 1 and again.stdout == ""
    assert "already has a token" in again.stderr and "--rotate" in again.stderr
    rotated = run(["agent", "token", "coder", "--rotate"], tmp_path)
    assert rotated.returncode == 0 and rotated.stdout.strip() not in ("", token)
    # Nothing of either token is kept in the data dir: only hashes, in the database.
    for path in (tmp_path / ".aegis").rglob("*"):
        if path.is_file():
            content = path.read_bytes()
            assert token.encode() not in content and rotated.stdout.strip().encode() not in content


def test_agent_token_for_an_unknown_agent_names_the_known_ones(tmp_path):
    (tmp_path / "aegis.yaml").write_text("agents:\n  coder:\n    tools: [tasks.list]\n")
    result = run(["agent", "token", "nobody"], tmp_path)
    assert result.returncode == 1 and result.stdout == ""
    assert "no agent is called 'nobody'" in result.stderr and "coder" in result.stderr


def test_an_agent_acting_for_a_peer_gets_no_token(tmp_path):
    (tmp_path / "aegis.yaml").write_text("agents:\n  laptop:\n    peer: true\n    tools: []\n")
    result = run(["agent", "token", "laptop"], tmp_path)
    assert result.returncode == 1 and result.stdout == ""
    assert "acts for a federated peer" in result.stderr and "Nothing was made" in result.stderr


def test_status_where_aegis_never_ran_says_so_and_starts_nothing(tmp_path):
    result = run(["status"], tmp_path)
    assert result.returncode == 1
    assert result.stdout.startswith(f"aegis has not run on the data dir {tmp_path / '.aegis'} yet")
    assert not (tmp_path / ".aegis").exists()
    opened = run(["open"], tmp_path)
    assert opened.returncode == 1 and "start it with `aegis up`" in opened.stdout


def test_logs_prints_the_end_of_up_s_log_and_follows_it_across_a_rotation(tmp_path):
    assert run(["logs"], tmp_path).returncode == 1  # no aegis up ever ran here: said so
    log = tmp_path / ".aegis" / "aegis.log"
    log.parent.mkdir()
    log.write_text("".join(f"line {n}\n" for n in range(100)))
    result = run(["logs", "-n", "3"], tmp_path)
    assert (result.returncode, result.stdout) == (0, "line 97\nline 98\nline 99\n")
    environment = aegis_environment()
    follower = subprocess.Popen(
        [*AEGIS, "logs", "-f", "-n", "1"],
        cwd=tmp_path,
        env=environment,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert follower.stdout.readline() == "line 99\n"
        with log.open("a") as file:
            file.write("appended\n")
        assert follower.stdout.readline() == "appended\n"
        log.rename(log.with_suffix(".log.1"))  # rotated, as the handler does
        log.write_text("after the rotation\n")
        assert follower.stdout.readline() == "after the rotation\n"
    finally:
        follower.terminate()
        follower.wait(10)
