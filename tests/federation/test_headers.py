"""The header parser and the checks, fuzzed bare (no HTTP in front to tidy the input): whatever
arrives ends as a pass or a 4xx ``PeerRefused``, never another exception."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from bot.errors import PeerRefused
from federation.checks import Request, check
from federation.headers import parse_headers
from tests.helpers.signature_cases import NOW, World, signed

NAMES = st.sampled_from(
    ["X-Aegis-Peer", "X-Aegis-Timestamp", "X-Aegis-Nonce", "X-Aegis-Signature", "X-AEGIS-NONCE"]
)
VALUES = st.one_of(st.text(max_size=400), st.from_regex(r"[0-9a-f]{30,130}", fullmatch=True))


@settings(max_examples=500, deadline=None)
@given(pairs=st.lists(st.tuples(st.one_of(NAMES, st.text(max_size=20)), VALUES), max_size=8))
def test_any_header_lines_parse_or_are_a_400(pairs):
    try:
        parse_headers(pairs)
    except PeerRefused as refused:
        assert refused.status == 400 and refused.reason == "bad_headers"


@settings(max_examples=300, deadline=None)
@given(
    replaced=st.dictionaries(NAMES, VALUES, max_size=4),
    body=st.binary(max_size=3000),
    method=st.text(max_size=8),
    path=st.text(max_size=50),
)
def test_any_request_passes_the_checks_or_is_a_4xx(replaced, body, method, path):
    world = World(NOW)
    sent = signed(world)
    for name, value in replaced.items():
        sent = sent.with_header(name, value)
    request = Request(method, path, sent.headers, body, len(body))
    try:
        check(request, world.links().get, world.now, max_body=2048)
    except PeerRefused as refused:
        assert 400 <= refused.status < 500
