"""aegis.yaml: the tools and agents it declares join the built-ins, and every mistake in it is
refused with its place in the file, so nothing of a bad file is used."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bot.agents import demo
from bot.config.file import load_catalog
from bot.errors import PolicyConfigError
from bot.tools import declarations
from policies.decision import Allow, Deny, Gate, decide
from policies.tools import Effect

GOOD = """\
tools:
  deploy.site:
    effect: irreversible
    description: Deploy the site
    schema: {type: object, properties: {ref: {type: string}}, required: [ref]}
  site.status:
    effect: read
  site.note:
    effect: write
agents:
  ops:
    name: Ops
    tools: [deploy.site, site.status, demo.read_clock]
  partner:
    tools: [site.status]
    peer: true
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "aegis.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def refusal(tmp_path: Path, text: str) -> str:
    path = write(tmp_path, text)
    with pytest.raises(PolicyConfigError) as caught:
        load_catalog(path)
    message = str(caught.value)
    assert str(path) in message, "every refusal names the file"
    return message


BUILT_IN_TOOLS = (*demo.TOOLS, *declarations.TOOLS)


def builtins_present(catalog) -> bool:
    return all(catalog.tool(tool.name) == tool for tool in BUILT_IN_TOOLS) and catalog.agent(
        demo.AGENT
    ) == next(iter(demo.AGENTS))


# What a good file gives


def test_a_missing_file_gives_just_the_built_ins(tmp_path):
    catalog = load_catalog(tmp_path / "aegis.yaml")
    assert builtins_present(catalog)
    assert set(catalog.tools) == {tool.name for tool in BUILT_IN_TOOLS}
    assert set(catalog.agents) == {demo.AGENT}


def test_no_file_at_all_gives_just_the_built_ins():
    catalog = load_catalog(None)
    assert builtins_present(catalog) and set(catalog.agents) == {demo.AGENT}


@pytest.mark.parametrize("text", ["", "# nothing yet\n", "tools:\nagents:\n", "tools: {}\n"])
def test_an_empty_file_gives_just_the_built_ins(tmp_path, text):
    catalog = load_catalog(write(tmp_path, text))
    assert builtins_present(catalog) and set(catalog.agents) == {demo.AGENT}


def test_tools_and_agents_from_the_file_join_the_built_ins(tmp_path):
    catalog = load_catalog(write(tmp_path, GOOD))
    assert builtins_present(catalog)
    deploy = catalog.tool("deploy.site")
    assert deploy.effect is Effect.IRREVERSIBLE and deploy.description == "Deploy the site"
    assert catalog.tool("site.status").effect is Effect.READ
    assert catalog.tool("site.note").effect is Effect.WRITE
    ops = catalog.agent("ops")
    assert ops.name == "Ops" and not ops.peer
    assert ops.tools == {"deploy.site", "site.status", "demo.read_clock"}
    assert catalog.agent("partner").peer is True


def test_an_agent_without_a_name_is_named_by_its_slug(tmp_path):
    catalog = load_catalog(write(tmp_path, GOOD))
    assert catalog.agent("partner").name == "partner"


def test_a_tool_without_a_schema_takes_any_object(tmp_path):
    status = load_catalog(write(tmp_path, GOOD)).tool("site.status")
    assert status.argument_error({"anything": [1, 2]}) is None
    assert status.argument_error([1, 2]) is not None


def test_the_schema_from_the_file_checks_the_arguments(tmp_path):
    deploy = load_catalog(write(tmp_path, GOOD)).tool("deploy.site")
    assert deploy.argument_error({"ref": "main"}) is None
    assert deploy.argument_error({"ref": 3}) == "ref: 3 is not of type 'string'"


def test_the_gate_decides_by_what_the_file_declares(tmp_path):
    catalog = load_catalog(write(tmp_path, GOOD))
    assert isinstance(decide(catalog, "ops", "site.status", {}), Allow)
    assert isinstance(decide(catalog, "ops", "demo.read_clock", {}), Allow)
    deploy = decide(catalog, "ops", "deploy.site", {"ref": "main"})
    assert isinstance(deploy, Gate) and deploy.step_up
    assert isinstance(decide(catalog, "ops", "site.note", {}), Deny)
    peer = decide(catalog, "partner", "site.status", {})
    assert isinstance(peer, Gate) and peer.step_up


def test_an_agent_may_be_granted_a_tool_nobody_declared_and_it_is_gated(tmp_path):
    catalog = load_catalog(write(tmp_path, "agents:\n  ops:\n    tools: [ghost.tool]\n"))
    decision = decide(catalog, "ops", "ghost.tool", {})
    assert isinstance(decision, Gate) and decision.step_up


def test_an_agent_with_no_tools_is_granted_nothing(tmp_path):
    catalog = load_catalog(write(tmp_path, "agents:\n  idle: {}\n  quiet:\n    tools:\n"))
    assert catalog.agent("idle").tools == frozenset() == catalog.agent("quiet").tools


def test_each_load_starts_from_the_built_ins_again(tmp_path):
    path = write(tmp_path, GOOD)
    first, second = load_catalog(path), load_catalog(path)
    assert first is not second and first.tool("deploy.site") is not None
    assert second.tool("deploy.site") is not None


# Bad YAML


def test_invalid_yaml_names_the_line_and_column(tmp_path):
    message = refusal(tmp_path, "tools:\n\tdeploy: {}\n")
    assert "not valid YAML at line 2, column 1" in message


def test_a_misindented_key_names_the_line_and_column(tmp_path):
    text = "tools:\n  deploy:\n    effect: read\n   description: x\n"
    assert "not valid YAML at line 4, column 4" in refusal(tmp_path, text)


def test_an_unclosed_bracket_names_where_the_file_ended(tmp_path):
    text = "tools:\n  deploy:\n    effect: [read\n"
    assert "not valid YAML at line 4, column 1" in refusal(tmp_path, text)


def test_python_tags_are_refused_not_constructed(tmp_path):
    message = refusal(tmp_path, "tools: !!python/object:object {}\n")
    assert "not valid YAML at line 1, column 8" in message


def test_a_file_that_is_not_utf8_is_refused(tmp_path):
    path = tmp_path / "aegis.yaml"
    path.write_bytes(b"tools:\n  caf\xe9:\n    effect: read\n")
    with pytest.raises(PolicyConfigError, match=re.escape(f"{path}: cannot be read")):
        load_catalog(path)


def test_a_directory_in_place_of_the_file_is_refused(tmp_path):
    path = tmp_path / "aegis.yaml"
    path.mkdir()
    with pytest.raises(PolicyConfigError, match="cannot be read"):
        load_catalog(path)


# Bad structure: each refusal names its place


@pytest.mark.parametrize("text", ["- tools\n", "just words\n", "42\n"])
def test_a_top_level_that_is_not_a_mapping_is_refused(tmp_path, text):
    assert "the top level must be a mapping" in refusal(tmp_path, text)


@pytest.mark.parametrize("section", ["tools", "agents"])
@pytest.mark.parametrize("value", ["[deploy]", "deploy", "3"])
def test_a_section_that_is_not_a_mapping_is_refused_by_name(tmp_path, section, value):
    message = refusal(tmp_path, f"{section}: {value}\n")
    assert f": {section}: must be a mapping" in message


@pytest.mark.parametrize("value", ["", " read", " [read]"])
def test_a_tool_that_is_not_a_mapping_is_refused_by_place(tmp_path, value):
    message = refusal(tmp_path, f"tools:\n  deploy:{value}\n")
    assert "tools.deploy: must be a mapping" in message


@pytest.mark.parametrize(
    "effect",
    ["", "effect: delete", "effect: READ", "effect: [read]", "effect: {a: 1}", "effect: 1"],
    ids=["missing", "unknown", "upper-case", "list", "mapping", "number"],
)
def test_a_bad_effect_is_refused_at_tools_name_effect(tmp_path, effect):
    text = f"tools:\n  deploy:\n    description: x\n    {effect}\n"
    message = refusal(tmp_path, text)
    assert "tools.deploy.effect: must be one of read, talk, write, irreversible" in message


def test_the_place_keeps_a_dotted_tool_name_whole(tmp_path):
    message = refusal(tmp_path, "tools:\n  deploy.site:\n    effect: maybe\n")
    assert "tools.deploy.site.effect" in message


@pytest.mark.parametrize("schema", ["true", "[a]", "object"])
def test_a_schema_that_is_not_a_mapping_is_refused_at_its_place(tmp_path, schema):
    text = f"tools:\n  deploy:\n    effect: read\n    schema: {schema}\n"
    assert "tools.deploy.schema: must be a JSON schema" in refusal(tmp_path, text)


@pytest.mark.parametrize(
    "schema",
    ["{type: objekt}", "{type: object, required: ref}", "{type: string, pattern: '['}"],
    ids=["unknown-type", "required-not-a-list", "bad-regex"],
)
def test_a_schema_that_is_not_a_valid_json_schema_is_refused(tmp_path, schema):
    text = f"tools:\n  deploy:\n    effect: read\n    schema: {schema}\n"
    assert "deploy" in refusal(tmp_path, text)


def test_an_invalid_schema_is_refused_at_tools_name_schema(tmp_path):
    text = "tools:\n  deploy:\n    effect: read\n    schema: {type: objekt}\n"
    message = refusal(tmp_path, text)
    assert "tools.deploy.schema" in message
    assert "'objekt' is not valid" in message


def test_a_schema_whose_ref_points_nowhere_is_refused(tmp_path):
    # It would load, and every call to the tool would then raise out of decide().
    text = "tools:\n  deploy:\n    effect: read\n    schema: {$ref: '#/$defs/missing'}\n"
    assert "tools.deploy.schema" in refusal(tmp_path, text)


@pytest.mark.parametrize(
    "section, entry, key",
    [
        ("tools", "effect: read\n    effects: write", "effects"),
        ("tools", "effect: read\n    args: {}", "args"),
        ("agents", "tools: []\n    peers: true", "peers"),
        ("agents", "tools: []\n    allow: [x]", "allow"),
    ],
)
def test_an_unknown_key_is_refused_by_place_and_name(tmp_path, section, entry, key):
    message = refusal(tmp_path, f"{section}:\n  thing:\n    {entry}\n")
    assert f"{section}.thing: unknown key {key!r}" in message


@pytest.mark.parametrize("value", ["", " [tools]", " 3"])
def test_an_agent_that_is_not_a_mapping_is_refused_by_place(tmp_path, value):
    assert "agents.ops: must be a mapping" in refusal(tmp_path, f"agents:\n  ops:{value}\n")


@pytest.mark.parametrize("tools", ["deploy", "{deploy: yes}", "[deploy, 3]", "[[deploy]]"])
def test_a_grant_list_that_is_not_a_list_of_names_is_refused(tmp_path, tools):
    message = refusal(tmp_path, f"agents:\n  ops:\n    tools: {tools}\n")
    assert "agents.ops.tools: must be a list of tool names" in message


@pytest.mark.parametrize("peer", ["'yes'", "1", "[true]", "maybe"])
def test_a_peer_flag_that_is_not_a_boolean_is_refused(tmp_path, peer):
    message = refusal(tmp_path, f"agents:\n  ops:\n    tools: []\n    peer: {peer}\n")
    assert "agents.ops.peer: must be true or false" in message


def test_a_description_that_is_not_text_is_refused(tmp_path):
    text = "tools:\n  deploy:\n    effect: read\n    description: {a: 1}\n"
    assert "tools.deploy.description" in refusal(tmp_path, text)


def test_an_empty_description_does_not_become_the_word_none(tmp_path):
    path = write(tmp_path, "tools:\n  deploy:\n    effect: read\n    description:\n")
    try:
        tool = load_catalog(path).tool("deploy")
    except PolicyConfigError as exc:
        assert "tools.deploy.description" in str(exc)
    else:
        assert tool.description == ""


def test_an_agent_name_that_is_not_text_is_refused(tmp_path):
    text = "agents:\n  ops:\n    name: [a, b]\n    tools: []\n"
    assert "agents.ops.name" in refusal(tmp_path, text)


def test_one_bad_entry_after_good_ones_refuses_the_whole_file(tmp_path):
    with pytest.raises(PolicyConfigError, match="agents.broken.peer"):
        load_catalog(write(tmp_path, GOOD + "  broken:\n    tools: []\n    peer: often\n"))


# Redeclarations


def test_redeclaring_a_built_in_tool_is_refused_at_its_place(tmp_path):
    message = refusal(tmp_path, "tools:\n  demo.read_clock:\n    effect: write\n")
    assert "tools.demo.read_clock" in message and "declared twice" in message


def test_redeclaring_the_built_in_agent_is_refused_at_its_place(tmp_path):
    message = refusal(tmp_path, "agents:\n  demo:\n    tools: [demo.delete_file]\n")
    assert "agents.demo" in message and "declared twice" in message


def test_a_tool_declared_twice_in_the_file_is_refused(tmp_path):
    # YAML would otherwise keep the last one silently: here, a read in place of an
    # irreversible step.
    text = "tools:\n  deploy:\n    effect: irreversible\n  deploy:\n    effect: read\n"
    message = refusal(tmp_path, text)
    assert "tools.deploy" in message


def test_an_agent_declared_twice_in_the_file_is_refused(tmp_path):
    text = "agents:\n  ops:\n    tools: []\n  ops:\n    tools: [deploy]\n"
    assert "agents.ops" in refusal(tmp_path, text)


def test_a_name_that_is_not_text_is_refused(tmp_path):
    # YAML reads 1 and 0x1 as one key: a second declaration could replace the first unseen.
    text = "tools:\n  1: {effect: irreversible}\n  0x1: {effect: read}\n"
    assert "a name must be text" in refusal(tmp_path, text)
