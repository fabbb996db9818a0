"""``aegis up`` with nothing configured: the README's promise, run as a user would run it."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp

from aegis.embedded_redis import EmbeddedRedis
from emulator import DEFAULT_USER
from emulator.client import EmulatorClient
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
    environment = {k: v for k, v in os.environ.items() if not k.startswith("AEGIS_")}
    environment["AEGIS_PORT"] = str(port)
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
        await eventually(lambda: healthy(f"http://127.0.0.1:{port}/healthz"), timeout=15)
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
    finally:
        process.send_signal(signal.SIGTERM)
        returncode = await asyncio.to_thread(process.wait, 30)
    output = log.read_text()
    assert returncode == 0, output
    assert "Traceback" not in output, output
    data_dir = tmp_path / ".aegis"
    assert (data_dir / "aegis.sqlite3").exists()
    assert not EmbeddedRedis(data_dir).is_running()
    assert key not in output.replace(chat_url, "")  # the key appears only in the announced URL
    assert (data_dir / "secrets" / "emulator-token").read_text() not in output
