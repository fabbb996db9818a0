"""The four signed-request headers, parsed strictly before anything else reads them.

Each must appear exactly once and match its form; anything else is a 400 whose reason names the
header and the fault, never the value (it may be 10,000 characters of anything).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from bot.errors import PeerRefused
from federation.signing import NONCE, PEER, SIGNATURE, TIMESTAMP

LONGEST_VALUE = 200
NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
FORMS = {
    PEER: (NAME, "a peer name: lowercase letters, digits and '-', at most 63"),
    TIMESTAMP: (re.compile(r"[0-9]{1,12}"), "whole unix seconds"),
    NONCE: (re.compile(r"[0-9a-f]{32,128}"), "32 to 128 lowercase hex digits (128 random bits)"),
    SIGNATURE: (re.compile(r"v1=[0-9a-f]{64}"), "'v1=' and 64 lowercase hex digits"),
}
_WANTED = {name.lower(): name for name in FORMS}


@dataclass(frozen=True)
class SignedHeaders:
    peer: str
    ts: int
    nonce: str
    signature: str


def parse_headers(pairs: Iterable[tuple[str, str]]) -> SignedHeaders:
    """The signed headers among a request's header lines (duplicates kept, as sent)."""
    seen: dict[str, list[str]] = {name: [] for name in FORMS}
    for name, value in pairs:
        wanted = _WANTED.get(name.lower())
        if wanted is not None:
            seen[wanted].append(value)
    values = {name: _one(name, found) for name, found in seen.items()}
    return SignedHeaders(values[PEER], int(values[TIMESTAMP]), values[NONCE], values[SIGNATURE])


def _one(name: str, found: list[str]) -> str:
    if not found:
        raise _bad(f"{name} is missing")
    if len(found) > 1:
        raise _bad(f"{name} appears {len(found)} times; send it once")
    value = found[0]
    if len(value) > LONGEST_VALUE:
        raise _bad(f"{name} is {len(value)} characters long (at most {LONGEST_VALUE})")
    form, described = FORMS[name]
    if not form.fullmatch(value):
        raise _bad(f"{name} is malformed: it must be {described}")
    return value


def _bad(message: str) -> PeerRefused:
    return PeerRefused(400, "bad_headers", message)
