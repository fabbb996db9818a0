"""The call path against SQLite and Postgres: reads run, writes wait for one card and then run
once, grants are bound to the exact call and used once, and whatever is refused is audited.

The platform is built as the processes build it (``Platform.build`` over an ``aegis.yaml``),
with a recording ``enqueue`` for the broker and a toolbox that only counts, so "nothing ran" is
something a test can see.
"""

from __future__ import annotations

import asyncio
import math
from datetime import timedelta

import pytest

from bot.actions.audit import AuditEvent
from bot.actions.call import CallStatus, Continuation, ToolCall
from bot.chat.codes import CodeVerifier
from bot.config.settings import Settings
from bot.core import Platform
from bot.interactions.interaction import InteractionStatus
from bot.store.database import Store
from bot.store.tables import grants
from tests.helpers.interactions import (
    ALICE,
    BUILT_TOOLS,
    CHAT,
    SECRET,
    SIGNER,
    Clock,
    RecordingEnqueue,
    Toolbox,
    audit_rows,
    build_platform,
    grant_rows,
    interaction_count,
    move_into_past,
)

HELLO = {"text": "hello"}


@pytest.fixture
def enqueue() -> RecordingEnqueue:
    return RecordingEnqueue()


@pytest.fixture
def toolbox() -> Toolbox:
    return Toolbox(BUILT_TOOLS, failing=("notes.explode",))


@pytest.fixture
def platform(tmp_path, store, enqueue, toolbox) -> Platform:
    return build_platform(tmp_path, store, enqueue, toolbox)


async def perform(platform: Platform, args=HELLO, *, agent="scribe", tool="notes.write", **kw):
    return await platform.actions.perform(ToolCall(agent, tool, args, CHAT), **kw)


async def approve(platform: Platform, interaction_id: int, choice: str = "approve"):
    return await platform.interactions.tap(interaction_id, choice, ALICE, "Alice", codes_ready=True)


async def events(store, *wanted: AuditEvent) -> list[str]:
    return [row.event for row in await audit_rows(store) if not wanted or row.event in wanted]


async def test_a_read_runs_at_once(platform, store, toolbox):
    outcome = await perform(platform, {"q": "x"}, tool="notes.read")

    assert outcome.status is CallStatus.RAN and outcome.result == "notes.read did it"
    assert outcome.interaction_id is None
    assert toolbox.calls == [("notes.read", {"q": "x"})]
    [allowed] = await audit_rows(store)
    assert (allowed.event, allowed.agent, allowed.tool) == ("allowed", "scribe", "notes.read")
    assert await interaction_count(store) == 0


async def test_the_demo_agents_read_runs_with_the_built_in_toolbox(tmp_path, store, enqueue):
    settings = Settings(data_dir=tmp_path, config_file=tmp_path / "aegis.yaml", _env_file=None)
    platform = Platform.build(settings, store, SIGNER, enqueue)
    outcome = await platform.actions.perform(ToolCall("demo", "demo.read_clock", {}, CHAT))
    assert outcome.ran and outcome.result.startswith("the server clock says")


async def test_a_card_approved_just_after_the_quick_look_is_used_not_asked_again(
    platform, store, toolbox, monkeypatch
):
    card_id = (await perform(platform)).interaction_id
    await approve(platform, card_id)

    # The quick look for a grant ran before the tap committed (it says none); the write that
    # follows finds the card settled, and must use its grant rather than make a new card.
    async def looked_too_early(args_hash):
        return False

    monkeypatch.setattr(platform.approvals, "has_live_grant", looked_too_early)
    ran = await perform(platform)
    assert ran.status is CallStatus.RAN and ran.interaction_id == card_id
    assert await interaction_count(store) == 1 and toolbox.calls == [("notes.write", HELLO)]


async def test_a_write_waits_on_one_card_then_runs_once_when_approved(platform, store, toolbox):
    outcomes = [await perform(platform) for _ in range(5)]

    assert {o.status for o in outcomes} == {CallStatus.GATED}
    [card_id] = {o.interaction_id for o in outcomes}
    assert f"card #{card_id}" in outcomes[0].reason and "identical call" in outcomes[0].reason
    assert await interaction_count(store) == 1 and toolbox.calls == []
    assert await events(store) == ["gated"] + ["waiting"] * 4
    asked = await platform.interactions.get(card_id)  # says the tool's name once, then why
    assert asked.prompt == "scribe wants to run 'notes.write': it changes something."

    await approve(platform, card_id)
    ran = await perform(platform)

    assert ran.status is CallStatus.RAN and ran.interaction_id == card_id
    assert toolbox.calls == [("notes.write", HELLO)]
    [grant] = await grant_rows(store)
    assert grant.used_at is not None
    assert grant.expires_at - grant.granted_at == timedelta(minutes=15)
    again = await perform(platform)
    assert again.status is CallStatus.GATED and again.interaction_id not in (None, card_id)
    assert toolbox.calls == [("notes.write", HELLO)]
    assert await events(store, AuditEvent.USED, AuditEvent.GATED) == ["gated", "used", "gated"]


async def test_concurrent_identical_gated_calls_share_one_card(
    platform, store, database_url, enqueue, toolbox, tmp_path
):
    stores = [Store(database_url) for _ in range(5)]
    try:
        platforms = [build_platform(tmp_path, s, enqueue, toolbox) for s in stores]
        outcomes = await asyncio.gather(*(perform(p) for p in platforms for _ in range(2)))
    finally:
        for extra in stores:
            await extra.close()

    assert {o.status for o in outcomes} == {CallStatus.GATED}
    assert len({o.interaction_id for o in outcomes}) == 1
    assert await interaction_count(store) == 1


@pytest.mark.parametrize(
    ("agent", "args"),
    [("scribe", {"text": "hellp"}), ("scribe", {"text": "hello "}), ("copyist", HELLO)],
    ids=["one-character", "trailing-space", "another-agent"],
)
async def test_a_grant_is_for_the_exact_call_only(platform, store, toolbox, agent, args):
    card_id = (await perform(platform)).interaction_id
    await approve(platform, card_id)

    other = await perform(platform, args, agent=agent)

    assert other.status is CallStatus.GATED and other.interaction_id != card_id
    assert toolbox.calls == []
    [grant] = await grant_rows(store)
    assert grant.used_at is None
    assert (await perform(platform)).ran  # the grant still waits for the call it was for


@pytest.mark.parametrize("separate_stores", [False, True], ids=["one-store", "ten-stores"])
async def test_of_ten_concurrent_identical_calls_one_uses_the_grant(
    platform, store, database_url, enqueue, toolbox, tmp_path, separate_stores
):
    card_id = (await perform(platform)).interaction_id
    await approve(platform, card_id)
    stores = [Store(database_url) for _ in range(10)] if separate_stores else [store] * 10
    try:
        platforms = [build_platform(tmp_path, s, enqueue, toolbox) for s in stores]
        outcomes = await asyncio.gather(*(perform(p) for p in platforms))
    finally:
        if separate_stores:
            for extra in stores:
                await extra.close()

    [ran] = [o for o in outcomes if o.ran]
    assert ran.interaction_id == card_id
    assert [o.status for o in outcomes].count(CallStatus.GATED) == 9
    assert toolbox.calls == [("notes.write", HELLO)]
    assert len(await audit_rows(store, AuditEvent.USED)) == 1


async def test_an_expired_grant_is_not_used(platform, store, toolbox):
    card_id = (await perform(platform)).interaction_id
    await approve(platform, card_id)
    [grant] = await grant_rows(store)
    await move_into_past(store, grants, grant.id)

    outcome = await perform(platform)

    assert outcome.status is CallStatus.GATED and outcome.interaction_id != card_id
    assert toolbox.calls == []
    [grant] = await grant_rows(store)
    assert grant.used_at is None


async def test_a_denied_card_grants_nothing(platform, store, toolbox):
    card_id = (await perform(platform)).interaction_id
    await approve(platform, card_id, "deny")

    outcome = await perform(platform)

    assert outcome.status is CallStatus.GATED and outcome.interaction_id != card_id
    assert await grant_rows(store) == [] and toolbox.calls == []
    assert await events(store, AuditEvent.DECLINED) == ["declined"]


async def test_a_card_that_expired_grants_nothing(platform, store, toolbox):
    from bot.store.tables import interactions

    card_id = (await perform(platform)).interaction_id
    await move_into_past(store, interactions, card_id)
    await approve(platform, card_id)

    outcome = await perform(platform)

    assert outcome.status is CallStatus.GATED and outcome.interaction_id != card_id
    assert (await platform.interactions.get(card_id)).status is InteractionStatus.EXPIRED
    assert await grant_rows(store) == [] and toolbox.calls == []


async def test_an_undeclared_tool_is_gated_with_step_up(platform, store, toolbox):
    outcome = await perform(platform, {}, tool="nobody.declared")

    assert outcome.status is CallStatus.GATED and "TOTP code" in outcome.reason
    card = await platform.interactions.get(outcome.interaction_id)
    assert card.step_up and card.tool == "nobody.declared"
    assert await events(store) == ["gated"]


async def test_an_irreversible_call_runs_after_a_tap_and_a_code(
    platform, store, toolbox, monkeypatch
):
    from bot.chat import codes

    clock = Clock()
    monkeypatch.setattr(codes, "now", clock)
    args = {"ref": "v1.2"}
    card_id = (await perform(platform, args, tool="site.deploy")).interaction_id
    await approve(platform, card_id)
    assert not (await perform(platform, args, tool="site.deploy")).ran

    verifier = CodeVerifier(store, SECRET)
    await platform.interactions.submit_code(ALICE, "Alice", clock.code(), verifier)
    outcome = await perform(platform, args, tool="site.deploy")

    assert outcome.ran and toolbox.calls == [("site.deploy", args)]


@pytest.mark.parametrize(
    ("agent", "tool", "args", "reason"),
    [
        ("reader", "notes.write", HELLO, "reader is not granted notes.write"),
        ("stranger", "notes.read", {}, "no agent named 'stranger'"),
        ("scribe", "notes.write", {"text": 5}, "do not match notes.write's schema"),
        ("scribe", "notes.write", {"text": "x", "more": 1}, "do not match"),
    ],
)
async def test_a_refused_call_is_denied_and_audited(
    platform, store, toolbox, agent, tool, args, reason
):
    outcome = await perform(platform, args, agent=agent, tool=tool)

    assert outcome.status is CallStatus.DENIED and reason in outcome.reason
    [denied] = await audit_rows(store)
    assert (denied.event, denied.agent, denied.tool) == ("denied", agent, tool)
    assert denied.args_hash is not None
    assert toolbox.calls == [] and await interaction_count(store) == 0


@pytest.mark.parametrize(
    "args",
    [{"text": math.nan}, {"text": "x", "n": math.inf}, {"text": object()}, {1: "a", "1": "b"}],
    ids=["nan", "infinity", "object", "clashing-keys"],
)
async def test_arguments_that_are_not_plain_json_are_denied(platform, store, toolbox, args):
    outcome = await perform(platform, args)

    assert outcome.status is CallStatus.DENIED and "not plain JSON" in outcome.reason
    [denied] = await audit_rows(store)
    assert (denied.event, denied.args_hash) == ("denied", None)
    assert toolbox.calls == [] and await interaction_count(store) == 0


async def test_a_tool_that_raises_fails_and_is_audited(platform, store, toolbox):
    outcome = await perform(platform, {}, tool="notes.explode")

    assert (
        outcome.status is CallStatus.FAILED
        and "RuntimeError: notes.explode broke" in outcome.reason
    )
    assert await events(store) == ["allowed", "failed"]
    [failed] = await audit_rows(store, AuditEvent.FAILED)
    assert "notes.explode broke" in failed.detail


async def test_an_approved_tool_that_raises_uses_up_its_grant(platform, store, toolbox):
    toolbox["notes.write"] = Toolbox(("notes.write",), failing=("notes.write",))["notes.write"]
    card_id = (await perform(platform)).interaction_id
    await approve(platform, card_id)

    outcome = await perform(platform)

    assert outcome.status is CallStatus.FAILED and outcome.interaction_id == card_id
    assert await events(store, AuditEvent.USED, AuditEvent.FAILED) == ["used", "failed"]
    assert (await perform(platform)).status is CallStatus.GATED


async def test_a_declared_tool_nothing_implements_fails(platform, store):
    card_id = (await perform(platform, {}, tool="notes.unbuilt")).interaction_id
    await approve(platform, card_id)

    outcome = await perform(platform, {}, tool="notes.unbuilt")

    assert outcome.status is CallStatus.FAILED and "nothing in this process" in outcome.reason
    assert (await audit_rows(store, AuditEvent.FAILED))[0].interaction_id == card_id


async def test_a_gated_call_is_continued_when_its_card_is_settled(platform, enqueue):
    resume = Continuation("agent.resume", {"run": 3})
    card_id = (await perform(platform, continuation=resume)).interaction_id
    assert enqueue.continuations() == []

    await approve(platform, card_id)

    assert enqueue.continuations() == [("agent.resume", {"run": 3, "interaction_id": card_id})]


async def test_a_policy_tightened_since_the_approval_needs_a_new_one_with_a_code(
    platform, store, toolbox
):
    from policies.tools import Effect, ToolSpec

    gated = await perform(platform)
    await approve(platform, gated.interaction_id)
    spec = platform.catalog.tools["notes.write"]
    platform.catalog.tools["notes.write"] = ToolSpec(spec.name, Effect.IRREVERSIBLE, spec.schema)

    again = await perform(platform)

    assert again.status is CallStatus.GATED and again.interaction_id != gated.interaction_id
    assert toolbox.calls == []
    card = await platform.interactions.get(again.interaction_id)
    assert card.step_up
