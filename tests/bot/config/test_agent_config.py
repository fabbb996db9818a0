"""How aegis.yaml declares agents' runs and schedules (bot/config/sections.py), and how the running
system follows the file as it changes (bot/config/live.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bot.agents.profiles import HarnessKind, Provider, ScriptStep, TaskHandler, with_tag
from bot.config.file import load_config
from bot.config.live import LiveConfig
from bot.errors import PolicyConfigError

GOOD = """\
agents:
  scout:
    name: Scout
    tags: [research, gtd]
    harness: http
    model: small
    providers:
      - {url: "http://127.0.0.1:9/v1/", model: small, key_env: SCOUT_KEY}
      - {url: "http://127.0.0.1:10/v1", model: other, name: backup}
    instructions_file: scout.md
    tools: [demo.read_clock]
    deadline: 10m
    workdir: ~/src
    expensive: true
    budget_tokens: 5000
    tasks:
      - when: {origin: [forward, channel], labels: [read]}
        do: "Summarise {title}"
  clerk:
    harness: script
    steps:
      - say: hi {request}
      - call: demo.read_clock
      - sleep: 0.5
schedules:
  morning:
    every: 1d
    agent: clerk
    request: Good morning
  digest:
    every: 90
    capability: research
    request: What is new?
    enabled: false
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "aegis.yaml"
    path.write_text(text, encoding="utf-8")
    (tmp_path / "scout.md").write_text("You read links.\n", encoding="utf-8")
    return path


def test_an_agent_declares_how_it_runs(tmp_path):
    config = load_config(write(tmp_path, GOOD))
    scout = config.agents["scout"]
    assert scout.harness is HarnessKind.HTTP
    assert scout.tags == {"research", "gtd"}
    assert scout.instructions == "You read links.\n"
    assert scout.providers == (
        Provider("http://127.0.0.1:9/v1", "small", "SCOUT_KEY"),
        Provider("http://127.0.0.1:10/v1", "other", None, "backup"),
    )
    assert scout.deadline_seconds == 600
    assert scout.workdir == Path("~/src").expanduser()
    assert scout.expensive and scout.budget_tokens == 5000
    assert scout.tools == {"demo.read_clock"}
    assert config.catalog.agent("scout").tools == {"demo.read_clock"}
    assert scout.handler_for("forward", ["read", "x"]) == TaskHandler(
        ("forward", "channel"), ("read",), "Summarise {title}"
    )
    assert scout.handler_for("message", ["read"]) is None
    assert scout.handler_for("forward", []) is None
    clerk = config.agents["clerk"]
    assert clerk.steps == (
        ScriptStep(say="hi {request}"),
        ScriptStep(call="demo.read_clock"),
        ScriptStep(sleep=0.5),
    )


def test_schedules_and_capability_routing(tmp_path):
    config = load_config(write(tmp_path, GOOD))
    morning, digest = config.schedules
    assert (morning.name, morning.interval_seconds, morning.agent, morning.enabled) == (
        "morning",
        86400,
        "clerk",
        True,
    )
    assert (digest.interval_seconds, digest.capability, digest.enabled) == (90, "research", False)
    assert with_tag(config.agents, "research").slug == "scout"
    assert with_tag(config.agents, "infra") is None


def test_the_built_in_demo_agent_runs_without_a_file():
    config = load_config(None)
    assert config.agents["demo"].harness is HarnessKind.SCRIPT
    assert config.schedules == []


@pytest.mark.parametrize(
    "change, problem",
    [
        (("harness: http", "harness: telepathy"), "agents.scout.harness: must be one of script"),
        (("deadline: 10m", "deadline: soon"), "agents.scout.deadline: 'soon' is not a duration"),
        (("deadline: 10m", "deadline: 0"), "agents.scout.deadline: must be at least 1 seconds"),
        (("deadline: 10m", "deadline: 13h"), "agents.scout.deadline: must be at most 12 hours"),
        (("budget_tokens: 5000", "budget_tokens: -1"), "agents.scout.budget_tokens: must be a"),
        (("expensive: true", "expensive: yes please"), "agents.scout.expensive: must be true"),
        (("instructions_file: scout.md", "instructions_file: nope.md"), "instructions_file:"),
        (
            ('url: "http://127.0.0.1:9/v1/"', 'url: "ftp://x"'),
            "agents.scout.providers[0].url: must be an http:// or https:// URL",
        ),
        (("model: small, key_env", "key_env"), "agents.scout.providers[0].model: which model"),
        (("      - sleep: 0.5", "      - sleep: -1"), "agents.clerk.steps[2].sleep: must be a"),
        (("      - say: hi {request}", "      - {say: a, sleep: 1}"), "give exactly one of"),
        (('do: "Summarise {title}"', 'do: ""'), "agents.scout.tasks[0].do: what to ask"),
        (("labels: [read]}", "labelz: [read]}"), "agents.scout.tasks[0].when: unknown key"),
        (("    every: 1d", "    every: 5s"), "schedules.morning.every: must be at least 10"),
        (("    agent: clerk", "    agent: ghost"), "schedules.morning.agent: 'ghost' is not an"),
        (("    agent: clerk", "    agent: clerk\n    capability: gtd"), "exactly one of agent"),
        (("    request: Good morning", "    request: ''"), "schedules.morning.request:"),
        (("  morning:", "  Morning Run:"), "schedules.Morning Run: a schedule's name"),
        (("  clerk:", "  Clerk:"), "agents.Clerk: a slug is 1-40 lowercase letters"),
        (
            (
                "    steps:\n      - say: hi {request}\n"
                "      - call: demo.read_clock\n      - sleep: 0.5\n",
                "",
            ),
            "agents.clerk.steps: a script agent needs at least one step",
        ),
    ],
)
def test_each_problem_is_named_at_its_place(tmp_path, change, problem):
    old, new = change
    assert old in GOOD
    path = write(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(PolicyConfigError) as refused:
        load_config(path)
    assert problem in str(refused.value)
    assert str(path) in str(refused.value)


def test_an_http_agent_needs_a_provider(tmp_path):
    path = write(tmp_path, "agents:\n  bare:\n    harness: http\n")
    with pytest.raises(PolicyConfigError, match="agents.bare.providers: an http agent needs"):
        load_config(path)


def test_live_config_follows_the_file_and_keeps_the_last_good_one(tmp_path):
    path = write(tmp_path, GOOD)
    live = LiveConfig(path, look_every=0)
    assert "clerk" in live.current().agents

    path.write_text(GOOD.replace("  clerk:", "  typist:").replace("agent: clerk", "agent: typist"))
    _touch_later(path)
    assert "typist" in live.current().agents and "clerk" not in live.current().agents
    assert live.problem is None

    path.write_text("agents: [not, a, mapping]\n")
    _touch_later(path)
    assert "typist" in live.current().agents  # the last good file stays in force
    assert "agents: must be a mapping" in live.problem

    path.write_text(GOOD)
    _touch_later(path)
    assert "clerk" in live.current().agents
    assert live.problem is None


def test_a_process_started_on_a_bad_file_runs_on_the_built_ins(tmp_path):
    path = write(tmp_path, "agents:\n  x:\n    harness: nope\n")
    live = LiveConfig(path, look_every=0)
    assert set(live.current().agents) == {"demo"}
    assert "agents.x.harness" in live.problem


def _touch_later(path: Path) -> None:
    # The same size written within the file system's time resolution looks unchanged.
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
