"""The chat's HTML (bot/chat/text.py): what users and agents wrote is never a tag, and a long
text splits into parts Telegram can parse one by one (checked with the emulator's parser,
which refuses what Telegram refuses)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from bot.chat.outgoing import split_text
from bot.chat.text import MESSAGE_LIMIT, Html, bold, code, escape, html, link, plain, pre
from emulator.formatting import parse_text

hostile = st.text(st.sampled_from(list("<>&;/ab \n\"'#")) | st.characters(codec="utf-8"))


@given(hostile)
def test_what_anyone_wrote_shows_exactly_as_written(text):
    shown, entities = parse_text(html("<b>{}</b> said: {}", "agent", text), "HTML")
    assert shown == "agent said: " + text
    assert entities == [{"type": "bold", "offset": 0, "length": 5}]


@given(hostile, hostile)
def test_adding_and_joining_plain_text_to_html_escapes_it(left, right):
    joined = Html("\n").join([left, bold(right)])
    assert isinstance(joined, Html)
    assert parse_text(joined, "HTML")[0] == f"{left}\n{right}"
    summed = left + bold("x") + right
    assert isinstance(summed, Html)
    assert parse_text(summed, "HTML")[0] == f"{left}x{right}"


def test_html_escapes_its_values_and_keeps_number_formats():
    assert html("{} has {:,} tasks", "<me>", 12345) == "&lt;me&gt; has 12,345 tasks"
    assert escape(bold("a")) == "<b>a</b>"  # Html is never escaped twice
    assert code("rm -rf <dir>") == "<code>rm -rf &lt;dir&gt;</code>"
    assert link('https://e.org/?a=1&b="2"', "<x>") == (
        '<a href="https://e.org/?a=1&amp;b=&quot;2&quot;">&lt;x&gt;</a>'
    )


def test_plain_is_what_telegram_shows():
    text = html("<b>{}</b>\n{}", "Head", "a < b & c")
    assert plain(text) == parse_text(text, "HTML")[0] == "Head\na < b & c"


blocks = st.lists(
    st.tuples(st.sampled_from(["", "b", "i", "code", "pre"]), hostile | st.just("x " * 3000)),
    min_size=1,
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(blocks)
def test_each_part_of_a_long_html_text_parses_fits_and_together_they_show_it_all(pieces):
    text = Html("").join(
        html(f"<{tag}>{{}}</{tag}>", body) if tag else body for tag, body in pieces
    )
    if not plain(text).strip():
        return  # the outbox refuses a blank message
    parts = split_text(text)
    shown = [parse_text(part, "HTML")[0] for part in parts]  # raises where Telegram would refuse
    assert all(len(part) <= MESSAGE_LIMIT and part.strip() for part in shown)
    assert _seen("".join(shown)) == _seen(plain(text))


def _seen(text: str) -> str:
    return "".join(char for char in text if not char.isspace())


def test_a_block_cut_in_two_is_closed_and_opened_again():
    text = bold("Output") + "\n" + pre("line\n" * 1500)
    first, second = split_text(text)
    assert first.startswith("<b>Output</b>\n<pre>") and first.endswith("</pre>")
    assert second.startswith("<pre>") and second.endswith("</pre>")
