"""A deploy asked from one aegis and run on another, each a whole aegis of its own: vps is
``aegis up`` in a process of its own (its data dir, SQLite, embedded Redis and emulated chat),
laptop the whole stack in this process (its database, a real Redis, a worker). The owner of
laptop sends /deploy site@vps; vps's owner approves it on a card with a code; laptop's answer is
edited as it goes and ends with the deploy's exit code, and the recipe ran once. With vps down,
the requests wait on laptop and go out in order once it is back."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import aiohttp
import pyotp
import pytest
from sqlalchemy import select

from aegis.embedded_redis import EmbeddedRedis
from bot.actions.call import CallStatus, ToolCall
from bot.config.secrets import SecretFiles
from bot.store.database import Store
from bot.store.tables import agent_messages, peer_requests
from emulator import DEFAULT_USER
from emulator.client import EmulatorClient
from federation.client import PeerClient
from federation.invitations import read_invitation
from federation.links import Peers
from jobs.worker.enqueue import make_enqueue
from tests.helpers.cli import aegis_environment, run_aegis
from tests.helpers.mcp import mcp_client
from tests.helpers.runs import tap
from tests.helpers.stack import (
    OWNER_CHAT,
    eventually,
    free_port,
    make_settings,
    running_stack,
)

CONFIG = """\
agents:
  laptop:
    name: The laptop
    peer: true
    tools: [deploy.run, runs.start, messages.send]
  scout:
    name: Scout
    harness: script
    tools: [messages.read, messages.send]
    deadline: 60
    steps:
      - say: "Looked into it: {{request}}"
deploy:
  site:
    description: Deploy the site
    command: [{python}, -c, "open('deploys', 'a').write('site\\\\n')"]
    workdir: {workdir}
  docs:
    description: Deploy the docs
    command: [{python}, -c, "open('deploys', 'a').write('docs\\\\n')"]
    workdir: {workdir}
"""
VPS_CHAT = DEFAULT_USER["id"]


class Vps:
    """vps as a user runs it: ``aegis up`` in its own data dir, started and stopped at will."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.data = root / "vps"
        self.port = free_port()
        self.workdir = root / "site"
        self.workdir.mkdir()
        self.data.mkdir()
        (self.data / "aegis.yaml").write_text(
            CONFIG.format(python=sys.executable, workdir=self.workdir), encoding="utf-8"
        )
        self.totp = pyotp.random_base32()
        SecretFiles(self.data).put("totp", self.totp)
        self.mcp_port = free_port()
        self.env = {
            "AEGIS_DATA_DIR": str(self.data),
            "AEGIS_CONFIG_FILE": str(self.data / "aegis.yaml"),
            "AEGIS_PEER_NAME": "vps",
            "AEGIS_PORT": str(self.port),
            "AEGIS_MCP_PORT": str(self.mcp_port),
        }
        self.process: subprocess.Popen | None = None
        self.last_step: int | None = None  # the TOTP step whose code was used last
        self.log = root / "vps.log"

    def _announced(self) -> list[str]:
        text = self.log.read_text() if self.log.exists() else ""
        return re.findall(r"Open the chat page: (\S+)", text)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def invite(self, name: str) -> str:
        invited = run_aegis(["peer", "invite", name], self.root, **self.env)
        assert invited.returncode == 0, invited.stderr
        return invited.stdout.strip()

    async def start(self) -> EmulatorClient:
        before = self._announced()
        with open(self.log, "a") as output:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "aegis.cli", "up"],
                cwd=self.root,
                env=aegis_environment(**self.env),
                stdout=output,
                stderr=subprocess.STDOUT,
            )

        async def announced():
            if self.process.poll() is not None:
                raise AssertionError(f"aegis up exited early:\n{self.log.read_text()}")
            found = self._announced()
            return found[-1] if len(found) > len(before) else None

        chat_url = await eventually(announced, timeout=45)
        key = chat_url.split("key=", 1)[1]
        client = EmulatorClient(f"{self.url}/emulator", key)
        await client.send_message("/start")  # vps's owner has opened the chat
        return client

    async def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(self.process.wait, 30)
            except subprocess.TimeoutExpired:
                self.process.send_signal(signal.SIGUSR1)  # every thread's stack, into the log
                await asyncio.sleep(1)
                self.process.kill()
                tail = self.log.read_text()[-6000:]
                raise AssertionError(f"aegis up did not stop within 30 s:\n{tail}") from None
        self.process = None

    async def message_with(self, chat: EmulatorClient, pattern: str, *, after: int = 0) -> dict:
        async def found():
            for message in await chat.messages(VPS_CHAT, after):
                if message["from_bot"] and re.search(pattern, message.get("text") or ""):
                    return message
            return None

        return await eventually(found, timeout=30)

    async def approve(self, chat: EmulatorClient, card: dict) -> None:
        buttons = {
            b["text"]: b["callback_data"]
            for row in card["reply_markup"]["inline_keyboard"]
            for b in row
        }
        last = max(m["message_id"] for m in await chat.messages(VPS_CHAT, 0))
        await chat.tap(VPS_CHAT, card["message_id"], buttons["Approve + code"])
        await self.message_with(chat, "send the current 6-digit code", after=last)
        totp = pyotp.TOTP(self.totp)
        while totp.timecode(datetime.now()) == self.last_step:  # a code is good once
            await asyncio.sleep(0.5)
        self.last_step = totp.timecode(datetime.now())
        await chat.send_message(totp.now())

    def deploys(self) -> list[str]:
        path = self.workdir / "deploys"
        return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
async def vps(tmp_path):
    running = Vps(tmp_path)
    try:
        yield running
    finally:
        await running.stop()
        EmbeddedRedis(running.data).stop()  # a daemon of its own: not stopped with aegis up
    assert "Traceback" not in running.log.read_text()


LAPTOP_CONFIG = """\
agents:
  scout:
    name: Scout
    tools: [peers.*, messages.send, messages.read]
  other:
    tools: [peers.*]
  vps:
    peer: true
    tools: [messages.send]
"""


@contextlib.asynccontextmanager
async def laptop_on(tmp_path, database_url, redis_server_url, redis_namespace):
    settings = make_settings(
        tmp_path / "laptop", database_url, redis_server_url, peer_name="laptop"
    )
    settings.config_file.parent.mkdir(parents=True, exist_ok=True)
    settings.config_file.write_text(LAPTOP_CONFIG, encoding="utf-8")
    async with running_stack(settings, namespace=redis_namespace) as stack:
        await stack.ask("/start")
        yield stack


@pytest.fixture
async def laptop(tmp_path, database_url, redis_server_url, redis_namespace):
    async with laptop_on(tmp_path, database_url, redis_server_url, redis_namespace) as stack:
        yield stack


@pytest.fixture
async def laptop_on_sqlite(tmp_path, redis_server_url, redis_namespace):
    """laptop on SQLite only, for a test whose point is vps's side (it takes a minute)."""
    database = f"sqlite+aiosqlite:///{tmp_path / 'laptop.sqlite3'}"
    async with laptop_on(tmp_path, database, redis_server_url, redis_namespace) as stack:
        yield stack


async def link(laptop, invitation: str) -> None:
    peers = Peers(laptop.store, SecretFiles(laptop.settings.data_dir))
    async with aiohttp.ClientSession() as session:
        await PeerClient(peers, session).link("vps", read_invitation(invitation))


async def laptop_says(laptop, pattern: str, *, timeout: float = 30) -> dict:
    """The bot message in laptop's chat whose text, as edited last, matches."""

    async def found():
        for message in await laptop.bot_messages():
            if re.search(pattern, message.get("text") or ""):
                return message
        return None

    try:
        return await eventually(found, timeout=timeout)
    except AssertionError:
        shown = [m.get("text") for m in await laptop.bot_messages()]
        raise AssertionError(f"no message matches {pattern!r} in laptop's chat: {shown}") from None


async def test_a_deploy_asked_on_laptop_runs_on_vps_after_its_owner_approves_with_a_code(
    vps, laptop
):
    invitation = vps.invite("laptop")
    chat = await vps.start()
    await link(laptop, invitation)
    asked = await laptop.send("/deploy site@vps")
    answer = await laptop_says(laptop, r"^⏳ (Asked vps to deploy site|vps took deploy site)")
    assert answer["reply_to_message_id"] == asked["message_id"]
    card = await vps.message_with(chat, r"laptop \(for its owner\) wants to run 'deploy.run'")
    assert "laptop acts for a federated peer; its requests need a code" in card["text"]
    assert sys.executable in card["text"] and str(vps.workdir) in card["text"]
    waiting = await laptop_says(laptop, r"^⏳ vps took deploy site and asks its owner")
    assert waiting["message_id"] == answer["message_id"]  # the same message, edited
    assert vps.deploys() == []
    await vps.approve(chat, card)
    done = await laptop_says(laptop, r"^✅ vps ran deploy site: exit 0")
    assert done["message_id"] == answer["message_id"]
    assert vps.deploys() == ["site"]
    await asyncio.sleep(1)  # a repeated turn or a sweep would tell it again now
    await make_enqueue(laptop.broker)("sweep_peer_requests")
    await asyncio.sleep(2)
    assert vps.deploys() == ["site"]
    told = [m for m in await laptop.bot_messages() if "deploy site" in (m.get("text") or "")]
    assert len(told) == 1 and told[0]["message_id"] == answer["message_id"]
    # Asked again and denied there: laptop is told nothing was done, on that request's answer.
    again = await laptop.send("/deploy site@vps")
    second = await vps.message_with(
        chat, r"laptop \(for its owner\) wants to run 'deploy.run'", after=card["message_id"]
    )
    buttons = {
        b["text"]: b["callback_data"]
        for row in second["reply_markup"]["inline_keyboard"]
        for b in row
    }
    await chat.tap(VPS_CHAT, second["message_id"], buttons["Deny"])
    denied = await laptop_says(laptop, r"^🚫 vps did not run deploy site: .*nothing was done")
    assert denied["reply_to_message_id"] == again["message_id"]
    assert vps.deploys() == ["site"]


async def test_requests_to_vps_while_it_is_down_go_out_in_order_once_it_is_back(
    vps, laptop_on_sqlite
):
    laptop = laptop_on_sqlite
    invitation = vps.invite("laptop")
    await vps.start()
    await link(laptop, invitation)
    await vps.stop()
    await laptop.send("/deploy site@vps")
    await laptop_says(laptop, r"deploy site.*cannot be reached now")
    await laptop.send("/deploy docs@vps")
    await laptop_says(laptop, r"deploy docs.*cannot be reached now")
    chat = await vps.start()
    await make_enqueue(laptop.broker)("sweep_peer_requests")  # the clock's sweep, at once
    first = await vps.message_with(chat, r"wants to run 'deploy.run'")
    assert '"recipe": "site"' in first["text"]  # the first asked, the first sent
    await vps.approve(chat, first)
    await laptop_says(laptop, r"^✅ vps ran deploy site: exit 0")
    second = await vps.message_with(chat, r"(?s)wants to run 'deploy.run'.*docs")
    await vps.approve(chat, second)
    await laptop_says(laptop, r"^✅ vps ran deploy docs: exit 0")
    assert vps.deploys() == ["site", "docs"]
    store = Store(f"sqlite+aiosqlite:///{vps.data / 'aegis.sqlite3'}")
    try:
        async with store.read() as conn:
            rows = (await conn.execute(select(peer_requests).order_by(peer_requests.c.id))).all()
    finally:
        await store.close()
    assert [row.args["recipe"] for row in rows] == ["site", "docs"]


async def test_an_agent_on_laptop_asks_vps_to_deploy_and_long_polls_the_result(
    vps, laptop_on_sqlite
):
    laptop = laptop_on_sqlite
    invitation = vps.invite("laptop")
    chat = await vps.start()
    await link(laptop, invitation)
    actions = laptop.services.platform.actions
    status = ToolCall("scout", "peers.status", {"peer": "vps"}, chat_id=OWNER_CHAT)
    said = await actions.perform(status)  # a read: at once
    assert said.status is CallStatus.RAN and said.result["ok"] is True, said
    assert said.result["said"].startswith("vps (vps, aegis ")
    [shown] = await laptop.ask("/peers vps")
    assert shown["text"].startswith("vps (vps, aegis ")
    assert "): ok; queues: default" in shown["text"]
    asked = {"peer": "vps", "recipe": "site"}
    nowhere = await actions.perform(
        ToolCall("scout", "peers.deploy", {**asked, "peer": "nowhere"}, chat_id=OWNER_CHAT)
    )
    assert nowhere.status is CallStatus.DENIED and "no peer called 'nowhere'" in nowhere.reason
    call = ToolCall("scout", "peers.deploy", asked, chat_id=OWNER_CHAT)
    first = await actions.perform(call)
    assert first.status is CallStatus.GATED  # asking a peer at all waits for a tap here
    here = await laptop_says(laptop, r"scout wants to run 'peers.deploy'")
    await tap(laptop, here, "Approve")
    sent = await actions.perform(call)
    assert sent.status is CallStatus.RAN and sent.result["state"] == "queued"
    request = sent.result["request"]
    card = await vps.message_with(chat, r"laptop \(for its agent scout\) wants to run")
    await vps.approve(chat, card)
    read = ToolCall(
        "scout", "peers.request", {"request": request, "wait_seconds": 25}, chat_id=OWNER_CHAT
    )
    outcome = await actions.perform(read)
    assert outcome.status is CallStatus.RAN and outcome.result["state"] == "done", outcome
    assert outcome.result["result"]["exit_code"] == 0 and vps.deploys() == ["site"]
    theirs = ToolCall("other", "peers.request", {"request": request}, chat_id=OWNER_CHAT)
    refused = await actions.perform(theirs)
    assert refused.status is CallStatus.FAILED and "you made no request" in refused.reason
    # An agent's request is the agent's to report: nothing was said of it in laptop's chat.
    assert not [m for m in await laptop.bot_messages() if "vps ran" in (m.get("text") or "")]


async def test_a_run_of_vps_scout_asked_from_laptops_chat_ends_with_its_result(
    vps, laptop_on_sqlite
):
    laptop = laptop_on_sqlite
    invitation = vps.invite("laptop")
    chat = await vps.start()
    await link(laptop, invitation)
    await laptop.send("/run scout@vps the disk on /srv")
    card = await vps.message_with(chat, r"laptop \(for its owner\) wants to run 'runs.start'")
    await vps.approve(chat, card)
    done = await laptop_says(laptop, r"^✅ vps's scout finished \(run #\d+ there\)")
    assert done["text"].endswith("\nDone: every step ran.")  # the run's result, carried over
    await vps.message_with(chat, r"Looked into it: the disk on /srv")  # it spoke there


async def test_an_agent_on_laptop_leaves_a_message_for_an_agent_on_vps(vps, laptop_on_sqlite):
    laptop = laptop_on_sqlite
    invitation = vps.invite("laptop")
    chat = await vps.start()
    await link(laptop, invitation)
    actions = laptop.services.platform.actions
    send = ToolCall(
        "scout", "messages.send", {"to": "scout@vps", "text": "the disk is full"}, chat_id=0
    )
    sent = await actions.perform(send)  # it only speaks: no tap here; the owner there decides
    assert sent.status is CallStatus.RAN and sent.result["to"] == "scout@vps", sent
    nobody = ToolCall("scout", "messages.send", {"to": "nobody@vps", "text": "hi"}, chat_id=0)
    unknown = await actions.perform(nobody)
    card = await vps.message_with(chat, r"laptop \(for its agent scout\) wants to run 'messages")
    assert '"text": "the disk is full"' in card["text"]
    await vps.approve(chat, card)
    read = ToolCall(
        "scout", "peers.request", {"request": sent.result["request"], "wait_seconds": 25}
    )
    outcome = await actions.perform(read)
    assert outcome.result["state"] == "done", outcome
    refused = await actions.perform(
        ToolCall("scout", "peers.request", {"request": unknown.result["request"]})
    )
    assert refused.result["state"] == "refused"
    assert "no agent here is called 'nobody'" in refused.result["reason"]
    store = Store(f"sqlite+aiosqlite:///{vps.data / 'aegis.sqlite3'}")
    try:
        async with store.read() as conn:
            [message] = (await conn.execute(select(agent_messages))).all()
    finally:
        await store.close()
    assert (message.sender, message.recipient, message.text) == (
        "scout@laptop",  # its sender there, so a reply finds its way back
        "scout",
        "the disk is full",
    )


async def test_a_reply_from_vps_comes_back_to_laptops_agent_citing_what_it_answers(
    vps, laptop_on_sqlite
):
    """Linked both ways: laptop's scout writes to scout@vps; vps's scout, a coding agent over
    MCP, reads it from scout@laptop and replies; the reply crosses back, under laptop's own gate
    and code, and laptop's scout reads it from scout@vps, the message it answers quoted."""
    laptop = laptop_on_sqlite
    totp = pyotp.random_base32()
    SecretFiles(laptop.settings.data_dir).put("totp", totp)
    invitation = vps.invite("laptop")
    chat = await vps.start()
    await link(laptop, invitation)
    laptop_peers = Peers(laptop.store, SecretFiles(laptop.settings.data_dir))
    back = await laptop_peers.invite("vps", us="laptop", url=laptop.settings.web_url)
    added = await asyncio.to_thread(
        run_aegis, ["peer", "add", "laptop", back.text()], vps.root, **vps.env
    )
    assert added.returncode == 0, added.stdout + added.stderr
    actions = laptop.services.platform.actions
    send = {"to": "scout@vps", "text": "the disk is full"}
    sent = await actions.perform(ToolCall("scout", "messages.send", send, chat_id=OWNER_CHAT))
    assert sent.status is CallStatus.RAN, sent
    card = await vps.message_with(chat, r"laptop \(for its agent scout\) wants to run 'messages")
    await vps.approve(chat, card)
    token = await asyncio.to_thread(run_aegis, ["agent", "token", "scout"], vps.root, **vps.env)
    assert token.returncode == 0, token.stderr
    settings = make_settings(vps.data, "sqlite://", "redis://", mcp_port=vps.mcp_port)
    async with mcp_client(settings, token.stdout.strip()) as scout_there:

        async def arrived():
            read = await scout_there.call_tool("messages-read", {})
            found = json.loads(read.content[0].text)["messages"]
            return found[0] if found else None

        message = await eventually(arrived, timeout=30)
        assert (message["from"], message["text"]) == ("scout@laptop", "the disk is full")
        reply = {"reply_to": message["id"], "text": "cleaned /var/log"}
        replied = await scout_there.call_tool("messages-send", reply)
        assert not replied.is_error, replied.content[0].text
    here = await laptop_says(laptop, r"vps \(for its agent scout\) wants to run 'messages.send'")
    assert "cleaned /var/log" in here["text"]
    await tap(laptop, here, "Approve + code")
    await laptop_says(laptop, "send the current 6-digit code")
    await laptop.send(pyotp.TOTP(totp).now())
    read = ToolCall("scout", "messages.read", {}, chat_id=OWNER_CHAT)

    async def answered():
        outcome = await actions.perform(read)
        return outcome.result["messages"] if outcome.ran else None

    [answer] = await eventually(answered, timeout=30)
    assert answer["from"] == "scout@vps"
    assert answer["text"] == "> the disk is full\n\ncleaned /var/log"


async def test_what_cannot_be_asked_of_a_peer_is_answered_in_words_and_queues_nothing(
    laptop_on_sqlite,
):
    laptop = laptop_on_sqlite
    [usage] = await laptop.ask("/deploy site")
    assert usage["text"].startswith("Say which recipe and which aegis: /deploy site@vps")
    [unknown] = await laptop.ask("/deploy site@nowhere")
    assert "no link called nowhere" in unknown["text"] and "Nothing was asked" in unknown["text"]
    [empty] = await laptop.ask("/run scout@nowhere")
    assert empty["text"].startswith("Say what scout@nowhere should do")
    [unlinked] = await laptop.ask("/run scout@nowhere check the disk")
    assert "no link called nowhere" in unlinked["text"]
    async with laptop.store.read() as conn:
        assert (await conn.execute(select(peer_requests))).all() == []
