"""Canonical JSON and the approval hash: sorted keys, no insignificant whitespace, UTF-8, no NaN,
so one call has one hash and any other call has another."""

from __future__ import annotations

import hashlib
import json
import math
import random

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from policies.canonical import approval_hash, canonical_json

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(), children, max_size=5)
    ),
    max_leaves=25,
)
json_objects = st.dictionaries(st.text(), json_values, max_size=6)
not_finite = st.sampled_from([math.nan, math.inf, -math.inf])


def reordered(value, rnd: random.Random):
    """The same value with every object's keys in another (random) insertion order."""
    if isinstance(value, dict):
        keys = list(value)
        rnd.shuffle(keys)
        return {key: reordered(value[key], rnd) for key in keys}
    if isinstance(value, list):
        return [reordered(item, rnd) for item in value]
    return value


def insignificant_whitespace(text: str) -> list[int]:
    """Positions of whitespace outside string literals."""
    found, in_string, escaped = [], False, False
    for index, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in " \t\n\r":
            found.append(index)
    return found


def unicode_escapes(text: str) -> list[int]:
    """The code points of every \\uXXXX escape in the JSON text."""
    found, index = [], 0
    while index < len(text):
        if text[index] == "\\":
            if text[index + 1] == "u":
                found.append(int(text[index + 2 : index + 6], 16))
            index += 2
        else:
            index += 1
    return found


# Properties


@given(json_values, st.randoms(use_true_random=False))
def test_key_order_never_changes_the_canonical_form(value, rnd):
    assert canonical_json(reordered(value, rnd)) == canonical_json(value)


@given(st.text(), st.text(), json_objects, st.randoms(use_true_random=False))
def test_key_order_never_changes_the_approval_hash(agent, tool, args, rnd):
    assert approval_hash(agent, tool, reordered(args, rnd)) == approval_hash(agent, tool, args)


@given(json_objects, st.text(), st.text(min_size=1), st.data())
def test_changing_one_character_of_a_string_argument_changes_the_hash(args, key, text, data):
    args = {**args, key: text}
    index = data.draw(st.integers(0, len(text) - 1), label="index")
    replacement = data.draw(st.characters(codec="utf-8"), label="replacement")
    assume(replacement != text[index])
    changed = {**args, key: text[:index] + replacement + text[index + 1 :]}
    assert approval_hash("ops", "site.deploy", changed) != approval_hash("ops", "site.deploy", args)


@given(json_objects, st.text(), st.text())
def test_a_different_agent_or_tool_changes_the_hash(args, agent, other):
    assume(agent != other)
    assert approval_hash(agent, "t", args) != approval_hash(other, "t", args)
    assert approval_hash("a", agent, args) != approval_hash("a", other, args)


@given(json_values)
def test_the_output_has_no_whitespace_outside_strings(value):
    assert insignificant_whitespace(canonical_json(value).decode("utf-8")) == []


@given(json_values)
def test_the_output_is_utf8_with_unicode_escapes_only_for_control_characters(value):
    text = canonical_json(value).decode("utf-8")
    assert all(code < 0x20 for code in unicode_escapes(text))


@given(st.text(st.characters(codec="utf-8", min_codepoint=0x20, exclude_characters='"\\')))
def test_text_without_control_characters_appears_as_its_own_utf8_bytes(text):
    assert canonical_json(text) == b'"' + text.encode("utf-8") + b'"'


@given(json_values)
def test_the_output_round_trips_through_json_loads_to_an_equal_value(value):
    assert json.loads(canonical_json(value)) == value


@given(json_values)
def test_the_canonical_form_is_a_fixed_point(value):
    once = canonical_json(value)
    assert canonical_json(json.loads(once)) == once


@given(
    st.recursive(
        not_finite,
        lambda bad: (
            st.tuples(json_values, bad).map(list)
            | st.tuples(st.text(), bad, json_objects).map(lambda t: {**t[2], t[0]: t[1]})
        ),
        max_leaves=5,
    )
)
def test_nan_and_infinity_anywhere_are_refused_with_value_error(value):
    with pytest.raises(ValueError):
        canonical_json(value)
    with pytest.raises(ValueError):
        approval_hash("ops", "site.deploy", {"value": value})


# Fixed cases


def test_a_known_vector_matches_a_hand_written_canonical_string():
    args = {
        "ref": "v1.2",
        "note": "café ☕ 🚀",
        "n": 3,
        "ratio": 1.5,
        "flags": [True, False, None],
        "nested": {"z": "a\nb", "a": 'say "hi"', "m": []},
        "Z": {},
    }
    canonical = (
        '{"agent":"ops","args":{"Z":{},"flags":[true,false,null],"n":3,'
        '"nested":{"a":"say \\"hi\\"","m":[],"z":"a\\nb"},'
        '"note":"café ☕ 🚀","ratio":1.5,"ref":"v1.2"},"tool":"deploy.site"}'
    )
    expected = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    assert expected == "744bcd749d7368b7280ba82d588ba2913a50446b22ee6685f86a6758f48571b2"
    assert canonical_json({"tool": "deploy.site", "args": args, "agent": "ops"}) == (
        canonical.encode("utf-8")
    )
    assert approval_hash("ops", "deploy.site", args) == expected


def test_the_canonical_form_is_bytes():
    assert canonical_json({"b": 1, "a": [1, 2]}) == b'{"a":[1,2],"b":1}'


def test_true_and_one_hash_apart_though_python_finds_them_equal():
    assert {"x": True} == {"x": 1}
    assert approval_hash("a", "t", {"x": True}) != approval_hash("a", "t", {"x": 1})


def test_a_lone_surrogate_which_utf8_cannot_hold_is_refused_with_value_error():
    # json.loads("\"\\ud800\"") yields one, so arguments parsed from a client can carry it.
    with pytest.raises(ValueError):
        approval_hash("ops", "t", {"text": json.loads('"\\ud800"')})


@pytest.mark.parametrize("value", [{1, 2}, b"bytes", object()], ids=["set", "bytes", "object"])
def test_what_json_cannot_hold_is_refused_with_type_error(value):
    with pytest.raises(TypeError):
        canonical_json({"value": value})
