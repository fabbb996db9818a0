"""The file's schedules as rows: reconciled with aegis.yaml (seeded, switch kept, updated,
removed, built-ins untouched), skipped and counted while the previous run still goes, one run
after downtime, and the owner's on/off switch. On SQLite and Postgres."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select, update

from aegis.clock import FileSchedules
from bot.agents.agent_run import RunOrigin, RunState
from bot.agents.agent_runs import AgentRuns
from bot.agents.profiles import ScheduleSpec
from bot.chat.outbox import Outbox
from bot.chat.views.runs import progress_text
from bot.config.live import LiveConfig
from bot.store.tables import agent_runs, schedules
from bot.timeutil import now
from bot.upkeep.schedules import BUILTIN_SCHEDULES, FILE_ACTOR, Schedule, Schedules

NEWS = ScheduleSpec("news", 3600, "What happened overnight?", agent="scout")
DIGEST = ScheduleSpec("digest", 600, "Summarise the reading list", capability="research")
SWEEP = Schedule("outbox-sweep", "sweep_outbox", 30)


class Recorder:
    def __init__(self) -> None:
        self.sent: list[tuple] = []

    async def __call__(self, actor: str, *args) -> None:
        self.sent.append((actor, *args))


async def set_due(store, name: str, ago: timedelta = timedelta(seconds=1)) -> None:
    async with store.write() as conn:
        await conn.execute(
            update(schedules).where(schedules.c.name == name).values(next_run_at=now() - ago)
        )


async def start_run(store, schedule: str):
    run, _ = await AgentRuns(store, Outbox(store), progress_text).create(
        "scout", "hello", 42, origin=RunOrigin.SCHEDULE, deadline_seconds=60, schedule=schedule
    )
    return run


async def test_reconcile_seeds_the_files_schedules_as_rows(store):
    rows = Schedules(store)
    done = await rows.reconcile([NEWS, DIGEST])
    assert sorted(done.added) == ["digest", "news"]
    news, digest = await rows.get("news"), await rows.get("digest")
    assert (news.source, news.actor, news.interval_seconds, news.enabled) == (
        "file",
        FILE_ACTOR,
        3600,
        True,
    )
    assert news.kwargs == {"agent": "scout", "request": "What happened overnight?"}
    assert digest.kwargs == {"capability": "research", "request": "Summarise the reading list"}
    assert news.next_run_at <= now()  # a schedule just added runs at once
    again = await rows.reconcile([NEWS, DIGEST])
    assert not again.changed


async def test_the_owners_switch_wins_over_the_file_after_the_first_seed(store):
    rows = Schedules(store)
    off_in_file = ScheduleSpec("quiet", 600, "Hush", agent="scout", enabled=False)
    await rows.reconcile([NEWS, off_in_file])
    assert (await rows.get("quiet")).enabled is False
    await rows.switch("news", False)
    await rows.switch("quiet", True)
    await rows.reconcile([NEWS, off_in_file])
    assert (await rows.get("news")).enabled is False
    assert (await rows.get("quiet")).enabled is True


async def test_a_changed_schedule_is_updated_and_its_next_run_follows_the_new_interval(store):
    rows = Schedules(store)
    await rows.reconcile([NEWS])
    enqueue = Recorder()
    assert await rows.enqueue_due(enqueue) == ["news"]
    ran_at = (await rows.get("news")).last_enqueued_at
    changed = ScheduleSpec("news", 86400, "Only the headlines", capability="research")
    done = await rows.reconcile([changed])
    assert done.updated == ["news"]
    news = await rows.get("news")
    assert news.interval_seconds == 86400
    assert news.kwargs == {"capability": "research", "request": "Only the headlines"}
    assert news.next_run_at == ran_at + timedelta(days=1)


async def test_a_schedule_gone_from_the_file_is_removed_and_builtins_are_never_touched(store):
    rows = Schedules(store)
    await rows.seed(BUILTIN_SCHEDULES)
    await rows.switch("weekly-review", False)
    await rows.reconcile([NEWS, DIGEST])
    builtins_before = {r.name: r for r in await rows.all() if not r.from_file}
    done = await rows.reconcile([DIGEST])
    assert done.removed == ["news"]
    assert await rows.get("news") is None
    await rows.reconcile([])
    assert [r.name for r in await rows.all() if r.from_file] == []
    assert {r.name: r for r in await rows.all()} == builtins_before
    assert builtins_before["weekly-review"].enabled is False


async def test_a_file_schedule_cannot_take_a_builtins_name(store):
    rows = Schedules(store)
    await rows.seed([SWEEP])
    before = await rows.get("outbox-sweep")
    done = await rows.reconcile([ScheduleSpec("outbox-sweep", 3600, "Take over", agent="x")])
    assert done.refused == ["outbox-sweep"]
    assert await rows.get("outbox-sweep") == before
    await rows.reconcile([])
    assert await rows.get("outbox-sweep") == before


async def test_a_file_schedule_is_enqueued_with_its_due_time(store):
    rows = Schedules(store)
    await rows.seed([SWEEP])
    await rows.reconcile([NEWS])
    due_at = (await rows.get("news")).next_run_at
    enqueue = Recorder()
    assert sorted(await rows.enqueue_due(enqueue)) == ["news", "outbox-sweep"]
    assert (FILE_ACTOR, "news", due_at.isoformat()) in enqueue.sent
    assert ("sweep_outbox", "outbox-sweep") in enqueue.sent


async def test_a_schedule_whose_run_still_goes_is_skipped_and_counted_once_per_due_time(store):
    rows = Schedules(store)
    await rows.reconcile([NEWS])
    run = await start_run(store, "news")
    enqueue = Recorder()
    assert await rows.enqueue_due(enqueue) == []
    news = await rows.get("news")
    assert (news.skipped, news.last_enqueued_at) == (1, None)
    assert news.last_skipped_at is not None
    assert timedelta(minutes=59) < news.next_run_at - now() <= timedelta(hours=1)
    assert await rows.enqueue_due(enqueue) == []  # not due again: no second skip
    assert (await rows.get("news")).skipped == 1
    for status in (RunState.RUNNING, RunState.PARKED):  # parked on a card is still going
        await _set_run_status(store, run.id, status)
        await set_due(store, "news", timedelta(hours=5))
        assert await rows.enqueue_due(enqueue) == []
    assert (await rows.get("news")).skipped == 3
    await _set_run_status(store, run.id, RunState.COMPLETED)
    await set_due(store, "news")
    assert await rows.enqueue_due(enqueue) == ["news"]
    assert enqueue.sent and enqueue.sent[0][:2] == (FILE_ACTOR, "news")
    assert (await rows.get("news")).skipped == 3


async def _set_run_status(store, run_id: int, status: RunState) -> None:
    async with store.write() as conn:
        await conn.execute(
            update(agent_runs).where(agent_runs.c.id == run_id).values(status=status)
        )


async def test_another_schedules_run_does_not_hold_this_one_back(store):
    rows = Schedules(store)
    await rows.reconcile([NEWS, DIGEST])
    await start_run(store, "digest")
    enqueue = Recorder()
    assert await rows.enqueue_due(enqueue) == ["news"]
    assert (await rows.get("digest")).skipped == 1


async def test_after_downtime_a_file_schedule_runs_once_not_a_burst(store):
    rows = Schedules(store)
    await rows.reconcile([DIGEST])  # every 10 minutes; the clock was away for 3 hours
    await set_due(store, "digest", timedelta(hours=3))
    enqueue = Recorder()
    for _ in range(3):
        await rows.enqueue_due(enqueue)
    assert [sent[:2] for sent in enqueue.sent] == [(FILE_ACTOR, "digest")]
    digest = await rows.get("digest")
    assert timedelta(minutes=9) < digest.next_run_at - now() <= timedelta(minutes=10)
    assert digest.skipped == 0


async def test_off_is_off_and_on_again_runs_once(store):
    rows = Schedules(store)
    await rows.reconcile([NEWS])
    assert (await rows.switch("news", False)).enabled is False
    enqueue = Recorder()
    assert await rows.enqueue_due(enqueue) == []
    await set_due(store, "news", timedelta(days=2))
    assert await rows.enqueue_due(enqueue) == []
    assert (await rows.switch("news", True)).enabled is True
    assert await rows.enqueue_due(enqueue) == ["news"]
    assert await rows.enqueue_due(enqueue) == []
    assert len(enqueue.sent) == 1
    assert await rows.switch("nothing-here", True) is None


async def test_the_file_schedules_are_listed_first(store):
    rows = Schedules(store)
    await rows.seed(BUILTIN_SCHEDULES)
    await rows.reconcile([NEWS, DIGEST])
    names = [row.name for row in await rows.all()]
    assert names[:2] == ["digest", "news"]
    assert set(names[2:]) == {schedule.name for schedule in BUILTIN_SCHEDULES}
    async with store.read() as conn:
        sources = set((await conn.execute(select(schedules.c.source))).scalars())
    assert sources == {"file", "builtin"}


FILE = """\
agents:
  scout:
    harness: script
    steps: [{say: hi}]
schedules:
  news: {every: 1h, agent: scout, request: "What happened overnight?"}
"""


async def test_the_clock_reconciles_when_the_file_changes_and_never_a_bad_file(store, tmp_path):
    path = tmp_path / "aegis.yaml"
    path.write_text(FILE, encoding="utf-8")
    rows = Schedules(store)
    follow = FileSchedules(rows, LiveConfig(path, look_every=0))
    await follow.reconcile_if_changed()
    assert (await rows.get("news")).interval_seconds == 3600
    await rows.switch("news", False)

    path.write_text(FILE.replace("every: 1h", "every: 90m"), encoding="utf-8")
    await follow.reconcile_if_changed()
    news = await rows.get("news")
    assert (news.interval_seconds, news.enabled) == (5400, False)

    path.write_text(FILE + "  broken: {every: 1h}\n", encoding="utf-8")  # no agent, no request
    await follow.reconcile_if_changed()
    assert (await rows.get("news")).interval_seconds == 5400  # the last good file stays

    # A clock that starts on a bad file runs on the built-ins alone: that removes nothing.
    restarted = FileSchedules(rows, LiveConfig(path, look_every=0))
    assert restarted.config.problem is not None
    await restarted.reconcile_if_changed()
    assert await rows.get("news") is not None

    path.write_text("", encoding="utf-8")  # fixed, and no schedules any more
    await restarted.reconcile_if_changed()
    assert await rows.get("news") is None
