"""The driver of a peer's request on the asked side (federation/acting.py), with the gate and
the rows replaced by fakes that fail on cue: what ran is never asked for again because writing
its end failed, and a bug ends the request failed instead of leaving it waiting forever."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from bot.actions.call import CallOutcome, CallStatus
from bot.errors import StoreError
from federation.acting import Acting
from federation.requests import PeerRequest, RequestState, Way
from policies.tools import AgentSpec, Catalog

MOMENT = datetime(2030, 1, 1, tzinfo=UTC)
REQUEST = PeerRequest(
    1, Way.IN, "laptop", "a" * 32, "deploy", {"recipe": "site"}, "owner",
    RequestState.WAITING, None, None, None, None, None, 1, MOMENT, MOMENT, None,
)  # fmt: skip


@dataclass
class FakeRequests:
    """The rows: ``settle`` fails ``failures`` times before it writes."""

    failures: int = 0
    settled: list = field(default_factory=list)
    row: PeerRequest = REQUEST

    async def settle(self, row_id, state, reason, result=None, card=None):
        if self.failures:
            self.failures -= 1
            raise StoreError("the database is away")
        self.settled.append((state, reason, result, card))
        self.row = replace(self.row, state=state, reason=reason, result=result)
        return self.row

    async def get(self, row_id):
        return self.row

    async def waiting(self, row_id, card):
        return True


class FakeHeld:
    """The gate: every call runs at once, or raises ``fails``."""

    def __init__(self, fails: Exception | None = None) -> None:
        self.calls = 0
        self.fails = fails
        catalog = Catalog(agents=[AgentSpec("laptop", frozenset({"deploy.run"}), peer=True)])
        self.actions = type("Actions", (), {"catalog": catalog})()

    async def call(self, call, *, on_hold=None):
        self.calls += 1
        if self.fails is not None:
            raise self.fails
        return CallOutcome(CallStatus.RAN, "deploy.run ran", {"exit_code": 0}, 7)


async def test_a_failed_write_of_the_end_is_retried_and_the_deploy_is_not_asked_for_again():
    requests, held = FakeRequests(failures=2), FakeHeld()
    acting = Acting(requests, held, owner_chat=1, retry_seconds=0.01)
    acting.start(REQUEST)
    ended = await acting.settled(REQUEST, wait=5)
    assert held.calls == 1  # run once, whatever the database did after
    assert ended.state is RequestState.DONE
    assert requests.settled == [(RequestState.DONE, "deploy.run ran", {"exit_code": 0}, 7)]


async def test_a_bug_while_driving_ends_the_request_failed_and_says_so(caplog):
    requests, held = FakeRequests(), FakeHeld(fails=KeyError("oops"))
    acting = Acting(requests, held, owner_chat=1, retry_seconds=0.01)
    acting.start(REQUEST)
    ended = await acting.settled(REQUEST, wait=5)
    assert ended.state is RequestState.FAILED and "KeyError" in ended.reason
    assert "will not be tried again" in ended.reason and held.calls == 1
    assert "laptop's request 1 failed" in caplog.text
