"""The worker's batches of check results: a success of a monitor that was up waits for company,
and anything that may be news (a failure, any result of a monitor that was not up) is recorded
at once, with what waited before it, in order."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import json
from types import SimpleNamespace

import pytest

from bot.chat.callbacks import CallbackSigner
from bot.chat.outbox import Outbox
from bot.monitors.incidents import Incidents
from bot.monitors.monitor import CheckResult, MonitorKind, MonitorSpec
from bot.monitors.monitors import Monitors
from bot.timeutil import now
from jobs import load_actors
from tests.helpers.stack import make_settings

SPEC = MonitorSpec.from_json(
    {"name": "site", "kind": "http", "target": "http://site.invalid/", "interval_seconds": 60}
)


class Recorded:
    """The platform's part a batch uses: each record_many call, as (monitor id, ok) pairs."""

    def __init__(self) -> None:
        self.calls: list[list[tuple[int, bool]]] = []
        self.settings = SimpleNamespace(owner_ids={7}, uses_emulator=False)
        self.monitors = self
        self.monitor_agents = ()

    async def record_many(self, batch, *, chat_id, agents):
        assert chat_id == 7
        self.calls.append([(monitor_id, result.ok) for monitor_id, result, _ in batch])
        return {}


@pytest.fixture
def checks(tmp_path, redis_server_url, redis_namespace):
    """jobs/monitors/checks.py, imported as a worker does (its actor needs the broker)."""
    settings = make_settings(tmp_path / "data", "sqlite+aiosqlite://", redis_server_url)
    load_actors(settings, redis_server_url, namespace=redis_namespace)
    return importlib.import_module("jobs.monitors.checks")


@pytest.fixture
def results(monkeypatch, checks):
    """What each monitor's probe finds, by the monitor's id (set per test)."""
    found: dict[int, bool] = {}

    async def check(spec):
        return CheckResult(True, 1.0) if found[spec.interval_seconds] else CheckResult.down("no")

    monkeypatch.setattr(checks.probe, "check", check)
    monkeypatch.setattr(checks, "RECORD_EVERY", 30.0)  # long enough never to be reached here
    return found


async def run(batch, platform, monitor: int, *, was_up: bool) -> None:
    spec = MonitorSpec.from_json({**SPEC.to_json(), "interval_seconds": monitor})
    batch.start(platform, monitor, now(), spec, was_up=was_up)
    await asyncio.gather(*batch.running)
    await asyncio.sleep(0.05)  # a record it asked for at once has run by now


pytestmark = pytest.mark.redis_server


async def test_a_success_of_an_up_monitor_waits_and_news_takes_it_along(checks, results):
    platform, batch = Recorded(), checks._Batch()
    results.update({11: True, 12: False})
    await run(batch, platform, 11, was_up=True)
    assert platform.calls == []  # nobody is told anything by it: it waits
    await run(batch, platform, 12, was_up=True)  # a failure may cross a threshold
    assert platform.calls == [[(11, True), (12, False)]]


@pytest.mark.parametrize("ok", [True, False])
async def test_any_result_of_a_monitor_that_was_not_up_is_recorded_at_once(checks, results, ok):
    platform, batch = Recorded(), checks._Batch()
    results[13] = ok  # a first success makes it up; a success of a down one may recover it
    await run(batch, platform, 13, was_up=False)
    assert platform.calls == [[(13, ok)]]


def test_a_slot_says_whether_its_monitor_was_up_and_an_older_clock_s_says_not(checks):
    slot, spec = now().isoformat(), SPEC.to_json()
    assert checks.slot_of([14, slot, spec, "up"])[3] is True
    assert checks.slot_of([14, slot, spec, "down"])[3] is False
    assert checks.slot_of([14, slot, spec, "pending"])[3] is False
    monitor_id, when, read, was_up = checks.slot_of([14, slot, spec])  # no state: not up
    assert (monitor_id, when.isoformat(), read, was_up) == (14, slot, SPEC, False)


def test_a_slot_s_spec_is_the_row_s_json_text_or_as_an_older_clock_sends_it_decoded(checks):
    slot, text = now().isoformat(), json.dumps(SPEC.to_json())
    assert checks.slot_of([14, slot, text, "up"])[2] == SPEC
    assert checks.slot_of([14, slot, json.loads(text), "up"])[2] == SPEC
    assert checks.slot_of([15, slot, text, "up"])[2] is checks.slot_of([14, slot, text])[2]


@pytest.mark.parametrize("change", ["kept", "removed", "paused", "changed"])
async def test_a_claimed_command_runs_only_if_its_monitor_is_still_as_claimed(
    checks, store, tmp_path, change
):
    """The clock claims half a minute of slots ahead; a command the owner took away (or
    paused, or changed) in the meantime is not run as it was."""
    monitors = Monitors(store, Incidents(store, Outbox(store), CallbackSigner(b"k" * 32)))
    mark = tmp_path / "ran"
    spec = MonitorSpec("mark", MonitorKind.CMD, f"touch {mark}")
    await monitors.reconcile([spec])  # as aegis.yaml declares it
    claimed: list = []

    async def enqueue(actor, due):
        claimed.extend(due)

    assert await monitors.enqueue_due(enqueue) == 1
    [monitor] = await monitors.all()
    if change == "removed":
        await monitors.reconcile([])
    elif change == "paused":
        await monitors.pause(monitor.id, True)
    elif change == "changed":
        await monitors.reconcile([dataclasses.replace(spec, timeout_seconds=5.0)])
    platform = SimpleNamespace(
        monitors=monitors,
        settings=SimpleNamespace(owner_ids={7}, uses_emulator=False),
        monitor_agents=(),
    )
    batch = checks._Batch()
    monitor_id, slot, claimed_spec, was_up = checks.slot_of(claimed[0])
    batch.start(platform, monitor_id, slot, claimed_spec, was_up=was_up)
    await asyncio.gather(*batch.running)
    assert mark.exists() == (change == "kept")
    if batch.flushing is not None:
        await batch.flushing
    checked = await monitors.get(monitor_id)
    assert (checked is not None and checked.last_check_at is not None) == (change == "kept")
