"""Taps are routed by kind, each to its feature, and a tap whose data we did not sign is refused
and audited whatever kind it claims; a signed tap of a kind nobody handles any more says so."""

from __future__ import annotations

import pytest
from telegram import CallbackQuery, Update, User

from bot.actions.audit import AuditEvent
from bot.chat.views.cards import CALLBACK_KIND
from bot.chat.views.task_buttons import ASSIGN_KIND, TASK_KIND
from bot.chat.views.tasks import FIND_KIND, PAGE_KIND
from handlers import schedules
from handlers.buttons import NO_LONGER, NOT_MINE, kinds, on_unknown_kind, tap_handlers
from handlers.chat import REFRESH_KIND, refresh_status
from handlers.interactions import on_card_tap
from handlers.task_buttons import on_task_button
from handlers.tasks import on_page_button
from tests.helpers.stack import OWNER_CHAT
from tests.helpers.transport import owner_marker

KNOWN_KINDS = [
    CALLBACK_KIND,
    TASK_KIND,
    ASSIGN_KIND,
    PAGE_KIND,
    FIND_KIND,
    *schedules.KINDS,
    REFRESH_KIND,
]
FORGED = [
    *(f"{kind}:status:go:forged" for kind in KNOWN_KINDS),
    "gone:1:go:forged",
    "no colons at all",
]


def _routed_to(data: str):
    """The callback the first matching handler wraps, as PTB picks it (first match wins)."""
    owner = User(OWNER_CHAT, "Owner", is_bot=False)
    query = CallbackQuery("1", owner, chat_instance="1", data=data)
    update = Update(1, callback_query=query)
    handler = next(h for h in tap_handlers() if h.check_update(update))
    return handler.callback.__wrapped__


@pytest.mark.parametrize(
    ("data", "callback"),
    [
        (f"{CALLBACK_KIND}:7:approve:mac", on_card_tap),
        (f"{TASK_KIND}:7:done:mac", on_task_button),
        (f"{ASSIGN_KIND}:7:scout:mac", on_task_button),
        (f"{PAGE_KIND}:next:1:mac", on_page_button),
        (f"{FIND_KIND}:tax+form:1:mac", on_page_button),
        *((f"{kind}:nightly:on:mac", schedules.on_button) for kind in schedules.KINDS),
        (f"{REFRESH_KIND}:status:go:mac", refresh_status),
        (f"{REFRESH_KIND}:other:go:mac", on_unknown_kind),
        (f"{TASK_KIND}s:7:done:mac", on_unknown_kind),  # a kind is the whole text before ":"
        ("no colons at all", on_unknown_kind),
    ],
)
def test_each_kind_goes_to_its_feature_and_anything_else_to_the_catch_all(data, callback):
    assert _routed_to(data) is callback


def test_a_kind_pattern_matches_the_kind_exactly_and_escapes_it():
    pattern = kinds("a.b", "c")
    assert pattern.match("a.b:1:x:m") and pattern.match("c:1:x:m")
    assert not pattern.match("axb:1:x:m") and not pattern.match("cc:1:x:m")


async def test_a_forged_tap_is_refused_and_audited_whatever_kind_it_claims(stack):
    [start] = await stack.ask("/start")
    taps = [await stack.emulator.tap(OWNER_CHAT, start["message_id"], data) for data in FORGED]
    await owner_marker(stack)

    for tap in taps:
        answer = await stack.emulator.callback_answer(tap["callback_query_id"])
        assert (answer["text"], answer["show_alert"]) == (NOT_MINE, True)
    events = [entry.event for entry in await stack.services.platform.audit.latest(50)]
    assert events.count(AuditEvent.TAP_REFUSED) == len(FORGED)
    assert len(await stack.bot_messages()) == 2  # /start's and the marker's replies


async def test_a_signed_tap_of_a_kind_nothing_handles_changes_nothing_and_says_so(stack):
    [start] = await stack.ask("/start")
    signer = stack.services.signer
    stale = [signer.sign("gone", "1", "go"), signer.sign(REFRESH_KIND, "nothing", "go")]
    taps = [await stack.emulator.tap(OWNER_CHAT, start["message_id"], data) for data in stale]
    await owner_marker(stack)

    for tap in taps:
        answer = await stack.emulator.callback_answer(tap["callback_query_id"])
        assert answer["text"] == NO_LONGER and not answer["show_alert"]
    events = [entry.event for entry in await stack.services.platform.audit.latest(50)]
    assert AuditEvent.TAP_REFUSED not in events
    assert len(await stack.bot_messages()) == 2
