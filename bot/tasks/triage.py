"""Triage: where an inbox task goes. Rules from ``aegis.yaml`` first, then any other triager
(a model-based one slots into the same list), then a card that asks the owner.

Every way out of the inbox is a :class:`Triage`, and a Triage cannot be made without a state
label other than ``inbox``: the invariant the design asks for is checked where the value is
made, and ``tests/bot/tasks/test_triage_invariant.py`` walks every outcome the code can produce.

    triage:
      - name: reading
        when:                       # every kind given must match; any item of a list does
          keywords: [article, "read later"]
          sender: [Alice, 12345]    # who the forward came from: their name or account id
          domain: [example.com]     # a link to this host or one under it
          regex: "(?i)invoice #\\d+"
        state: "@someday"
        labels: [read]
        assignee: researcher        # an agent declared under agents:
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlsplit

from bot.tasks.task import State, Task

# What a person can answer when asked where a task goes (buttons, cards), by callback choice.
OUTCOMES: dict[str, State] = {
    "next": State.NEXT,
    "someday": State.SOMEDAY,
    "waiting": State.WAITING,
    "reference": State.REFERENCE,
}
URL = re.compile(r"https?://[^\s<>\"')\]]+", re.IGNORECASE)


@dataclass(frozen=True)
class Triage:
    """A task leaving the inbox: its state label, and labels and an assignee to add."""

    state: State
    by: str  # who decided, for the record: "owner Alice", "rule reading"
    labels: tuple[str, ...] = ()
    assignee: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.state, State) or self.state is State.INBOX:
            raise ValueError(f"a triage must leave the inbox with a state label: {self.state!r}")


class Triager(Protocol):
    """One step of triage: a verdict, or None to pass the task on to the next step."""

    async def suggest(self, task: Task) -> Triage | None: ...


@dataclass(frozen=True)
class Conditions:
    keywords: tuple[str, ...] = ()
    senders: tuple[str, ...] = ()
    domains: tuple[str, ...] = ()
    pattern: re.Pattern[str] | None = None

    def hold_for(self, task: Task) -> bool:
        text = f"{task.title}\n{task.body}"
        folded = _nfc(text).casefold()
        checks = []
        if self.keywords:
            checks.append(any(_has_phrase(folded, keyword) for keyword in self.keywords))
        if self.senders:
            checks.append(_sender_of(task) & set(self.senders) != set())
        if self.domains:
            hosts = _hosts(task)
            checks.append(
                any(host == d or host.endswith("." + d) for host in hosts for d in self.domains)
            )
        if self.pattern is not None:
            checks.append(self.pattern.search(text) is not None)
        return bool(checks) and all(checks)


@dataclass(frozen=True)
class TriageRule:
    name: str
    when: Conditions
    state: State
    labels: tuple[str, ...] = ()
    assignee: str | None = None

    def triage(self) -> Triage:
        return Triage(self.state, f"rule {self.name}", self.labels, self.assignee)


@dataclass
class RuleTriager:
    """The first rule whose conditions all hold decides."""

    rules: Sequence[TriageRule] = field(default_factory=tuple)

    async def suggest(self, task: Task) -> Triage | None:
        for rule in self.rules:
            if rule.when.hold_for(task):
                return rule.triage()
        return None


async def suggest(triagers: Sequence[Triager], task: Task) -> Triage | None:
    """The first verdict of the chain; None means: ask the owner."""
    for triager in triagers:
        verdict = await triager.suggest(task)
        if verdict is not None:
            return verdict
    return None


def _has_phrase(folded_text: str, phrase: str) -> bool:
    # Any run of whitespace between a phrase's words: "read later" holds for "read\nlater".
    words = r"\s+".join(re.escape(word) for word in _nfc(phrase).casefold().split())
    return re.search(rf"(?<!\w){words}(?!\w)", folded_text) is not None


def _nfc(text: str) -> str:
    # "café" typed as e and a combining accent is the same word as the one-letter é.
    return unicodedata.normalize("NFC", text)


def _sender_of(task: Task) -> set[str]:
    names = {task.origin_name.casefold()} if task.origin_name else set()
    if task.origin_user_id is not None:
        names.add(str(task.origin_user_id))
    return names


def _hosts(task: Task) -> set[str]:
    urls = URL.findall(task.body)
    urls += [a["url"] for a in task.attachments if a.get("kind") == "link" and a.get("url")]
    if task.origin_link:
        urls.append(task.origin_link)
    hosts = set()
    for url in urls:
        try:
            host = urlsplit(url).hostname
        except ValueError:
            continue
        if host:
            # a link at the end of a sentence ("… see https://example.com.") keeps the dot
            hosts.add(host.casefold().rstrip(".").removeprefix("www."))
    return hosts
