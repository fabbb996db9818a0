"""A task's buttons, and how the message they are on reads once one is tapped.

A button carries what it does and the state the message showed the task in:
``task:<id>:<action>.<state>`` (``drop.next``: drop it, shown as ``@next``). A tap finds the
task as the message showed it, or finds it changed since (moved or closed elsewhere) and asks
again instead of acting on what the owner no longer sees. ``undo.<state>`` reopens a task a
tap closed, in the state it had. Data signed before the state was carried (``drop``) is read
as "state unknown": a move still applies, a close asks again.

The same words everywhere, short enough for a phone's row of buttons (issue 19): the state
labels as the design spells them (``@next`` …) and a verb for the rest (``Drop``, ``Done`` …).
In a list, each button also carries the task's number: ``3 @someday``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from bot.chat.callbacks import CallbackSigner
from bot.chat.text import Html
from bot.tasks.task import State, Task

TASK_KIND = "task"
ASSIGN_KIND = "assign"
WORDS = {
    "next": "@next",
    "someday": "@someday",
    "waiting": "@waiting",
    "reference": "@reference",
    "drop": "Drop",
    "done": "Done",
    "assign": "Assign",
    "undo": "Undo",
    "keep": "Keep",
}
MOVES = {"next": State.NEXT, "someday": State.SOMEDAY, "waiting": State.WAITING}
CLOSES = ("drop", "done")  # what asks again when the task changed, and can be undone
STATE_CODES = {state: state.value.lstrip("@") for state in State}
# What each state offers; rows of at most three buttons fit a phone's width.
CHOICES = {
    State.INBOX: (("next", "someday", "waiting"), ("reference", "drop")),
    State.NEXT: (("done", "someday", "waiting"), ("assign", "drop")),
    State.SOMEDAY: (("next", "done", "waiting"), ("assign", "drop")),
    State.WAITING: (("done", "next", "someday"), ("assign", "drop")),
}
# A list shows one row of three per task: its likeliest choices (/task 12 shows them all).
LIST_CHOICES = {
    State.INBOX: ("next", "someday", "drop"),
    State.NEXT: ("done", "waiting", "assign"),
    State.SOMEDAY: ("done", "next", "assign"),
    State.WAITING: ("done", "next", "assign"),
}
WHERE = "Where does it go? Or leave it in the inbox for now."
MARKS = ("✓", "↩", "⚠")  # an outcome line a tap wrote on its message starts with one


@dataclass(frozen=True)
class Choice:
    """What a task button asks: an action, and the state the message showed (None: unknown)."""

    action: str
    shown: State | None

    @classmethod
    def parse(cls, choice: str) -> Choice:
        action, _, code = choice.partition(".")
        states = {code: state for state, code in STATE_CODES.items()}
        return cls(action, states.get(code))

    def data(self) -> str:
        return f"{self.action}.{STATE_CODES[self.shown]}" if self.shown else self.action


def button(signer: CallbackSigner, task_id: int, choice: Choice, *, numbered: bool) -> dict:
    word = WORDS[choice.action]
    text = f"{task_id} {word}" if numbered else word
    return {"text": text, "callback_data": signer.sign(TASK_KIND, str(task_id), choice.data())}


def rows_for(signer: CallbackSigner, task: Task, *, numbered: bool = False) -> list[list[dict]]:
    """The buttons an open task offers in its state; none for a closed one."""
    if not task.is_open or task.state not in CHOICES:
        return []
    return [
        [button(signer, task.id, Choice(action, task.state), numbered=numbered) for action in row]
        for row in CHOICES[task.state]
    ]


def list_row(signer: CallbackSigner, task: Task) -> list[dict]:
    """A task's row in a list: numbered, its state's likeliest choices."""
    return [
        button(signer, task.id, Choice(action, task.state), numbered=True)
        for action in LIST_CHOICES.get(task.state, ())
    ]


def receipt_markup(signer: CallbackSigner, task: Task) -> dict[str, Any]:
    return {"inline_keyboard": rows_for(signer, task)}


def undo_row(signer: CallbackSigner, task_id: int, state: State, *, numbered: bool) -> list:
    return [[button(signer, task_id, Choice("undo", state), numbered=numbered)]]


def confirm_row(signer: CallbackSigner, task: Task, action: str, *, numbered: bool) -> list:
    """Asked again: do it anyway (for the state the task is in now), or keep it as it is."""
    return [
        [
            button(signer, task.id, Choice(action, task.state), numbered=numbered),
            button(signer, task.id, Choice("keep", task.state), numbered=numbered),
        ]
    ]


def settled(
    signer: CallbackSigner,
    text: str,
    markup: dict | None,
    task_id: int,
    line: str,
    rows: list[list[dict]],
) -> tuple[Html, dict | None]:
    """The tapped message (``text``: its HTML, as Telegram gave it back) as it reads now: the
    task's buttons replaced by ``rows`` (where they were), the receipt's question gone, and
    ``line`` saying what happened in place of what an earlier tap on this task said. Other
    tasks' buttons on the message stay."""
    keyboard = (markup or {}).get("inline_keyboard", [])
    kept: list[list[dict]] = []
    placed = False
    for row in keyboard:
        if any(_for_task(signer, b, task_id) for b in row):
            if not placed:
                kept += rows
                placed = True
            continue
        kept.append(row)
    if not placed:
        kept += rows
    earlier = re.compile(rf"^(?:{'|'.join(MARKS)}) Task {task_id}\b")
    lines = [Html(x) for x in text.split("\n") if x != WHERE and not earlier.match(x)]
    return Html("\n").join([*lines, line]), {"inline_keyboard": kept} if kept else None


def is_numbered(signer: CallbackSigner, markup: dict | None, task_id: int) -> bool:
    """Whether the message shows this task's buttons with its number (a list)."""
    for row in (markup or {}).get("inline_keyboard", []):
        for b in row:
            if _for_task(signer, b, task_id):
                return b["text"].startswith(f"{task_id} ")
    return False


def _for_task(signer: CallbackSigner, b: dict, task_id: int) -> bool:
    data = signer.verify(b.get("callback_data") or "")
    return data is not None and data.kind in (TASK_KIND, ASSIGN_KIND) and data.id == str(task_id)
