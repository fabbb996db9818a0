"""``aegis doctor`` on a link on which a peer calls us: the skew measured at its last request
is named past a minute, with what to do."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from aegis.doctor import Finding
from aegis.doctor_peers import _inbound
from federation.links import Direction, LinkState, Peer

CALLER = Peer(
    "laptop",
    Direction.IN,
    None,
    "vps",
    "laptop",
    LinkState.LINKED,
    "0" * 32,
    None,
    None,
    datetime(2026, 12, 1, tzinfo=UTC),
    datetime(2026, 12, 3, tzinfo=UTC),
    2.5,
)


def test_a_caller_within_a_minute_is_fine_and_one_past_it_is_named():
    assert _inbound(CALLER, Finding).ok
    late = _inbound(replace(CALLER, skew_seconds=-95.0), Finding)
    assert not late.ok and "95 s behind this machine's" in late.text and "NTP" in late.text
    never = _inbound(replace(CALLER, last_contact_at=None, skew_seconds=None), Finding)
    assert never.ok and "never yet" in never.text
