"""When a reminder is due, on an injected clock in Berlin: the words people write, the night
before, across the spring gap, and every refusal with what to write."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from bot.errors import ReminderRefused
from bot.reminders.when import parse_reminder

BERLIN = ZoneInfo("Europe/Berlin")
LATE_WEDNESDAY = datetime(2026, 12, 2, 22, 59, tzinfo=UTC)  # 23:59 in Berlin


@pytest.mark.parametrize(
    ("text", "due", "what"),
    [
        ("20m call the bank", "Thu 12-03 00:19", "call the bank"),
        ("in 2h call the bank", "Thu 12-03 01:59", "call the bank"),
        ("tomorrow 9:00 call the bank", "Thu 12-03 09:00", "call the bank"),
        ("tomorrow call the bank", "Thu 12-03 09:00", "call the bank"),  # 09:00 by default
        ("fri 17:00 send the invoice", "Fri 12-04 17:00", "send the invoice"),
        ("wed 8:00 standup", "Wed 12-09 08:00", "standup"),  # today is Wednesday: next week's
        ("17:00 tea", "Thu 12-03 17:00", "tea"),  # 17:00 has passed today
        ("24 dec 18:30 light the candles", "Thu 12-24 18:30", "light the candles"),
        ("dec 24 gifts", "Thu 12-24 09:00", "gifts"),
        ("2027-01-05 7:15 dentist", "Tue 01-05 07:15", "dentist"),
        ("1 jan new year", "Fri 01-01 09:00", "new year"),  # this year's has passed
    ],
)
def test_the_words_people_write(text, due, what):
    moment, said = parse_reminder(text, LATE_WEDNESDAY, BERLIN)
    assert (moment.astimezone(BERLIN).strftime("%a %m-%d %H:%M"), said) == (due, what)


def test_a_time_the_clocks_skip_is_the_first_minute_after_the_gap():
    saturday = datetime(2026, 3, 28, 12, tzinfo=UTC)
    moment, _ = parse_reminder("tomorrow 2:30 x", saturday, BERLIN)
    assert moment.astimezone(BERLIN).strftime("%m-%d %H:%M %Z") == "03-29 03:00 CEST"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "Say when, then what"),
        ("call the bank", "Say when, then what"),
        ("tomorrow", "Say what to remind you of"),
        ("31 feb call", "There is no 31 Feb"),
        ("2026-02-30 call", "There is no 30 Feb"),
        ("2026-11-01 call", "has passed"),
        ("25:00 call", "write it as 17:00"),
        ("fri 9h call", "write it as 17:00"),
        ("0m call", "at least a minute"),
        ("2027-12-24 call", "more than a year"),
    ],
)
def test_what_is_refused_says_what_to_write(text, words):
    with pytest.raises(ReminderRefused, match=words):
        parse_reminder(text, LATE_WEDNESDAY, BERLIN)
