"""Process watches played with an injected clock, on SQLite and Postgres: what an agent may ask
for, the looks the clock claims, how a watch ends (passed, failed, at its deadline, broken) and
that it ends once however many looks race."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from bot.errors import MonitorRefused
from bot.monitors.process_watch import Look, WatchStatus
from bot.monitors.process_watches import ProcessWatches
from bot.monitors.specs import process_watch
from bot.upkeep.due import turn

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
SPEC = process_watch(
    {"done": "test -f /tmp/built", "fail": "test -f /tmp/broke", "every": "30s", "deadline": "10m"}
)


@pytest.fixture
async def watches(store):
    return ProcessWatches(store)


async def start(watches, run_id: int = 7, spec=SPEC):
    return await watches.start(spec, agent="builder", run_id=run_id, chat_id=42, moment=T0)


class Enqueued(list):
    async def __call__(self, actor, *args):
        self.append((actor, *args))


@pytest.mark.parametrize(
    ("args", "field", "says"),
    [
        ({"deadline": "1h"}, "done", "exits 0 once the process is done"),
        ({"done": "make check"}, "deadline", "how long to watch at most"),
        ({"done": "make check", "deadline": "1h", "every": "5s"}, "every", "at least 10s"),
        ({"done": "make check", "deadline": "30s"}, "deadline", "at least 1m"),
        ({"done": "make check", "deadline": "8d"}, "deadline", "at most 7d"),
        ({"done": "make 'check", "deadline": "1h"}, "done", "quote is not closed"),
        ({"done": "true", "fail": "", "deadline": "1h"}, "fail", "in quotes"),
        ({"done": "true", "deadline": "1h", "every": "10s", "timeout": "20s"}, "timeout", "10 s"),
        (
            {"done": "a", "fail": "b", "progress": "c", "every": "20s", "deadline": "1h"},
            "timeout",
            "a look runs 3 commands of up to 10 s each",
        ),
    ],
)
def test_what_an_agent_asks_for_is_refused_naming_the_field(args, field, says):
    with pytest.raises(MonitorRefused) as refused:
        process_watch(args)
    assert refused.value.field == field
    assert says in refused.value.problem


def test_a_watch_is_named_after_its_done_command_and_keeps_its_defaults():
    spec = process_watch({"done": "/usr/bin/test -f out/app.bin", "deadline": "2h"})
    assert (spec.name, spec.every_seconds, spec.timeout_seconds) == ("test", 30, 10.0)
    assert spec.deadline_seconds == 7200 and spec.fail is None and spec.progress is None


async def test_only_a_run_can_be_continued_and_it_waits_on_one_watch_at_a_time(watches):
    with pytest.raises(MonitorRefused, match="only a run aegis started"):
        await watches.start(SPEC, agent="builder", run_id=None, chat_id=42)
    first = await start(watches)
    with pytest.raises(MonitorRefused, match=f"already waits on process watch #{first.id}"):
        await start(watches)
    assert [w.id for w in await watches.watching()] == [first.id]


async def test_the_clock_claims_each_look_once_and_the_deadline_gets_a_look(watches):
    watch = await start(watches)
    enqueued = Enqueued()
    assert await watches.enqueue_due(enqueued, T0) == 1  # looked at once
    assert await watches.enqueue_due(enqueued, T0) == 0  # claimed: not twice
    assert enqueued == [("check_process", watch.id)]
    assert await watches.enqueue_due(enqueued, T0 + timedelta(seconds=29)) == 0
    assert await watches.enqueue_due(enqueued, T0 + timedelta(seconds=30)) == 1
    # Next looks at 60 s, 90 s … and the last one falls on the deadline, not after it.
    later = await watches.get(watch.id)
    assert later.next_check_at == T0 + timedelta(seconds=60)
    assert later.next_look(T0 + timedelta(seconds=590)) == T0 + timedelta(minutes=10)


async def test_the_clocks_turn_claims_a_due_look_and_says_how_long_to_sleep(watches):
    enqueued = Enqueued()
    store, parts = watches.store, [watches.due()]
    assert await turn(store, parts, enqueued, ceiling=1.0) == 1.0  # nothing watched: the ceiling
    watch = await start(watches)  # its first look was due at T0, long ago
    assert await turn(store, parts, enqueued, ceiling=1.0) == 1.0  # claimed; the next is 30 s on
    assert enqueued == [("check_process", watch.id)]
    assert await turn(store, parts, enqueued, ceiling=60.0) > 0  # nothing due: only read
    assert len(enqueued) == 1


async def test_a_watch_goes_on_with_its_progress_then_passes_once(watches):
    watch = await start(watches)
    first = await watches.record(watch.id, Look(WatchStatus.WATCHING, "12/40 done"), T0)
    assert not first.ended_it and first.progress_changed
    assert first.watch.waiting_step().endswith(": 12/40 done")
    same = await watches.record(watch.id, Look(WatchStatus.WATCHING, "12/40 done"), T0)
    assert not same.progress_changed
    moment = T0 + timedelta(minutes=4)
    passed = await watches.record(watch.id, Look(WatchStatus.PASSED, detail="built"), moment)
    assert passed.ended_it and passed.watch.status is WatchStatus.PASSED
    assert passed.watch.checks == 3 and passed.watch.ended_at == moment
    assert "it passed after 4 min" in passed.watch.outcome
    assert 'Its last line of output (quoted): "built"' in passed.watch.outcome
    assert await watches.record(watch.id, Look(WatchStatus.FAILED), moment) is None
    assert await watches.enqueue_due(Enqueued(), moment + timedelta(hours=1)) == 0


async def test_a_failure_and_a_broken_command_end_it_with_their_reason(watches):
    failed = await start(watches, run_id=1)
    ended = await watches.record(failed.id, Look(WatchStatus.FAILED, detail="error: 3 tests"), T0)
    assert ended.watch.status is WatchStatus.FAILED
    assert "it failed after 0 s" in ended.watch.outcome and "error: 3 tests" in ended.watch.outcome
    broken = await start(watches, run_id=2)
    look = Look(WatchStatus.BROKEN, detail="the done command: program not found: mak")
    ended = await watches.record(broken.id, look, T0)
    assert ended.watch.status is WatchStatus.BROKEN
    assert "could not be watched" in ended.watch.outcome
    assert "program not found" in ended.watch.outcome


async def test_at_its_deadline_a_watch_that_neither_passed_nor_failed_times_out(watches):
    watch = await start(watches)
    await watches.record(watch.id, Look(WatchStatus.WATCHING, "90%"), T0 + timedelta(minutes=9))
    late = await watches.record(
        watch.id, Look(WatchStatus.WATCHING, "95%"), T0 + timedelta(minutes=10)
    )
    assert late.ended_it and late.watch.status is WatchStatus.TIMED_OUT
    assert "neither passed nor failed by its deadline" in late.watch.outcome
    assert 'The last progress line (quoted): "95%"' in late.watch.outcome


async def test_racing_looks_end_a_watch_exactly_once(watches):
    watch = await start(watches)
    looks = [Look(WatchStatus.PASSED), Look(WatchStatus.FAILED)] * 5
    results = await asyncio.gather(*(watches.record(watch.id, look, T0) for look in looks))
    assert sum(1 for r in results if r is not None and r.ended_it) == 1


async def test_what_a_run_is_owed_is_every_watch_it_was_not_given_and_a_cancel_stops_them(
    watches,
):
    assert await watches.owed(7) == []
    first = await start(watches)
    assert [w.id for w in await watches.owed(7)] == [first.id]
    assert (await watches.waiting_for(7)).id == first.id
    await watches.record(first.id, Look(WatchStatus.PASSED), T0)
    assert await watches.waiting_for(7) is None
    second = await start(watches)
    assert [w.id for w in await watches.owed(7)] == [first.id, second.id]
    assert [w.id for w in await watches.owed(7, after=first.id)] == [second.id]
    assert await watches.owed(7, after=second.id) == []
    assert await watches.abandon_for_run(7) == 1
    abandoned = await watches.get(second.id)
    assert abandoned.status is WatchStatus.ABANDONED and "its run ended" in abandoned.outcome
    assert await watches.abandon(second.id) is None  # over already: nothing more to stop


async def test_two_calls_of_one_run_at_once_start_one_watch(watches):
    results = await asyncio.gather(*(start(watches) for _ in range(4)), return_exceptions=True)
    assert sum(not isinstance(r, Exception) for r in results) == 1
    assert all(isinstance(r, MonitorRefused) for r in results if isinstance(r, Exception))
