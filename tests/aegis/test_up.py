"""``aegis up`` with nothing configured: the README's promise, run as a user would run it."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp

from aegis.embedded_redis import EmbeddedRedis
from emulator import DEFAULT_USER
from emulator.client import EmulatorClient
from tests.helpers.cli import aegis_environment, run_aegis
from tests.helpers.stack import eventually, free_port


async def wait_for_chat_url(process: subprocess.Popen, log: Path) -> str:
    async def announced():
        if process.poll() is not None:
            raise AssertionError(f"aegis up exited early:\n{log.read_text()}")
        found = re.search(r"Open the chat page: (\S+)", log.read_text())
        return found.group(1) if found else None

    return await eventually(announced, timeout=30)


async def healthy(url: str) -> bool:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return (await response.json())["ok"]


async def approve_the_demo_write(client: EmulatorClient) -> None:
    """The README's tour: /demo's write waits for a tap, then runs."""
    chat = DEFAULT_USER["id"]
    sent = await client.send_message("/demo")
    after = sent["message"]["message_id"]

    async def bot_message_with(fragment: str):
        for message in await client.messages(chat, after):
            if message["from_bot"] and fragment in (message.get("text") or ""):
                return message
        return None

    card = await eventually(lambda: bot_message_with("Approval needed"), timeout=15)
    [[approve, _deny]] = card["reply_markup"]["inline_keyboard"]
    await client.tap(chat, card["message_id"], approve["callback_data"])
    await eventually(lambda: bot_message_with("ran: wrote"), timeout=15)


async def test_up_runs_everything_answers_ping_and_stops_cleanly(tmp_path):
    port = free_port()
    log = tmp_path / "up.log"
    environment = aegis_environment(AEGIS_PORT=str(port))
    with open(log, "w") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "aegis.cli", "up"],
            cwd=tmp_path,
            env=environment,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        chat_url = await wait_for_chat_url(process, log)
        assert chat_url.startswith(f"http://127.0.0.1:{port}/emulator/chat?key=")
        # A loaded machine may take a while to reach the emulator and the MCP port.
        await eventually(lambda: healthy(f"http://127.0.0.1:{port}/healthz"), timeout=45)
        key = chat_url.split("key=", 1)[1]
        client = EmulatorClient(f"http://127.0.0.1:{port}/emulator", key)
        sent = await client.send_message("/ping")
        [pong] = await client.wait_for_bot_messages(
            DEFAULT_USER["id"], 1, after=sent["message"]["message_id"], timeout=15
        )
        assert pong["text"].startswith("pong from worker")
        await approve_the_demo_write(client)
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/emulator/chat") as page:
                assert page.status == 200 and "<html" in (await page.text()).lower()
        # kill -USR1: every thread's stack into the log, and the process goes on.
        process.send_signal(signal.SIGUSR1)
        await eventually(lambda: "Current thread" in log.read_text() or None, timeout=10)
        assert "(most recent call first)" in log.read_text()
        assert await healthy(f"http://127.0.0.1:{port}/healthz")
    finally:
        process.send_signal(signal.SIGTERM)
        returncode = await asyncio.to_thread(process.wait, 30)
    output = log.read_text()
    assert returncode == 0, output
    assert "Traceback" not in output, output
    steps = ["up: stopping", "web and clock stopped; stopping the worker", "worker stopped"]
    at = [output.find(step) for step in steps]  # how it stopped, step by step, in the log
    assert -1 not in at and at == sorted(at), output[-3000:]
    data_dir = tmp_path / ".aegis"
    assert (data_dir / "aegis.sqlite3").exists()
    assert not EmbeddedRedis(data_dir).is_running()
    assert key not in output.replace(chat_url, "")  # the key appears only in the announced URL
    # What runs where and what to try first, on the terminal's first screen.
    assert f"Data dir:   {tmp_path / '.aegis'} (SQLite; Redis: embedded " in output
    assert "/mcp for coding agents (aegis agent token SLUG)" in output
    assert "Try first:  send /help in the chat page, then /demo" in output
    written = (data_dir / "aegis.log").read_text()  # aegis up's own log file, for `aegis logs`
    assert "web server on" in written and key not in written
    assert oct((data_dir / "aegis.log").stat().st_mode & 0o777) == "0o600"
    assert (data_dir / "secrets" / "emulator-token").read_text() not in output


async def test_a_second_aegis_on_the_same_data_dir_is_refused_and_the_first_loses_nothing(
    tmp_path,
):
    port = free_port()
    log = tmp_path / "up.log"
    environment = aegis_environment()
    with open(log, "w") as output:
        first = subprocess.Popen(
            [sys.executable, "-m", "aegis.cli", "up"],
            cwd=tmp_path,
            env={**environment, "AEGIS_PORT": str(port)},
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        chat_url = await wait_for_chat_url(first, log)
        for command in ("up", "web", "clock"):  # other ports: only the data dir is shared
            second = await asyncio.to_thread(
                run_aegis, [command], tmp_path, AEGIS_PORT=str(free_port())
            )
            assert second.returncode == 2, second.stderr
            [sentence] = second.stderr.strip().splitlines()
            assert sentence.startswith(
                f"aegis: another aegis already runs on the data dir {tmp_path / '.aegis'} "
            )
            assert f"as pid {first.pid} (aegis up)" in sentence
            assert f"its chat page is {chat_url}." in sentence
            assert second.stdout == ""
        doctor = await asyncio.to_thread(run_aegis, ["doctor"], tmp_path, AEGIS_PORT=str(port))
        assert f"aegis is running here (pid {first.pid} (aegis up))" in doctor.stdout
        opened = await asyncio.to_thread(run_aegis, ["open"], tmp_path)
        assert opened.returncode == 0
        assert opened.stdout.startswith(f"The chat page: {chat_url}\n")  # the address again
        shown = await asyncio.to_thread(run_aegis, ["status"], tmp_path)
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.startswith(f"aegis runs here: pid {first.pid} (aegis up).")
        assert "Queues: default " in shown.stdout and "Broker: the embedded Redis" in shown.stdout
        assert "web: " in shown.stdout and "worker: " in shown.stdout  # processes alive
        # The first goes on answering, its replies delivered to its own chat.
        key = chat_url.split("key=", 1)[1]
        client = EmulatorClient(f"http://127.0.0.1:{port}/emulator", key)
        for _ in range(3):
            sent = await client.send_message("/ping")
            [pong] = await client.wait_for_bot_messages(
                DEFAULT_USER["id"], 1, after=sent["message"]["message_id"], timeout=15
            )
            assert pong["text"].startswith("pong from worker")
    finally:
        first.send_signal(signal.SIGTERM)
        returncode = await asyncio.to_thread(first.wait, 30)
    assert returncode == 0, log.read_text()
    closed = run_aegis(["open"], tmp_path)
    assert closed.returncode == 1 and "aegis is not running on the data dir" in closed.stdout
    after = run_aegis(["status"], tmp_path)
    assert after.stdout.startswith("No aegis web process runs here.")
    assert "Queues: broker unreachable" in after.stdout  # its Redis was not started to look
    assert not EmbeddedRedis(tmp_path / ".aegis").is_running()
    lock = tmp_path / ".aegis" / "web.lock"
    assert oct(lock.stat().st_mode & 0o777) == "0o600"
    assert "key" not in lock.read_text()  # where it listens and who it is: no secret


def test_what_a_process_built_at_startup_is_kept_out_of_the_collectors_sight():
    """A full collection walks every tracked object; what startup built (modules, tables, the
    platform) lives as long as the process, so it is frozen once, not walked again and again."""
    import gc

    from aegis.processes import freeze_startup

    try:
        freeze_startup()
        assert gc.get_freeze_count() > 10_000
    finally:
        gc.unfreeze()
