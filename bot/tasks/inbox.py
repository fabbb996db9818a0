"""Triage of one inbox task: the chain of triagers (bot/tasks/triage.py), else a card that asks the
owner; and what the owner's answer on that card does.

The card is a choice interaction that holds (a task waits in the inbox for as long as it takes);
it is recorded on the task in the same transaction that creates it, so a task is asked about
once however often the sweep runs.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from bot.chat.text import clip, visible
from bot.errors import AlreadyAsked, TaskRefused
from bot.interactions.interaction import (
    Ask,
    Effects,
    Interaction,
    InteractionOutcome,
    Kind,
    TimeoutPolicy,
)
from bot.interactions.interactions import Interactions
from bot.store.database import Store
from bot.tasks.audio import awaiting_transcription
from bot.tasks.task import Closed, State, Task
from bot.tasks.tasks import Tasks
from bot.tasks.triage import OUTCOMES, Triage, Triager, suggest
from bot.timeutil import now

ASKER = "triage"
DROP = "drop"
# The card's options, in order: every state label a task can leave the inbox with, then drop.
CARD_OPTIONS = (*(str(state) for state in OUTCOMES.values()), DROP)
EXCERPT_CHARS = 600
# At most this many triage cards wait at once; the rest of the inbox is asked about on later
# sweeps, as cards are answered (thirty forwards in a burst are not thirty cards at once).
MAX_OPEN_CARDS = 10
# Longer than a transcription's every try takes (AEGIS_TRANSCRIBE_TRIES, their ceilings and waits).
TRANSCRIPTION_WAIT = timedelta(hours=1)


class TriageStep(enum.StrEnum):
    SKIPPED = "skipped"  # closed, out of the inbox, asked about already, or too many cards open
    TRIAGED = "triaged"
    ASKED = "asked"


@dataclass(frozen=True)
class Result:
    step: TriageStep
    task: Task | None = None
    verdict: Triage | None = None


class Inbox:
    def __init__(
        self, store: Store, tasks: Tasks, interactions: Interactions, triagers: Sequence[Triager]
    ) -> None:
        self.store = store
        self.tasks = tasks
        self.interactions = interactions
        self.triagers = triagers

    async def triage(self, task_id: int) -> Result:
        task = await self.tasks.get(task_id)
        if task is None or not task.is_open or task.state is not State.INBOX:
            return Result(TriageStep.SKIPPED, task)
        if task.triage_interaction_id is not None or task.chat_id is None:
            return Result(TriageStep.SKIPPED, task)
        if self._awaits_words(task):
            return Result(TriageStep.SKIPPED, task)
        verdict = await suggest(self.triagers, task)
        if verdict is None:
            asked = await self._ask(task)
            return Result(TriageStep.ASKED if asked else TriageStep.SKIPPED, task)
        try:
            moved = await self.tasks.triage(task_id, verdict)
        except TaskRefused:  # the owner triaged or closed it meanwhile
            return Result(TriageStep.SKIPPED, task)
        return Result(TriageStep.TRIAGED, moved, verdict)

    @staticmethod
    def _awaits_words(task: Task) -> bool:
        """A voice note is asked about once it has its words; but not waited for forever (its
        job lost with the broker's data, say): after a while it is triaged as a recording."""
        if not awaiting_transcription(task.attachments):
            return False
        return now() - task.created_at < TRANSCRIPTION_WAIT

    async def _ask(self, task: Task) -> bool:
        if await self.interactions.open_count(agent=ASKER) >= MAX_OPEN_CARDS:
            return False
        ask = Ask(
            kind=Kind.CHOICE,
            agent=ASKER,
            chat_id=task.chat_id,
            prompt=_question(task),
            options=CARD_OPTIONS,
            timeout=None,
            timeout_policy=TimeoutPolicy.HOLD,
            continuation_actor="apply_triage",
            continuation_kwargs={"task_id": task.id},
        )
        effects = Effects()
        try:
            async with self.store.write() as conn:
                interaction = await self.interactions.create_in(conn, ask, effects)
                if not await self.tasks.ask_about(conn, task.id, interaction.id):
                    raise AlreadyAsked  # rolls the card back with the transaction
        except AlreadyAsked:
            return False
        await self.interactions.announce(effects)
        return True

    async def answer(self, task_id: int, settled: Interaction) -> str:
        """What the owner's choice on the card does; the sentence to tell them."""
        if settled.outcome != InteractionOutcome.CHOSEN:
            return f"Task {task_id} stays in the inbox."
        if settled.answer not in CARD_OPTIONS:
            return f"Task {task_id} stays in the inbox: that is not one of the card's answers."
        try:
            if settled.answer == DROP:
                task = await self.tasks.close(task_id, Closed.DROPPED)
                return f"Task {task.id} dropped: {visible(task.title)}"
            state = State(settled.answer)
            verdict = Triage(state, f"owner {settled.resolved_by_name or settled.resolved_by}")
            task = await self.tasks.triage(task_id, verdict)
        except TaskRefused as exc:
            return str(exc)
        return f"Task {task.id} → {task.state}: {visible(task.title)}"


def _question(task: Task) -> str:
    lines = [f"Where does task {task.id} go?", "", clip(task.text(), EXCERPT_CHARS)]
    if task.origin_kind != "self" and task.origin_name:
        lines += ["", f"Forwarded from {task.origin_name}"]
    return "\n".join(lines)
