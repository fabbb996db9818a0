"""The policy decision: reads run, writes wait for a tap, irreversible steps and peers wait for a
tap and a code, and whatever nobody declared never runs unattended."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.errors import PolicyConfigError
from policies.decision import (
    FALLBACK,
    RULES,
    Allow,
    Deny,
    Gate,
    asked_by_peer,
    bad_arguments,
    decide,
    irreversible,
    not_granted,
    read_only,
    talks,
    undeclared_tool,
    unknown_agent,
    writes,
)
from policies.tools import AgentSpec, Catalog, Effect, ToolSpec, object_schema

REF = object_schema({"ref": {"type": "string"}}, "ref")
LOOK = ToolSpec("site.look", Effect.READ, REF, "Look at the site.")
EDIT = ToolSpec("site.edit", Effect.WRITE, REF)
DEPLOY = ToolSpec("site.deploy", Effect.IRREVERSIBLE, REF)
TOOLS = (LOOK, EDIT, DEPLOY)
GOOD = {"ref": "main"}

OPS = AgentSpec("ops", frozenset(tool.name for tool in TOOLS) | {"ghost.tool"}, name="Ops")
INTERN = AgentSpec("intern", frozenset({LOOK.name}))
PEER = AgentSpec("peer-b", frozenset(tool.name for tool in TOOLS), peer=True)
CATALOG = Catalog(TOOLS, (OPS, INTERN, PEER))

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=10,
)


# Each kind of call


def test_a_read_tool_the_agent_is_granted_is_allowed():
    decision = decide(CATALOG, "ops", "site.look", GOOD)
    assert isinstance(decision, Allow)
    assert "site.look" in decision.reason


def test_a_write_tool_is_gated_without_step_up():
    assert decide(CATALOG, "ops", "site.edit", GOOD) == Gate("site.edit changes something")


def test_an_irreversible_tool_is_gated_with_step_up():
    decision = decide(CATALOG, "ops", "site.deploy", GOOD)
    assert isinstance(decision, Gate) and decision.step_up
    assert "site.deploy" in decision.reason


def test_an_undeclared_tool_is_gated_with_step_up_even_when_the_agent_is_granted_it():
    assert "ghost.tool" in OPS.tools
    decision = decide(CATALOG, "ops", "ghost.tool", {})
    assert isinstance(decision, Gate) and decision.step_up
    assert "ghost.tool" in decision.reason


def test_an_undeclared_tool_the_agent_is_not_granted_is_denied():
    decision = decide(CATALOG, "intern", "ghost.tool", {})
    assert isinstance(decision, Deny) and "not granted" in decision.reason


def test_an_undeclared_agent_is_denied_even_for_a_read():
    decision = decide(CATALOG, "stranger", "site.look", GOOD)
    assert isinstance(decision, Deny)
    assert "stranger" in decision.reason


def test_an_undeclared_agent_asking_for_an_undeclared_tool_is_denied():
    assert isinstance(decide(CATALOG, "stranger", "ghost.tool", {}), Deny)


def test_a_declared_tool_the_agent_is_not_granted_is_denied():
    decision = decide(CATALOG, "intern", "site.edit", GOOD)
    assert decision == Deny("intern is not granted site.edit")


def test_a_read_tool_the_agent_is_not_granted_is_denied_not_allowed():
    catalog = Catalog(TOOLS, (AgentSpec("mute", frozenset()),))
    assert isinstance(decide(catalog, "mute", "site.look", GOOD), Deny)


@pytest.mark.parametrize(
    "args",
    [{}, {"ref": 1}, {"ref": "main", "extra": True}, None, [], "main"],
    ids=["missing", "wrong-type", "extra-key", "null", "list", "string"],
)
def test_arguments_that_break_the_schema_are_denied_with_the_schema_error(args):
    decision = decide(CATALOG, "ops", "site.look", args)
    assert isinstance(decision, Deny)
    assert LOOK.argument_error(args) in decision.reason


def test_the_deny_for_bad_arguments_names_the_field_and_the_problem():
    decision = decide(CATALOG, "ops", "site.deploy", {"ref": 7})
    assert isinstance(decision, Deny)
    assert "ref: 7 is not of type 'string'" in decision.reason


def test_bad_arguments_are_denied_before_an_irreversible_tool_is_gated():
    assert isinstance(decide(CATALOG, "ops", "site.deploy", {}), Deny)


@pytest.mark.parametrize("tool", ["site.look", "site.edit", "site.deploy"])
def test_a_peer_is_gated_with_step_up_whatever_the_effect(tool):
    decision = decide(CATALOG, "peer-b", tool, GOOD)
    assert isinstance(decision, Gate) and decision.step_up
    assert "peer-b" in decision.reason


def test_a_peer_is_still_denied_a_tool_it_is_not_granted():
    catalog = Catalog(TOOLS, (AgentSpec("peer-c", frozenset({LOOK.name}), peer=True),))
    assert isinstance(decide(catalog, "peer-c", "site.edit", GOOD), Deny)


def test_a_peer_sending_bad_arguments_is_denied():
    assert isinstance(decide(CATALOG, "peer-b", "site.look", {"ref": None}), Deny)


def test_an_effect_no_rule_knows_falls_through_to_the_fallback():
    odd = ToolSpec("odd.thing", "teleport", object_schema())
    catalog = Catalog((odd,), (AgentSpec("ops", frozenset({"odd.thing"})),))
    assert decide(catalog, "ops", "odd.thing", {}) == FALLBACK


def test_every_decision_carries_a_reason():
    calls = [
        ("ops", "site.look", GOOD),
        ("ops", "site.edit", GOOD),
        ("ops", "site.deploy", GOOD),
        ("ops", "ghost.tool", {}),
        ("ops", "site.look", {}),
        ("intern", "site.edit", GOOD),
        ("peer-b", "site.look", GOOD),
        ("stranger", "site.look", GOOD),
    ]
    for agent, tool, args in calls:
        assert decide(CATALOG, agent, tool, args).reason.strip()


# The rule list and its fallback


def test_the_fallback_is_a_gate_with_step_up():
    assert isinstance(FALLBACK, Gate) and FALLBACK.step_up


def test_with_no_rules_every_call_is_gated_with_step_up():
    for agent, tool in [("ops", "site.look"), ("stranger", "ghost.tool")]:
        assert decide(CATALOG, agent, tool, GOOD, rules=()) == FALLBACK


def test_when_no_rule_has_an_opinion_the_call_is_gated_with_step_up():
    silent = [lambda call: None, lambda call: None]
    assert decide(CATALOG, "ops", "site.look", GOOD, rules=silent) == FALLBACK


def test_the_first_rule_with_an_opinion_decides_and_the_rest_are_not_asked():
    asked = []

    def note(name, decision):
        def rule(call):
            asked.append(name)
            return decision

        return rule

    rules = [note("first", None), note("second", Deny("no")), note("third", Allow("yes"))]
    assert decide(CATALOG, "ops", "site.look", GOOD, rules=rules) == Deny("no")
    assert asked == ["first", "second"]


def test_a_rule_sees_who_asks_for_what_with_which_arguments():
    seen = []
    decide(CATALOG, "ops", "ghost.tool", {"x": 1}, rules=[seen.append])
    [call] = seen
    assert (call.slug, call.name, call.args) == ("ops", "ghost.tool", {"x": 1})
    assert call.agent is OPS and call.tool is None


def test_the_default_rules_are_the_declared_order():
    assert tuple(RULES) == (
        unknown_agent,
        not_granted,
        undeclared_tool,
        bad_arguments,
        asked_by_peer,
        read_only,
        talks,
        irreversible,
        writes,
    )


def test_passing_the_default_rules_explicitly_changes_nothing():
    for tool in ("site.look", "site.edit", "site.deploy", "ghost.tool"):
        assert decide(CATALOG, "ops", tool, GOOD, rules=RULES) == decide(CATALOG, "ops", tool, GOOD)


def test_talking_inside_aegis_is_allowed_but_not_for_a_peer():
    ask = ToolSpec("owner.ask", Effect.TALK, object_schema())
    me = AgentSpec("me", frozenset({"owner.ask"}))
    far = AgentSpec("far", frozenset({"owner.ask"}), peer=True)
    catalog = Catalog((ask,), (me, far))
    assert isinstance(decide(catalog, "me", "owner.ask", {}), Allow)
    assert decide(catalog, "far", "owner.ask", {}) == Gate(
        "far acts for a federated peer; its requests need a code", True
    )


def test_a_pattern_grants_every_tool_under_its_prefix_and_nothing_beside_it():
    agent = AgentSpec("ops", frozenset({"site.*", "notes.read"}))
    assert agent.grants("site.look") and agent.grants("site.deploy.now")
    assert agent.grants("notes.read")
    assert not agent.grants("site") and not agent.grants("site.") and not agent.grants("sites.x")
    assert not agent.grants("notes.write")
    catalog = Catalog((*TOOLS, ToolSpec("other.x", Effect.READ, REF)), (agent,))
    assert agent.granted_in(catalog) == ["notes.read", "site.deploy", "site.edit", "site.look"]
    # Granting is not allowing: each call still meets the gate.
    assert isinstance(decide(catalog, "ops", "site.edit", GOOD), Gate)
    assert decide(catalog, "ops", "site.ghost", GOOD) == Gate(
        "no one declared the tool 'site.ghost', so its effect is unknown", True
    )
    assert isinstance(decide(catalog, "ops", "other.x", GOOD), Deny)


# Properties


undeclared_names = st.text(max_size=30).filter(lambda name: CATALOG.tool(name) is None)


@given(undeclared_names, json_values, st.booleans(), st.booleans())
def test_a_tool_nobody_declared_is_never_allowed(name, args, granted, peer):
    grants = frozenset(tool.name for tool in TOOLS) | ({name} if granted else set())
    catalog = Catalog(TOOLS, (AgentSpec("ops", grants, peer=peer),))
    decision = decide(catalog, "ops", name, args)
    assert not isinstance(decision, Allow)
    if granted:
        assert isinstance(decision, Gate) and decision.step_up


@given(st.text(max_size=30).filter(lambda slug: CATALOG.agent(slug) is None), st.text())
def test_an_agent_nobody_declared_is_always_denied(slug, tool):
    assert isinstance(decide(CATALOG, slug, tool, GOOD), Deny)


@given(
    st.frozensets(st.sampled_from([t.name for t in TOOLS] + ["ghost.tool"])),
    st.booleans(),
    st.sampled_from([t.name for t in TOOLS] + ["ghost.tool", "other"]),
    st.one_of(st.just(GOOD), json_values),
)
def test_allow_only_when_a_granted_declared_read_is_asked_with_good_arguments_by_no_peer(
    grants, peer, tool, args
):
    catalog = Catalog(TOOLS, (AgentSpec("a", grants, peer=peer),))
    decision = decide(catalog, "a", tool, args)
    if isinstance(decision, Allow):
        spec = catalog.tool(tool)
        assert spec is not None and spec.effect is Effect.READ
        assert tool in grants and not peer
        assert spec.argument_error(args) is None
    elif isinstance(decision, Gate) and not decision.step_up:
        assert catalog.tool(tool).effect is Effect.WRITE and not peer


# Tools, agents and the catalog


def test_argument_error_is_none_when_the_arguments_fit():
    assert LOOK.argument_error(GOOD) is None


def test_argument_error_names_the_path_to_the_bad_value():
    schema = object_schema({"items": {"type": "array", "items": {"type": "integer"}}})
    tool = ToolSpec("t", Effect.READ, schema)
    assert tool.argument_error({"items": [1, "two"]}) == "items/1: 'two' is not of type 'integer'"


def test_argument_error_for_the_whole_object_says_the_arguments():
    assert LOOK.argument_error({}) == "the arguments: 'ref' is a required property"


def test_object_schema_refuses_properties_it_does_not_list():
    tool = ToolSpec("t", Effect.READ, object_schema({"a": {"type": "string"}}))
    assert tool.argument_error({"a": "x"}) is None
    assert tool.argument_error({}) is None
    assert "'b' was unexpected" in tool.argument_error({"a": "x", "b": 1})


def test_object_schema_with_no_properties_takes_only_an_empty_object():
    tool = ToolSpec("t", Effect.READ, object_schema())
    assert tool.argument_error({}) is None
    assert tool.argument_error({"a": 1}) is not None


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "objekt"},
        {"type": "object", "properties": 3},
        {"type": "object", "required": "ref"},
        {"type": "string", "pattern": "["},
    ],
    ids=["unknown-type", "properties-not-a-mapping", "required-not-a-list", "bad-regex"],
)
def test_a_schema_that_is_not_a_valid_json_schema_is_refused_naming_the_tool(schema):
    with pytest.raises(PolicyConfigError, match="tool site.broken: bad argument schema"):
        ToolSpec("site.broken", Effect.READ, schema)


def test_a_dangling_ref_in_a_schema_is_refused_when_declared_or_its_calls_are_denied():
    # Either fix will do; what must not happen is that it loads and then every call to the
    # tool raises out of decide() instead of returning a decision.
    try:
        tool = ToolSpec("site.broken", Effect.READ, {"$ref": "#/$defs/missing"})
    except PolicyConfigError as exc:
        assert "site.broken" in str(exc)
        return
    catalog = Catalog((tool,), (AgentSpec("ops", frozenset({"site.broken"})),))
    assert isinstance(decide(catalog, "ops", "site.broken", {}), Deny)


def test_a_tool_spec_is_frozen():
    with pytest.raises(AttributeError):
        LOOK.effect = Effect.WRITE


def test_an_agent_is_no_peer_unless_it_says_so():
    agent = AgentSpec("ops", frozenset())
    assert agent.peer is False and agent.name == ""


def test_effects_are_spelled_as_in_aegis_yaml():
    assert [effect.value for effect in Effect] == ["read", "talk", "write", "irreversible"]
    assert Effect("irreversible") is Effect.IRREVERSIBLE


def test_the_catalog_finds_what_was_declared_and_nothing_else():
    assert CATALOG.tool("site.look") is LOOK and CATALOG.agent("ops") is OPS
    assert CATALOG.tool("ghost.tool") is None and CATALOG.agent("stranger") is None


def test_an_empty_catalog_denies_everyone():
    assert isinstance(decide(Catalog(), "ops", "site.look", GOOD), Deny)


def test_a_tool_declared_twice_is_refused():
    with pytest.raises(PolicyConfigError, match="the tool site.look is declared twice"):
        Catalog((LOOK, ToolSpec("site.look", Effect.WRITE, REF)))


def test_an_agent_declared_twice_is_refused():
    with pytest.raises(PolicyConfigError, match="the agent ops is declared twice"):
        Catalog((), (OPS, AgentSpec("ops", frozenset())))


def test_adding_to_a_catalog_later_is_checked_the_same_way():
    catalog = Catalog(TOOLS)
    with pytest.raises(PolicyConfigError):
        catalog.add_tool(LOOK)
    catalog.add_agent(INTERN)
    with pytest.raises(PolicyConfigError):
        catalog.add_agent(INTERN)
