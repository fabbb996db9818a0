"""``aegis.yaml``: behaviour as data. This reads the tools and agents the gate needs, the
triage rules for the inbox (their format is in bot/tasks/triage.py), and how agents run and when
(bot/agents/profiles.py, bot/config/sections.py).

    tools:
      deploy.site:
        effect: irreversible          # read | write | irreversible
        description: Deploy the site
        schema: {type: object, properties: {ref: {type: string}}, required: [ref]}
    agents:
      ops:
        name: Ops
        tools: [deploy.site, demo.read_clock]
        peer: false                   # true: acts for a federated peer; every call needs a code
    deploy:                           # recipes deploy.run runs (bot/tools/deploy.py)
      site:
        description: Deploy the site
        command: [./deploy.sh, --prod]  # a program and its arguments, never a shell string
        workdir: /srv/site            # absolute (~ is expanded); the command starts here
        timeout_seconds: 600          # 1..3600, default 600; stopped with all it started
    monitors:                         # what aegis watches (bot/monitors/specs.py)
      site:
        http: https://example.org
        every: 1m

Every problem is reported with its place in the file, and nothing of a bad file is used.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from bot.agents import demo
from bot.agents.profiles import AgentProfile, HarnessKind, ScheduleSpec
from bot.config.sections import AGENT_KEYS, agent_profile, schedule_specs
from bot.errors import MonitorRefused, PolicyConfigError, SchemaRefused, TaskRefused
from bot.monitors import specs as monitor_specs
from bot.monitors.monitor import MonitorSpec
from bot.tasks.task import parse_label
from bot.tasks.triage import OUTCOMES, Conditions, TriageRule
from bot.tools import declarations
from bot.tools.declarations import DEFAULT_TIMEOUT_SECONDS, MAX_TIMEOUT_SECONDS, DeployRecipe
from policies.tools import AgentSpec, Catalog, Effect, ToolSpec

ANY_OBJECT = {"type": "object"}


@dataclass
class Config:
    """What aegis.yaml declares, on top of the built-ins."""

    catalog: Catalog
    triage_rules: list[TriageRule] = field(default_factory=list)
    agents: dict[str, AgentProfile] = field(default_factory=dict)
    schedules: list[ScheduleSpec] = field(default_factory=list)
    recipes: dict[str, DeployRecipe] = field(default_factory=dict)
    monitors: list[MonitorSpec] = field(default_factory=list)


def load_catalog(path: Path | None) -> Catalog:
    """The built-in tools and agents, plus those the file declares (when it exists)."""
    return load_config(path).catalog


def load_config(path: Path | None) -> Config:
    """The whole file, checked: tools, agents and triage rules."""
    catalog = Catalog((*demo.TOOLS, *declarations.TOOLS), demo.AGENTS)
    agents = {agent.slug: agent for agent in demo.PROFILES}
    if path is None or not path.exists():
        return Config(catalog, agents=agents)
    data = _read(path)
    for name, spec in _section(path, data, "tools").items():
        _is_text_name(path, "tools", name)
        if str(name) in catalog.tools:
            raise PolicyConfigError(
                f"{path}: tools.{name}: declared twice (a built-in tool has this name)"
            )
        catalog.add_tool(_tool(path, str(name), spec))
    for slug, spec in _section(path, data, "agents").items():
        _is_text_name(path, "agents", slug)
        if str(slug) in catalog.agents:
            raise PolicyConfigError(
                f"{path}: agents.{slug}: declared twice (a built-in agent has this name)"
            )
        gate_view = _agent(path, str(slug), spec)
        profile = agent_profile(path, gate_view.slug, spec, gate_view.tools, gate_view.name)
        if profile.harness is HarnessKind.CLAUDE_CODE:
            # Claude Code asks about its own built-ins (cli.<Name>, see
            # bot/tools/declarations.py); the gate decides each by its effect. Codex and
            # OpenCode never ask: their built-ins are set on their command line and config.
            gate_view = replace(gate_view, tools=gate_view.tools | {declarations.CLI_FAMILY})
        catalog.add_agent(gate_view)
        agents[gate_view.slug] = profile
    _no_unknown_keys(
        str(path), data, {"tools", "agents", "triage", "schedules", "deploy", "monitors"}
    )
    rules = _triage_rules(path, data.get("triage"), set(catalog.agents))
    schedules = schedule_specs(path, data.get("schedules"), agents)
    recipes = {}
    for name, spec in _section(path, data, "deploy").items():
        _is_text_name(path, "deploy", name)
        recipes[name] = _recipe(f"{path}: deploy.{name}", name, spec)
    monitors = _monitors(path, _section(path, data, "monitors"))
    return Config(catalog, rules, agents, schedules, recipes, monitors)


def _monitors(path: Path, section: dict) -> list[MonitorSpec]:
    specs = []
    for name, spec in section.items():
        place = f"{path}: monitors.{name}"
        try:
            specs.append(monitor_specs.from_mapping(str(name), spec))
        except MonitorRefused as exc:
            raise PolicyConfigError(f"{place}: {exc}") from None
    return specs


def _duplicate_key(node: yaml.Node, place: str = "") -> tuple[str, yaml.Mark] | None:
    """The first key given twice in one mapping, as a dotted place: a second ``deploy:`` must
    not quietly replace the first (and turn an irreversible tool into a read)."""
    if isinstance(node, yaml.MappingNode):
        seen = set()
        for key_node, value_node in node.value:
            key = getattr(key_node, "value", None)
            here = f"{place}.{key}" if place else str(key)
            if key in seen:
                return here, key_node.start_mark
            seen.add(key)
            found = _duplicate_key(value_node, here)
            if found:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            found = _duplicate_key(item, f"{place}[{index}]")
            if found:
                return found
    return None


def _read(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
        duplicate = _duplicate_key(yaml.compose(text, Loader=yaml.SafeLoader))
        if duplicate is not None:
            place, mark = duplicate
            raise PolicyConfigError(
                f"{path}: {place}: declared twice (line {mark.line + 1}); keep one"
            )
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "somewhere"
        raise PolicyConfigError(f"{path}: not valid YAML at {where}: {exc.problem}") from exc
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise PolicyConfigError(f"{path}: cannot be read: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise PolicyConfigError(f"{path}: the top level must be a mapping (tools:, agents: …)")
    return data


def _section(path: Path, data: dict, name: str) -> dict:
    section = data.get(name) or {}
    if not isinstance(section, dict):
        raise PolicyConfigError(f"{path}: {name}: must be a mapping of names to declarations")
    return section


def _tool(path: Path, name: str, spec: Any) -> ToolSpec:
    place = f"{path}: tools.{name}"
    if not isinstance(spec, dict):
        raise PolicyConfigError(f"{place}: must be a mapping with at least an effect")
    _no_unknown_keys(place, spec, {"effect", "description", "schema"})
    try:
        effect = Effect(spec.get("effect"))
    except ValueError:
        choices = ", ".join(effect.value for effect in Effect)
        raise PolicyConfigError(f"{place}.effect: must be one of {choices}") from None
    schema = spec.get("schema", ANY_OBJECT)
    if not isinstance(schema, dict):
        raise PolicyConfigError(f"{place}.schema: must be a JSON schema (a mapping)")
    description = _text(f"{place}.description", spec.get("description"))
    try:
        return ToolSpec(name, effect, schema, description)
    except SchemaRefused as exc:
        raise PolicyConfigError(f"{place}.schema: {exc.problem}") from None


def _agent(path: Path, slug: str, spec: Any) -> AgentSpec:
    place = f"{path}: agents.{slug}"
    if not isinstance(spec, dict):
        raise PolicyConfigError(f"{place}: must be a mapping with at least tools")
    _no_unknown_keys(place, spec, AGENT_KEYS)
    tools = spec.get("tools") or []
    if not isinstance(tools, list) or not all(isinstance(tool, str) for tool in tools):
        raise PolicyConfigError(f"{place}.tools: must be a list of tool names")
    peer = spec.get("peer", False)
    if not isinstance(peer, bool):
        raise PolicyConfigError(f"{place}.peer: must be true or false")
    name = _text(f"{place}.name", spec.get("name")) or slug
    return AgentSpec(slug, frozenset(tools), name=name, peer=peer)


def _recipe(place: str, name: str, spec: Any) -> DeployRecipe:
    if not isinstance(spec, dict):
        raise PolicyConfigError(f"{place}: must be a mapping with at least command and workdir")
    _no_unknown_keys(place, spec, {"description", "command", "workdir", "timeout_seconds"})
    command = spec.get("command")
    # A list, never a string: a string would need a shell, and a shell reads more than words.
    if (
        not isinstance(command, list)
        or not command
        or not all(isinstance(word, str) and word for word in command)
    ):
        raise PolicyConfigError(
            f"{place}.command: must be a list of words, the program first ([./deploy.sh, --prod])"
        )
    workdir = spec.get("workdir")
    if not isinstance(workdir, str) or not Path(workdir).expanduser().is_absolute():
        raise PolicyConfigError(f"{place}.workdir: must be an absolute path (/srv/site)")
    timeout = spec.get("timeout_seconds", DEFAULT_TIMEOUT_SECONDS)
    if (
        not isinstance(timeout, int)
        or isinstance(timeout, bool)
        or not 1 <= timeout <= MAX_TIMEOUT_SECONDS
    ):
        raise PolicyConfigError(
            f"{place}.timeout_seconds: must be whole seconds, 1 to {MAX_TIMEOUT_SECONDS}"
        )
    description = _text(f"{place}.description", spec.get("description"))
    return DeployRecipe(name, tuple(command), Path(workdir).expanduser(), description, timeout)


def _text(place: str, value: Any) -> str:
    """Optional text: absent or empty is "", anything but a string is refused."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise PolicyConfigError(f"{place}: must be text")
    return value


def _no_unknown_keys(place: str, spec: dict, known: set[str]) -> None:
    unknown = sorted(set(map(str, spec)) - known)
    if unknown:
        raise PolicyConfigError(
            f"{place}: unknown key {unknown[0]!r} (known: {', '.join(sorted(known))})"
        )


def _is_text_name(path: Path, section: str, name: Any) -> None:
    # YAML reads 1 and 0x1, or yes and on, as one value: a name that is not text could
    # quietly replace another declaration. Quote it ("1":) if it is meant.
    if not isinstance(name, str):
        raise PolicyConfigError(f"{path}: {section}.{name!r}: a name must be text; quote it")


def _triage_rules(path: Path, section: Any, agents: set[str]) -> list[TriageRule]:
    """The rules of ``triage:`` (see bot/tasks/triage.py), in order."""
    if section is None:
        return []
    if not isinstance(section, list):
        raise PolicyConfigError(f"{path}: triage: must be a list of rules")
    rules, names = [], set()
    states = {str(state): state for state in OUTCOMES.values()}
    for index, spec in enumerate(section):
        place = f"{path}: triage[{index}]"
        if not isinstance(spec, dict):
            raise PolicyConfigError(f"{place}: must be a mapping with name, when and state")
        _no_unknown_keys(place, spec, {"name", "when", "state", "labels", "assignee"})
        name = spec.get("name")
        if not isinstance(name, str) or not name.strip():
            raise PolicyConfigError(f"{place}.name: every rule needs a name (text)")
        if name in names:
            raise PolicyConfigError(f"{place}.name: {name!r} is the name of an earlier rule")
        names.add(name)
        if spec.get("state") not in states:
            raise PolicyConfigError(f"{place}.state: must be one of {', '.join(states)}")
        try:
            labels = tuple(parse_label(label) for label in _texts(f"{place}.labels", spec))
        except TaskRefused as exc:
            raise PolicyConfigError(f"{place}.labels: {exc}") from None
        assignee = spec.get("assignee")
        if assignee is not None and assignee not in agents:
            raise PolicyConfigError(
                f"{place}.assignee: {assignee!r} is not an agent declared under agents:"
            )
        when = _conditions(f"{place}.when", spec.get("when"))
        rules.append(TriageRule(name, when, states[spec["state"]], labels, assignee))
    return rules


def _conditions(place: str, spec: Any) -> Conditions:
    if not isinstance(spec, dict) or not spec:
        raise PolicyConfigError(
            f"{place}: must name at least one of keywords, sender, domain, regex"
        )
    _no_unknown_keys(place, spec, {"keywords", "sender", "domain", "regex"})
    pattern = None
    if "regex" in spec:
        if not isinstance(spec["regex"], str):
            raise PolicyConfigError(f"{place}.regex: must be text")
        try:
            pattern = re.compile(spec["regex"])
        except re.error as exc:
            raise PolicyConfigError(f"{place}.regex: not a regular expression: {exc}") from None
    keywords = _texts(f"{place}.keywords", spec)
    # an account id may be written as a number: sender: [Alice, 12345]
    senders = _texts(f"{place}.sender", spec, numbers=True)
    domains = _texts(f"{place}.domain", spec)
    return Conditions(
        keywords=tuple(keyword.casefold() for keyword in keywords),
        senders=tuple(sender.casefold().lstrip("@") for sender in senders),
        domains=tuple(domain.casefold().removeprefix("www.") for domain in domains),
        pattern=pattern,
    )


def _texts(place: str, spec: dict, *, numbers: bool = False) -> list[str]:
    """Text or a list of texts under the key ``place`` ends with; absent is empty. With
    ``numbers``, whole numbers are read as their digits."""
    value = spec.get(place.rsplit(".", 1)[-1])
    if value is None:
        return []
    if not isinstance(value, list):
        value = [value]
    if numbers:
        value = [str(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in value]
    if not all(isinstance(v, str) and v.strip() for v in value):
        raise PolicyConfigError(f"{place}: must be text or a list of texts")
    return [v.strip() for v in value]
