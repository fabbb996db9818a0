"""The command table: names Telegram accepts, each once, and a /help that lists every one."""

from __future__ import annotations

import re

from bot.chat.text import plain
from bot.chat.views.commands import COMMANDS, INTRO, OUTRO, SECTIONS, help_text, start_text

TELEGRAM_MESSAGE_CHARS = 4096  # https://core.telegram.org/bots/api#sendmessage


def test_every_name_is_one_telegram_accepts_and_appears_once():
    names = [command.name for command in COMMANDS]
    # https://core.telegram.org/bots/api#botcommand: 1-32 of a-z, 0-9 and _; 1-256 for the text
    assert all(re.fullmatch(r"[a-z0-9_]{1,32}", name) for name in names)
    assert all(1 <= len(command.description) <= 256 for command in COMMANDS)
    assert len(set(names)) == len(names)


def test_help_lists_every_command_on_a_line_of_its_own_under_its_section():
    under = _section_of_each_line(plain(help_text()))
    for command in COMMANDS:
        [section] = [s for line, s in under.items() if line.startswith(f"{command.usage}: ")]
        assert section == command.section


def _section_of_each_line(text: str) -> dict:
    section, under = None, {}
    for line in text.splitlines():
        section = next((s for s in SECTIONS if line.startswith(f"{s.title}:")), section)
        under[line] = section
    return under


def test_help_keeps_its_intro_its_sections_in_order_and_its_outro():
    text = plain(help_text())
    assert text.startswith(INTRO + "\n\n") and text.endswith("\n\n" + OUTRO)
    starts = [text.index(f"\n\n{section.title}:") for section in SECTIONS]
    assert starts == sorted(starts)
    assert all(section.after in text for section in SECTIONS)
    assert len(text) < TELEGRAM_MESSAGE_CHARS  # one message, with room for /start's hello


def test_every_section_has_a_command_and_every_command_a_listed_section():
    assert {command.section for command in COMMANDS} == set(SECTIONS)


def test_a_command_with_arguments_shows_them_in_its_usage():
    find = next(command for command in COMMANDS if command.name == "find")
    assert find.usage == "/find words"
    assert plain(find.help_line()) == "/find words: search every task"


def test_no_paragraph_is_wrapped_by_hand_the_phone_wraps_them():
    # A line broken inside a sentence ends without its punctuation; on a phone it reads as
    # "waits for your tap / on a card". Command lines ("/find words: …") are lists, not prose.
    for text in (plain(help_text()), plain(start_text())):
        prose = [line for line in text.splitlines() if line and not line.startswith("/")]
        assert all(line.endswith((".", ":", ")", "!", "?")) for line in prose), prose


def test_start_is_short_names_only_real_commands_and_leads_to_help():
    text = plain(start_text())
    assert text.startswith("Hello! I am aegis.") and "/help" in text
    assert len(text) < 500  # a phone's screen, not a wall
    names = {command.name for command in COMMANDS}
    assert set(re.findall(r"/([a-z_]+)", text)) <= names
