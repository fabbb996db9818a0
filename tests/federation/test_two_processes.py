"""The README's link, as a user makes it: vps is ``aegis web`` in a process of its own (its
data dir, SQLite and embedded Redis), laptop is the ``aegis`` command in another data dir.
vps invites, laptop adds, laptop asks vps's status; each side's ``aegis peer list`` then shows
the contact."""

from __future__ import annotations

import subprocess
import sys

import aiohttp

from aegis.embedded_redis import EmbeddedRedis
from federation.invitations import read_invitation
from tests.helpers.cli import aegis_environment, run_aegis
from tests.helpers.stack import eventually, free_port


async def answering(url: str) -> bool:
    """The federation route is up once an unsigned request gets its 400 (503: starting)."""
    try:
        async with aiohttp.ClientSession() as session, session.post(url) as response:
            return response.status == 400
    except aiohttp.ClientError:
        return False


async def test_laptop_links_to_a_running_vps_and_asks_its_status(tmp_path):
    port = free_port()
    vps = {
        "AEGIS_DATA_DIR": str(tmp_path / "vps"),
        "AEGIS_PEER_NAME": "vps",
        "AEGIS_PORT": str(port),
    }
    laptop = {"AEGIS_DATA_DIR": str(tmp_path / "laptop"), "AEGIS_PEER_NAME": "laptop"}
    invited = run_aegis(["peer", "invite", "laptop"], tmp_path, **vps)
    assert invited.returncode == 0, invited.stderr
    log = tmp_path / "vps.log"
    with open(log, "w") as output:
        web = subprocess.Popen(
            [sys.executable, "-m", "aegis.cli", "web"],
            cwd=tmp_path,
            env=aegis_environment(**vps),
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        url = f"http://127.0.0.1:{port}/federation/v1/status"
        await eventually(lambda: answering(url), timeout=45)
        added = run_aegis(["peer", "add", "vps", invited.stdout.strip()], tmp_path, **laptop)
        assert added.returncode == 0, added.stdout + added.stderr
        assert "vps (vps, aegis " in added.stdout and "): ok; queues: default 0" in added.stdout
        status = run_aegis(["peer", "status", "vps"], tmp_path, **laptop)
        assert status.returncode == 0 and "ok; queues" in status.stdout
        listed = run_aegis(["peer", "list"], tmp_path, **vps).stdout
        assert "laptop: they call us" in listed and "last contact never" not in listed
        assert "invitation open" not in listed  # claimed by the first request
        again = run_aegis(["peer", "add", "vps2", invited.stdout.strip()], tmp_path, **laptop)
        assert again.returncode == 1 and "used already" in again.stderr  # here
        elsewhere = {**laptop, "AEGIS_DATA_DIR": str(tmp_path / "copy")}
        copied = run_aegis(["peer", "add", "vps", invited.stdout.strip()], tmp_path, **elsewhere)
        assert copied.returncode == 1 and "claimed already" in copied.stderr  # and at vps
        removed = run_aegis(["peer", "remove", "vps"], tmp_path, **laptop)
        assert removed.returncode == 0 and "Removed the link vps" in removed.stdout
    finally:
        web.terminate()
        web.wait(timeout=20)
        EmbeddedRedis(tmp_path / "vps").stop()  # a daemon of its own: not stopped with the web
    secret = read_invitation(invited.stdout).secret
    for text in (log.read_text(), invited.stderr, added.stdout, added.stderr, listed):
        assert secret not in text and invited.stdout.strip() not in text
