"""The monitors.* tools called as agents call them, through the gate on a platform built as the
processes build it, on SQLite and Postgres: a list runs at once, a watch waits for a tap, a
command watch for a tap and a code, and what an agent asks is checked like /watch."""

from __future__ import annotations

import pytest

from bot.actions.call import CallStatus, ToolCall
from bot.config.settings import Settings
from bot.core import Platform
from bot.interactions.interaction import InteractionStatus
from tests.helpers.interactions import ALICE, CHAT, SIGNER, RecordingEnqueue

CONFIG = """
agents:
  watcher: {tools: ["monitors.*"]}
  reader: {tools: [monitors.list]}
"""
SITE = {"kind": "http", "target": "https://status.example.org/", "every": "30s"}


@pytest.fixture
def platform(tmp_path, store) -> Platform:
    (tmp_path / "aegis.yaml").write_text(CONFIG)
    settings = Settings(data_dir=tmp_path, config_file=tmp_path / "aegis.yaml", _env_file=None)
    return Platform.build(settings, store, SIGNER, RecordingEnqueue())


async def call(platform: Platform, tool: str, args: dict, agent: str = "watcher"):
    return await platform.actions.perform(ToolCall(agent, tool, args, CHAT))


async def approve(platform: Platform, card: int) -> None:
    reply = await platform.interactions.tap(card, "approve", ALICE, "Alice", codes_ready=True)
    assert reply.changed


async def test_a_list_runs_at_once_and_a_watch_waits_for_the_owners_tap(platform):
    listed = await call(platform, "monitors.list", {}, agent="reader")
    assert (listed.status, listed.result) == (CallStatus.RAN, {"monitors": []})
    asked = await call(platform, "monitors.watch", SITE)
    assert asked.status is CallStatus.GATED
    assert await platform.monitors.all() == []  # nothing is watched before the tap
    await approve(platform, asked.interaction_id)
    watched = await call(platform, "monitors.watch", SITE)
    assert watched.status is CallStatus.RAN
    assert watched.result == {
        "id": 1,
        "name": "status.example.org",
        "new": True,
        "watches": "https://status.example.org/",
    }
    [monitor] = await platform.monitors.all()
    assert (monitor.source, monitor.spec.interval_seconds) == ("agent:watcher", 30)
    [row] = (await call(platform, "monitors.list", {}, agent="reader")).result["monitors"]
    assert (row["name"], row["state"], row["made_by"]) == (
        "status.example.org",
        "pending",
        "agent:watcher",
    )


async def test_a_command_watch_needs_a_code_and_an_agent_without_the_grant_is_denied(platform):
    asked = await call(platform, "monitors.watch_command", {"command": "systemctl is-active x"})
    assert asked.status is CallStatus.GATED
    card = await platform.interactions.get(asked.interaction_id)
    assert card.step_up  # irreversible: the tap alone does not grant it
    await platform.interactions.tap(card.id, "approve", ALICE, "Alice", codes_ready=True)
    assert (await platform.interactions.get(card.id)).status is InteractionStatus.AWAITING_CODE
    assert (await call(platform, "monitors.watch_command", {"command": "x"})).status is (
        CallStatus.GATED
    )
    denied = await call(platform, "monitors.watch", SITE, agent="reader")
    assert denied.status is CallStatus.DENIED
    assert await platform.monitors.all() == []


@pytest.mark.parametrize(
    ("tool", "args", "says"),
    [
        ("monitors.watch", {"kind": "http", "target": "file:///etc/passwd"}, "url: only http://"),
        ("monitors.watch", {"kind": "tcp", "target": "db:70000"}, "port: 70000 is out of range"),
        ("monitors.watch_command", {"command": "true", "every": "5s"}, "every: must be at least"),
        ("monitors.watch_process", {"done": "true", "deadline": "1h"}, "run: only a run aegis"),
    ],
)
async def test_what_an_agent_asks_is_checked_before_anyone_is_asked(platform, tool, args, says):
    refused = await call(platform, tool, args)
    assert refused.status is CallStatus.DENIED and refused.interaction_id is None
    assert refused.reason.startswith("refused before asking anyone: ")
    assert says in refused.reason
    assert (await platform.interactions.open_interactions())[1] == 0  # no card to approve
    assert await platform.monitors.all() == []


async def test_a_process_watch_from_a_run_waits_for_a_tap_and_a_code_then_starts(platform):
    args = {"done": "test -f /tmp/never", "deadline": "30m", "every": "15s"}
    bad = await platform.actions.perform(
        ToolCall("watcher", "monitors.watch_process", {**args, "deadline": "1s"}, CHAT, 9)
    )
    assert bad.status is CallStatus.DENIED and "deadline: must be at least 1m" in bad.reason
    asked = await platform.actions.perform(
        ToolCall("watcher", "monitors.watch_process", args, CHAT, 9)
    )
    assert asked.status is CallStatus.GATED
    assert (await platform.interactions.get(asked.interaction_id)).step_up
    assert await platform.monitors.processes.watching() == []
