"""Times in chat are shown in the owner's zone, with the zone's name, whatever zone they were
stored in."""

from __future__ import annotations

from datetime import UTC, timedelta
from zoneinfo import ZoneInfo

from bot.chat.text import plain
from bot.chat.views.cards import settled_text
from bot.timeutil import now, short_time, show_times_in
from tests.helpers.interactions import an_interaction as card


def test_a_time_today_is_shown_as_its_hour_in_utc_by_default():
    moment = now().replace(hour=12, minute=5, second=0, microsecond=0)
    assert short_time(moment) == "12:05 UTC"
    earlier = moment - timedelta(days=40)
    assert short_time(earlier) == earlier.strftime("%Y-%m-%d 12:05 UTC")


def test_in_the_owner_s_zone_a_time_reads_as_their_clock_does():
    show_times_in(ZoneInfo("Asia/Kolkata"))  # UTC+05:30, no summer time
    moment = now().astimezone(ZoneInfo("Asia/Kolkata")).replace(hour=3, minute=7)
    assert short_time(moment.astimezone(UTC)) == "03:07 Asia/Kolkata"
    old = moment - timedelta(days=40)
    assert short_time(old.astimezone(UTC)) == old.strftime("%Y-%m-%d 03:07 Asia/Kolkata")


def test_a_settled_card_says_when_in_the_owner_s_zone():
    show_times_in(ZoneInfo("Asia/Kolkata"))
    at = now().astimezone(ZoneInfo("Asia/Kolkata")).replace(hour=21, minute=59).astimezone(UTC)
    settled = card(status="resolved", outcome="approved", resolved_at=at, resolved_by_name="You")
    assert plain(settled_text(settled)).startswith("✅ Approved by You at 21:59 Asia/Kolkata.")
