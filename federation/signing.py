"""A federation request's signature, as design.md fixes it (Wire formats).

Each link has one secret ``K``; a request from A to B is signed with the direction key
``HMAC-SHA256(K, "A->B")`` over

    "v1\\n" METHOD "\\n" path?query "\\n" A "\\n" B "\\n" ts "\\n" nonce "\\n" hex(sha256(body))

Naming both ends is what keeps a request made for one instance from being good at another that
shares the secret, and the direction key is what makes a request reflected back at its sender
worthless there.

B's answer to a request that passed its checks is signed too (an addition to the design's
format, in ``X-Aegis-Signature`` of the answer), with the key the request was signed with, over

    "v1-answer\n" status "\n" the request's nonce "\n" hex(sha256(answer body))

so A believes only an answer B made for that very request: one changed on the way, or an old one
replayed, does not verify. Its first line keeps an answer from ever reading as a request.

Pure functions: no I/O, no clock but the one passed in.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

VERSION = "v1"
PEER = "X-Aegis-Peer"
TIMESTAMP = "X-Aegis-Timestamp"
NONCE = "X-Aegis-Nonce"
SIGNATURE = "X-Aegis-Signature"
NONCE_BYTES = 16  # 128 random bits, the least the design allows


def direction_key(secret: bytes, sender: str, receiver: str) -> bytes:
    """The key for requests from ``sender`` to ``receiver`` over a link's secret."""
    return hmac.digest(secret, f"{sender}->{receiver}".encode(), "sha256")


def canonical(
    method: str, path_qs: str, sender: str, receiver: str, ts: int, nonce: str, body: bytes
) -> bytes:
    """The bytes a signature covers."""
    digest = hashlib.sha256(body).hexdigest()
    text = f"{VERSION}\n{method}\n{path_qs}\n{sender}\n{receiver}\n{ts}\n{nonce}\n{digest}"
    return text.encode("utf-8")


def answer_canonical(status: int, nonce: str, body: bytes) -> bytes:
    """The bytes an answer's signature covers."""
    digest = hashlib.sha256(body).hexdigest()
    return f"{VERSION}-answer\n{status}\n{nonce}\n{digest}".encode()


def signature(key: bytes, message: bytes) -> str:
    """The value of ``X-Aegis-Signature`` for a canonical string."""
    return f"{VERSION}=" + hmac.new(key, message, "sha256").hexdigest()


@dataclass(frozen=True)
class Signer:
    """Signs requests from ``sender`` to ``receiver`` with the link's direction key."""

    sender: str
    receiver: str
    key: bytes

    @classmethod
    def for_link(cls, secret: bytes, sender: str, receiver: str) -> Signer:
        return cls(sender, receiver, direction_key(secret, sender, receiver))

    def headers(
        self, method: str, path_qs: str, body: bytes, *, ts: int, nonce: str | None = None
    ) -> dict[str, str]:
        """The four headers of one request; a fresh nonce unless one is given (tests)."""
        nonce = nonce or secrets.token_hex(NONCE_BYTES)
        message = canonical(method, path_qs, self.sender, self.receiver, ts, nonce, body)
        return {
            PEER: self.sender,
            TIMESTAMP: str(ts),
            NONCE: nonce,
            SIGNATURE: signature(self.key, message),
        }
