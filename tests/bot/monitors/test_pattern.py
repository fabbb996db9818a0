"""The body regex of an http monitor: what is refused when it is declared (invalid, too long,
a repeat inside a repeat), what is let through, and the time limit of the search."""

from __future__ import annotations

import pytest

from bot.errors import MonitorRefused
from bot.monitors.pattern import MAX_LENGTH, compile_pattern, matches

CATASTROPHIC = [
    r"(a+)+$",
    r"(a*)*",
    r"(\w+\s?)*$",
    r"(a+?)+b",  # lazy repeats backtrack as much
    r"(?:x|(?:a+))*y",  # through a branch and a group without a number
    r"(a+){2,200}",  # bounded outside, unbounded inside
    r"(.*a){20}",
    r"^(?P<word>[a-z]{1,300})+$",
    r"(?=x)((a+)+)",  # outside a lookahead is no help
]
ALLOWED = [
    r"ok",
    r"status: (up|down)",
    r"(\d{1,3}\.){3}\d{1,3}",  # both repeats small
    r"(\w++\s)+",  # possessive inner repeat: never gives back
    r"(?>\w+\s)+",  # atomic group
    r"(a+)++",  # possessive outer repeat
    r"(?:ab)+c*",  # repeats side by side, not nested
    r"(a|aa)+$",  # overlapping alternatives: bounded by the time limit, not refused
    r"",
]


@pytest.mark.parametrize("text", CATASTROPHIC)
def test_a_repeat_inside_a_repeat_is_refused_with_the_way_out(text):
    with pytest.raises(MonitorRefused) as refused:
        compile_pattern(text)
    assert refused.value.field == "body_matches"
    assert "repeat inside a repeat" in refused.value.problem
    assert "possessive" in refused.value.problem


@pytest.mark.parametrize("text", ALLOWED)
def test_a_pattern_without_nested_repeats_is_compiled(text):
    assert compile_pattern(text).pattern == text


def test_an_invalid_pattern_is_refused_with_the_parsers_words():
    with pytest.raises(MonitorRefused) as refused:
        compile_pattern("(unclosed")
    assert str(refused.value) == (
        "body_matches: not a valid regular expression: "
        "missing ), unterminated subpattern at position 0"
    )


def test_a_pattern_over_the_length_limit_is_refused():
    compile_pattern("a" * MAX_LENGTH)
    with pytest.raises(MonitorRefused) as refused:
        compile_pattern("a" * (MAX_LENGTH + 1))
    assert refused.value.problem == "501 characters, over the 500 allowed"


def test_matches_searches_anywhere_in_the_text():
    compiled = compile_pattern(r"version \d+\.\d+")
    assert matches(compiled, "<p>running version 3.14 since May</p>")
    assert not matches(compiled, "<p>running version three</p>")


def test_a_search_past_its_time_limit_raises_timeout_error():
    # Allowed above, yet exponential on a run of a's that does not end the text.
    compiled = compile_pattern(r"(a|aa)+$")
    assert matches(compiled, "aaaa")
    with pytest.raises(TimeoutError):
        matches(compiled, "a" * 64 + "!", timeout=0.01)
