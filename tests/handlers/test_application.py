"""The application is built from the one command table: a handler for each command, the same
names in Telegram's menu, and a loud failure at start if the table and the callbacks disagree."""

from __future__ import annotations

import re

import pytest
from telegram import Bot

from aegis.web import EMULATOR
from bot.chat.views.commands import COMMANDS
from handlers import application
from handlers.application import CALLBACKS, build_application, check_commands

NAMES = [command.name for command in COMMANDS]


def test_the_callbacks_answer_exactly_the_commands_of_the_table():
    assert sorted(CALLBACKS) == sorted(NAMES)
    check_commands(COMMANDS, CALLBACKS)


@pytest.mark.parametrize(
    ("callbacks", "named"),
    [
        ({name: CALLBACKS[name] for name in NAMES if name != "ping"}, "no callback for ['ping']"),
        ({**CALLBACKS, "frobnicate": CALLBACKS["ping"]}, "not in the table ['frobnicate']"),
    ],
)
def test_a_table_and_callbacks_that_disagree_fail_naming_the_difference(callbacks, named):
    with pytest.raises(RuntimeError, match=re.escape(named)):
        check_commands(COMMANDS, callbacks)


def test_a_command_listed_twice_fails():
    with pytest.raises(RuntimeError, match=r"listed twice \['ping'\]"):
        check_commands((*COMMANDS, COMMANDS[NAMES.index("ping")]), CALLBACKS)


def test_build_application_fails_at_start_when_a_command_has_no_callback(monkeypatch):
    monkeypatch.setattr(application, "CALLBACKS", {**CALLBACKS, "frobnicate": CALLBACKS["ping"]})
    with pytest.raises(RuntimeError, match="frobnicate"):
        build_application(Bot("123:not-used"), services=None)


async def test_telegrams_menu_is_the_table_in_its_order(stack):
    [bot] = stack.app[EMULATOR].bots.values()
    [menu] = bot.commands.values()
    assert menu == [{"command": c.name, "description": c.description} for c in COMMANDS]
