"""The one-time invitation a called instance prints and a calling one stores.

It names the called instance and its address, the caller's name in the link, and carries a
secret; it is good for ten minutes. It is a bearer secret: shown once, on stdout, and pasted by
hand into the other machine's ``aegis peer add``. The text is ``aegis-invite-1.`` followed by
url-safe base64 of a JSON object.

Its secret is not yet the link's. ``aegis peer add`` claims the invitation with a request signed
by it that carries 32 random bytes of its own (the share), and both sides make the link's
secret from the two: ``HMAC-SHA256(invitation secret, "aegis link\n" share)``. The called side
takes one claim only, so an invitation that was copied and used by someone else first is found
out at once (the second claim is refused), and the secret the link then has was never shown
anywhere. A rotation's invitation carries the new secret itself: it is not claimed.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import re
from dataclasses import asdict, dataclass
from urllib.parse import urlsplit

from bot.errors import PeerLinkRefused
from federation.headers import NAME

PREFIX = "aegis-invite-1."
VALID_FOR = 600  # seconds
SECRET = re.compile(r"[0-9a-f]{64}")
ID = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True)
class Invitation:
    id: str
    callee: str  # the inviting instance: B in the link
    caller: str  # the invited instance's name in the link: A
    url: str  # where B is reached
    secret: str  # the link's 32 bytes, hex
    expires: int  # unix seconds
    rotation: bool = False  # a new secret for a link that exists

    def text(self) -> str:
        raw = json.dumps(asdict(self), separators=(",", ":"), sort_keys=True).encode()
        return PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def link_secret(invitation_secret: bytes, share: bytes) -> bytes:
    """The link's secret, from the invitation's and the claimant's share."""
    return hmac.digest(invitation_secret, b"aegis link\n" + share, "sha256")


def read_invitation(text: str) -> Invitation:
    """The invitation in ``text``; refuses anything else without quoting it back."""
    text = text.strip()
    if not text.startswith(PREFIX) or len(text) > 2000:
        raise _refused("it does not start with " + PREFIX)
    encoded = text.removeprefix(PREFIX)
    try:
        raw = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
        fields = json.loads(raw)
        invitation = Invitation(**fields)
    except (binascii.Error, ValueError, TypeError):
        raise _refused("it is damaged (was it cut when copied?)") from None
    _check(invitation)
    return invitation


def _check(invitation: Invitation) -> None:
    fields = asdict(invitation)
    wanted = {"id": ID, "secret": SECRET, "callee": NAME, "caller": NAME}
    for field, form in wanted.items():
        if not isinstance(fields[field], str) or not form.fullmatch(fields[field]):
            raise _refused(f"its {field} is malformed")
    if not isinstance(invitation.expires, int) or not isinstance(invitation.rotation, bool):
        raise _refused("its expiry is malformed")
    if not is_http_url(invitation.url):
        raise _refused("its address is not an http(s) URL")


def is_http_url(url: object) -> bool:
    if not isinstance(url, str) or len(url) > 500:
        return False
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def _refused(why: str) -> PeerLinkRefused:
    return PeerLinkRefused(f"this is not a usable aegis invitation: {why}; nothing was stored")
