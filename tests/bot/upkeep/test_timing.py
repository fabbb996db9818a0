"""Schedules at a time of day, on an injected clock: the owner's zone across both daylight-saving
changes, cron against a table of expected times, downtime run once and counted, and every bad
input refused with a sentence that says what to write."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import update

from bot.config.file import load_config
from bot.errors import PolicyConfigError
from bot.store.tables import schedules
from bot.timeutil import now
from bot.upkeep.schedules import Schedules, builtin_schedules
from bot.upkeep.timing import Timing, at_cron, cron_of, zone_of

BERLIN = ZoneInfo("Europe/Berlin")


def times(timing: Timing, start: datetime, count: int, zone=BERLIN) -> list[datetime]:
    found, moment = [], start
    for _ in range(count):
        moment = timing.next_after(moment, zone)
        found.append(moment)
    return found


def test_eight_in_berlin_stays_eight_across_both_daylight_saving_changes():
    daily = Timing(cron=at_cron("at", "08:00"))
    spring = times(daily, datetime(2026, 3, 27, 12, tzinfo=UTC), 4)
    autumn = times(daily, datetime(2026, 10, 23, 12, tzinfo=UTC), 4)
    for moment in spring + autumn:
        assert moment.astimezone(BERLIN).strftime("%H:%M") == "08:00"
    # 08:00 is 07:00 UTC in winter and 06:00 UTC in summer; the clocks change in the night
    # before the second run of each list (29 March, 25 October 2026).
    assert [m.hour for m in spring] == [7, 6, 6, 6]
    assert [m.hour for m in autumn] == [6, 7, 7, 7]
    assert [m.day for m in spring] == [28, 29, 30, 31]  # one a day: none skipped, none doubled


def test_the_half_hour_that_does_not_exist_runs_at_three_and_the_one_twice_runs_once():
    missing = Timing(cron=at_cron("at", "02:30"))
    spring = [
        m.astimezone(BERLIN) for m in times(missing, datetime(2026, 3, 28, 12, tzinfo=UTC), 2)
    ]
    assert [m.strftime("%m-%d %H:%M") for m in spring] == ["03-29 03:00", "03-30 02:30"]
    twice = Timing(cron=at_cron("at", "01:30"))
    autumn = times(twice, datetime(2026, 10, 24, 12, tzinfo=UTC), 3)
    local = [m.astimezone(BERLIN).strftime("%m-%d %H:%M") for m in autumn]
    assert local == ["10-25 01:30", "10-26 01:30", "10-27 01:30"]
    assert autumn[0] == datetime(2026, 10, 24, 23, 30, tzinfo=UTC)  # the first 01:30 (CEST)


START = datetime(2026, 12, 2, 10, 15, tzinfo=UTC)  # a Wednesday


@pytest.mark.parametrize(
    ("cron", "expected"),
    [
        ("30 7 * * 1-5", ["12-03 07:30", "12-04 07:30", "12-07 07:30"]),
        ("0 17 * * fri", ["12-04 17:00", "12-11 17:00", "12-18 17:00"]),
        ("*/20 * * * *", ["12-02 10:20", "12-02 10:40", "12-02 11:00"]),
        ("0 0 1 * *", ["01-01 00:00", "02-01 00:00", "03-01 00:00"]),
        ("15 10 * * *", ["12-03 10:15", "12-04 10:15", "12-05 10:15"]),  # not the same minute
        ("0 9 29 2 *", ["02-29 09:00"]),  # 2028: the next leap day
    ],
)
def test_cron_against_a_table_of_expected_times(cron, expected):
    found = times(Timing(cron=cron_of("cron", cron)), START, len(expected), UTC)
    assert [m.strftime("%m-%d %H:%M") for m in found] == expected


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda: cron_of("cron", "0 8 * * * *"), "5 fields"),
        (lambda: cron_of("cron", "a b c d e"), "cannot be read .* e.g."),
        (lambda: cron_of("cron", "61 8 * * *"), "cannot be read"),
        (lambda: cron_of("cron", "0 8 31 2 *"), "cannot be read"),
        (lambda: cron_of("cron", 30), "as text"),
        (lambda: at_cron("at", "25:00"), 'write it as "08:00"'),
        (lambda: at_cron("at", "8h"), 'write it as "08:00"'),
        (lambda: at_cron("at", "08:00", "someday"), "weekdays, weekends, daily"),
        (lambda: at_cron("at", "fri-mon-tue 08:00"), "weekdays, weekends, daily"),
        (lambda: zone_of("Mars/Olympus"), "IANA name such as Europe/Berlin"),
    ],
)
def test_bad_times_are_refused_with_what_to_write(make, words):
    with pytest.raises(PolicyConfigError, match=words):
        make()


def test_days_and_times_read_as_people_write_them():
    assert at_cron("at", "08:00", "weekdays") == "0 8 * * mon-fri"
    assert at_cron("at", "fri 17:00") == "0 17 * * fri"
    assert at_cron("at", "7:05", "sat,sun") == "5 7 * * sat,sun"
    assert at_cron("at", "weekends 9:30") == "30 9 * * sat,sun"
    assert Timing(cron="0 8 * * mon-fri").describe(BERLIN) == (
        "at 08:00 on Monday through Friday (Europe/Berlin)"
    )
    assert Timing(interval_seconds=5400).describe() == "every 1h30m"


def test_the_file_says_when_with_exactly_one_of_every_at_or_cron(tmp_path):
    path = tmp_path / "aegis.yaml"

    def schedules_of(text: str):
        path.write_text(
            "agents:\n  scout: {harness: script, steps: [{say: hi}]}\nschedules:\n" + text
        )
        return load_config(path).schedules

    [morning] = schedules_of(
        "  morning: {agent: scout, at: '08:00', days: weekdays, request: news}\n"
    )
    assert (morning.cron, morning.interval_seconds) == ("0 8 * * mon-fri", 0)
    [night] = schedules_of("  night: {agent: scout, cron: '30 2 * * *', request: tidy}\n")
    assert night.cron == "30 2 * * *"
    for bad, words in [
        ("  x: {agent: scout, every: 1h, at: '08:00', request: r}\n", "one of every"),
        ("  x: {agent: scout, request: r}\n", "one of every"),
        ("  x: {agent: scout, every: 1h, days: mon, request: r}\n", "goes with at"),
        ("  x: {agent: scout, cron: '0 8 * * * *', request: r}\n", "5 fields"),
        ("  x: {agent: scout, at: '8 o clock', request: r}\n", "time of day"),
    ]:
        with pytest.raises(PolicyConfigError, match=words):
            schedules_of(bad)


async def test_after_two_days_down_a_daily_schedule_runs_once_late_and_counts_what_it_missed(
    store,
):
    rows = Schedules(store, BERLIN)
    await rows.seed(builtin_schedules(briefing_at="08:00"))
    # Due at the 08:00 two days before the latest one: whatever the time of day the test runs,
    # the two 08:00s after it were missed.
    local = now().astimezone(BERLIN)
    latest = local.replace(hour=8, minute=0, second=0, microsecond=0)
    if latest > local:
        latest -= timedelta(days=1)
    two_days_ago = datetime.combine(latest.date() - timedelta(days=2), latest.time(), BERLIN)
    async with store.write() as conn:
        await conn.execute(
            update(schedules)
            .where(schedules.c.name == "daily-briefing")
            .values(next_run_at=two_days_ago)
        )
    enqueued: list[str] = []

    async def enqueue(actor, *args):
        enqueued.append(actor)

    await rows.enqueue_due(enqueue)
    await rows.enqueue_due(enqueue)
    assert enqueued.count("daily_briefing") == 1  # once, never a burst
    row = await rows.get("daily-briefing")
    assert row.missed == 2 and row.last_missed_at is not None
    assert row.next_run_at > now()
    assert row.next_run_at.astimezone(BERLIN).strftime("%H:%M") == "08:00"


async def test_a_new_briefing_time_moves_the_row_and_keeps_its_switch(store):
    rows = Schedules(store, BERLIN)
    await rows.seed(builtin_schedules(briefing_at="08:00"))
    await rows.switch("daily-briefing", False)
    await rows.seed(builtin_schedules(briefing_at="06:45"))
    row = await rows.get("daily-briefing")
    assert row.cron == "45 6 * * *" and row.enabled is False
    assert row.next_run_at.astimezone(BERLIN).strftime("%H:%M") == "06:45"
    review = await rows.get("weekly-review")
    assert review.next_run_at.astimezone(BERLIN).strftime("%a %H:%M") == "Fri 17:00"
