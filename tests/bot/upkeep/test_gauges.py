"""The numbers /metrics reads, on SQLite and Postgres: runs under way and how the latest ended,
the completed no-op counted, each model's last success, unsent rows and the oldest one's age."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import insert

from bot.store.tables import agent_runs, model_calls, outbox
from bot.timeutil import now
from bot.upkeep.gauges import read_gauges


async def add(store, table, rows: list[dict]) -> None:
    async with store.write() as conn:
        await conn.execute(insert(table), rows)


def run(status: str, effects: dict) -> dict:
    return {
        "agent": "a",
        "request": "r",
        "origin": "command",
        "chat_id": 1,
        "status": status,
        "step": "",
        "state": {},
        "effects": effects,
        "deadline_seconds": 60,
        "attempts": 0,
        "cancel_requested": False,
        "created_at": now(),
    }


def call(model: str, status: str, age: timedelta) -> dict:
    return {
        "agent": "a",
        "provider": "p",
        "model": model,
        "status": status,
        "latency_ms": 5,
        "prompt_tokens": 1,
        "completion_tokens": 1,
        "at": now() - age,
    }


async def test_the_gauges_read_what_the_tables_hold(store):
    await add(
        store,
        agent_runs,
        [
            run("queued", {}),
            run("parked", {}),
            run("parked", {}),
            run("completed", {"tool_calls": 2}),
            run("completed", {"tool_calls": 0}),
            run("completed", {}),
            run("completed", {"calls_denied": 2, "calls_failed": 1, "cards_asked": 1}),
            run("failed", {}),
        ],
    )
    await add(
        store,
        model_calls,
        [
            call("good", "ok", timedelta(hours=2)),
            call("good", "ok", timedelta(hours=1)),
            call("good", "http 500", timedelta(0)),
            call("broken", "timeout", timedelta(0)),
        ],
    )
    message = {"chat_id": 1, "kind": "text", "parts": ["x"], "telegram_message_ids": []}
    await add(
        store,
        outbox,
        [
            message | {"status": "sent", "created_at": now() - timedelta(days=3)},
            message | {"status": "pending", "created_at": now() - timedelta(seconds=120)},
            message | {"status": "failed", "created_at": now()},
        ],
    )
    gauges = await read_gauges(store)
    assert gauges.runs_under_way == {"queued": 1, "running": 0, "parked": 2}
    assert gauges.recent_endings == {"completed": 4, "failed": 1, "timed_out": 0, "cancelled": 0}
    assert gauges.recent_no_effect == 3  # refused and failed calls changed nothing
    assert set(gauges.model_last_ok) == {("p", "good")}  # "broken" never answered
    assert abs((now() - gauges.model_last_ok[("p", "good")]).total_seconds() - 3600) < 60
    assert gauges.outbox == {"pending": 1, "failed": 1}
    assert 120 <= gauges.oldest_owed_seconds < 180
    assert gauges.cards_pending == 0 and gauges.schedule_lag == {}
