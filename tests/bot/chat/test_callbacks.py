"""Signed callback data: the format the design fixes, Telegram's 64-byte cap, and tampering."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from bot.chat.callbacks import MAX_CALLBACK_BYTES, CallbackData, CallbackSigner

KEY = b"k" * 32
OTHER_KEY = b"o" * 32
SIGNER = CallbackSigner(KEY)

# Any text without ':' (the separator), unicode included, so byte and character counts differ.
field = st.text(st.characters(exclude_characters=":", codec="utf-8"), min_size=1, max_size=30)


def fits(kind: str, id_: str, choice: str) -> bool:
    # Three separators, ten characters of mac.
    return len(f"{kind}:{id_}:{choice}".encode()) + 1 + 10 <= MAX_CALLBACK_BYTES


@st.composite
def fitting(draw) -> tuple[str, str, str]:
    """Three fields that fit, built to fit (filtering random unicode would discard most)."""
    budget = MAX_CALLBACK_BYTES - 10 - 3
    fields = []
    for later in (2, 1, 0):
        allowed = budget - 4 * later  # leave room for one (up to 4-byte) character each
        text = draw(field)
        while len(text.encode()) > allowed:
            text = text[:-1]
        fields.append(text)
        budget -= len(text.encode())
    return tuple(fields)


@st.composite
def oversized(draw) -> tuple[str, str, str]:
    kind, id_, choice = draw(field), draw(field), draw(field)
    body = len(f"{kind}:{id_}:{choice}".encode())
    extra = max(0, MAX_CALLBACK_BYTES + 1 - 11 - body) + draw(st.integers(0, 20))
    return kind, id_ + "x" * extra, choice


def expected_mac(key: bytes, body: str) -> str:
    digest = hmac.new(key, body.encode("utf-8"), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode("ascii")[:10]


@given(fitting())
def test_whatever_fits_signs_within_64_bytes_and_round_trips(fields):
    kind, id_, choice = fields
    data = SIGNER.sign(kind, id_, choice)
    assert len(data.encode()) <= MAX_CALLBACK_BYTES
    assert SIGNER.verify(data) == CallbackData(kind, id_, choice)


@given(fitting())
def test_the_mac_is_the_first_ten_characters_of_urlsafe_base64_hmac_sha256(fields):
    kind, id_, choice = fields
    body = f"{kind}:{id_}:{choice}"
    assert SIGNER.sign(kind, id_, choice) == f"{body}:{expected_mac(KEY, body)}"


def test_a_known_vector_matches_an_independent_computation():
    body = "approval:42:yes"
    mac = expected_mac(KEY, body)
    assert len(mac) == 10 and set(mac) <= set(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    )
    assert SIGNER.sign("approval", "42", "yes") == f"{body}:{mac}"


@given(oversized())
def test_anything_over_64_bytes_is_refused_when_signing(fields):
    assert not fits(*fields)
    with pytest.raises(ValueError, match="64 bytes"):
        SIGNER.sign(*fields)


def test_exactly_64_bytes_is_accepted_and_65_refused():
    id_ = "x" * (MAX_CALLBACK_BYTES - len("a::b") - 11)
    assert len(SIGNER.sign("a", id_, "b").encode()) == MAX_CALLBACK_BYTES
    with pytest.raises(ValueError):
        SIGNER.sign("a", id_ + "x", "b")


@settings(max_examples=200)
@given(fitting(), st.data())
def test_changing_any_single_character_breaks_the_signature(fields, data):
    kind, id_, choice = fields
    signed = SIGNER.sign(kind, id_, choice)
    index = data.draw(st.integers(0, len(signed) - 1), label="index")
    replacement = data.draw(st.characters(codec="utf-8"), label="replacement")
    tampered = signed[:index] + replacement + signed[index + 1 :]
    assume(tampered != signed)
    assert SIGNER.verify(tampered) is None


@given(fitting())
def test_data_signed_with_another_key_is_refused(fields):
    kind, id_, choice = fields
    assert SIGNER.verify(CallbackSigner(OTHER_KEY).sign(kind, id_, choice)) is None


@pytest.mark.parametrize(
    "data", ["", "a", "a:b", "a:b:c", "a:b:c:d:e", ":::", "a::c:mac0000000", "a:b:c:"]
)
def test_malformed_data_is_not_ours(data):
    assert SIGNER.verify(data) is None


def test_a_mac_over_a_different_field_split_is_refused():
    # "a:b:c" signed as kind "a", id "b", choice "c" must not verify as any other data.
    signed = SIGNER.sign("a", "b", "c")
    assert SIGNER.verify(signed.replace("a:b:c", "a:b:d", 1)) is None


@pytest.mark.parametrize(
    "fields", [("", "1", "y"), ("k", "", "y"), ("k", "1", ""), ("k:x", "1", "y")]
)
def test_empty_fields_or_separators_are_refused_when_signing(fields):
    with pytest.raises(ValueError):
        SIGNER.sign(*fields)


def test_a_short_key_is_refused():
    with pytest.raises(ValueError, match="32 bytes"):
        CallbackSigner(b"short")
