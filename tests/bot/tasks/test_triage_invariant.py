"""The one invariant of the task spine: every task that leaves triage carries a state label.

The outcomes are not listed here by hand: they are read from the code that offers them (the
buttons under a capture receipt, the options of a triage card, the states a rule may declare),
and each is applied to a fresh inbox task through the code path a tap or a rule takes. A new
button, option or rule state that forgets to set a state label fails here.

Drop is the one way out of the inbox that is not triage: it closes the task (kept, with its
label) instead of filing it anywhere, and this test holds it to exactly that.
"""

from __future__ import annotations

import dataclasses

import pytest

from bot.chat.callbacks import CallbackSigner
from bot.chat.views import tasks as task_views
from bot.chat.views.task_buttons import Choice
from bot.config.settings import Settings
from bot.interactions.interaction import (
    Interaction,
    InteractionOutcome,
    InteractionStatus,
    Kind,
    TimeoutPolicy,
)
from bot.tasks import inbox, triage
from bot.tasks.capture import Capture, Origin
from bot.tasks.task import Closed, State
from bot.tasks.tasks import Tasks
from bot.timeutil import now
from handlers import task_buttons

SIGNER = CallbackSigner(b"k" * 32)
LEFT_INBOX = {State.NEXT, State.SOMEDAY, State.WAITING, State.REFERENCE}


def receipt_choices() -> list[str]:
    """What the buttons under "Captured as task N" send, read back from their signed data."""
    markup = task_views.triage_markup(SIGNER, 1)
    data = [button["callback_data"] for row in markup["inline_keyboard"] for button in row]
    return [Choice.parse(SIGNER.verify(item).choice).action for item in data]


async def inbox_task(store_tasks: Tasks, n: int) -> int:
    capture = Capture(
        chat_id=1, message_id=n, user_id=1, text=f"task number {n}", origin=Origin("self")
    )
    return (await store_tasks.capture(capture)).task.id


def settled_card(task_id: int, option: str) -> Interaction:
    moment = now()
    return Interaction(
        id=task_id,
        kind=Kind.CHOICE,
        agent=inbox.ASKER,
        chat_id=1,
        prompt="Where does it go?",
        options=inbox.CARD_OPTIONS,
        tool=None,
        args=None,
        args_hash=None,
        step_up=False,
        status=InteractionStatus.RESOLVED,
        outcome=InteractionOutcome.CHOSEN,
        answer=option,
        timeout_policy=TimeoutPolicy.HOLD,
        expires_at=None,
        created_at=moment,
        code_from=None,
        resolved_at=moment,
        resolved_by=1,
        resolved_by_name="Owner",
        continuation_actor="apply_triage",
        continuation_kwargs={"task_id": task_id},
    )


def test_the_outcomes_are_found_where_the_code_offers_them():
    # Guard the guard: the lists this test walks are not empty, and they agree.
    assert set(receipt_choices()) == {*triage.OUTCOMES, inbox.DROP}
    assert set(inbox.CARD_OPTIONS) == {*(str(s) for s in triage.OUTCOMES.values()), inbox.DROP}


def test_a_triage_cannot_be_made_that_leaves_a_task_in_the_inbox():
    with pytest.raises(ValueError, match="state label"):
        triage.Triage(State.INBOX, by="rule careless")
    with pytest.raises(ValueError, match="state label"):
        triage.Triage("@next", by="a plain string is not a state label")


async def test_every_button_under_a_capture_receipt_sets_a_state_label_or_closes(store):
    store_tasks = Tasks(store)
    for n, choice in enumerate(receipt_choices()):
        task_id = await inbox_task(store_tasks, n)
        svc = _Services(store_tasks)
        await task_buttons.apply(svc, task_id, Choice(choice, State.INBOX), "Owner", False)
        task = await store_tasks.get(task_id)
        _assert_left_triage(task, choice)


async def test_every_option_of_a_triage_card_sets_a_state_label_or_closes(store):
    store_tasks = Tasks(store)
    answers = inbox.Inbox(store, store_tasks, interactions=None, triagers=())
    for n, option in enumerate(inbox.CARD_OPTIONS, start=100):
        task_id = await inbox_task(store_tasks, n)
        await answers.answer(task_id, settled_card(task_id, option))
        _assert_left_triage(await store_tasks.get(task_id), option)


@pytest.mark.parametrize("state", sorted(triage.OUTCOMES.values()))
async def test_every_state_a_rule_may_declare_takes_the_task_out_of_the_inbox(store, state):
    store_tasks = Tasks(store)
    rule = triage.TriageRule("any", triage.Conditions(keywords=("number",)), state, ("quick",))
    task_id = await inbox_task(store_tasks, 1)
    verdict = await triage.suggest([triage.RuleTriager([rule])], await store_tasks.get(task_id))
    await store_tasks.triage(task_id, verdict)
    task = await store_tasks.get(task_id)
    assert task.state is state and task.state in LEFT_INBOX
    assert task.triaged_by == "rule any" and task.labels == ("quick",)


def _assert_left_triage(task, choice: str) -> None:
    if choice == inbox.DROP:
        assert task.closed_as is Closed.DROPPED, choice
        assert task.state is State.INBOX  # closed, not filed: it shows in no list
        return
    assert task.state in LEFT_INBOX, choice
    assert task.triaged_by == "owner Owner", choice
    if task.state is State.REFERENCE:
        assert task.closed_as is Closed.FILED
    else:
        assert task.is_open


@dataclasses.dataclass
class _Platform:
    tasks: Tasks
    settings: Settings = dataclasses.field(default_factory=lambda: Settings(_env_file=None))


class _Services:
    """What the button handlers reach for: only the platform's tasks."""

    def __init__(self, store_tasks: Tasks) -> None:
        self.platform = _Platform(store_tasks)
        self.signer = SIGNER
