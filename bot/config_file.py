"""``aegis.yaml``: behaviour as data. This reads the tools and agents the gate needs.

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

Every problem is reported with its place in the file, and nothing of a bad file is used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from bot import demo
from bot.errors import PolicyConfigError
from policies.tools import AgentSpec, Catalog, Effect, ToolSpec

ANY_OBJECT = {"type": "object"}


def load_catalog(path: Path | None) -> Catalog:
    """The built-in tools and agents, plus those the file declares (when it exists)."""
    catalog = Catalog(demo.TOOLS, demo.AGENTS)
    if path is None or not path.exists():
        return catalog
    data = _read(path)
    for name, spec in _section(path, data, "tools").items():
        catalog.add_tool(_tool(path, str(name), spec))
    for slug, spec in _section(path, data, "agents").items():
        catalog.add_agent(_agent(path, str(slug), spec))
    return catalog


def _read(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
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
    try:
        return ToolSpec(name, effect, schema, str(spec.get("description", "")))
    except PolicyConfigError as exc:
        raise PolicyConfigError(f"{path}: {exc}") from None


def _agent(path: Path, slug: str, spec: Any) -> AgentSpec:
    place = f"{path}: agents.{slug}"
    if not isinstance(spec, dict):
        raise PolicyConfigError(f"{place}: must be a mapping with at least tools")
    _no_unknown_keys(place, spec, {"name", "tools", "peer"})
    tools = spec.get("tools") or []
    if not isinstance(tools, list) or not all(isinstance(tool, str) for tool in tools):
        raise PolicyConfigError(f"{place}.tools: must be a list of tool names")
    peer = spec.get("peer", False)
    if not isinstance(peer, bool):
        raise PolicyConfigError(f"{place}.peer: must be true or false")
    return AgentSpec(slug, frozenset(tools), name=str(spec.get("name", slug)), peer=peer)


def _no_unknown_keys(place: str, spec: dict, known: set[str]) -> None:
    unknown = sorted(set(map(str, spec)) - known)
    if unknown:
        raise PolicyConfigError(
            f"{place}: unknown key {unknown[0]!r} (known: {', '.join(sorted(known))})"
        )
