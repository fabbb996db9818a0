"""The signed-request cases of issue 16, as one table the checks' tests, the route's tests and
the fuzzer share. Each case is the requests a peer sends, in order; all but the last must pass,
and the last ends as the case says (``status`` None: accepted).

The world: ``laptop`` calls ``vps`` on a link whose current secret is ``SECRET``; while an
overlap lasts ``OLD_SECRET`` is good too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, replace

from federation.checks import Link, LinkKey, Request
from federation.signing import NONCE, PEER, SIGNATURE, TIMESTAMP, Signer, direction_key

CALLER, CALLEE = "laptop", "vps"
SECRET = hashlib.sha256(b"the link's secret").digest()
OLD_SECRET = hashlib.sha256(b"the link's secret before the rotation").digest()
OFFERED = hashlib.sha256(b"the secret the link's invitation offered").digest()
PATH = "/federation/v1/status"
BODY = b"{}"
NONCES = iter(f"feed{n:028x}" for n in range(1, 10**9))


@dataclass(frozen=True)
class World:
    """The moment the case runs at, until when the old secret is good (None: never), and
    until when the claimed invitation's offer is remembered (None: forgotten)."""

    now: int
    old_until: float | None = None
    offer_until: float | None = None

    def links(self) -> dict[str, Link]:
        keys = [LinkKey(direction_key(SECRET, CALLER, CALLEE))]
        if self.old_until is not None:
            keys.append(LinkKey(direction_key(OLD_SECRET, CALLER, CALLEE), self.old_until))
        spent = ()
        if self.offer_until is not None:
            spent = (LinkKey(direction_key(OFFERED, CALLER, CALLEE), self.offer_until),)
        return {CALLER: Link(CALLER, CALLEE, tuple(keys), True, spent)}


@dataclass(frozen=True)
class Sent:
    method: str
    path_qs: str
    headers: tuple[tuple[str, str], ...]
    body: bytes

    def request(self) -> Request:
        return Request(self.method, self.path_qs, self.headers, self.body, len(self.body))

    def with_header(self, name: str, value: str | None, *, add: bool = False) -> Sent:
        """This request with ``name`` replaced (None: removed, ``add``: sent a second time)."""
        kept = tuple(pair for pair in self.headers if add or pair[0] != name)
        extra = () if value is None else ((name, value),)
        return replace(self, headers=kept + extra)


def signed(
    world: World,
    *,
    method: str = "POST",
    path_qs: str = PATH,
    body: bytes = BODY,
    ts_offset: int = 0,
    secret: bytes = SECRET,
    sender: str = CALLER,
    receiver: str = CALLEE,
    nonce: str | None = None,
) -> Sent:
    signer = Signer.for_link(secret, sender, receiver)
    headers = signer.headers(
        method, path_qs, body, ts=world.now + ts_offset, nonce=nonce or next(NONCES)
    )
    return Sent(method, path_qs, tuple(headers.items()), body)


def tampered(sent: Sent, **changes) -> Sent:
    return replace(sent, **changes)


@dataclass(frozen=True)
class Case:
    name: str
    status: int | None
    reason: str | None
    sends: Callable[[World], list[Sent]]
    world: Callable[[int], World] = World


def _again(world: World) -> list[Sent]:
    first = signed(world)
    return [first, first]


def _same_nonce_other_body(world: World) -> list[Sent]:
    nonce = next(NONCES)
    return [signed(world, nonce=nonce), signed(world, nonce=nonce, body=b'{"other": 1}')]


def _reflected(world: World) -> list[Sent]:
    """What vps sent to laptop on laptop's own link (the same secret: the worst case), sent
    back to vps as if laptop had sent it."""
    out = signed(world, sender=CALLEE, receiver=CALLER)
    return [out.with_header(PEER, CALLER)]


def _header_cases() -> list[Case]:
    cases = []
    for name in (PEER, TIMESTAMP, NONCE, SIGNATURE):
        cases.append(
            Case(
                f"{name} missing",
                400,
                "bad_headers",
                lambda w, n=name: [signed(w).with_header(n, None)],
            )
        )
        cases.append(
            Case(f"{name} twice", 400, "bad_headers", lambda w, n=name: [_twice(signed(w), n)])
        )
        cases.append(
            Case(
                f"{name} of 10,000 characters",
                400,
                "bad_headers",
                lambda w, n=name: [signed(w).with_header(n, "a" * 10_000)],
            )
        )
    malformed = {
        "timestamp not an integer": (TIMESTAMP, lambda s: s + ".5"),
        "timestamp negative": (TIMESTAMP, lambda s: "-" + s),
        "nonce short (127 bits)": (NONCE, lambda s: s[:31]),
        "nonce not hex": (NONCE, lambda s: "z" * 32),
        "nonce in capitals": (NONCE, str.upper),
        "signature of another version": (SIGNATURE, lambda s: "v2=" + s[3:]),
        "signature short": (SIGNATURE, lambda s: s[:-2]),
        "peer with capitals": (PEER, str.upper),
    }
    for label, (name, change) in malformed.items():
        cases.append(
            Case(label, 400, "bad_headers", lambda w, n=name, c=change: [_changed(signed(w), n, c)])
        )
    return cases


def _twice(sent: Sent, name: str) -> Sent:
    return sent.with_header(name, dict(sent.headers)[name], add=True)


def _changed(sent: Sent, name: str, change: Callable[[str], str]) -> Sent:
    return sent.with_header(name, change(dict(sent.headers)[name]))


NOW = 1_800_000_000
CASES: list[Case] = [
    Case("valid", None, None, lambda w: [signed(w)]),
    Case("body tampered", 401, "bad_signature", lambda w: [tampered(signed(w), body=b'{"x":1}')]),
    Case(
        "path tampered",
        401,
        "bad_signature",
        lambda w: [tampered(signed(w), path_qs="/federation/v1/statuz")],
    ),
    Case(
        "query tampered",
        401,
        "bad_signature",
        lambda w: [tampered(signed(w, path_qs=PATH + "?a=1"), path_qs=PATH + "?a=2")],
    ),
    Case(
        "query added", 401, "bad_signature", lambda w: [tampered(signed(w), path_qs=PATH + "?a=1")]
    ),
    Case("method tampered", 401, "bad_signature", lambda w: [tampered(signed(w), method="PUT")]),
    Case("timestamp 299 s ahead", None, None, lambda w: [signed(w, ts_offset=299)]),
    Case("timestamp 299 s behind", None, None, lambda w: [signed(w, ts_offset=-299)]),
    Case("timestamp 300 s ahead", None, None, lambda w: [signed(w, ts_offset=300)]),
    Case("timestamp 301 s ahead", 401, "clock_skew", lambda w: [signed(w, ts_offset=301)]),
    Case("timestamp 301 s behind", 401, "clock_skew", lambda w: [signed(w, ts_offset=-301)]),
    Case("nonce replayed", 409, "replay", _again),
    Case("same nonce, other body", 409, "replay", _same_nonce_other_body),
    Case(
        "signed for another destination",
        401,
        "bad_signature",
        lambda w: [signed(w, receiver="workstation")],
    ),
    Case("reflected back to its sender", 401, "bad_signature", _reflected),
    Case(
        "reflected unchanged: no such link",
        401,
        "unknown_peer",
        lambda w: [signed(w, sender=CALLEE, receiver=CALLER)],
    ),
    Case("unknown peer", 401, "unknown_peer", lambda w: [signed(w, sender="stranger")]),
    Case(
        "signed with another link's secret",
        401,
        "bad_signature",
        lambda w: [signed(w, secret=b"\x00" * 32)],
    ),
    Case(
        "old secret within the overlap",
        None,
        None,
        lambda w: [signed(w, secret=OLD_SECRET)],
        lambda now: World(now, now + 3600),
    ),
    Case(
        "old secret after the overlap",
        401,
        "bad_signature",
        lambda w: [signed(w, secret=OLD_SECRET)],
        lambda now: World(now, now - 1),
    ),
    Case(
        "a copy of the claimed invitation",
        409,
        "claimed",
        lambda w: [signed(w, secret=OFFERED)],
        lambda now: World(now, offer_until=now + 300),
    ),
    Case(
        "a copy of the claimed invitation, after it expired",
        401,
        "bad_signature",
        lambda w: [signed(w, secret=OFFERED)],
        lambda now: World(now, offer_until=now - 1),
    ),
    Case("2 MiB body", 413, "too_large", lambda w: [signed(w, body=b"x" * 2 * 2**20)]),
    *_header_cases(),
]
