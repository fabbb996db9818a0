"""``/metrics`` through the real web app, read by ``prometheus_client``'s own parser: scraped
during a burst of messages, refused without the token, its series a fixed set."""

from __future__ import annotations

import asyncio
import os
import stat
from datetime import timedelta

import aiohttp
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import update

from aegis.metrics import TOKEN_FILE
from bot.store.tables import schedules
from bot.timeutil import now
from bot.upkeep.schedules import BUILTIN_SCHEDULES, Schedules
from tests.helpers.stack import eventually

FAMILIES = {
    "aegis_broker_up",
    "aegis_queue_messages",
    "aegis_deliveries",
    "aegis_outbox_unsent_messages",
    "aegis_outbox_oldest_unsent_age_seconds",
    "aegis_cards_pending",
    "aegis_agent_runs_under_way",
    "aegis_agent_runs_recent_endings",
    "aegis_agent_runs_recent_no_effect",
    "aegis_schedule_lag_seconds",
    "aegis_model_last_success_timestamp_seconds",
    "aegis_processes_alive",
    "aegis_process_resident_memory_bytes",
    "aegis_scrape_duration_seconds",
    "process_resident_memory_bytes",
}


def token_of(stack) -> str:
    path = stack.settings.data_dir / "secrets" / TOKEN_FILE
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    return path.read_text().strip()


async def scrape(stack, token: str | None) -> tuple[int, str, dict]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{stack.settings.web_url}/metrics", headers=headers) as response:
            return response.status, await response.text(), dict(response.headers)


def parsed(text: str) -> dict[str, dict[tuple, float]]:
    """Family name -> {(sample name, sorted labels): value}, through prometheus_client's parser."""
    return {
        family.name: {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for sample in family.samples
        }
        for family in text_string_to_metric_families(text)
    }


async def test_a_scrape_during_a_burst_parses_and_counts_what_was_delivered(stack):
    token = token_of(stack)
    burst = asyncio.gather(*(stack.send(f"/ping {n}") for n in range(40)))
    scrapes = []
    while not burst.done():
        scrapes.append(await scrape(stack, token))
        await asyncio.sleep(0.05)
    await burst
    assert scrapes and all(status == 200 for status, _, _ in scrapes)
    for _, text, headers in scrapes:
        assert FAMILIES <= set(parsed(text)) and headers["Content-Type"].startswith("text/plain")

    async def all_delivered():
        families = parsed((await scrape(stack, token))[1])
        sent = families["aegis_deliveries"][("aegis_deliveries_total", (("outcome", "sent"),))]
        return families if sent >= 40 else None

    families = await eventually(all_delivered, timeout=30)
    unsent = families["aegis_outbox_unsent_messages"]
    assert {labels for _, labels in unsent} == {
        (("status", s),) for s in ("pending", "sending", "failed")
    }
    assert families["aegis_broker_up"][("aegis_broker_up", ())] == 1
    kinds = {dict(labels)["kind"] for _, labels in families["aegis_processes_alive"]}
    assert {"web", "worker"} <= kinds
    memory = families["aegis_process_resident_memory_bytes"]
    assert memory and all(value > 1e6 for value in memory.values())
    under_way = {dict(labels)["state"] for _, labels in families["aegis_agent_runs_under_way"]}
    assert under_way == {"queued", "running", "parked"}
    ended = {dict(labels)["state"] for _, labels in families["aegis_agent_runs_recent_endings"]}
    assert ended == {"completed", "failed", "timed_out", "cancelled"}


async def test_schedule_lag_is_how_far_past_due_each_enabled_schedule_is(stack):
    await Schedules(stack.store).seed(BUILTIN_SCHEDULES)  # no clock in this stack: by hand
    async with stack.store.write() as conn:
        await conn.execute(update(schedules).values(next_run_at=now() + timedelta(minutes=5)))
        late = schedules.c.name == "outbox-sweep"
        await conn.execute(
            update(schedules).where(late).values(next_run_at=now() - timedelta(seconds=90))
        )
        await conn.execute(
            update(schedules).where(schedules.c.name == "run-sweep").values(enabled=False)
        )
    lag = {
        dict(labels)["schedule"]: value
        for (_, labels), value in parsed((await scrape(stack, token_of(stack)))[1])[
            "aegis_schedule_lag_seconds"
        ].items()
    }
    assert set(lag) == {s.name for s in BUILTIN_SCHEDULES} - {"run-sweep"}
    assert 90 <= lag.pop("outbox-sweep") < 200 and set(lag.values()) == {0}


async def test_without_the_token_or_with_another_the_answer_is_401_and_names_no_secret(stack):
    token = token_of(stack)
    for offered in (None, "", token[:-1], token + "x", "Basic " + token):
        status, text, headers = await scrape(stack, offered)
        assert status == 401 and token not in text
        assert headers["WWW-Authenticate"].startswith("Bearer")
    async with aiohttp.ClientSession() as session:
        basic = {"Authorization": f"Basic {token}"}
        async with session.get(f"{stack.settings.web_url}/metrics", headers=basic) as response:
            assert response.status == 401
