"""Monitors end to end, on SQLite and Postgres with a real Redis: the real clock enqueues each
due slot, a real Dramatiq worker probes a real local HTTP server, and the owner watches, reads
/monitors and taps the incident card through the emulator, the way a phone would."""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta

import pyotp
import pytest
from sqlalchemy import select, update

from bot.chat.outbox import Outbox
from bot.config.secrets import SecretFiles
from bot.monitors.incidents import Incidents
from bot.monitors.monitor import CheckResult, MonitorKind, MonitorSpec
from bot.monitors.monitors import Monitors
from bot.store.tables import outbox
from bot.timeutil import now
from emulator import EmulatorState
from jobs.worker.enqueue import make_enqueue
from tests.helpers.runs import buttons, message_with, tap
from tests.helpers.stack import (
    OWNER_CHAT,
    eventually,
    make_settings,
    running_clock,
    running_stack,
)
from tests.helpers.target import health_target

AGENTS = """\
agents:
  medic:
    name: Medic
    harness: script
    tags: [monitors]
    deadline: 60
    steps:
      - say: "Looking into it: {request}"
"""


@pytest.fixture
async def target():
    """A site whose health the test decides."""
    async with health_target() as state:
        yield state


@pytest.fixture
async def stack(tmp_path, database_url, redis_server_url, redis_namespace):
    settings = make_settings(tmp_path / "data", database_url, redis_server_url)
    settings.config_file.parent.mkdir(parents=True, exist_ok=True)
    settings.config_file.write_text(AGENTS, encoding="utf-8")
    async with running_stack(settings, namespace=redis_namespace) as running:
        await running.ask("/start")
        yield running


clock = running_clock


def name(target) -> str:
    """The name /watch gives the target's URL: its host, port and path."""
    return target["url"].removeprefix("http://")


async def answer_to(stack, text: str, pattern: str) -> dict:
    sent = await stack.send(text)
    return await message_with(stack, pattern, after=sent["message_id"])


async def checked(stack, hits: int, target) -> None:
    await eventually(lambda: target["hits"] >= hits, timeout=15)


async def test_watch_a_site_go_down_ack_and_recover_on_one_card(stack, target):
    async with clock(stack):
        watch = f"/watch {target['url']} every 10s fail 1 recover 1"
        added = await answer_to(stack, watch, r"^Watching ")
        assert re.match(
            r"Watching http://127\.0\.0\.1:\d+/health as #1 127\.0\.0\.1:\d+/health", added["text"]
        )
        again = await answer_to(stack, watch, r"^Already watched as #1 ")
        assert "/monitors" in again["text"]
        await checked(stack, 1, target)  # checked at once
        listing = await answer_to(stack, "/monitors", r"^Monitors \(1\):")
        assert "🟢 up" in listing["text"] or "⚪ new" in listing["text"]
        assert list(buttons(listing)) == ["Check #1", "Pause #1", "Remove #1"]

        target["healthy"] = False
        assert (
            await tap(stack, listing, "Check #1") == f"#1 {name(target)} checked within a second."
        )
        card = await message_with(
            stack, r"^🔴 127\.0\.0\.1:\d+/health is down", after=listing["message_id"]
        )
        assert "Last error: status 503, expected 200–399" in card["text"]
        assert list(buttons(card)) == ["Ack", "Silence 1h", "Silence 1d", "Run medic"]

        assert await tap(stack, card, "Ack") == "Acknowledged: no more reminders for this incident."
        assert (await tap(stack, card, "Ack")).startswith("Already acknowledged at ")

        async def edited(pattern):
            for message in await stack.bot_messages():
                if message["message_id"] == card["message_id"] and re.search(
                    pattern, message["text"]
                ):
                    return message
            return None

        acked = await eventually(lambda: edited("Acknowledged by"))
        assert list(buttons(acked)) == ["Run medic"]

        target["healthy"] = True
        await tap(stack, listing, "Check #1")
        recovered = await eventually(lambda: edited(r"^🟢 127\.0\.0\.1:\d+/health recovered after"))
        assert buttons(recovered) == {}
        # One incident, one card: nothing else was sent about it.
        about = [
            m for m in await stack.bot_messages() if (m["text"] or "").startswith(("🔴", "🟢"))
        ]
        assert [m["message_id"] for m in about] == [card["message_id"]]


async def test_run_an_agent_from_the_incident_card(stack, target):
    target["healthy"] = False
    async with clock(stack):
        await answer_to(stack, f"/watch {target['url']} every 10s fail 1", r"^Watching ")
        card = await message_with(stack, r"is down")
        answer = await tap(stack, card, "Run medic")
        assert answer == "medic is on it; its run asks before it changes anything."
        result = await message_with(
            stack, r"Looking into it: 127\.0\.0\.1:\d+/health is down since"
        )
        assert "Find out why" in result["text"]


async def test_a_command_monitor_from_chat_is_watched_only_after_a_tap_and_a_code(stack):
    secret = pyotp.random_base32()
    SecretFiles(stack.settings.data_dir).put("totp", secret)
    async with clock(stack):
        card = await answer_to(stack, '/watch cmd "true" every 10s', r"Watch with a command")
        assert "'true'" in card["text"] and '"target": "true"' in card["text"]
        assert await stack.services.platform.monitors.all() == []
        answer = await tap(stack, card, "Approve + code")
        assert "code" in answer
        await message_with(stack, "send the current 6-digit code", after=card["message_id"])
        assert await stack.services.platform.monitors.all() == []  # a tap alone is not enough
        await stack.send(pyotp.TOTP(secret).now())
        added = await message_with(stack, r"^Watching cmd true as #1", after=card["message_id"])
        assert "every 10s" in added["text"]
        [monitor] = await stack.services.platform.monitors.all()
        assert monitor.spec.kind is MonitorKind.CMD
        await monitor_in(stack, "up")  # `true` exits 0, run without a shell


async def monitor_in(stack, state: str, monitor_id: int = 1):
    async def reached():
        monitor = await stack.services.platform.monitors.get(monitor_id)
        return monitor if monitor and monitor.state == state else None

    return await eventually(reached, timeout=20)


async def cards_in_chat(stack) -> list[dict]:
    return [m for m in await stack.bot_messages() if (m["text"] or "").startswith(("🔴", "🟢"))]


async def test_a_recovery_edit_telegram_refuses_with_500_arrives_later_exactly_once(stack, target):
    async with clock(stack):
        await answer_to(stack, f"/watch {target['url']} every 10s fail 1 recover 1", "^Watching")
        await monitor_in(stack, "up")
        target["healthy"] = False
        await stack.services.platform.monitors.check_now(1)
        card = await message_with(stack, r"is down")
        await stack.emulator.outage(500, "editMessageText", count=3)
        target["healthy"] = True
        await stack.services.platform.monitors.check_now(1)
        await monitor_in(stack, "up")

        async def recovered():
            [shown] = await cards_in_chat(stack)
            return shown if "recovered after" in shown["text"] else None

        shown = await eventually(recovered, timeout=60)
    assert shown["message_id"] == card["message_id"]
    assert (await stack.emulator.outage(0))["refused"] == 3  # refused three times, then sent
    async with stack.store.read() as conn:
        edits = (
            await conn.execute(
                select(outbox.c.status, outbox.c.attempts).where(outbox.c.kind == "edit")
            )
        ).all()
    assert [status for status, _ in edits] == ["sent"]  # one edit, sent once it could be
    assert edits[0].attempts >= 3


@pytest.mark.parametrize("status", [502, 429])  # a gateway down; flood control (retry_after)
async def test_telegram_down_across_five_changes_delivers_all_in_order_none_doubled(
    stack, target, status
):
    monitors = stack.services.platform.monitors
    async with clock(stack):
        await answer_to(stack, f"/watch {target['url']} every 10s fail 1 recover 1", "^Watching")
        await monitor_in(stack, "up")
        await stack.emulator.outage(status, "sendMessage", "editMessageText")
        for healthy, state in [(False, "down"), (True, "up")] * 2 + [(False, "down")]:
            target["healthy"] = healthy
            await monitors.check_now(1)
            await monitor_in(stack, state)
        assert await cards_in_chat(stack) == []  # nothing got through while Telegram was down
        await stack.emulator.outage(0)

        async def all_three():
            shown = await cards_in_chat(stack)
            texts = [m["text"].split("\n")[0] for m in shown]
            return shown if len(shown) == 3 and texts[1].endswith(("min", "min)")) else None

        shown = await eventually(all_three, timeout=90)
    first_lines = [m["text"].split("\n")[0] for m in shown]
    assert [line.split(" ", 2)[2].split(" after")[0] for line in first_lines[:2]] == [
        "recovered",
        "recovered",
    ]
    assert first_lines[2].startswith(f"🔴 {name(target)} is down")
    ids = [m["message_id"] for m in shown]
    assert ids == sorted(ids)  # in the order they happened


async def test_a_decision_whose_worker_died_before_asking_for_delivery_is_delivered(stack, target):
    """The check's transaction committed the card; the process died before it asked for a
    delivery (an outbox with no ``deliver``): the outbox sweep sends it, once."""
    orphaned = Monitors(
        stack.store, Incidents(stack.store, Outbox(stack.store), stack.services.signer)
    )
    monitor, _ = await orphaned.watch(
        MonitorSpec("site", MonitorKind.HTTP, target["url"], fail_after=1)
    )
    await orphaned.record(monitor.id, CheckResult.down("status 503"), chat_id=OWNER_CHAT)
    async with stack.store.write() as conn:  # as if it had waited for the sweep's grace
        await conn.execute(update(outbox).values(created_at=now() - timedelta(minutes=1)))
    assert await cards_in_chat(stack) == []
    await make_enqueue(stack.broker)("sweep_outbox")
    card = await message_with(stack, r"^🔴 site is down")
    assert "status 503" in card["text"]
    await make_enqueue(stack.broker)("sweep_outbox")
    await asyncio.sleep(1)
    assert len(await cards_in_chat(stack)) == 1


async def test_monitors_in_aegis_yaml_are_followed_without_a_restart(stack, target):
    path = stack.settings.config_file
    async with clock(stack):
        path.write_text(AGENTS + f"monitors:\n  site:\n    http: {target['url']}\n    every: 30s\n")
        monitor = await monitor_in(stack, "up")
        assert (monitor.name, monitor.source, monitor.spec.interval_seconds) == ("site", "file", 30)
        listing = await answer_to(stack, "/monitors", r"^Monitors \(1\):")
        assert "#1 site · 🟢 up" in listing["text"] and "24h 100%" in listing["text"]
        path.write_text(AGENTS)

        async def gone():
            return await stack.services.platform.monitors.all() == []

        await eventually(gone, timeout=15)


async def test_every_process_restarted_mid_incident_owes_exactly_one_still_down(
    tmp_path, database_url, redis_server_url, redis_namespace, target
):
    """Web, worker and clock stopped while a monitor is down, then started again on the same
    database and Redis (the emulated Telegram keeps its chats, as the real one would)."""
    settings = make_settings(tmp_path / "data", database_url, redis_server_url)
    settings.config_file.parent.mkdir(parents=True, exist_ok=True)
    settings.config_file.write_text(AGENTS, encoding="utf-8")
    telegram = EmulatorState()
    target["healthy"] = False
    async with running_stack(settings, namespace=redis_namespace, emulator_state=telegram) as first:
        await first.ask("/start")
        async with clock(first):
            await answer_to(first, f"/watch {target['url']} every 10s fail 1", "^Watching")
            card = await message_with(first, r"is down")
    async with running_stack(settings, namespace=redis_namespace, emulator_state=telegram) as again:
        async with clock(again):
            for _ in range(3):  # three more failing checks after the restart
                checks = target["hits"]
                await again.services.platform.monitors.check_now(1)
                await eventually(lambda hits=checks: target["hits"] > hits, timeout=15)
            notice = await message_with(again, r"^🔴 Still down", after=card["message_id"])
            await asyncio.sleep(1)  # what the last check would have sent has been sent
        texts = [m["text"] for m in await again.bot_messages(after=card["message_id"])]
    assert "(aegis restarted meanwhile)" in notice["text"]
    assert [text for text in texts if text.startswith("🔴")] == [notice["text"]]
    [incident] = await again.services.platform.monitors.incidents.open_ones()
    assert incident.reminders == 1 and not incident.restart_notice
    assert incident.next_remind_at == incident.opened_at + timedelta(hours=4)  # the original


async def test_monitors_pages_a_long_list_and_a_page_turns_in_place(stack, target):
    watched = stack.services.platform.monitors
    for number in range(25):
        url = f"{target['url']}?n={number}"  # one target twice is one monitor
        await watched.watch(MonitorSpec(f"site-{number:02}", MonitorKind.HTTP, url))
    listing = await answer_to(stack, "/monitors", r"^Monitors \(25\):")
    assert "Page 1 of 3." in listing["text"] and len(listing["text"]) < 4096
    assert "site-09" in listing["text"] and "site-10" not in listing["text"]
    labels = buttons(listing)
    assert "Next ›" in labels and "‹ Previous" not in labels

    async def turned(to: str):
        [shown] = [
            m for m in await stack.bot_messages() if m["message_id"] == listing["message_id"]
        ]
        return shown if to in shown["text"] else None

    await tap(stack, listing, "Next ›")
    second = await eventually(lambda: turned("Page 2 of 3."))
    assert "site-10" in second["text"] and "site-09" not in second["text"]
    assert {"‹ Previous", "Next ›"} <= set(buttons(second))
    await tap(stack, second, "Next ›")
    last = await eventually(lambda: turned("Page 3 of 3."))
    assert "site-24" in last["text"] and "Next ›" not in buttons(last)
    # No new message: every page was the one message, edited.
    assert len([m for m in await stack.bot_messages() if "Monitors (25)" in m["text"]]) == 1
