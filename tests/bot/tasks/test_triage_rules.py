"""Triage rules: what each kind of condition matches (keywords as whole words, senders by name
or id, domains with their subdomains, regexes), that every kind given must hold and the first
matching rule wins; and aegis.yaml's ``triage:`` refused with the place of every mistake."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bot.config.file import load_config
from bot.errors import PolicyConfigError
from bot.tasks.task import State, Task
from bot.tasks.triage import Conditions, RuleTriager, Triage, TriageRule, suggest

MOMENT = datetime(2030, 1, 1, tzinfo=UTC)


def task(text: str = "", **overrides: Any) -> Task:
    title = text.splitlines()[0] if text else "Message"
    values: dict[str, Any] = {
        "id": 1,
        "title": title,
        "body": text,
        "state": State.INBOX,
        "labels": (),
        "assignee": None,
        "attachments": (),
        "origin_kind": "self",
        "origin_name": None,
        "origin_user_id": None,
        "origin_link": None,
        "chat_id": 4242,
        "message_id": 1,
        "created_at": MOMENT,
        "updated_at": MOMENT,
        "triaged_by": None,
        "triage_interaction_id": None,
        "closed_at": None,
        "closed_as": None,
    }
    values.update(overrides)
    return Task(**values)


def forward(text: str, name: str, user_id: int | None = None) -> Task:
    return task(text, origin_kind="user", origin_name=name, origin_user_id=user_id)


def rules_from(tmp_path: Path, text: str) -> list[TriageRule]:
    path = tmp_path / "aegis.yaml"
    path.write_text(text, encoding="utf-8")
    return load_config(path).triage_rules


def conditions(tmp_path: Path, when: str) -> Conditions:
    """Conditions as aegis.yaml spells them (so they are folded as the loader folds them)."""
    [rule] = rules_from(tmp_path, f"triage:\n  - name: r\n    state: '@next'\n    when: {when}\n")
    return rule.when


# Keywords


@pytest.mark.parametrize(
    ("text", "holds"),
    [
        ("An article about bees", True),
        ("ARTICLE", True),
        ("article.", True),
        ("(article)", True),
        ("Articles about bees", False),  # a whole word, not a prefix
        ("particle physics", False),
        ("an article_draft", False),  # _ joins words
        ("Read later: bees", True),
        ("read later", True),
        ("I read it later", False),  # a phrase, its words in order
        ("Read latER", True),
    ],
)
def test_keywords_are_whole_words_or_phrases_in_any_case(tmp_path, text, holds):
    when = conditions(tmp_path, '{keywords: [Article, "read later"]}')
    assert when.hold_for(task(text)) is holds


def test_a_keyword_in_the_body_below_the_title_counts(tmp_path):
    when = conditions(tmp_path, "{keywords: invoice}")
    assert when.hold_for(task("Bills\nthe invoice for March"))
    assert not when.hold_for(task("Bills\nthe invoices for March"))


def test_a_phrase_holds_across_any_whitespace(tmp_path):
    when = conditions(tmp_path, '{keywords: "read later"}')
    assert when.hold_for(task("read  later"))
    assert when.hold_for(task("Bees\nplease read\nlater"))


def test_a_keyword_with_an_accent_holds_however_the_accent_was_typed(tmp_path):
    when = conditions(tmp_path, "{keywords: café}")
    assert when.hold_for(task("Meet at the café"))
    assert when.hold_for(task("Meet at the cafe\u0301"))
    assert not when.hold_for(task("Meet at the cafe"))


# Senders


def test_a_sender_is_matched_by_name_in_any_case_or_by_account_id(tmp_path):
    when = conditions(tmp_path, '{sender: ["Alice Smith", "@bob", "12345"]}')
    assert when.hold_for(forward("hi", "alice smith"))
    assert when.hold_for(forward("hi", "Bob"))
    assert when.hold_for(forward("hi", "Someone", user_id=12345))
    assert not when.hold_for(forward("hi", "Alice"))
    assert not when.hold_for(forward("hi", "Carol", user_id=123456))
    assert not when.hold_for(task("Alice Smith wrote this herself"))


def test_a_sender_id_may_be_written_as_a_number(tmp_path):
    when = conditions(tmp_path, "{sender: [Alice, 12345]}")
    assert when.hold_for(forward("hi", "Someone", user_id=12345))
    assert when.hold_for(forward("hi", "Alice"))


# Domains


@pytest.mark.parametrize(
    ("text", "holds"),
    [
        ("see https://example.com/page", True),
        ("see http://www.example.com", True),
        ("see https://docs.example.com/a?b=c", True),
        ("see https://a.b.EXAMPLE.com.", True),
        ("see https://example.com:8443/x", True),
        ("see https://notexample.com", False),
        ("see https://example.com.evil.org/", False),
        ("example.com without a scheme", False),
        ("see https://example.org", False),
    ],
)
def test_a_domain_holds_for_its_host_and_every_subdomain(tmp_path, text, holds):
    when = conditions(tmp_path, "{domain: [www.Example.com]}")
    assert when.hold_for(task(text)) is holds


def test_a_domain_holds_for_hidden_links_and_a_channel_post_link(tmp_path):
    when = conditions(tmp_path, "{domain: [example.com, t.me]}")
    link = {"kind": "link", "url": "https://blog.example.com/post", "message_id": 1}
    assert when.hold_for(task("an article", attachments=(link,)))
    assert when.hold_for(task("a post", origin_link="https://t.me/news/9"))
    other = {"kind": "link", "url": "https://example.org/", "message_id": 1}
    assert not when.hold_for(task("an article", attachments=(other,)))
    file = {"kind": "document", "file_name": "example.com.pdf", "message_id": 1}
    assert not when.hold_for(task("a file", attachments=(file,)))


def test_a_malformed_link_is_not_a_host_and_does_not_break_the_rule(tmp_path):
    when = conditions(tmp_path, "{domain: example.com}")
    assert not when.hold_for(task("http://[::1 broken and https://"))
    assert when.hold_for(task("http://[::1 broken and https://example.com"))


# Regex


def test_a_regex_searches_title_and_body_as_written(tmp_path):
    when = conditions(tmp_path, r"{regex: 'invoice #\d+'}")
    assert when.hold_for(task("Bills\nplease pay invoice #123"))
    assert not when.hold_for(task("Invoice #123"))  # case-sensitive unless it says (?i)
    assert conditions(tmp_path, r"{regex: '(?i)invoice #\d+'}").hold_for(task("Invoice #123"))


# Rules


def test_every_kind_given_must_hold(tmp_path):
    when = conditions(tmp_path, "{keywords: invoice, sender: Alice, domain: bank.com}")
    both = "the invoice https://bank.com/x"
    assert when.hold_for(forward(both, "Alice"))
    assert not when.hold_for(forward(both, "Bob"))
    assert not when.hold_for(forward("the invoice https://shop.com/x", "Alice"))
    assert not when.hold_for(forward("a bill https://bank.com/x", "Alice"))


def test_conditions_without_any_kind_never_hold():
    assert not Conditions().hold_for(task("anything at all"))


async def test_the_first_matching_rule_decides(tmp_path):
    rules = rules_from(
        tmp_path,
        """\
agents:
  researcher: {tools: []}
triage:
  - name: bank
    when: {keywords: invoice, domain: bank.com}
    state: "@next"
    labels: [money]
  - name: invoices
    when: {keywords: invoice}
    state: "@waiting"
  - name: reading
    when: {keywords: [article, read later]}
    state: "@someday"
    labels: ["#Read", deep-focus]
    assignee: researcher
""",
    )
    triager = RuleTriager(rules)
    assert await triager.suggest(task("invoice https://bank.com/1")) == Triage(
        State.NEXT, "rule bank", ("money",)
    )
    assert await triager.suggest(task("invoice by post")) == Triage(State.WAITING, "rule invoices")
    assert await triager.suggest(task("an article on bees")) == Triage(
        State.SOMEDAY, "rule reading", ("read", "deep-focus"), "researcher"
    )
    assert await triager.suggest(task("buy milk")) is None


async def test_the_chain_asks_each_triager_in_turn():
    class Fixed:
        def __init__(self, verdict: Triage | None) -> None:
            self.verdict, self.asked = verdict, 0

        async def suggest(self, task: Task) -> Triage | None:
            self.asked += 1
            return self.verdict

    nothing, first, second = Fixed(None), Fixed(Triage(State.NEXT, "a")), Fixed(None)
    assert await suggest([nothing, first, second], task("x")) == Triage(State.NEXT, "a")
    assert (nothing.asked, first.asked, second.asked) == (1, 1, 0)
    assert await suggest([nothing], task("x")) is None
    assert await suggest([], task("x")) is None


# aegis.yaml refusals


def refusal(tmp_path: Path, text: str) -> str:
    path = tmp_path / "aegis.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(PolicyConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: "), "every refusal names the file first"
    return message.removeprefix(f"{path}: ")


def rule(**spec: str) -> str:
    """One rule under triage:, its keys as YAML flow text."""
    values = {"name": "r", "when": "{keywords: x}", "state": "'@next'", **spec}
    lines = [f"    {key}: {value}" for key, value in values.items() if value is not None]
    return "triage:\n  - " + "\n".join(lines).lstrip()


@pytest.mark.parametrize(
    ("text", "place", "says"),
    [
        (rule(state="inbox"), "triage[0].state", "must be one of @next, @someday"),
        (rule(state="next"), "triage[0].state", "must be one of"),
        (rule(state=None), "triage[0].state", "must be one of"),
        (rule(colour="red"), "triage[0]", "unknown key 'colour'"),
        (rule(when="{keyword: x}"), "triage[0].when", "unknown key 'keyword'"),
        (rule(when="{}"), "triage[0].when", "at least one of keywords, sender, domain, regex"),
        (rule(when=None), "triage[0].when", "at least one of"),
        (rule(when="'(unclosed'"), "triage[0].when", "at least one of"),
        (rule(when="{regex: '(unclosed'}"), "triage[0].when.regex", "not a regular expression"),
        (rule(when="{regex: 5}"), "triage[0].when.regex", "must be text"),
        (rule(when="{keywords: [a, {b: c}]}"), "triage[0].when.keywords", "must be text"),
        (rule(when="{keywords: ['  ']}"), "triage[0].when.keywords", "must be text"),
        (rule(when="{domain: {a: b}}"), "triage[0].when.domain", "must be text"),
        (rule(assignee="nobody"), "triage[0].assignee", "'nobody' is not an agent"),
        (rule(labels="['two words']"), "triage[0].labels", "'two words' is not a label"),
        (rule(labels="[ok, -dash]"), "triage[0].labels", "'-dash' is not a label"),
        (rule(labels="5"), "triage[0].labels", "must be text or a list of texts"),
        (rule(name=None), "triage[0].name", "every rule needs a name"),
        (rule(name="'  '"), "triage[0].name", "every rule needs a name"),
        ("triage:\n  - just text\n", "triage[0]", "must be a mapping"),
        ("triage: {name: r}\n", "triage", "must be a list of rules"),
        ("triage: reading\n", "triage", "must be a list of rules"),
        ("triages: []\n", "", "unknown key 'triages'"),
        ("triage: []\nrules: []\n", "", "unknown key 'rules'"),
    ],
)
def test_a_bad_rule_is_refused_with_its_place(tmp_path, text, place, says):
    message = refusal(tmp_path, text)
    if place:
        assert message.startswith(f"{place}: "), message
    assert says in message, message


def test_a_second_rule_with_the_same_name_is_refused(tmp_path):
    text = (
        rule(name="reading")
        + "\n  - name: reading\n    when: {keywords: y}\n    state: '@someday'\n"
    )
    assert refusal(tmp_path, text) == "triage[1].name: 'reading' is the name of an earlier rule"


def test_a_key_given_twice_in_a_rule_is_refused_with_its_line(tmp_path):
    text = rule() + "\n    state: '@someday'\n"
    message = refusal(tmp_path, text)
    assert re.match(r"triage\[0\]\.state: declared twice \(line 5\)", message), message


def test_a_place_counts_rules_from_zero(tmp_path):
    text = rule() + "\n  - name: s\n    when: {regex: '['}\n    state: '@next'\n"
    assert refusal(tmp_path, text).startswith("triage[1].when.regex: not a regular expression")


def test_an_assignee_may_be_any_declared_agent_including_built_ins(tmp_path):
    from bot.agents import demo

    builtin = next(iter(demo.AGENTS)).slug
    [rule_] = rules_from(tmp_path, rule(assignee=builtin))
    assert rule_.assignee == builtin


def test_no_triage_section_means_no_rules(tmp_path):
    assert rules_from(tmp_path, "tools: {}\n") == []
    assert rules_from(tmp_path, "triage:\n") == []
    assert load_config(None).triage_rules == []
    assert load_config(tmp_path / "missing.yaml").triage_rules == []


def test_rules_keep_their_order_and_fold_what_they_compare(tmp_path):
    rules = rules_from(
        tmp_path,
        "triage:\n"
        "  - {name: one, when: {keywords: [Read Later], sender: ['@Bob']}, state: '@someday'}\n"
        "  - {name: two, when: {domain: WWW.Example.COM}, state: '@reference'}\n",
    )
    assert [r.name for r in rules] == ["one", "two"]
    assert rules[0].when.keywords == ("read later",) and rules[0].when.senders == ("bob",)
    assert rules[1].when.domains == ("example.com",) and rules[1].state is State.REFERENCE
