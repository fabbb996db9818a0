"""``aegis peer`` as a user runs it: two data dirs, the invitation on stdout alone, clear
refusals with exit 1 that change nothing, and no secret in anything but the invitation."""

from __future__ import annotations

import pytest

from tests.helpers.cli import free_port, run_aegis

DOWN = f"http://127.0.0.1:{free_port()}"


def aegis(args, cwd, side, **env):
    return run_aegis(
        ["peer", *args],
        cwd,
        AEGIS_DATA_DIR=str(cwd / side),
        AEGIS_PEER_NAME=side,
        AEGIS_PEER_URL=DOWN,  # nothing listens there: a first call fails at once
        **env,
    )


@pytest.mark.parametrize("command", ["invite", "add", "list", "rotate", "remove", "status"])
def test_each_peer_command_has_help(tmp_path, command):
    result = run_aegis(["peer", command, "--help"], tmp_path)
    assert result.returncode == 0
    assert len(result.stdout.split("\n\n", 1)[1].split()) >= 5


def test_invite_then_add_while_the_inviter_is_down_stores_nothing(tmp_path):
    invited = aegis(["invite", "laptop"], tmp_path, "vps")
    assert invited.returncode == 0, invited.stderr
    invitation = invited.stdout.strip()
    assert invitation.startswith("aegis-invite-1.") and "\n" not in invitation
    assert "on laptop, run aegis peer add <its name for vps>" in invited.stderr
    assert invitation not in invited.stderr
    added = aegis(["add", "vps", invitation], tmp_path, "laptop")
    # vps is not running, so the invitation cannot be claimed: nothing is stored
    assert added.returncode == 1 and "could not be reached" in added.stderr
    assert "No links" in aegis(["list"], tmp_path, "laptop").stdout
    assert list((tmp_path / "laptop" / "secrets").glob("peer-*")) == []
    listed = aegis(["list"], tmp_path, "vps").stdout
    assert "laptop: they call us" in listed and "invitation open until" in listed
    removed = aegis(["remove", "laptop"], tmp_path, "vps")
    assert removed.returncode == 0 and "Removed the link laptop (they call us)" in removed.stdout
    assert list((tmp_path / "vps" / "secrets").glob("peer-*")) == []


@pytest.mark.parametrize(
    "args, said",
    [
        (["add", "vps", "not-an-invitation"], "not a usable aegis invitation"),
        (["remove", "nobody"], "no link called nobody"),
        (["rotate", "nobody", "--now"], "no link called nobody"),
        (["status", "nobody"], "no link called nobody"),
        (["invite", "Not A Name"], "lowercase letters"),
    ],
)
def test_refusals_are_a_sentence_and_exit_1(tmp_path, args, said):
    result = aegis(args, tmp_path, "laptop")
    assert result.returncode == 1 and said in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_a_bad_overlap_is_refused_by_the_parser(tmp_path):
    result = aegis(["rotate", "laptop", "--overlap", "soon"], tmp_path, "vps")
    assert result.returncode == 2 and "like 24h, 90m or 2d" in result.stderr
